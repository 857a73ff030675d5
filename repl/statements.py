"""Statement boundaries for the REPL, through the facade (``isolde.split_statements`` /
``isolde.is_complete``), with the REPL's own tolerant scanner as a fallback while the
grammar's splitter is not importable."""

from __future__ import annotations

import isolde

from . import sqlscan

META_PREFIX = "\\"
QUIT_WORDS = {"quit", "exit", "\\q"}


def split_statements(text: str) -> list:
    """Statements of ``text``: objects with ``text``, ``start`` and ``line`` (1-based)."""
    try:
        return list(isolde.split_statements(text))
    except (ImportError, AttributeError):
        return sqlscan.split(text)


def is_complete(text: str) -> bool:
    try:
        return bool(isolde.is_complete(text))
    except Exception:  # not importable yet, or a bug: Enter must keep working
        return sqlscan.ends_with_semicolon(text)


def is_meta(text: str) -> bool:
    stripped = text.strip()
    return stripped.startswith(META_PREFIX) or stripped.rstrip(";").strip().lower() in QUIT_WORDS


def should_submit(text: str) -> bool:
    """The REPL's Enter rule: submit an empty buffer, a meta-command (one line starting with
    a backslash, or quit/exit), or a buffer ending in a complete ';'-terminated statement
    (a ';' inside a string or a comment does not count). Otherwise Enter inserts a newline."""
    if not text.strip():
        return True
    if is_meta(text):
        return True
    return is_complete(text)


def destructive_without_where(sql: str) -> str | None:
    """'DELETE' / 'UPDATE' when ``sql`` deletes or updates every row of a table (no WHERE at
    the top level), else None. Used for the REPL's confirmation prompt."""
    toks = sqlscan.significant(sqlscan.tokenize(sql))
    # skip a leading EXPLAIN: explaining is harmless
    if not toks or toks[0].kind != "word":
        return None
    head = toks[0].upper
    if head not in ("DELETE", "UPDATE"):
        return None
    depth = 0
    for tok in toks[1:]:
        if tok.kind == "punct" and tok.value == "(":
            depth += 1
        elif tok.kind == "punct" and tok.value == ")":
            depth -= 1
        elif depth == 0 and tok.kind == "word" and tok.upper == "WHERE":
            return None
    return head
