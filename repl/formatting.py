"""Rendering of results and errors: pure functions from values to text (golden-tested).

Formats: ``table`` (aligned, psql-like), ``csv``, ``json`` (an array, one object per line),
``vertical`` (one record per block, like psql's ``\\x``), ``markdown`` (GitHub tables).
"""

from __future__ import annotations

import csv
import datetime as _dt
import decimal
import io
import json
import math
import re
import traceback
from typing import Any, Sequence

FORMATS = ("table", "csv", "json", "vertical", "markdown")
NULL = "NULL"

RED = "\x1b[31m"
BOLD_RED = "\x1b[1;31m"
YELLOW = "\x1b[33m"
GREEN = "\x1b[32m"
DIM = "\x1b[2m"
BOLD = "\x1b[1m"
RESET = "\x1b[0m"


def _width(s: str) -> int:
    try:
        from prompt_toolkit.utils import get_cwidth

        return get_cwidth(s)
    except Exception:  # pragma: no cover - prompt_toolkit is a dependency
        return len(s)


# --------------------------------------------------------------------------- cells


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool)


def cell_text(value: Any, null: str = NULL) -> str:
    """One value as display text (table / vertical / markdown / csv)."""
    if value is None:
        return null
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return repr(value)
    if isinstance(value, _dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (_dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    if isinstance(value, (list, tuple, dict)) or hasattr(value, "asDict"):
        return _dump_json(_jsonable(value))
    text = str(value)
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, decimal.Decimal):
        return value
    if hasattr(value, "asDict"):  # pyspark Row (struct)
        return {k: _jsonable(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, _dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (_dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    return str(value)


def _dump_json(obj: Any) -> str:
    """json.dumps, except that Decimals keep every digit (written as JSON numbers)."""
    if isinstance(obj, decimal.Decimal):
        return str(obj) if obj.is_finite() else json.dumps(str(obj))
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {_dump_json(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ", ".join(_dump_json(v) for v in obj) + "]"
    return json.dumps(obj, ensure_ascii=False)


# --------------------------------------------------------------------------- formats


def format_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = "table") -> str:
    """Rows in one of FORMATS, without footer. Ends without a trailing newline."""
    if fmt == "table":
        return _table(columns, rows)
    if fmt == "csv":
        return _csv(columns, rows)
    if fmt == "json":
        return _json(columns, rows)
    if fmt == "vertical":
        return _vertical(columns, rows)
    if fmt == "markdown":
        return _markdown(columns, rows)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _numeric_columns(ncols: int, rows: Sequence[Sequence[Any]]) -> list[bool]:
    numeric = [True] * ncols
    seen = [False] * ncols
    for row in rows:
        for i, v in enumerate(row):
            if v is None:
                continue
            seen[i] = True
            if not is_number(v):
                numeric[i] = False
    return [n and s for n, s in zip(numeric, seen)]


def _pad(text: str, width: int, right: bool) -> str:
    fill = " " * max(width - _width(text), 0)
    return fill + text if right else text + fill


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cols = [str(c) for c in columns]
    cells = [[cell_text(v) for v in row] for row in rows]
    widths = [_width(c) for c in cols]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], _width(c))
    numeric = _numeric_columns(len(cols), rows)
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [rule, "| " + " | ".join(_pad(c, w, False) for c, w in zip(cols, widths)) + " |", rule]
    for row in cells:
        out.append("| " + " | ".join(_pad(c, w, r) for c, w, r in zip(row, widths, numeric)) + " |")
    if cells:
        out.append(rule)
    return "\n".join(out)


def _csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else cell_text(v) if not isinstance(v, str) else v for v in row])
    return buf.getvalue().rstrip("\n")


def _json(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    if not rows:
        return "[]"
    lines = [_dump_json({str(c): _jsonable(v) for c, v in zip(columns, row)}) for row in rows]
    return "[" + ",\n ".join(lines) + "]"


def _vertical(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cols = [str(c) for c in columns]
    width = max((_width(c) for c in cols), default=0)
    blocks = []
    for n, row in enumerate(rows, 1):
        lines = [f"-[ RECORD {n} ]" + "-" * max(width - 8, 2)]
        lines += [f"{_pad(c, width, False)} | {cell_text(v)}" for c, v in zip(cols, row)]
        blocks.append("\n".join(lines))
    return "\n".join(blocks) if blocks else "(no rows)"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cols = [_md_escape(str(c)) for c in columns]
    cells = [[_md_escape(cell_text(v)) for v in row] for row in rows]
    widths = [max(_width(c), 3) for c in cols]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], _width(c))
    numeric = _numeric_columns(len(cols), rows)
    out = ["| " + " | ".join(_pad(c, w, False) for c, w in zip(cols, widths)) + " |"]
    out.append("|" + "|".join(("-" * (w + 1) + ":") if r else (":" + "-" * (w + 1)) for w, r in zip(widths, numeric)) + "|")
    for row in cells:
        out.append("| " + " | ".join(_pad(c, w, r) for c, w, r in zip(row, widths, numeric)) + " |")
    return "\n".join(out)


# --------------------------------------------------------------------------- footers / results


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def seconds(elapsed: float) -> str:
    return f"{elapsed:.2f} s"


def row_footer(n: int, elapsed: float | None = None) -> str:
    text = f"({plural(n, 'row')})"
    if elapsed is not None:
        text += f" · {seconds(elapsed)}"
    return text


# metric key -> (label, group). Delta's operationMetrics names, in display order.
_ROW_METRICS = [
    ("numTargetRowsUpdated", "updated"),
    ("numUpdatedRows", "updated"),
    ("numTargetRowsInserted", "inserted"),
    ("numInsertedRows", "inserted"),
    ("numTargetRowsDeleted", "deleted"),
    ("numDeletedRows", "deleted"),
]
_WRITE_OPS = {"WRITE", "CREATE TABLE AS SELECT", "REPLACE TABLE AS SELECT", "CREATE OR REPLACE TABLE AS SELECT",
              "STREAMING UPDATE", "INSERT", "COPY INTO"}
_DML_OPS = {"DELETE", "UPDATE", "MERGE"}
_FILE_OPS = {"OPTIMIZE", "REORG", "VACUUM END", "VACUUM START", "VACUUM", "RESTORE"}


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def metrics_summary(operation: str, metrics: dict) -> str:
    """'3 updated, 1 inserted' / '5 rows written' / '8 files removed, 1 file added', or ''."""
    metrics = metrics or {}
    op = (operation or "").upper()
    parts: list[str] = []
    seen: set[str] = set()
    for key, label in _ROW_METRICS:
        n = _as_int(metrics.get(key))
        if n is None or label in seen:
            continue
        if n:
            parts.append(f"{n} {label}")
            seen.add(label)
    if not parts and op in _WRITE_OPS or (op.startswith("CREATE") or op.startswith("REPLACE")):
        n = _as_int(metrics.get("numOutputRows"))
        if n is not None and not parts:
            parts.append(f"{plural(n, 'row')} written")
    if not parts and op in _DML_OPS:
        parts.append("0 rows affected")
    if op in _FILE_OPS or op.startswith("OPTIMIZE") or op.startswith("REORG"):
        removed = _as_int(metrics.get("numRemovedFiles"))
        added = _as_int(metrics.get("numAddedFiles"))
        if removed is not None:
            parts.append(f"{plural(removed, 'file')} removed")
        if added is not None:
            parts.append(f"{plural(added, 'file')} added")
        deleted = _as_int(metrics.get("numDeletedFiles"))
        if deleted is not None and removed is None:
            parts.append(f"{plural(deleted, 'file')} deleted")
    return ", ".join(parts)


def format_commit(result: Any, elapsed: float | None = None) -> str:
    """'version 12 · MERGE · 3 updated, 1 inserted · 0.84 s'."""
    parts = [f"version {result.version}", str(result.operation or "WRITE")]
    summary = metrics_summary(result.operation, getattr(result, "metrics", None) or {})
    if summary:
        parts.append(summary)
    if elapsed is not None:
        parts.append(seconds(elapsed))
    return " · ".join(parts)


def is_commit(result: Any) -> bool:
    """A write's result (shown as its commit line), even one that also answers with rows
    (OPTIMIZE's Delta result row, for Python callers)."""
    return hasattr(result, "version") and hasattr(result, "operation")


def is_text_block(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> bool:
    """One column, one multi-line string cell (EXPLAIN's plan): shown as text, not a table."""
    return len(columns) == 1 and len(rows) == 1 and isinstance(rows[0][0], str) and "\n" in rows[0][0]


def format_result(result: Any, fmt: str = "table", elapsed: float | None = None, footer: bool = True) -> tuple[str, str]:
    """(body, status) for any statement result. ``status`` is the footer / commit line
    ('' when there is none); ``body`` the rows ('' for writes and plain messages)."""
    if result is None:
        return "", (f"OK · {seconds(elapsed)}" if elapsed is not None else "OK") if footer else ""
    if is_commit(result):
        return "", format_commit(result, elapsed)
    columns = list(getattr(result, "columns", []) or [])
    message = getattr(result, "message", None)
    if not columns:
        status = message or "OK"
        if elapsed is not None:
            status += f" · {seconds(elapsed)}"
        return "", status if (footer or message) else ""
    rows = list(getattr(result, "rows", []) or [])
    if is_text_block(columns, rows) and fmt in ("table", "vertical", "markdown"):
        return str(rows[0][0]).rstrip("\n"), ""  # EXPLAIN and other plain-text answers
    body = format_rows(columns, rows, fmt)
    status = ""
    if footer and fmt in ("table", "vertical", "markdown"):
        status = row_footer(len(rows), elapsed)
        if message:
            status = f"{message} {status}"
    return body, status


# --------------------------------------------------------------------------- errors


def _paint(text: str, code: str, color: bool) -> str:
    return f"{code}{text}{RESET}" if color and text else text


def format_error(exc: BaseException, color: bool = False, where: str = "", debug: bool = False) -> str:
    """An error for a human: a one-line head, then the caret excerpt for syntax errors, the
    winning commit and what to do for conflicts. ``where`` prefixes the head (e.g.
    'etl.sql, line 7: '). Never raises."""
    try:
        return _format_error(exc, color, where, debug)
    except Exception:  # the formatter must not take the REPL down
        return f"{where}ERROR: {type(exc).__name__}: {exc}"


def _conflict_message(exc: BaseException) -> str:
    """The exception's own sentence(s), without the parts the REPL prints on their own lines."""
    text = str(exc)
    for tail in (getattr(exc, "advice", None),):
        if tail and text.endswith(tail):
            text = text[: -len(tail)].rstrip()
    version, op = getattr(exc, "winning_version", None), getattr(exc, "winning_operation", None)
    if version is not None or op:
        at = f" at version {version}" if version is not None else ""
        text = text.replace(f"Conflicting commit: {op or 'transaction'}{at}.", "").replace("  ", " ").strip()
    return text


def _format_error(exc: BaseException, color: bool, where: str, debug: bool) -> str:
    from isolde import errors

    lines: list[str] = []
    if isinstance(exc, errors.ParseError):
        head = f"{where}Syntax error at line {exc.line}, column {exc.column}: {exc.description}"
        lines.append(_paint(head, BOLD_RED, color))
        if exc.excerpt:
            for ln in exc.excerpt.splitlines():
                lines.append(_paint(ln, RED, color) if ln.strip().startswith("^") and set(ln.strip()) <= {"^", "~"} else ln)
        if exc.expected and not re.search(r"\bexpected\b", exc.description or ""):
            shown = ", ".join(list(exc.expected)[:8]) + (", ..." if len(exc.expected) > 8 else "")
            lines.append(_paint(f"expected one of: {shown}", DIM, color))
        return "\n".join(lines)
    if isinstance(exc, errors.ConcurrentModificationException):
        head = f"{where}{type(exc).__name__} [{exc.error_class}]"
        lines.append(_paint(head, BOLD_RED, color))
        lines.append(_conflict_message(exc))
        if exc.winning_version is not None or exc.winning_operation:
            at = f" at version {exc.winning_version}" if exc.winning_version is not None else ""
            lines.append(_paint(f"Winning commit: {exc.winning_operation or 'a transaction'}{at}.", YELLOW, color))
        advice = getattr(exc, "advice", "") or ""
        hint = "What to do: re-run the statement; it will read the table at its new version."
        if advice and advice != "Please try the operation again." and advice not in hint:
            hint += " " + advice.replace("Please try the operation again, or", "Or")
        lines.append(_paint(hint, YELLOW, color))
        return "\n".join(lines)
    if isinstance(exc, errors.IsoldeError):
        label = "ERROR"
        if isinstance(exc, errors.InternalError):
            label = "INTERNAL ERROR"
        lines.append(_paint(f"{where}{label} [{exc.error_class}]: {exc}", BOLD_RED, color))
        return "\n".join(lines)
    if type(exc).__module__.startswith(("pyspark", "py4j")):
        text = str(exc).strip().splitlines()
        first = text[0] if text else type(exc).__name__
        lines.append(_paint(f"{where}Spark error: {first}", BOLD_RED, color))
        if debug:
            lines.extend(text[1:])
        return "\n".join(lines)
    # anything else is a bug: say so, keep going
    lines.append(_paint(f"{where}INTERNAL ERROR (a bug in isolde): {type(exc).__name__}: {exc}", BOLD_RED, color))
    if debug:
        lines.append("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip())
    else:
        lines.append(_paint("(set ISOLDE_DEBUG=1 for the traceback)", DIM, color))
    return "\n".join(lines)
