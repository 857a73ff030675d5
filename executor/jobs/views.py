"""CREATE [OR REPLACE] [TEMP] VIEW, DROP VIEW, SHOW VIEWS (definitions in executor/catalog/views.py)."""

from __future__ import annotations

from isolde.errors import AnalysisError
from ..catalog import views
from . import executes
from .database import _like
from .query import bind_query
from ..session.results import QueryResult
from isolde.grammar import ast


@executes(ast.CreateView)
def run_create_view(ctx, stmt: ast.CreateView) -> QueryResult:
    """The query is analysed now (unknown tables and columns fail the CREATE, as in Spark) and
    its output names and types are kept; the data is read only when the view is queried."""
    existing = views.lookup(ctx, stmt.view)
    if stmt.if_not_exists and existing is not None and existing.temporary == stmt.temporary:
        return QueryResult(message=f"View {existing.qualified_name} already exists; nothing done.")
    expanded = views._expand_query(ctx, stmt.query)
    schema = [(f.name, f.dataType.simpleString()) for f in bind_query(ctx, expanded, prune=False).df.schema.fields]
    if stmt.columns:
        if len(stmt.columns) != len(schema):
            raise AnalysisError(
                f"The view `{'.'.join(stmt.view.parts)}` names {len(stmt.columns)} columns "
                f"({', '.join(stmt.columns)}) but its query returns {len(schema)} "
                f"({', '.join(n for n, _ in schema)}).",
                error_class="CREATE_VIEW_COLUMN_ARITY_MISMATCH", sqlstate="21S01")
        schema = [(name, t) for name, (_, t) in zip(stmt.columns, schema)]
    seen = set()
    for name, _ in schema:
        if name.lower() in seen:
            raise AnalysisError(f"The view's query returns the column `{name}` twice; give the columns distinct "
                                "names (AS aliases or a column list after the view's name).",
                                error_class="COLUMN_ALREADY_EXISTS", sqlstate="42711")
        seen.add(name.lower())
    view = views.new_definition(ctx, stmt, schema)
    if view.temporary:
        table = views.temp_views(ctx.session)
        if view.name in table and not stmt.or_replace:
            raise AnalysisError(f"Cannot create the temporary view `{view.name}`: it already exists. Use CREATE OR "
                                "REPLACE TEMP VIEW.", error_class="TEMP_TABLE_OR_VIEW_ALREADY_EXISTS",
                                sqlstate="42P07")
        table[view.name] = view
    else:
        views.ensure_name_free(ctx, view, stmt.or_replace)
        views.write_persistent(ctx.catalog, view)
    kind = "Temporary view" if view.temporary else "View"
    return QueryResult(message=f"{kind} {view.qualified_name} created")


@executes(ast.DropView)
def run_drop_view(ctx, stmt: ast.DropView) -> QueryResult:
    if stmt.view.parts and not stmt.if_exists:  # a name no view can have: say why, not "not found"
        from ..catalog.warehouse import check_name

        check_name(stmt.view.parts[-1], "view")
        if len(stmt.view.parts) == 2:
            check_name(stmt.view.parts[0], "database")
    view = views.lookup(ctx, stmt.view)
    name = ".".join(stmt.view.parts) if stmt.view.parts else str(stmt.view.path)
    if view is None:
        try:
            ctx.resolve(stmt.view)
        except AnalysisError:
            pass
        else:
            raise AnalysisError(f"`{name}` is a table: use DROP TABLE {name}.",
                                error_class="WRONG_COMMAND_FOR_OBJECT_TYPE", sqlstate="42809")
        if stmt.if_exists:
            return QueryResult(message=f"View {name} does not exist; nothing done.")
        raise AnalysisError(f"The view `{name}` cannot be found.", error_class="TABLE_OR_VIEW_NOT_FOUND",
                            sqlstate="42P01")
    if view.temporary:
        del views.temp_views(ctx.session)[view.name]
    else:
        views.drop_persistent(ctx.catalog, view.database, view.name)
    return QueryResult(message=f"View {view.qualified_name} dropped")


@executes(ast.ShowViews)
def run_show_views(ctx, stmt: ast.ShowViews) -> QueryResult:
    rows = views.list_views(ctx, stmt.database)
    if stmt.pattern:
        rows = [r for r in rows if _like(r[1], stmt.pattern)]
    return QueryResult(columns=["namespace", "viewName", "isTemporary"], rows=rows)


run_drop_view.needs_spark = False
run_show_views.needs_spark = False
