"""Table and column resolution over sqlglot trees (no Spark).

    table_references(tree) -> list[TableUse]
        every table a query reads (CTE names, table functions and file-format paths such as
        parquet.`/p` excluded), each with its TableRef (time travel included), alias and the
        WHERE conjuncts that may prune its files (data skipping).
    resolve_column(name, columns, table=None) -> str   (ColumnNotFoundError with did-you-mean)
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import sqlglot.expressions as exp

from isolde.errors import ColumnNotFoundError
from isolde.grammar import ast

from .predicates import conjuncts

FILE_FORMATS = {"parquet", "csv", "json", "orc", "text", "avro", "binaryfile"}

_NON_DETERMINISTIC = tuple(getattr(exp, n) for n in ("Rand", "Randn", "Uuid", "CurrentTimestamp", "CurrentDate")
                           if hasattr(exp, n))


@dataclass
class TableUse:
    node: exp.Table
    ref: ast.TableRef
    alias: Optional[str]
    predicates: list = field(default_factory=list)  # sqlglot conjuncts usable for pruning


def _arg(node: exp.Expression, *names):
    for n in names:
        v = node.args.get(n)
        if v is not None:
            return v
    return None


def _ident(node) -> Optional[str]:
    if node is None:
        return None
    if isinstance(node, exp.Identifier):
        return node.this
    if isinstance(node, str):
        return node
    return getattr(node, "name", None) or None


def table_ref_of(node: exp.Table) -> Optional[ast.TableRef]:
    """The TableRef a sqlglot Table node names, or None for table functions / file paths."""
    if not isinstance(node.this, exp.Identifier):
        return None
    name = node.this.this
    db = _ident(node.args.get("db"))
    catalog = _ident(node.args.get("catalog"))
    version = timestamp = None
    v = node.args.get("version")
    if isinstance(v, exp.Version):
        kind = str(v.this).upper()
        expr = v.args.get("expression")
        if kind == "VERSION":
            try:
                version = int(expr.name)
            except (TypeError, ValueError):
                version = None
        else:
            timestamp = ast.Expr(expr.sql(dialect="spark"), expr)
    if db is not None and catalog is None and db.lower() == "delta" and is_delta_path(name):
        return ast.TableRef(path=name, version=version, timestamp=timestamp)
    if db is not None and catalog is None and db.lower() in FILE_FORMATS:
        return None
    parts = tuple(p for p in (catalog, db, name) if p)
    return ast.TableRef(parts=parts, version=version, timestamp=timestamp)


def is_delta_path(name: str) -> bool:
    """Delta's rule for ``delta.`x```: a path table only when ``x`` is an absolute path (or a URI);
    otherwise it names table ``x`` of a database called ``delta``."""
    return name.startswith(("/", "~")) or bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", name))


def in_hint(node: exp.Expression) -> bool:
    """A name inside a hint (``/*+ BROADCAST(x) */``) names a relation by its alias; it is no read."""
    return node.find_ancestor(exp.Hint) is not None


def _cte_names(tree: exp.Expression) -> set[str]:
    return {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}


def _usable(conj: exp.Expression) -> bool:
    if conj.find(exp.Subquery, exp.Select, exp.Exists):
        return False
    if _NON_DETERMINISTIC and conj.find(*_NON_DETERMINISTIC):
        return False
    return True


def _select_tables(select: exp.Select) -> tuple[list[exp.Table], bool, Optional[exp.Table]]:
    """(direct table nodes of FROM/JOIN, all joins inner, the FROM table)."""
    tables = []
    from_ = _arg(select, "from_", "from")
    first = None
    if from_ is not None and isinstance(from_.this, exp.Table):
        first = from_.this
        tables.append(first)
    inner = True
    left_only = True
    for j in select.args.get("joins") or []:
        side = (j.args.get("side") or "").upper()
        kind = (j.args.get("kind") or "").upper()
        if side or kind in ("OUTER", "FULL"):
            inner = False
            if side != "LEFT" or kind in ("FULL",):
                left_only = False
        if isinstance(j.this, exp.Table):
            tables.append(j.this)
    return tables, inner, (first if left_only else None)


def table_references(tree: exp.Expression) -> list[TableUse]:
    ctes = _cte_names(tree)
    uses: list[TableUse] = []
    by_node: dict[int, TableUse] = {}
    for node in tree.find_all(exp.Table):
        if in_hint(node):
            continue
        ref = table_ref_of(node)
        if ref is None:
            continue
        if ref.path is None and len(ref.parts) == 1 and ref.parts[0].lower() in ctes:
            continue
        alias = node.alias or None
        use = TableUse(node, ref, alias)
        uses.append(use)
        by_node[id(node)] = use
    # WHERE conjuncts that only touch one table of a SELECT, where pruning it is sound
    for select in tree.find_all(exp.Select):
        where = select.args.get("where")
        if where is None:
            continue
        tables, inner, preserved = _select_tables(select)
        tables = [t for t in tables if id(t) in by_node]
        if not tables:
            continue
        candidates = tables if inner else ([preserved] if preserved is not None and id(preserved) in by_node else [])
        n_sources = len((select.args.get("joins") or [])) + 1
        for table in candidates:
            use = by_node[id(table)]
            names = {n.lower() for n in (use.alias, table.name) if n}
            for conj in conjuncts(where.this):
                if not _usable(conj):
                    continue
                cols = list(conj.find_all(exp.Column))
                if not cols:
                    continue
                ok = True
                for c in cols:
                    q = c.table
                    if q:
                        if q.lower() not in names:
                            ok = False
                            break
                    elif n_sources != 1:
                        ok = False
                        break
                if ok:
                    use.predicates.append(conj)
    return uses


def resolve_column(name: str, columns: Sequence[str], table: Optional[str] = None) -> str:
    """The declared spelling of ``name`` among ``columns`` (case-insensitive)."""
    for c in columns:
        if c.lower() == name.lower():
            return c
    raise ColumnNotFoundError(name, table, columns)


def resolve_columns(names: Iterable[str], columns: Sequence[str], table: Optional[str] = None) -> list[str]:
    return [resolve_column(n, columns, table) for n in names]
