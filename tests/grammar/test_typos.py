"""Keyword typos get a "did you mean": table-driven over the lark and sqlglot paths."""

from __future__ import annotations

import pytest

from isolde.errors import ParseError
from isolde.grammar.parser import parse
from isolde.grammar.typos import slot_typo, suggest

CASES = [  # statement, the misspelt word the caret points at, the suggestion
    ("SELEC * FROM t", "SELEC", "SELECT"),
    ("UDPATE t SET a = 1", "UDPATE", "UPDATE"),
    ("TRUNCTE TABLE t", "TRUNCTE", "TRUNCATE"),
    ("SELECT * FORM t", "FORM", "FROM"),
    ("SELECT a FROM t WHER a = 1", "WHER", "WHERE"),
    ("SELECT a, count(*) FROM t GROPU BY a", "GROPU", "GROUP"),
    ("DELETE FROM t WHERE a = 1 ADN b = 2", "ADN", "AND"),
    ("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UDPATE SET *", "UDPATE", "UPDATE"),
    ("INSERT INT t VALUES (1)", "INT", "INTO"),
    ("OPTIMZE t", "OPTIMZE", "OPTIMIZE"),
]


@pytest.mark.parametrize("sql, word, keyword", CASES)
def test_keyword_typo_is_named_and_pointed_at(sql, word, keyword):
    with pytest.raises(ParseError) as info:
        parse(sql)
    e = info.value
    assert f"did you mean {keyword.lower()}?" in str(e).lower()
    assert e.column == sql.index(word) + 1
    assert e.token == word


@pytest.mark.parametrize("sql", [
    "SELECT * FROM orders = 1",  # a name that extends a keyword is not a typo
    "DELETE FORM t",  # the only keyword expected is already named: no redundant suggestion
    "SELECT * FROM t WHERE a = = 1",
])
def test_no_suggestion_where_none_fits(sql):
    with pytest.raises(ParseError) as info:
        parse(sql)
    assert "did you mean" not in str(info.value).lower()


@pytest.mark.parametrize("word, keywords, expected", [
    ("FORM", ["FROM", "FOR"], "FROM"),
    ("form", ["FROM"], "FROM"),
    ("FROM", ["FROM"], None),
    ("xyzzy", ["FROM", "WHERE"], None),
    ("to", ["TO", "OF"], None),  # too short to guess
    ("ORDERS", ["ORDER"], None),
    ("SELEC", ["SELECT", "SET"], "SELECT"),
])
def test_suggest(word, keywords, expected):
    assert suggest(word, keywords) == expected


def test_slot_typo_looks_only_at_the_failure_and_the_word_before():
    assert slot_typo("SELECT * FORM t", 14) == (9, "FORM", "FROM")
    assert slot_typo("SELEC a FROM t x y z", 19) is None
    assert slot_typo("SELECT 'FORM' t", 14) is None  # inside a string literal
