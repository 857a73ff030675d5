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


#: a wait for Spark shorter than this is not worth a mention
WAIT_SHOWN_AFTER = 0.05


def timing(elapsed: float, waited: float | None = None) -> str:
    """'0.84 s', or '12.30 s (8.10 s waiting for Spark to start)' when the statement had to
    wait for Spark (``elapsed`` includes that wait)."""
    text = seconds(elapsed)
    if waited is not None and waited >= WAIT_SHOWN_AFTER:
        text += f" ({seconds(min(waited, elapsed))} waiting for Spark to start)"
    return text


def row_footer(n: int, elapsed: float | None = None, waited: float | None = None) -> str:
    text = f"({plural(n, 'row')})"
    if elapsed is not None:
        text += f" · {timing(elapsed, waited)}"
    return text


def size_pretty(n: Any) -> str:
    """A byte count as PostgreSQL's pg_size_pretty shows it: '8191 bytes', '16 kB', '1234 MB'."""
    n = _as_int(n)
    if n is None:
        return ""
    if abs(n) < 10 * 1024:
        return f"{n} bytes"
    value = n / 1024
    for unit in ("kB", "MB", "GB", "TB"):
        if abs(value) < 10 * 1024 - 0.5:
            return f"{int(value + 0.5)} {unit}"
        value /= 1024
    return f"{int(value + 0.5)} PB"


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
        restored = _as_int(metrics.get("numRestoredFiles"))
        if restored is not None:
            parts.append(f"{plural(restored, 'file')} restored")
        deleted = _as_int(metrics.get("numDeletedFiles"))
        if deleted is not None and removed is None:
            parts.append(f"{plural(deleted, 'file')} deleted")
    return ", ".join(parts)


def format_commit(result: Any, elapsed: float | None = None, waited: float | None = None) -> str:
    """'version 12 · MERGE · 3 updated, 1 inserted · 0.84 s' (a statement inside a transaction:
    'staged (commits at COMMIT) · ...'; a transaction over several tables: 'acc version 7, audit
    version 3 · ...')."""
    versions = getattr(result, "versions", None)
    if versions:
        where = ", ".join(f"{table} version {version}" for table, version in versions.items())
    else:
        where = f"version {result.version}" if result.version is not None else "staged (commits at COMMIT)"
    parts = [where, str(result.operation or "WRITE")]
    summary = metrics_summary(result.operation, getattr(result, "metrics", None) or {})
    if summary:
        parts.append(summary)
    if elapsed is not None:
        parts.append(timing(elapsed, waited))
    return " · ".join(parts)


def commit_rows(result: Any) -> tuple[list, list] | None:
    """(columns, rows) of a commit that also answers with a result row (OPTIMIZE's path and
    metrics, RESTORE's file counts, DML's num_affected_rows ...), or None."""
    columns = getattr(result, "columns", None)
    if not columns:
        return None
    try:
        rows = [tuple(r) for r in (getattr(result, "rows", None) or [])]
    except Exception:  # a result row is a courtesy: the commit line still says what happened
        return None
    return [str(c) for c in columns], rows


def is_commit(result: Any) -> bool:
    """A write's result (shown as its commit line), even one that also answers with rows
    (OPTIMIZE's Delta result row, for Python callers)."""
    return hasattr(result, "version") and hasattr(result, "operation")


