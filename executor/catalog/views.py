"""Views: definitions, where they live, and how a statement sees through them.

A view is a stored query. Temporary views live in the session (``session.temp_views``);
persistent views live in the warehouse beside the tables, one JSON file per view
(``<warehouse>/<db>/<name>.view.json``), so they survive a restart and every session on the
warehouse sees them. Tables and views share one namespace per database.

Before a statement is planned, ``expand_views`` replaces every reference to a view (in
queries, conditions, assignments, a MERGE source) by the view's query as a subquery
aliased with the view's name. The statement then reads the view's tables like any other
table: each is bound to its current snapshot when the statement runs (a view never pins a
version), and a view over the table a write modifies is a read of that table for the
write's conflict scope, because the planner and ``target_reads`` see the table itself.

Name resolution follows Spark: an unqualified name is a temporary view first, then a table
or view of the current database; ``db.name`` is never a temporary view. A persistent view's
query is stored with its table names qualified by the database current at creation, so it
means the same thing from any session; it may not reference temporary views.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import sqlglot.expressions as exp

from isolde.errors import AnalysisError, TableAlreadyExistsError
from isolde.grammar import ast
from isolde.grammar.ctes import named_subquery
from isolde.grammar.dialect import sql as render_sql
from isolde.grammar.lexer import Tok
from isolde.grammar.slots import construct, query as parse_query
from isolde.planner.resolve import FILE_FORMATS, in_hint

VIEW_SUFFIX = ".view.json"
MAX_DEPTH = 32  # views over views; deeper is taken for a cycle


@dataclass(frozen=True)
class ViewDefinition:
    """A view: ``sql`` is the query as stored (table names qualified for persistent views),
    ``text`` the query as the user wrote it; ``schema`` the output (name, type) pairs found
    when it was created."""

    name: str
    sql: str
    text: str
    database: Optional[str] = None  # None: a temporary view
    columns: tuple[str, ...] = ()
    column_comments: tuple[Optional[str], ...] = ()
    comment: Optional[str] = None
    properties: dict = field(default_factory=dict)
    schema: tuple[tuple[str, str], ...] = ()
    created_ms: int = 0

    @property
    def temporary(self) -> bool:
        return self.database is None

    @property
    def qualified_name(self) -> str:
        return self.name if self.temporary else f"{self.database}.{self.name}"

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["schema"] = [list(p) for p in self.schema]
        return out

    @classmethod
    def from_json(cls, data: dict) -> "ViewDefinition":
        data = dict(data)
        data["columns"] = tuple(data.get("columns") or ())
        data["column_comments"] = tuple(data.get("column_comments") or ())
        data["schema"] = tuple(tuple(p) for p in data.get("schema") or ())
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


# --------------------------------------------------------------------------- where views live


def temp_views(session) -> dict:
    """The session's temporary views, by lower-case name (none without a session)."""
    if session is None:
        return {}
    views = session.__dict__.get("temp_views")
    if views is None:
        views = session.__dict__["temp_views"] = {}
    return views


def _view_file(catalog, database: str, name: str) -> str:
    from .warehouse import check_name

    return catalog.files.join(catalog.database_path(database), check_name(name, "view") + VIEW_SUFFIX)


def read_persistent(catalog, database: str, name: str) -> Optional[ViewDefinition]:
    try:
        path = _view_file(catalog, database, name)
    except AnalysisError:
        return None  # an invalid name is never a view
    # a view's file is found through its name: never through a link out of the warehouse
    catalog.check_inside(catalog.database_path(database), "database", database)
    catalog.check_inside(path, "view", f"{database}.{name}")
    try:
        return ViewDefinition.from_json(catalog.files.read_json(path))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def write_persistent(catalog, view: ViewDefinition) -> None:
    # atomic: another session sees the old or the new view, never half
    catalog.files.write_json(_view_file(catalog, view.database, view.name), view.to_json(), indent=1)


def drop_persistent(catalog, database: str, name: str) -> bool:
    try:
        catalog.files.remove(_view_file(catalog, database, name))
        return True
    except FileNotFoundError:
        return False


def list_views(ctx, database: Optional[str] = None) -> list[tuple[str, str, bool]]:
    """(namespace, name, is temporary) of the database's views and the session's temporary
    views (namespace '' for those), sorted as Spark's SHOW VIEWS does."""
    database = (database or ctx.current_database).lower()
    folder = ctx.catalog.require_database(database)
    names = sorted(e[: -len(VIEW_SUFFIX)] for e in ctx.catalog.files.listdir(folder) if e.endswith(VIEW_SUFFIX))
    out = [(database, n, False) for n in names]
    out += [("", n, True) for n in sorted(temp_views(getattr(ctx, "session", None)))]
    return out


