"""Golden fixtures: every statement of golden/*.sql and its AST dump in golden/*.txt.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 pytest tests/grammar`` and
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from isolde.grammar.parser import parse

GOLDEN = Path(__file__).with_name("golden")
SOURCES = sorted(GOLDEN.glob("*.sql"))


def render(sql: str) -> str:
    """Each statement: a header with its line and text, then its dump."""
    out = []
    for stmt in parse(sql):
        first = stmt.text.splitlines()[0]
        out.append(f"-- line {stmt.span.line}: {first}\n{stmt.dump()}\n")
    return "\n".join(out)


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_golden(source: Path):
    expected_file = source.with_suffix(".txt")
    actual = render(source.read_text())
    if os.environ.get("UPDATE_GOLDEN"):
        expected_file.write_text(actual)
    assert actual == expected_file.read_text()


def test_golden_covers_every_statement_class():
    from isolde.grammar import ast

    kinds = {c.__name__ for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.Statement)}
    seen = {type(s).__name__ for source in SOURCES for s in parse(source.read_text())}
    assert kinds - {"Statement"} <= seen
