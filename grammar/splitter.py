"""Split a script into statements, and tell whether a REPL buffer is complete.

Pure and lark-free, so the REPL can call ``is_complete`` on every keystroke. The lexical
rules are the grammar's (``isolde.lark``; the slot scanner in ``lexer.py`` imports the
patterns below), so a ``;`` separates statements exactly where the parser would see one:
never inside '...', "...", r'...', `...`, ``--`` or ``/* */`` (block comments do not
nest). Strings escape with a backslash (raw strings do not); a doubled quote ('it''s')
is two adjacent literals, which splits the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STRING_LITERAL = r"(?<![\w$])[rR]'[^']*'|(?<![\w$])[rR]\"[^\"]*\"|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
BACKQUOTED = r"`(?:[^`]|``)*`"
STRING = f"{STRING_LITERAL}|{BACKQUOTED}"
COMMENT = r"--[^\n]*|/\*.*?\*/"
# Tried only where STRING / COMMENT failed: an open quote or comment running to the end.
UNTERMINATED = r"""['"`].*|/\*.*"""

_SCAN = re.compile(
    rf"(?P<skip>\s+|{COMMENT})|(?P<semi>;)|{STRING}|(?P<open>{UNTERMINATED})|[^\s;'\"`/rR-]+|.", re.S
)


@dataclass(frozen=True)
class StatementText:
    """One statement of a script: its text (no ';', no surrounding blanks or comments)."""

    text: str
    start: int  # offset of text[0] in the script
    line: int  # 1-based line of text[0]


#: the head of a ``BEGIN ATOMIC ... END`` block, and its last piece (``END`` alone)
ATOMIC_HEAD = re.compile(r"BEGIN\s+ATOMIC\b", re.I)
ATOMIC_EMPTY = re.compile(r"BEGIN\s+ATOMIC\s+END\Z", re.I)
_ATOMIC_END = re.compile(r"END\Z", re.I)


def split_statements(text: str) -> list[StatementText]:
    """Statements of ``text`` separated by ``;`` outside quotes and comments; blank or
    comment-only pieces are dropped. A ``BEGIN ATOMIC ... END`` block is one piece, its
    inner ``;`` included (an unterminated block runs to the end of the text)."""
    return _join_atomic_blocks(text, _split(text))


def _join_atomic_blocks(text: str, pieces: list[StatementText]) -> list[StatementText]:
    out: list[StatementText] = []
    block: StatementText | None = None
    for piece in pieces:
        if block is not None:
            block = StatementText(text[block.start:piece.start + len(piece.text)], block.start, block.line)
            if _ATOMIC_END.match(piece.text):
                out.append(block)
                block = None
            continue
        if ATOMIC_HEAD.match(piece.text) and not ATOMIC_EMPTY.match(piece.text):
            block = piece
            continue
        out.append(piece)
    if block is not None:
        out.append(block)
    return out


def in_open_atomic_block(text: str) -> bool:
    """True when ``text`` ends inside a ``BEGIN ATOMIC`` block that has no ``END`` yet."""
    pieces = split_statements(text)
    if not pieces or not ATOMIC_HEAD.match(pieces[-1].text):
        return False
    return not (ATOMIC_EMPTY.match(pieces[-1].text) or re.search(r";\s*END\Z", pieces[-1].text, re.I))


def _split(text: str) -> list[StatementText]:
    out = []
    first = last = -1
    line, counted = 1, 0  # newlines are counted from the previous statement (linear time)
    for m in _SCAN.finditer(text):
        kind = m.lastgroup
        if kind == "skip":
            continue
        if kind == "semi":
            if first >= 0:
                line += text.count("\n", counted, first)
                counted = first
                out.append(StatementText(text[first:last], first, line))
            first = -1
            continue
        if first < 0:
            first = m.start()
        last = m.end()
    if first >= 0:
        line += text.count("\n", counted, first)
        out.append(StatementText(text[first:last], first, line))
    return out


def is_complete(text: str) -> bool:
    """True when the last content of ``text`` (ignoring blanks and comments) is a ``;``
    outside quotes and comments, i.e. the buffer can be run as it is."""
    last = None
    for m in _SCAN.finditer(text):
        if m.lastgroup != "skip":
            last = m.lastgroup
    return last == "semi" and not ("ATOMIC" in text.upper() and in_open_atomic_block(text))
