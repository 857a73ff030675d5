"""The pager is for results taller than the terminal; a short, wide table is shown vertically
when that fits (issue 55: DESCRIBE DETAIL opened less on a 200-column terminal). Pure functions."""

from __future__ import annotations

import pytest

from isolde.repl import formatting, paging

WIDE = formatting.format_rows([f"column_{i}" for i in range(30)], [tuple(range(30))], "table")
NARROW = formatting.format_rows(["a", "b"], [(1, 2)], "table")
TALL = formatting.format_rows(["a"], [(i,) for i in range(100)], "table")


def _vertical_of(columns, rows):
    return lambda: formatting.format_rows(columns, rows, "vertical")


@pytest.mark.parametrize("text,lines,paged", [
    (NARROW, 24, False),
    (WIDE, 24, False),      # wide but short: never paged
    (TALL, 24, True),
    (TALL, 200, False),
    ("x\n" * 21 + "x", 24, False),  # 22 lines + status + prompt = 24
    ("x\n" * 22 + "x", 24, True),
])
def test_only_results_taller_than_the_terminal_are_paged(text, lines, paged):
    assert paging.should_page(text, lines) is paged


def test_a_short_wide_table_is_shown_vertically():
    vertical = _vertical_of([f"column_{i}" for i in range(30)], [tuple(range(30))])
    shown = paging.terminal_body(WIDE, vertical, columns=200, lines=50)
    assert shown == vertical() and "column_29" in shown and max(map(len, shown.splitlines())) <= 200


@pytest.mark.parametrize("case,columns,lines", [
    ("fits in width", 500, 50),
    ("vertical form too tall", 200, 20),   # 30 fields do not fit in 20 lines: the table as it is
    ("table itself too tall", 40, 3),      # the pager's case, unchanged
])
def test_the_table_is_kept(case, columns, lines):
    vertical = _vertical_of([f"column_{i}" for i in range(30)], [tuple(range(30))])
    assert paging.terminal_body(WIDE, vertical, columns=columns, lines=lines) == WIDE


def test_no_vertical_form_keeps_the_table():
    assert paging.terminal_body(WIDE, None, columns=20, lines=50) == WIDE
