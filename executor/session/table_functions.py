"""Table-valued functions isolde answers itself: ``table_changes('t', start [, end])``.

Spark has no ``table_changes`` (Delta's SQL extension provides it), so a query's
``FROM table_changes(...)`` is replaced, before Spark sees the SQL, by a temp view over the
change rows (executor/jobs/table_changes.py); the alias, if any, stays. Called by every
place that binds a query's tables: queries (jobs/query.py) and DML sources (dml.bind_tables).
"""

from __future__ import annotations

from typing import Callable

import sqlglot.expressions as exp

from isolde.errors import AnalysisError

NAMES = ("table_changes",)


def _argument(node: exp.Expression, fn: str, position: int):
    """A literal argument's Python value (int for integer literals, str for strings)."""
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return -int(node.this.this)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal):
        node = node.this
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        try:
            return int(node.this)
        except ValueError:
            pass
    if isinstance(node, exp.Null):
        return None
    raise AnalysisError(f"Argument {position} of {fn}() must be a literal, not {node.sql()}.",
                        error_class="DELTA_TABLE_VALUED_FUNCTION_INVALID_ARG", sqlstate="42000")


def _table_ref(name: str):
    from isolde.grammar import ast

    if "/" in name or name.startswith(("file:", "s3:", "abfss:", "gs:")):
        return ast.TableRef(path=name)
    parts = tuple(p.strip("`") for p in name.split("."))
    return ast.TableRef(parts=parts)


def is_table_function(node) -> bool:
    return (isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous)
            and str(node.this.name).lower() in NAMES)


def change_rows(ctx, name: str, start, end=None):
    """The DataFrame ``table_changes(name, start, end)`` returns."""
    from ..rows.dml import current_database
    from ..jobs.table_changes import table_changes
    from ..log.staged_log import ACTIVE_TRANSACTION

    if ACTIVE_TRANSACTION.get() is not None:
        from isolde.errors import TransactionStateError

        raise TransactionStateError(
            f"table_changes('{name}', ...) is not supported inside a transaction, as in Databricks: the change "
            "data feed is read outside transactions. The transaction is still open.",
            error_class="CDF_READ_IN_TRANSACTION", sqlstate="0A000")

    ref = _table_ref(name)
    resolve = getattr(ctx, "resolve", None)
    handle = resolve(ref) if resolve is not None else ctx.catalog.resolve(ref, current_database(ctx))
    return table_changes(ctx, handle, start, end)


def bind(ctx, tree: exp.Expression, add_view: Callable) -> exp.Expression:
    """``tree`` with each ``table_changes(...)`` replaced by a temp view ``add_view(df)`` names
    (changed in place; returned for convenience)."""
    for node in list(tree.find_all(exp.Table)):
        if not is_table_function(node):
            continue
        fn = str(node.this.name).lower()
        args = list(node.this.expressions)
        if not 2 <= len(args) <= 3:
            raise AnalysisError(f"{fn}() takes a table name, a start and an optional end; got {len(args)} "
                                "argument(s).", error_class="WRONG_NUM_ARGS", sqlstate="42605")
        values = [_argument(a, fn, i + 1) for i, a in enumerate(args)]
        if not isinstance(values[0], str):
            raise AnalysisError(f"The first argument of {fn}() must be a table name string.",
                                error_class="DELTA_TABLE_VALUED_FUNCTION_INVALID_ARG", sqlstate="42000")
        df = change_rows(ctx, values[0], values[1], values[2] if len(values) > 2 else None)
        view = add_view(df)
        replacement = exp.Table(this=exp.to_identifier(view))
        alias = node.args.get("alias")
        if alias is not None:
            replacement.set("alias", alias.copy())
        node.replace(replacement)
    return tree


def table_changes_sql(name: str, start, end=None) -> str:
    """``SELECT * FROM table_changes(...)`` for a Python call (``Session.table_changes``):
    ints stay versions, anything else (str, datetime) is a timestamp string."""

    def literal(value) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"

    args = [literal(str(name)), literal(start)] + ([literal(end)] if end is not None else [])
    return f"SELECT * FROM table_changes({', '.join(args)})"
