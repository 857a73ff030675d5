"""Every table a statement names reads the version it names: one binder for all of them.

A query's table references, a DML statement's WHERE / SET / ON subqueries, a MERGE source
(a query or a bare table name), an INSERT's source, CTE bodies, and the bodies of the views
``expand_views`` inlined: each ``exp.Table`` that names an isolde table becomes a temp view
over ``scan()`` of exactly one snapshot, chosen here and nowhere else (``snapshot_for``):

* ``VERSION AS OF n`` / ``TIMESTAMP AS OF expr`` (names and ``delta.`/p` `` alike), or Delta's
  ``delta.`/p@v3` `` / ``delta.`/p@yyyyMMddHHmmssSSS` `` on a path that is not itself a table:
  that version, whatever else the statement reads -- also when it is the statement's own target;
* otherwise, a table in ``pinned`` (a write's target, pinned to the snapshot its transaction
  reads): that snapshot, so the target is read at one version throughout the statement;
* otherwise the latest snapshot.

CTE names, table-valued functions (``table_changes``, bound first), file-format paths
(``parquet.`/p` ``) and names inside hints are not tables. A name no isolde table answers to
may be the user's own Spark temp view (a registered DataFrame): Spark reads it; anything else
is ``TableNotFoundError`` with the names it may have meant.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import sqlglot.expressions as exp

from isolde.errors import AnalysisError
from isolde.grammar import ast
from isolde.grammar.dialect import sql as render_sql
from isolde.planner.resolve import table_references


@dataclass
class TableRead:
    """One table reference as bound: the snapshot read and the files kept after pruning."""

    name: str
    path: str
    version: int
    files_total: int
    files_read: int
    predicate: Optional[str] = None
    snapshot: object = None
    files: list = field(default_factory=list)
    time_travel: bool = False  # VERSION / TIMESTAMP AS OF: an immutable version, not the table's current state

    def as_dict(self) -> dict:
        return {"table": self.name, "path": self.path, "version": self.version, "files_total": self.files_total,
                "files_read": self.files_read, "pruning_predicate": self.predicate}


def location_key(path: str) -> str:
    """A table's identity for pinning: its location, not its spelling (``delta.`/p/` `` and the
    name of the table at ``/p`` are one table)."""
    if "://" in path and not path.startswith("file:"):
        return path.rstrip("/")
    if path.startswith("file:"):
        path = path[len("file:"):]
        while path.startswith("//"):
            path = path[1:]
    return os.path.realpath(path)


def pin(path: str, snapshot) -> dict:
    """The ``pinned`` argument for one table (a write's target) read at ``snapshot``."""
    return {location_key(path): snapshot}


def travels(ref: ast.TableRef) -> bool:
    """Does the reference name a version of its own (VERSION / TIMESTAMP AS OF)?"""
    return ref.version is not None or ref.timestamp is not None


def handle_travels(handle) -> bool:
    """Does a resolved table name a version of its own (AS OF, or ``delta.`/p@v3` ``)?"""
    return handle.version is not None or handle.timestamp is not None


def snapshot_for(ctx, handle, pinned: Optional[Mapping] = None):
    """The snapshot a resolved reference reads (the module docstring's rule)."""
    if handle_travels(handle):
        return ctx.snapshot(handle)
    if pinned:
        snap = pinned.get(location_key(handle.path))
        if snap is not None:
            return snap
    return ctx.snapshot(handle)


def spark_temp_view(spark, ref: ast.TableRef) -> bool:
    """Is ``ref`` a temp view the user registered in Spark (not an isolde table)?"""
    if ref.path is not None or len(ref.parts) != 1 or travels(ref):
        return False
    try:
        return any(t.isTemporary and t.name.lower() == ref.parts[0].lower() for t in spark.catalog.listTables())
    except Exception:
        return False


def bind_tables(ctx, tree: exp.Expression, add_view: Callable, *, pinned: Optional[Mapping] = None,
                prune: bool = True) -> tuple[exp.Expression, list[TableRead]]:
    """A copy of ``tree`` whose table references read their snapshots, each through a temp view
    ``add_view(df)`` names (the caller drops them when the SQL has been analysed or run), and
    what each reference read. ``prune``: skip files the WHERE conjuncts over one table rule out."""
    from ..session import table_functions
    from ..rows.scan import prune_files, scan

    tree = table_functions.bind(ctx, tree.copy(), add_view)
    qualified: list = []  # (db/catalog-qualified parts, table name) of unaliased references
    reads: list[TableRead] = []
    for use in table_references(tree):
        try:
            handle = ctx.resolve(use.ref)
        except AnalysisError:
            if spark_temp_view(ctx.spark, use.ref):
                continue  # the user's own temp view (a registered DataFrame): Spark reads it
            raise
        snapshot = snapshot_for(ctx, handle, pinned)
        all_files = list(snapshot.all_files)
        files = all_files
        pred_sql = None
        if prune and use.predicates:
            tree_pred = exp.and_(*use.predicates)  # copies each conjunct once
            pred_sql = render_sql(tree_pred)
            files = prune_files(snapshot, tree_pred, all_files, alias=use.alias, table_name=use.node.name)
        view = add_view(scan(ctx, snapshot, handle.path, files))
        reads.append(TableRead(handle.name, handle.path, snapshot.version, len(all_files), len(files), pred_sql,
                               snapshot, files, handle_travels(handle)))
        replacement = use.node.copy()  # keeps PIVOT / TABLESAMPLE / hints / column aliases
        replacement.set("this", exp.to_identifier(view))
        for key in ("db", "catalog", "version", "when", "changes"):
            if key in replacement.args:
                replacement.set(key, None)
        old_alias = use.node.args.get("alias")
        if not use.alias and not use.ref.path:
            alias = exp.TableAlias(this=exp.to_identifier(use.node.name, quoted=True))
            if isinstance(old_alias, exp.TableAlias) and old_alias.args.get("columns"):
                alias.set("columns", [c.copy() for c in old_alias.args["columns"]])
            replacement.set("alias", alias)
        elif isinstance(old_alias, exp.TableAlias) and old_alias.this is not None:
            old_alias = old_alias.copy()
            old_alias.set("this", exp.to_identifier(old_alias.name, quoted=True))
            replacement.set("alias", old_alias)
        if not use.alias and use.ref.parts and len(use.ref.parts) > 1:
            qualified.append((tuple(p.lower() for p in use.ref.parts), use.node.name))
        use.node.replace(replacement)
    _strip_qualifiers(tree, qualified)
    return tree, reads


def _strip_qualifiers(tree, qualified) -> None:
    """``db.t.col`` -> ``t.col`` for the references rebound to views aliased ``t``."""
    if not qualified:
        return
    for col in tree.find_all(exp.Column):
        db = col.args.get("db")
        if db is None or not col.table:
            continue
        parts = tuple(p.lower() for p in (col.args.get("catalog") and col.args["catalog"].name, db.name,
                                          col.table) if p)
        for full, _name in qualified:
            if parts == full or parts == full[-len(parts):]:
                col.set("db", None)
                col.set("catalog", None)
                break


def table_source(ctx, ref: ast.TableRef, pinned: Optional[Mapping] = None):
    """The DataFrame a bare table name reads where a relation is expected (``MERGE ... USING
    t [VERSION AS OF n]``): its snapshot by the same rule, or the user's Spark temp view."""
    from isolde.errors import TableNotFoundError
    from ..rows.scan import scan

    try:
        handle = ctx.resolve(ref)
    except TableNotFoundError:
        if ref.path is None and not travels(ref):
            try:
                return ctx.spark.table(".".join(ref.parts))
            except Exception:
                pass
        raise
    return scan(ctx, snapshot_for(ctx, handle, pinned), handle.path)


def describe_references(ctx, trees, refs, pinned: Optional[Mapping] = None) -> list[str]:
    """One line per table a statement's parts name (``trees``: sqlglot trees of its slots,
    ``refs``: bare TableRefs such as a MERGE source), saying which version the binder reads:
    for EXPLAIN, without Spark."""
    uses = list(refs)
    for tree in trees:
        if tree is not None:
            uses += [use.ref for use in table_references(tree)]
    lines = []
    for ref in uses:
        spelled = ".".join(ref.parts) if ref.parts else f"delta.`{ref.path}`"
        try:
            handle = ctx.resolve(ref)
        except AnalysisError:
            lines.append(f"  {spelled}: not an isolde table (a Spark view or DataFrame; Spark reads it)")
            continue
        try:
            snap = snapshot_for(ctx, handle, pinned)
        except AnalysisError as e:
            lines.append(f"  {spelled}: {e.message}")
            continue
        if handle_travels(handle):
            why = "time travel: an immutable version"
        elif pinned and location_key(handle.path) in pinned:
            why = "the target, at the transaction's snapshot"
        else:
            why = "latest"
        lines.append(f"  {handle.name} @ version {snap.version} ({why})")
    return lines

