"""No input, however malformed, raises anything but ParseError."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from isolde import parse
from isolde.errors import ParseError
from isolde.grammar.splitter import split_statements

CORPUS = [s.text for f in sorted(Path(__file__).with_name("golden").glob("*.sql")) for s in split_statements(f.read_text())]
_TOKENS = re.compile(r"'[^']*'|`[^`]*`|\w+|\s+|.", re.S)
JUNK = st.text(alphabet="();,.*='\"`-/\\ \n\tabcSELECTWHENMATCHED0123456789<>!$#@[]{}|", max_size=12)


def parses_or_parse_error(sql: str) -> None:
    try:
        parse(sql)
    except ParseError as e:
        assert e.line >= 1 and e.column >= 1
        assert e.excerpt


@st.composite
def mutated(draw):
    """A corpus statement with tokens dropped, duplicated, swapped or junk inserted."""
    tokens = _TOKENS.findall(draw(st.sampled_from(CORPUS)))
    for _ in range(draw(st.integers(1, 4))):
        if not tokens:
            break
        i = draw(st.integers(0, len(tokens) - 1))
        op = draw(st.sampled_from(["drop", "dup", "swap", "junk", "truncate"]))
        if op == "drop":
            del tokens[i]
        elif op == "dup":
            tokens.insert(i, tokens[i])
        elif op == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif op == "junk":
            tokens.insert(i, draw(JUNK))
        else:
            tokens = tokens[:i]
    return "".join(tokens)


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_mutated_statements(sql):
    parses_or_parse_error(sql)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=60))
def test_random_text(sql):
    parses_or_parse_error(sql)


def test_non_string_input():
    parses_or_parse_error(None)  # type: ignore[arg-type]
