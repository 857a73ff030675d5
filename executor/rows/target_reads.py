"""Does a write read its own target table under another name?

A table's identity is its location, not its spelling. A DELETE whose subquery reads the
target as ``delta.`/path```, a MERGE whose source is a Spark view over ``SELECT * FROM t``,
an INSERT that selects from the target's path: each reads the target, and a concurrent
write to the rows it read must conflict (else two statements commit a result no serial
order gives). The planner can only compare names; here every table reference of the
statement's other parts is resolved to a location, and Spark views are looked through
to the files their plans read.

What counts as reading the target (a reference with VERSION / TIMESTAMP AS OF never does: it
reads an immutable version, which no concurrent commit changes):
* an isolde table reference (name, ``db.name``, ``delta.`path```) resolving to the
  target's folder;
* a Spark temp view / DataFrame whose analysed plan reads a file under the target's folder;
* a Spark plan leaf whose origin isolde cannot see (a V2 data source, a streaming
  relation, anything not listed below) -- "when a read cannot be analysed, assume it
  reads everything".
Not reads of the target: local relations, ``range``, RDD-backed DataFrames (rows built in
Python, or checkpoints: data already materialised, as Delta also treats them), and file
relations over other folders.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Iterable, Optional

import sqlglot.expressions as exp

from isolde.grammar import ast
from isolde.planner.resolve import FILE_FORMATS, in_hint, is_delta_path
from ..catalog.table_binding import handle_travels, travels

#: plan leaves that read no table files
_NO_FILES = frozenset({"LocalRelation", "Range", "OneRowRelation", "LogicalRDD", "ExternalRDD",
                       "LocalTableScan", "EmptyRelation"})


def _local(uri: str) -> str:
    path = urllib.parse.unquote(urllib.parse.urlparse(uri).path) if "://" in uri or uri.startswith("file:") else uri
    return os.path.realpath(path)  # a symlink to the table is the table


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def dataframe_reads(df, folder: str) -> Optional[str]:
    """Why the Spark DataFrame ``df`` reads the table in ``folder``, or None when it does not."""
    folder = os.path.realpath(folder)
    try:
        leaves = _leaves_with_subqueries(df._jdf.queryExecution().analyzed())
    except Exception:
        return "its plan cannot be analysed"
    for leaf in leaves:
        kind = leaf.getClass().getSimpleName()
        if kind in _NO_FILES:
            continue
        if kind == "LogicalRelation":
            try:
                relation = leaf.relation()
                paths = relation.location().rootPaths()
                roots = [str(paths.apply(j)) for j in range(paths.size())]
                files = list(relation.inputFiles())
            except Exception:
                return "it reads a relation whose files cannot be listed"
            if any(_under(_local(f), folder) for f in [*roots, *files]):
                return "it reads the target's files"
            continue
        return f"it reads a {kind} whose origin cannot be analysed"
    return None


def _leaves_with_subqueries(plan) -> list:
    """The leaves of an analysed plan and of every subquery in its expressions (an IN / EXISTS /
    scalar subquery reads tables too), nested ones included."""
    out, stack, seen = [], [plan], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > 10_000:
            raise RuntimeError("plan too large to analyse")
        leaves = node.collectLeaves()
        out += [leaves.apply(i) for i in range(leaves.size())]
        subs = node.subqueriesAll()
        stack += [subs.apply(i) for i in range(subs.size())]
    return out


def _tables(tree: Optional[exp.Expression]) -> Iterable[exp.Table]:
    if tree is None:
        return ()
    return (t for t in tree.find_all(exp.Table) if t.name and not isinstance(t.parent, exp.Column) and not in_hint(t))


def statement_parts(stmt) -> tuple[list, list]:
    """(expression trees, table refs) of a write's parts other than its target."""
    trees: list = []
    refs: list = []
    if isinstance(stmt, (ast.Update, ast.Delete)):
        trees.append(stmt.where.tree if stmt.where is not None else None)
        trees += [a.value.tree for a in getattr(stmt, "assignments", ())]
    elif isinstance(stmt, ast.Merge):
        trees.append(stmt.on.tree)
        if isinstance(stmt.source, ast.TableRef):
            refs.append(stmt.source)
        else:
            trees.append(stmt.source.tree)
        for c in stmt.clauses:
            trees.append(c.condition.tree if c.condition is not None else None)
            trees += [a.value.tree for a in getattr(c.action, "assignments", ())]
            trees += [v.tree for v in getattr(c.action, "values", ())]
    elif isinstance(stmt, ast.Insert) and stmt.source is not None:
        trees.append(stmt.source.tree)
    return trees, refs


def statement_reads_target(ctx, target_path: str, stmt, resolved: Optional[dict] = None) -> Optional[str]:
    """Why a write's parts other than its target (WHERE / SET / ON / source) read the table at
    ``target_path`` under some name, or None. CTE names are not tables. For an INSERT, a
    reference by the target's own name is left to the planner (it scopes a simple
    ``SELECT ... FROM t WHERE ...``); any other spelling of the target is reported.
    ``resolved``: DataFrames the statement has looked up already (``spark.table(name)`` by
    name), not looked up again (each lookup is an analysis)."""
    trees, refs = statement_parts(stmt)
    own = None
    if isinstance(stmt, ast.Insert) and stmt.table.path is None and stmt.table.parts:
        own = stmt.table.parts[-1].lower()
    from . import dml

    folder = os.path.realpath(target_path)
    database = dml.current_database(ctx)
    candidates: list[tuple[ast.TableRef, str]] = [(r, ".".join(r.parts) if r.parts else f"delta.`{r.path}`")
                                                   for r in refs if not travels(r)]
    for tree in trees:
        ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)} if tree is not None else set()
        for node in _tables(tree):
            parts = tuple(p for p in (node.catalog, node.db, node.name) if p)
            if len(parts) == 1 and parts[0].lower() in ctes:
                continue
            if node.args.get("version") is not None:
                continue  # VERSION / TIMESTAMP AS OF: an immutable version, not the target's current rows
            if node.db and node.db.lower() == "delta" and not node.catalog and is_delta_path(node.name):
                candidates.append((ast.TableRef(path=node.name), f"delta.`{node.name}`"))
            elif node.db and node.db.lower() in FILE_FORMATS and not node.catalog:  # parquet.`/path`
                if _under(_local(node.name), folder):
                    return f"{node.db}.`{node.name}` reads the target's files"
            else:
                candidates.append((ast.TableRef(parts=parts), ".".join(parts)))
    seen = set()
    for ref, spelled in candidates:
        key = (ref.path, tuple(p.lower() for p in ref.parts or ()))
        if key in seen or (own is not None and ref.path is None and ref.parts and ref.parts[-1].lower() == own):
            continue
        seen.add(key)
        try:
            handle = ctx.catalog.resolve(ref, database)
        except Exception:
            handle = None
        if handle is not None:
            if handle_travels(handle):
                continue  # delta.`/p@v3`: an immutable version
            if os.path.realpath(handle.path) == folder:
                return f"{spelled} is the target table"
            continue
        if ref.path is not None:
            continue
        try:
            df = (resolved or {}).get(".".join(ref.parts))
            df = ctx.spark.table(".".join(ref.parts)) if df is None else df
        except Exception:
            continue  # not a table anywhere: the statement itself will fail on it
        why = dataframe_reads(df, folder)
        if why is not None:
            return f"the view {spelled}: {why}"
    return None
