"""A WITH clause before INSERT / UPDATE / DELETE / MERGE (``WITH w AS (...) INSERT INTO t
SELECT * FROM w``), as Spark accepts it.

The named queries are scoped to the one statement, so they are inlined at parse time: every
reference to a CTE's name in the statement's slots (the INSERT source, WHERE / SET / ON /
clause conditions and values, subqueries at any depth, a MERGE source named bare) becomes the
CTE's query as a subquery under that name; a later CTE may use an earlier one. The write's
target is never a CTE (``WITH t AS (...) DELETE FROM t`` deletes from table ``t``), and a CTE
the slot defines itself shadows one of the same name, as in SQL.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlglot.expressions as exp

from . import ast as a
from .dialect import sql as render_sql
from .lexer import Tok
from .slots import construct, query as parse_query


@dataclasses.dataclass(frozen=True)
class Cte:
    name: str
    columns: tuple  # column aliases, or ()
    query: a.Query


def _shadowed(node: exp.Expression, name: str) -> bool:
    """Does a WITH of the slot itself, around ``node``, define ``name``?"""
    parent = node.parent
    while parent is not None:
        with_ = parent.args.get("with") or parent.args.get("with_")
        if isinstance(with_, exp.With) and any(c.alias_or_name.lower() == name for c in with_.expressions):
            return True
        parent = parent.parent
    return False


def named_subquery(node: exp.Table, name: str, columns, body: exp.Expression) -> exp.Subquery:
    """``body`` as a subquery in place of the table reference ``node`` to a named query (a CTE,
    a view): under the reference's alias, else the name, with the query's column names, and the
    reference's PIVOT kept."""
    alias = node.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.this is not None:
        alias = alias.copy()
    else:
        alias = exp.TableAlias(this=exp.to_identifier(name, quoted=True))
    if columns and not alias.args.get("columns"):
        alias.set("columns", [exp.to_identifier(c, quoted=True) for c in columns])
    sub = exp.Subquery(this=body, alias=alias)
    if node.args.get("pivots"):
        sub.set("pivots", node.args["pivots"])
    return sub


def _inline_tree(tree: exp.Expression, ctes: dict) -> bool:
    """Replace, in place, the references to ``ctes`` (lower-case name -> Cte); True if any."""
    changed = False
    for node in list(tree.find_all(exp.Table)):
        if not isinstance(node.this, exp.Identifier) or node.args.get("db") is not None:
            continue
        cte = ctes.get(node.name.lower())
        if cte is None or isinstance(node.parent, exp.Column) or _shadowed(node, node.name.lower()):
            continue
        node.replace(named_subquery(node, cte.name, cte.columns, cte.query.tree.copy()))
        changed = True
    return changed


def _query(q: a.Query, ctes: dict) -> a.Query:
    tree = q.tree.copy()
    if not _inline_tree(tree, ctes):
        return q
    text = render_sql(tree)
    fresh = parse_query(text, Tok("QUERY", text, 0, len(text)))
    return construct(a.Query, {"sql": text, "tree": fresh.tree, "tables": fresh.tables, "span": q.span})


def _expr(e: a.Expr, ctes: dict) -> a.Expr:
    if not e.tree.find(exp.Table):
        return e
    tree = e.tree.copy()
    if not _inline_tree(tree, ctes):
        return e
    return construct(a.Expr, {"sql": render_sql(tree), "tree": tree, "span": e.span})


def _rewrite(node: Any, ctes: dict) -> Any:
    if isinstance(node, a.Query):
        return _query(node, ctes)
    if isinstance(node, a.Expr):
        return _expr(node, ctes)
    if isinstance(node, tuple):
        return tuple(_rewrite(v, ctes) for v in node)
    if not isinstance(node, a.Node) or isinstance(node, a.TableRef):
        return node  # a table reference outside a slot: the write's target (never a CTE)
    changes = {}
    for f in dataclasses.fields(node):
        if f.name in ("span", "text"):
            continue
        value = getattr(node, f.name)
        new = _rewrite(value, ctes)
        if new is not value:
            changes[f.name] = new
    return dataclasses.replace(node, **changes) if changes else node


def _merge_source(stmt: a.Merge, ctes: dict) -> a.Merge:
    """``MERGE ... USING w``: the CTE as a source query, under its name."""
    src = stmt.source
    if not isinstance(src, a.TableRef) or src.path is not None or len(src.parts) != 1 \
            or src.version is not None or src.timestamp is not None:
        return stmt
    cte = ctes.get(src.parts[0].lower())
    if cte is None:
        return stmt
    text = f"SELECT * FROM {render_sql(exp.to_identifier(cte.name, quoted=True))}"
    q = parse_query(text, Tok("QUERY", text, 0, len(text)))
    q = construct(a.Query, {"sql": text, "tree": q.tree, "tables": q.tables, "span": src.span})
    return dataclasses.replace(stmt, source=_query(q, ctes), source_alias=stmt.source_alias or cte.name)


def inline(ctes: list, stmt: a.Statement) -> a.Statement:
    """``stmt`` with ``ctes`` (in order; each may use the ones before it) inlined."""
    known: dict = {}
    for cte in ctes:
        known[cte.name.lower()] = dataclasses.replace(cte, query=_query(cte.query, known))
    if isinstance(stmt, a.Merge):
        stmt = _merge_source(stmt, known)
    return _rewrite(stmt, known)
