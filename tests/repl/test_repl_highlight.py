"""The pygments lexer of the isolde dialect."""

import pytest
from pygments.token import Comment, Keyword, Name, Number, String

from isolde.repl.highlight import IsoldeLexer


def tokens(text):
    return [(t, v) for t, v in IsoldeLexer().get_tokens(text) if v.strip()]


@pytest.mark.parametrize("word", ["OPTIMIZE", "ZORDER", "REORG", "APPLY", "PURGE", "TBLPROPERTIES", "VACUUM",
                                  "MERGE", "MATCHED", "SOURCE", "RESTORE", "HISTORY", "DETAIL", "UNIFORM",
                                  "optimize", "Merge"])
def test_delta_keywords(word):
    assert tokens(word) == [(Keyword, word)]


def test_statement_tokens():
    got = tokens("MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN DELETE")
    assert [v for t, v in got if t is Keyword] == ["MERGE", "INTO", "USING", "ON", "WHEN", "NOT", "MATCHED", "BY",
                                                   "SOURCE", "THEN", "DELETE"]
    assert (Name, "id") in got


def test_strings_comments_numbers_and_identifiers_are_not_keywords():
    got = tokens("SELECT 'MERGE;' AS `select`, 42, 1.5 -- OPTIMIZE\n/* REORG /* nested */ ; */ FROM optimized")
    assert (String.Single, "'MERGE;'") in got
    assert (Name.Quoted, "`select`") in got
    assert (Number.Integer, "42") in got and (Number.Float, "1.5") in got
    assert (Comment.Single, "-- OPTIMIZE") in got
    assert not any(v == "REORG" and t is Keyword for t, v in got)
    assert (Name, "optimized") in got  # a keyword prefix is not a keyword


def test_unterminated_string_while_typing():
    kind, value = tokens("SELECT 'abc")[-1]
    assert kind is String.Single and value.strip() == "'abc"


def test_meta_command_and_function():
    assert tokens("\\dt")[0] == (Keyword.Pseudo, "\\dt")
    assert (Name.Function, "coalesce") in tokens("SELECT coalesce(a, 0)")