def lookup(ctx, ref: ast.TableRef) -> Optional[ViewDefinition]:
    """The view ``ref`` names, or None when it names a table or nothing (Spark's order: a
    temporary view, then the database's table or view)."""
    if ref.path is not None or not ref.parts:
        return None
    parts = tuple(p.lower() for p in ref.parts)
    if len(parts) == 1 and parts[0] in temp_views(getattr(ctx, "session", None)):
        return temp_views(getattr(ctx, "session", None))[parts[0]]
    if len(parts) == 3 and parts[0] in ("spark_catalog", "isolde"):
        parts = parts[1:]
    if len(parts) > 2:
        return None
    database = parts[0] if len(parts) == 2 else ctx.current_database.lower()
    return read_persistent(ctx.catalog, database, parts[-1])  # (CREATE keeps view and table names apart)


def view_exists(catalog, database: str, name: str) -> bool:
    try:
        return catalog.files.isfile(_view_file(catalog, database, name))
    except AnalysisError:
        return False


# --------------------------------------------------------------------------- seeing through views


def expand_tree(ctx, tree: exp.Expression, depth: int = 0, chain: tuple = ()) -> bool:
    """Replace, in place, every table reference of ``tree`` that names a view by the view's
    query; True when something was replaced."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    changed = False
    for node in list(tree.find_all(exp.Table)):
        if not isinstance(node.this, exp.Identifier) or isinstance(node.parent, exp.Column) or in_hint(node):
            continue
        parts = tuple(p for p in (node.catalog, node.db, node.name) if p)
        if len(parts) == 1 and parts[0].lower() in ctes:
            continue
        if len(parts) == 2 and parts[0].lower() in ("delta", *FILE_FORMATS):
            continue
        view = lookup(ctx, ast.TableRef(parts=parts))
        if view is None:
            continue
        if node.args.get("version") is not None:
            raise AnalysisError(f"Cannot time travel the view `{view.qualified_name}`: time travel reads a table's "
                                "versions; apply it to the tables inside the view's query.",
                                error_class="DELTA_UNSUPPORTED_TIME_TRAVEL_VIEWS", sqlstate="0AKDC")
        if view.qualified_name in chain or depth >= MAX_DEPTH:
            raise AnalysisError(f"The view `{view.qualified_name}` refers to itself through "
                                f"{' -> '.join((*chain, view.qualified_name))}.",
                                error_class="RECURSIVE_VIEW", sqlstate="42K0H")
        body = parse_query(view.sql, Tok("QUERY", view.sql, 0, len(view.sql))).tree
        expand_tree(ctx, body, depth + 1, (*chain, view.qualified_name))
        node.replace(_as_subquery(node, view, body))
        changed = True
    return changed


def _as_subquery(node: exp.Table, view: ViewDefinition, body: exp.Expression) -> exp.Expression:
    """The view's query in place of the reference, under the reference's alias (or the view's
    name) and with the view's column names."""
    return named_subquery(node, node.name, view.columns, body)


def _expand_query(ctx, q: ast.Query) -> ast.Query:
    tree = q.tree.copy()
    if not expand_tree(ctx, tree):
        return q
    text = render_sql(tree)
    fresh = parse_query(text, Tok("QUERY", text, 0, len(text)))
    return construct(ast.Query, {"sql": q.sql, "tree": fresh.tree, "tables": fresh.tables, "span": q.span})


def _expand_expr(ctx, e: ast.Expr) -> ast.Expr:
    if not e.tree.find(exp.Select, exp.Table):
        return e
    tree = e.tree.copy()
    if not expand_tree(ctx, tree):
        return e
    # the text follows the tree: writers run a slot's text as it is when its tree holds no table
    # (dml.bound_sql), and the user's text still names the view
    return construct(ast.Expr, {"sql": render_sql(tree), "tree": tree, "span": e.span})


# Statements that name a view as what they act on, or read only its schema.
_ABOUT_VIEWS = (ast.CreateView, ast.DropView, ast.ShowColumns, ast.ShowCreateTable, ast.ShowViews,
                ast.DescribeTable, ast.CreateTableLike)


def expand_views(ctx, stmt: ast.Statement) -> ast.Statement:
    """``stmt`` with every view it reads replaced by the view's query; a view named where a
    table must be (the target of a write, DESCRIBE DETAIL, OPTIMIZE, ...) is an error."""
    if isinstance(stmt, _ABOUT_VIEWS):
        return stmt
    if not _any_views(ctx):
        return stmt
    return _rewrite(ctx, stmt, stmt)


def _any_views(ctx) -> bool:
    """A cheap test first: most warehouses have no views, and then nothing is walked."""
    if temp_views(getattr(ctx, "session", None)):
        return True
    try:
        for database in ctx.catalog.list_databases():
            if any(e.endswith(VIEW_SUFFIX) for e in ctx.catalog.files.listdir(ctx.catalog.database_path(database))):
                return True
    except (OSError, AnalysisError):
        return True
    return False


