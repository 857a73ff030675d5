"""A small, forgiving SQL tokenizer for the REPL (completion context, confirmation checks,
and a fallback statement splitter). It never fails: unterminated strings and comments
become one token that runs to the end of the text (``closed=False``).

The grammar stage owns the real parser; this only needs to know what is a word, a
string, a comment or a ``;`` -- the things an editor cares about while you type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple

WORD_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")


class Token(NamedTuple):
    kind: str  # word | number | string | qident | comment | op | punct | space | meta
    value: str
    start: int
    closed: bool = True  # False for an unterminated string / quoted identifier / comment

    @property
    def upper(self) -> str:
        return self.value.upper()


def tokenize(text: str) -> list[Token]:
    return list(_iter_tokens(text))


def _iter_tokens(text: str) -> Iterator[Token]:
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            j = i + 1
            while j < n and text[j].isspace():
                j += 1
            yield Token("space", text[i:j], i)
            i = j
        elif c == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            yield Token("comment", text[i:j], i)
            i = j
        elif c == "/" and text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            yield Token("comment", text[i:j], i, depth == 0)
            i = j
        elif c in "'\"`":
            j, closed = i + 1, False
            while j < n:
                if text[j] == "\\" and c != "`":
                    j += 2
                    continue
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:  # doubled quote
                        j += 2
                        continue
                    j += 1
                    closed = True
                    break
                j += 1
            j = min(j, n)
            yield Token("qident" if c == "`" else "string", text[i:j], i, closed)
            i = j
        elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] in "._"):
                j += 1
            yield Token("number", text[i:j], i)
            i = j
        elif c in WORD_CHARS or c.isalpha():
            j = i + 1
            while j < n and (text[j] in WORD_CHARS or text[j].isalpha()):
                j += 1
            yield Token("word", text[i:j], i)
            i = j
        elif c == "\\":
            j = i + 1
            while j < n and not text[j].isspace():
                j += 1
            yield Token("meta", text[i:j], i)
            i = j
        elif c in "(),;.*":
            yield Token("punct", c, i)
            i += 1
        else:
            j = i + 1
            while j < n and text[j] in "<>=!|&+-/%^~:" and not text.startswith("--", j) and not text.startswith("/*", j):
                j += 1
            yield Token("op", text[i:j], i)
            i = j


def significant(tokens: list[Token]) -> list[Token]:
    """Tokens without whitespace and comments."""
    return [t for t in tokens if t.kind not in ("space", "comment")]


@dataclass(frozen=True)
class Piece:
    """A statement cut out of a script: its text (no ';'), offset and 1-based start line."""

    text: str
    start: int
    line: int


def split(text: str) -> list[Piece]:
    """Split on top-level ';' (fallback for ``isolde.split_statements``). Empty pieces dropped."""
    pieces: list[Piece] = []
    begin = 0
    for tok in _iter_tokens(text):
        if tok.kind == "punct" and tok.value == ";":
            _add_piece(pieces, text, begin, tok.start)
            begin = tok.start + 1
    _add_piece(pieces, text, begin, len(text))
    return pieces


def _add_piece(pieces: list[Piece], text: str, begin: int, end: int) -> None:
    chunk = text[begin:end]
    body = chunk.strip()
    if not body or not significant(tokenize(body)):
        return
    offset = begin + (len(chunk) - len(chunk.lstrip()))
    pieces.append(Piece(body, offset, text.count("\n", 0, offset) + 1))


def ends_with_semicolon(text: str) -> bool:
    """True when the last significant token is a top-level ';' (fallback for ``isolde.is_complete``)."""
    toks = [t for t in tokenize(text) if t.kind != "space"]
    # a trailing comment after ';' is fine, an unterminated one is not
    while toks and toks[-1].kind == "comment" and toks[-1].closed:
        toks.pop()
    return bool(toks) and toks[-1].kind == "punct" and toks[-1].value == ";"
