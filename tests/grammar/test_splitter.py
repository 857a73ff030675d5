"""split_statements / is_complete: ';' only separates outside quotes and comments."""

from __future__ import annotations

import pytest

from isolde.grammar.splitter import StatementText, is_complete, split_statements


def texts(script: str) -> list[str]:
    return [s.text for s in split_statements(script)]


def test_plain_split_with_offsets_and_lines():
    script = "SELECT 1;\n\n  DELETE FROM t ;\nUPDATE t SET a = 1"
    assert split_statements(script) == [
        StatementText("SELECT 1", 0, 1),
        StatementText("DELETE FROM t", 13, 3),
        StatementText("UPDATE t SET a = 1", 29, 4),
    ]
    for s in split_statements(script):
        assert script[s.start : s.start + len(s.text)] == s.text


@pytest.mark.parametrize(
    "script, expected",
    [
        ("SELECT 'a;b'; SELECT 2", ["SELECT 'a;b'", "SELECT 2"]),
        ('SELECT "a;b"; SELECT 2', ['SELECT "a;b"', "SELECT 2"]),
        ("SELECT `a;b` FROM t; SELECT 2", ["SELECT `a;b` FROM t", "SELECT 2"]),
        ("SELECT `a``;b`; SELECT 2", ["SELECT `a``;b`", "SELECT 2"]),
        ("SELECT 'it''s;'; SELECT 2", ["SELECT 'it''s;'", "SELECT 2"]),
        ("SELECT 'it\\'s;'; SELECT 2", ["SELECT 'it\\'s;'", "SELECT 2"]),
        ("SELECT 'a\\\\'; SELECT 2", ["SELECT 'a\\\\'", "SELECT 2"]),
        ("SELECT r'a\\'; SELECT 2", ["SELECT r'a\\'", "SELECT 2"]),
        ("SELECT \"say 'x;'\"; SELECT 2", ["SELECT \"say 'x;'\"", "SELECT 2"]),
        ("SELECT 'say \"x;\"'; SELECT 2", ["SELECT 'say \"x;\"'", "SELECT 2"]),
        ("SELECT 1 -- no; split\n; SELECT 2", ["SELECT 1", "SELECT 2"]),
        ("SELECT /* ; */ 1; SELECT 2", ["SELECT /* ; */ 1", "SELECT 2"]),
        ("SELECT 1 /* multi\nline; */ + 1;", ["SELECT 1 /* multi\nline; */ + 1"]),
        ("SELECT 1 - -1; SELECT 4/2", ["SELECT 1 - -1", "SELECT 4/2"]),
        ("SELECT x'1F'; SELECT 2", ["SELECT x'1F'", "SELECT 2"]),
        ("bar'x;y'; z", ["bar'x;y'", "z"]),
    ],
)
def test_semicolons_inside_quotes_and_comments(script, expected):
    assert texts(script) == expected


def test_blank_and_comment_only_pieces_are_dropped():
    assert texts(";; -- nothing\n ; /* here */ ;") == []
    assert texts("") == []
    script = "-- header\n/* block */ SELECT 1 -- tail\n;"
    (only,) = split_statements(script)
    assert only.text == "SELECT 1"
    assert only.line == 2
    assert script[only.start :].startswith("SELECT 1")


def test_unterminated_quote_or_comment_runs_to_the_end():
    """It stays a statement (not dropped as a comment) so that parsing reports it."""
    assert texts("SELECT 'a; b; c") == ["SELECT 'a; b; c"]
    assert texts("SELECT 1; /* open; comment") == ["SELECT 1", "/* open; comment"]


@pytest.mark.parametrize(
    "buffer, complete",
    [
        ("SELECT 1;", True),
        ("SELECT 1;  \n", True),
        ("SELECT 1; -- done", True),
        ("SELECT 1; /* done */", True),
        ("SELECT 1", False),
        ("", False),
        ("   \n", False),
        ("SELECT 1; SELECT 2", False),
        ("SELECT ';", False),
        ("SELECT ';'", False),
        ("SELECT ';';", True),
        ("SELECT 'it''s';", True),
        ("SELECT 'it\\';", False),
        ("SELECT 'it\\';';", True),
        ('SELECT "a;', False),
        ("SELECT `a;", False),
        ("SELECT 1 -- ;", False),
        ("SELECT 1 /* ; */", False),
        ("SELECT 1; /* open", False),
        ("SELECT r'\\';", True),
        (";", True),
    ],
)
def test_is_complete(buffer, complete):
    assert is_complete(buffer) is complete
