"""Syntax highlighting of the isolde dialect: a pygments lexer (Spark SQL + Delta commands
such as OPTIMIZE, ZORDER, REORG, VACUUM, TBLPROPERTIES and the MERGE clauses) and the
prompt-toolkit style used by the REPL."""

from __future__ import annotations

import re

from pygments.lexer import RegexLexer, bygroups, words
from pygments.token import Comment, Error, Keyword, Name, Number, Operator, Punctuation, String, Whitespace

KEYWORDS = (
    # statements and clauses
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "LIMIT", "OFFSET", "WITH", "AS", "DISTINCT",
    "UNION", "INTERSECT", "EXCEPT", "ALL", "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "OUTER", "CROSS", "SEMI",
    "ANTI", "ON", "USING", "INSERT", "INTO", "OVERWRITE", "VALUES", "UPDATE", "SET", "DELETE", "MERGE",
    "MATCHED", "WHEN", "THEN", "ELSE", "END", "CASE", "NOT", "AND", "OR", "IN", "IS", "NULL", "LIKE", "ILIKE",
    "RLIKE", "BETWEEN", "EXISTS", "ASC", "DESC", "NULLS", "FIRST", "LAST", "CREATE", "REPLACE", "TABLE",
    "TABLES", "DATABASE", "DATABASES", "SCHEMA", "SCHEMAS", "DROP", "ALTER", "ADD", "COLUMN", "COLUMNS",
    "RENAME", "TO", "IF", "PARTITIONED", "PARTITION", "CLUSTER", "LOCATION", "COMMENT", "SHOW", "DESCRIBE",
    "USE", "RESET", "EXPLAIN", "EXTENDED", "FORMATTED", "CAST", "TRUE", "FALSE", "SOURCE", "TARGET", "NAME",
    "GENERATED", "ALWAYS", "IDENTITY", "DEFAULT", "CONSTRAINT", "CHECK", "PRIMARY", "KEY",
    # Delta
    "OPTIMIZE", "ZORDER", "REORG", "APPLY", "PURGE", "UPGRADE", "UNIFORM", "ICEBERG_COMPAT_VERSION", "VACUUM",
    "RETAIN", "HOURS", "DRY", "RUN", "LITE", "RESTORE", "VERSION", "TIMESTAMP", "OF", "HISTORY", "DETAIL",
    "TBLPROPERTIES", "UNSET", "FEATURE", "TRUNCATE", "CONVERT", "DELTA", "CLONE", "SHALLOW", "DEEP",
    "STATISTICS", "NO", "SYNC", "EVOLUTION", "OPTIONS",
)
TYPES = (
    "INT", "INTEGER", "BIGINT", "SMALLINT", "TINYINT", "LONG", "SHORT", "BYTE", "FLOAT", "DOUBLE", "REAL",
    "DECIMAL", "NUMERIC", "STRING", "VARCHAR", "CHAR", "BOOLEAN", "DATE", "TIMESTAMP_NTZ", "BINARY", "ARRAY",
    "MAP", "STRUCT", "INTERVAL", "VARIANT",
)


class IsoldeLexer(RegexLexer):
    """Spark SQL as isolde speaks it, with the Delta Lake commands."""

    name = "isolde"
    aliases = ["isolde", "isolde-sql"]
    filenames = ["*.sql"]
    flags = re.IGNORECASE | re.MULTILINE

    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"--.*?$", Comment.Single),
            (r"/\*", Comment.Multiline, "block-comment"),
            (r"^\\\S*", Keyword.Pseudo),  # meta-command
            (r"'(?:\\.|''|[^'\\])*'?", String.Single),
            (r'"(?:\\.|""|[^"\\])*"?', String.Double),
            (r"`(?:``|[^`])*`?", Name.Quoted),
            (r"0[xX][0-9a-fA-F]+", Number.Hex),
            (r"\d+\.\d*(?:[eE][+-]?\d+)?[dDfF]?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+", Number.Float),
            (r"\d+[lLsSyY]?(?:bd|BD)?", Number.Integer),
            (words(TYPES, suffix=r"\b"), Name.Builtin),
            (words(KEYWORDS, suffix=r"\b"), Keyword),
            (r"([a-z_][\w$]*)(\s*)(\()", bygroups(Name.Function, Whitespace, Punctuation)),
            (r"[a-z_][\w$]*", Name),
            (r"[<>=!|&+\-*/%^~:]+", Operator),
            (r"[(),;.\[\]{}]", Punctuation),
            (r".", Error),
        ],
        "block-comment": [
            (r"[^/*]+", Comment.Multiline),
            (r"/\*", Comment.Multiline, "#push"),
            (r"\*/", Comment.Multiline, "#pop"),
            (r"[/*]", Comment.Multiline),
        ],
    }


STYLE = {
    "pygments.keyword": "#5f87ff bold",
    "pygments.keyword.pseudo": "#af87ff bold",
    "pygments.name.builtin": "#00afaf",
    "pygments.name.function": "#00af87",
    "pygments.name.quoted": "#d7af5f",
    "pygments.string": "#87af5f",
    "pygments.number": "#d787af",
    "pygments.comment": "#808080 italic",
    "pygments.operator": "#af8700",
    "pygments.error": "#ff5f5f",
    "completion-menu.completion": "bg:#303030 #d0d0d0",
    "completion-menu.completion.current": "bg:#5f87af #ffffff",
    "completion-menu.meta.completion": "bg:#262626 #808080",
    "completion-menu.meta.completion.current": "bg:#5f87af #ffffff",
    "prompt": "#5f87ff bold",
    "continuation": "#808080",
    "bottom-toolbar": "bg:#262626 #a8a8a8 noreverse",
}


def prompt_lexer():
    from prompt_toolkit.lexers import PygmentsLexer

    return PygmentsLexer(IsoldeLexer)


def prompt_style():
    from prompt_toolkit.styles import Style

    return Style.from_dict(STYLE)
