"""CREATE / DROP DATABASE, USE, SHOW TABLES (databases are folders of the warehouse)."""

from __future__ import annotations

import fnmatch

from isolde.errors import AnalysisError
from . import executes
from ..session.results import QueryResult
from isolde.grammar import ast


@executes(ast.CreateDatabase)
def run_create_database(ctx, stmt: ast.CreateDatabase) -> QueryResult:
    if stmt.location is not None:
        raise AnalysisError("CREATE DATABASE ... LOCATION is not supported: databases are folders of the warehouse.",
                            error_class="UNSUPPORTED_FEATURE", sqlstate="0A000")
    created = ctx.catalog.create_database(stmt.name, if_not_exists=stmt.if_not_exists)
    return QueryResult(message=f"Database {stmt.name} created" if created else
                       f"Database {stmt.name} already exists; nothing done.")


@executes(ast.DropDatabase)
def run_drop_database(ctx, stmt: ast.DropDatabase) -> QueryResult:
    path = ctx.catalog.database_path(stmt.name)
    target = ctx.catalog.files.realpath(path) if ctx.catalog.is_link(path) else None
    dropped = ctx.catalog.drop_database(stmt.name, if_exists=stmt.if_exists, cascade=stmt.cascade)
    if dropped and stmt.name.lower() == ctx.current_database:
        ctx.session._current_database = "default"
    if dropped and target is not None:
        return QueryResult(message=f"Database {stmt.name} dropped (it was a symbolic link: the link is removed, "
                                   f"nothing under {target} is deleted)")
    return QueryResult(message=f"Database {stmt.name} dropped" if dropped else
                       f"Database {stmt.name} does not exist; nothing done.")


@executes(ast.Use)
def run_use(ctx, stmt: ast.Use) -> QueryResult:
    ctx.session.current_database = stmt.name
    return QueryResult(message=f"Using database {ctx.session.current_database}")


def _like(name: str, pattern: str) -> bool:
    """Spark's SHOW TABLES LIKE: '*' any, '|' alternatives, case-insensitive."""
    return any(fnmatch.fnmatchcase(name.lower(), alt.strip().lower()) for alt in pattern.split("|"))


@executes(ast.ShowTables)
def run_show_tables(ctx, stmt: ast.ShowTables) -> QueryResult:
    """Spark's SHOW TABLES: columns ``namespace``, ``tableName``, ``isTemporary``; the database's
    tables and persistent views sorted by name, then the session's temporary views (namespace
    '', isTemporary true; Spark lists them whatever database is shown)."""
    from ..catalog.views import list_views

    database = (stmt.database or ctx.current_database).lower()
    persistent = [(database, n, False) for n in ctx.catalog.list_tables(database)]
    temporary = []
    for namespace, name, is_temp in list_views(ctx, database):
        (temporary if is_temp else persistent).append((namespace, name, is_temp))
    rows = sorted(persistent, key=lambda r: r[1]) + sorted(temporary, key=lambda r: r[1])
    if stmt.pattern:
        rows = [r for r in rows if _like(r[1], stmt.pattern)]
    return QueryResult(columns=["namespace", "tableName", "isTemporary"], rows=rows)


for _fn in (run_create_database, run_drop_database, run_use, run_show_tables):
    _fn.needs_spark = False