def _rewrite(ctx, node: Any, stmt: ast.Statement) -> Any:
    if isinstance(node, ast.Query):
        return _expand_query(ctx, node)
    if isinstance(node, ast.Expr):
        return _expand_expr(ctx, node)
    if isinstance(node, tuple):
        return tuple(_rewrite(ctx, v, stmt) for v in node)
    if not isinstance(node, ast.Node):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        if f.name in ("span", "text"):
            continue
        value = getattr(node, f.name)
        if isinstance(value, ast.TableRef):
            new = _table_field(ctx, node, f.name, value)
        else:
            new = _rewrite(ctx, value, stmt)
        if new is not value:
            changes[f.name] = new
    if isinstance(node, ast.Merge) and "source" in changes and isinstance(node.source, ast.TableRef) \
            and not node.source_alias:
        changes["source_alias"] = node.source.parts[-1]  # `USING v ON t.id = v.id`: the view's name qualifies
    return dataclasses.replace(node, **changes) if changes else node


def _table_field(ctx, node, name: str, ref: ast.TableRef):
    view = lookup(ctx, ref)
    if view is None:
        return ref
    if isinstance(node, ast.Merge) and name == "source":  # MERGE ... USING v: a query over the view
        text = f"SELECT * FROM {_quoted(ref.parts)}"
        q = parse_query(text, Tok("QUERY", text, 0, len(text)))
        return _expand_query(ctx, construct(ast.Query, {"sql": text, "tree": q.tree, "tables": q.tables,
                                                       "span": ref.span}))
    if isinstance(node, (ast.CreateTable, ast.CloneTable)) and name == "table":
        return ref  # the catalog refuses to create a table under a view's name
    if isinstance(node, ast.DropTable):
        raise AnalysisError(f"`{view.qualified_name}` is a view: use DROP VIEW {view.qualified_name}.",
                            error_class="WRONG_COMMAND_FOR_OBJECT_TYPE", sqlstate="42809")
    raise AnalysisError(f"`{view.qualified_name}` is a view, not a table: {_statement_words(node)} needs a table.",
                        error_class="EXPECT_TABLE_NOT_VIEW.NO_ALTERNATIVE", sqlstate="42809")


def _statement_words(node) -> str:
    text = (getattr(node, "text", "") or type(node).__name__).split()
    return " ".join(text[:2]).upper() if text else type(node).__name__


def _quoted(parts) -> str:
    return ".".join(f"`{p.replace('`', '``')}`" for p in parts)


# --------------------------------------------------------------------------- creating


def qualify(ctx, tree: exp.Expression) -> exp.Expression:
    """A persistent view's query with every unqualified table name qualified by the current
    database (CTE names and paths left alone); a temporary view referenced is an error."""
    tree = tree.copy()
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for node in tree.find_all(exp.Table):
        if not isinstance(node.this, exp.Identifier) or isinstance(node.parent, exp.Column) or in_hint(node):
            continue
        if node.args.get("db") is not None or node.name.lower() in ctes:
            continue
        if node.name.lower() in temp_views(getattr(ctx, "session", None)):
            raise AnalysisError(f"A persistent view cannot reference the temporary view `{node.name}`; create a "
                                "temporary view instead (CREATE TEMP VIEW).",
                                error_class="INVALID_TEMP_OBJ_REFERENCE", sqlstate="42K0F")
        node.set("db", exp.to_identifier(ctx.current_database.lower(), quoted=True))
    return tree


def new_definition(ctx, stmt: ast.CreateView, schema: list[tuple[str, str]]) -> ViewDefinition:
    name = stmt.view.parts[-1].lower()
    if stmt.temporary:
        if len(stmt.view.parts) > 1:
            raise AnalysisError(f"A temporary view's name cannot be qualified: `{'.'.join(stmt.view.parts)}`.",
                                error_class="TEMP_VIEW_NAME_TOO_MANY_NAME_PARTS", sqlstate="428EK")
        database, sql = None, render_sql(stmt.query.tree)
    else:
        database = (stmt.view.parts[0] if len(stmt.view.parts) == 2 else ctx.current_database).lower()
        if len(stmt.view.parts) > 2:
            raise AnalysisError(f"Invalid view name `{'.'.join(stmt.view.parts)}`: use `view` or `database.view`.",
                                error_class="REQUIRES_SINGLE_PART_NAMESPACE", sqlstate="42K05")
        sql = render_sql(qualify(ctx, stmt.query.tree))
    return ViewDefinition(
        name=name, sql=sql, text=stmt.query.sql, database=database, columns=tuple(stmt.columns),
        column_comments=tuple(stmt.column_comments), comment=stmt.comment,
        properties={p.key: p.value for p in stmt.properties}, schema=tuple(schema),
        created_ms=int(time.time() * 1000))


def ensure_name_free(ctx, view: ViewDefinition, or_replace: bool) -> None:
    """A persistent view may not take a table's name; replacing a view needs OR REPLACE."""
    if view.temporary:
        return
    ctx.catalog.require_database(view.database)
    if view.name in ctx.catalog.list_tables(view.database):
        raise TableAlreadyExistsError(view.qualified_name)
    if not or_replace and view_exists(ctx.catalog, view.database, view.name):
        raise AnalysisError(f"Cannot create view `{view.qualified_name}`: it already exists. Use CREATE OR REPLACE "
                            "VIEW or IF NOT EXISTS.", error_class="TABLE_OR_VIEW_ALREADY_EXISTS", sqlstate="42P07")