def is_text_block(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> bool:
    """One column, one multi-line string cell (EXPLAIN's plan): shown as text, not a table."""
    return len(columns) == 1 and len(rows) == 1 and isinstance(rows[0][0], str) and "\n" in rows[0][0]


HISTORY_KEY_COLUMNS = {"version", "timestamp", "operation", "operationParameters", "operationMetrics"}
#: DESCRIBE HISTORY columns a narrow terminal loses first (the widest ones are cut before that)
HISTORY_DROP_ORDER = ("engineInfo", "userMetadata", "userName", "isBlindAppend", "isolationLevel", "readVersion",
                      "operationMetrics", "operationParameters", "timestamp")
#: the DESCRIBE HISTORY columns that may be cut (free text); the others are shown whole or not at all
HISTORY_FOLDABLE = ("operationParameters", "operationMetrics", "engineInfo", "userMetadata", "userName")
HUMAN_FORMATS = ("table", "vertical", "markdown")


def is_history(columns: Sequence[str]) -> bool:
    return HISTORY_KEY_COLUMNS <= {str(c) for c in columns}


def format_result(result: Any, fmt: str = "table", elapsed: float | None = None, footer: bool = True, *,
                  waited: float | None = None, width: int | None = None) -> tuple[str, str]:
    """(body, status) for any statement result. ``status`` is the footer / commit line
    ('' when there is none); ``body`` the rows ('' for plain messages; a commit that also
    answers with result rows shows them as a small table in the human formats).

    ``waited``: seconds of ``elapsed`` spent waiting for Spark to start. ``width``: the
    terminal's width, to fit DESCRIBE HISTORY and commit result tables into (table format)."""
    if result is None:
        return "", (f"OK · {timing(elapsed, waited)}" if elapsed is not None else "OK") if footer else ""
    if is_commit(result):
        body = ""
        table = commit_rows(result) if fmt in HUMAN_FORMATS else None
        if table is not None and table[1]:
            columns, rows = table
            note = ""
            if width and fmt == "table":
                columns, rows, note = fit_table(columns, rows, width)
            body = format_rows(columns, rows, fmt) + (f"\n{_wrap(note, width)}" if note else "")
        return body, format_commit(result, elapsed, waited)
    columns = list(getattr(result, "columns", []) or [])
    message = getattr(result, "message", None)
    if not columns:
        status = message or "OK"
        if elapsed is not None:
            status += f" · {timing(elapsed, waited)}"
        return "", status if (footer or message) else ""
    rows = list(getattr(result, "rows", []) or [])
    if is_text_block(columns, rows) and fmt in ("table", "vertical", "markdown"):
        return str(rows[0][0]).rstrip("\n"), ""  # EXPLAIN and other plain-text answers
    note = ""
    shown_columns, shown_rows = columns, rows
    if width and fmt == "table" and is_history(columns):
        shown_columns, shown_rows, note = fit_table(columns, rows, width, drop_order=HISTORY_DROP_ORDER,
                                                    drop_empty=True, foldable=HISTORY_FOLDABLE)
    body = format_rows(shown_columns, shown_rows, fmt) + (f"\n{_wrap(note, width)}" if note else "")
    status = ""
    if footer and fmt in ("table", "vertical", "markdown"):
        status = row_footer(len(rows), elapsed, waited)
        if message:
            status = f"{message} {status}"
    return body, status


# --------------------------------------------------------------------------- fitting a table to a width


def _wrap(text: str, width: int | None) -> str:
    """``text`` in lines of at most ``width`` characters (a note under a fitted table)."""
    import textwrap

    return textwrap.fill(text, width, break_on_hyphens=False) if width and width > 20 else text

ELLIPSIS = "…"
#: a cut column keeps at least this many characters (or its header's width, or all of it)
MIN_CUT_WIDTH = 12


def truncate(text: str, width: int) -> str:
    """``text`` cut to ``width`` display cells, ending in '…' when cut."""
    if _width(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        w = _width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + ELLIPSIS


def _is_empty(value: Any) -> bool:
    return value is None or value == "" or (isinstance(value, (dict, list, tuple)) and not value)


def table_width(widths: Sequence[int]) -> int:
    """Display width of a ``format_rows(..., 'table')`` table whose columns are ``widths`` wide."""
    return sum(widths) + 3 * len(widths) + 1


def fit_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], width: int, *,
              drop_order: Sequence[str] = (), drop_empty: bool = False,
              foldable: Sequence[str] | None = None) -> tuple[list, list, str]:
    """``(columns, rows, note)`` for a table at most ``width`` cells wide. When it is wider:
    columns with no value are left out (``drop_empty``); the widest ``foldable`` columns
    (default: all) are cut (cells end in '…'), down to MIN_CUT_WIDTH or their header; when that
    is not enough, columns are left out, ``drop_order`` first, then from the right. ``note``
    says what was left out or cut ('' when nothing was); cut cells become strings, the others
    keep their values (numbers stay right-aligned)."""
    cols = [str(c) for c in columns]
    keep = list(range(len(cols)))
    texts = [[cell_text(v) for v in r] for r in rows]
    natural = {i: max([_width(cols[i])] + [_width(t[i]) for t in texts]) for i in keep}
    if table_width(list(natural.values())) <= width:
        return cols, [tuple(r) for r in rows], ""
    empty: list[str] = []
    if drop_empty and rows:
        empty = [cols[i] for i in keep if all(_is_empty(r[i]) for r in rows)]
        keep = [i for i in keep if cols[i] not in empty]
    can_fold = set(keep) if foldable is None else {i for i in keep if cols[i] in set(foldable)}

    def floor(i: int) -> int:
        return min(natural[i], max(MIN_CUT_WIDTH, _width(cols[i]))) if i in can_fold else natural[i]

    hidden: list[str] = []
    if table_width([natural[i] for i in keep]) > width:
        ranked = [i for name in drop_order for i in keep if cols[i] == name]
        while len(keep) > 1 and table_width([floor(i) for i in keep]) > width:
            victim = next((i for i in ranked if i in keep), keep[-1])
            keep.remove(victim)
            hidden.append(cols[victim])
    folding = [i for i in keep if i in can_fold]
    budget = width - table_width([0] * len(keep)) - sum(natural[i] for i in keep if i not in can_fold)
    cap = max((natural[i] for i in folding), default=0)
    if sum(natural[i] for i in folding) > budget:  # the largest cap whose cut widths fit
        lo, hi = 0, cap
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sum(min(natural[i], max(floor(i), mid)) for i in folding) <= budget:
                lo = mid
            else:
                hi = mid - 1
        cap = lo
    widths = {i: min(natural[i], max(floor(i), cap)) if i in can_fold else natural[i] for i in keep}
    cut = [cols[i] for i in keep if widths[i] < natural[i]]
    out_rows = []
    for r, t in zip(rows, texts):
        out_rows.append(tuple(truncate(t[i], widths[i]) if _width(t[i]) > widths[i] else r[i] for i in keep))
    parts = []
    if hidden:
        parts.append(f"not shown: {', '.join(hidden)}")
    if cut:
        parts.append(f"cut: {', '.join(cut)}")
    if empty:
        parts.append(f"empty: {', '.join(empty)}")
    note = f"({'; '.join(parts)}; \\x shows every column in full)" if parts else ""
    return [cols[i] for i in keep], out_rows, note


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
        head = f"{where}{exc.headline} at line {exc.line}, column {exc.column}: {exc.description}"
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
        hint = "What to do: re-run the statement; it will read the table at its new version."
        hints = getattr(exc, "hints", None)
        if hints is None:  # an exception from elsewhere: its advice beyond trying again
            advice = getattr(exc, "advice", "") or ""
            hints = [advice.replace("Please try the operation again.", "").strip()]
        extra = " ".join(h for h in hints if h)
        if extra:
            hint += " " + extra
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
