"""What a result looks like on a terminal: a table, the same rows vertically, or the pager.

The pager is for results taller than the terminal, never for short ones: a short result shown in
``less`` waits at ``(END)`` for ``q``, and the next statement typed goes to less. A short table
wider than the terminal is shown vertically (one ``column | value`` line per field, as psql's
``\\x auto``) when that fits in height; otherwise as it is. Pure functions, unit-tested."""

from __future__ import annotations

from typing import Callable, Optional

# lines kept free below a result: the status line and the next prompt
RESERVED_LINES = 2


def _too_wide(text: str, columns: int) -> bool:
    from .formatting import _width

    return any(_width(line) > columns for line in text.splitlines())


def fits_in_height(text: str, lines: int) -> bool:
    return text.count("\n") + 1 <= lines - RESERVED_LINES


def should_page(text: str, lines: int) -> bool:
    """Page only a result taller than the terminal."""
    return not fits_in_height(text, lines)


def terminal_body(table: str, vertical: Optional[Callable[[], str]], columns: int, lines: int) -> str:
    """The body to show for a table result on a ``columns`` x ``lines`` terminal: the table, or
    its rows vertically when the table is wider than the terminal but short, and the vertical
    form fits in height too (``vertical``: renders it; None when the result has no rows form)."""
    if vertical is None or not fits_in_height(table, lines) or not _too_wide(table, columns):
        return table
    shown = vertical()
    return shown if shown and fits_in_height(shown, lines) else table
