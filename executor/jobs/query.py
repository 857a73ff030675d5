"""Queries: SELECT / WITH / VALUES with every table reference bound to one snapshot.

    bind_query(ctx, query, pinned=None) -> BoundQuery(df, tables, sql)
        each table reference of the sqlglot tree becomes a temp view over ``scan()`` of its
        snapshot (``VERSION/TIMESTAMP AS OF`` honoured; ``pinned`` maps a table path to the
        snapshot a write transaction reads), pruned by the WHERE conjuncts that only touch it;
        the tree is regenerated as Spark SQL and analysed by ``spark.sql``; the temp views are
        dropped again (the DataFrame already holds the concrete file lists).
    run_query(ctx, query) -> QueryResult with ``.metrics`` {"tables": [...], "files_total",
        "files_read"}.
    explain_statement(ctx, stmt) -> str
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Optional

import sqlglot.expressions as exp

from isolde.errors import AnalysisError
from . import driver_query, executes
from ..session.results import QueryResult
from ..catalog.table_binding import bind_tables
from ..rows.target_reads import statement_reads_target
from isolde.grammar import ast
from isolde.grammar.dialect import DIALECT, sql as render_sql


@dataclass
class BoundQuery:
    df: object
    tables: list
    sql: str

    @property
    def metrics(self) -> dict:
        return {"tables": [t.as_dict() for t in self.tables],
                "files_total": sum(t.files_total for t in self.tables),
                "files_read": sum(t.files_read for t in self.tables)}


def _tree_of(query) -> exp.Expression:
    if isinstance(query, ast.Query):
        return query.tree
    if isinstance(query, ast.Select):
        return query.query.tree
    if isinstance(query, exp.Expression):
        return query
    import sqlglot

    return sqlglot.parse_one(query, read=DIALECT)


def bind_query(ctx, query, pinned: Optional[dict] = None, prune: bool = True) -> BoundQuery:
    """The query as a DataFrame, every table reference bound to its snapshot
    (executor/catalog/table_binding.py; ``pinned``: a write's target at its transaction's snapshot)."""
    spark = ctx.spark
    tag = uuid.uuid4().hex[:10]
    views: list[str] = []

    def add_view(df) -> str:
        name = f"__isolde_{tag}_{len(views)}"
        df.createOrReplaceTempView(name)
        views.append(name)
        return name

    try:
        tree, reads = bind_tables(ctx, _tree_of(query), add_view, pinned=pinned, prune=prune)
        sql = render_sql(tree)
        df = spark.sql(sql)
    finally:
        for view in views:  # the DataFrame already holds the concrete file lists
            try:
                spark.catalog.dropTempView(view)
            except Exception:
                pass
    return BoundQuery(df, reads, sql)


class SparkQueryResult(QueryResult):
    """A QueryResult whose lazy collect translates Spark errors into isolde errors."""

    @property
    def rows(self) -> list[tuple]:
        if self._rows is None:
            from ..session.session import translate_errors

            self._rows = translate_errors(lambda: [tuple(r) for r in self.df.collect()])
        return self._rows


def run_query(ctx, query) -> QueryResult:
    bound = bind_query(ctx, query)
    result = SparkQueryResult(df=bound.df)
    result.metrics = bound.metrics
    result.bound = bound
    ctx.metrics.update(bound.metrics)
    return result


@executes(ast.Select)
def run_select(ctx, stmt: ast.Select) -> QueryResult:
    if not ctx.needs_spark:  # a plain look at a table while Spark starts (driver_query.py)
        result = driver_query.run(ctx, stmt)
        if result is not None:
            return result
    return run_query(ctx, stmt.query)


run_select.needs_spark = driver_query.needs_spark


def _describe_reads(bound: BoundQuery) -> list[str]:
    lines = []
    for t in bound.tables:
        pruning = f", pruned by: {t.predicate}" if t.predicate else ""
        lines.append(f"  {t.name} @ version {t.version}: {t.files_read} of {t.files_total} files{pruning}")
    return lines


def explain_statement(ctx, stmt, mode: Optional[str] = None) -> str:
    if isinstance(stmt, ast.Explain):
        return explain_statement(ctx, stmt.statement, stmt.mode)
    if isinstance(stmt, ast.Select):
        bound = bind_query(ctx, stmt.query)
        lines = ["== isolde plan ==", "Query", "Table reads (snapshot, data skipping):"]
        lines += _describe_reads(bound) or ["  (no tables)"]
        extended = (mode or "").upper() in ("EXTENDED", "FORMATTED", "COST", "CODEGEN")
        try:
            plan = bound.df._jdf.queryExecution().toString() if extended else \
                bound.df._jdf.queryExecution().simpleString()
        except Exception:
            plan = ""
        if plan:
            lines += ["", "== Spark plan ==", plan.strip()]
        return "\n".join(lines)
    lines = ["== isolde plan ==", f"{type(stmt).__name__}"]
    table = getattr(stmt, "table", None) or getattr(stmt, "target", None)
    if isinstance(table, ast.TableRef):
        try:
            handle = ctx.resolve(table)
            snap = ctx.snapshot(handle)
            lines.append(f"Target: {handle.name} @ version {snap.version} ({len(snap.all_files)} files, "
                         f"isolation level {snap.isolation_level})")
        except AnalysisError as e:
            lines.append(f"Target: {table.name} ({e.message})")
    scope = _conflict_scope(ctx, stmt)
    if scope:
        lines += ["Conflict scope:"] + [line if line.startswith("  ") else f"  {line}" for line in scope.splitlines()]
    if isinstance(stmt, (ast.Update, ast.Delete, ast.Merge)) and isinstance(table, ast.TableRef):
        lines.append("Write: " + _dml_mode(ctx, table))
        reads = _dml_reads(ctx, stmt, table)
        if reads:
            lines += ["Other reads:"] + reads
    if isinstance(stmt, ast.Insert):
        lines.append("Write: " + _insert_mode(ctx, stmt))
        try:
            bound = bind_query(ctx, stmt.source)
            lines.append("Source reads:")
            lines += _describe_reads(bound) or ["  (no tables)"]
        except AnalysisError as e:
            lines.append(f"Source: {e.message}")
    return "\n".join(lines)


def _dml_reads(ctx, stmt, table: ast.TableRef) -> list[str]:
    """The tables UPDATE / DELETE / MERGE read besides the target, each with the version read."""
    from ..catalog.table_binding import describe_references, pin
    from ..rows.target_reads import statement_parts

    try:
        handle = ctx.resolve(table)
        pinned = pin(handle.path, ctx.snapshot(handle))
        trees, refs = statement_parts(stmt)
        return describe_references(ctx, trees, refs, pinned)
    except AnalysisError as e:
        return [f"  ({e.message})"]


def _dml_mode(ctx, table: ast.TableRef) -> str:
    """How UPDATE / DELETE / MERGE will write (the flag routes.choose_mode follows)."""
    from ..txn.statement_scope import scope_flags

    try:
        dv = scope_flags(ctx.snapshot(ctx.resolve(table)))["deletion_vectors"]
    except AnalysisError as e:
        return f"unknown ({e.message})"
    return ("deletion vectors on the touched files" if dv
            else "copy-on-write: rewrites the touched files (deletion vectors are off)")


def _insert_mode(ctx, stmt: ast.Insert) -> str:
    from .insert import insert_reads_target

    if stmt.replace_where is not None:
        return f"REPLACE WHERE {stmt.replace_where.sql} (reads the rows it replaces)"
    if stmt.overwrite:
        return "OVERWRITE" + (" PARTITION" if stmt.partition else "") + " (reads what it replaces)"
    try:
        if insert_reads_target(ctx, stmt):
            return "append reading the target table (not blind; conflicts like MERGE)"
    except Exception:
        pass
    return "blind append (reads nothing; never conflicts)"


def _conflict_scope(ctx, stmt) -> Optional[str]:
    try:
        from isolde.planner.scope import conflict_scope
    except Exception:
        return None
    from ..catalog import schema as S

    table = getattr(stmt, "table", None) or getattr(stmt, "target", None)
    if not isinstance(table, ast.TableRef):
        return None
    try:
        handle = ctx.resolve(table)
        snap = ctx.snapshot(handle)
        struct = S.metadata_schema(snap.metadata)
        from ..txn.statement_scope import scope_flags

        result = conflict_scope(stmt, [(f.name, f.dataType) for f in struct.fields],
                                S.partition_columns(snap.metadata), **scope_flags(snap),
                                target_read=statement_reads_target(ctx, handle.path, stmt))
    except Exception:
        return None
    text = result.describe()
    return "\n".join(text.splitlines()[1:]) if text.startswith("Conflict scope:") else text


@executes(ast.Explain)
def run_explain(ctx, stmt: ast.Explain) -> QueryResult:
    text = explain_statement(ctx, stmt.statement, stmt.mode)
    return QueryResult(columns=["plan"], rows=[(text,)])
