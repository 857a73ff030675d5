"""Backslash meta-commands: parsing (pure) and running (against a small context object).

The context (``repl.app.Repl`` or a test double) provides: ``settings`` (format, expanded,
timing), ``session()`` (the ready Session), ``show(result, elapsed)``, ``echo(text)``,
``run_text(text, source)`` and ``request_exit()``.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any

from .formatting import FORMATS, format_rows, plural, size_pretty
from .tables import column_listing, table_listing


class MetaError(ValueError):
    """A malformed meta-command: the message is the usage line."""


@dataclass(frozen=True)
class Meta:
    name: str  # without the backslash: 'dt', 'd', 'history', ...
    args: tuple[str, ...] = ()


# name -> (min args, max args, usage, description)
COMMANDS: dict[str, tuple[int, int, str, str]] = {
    "?": (0, 0, "\\?", "show this help"),
    "dt": (0, 1, "\\dt [database]", "list tables: type, version, files and size"),
    "d": (1, 1, "\\d TABLE", "describe a table: columns, partitioning, clustering, properties"),
    "history": (1, 2, "\\history TABLE [N]", "the table's commit history (DESCRIBE HISTORY), newest first"),
    "i": (1, 1, "\\i FILE", "run the statements of a .sql file"),
    "timing": (0, 1, "\\timing [on|off]", "toggle the elapsed time after each statement"),
    "format": (0, 1, "\\format [table|csv|json|vertical|markdown]", "show or set the output format"),
    "x": (0, 1, "\\x [on|off]", "toggle vertical (expanded) output"),
    "conf": (0, 2, "\\conf [KEY [VALUE]]", "show or set session configuration (SET)"),
    "q": (0, 0, "\\q", "quit (also Ctrl-D on an empty line, quit, exit)"),
}
ALIASES = {"h": "?", "help": "?", "quit": "q", "exit": "q", "describe": "d", "include": "i", "expanded": "x"}


def parse_meta(text: str) -> Meta:
    """``\\d orders`` -> Meta('d', ('orders',)). Trailing ';' is ignored. Raises MetaError."""
    body = text.strip()
    if body.lower().rstrip(";").strip() in ("quit", "exit"):
        return Meta("q")
    if not body.startswith("\\"):
        raise MetaError(f"not a meta-command: {text!r}")
    body = body[1:].rstrip(";").strip()
    try:
        words = shlex.split(body, posix=True)
    except ValueError as exc:
        raise MetaError(f"cannot parse {text.strip()!r}: {exc}") from None
    if not words:
        raise MetaError("empty meta-command; try \\?")
    name, args = words[0], tuple(words[1:])
    # psql habit: \dt+ / \d+ mean the same here
    name = name.rstrip("+")
    name = ALIASES.get(name.lower(), name)
    if name not in COMMANDS:
        raise MetaError(f"unknown meta-command \\{words[0]}; try \\? for the list")
    low, high, usage, _ = COMMANDS[name]
    if not (low <= len(args) <= high):
        raise MetaError(f"usage: {usage}")
    if name == "format" and args and args[0].lower() not in FORMATS:
        raise MetaError(f"unknown format {args[0]!r}; usage: {usage}")
    if name in ("timing", "x") and args and args[0].lower() not in ("on", "off"):
        raise MetaError(f"usage: {usage}")
    if name == "history" and len(args) == 2 and not args[1].isdigit():
        raise MetaError(f"usage: {usage}  (N is a number of commits)")
    return Meta(name, args)


def help_text() -> str:
    width = max(len(u) for _, _, u, _ in COMMANDS.values())
    lines = ["Meta-commands:"]
    lines += [f"  {usage:<{width}}  {desc}" for _, _, usage, desc in COMMANDS.values()]
    lines += [
        "",
        "SQL statements end with ';' (Enter submits a complete statement; Esc-Enter inserts a newline).",
        "Ctrl-C cancels the input or the running Spark job, Ctrl-D on an empty line quits,",
        "Ctrl-R searches the history, Tab completes keywords, tables, columns and table properties.",
    ]
    return "\n".join(lines)


def _quote_table(name: str) -> str:
    return name  # table names are passed through as typed (`db`.`t`, delta.`/path` work)


def _on_off(args: tuple[str, ...], current: bool) -> bool:
    if not args:
        return not current
    return args[0].lower() == "on"


def run_meta(meta: Meta, ctx: Any) -> None:
    """Run one meta-command against the REPL context."""
    s = ctx.settings
    if meta.name == "?":
        ctx.echo(help_text())
    elif meta.name == "q":
        ctx.request_exit()
    elif meta.name == "timing":
        s.timing = _on_off(meta.args, s.timing)
        ctx.echo(f"Timing is {'on' if s.timing else 'off'}.")
    elif meta.name == "x":
        s.expanded = _on_off(meta.args, s.expanded)
        ctx.echo(f"Expanded (vertical) display is {'on' if s.expanded else 'off'}.")
    elif meta.name == "format":
        if meta.args:
            s.format = meta.args[0].lower()
            s.expanded = False
        ctx.echo(f"Output format is {s.format}.")
    elif meta.name == "dt":
        session = _catalog_session(ctx)
        database = meta.args[0] if meta.args else None
        names = list_tables(session, database)
        if not names:
            ctx.echo("No tables.")
            return
        columns, rows, problems = table_listing(session, names, database)
        text = format_rows(columns, rows, "table") + f"\n({plural(len(names), 'table')})"
        if problems:
            text += "\n" + "\n".join(f"cannot read {p}" for p in problems)
        ctx.echo(text)
    elif meta.name == "d":
        describe(ctx, meta.args[0])
    elif meta.name == "history":
        sql = f"DESCRIBE HISTORY {_quote_table(meta.args[0])}"
        if len(meta.args) == 2:
            sql += f" LIMIT {int(meta.args[1])}"
        ctx.run_text(sql + ";", source=None)
    elif meta.name == "i":
        path = os.path.expanduser(meta.args[0])
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise MetaError(f"\\i: cannot read {path}: {exc.strerror or exc}") from None
        ctx.run_text(text, source=path)
    elif meta.name == "conf":
        if not meta.args:
            ctx.run_text("SET;", source=None)
        elif len(meta.args) == 1:
            ctx.run_text(f"SET {meta.args[0]};", source=None)
        else:
            ctx.run_text(f"SET {meta.args[0]} = {meta.args[1]};", source=None)
    else:  # pragma: no cover - parse_meta only lets known names through
        raise MetaError(f"unknown meta-command \\{meta.name}")


def _catalog_session(ctx: Any) -> Any:
    """``\\dt`` and ``\\d`` read the log: they need not wait for Spark to start."""
    getter = getattr(ctx, "catalog_session", None)
    return getter() if callable(getter) else ctx.session()


def _names(items: Any) -> list[str]:
    from .completion import _name_of

    if hasattr(items, "rows") and hasattr(items, "columns"):
        cols = [c.lower() for c in items.columns]
        idx = cols.index("tablename") if "tablename" in cols else cols.index("name") if "name" in cols else 0
        return [str(r[idx]) for r in items.rows]
    return [_name_of(i) for i in items or []]


def list_tables(session: Any, database: str | None = None) -> list[str]:
    items = session.tables(database) if database else session.tables()
    return sorted(_names(items), key=str.lower)


def describe(ctx: Any, table: str) -> None:
    """``\\d t``: columns (DESCRIBE TABLE), then partitioning / clustering / properties /
    location / size from DESCRIBE DETAIL."""
    session = _catalog_session(ctx)
    cols = session.execute(f"DESCRIBE TABLE {table}")
    header, rows = column_listing(list(cols.columns), [tuple(r) for r in cols.rows])
    ctx.echo(f'Table "{table}"')
    ctx.echo(format_rows(header, rows, "table"))
    try:
        detail = session.execute(f"DESCRIBE DETAIL {table}")
    except Exception:
        return
    if not detail.rows:
        return
    info = dict(zip([c for c in detail.columns], detail.rows[0]))
    lines = []
    for key, label in (("partitionColumns", "Partitioned by"), ("clusteringColumns", "Clustered by")):
        value = info.get(key)
        if value:
            lines.append(f"{label}: {', '.join(map(str, value))}")
    for key, label in (("format", "Format"), ("location", "Location"), ("numFiles", "Files"),
                       ("sizeInBytes", "Size"), ("minReaderVersion", "Reader version"),
                       ("minWriterVersion", "Writer version")):
        if info.get(key) is not None:
            value = info[key]
            if key == "sizeInBytes":
                value = f"{size_pretty(value)}" + (f" ({value} bytes)" if size_pretty(value) != f"{value} bytes"
                                                   else "")
            lines.append(f"{label}: {value}")
    features = info.get("tableFeatures")
    if features:
        lines.append(f"Table features: {', '.join(map(str, features))}")
    props = info.get("properties") or {}
    if hasattr(props, "asDict"):
        props = props.asDict()
    if props:
        lines.append("Properties:")
        for k in sorted(props):
            lines.append(f"  {k} = {props[k]}")
    if lines:
        ctx.echo("\n".join(lines))
