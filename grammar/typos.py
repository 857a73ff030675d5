"""Keyword typos: "did you mean FROM?" for FORM, SELEC, UDPATE, WHER, ...

Two places find them. Where lark fails, the failing word is compared with the keywords the
parser expected there (``suggest``). Inside a query or expression slot sqlglot fails later
than the typo: ``SELECT * FORM t`` reads FORM as an alias of ``*`` and fails at ``t``; so
``slot_typo`` looks back from the failure over the last few words for one that is not a
keyword but is one letter-swap or two edits away from a clause keyword. Both are pure
functions over text.
"""

from __future__ import annotations

import difflib
import re
from typing import Iterable, Optional

from .splitter import BACKQUOTED, COMMENT, STRING_LITERAL

# Keywords a query or expression is made of (the ones a typo can hide in).
SLOT_KEYWORDS = frozenset(
    "SELECT FROM WHERE GROUP ORDER BY HAVING LIMIT OFFSET JOIN INNER LEFT RIGHT OUTER FULL CROSS SEMI ANTI "
    "UNION INTERSECT EXCEPT DISTINCT WITH AS ON USING VALUES BETWEEN LIKE ILIKE RLIKE CASE WHEN THEN ELSE END "
    "NOT NULL AND OR IN IS EXISTS WINDOW OVER PARTITION QUALIFY LATERAL PIVOT UNPIVOT ASC DESC NULLS "
    "FIRST LAST TRUE FALSE CAST INTERVAL ALL ANY SOME CLUSTER DISTRIBUTE SORT TABLESAMPLE".split()
)
_WORDS = re.compile(rf"(?P<skip>{COMMENT}|{STRING_LITERAL}|{BACKQUOTED})|(?P<word>[^\W\d]\w*)", re.S)
_LOOK_BACK = 2  # the word at the failure and the one before it


def suggest(word: str, keywords: Iterable[str]) -> Optional[str]:
    """The keyword ``word`` most likely misspells, or None (the word itself, short words and
    far-off words get nothing)."""
    upper = word.upper()
    pool = sorted({k.upper() for k in keywords if k and k[0].isalpha()})
    if len(upper) < 3 or upper in pool:
        return None
    pool = [k for k in pool if not upper.startswith(k)]  # ORDERS, FROMAGE are names, not typos
    for keyword in pool:  # one transposition (UDPATE, FORM) is the commonest slip
        if len(keyword) == len(upper) and _one_swap(upper, keyword):
            return keyword
    match = difflib.get_close_matches(upper, pool, n=1, cutoff=0.75)
    return match[0] if match else None


def _one_swap(a: str, b: str) -> bool:
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]


def slot_typo(text: str, failed_at: int) -> Optional[tuple[int, str, str]]:
    """(offset in ``text``, word, keyword) of the likeliest misspelt keyword among the two
    words up to and including the one at ``failed_at``, or None."""
    words = [(m.start(), m["word"]) for m in _WORDS.finditer(text, 0, _word_end(text, failed_at)) if m["word"]]
    for start, word in reversed(words[-_LOOK_BACK:]):
        keyword = suggest(word, SLOT_KEYWORDS)
        if keyword is not None:
            return start, word, keyword
    return None


def _word_end(text: str, at: int) -> int:
    end = min(max(at, 0), len(text))
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    return end
