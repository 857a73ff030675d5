"""The prompt's words: the database in use and, inside BEGIN ... COMMIT, the open transaction."""

from __future__ import annotations

from typing import Optional


def prompt_text(database: str = "", transaction_tables: Optional[list] = None) -> str:
    """``isolde> ``, ``isolde:sales> ``; inside a transaction ``isolde*> `` and, once it has
    written a table, ``isolde*[accounts]> `` (nothing is committed until COMMIT)."""
    text = f"isolde:{database}" if database else "isolde"
    if transaction_tables is not None:
        text += "*"
        if transaction_tables:
            text += "[" + ", ".join(transaction_tables) + "]"
    return text + "> "
