"""isolde's sqlglot dialect: Databricks SQL as Spark reads it, names included.

sqlglot's Databricks dialect refuses column names that Spark accepts (``minus``, ``qualify``,
``rlike``, ``values``, ``optimize``, ``xor`` ...) and, worse, renders a name back without
quotes even when it is spelled like a keyword, so text isolde generates did not parse
again. This dialect:

* reads names that are keywords somewhere as names where Spark does: a bare word from
  :data:`BARE_NAME_WORDS` followed by an operator, a comma, a parenthesis or the end is a
  column (``WHERE minus = 1``, ``SET rlike = 2``); Delta's command words (OPTIMIZE, VACUUM)
  and words Spark does not know (XOR) are plain names;
* quotes, on output, every identifier spelled like a keyword of its tokenizer, so generated
  SQL always parses back with the same names, in this dialect and in Spark (which reads
  any of its own keywords as a name when it is quoted, and most when it is not).

Use :data:`DIALECT` for parsing and :func:`sql` for rendering; never the plain "databricks"
or "spark" names.
"""

from __future__ import annotations

import functools
import re

import sqlglot
from sqlglot import exp
from sqlglot.dialects.databricks import Databricks
from sqlglot.tokens import TokenType

_SIMPLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Words that stop being keywords: Delta / Spark command words isolde parses itself, and
#: sqlglot keywords Spark does not have (``a XOR b`` is not Spark SQL).
_PLAIN_WORDS = ("OPTIMIZE", "VACUUM", "CALL", "PREPARE", "EXPLAIN", "XOR")

#: Spark non-reserved words sqlglot's parser refuses as a column: read as a name when what
#: follows can only follow an operand.
BARE_NAME_WORDS = ("MINUS", "EXCEPT", "QUALIFY", "TABLESAMPLE", "LIKE", "ILIKE", "RLIKE", "REGEXP", "VALUES",
                   "SHOW", "RENAME", "EXECUTE", "ALTER", "DROP", "INSERT", "REVOKE", "ROLLBACK", "UNCACHE",
                   "SERDEPROPERTIES", "IF")

_FOLLOWERS = frozenset({
    TokenType.EQ, TokenType.NEQ, TokenType.LT, TokenType.LTE, TokenType.GT, TokenType.GTE,
    TokenType.NULLSAFE_EQ, TokenType.PLUS, TokenType.DASH, TokenType.STAR, TokenType.SLASH, TokenType.MOD,
    TokenType.R_PAREN, TokenType.COMMA, TokenType.DOT, TokenType.IS, TokenType.IN, TokenType.BETWEEN,
    TokenType.AND, TokenType.OR, TokenType.LIKE, TokenType.ILIKE, TokenType.RLIKE, TokenType.NOT,
    TokenType.FROM, TokenType.ALIAS, TokenType.THEN, TokenType.ELSE, TokenType.END, TokenType.WHEN,
    TokenType.ASC, TokenType.DESC, TokenType.DPIPE, TokenType.AMP, TokenType.PIPE, TokenType.CARET,
    TokenType.SEMICOLON, TokenType.R_BRACKET, TokenType.SENTINEL,
})


class Isolde(Databricks):
    class Tokenizer(Databricks.Tokenizer):
        KEYWORDS = {k: v for k, v in Databricks.Tokenizer.KEYWORDS.items() if k not in _PLAIN_WORDS}
        COMMANDS = Databricks.Tokenizer.COMMANDS - {TokenType.SHOW, TokenType.EXECUTE, TokenType.RENAME}

    class Parser(Databricks.Parser):
        # ``1.50BD`` is DECIMAL(3, 2) in Spark, as written: trailing zeros are not dropped
        NORMALIZE_DECIMAL_LITERALS = False

        def build_cast(self, strict: bool, **kwargs) -> exp.Expr:
            """A ``BD`` literal keeps its own spelling (see :meth:`Isolde.Generator.cast_sql`)."""
            bd = self._prev is not None and self._prev.text.upper() == "BD" and kwargs.get("this") is not None
            text = kwargs["this"].name if bd else None
            node = super().build_cast(strict, **kwargs)
            if bd:
                node.meta["bd_literal"] = text
            return node
        BARE_NAME_TOKENS = frozenset(
            Databricks.Tokenizer.KEYWORDS[w] for w in BARE_NAME_WORDS if w in Databricks.Tokenizer.KEYWORDS
        )
        _BARE_NAME_TEXTS = frozenset(BARE_NAME_WORDS)

        # Spark reads a bare CURRENT_DATE / CURRENT_TIMESTAMP / CURRENT_USER ... as the column of
        # that name when the table has one, else as the function: kept a bare name here (the
        # planner finds no such column and widens; Spark resolves the text as it would the
        # user's). A bare current_path is always Spark's function.
        _NILADIC_TOKENS = frozenset(Databricks.Parser.NO_PAREN_FUNCTIONS) | {
            TokenType.CURRENT_SCHEMA, TokenType.CURRENT_TIME, TokenType.CURRENT_CATALOG}

        def _parse_unary(self):
            curr, nxt = self._curr, self._next
            if (curr is not None and (nxt is None or nxt.token_type != TokenType.L_PAREN)
                    and not (self._prev is not None and self._prev.token_type == TokenType.DOT)):
                if curr.token_type in self._NILADIC_TOKENS:
                    self._advance()
                    return self._parse_column_ops(exp.Column(this=exp.Identifier(this=curr.text, quoted=False)))
                if curr.token_type == TokenType.VAR and curr.text.lower() == "current_path":
                    self._advance()
                    return exp.Anonymous(this=curr.text, expressions=[])
            if (curr is not None and (curr.token_type in self.BARE_NAME_TOKENS
                                      or (curr.token_type == TokenType.VAR and curr.text.upper() in self._BARE_NAME_TEXTS))
                    and (nxt is None or nxt.token_type in _FOLLOWERS)):
                self._advance()
                column = exp.Column(this=exp.Identifier(this=curr.text, quoted=False))
                return self._parse_column_ops(column)
            return super()._parse_unary()

    class Generator(Databricks.Generator):
        def cast_sql(self, expression: exp.Cast, safe_prefix=None) -> str:
            """``0.1D`` / ``1e-45F`` stay suffixed literals: as ``CAST(0.000...1 AS FLOAT)`` a
            literal of more than 38 digits is first a DECIMAL, which Spark refuses."""
            this, to = expression.this, expression.to
            if (isinstance(this, exp.Literal) and not this.is_string and not isinstance(expression, exp.TryCast)
                    and isinstance(to, exp.DataType) and to.this in (exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE)
                    and not expression.args.get("format")):
                return f"{this.name}{'F' if to.this == exp.DataType.Type.FLOAT else 'D'}"
            if expression.meta.get("bd_literal") is not None:
                # a BD literal stays one: Spark reads CAST('99999999999999999999.999999999999999999'
                # AS DECIMAL(38, 18)) through a lossy path and overflows when it is negated
                return f"{expression.meta['bd_literal']}BD"
            return super().cast_sql(expression, safe_prefix=safe_prefix)

        def trycast_sql(self, expression: exp.TryCast) -> str:
            if expression.meta.get("bd_literal") is not None:
                return self.cast_sql(expression)
            return super().trycast_sql(expression)

        def identifier_sql(self, expression: exp.Identifier) -> str:
            if not expression.quoted and needs_quotes(expression.name):
                expression = exp.Identifier(this=expression.name, quoted=True)
            return super().identifier_sql(expression)


DIALECT = Isolde()


def needs_quotes(name: str) -> bool:
    """Must ``name`` be quoted to read back as a name? Yes when it is not a plain word, or it
    does not read back as a plain column in every position a generated name takes (``w = 1``
    also at a statement's start, ``1 < w``, ``w < 2``, ``w + 1``, ``t.w``, inside NOT (...),
    ``SELECT w FROM t``) -- worked out by parsing, once per name, so it follows the installed
    sqlglot (``if``, ``array``, ``map`` are no keywords of its tokenizer, yet misread)."""
    if not _SIMPLE_NAME.match(name):
        return True
    return not _reads_as_column(name.lower())


@functools.lru_cache(maxsize=None)
def _reads_as_column(w: str) -> bool:
    try:
        eq = sqlglot.parse_one(f"{w} = 1", read=DIALECT, into=exp.Condition)
        statement = sqlglot.parse_one(f"{w} = 1", read=DIALECT)  # a word that starts statements
        right = sqlglot.parse_one(f"1 < {w}", read=DIALECT, into=exp.Condition)
        less = sqlglot.parse_one(f"{w} < 2", read=DIALECT, into=exp.Condition)  # ARRAY<...> / MAP<...>
        nested = sqlglot.parse_one(f"NOT ({w} = 4 OR {w} IS NULL)", read=DIALECT, into=exp.Condition)
        add = sqlglot.parse_one(f"{w} + 1 > 0", read=DIALECT, into=exp.Condition)
        dotted = sqlglot.parse_one(f"t.{w} = 1", read=DIALECT, into=exp.Condition)
        select = sqlglot.parse_one(f"SELECT {w}, 1 FROM t WHERE {w} IS NULL", read=DIALECT)
    except Exception:
        return False
    if not (isinstance(statement, exp.EQ) and isinstance(right, exp.LT) and isinstance(right.expression, exp.Column)
            and right.expression.name == w and isinstance(less, exp.LT) and isinstance(less.this, exp.Column)
            and isinstance(nested, exp.Not) and [c.name for c in nested.find_all(exp.Column)] == [w, w]):
        return False

    def is_col(node, table=""):
        return isinstance(node, exp.Column) and node.name == w and node.table == table and not node.this.quoted

    return (isinstance(eq, exp.EQ) and is_col(eq.this)
            and isinstance(add, exp.GT) and isinstance(add.this, exp.Add) and is_col(add.this.this)
            and isinstance(dotted, exp.EQ) and is_col(dotted.this, "t")
            and isinstance(select, exp.Select) and is_col(select.expressions[0])
            and isinstance(select.args.get("where").this, exp.Is) and is_col(select.args["where"].this.this))


def sql(tree: exp.Expression) -> str:
    """Render a sqlglot tree as Spark SQL that parses back to the same tree (names quoted
    where they are spelled like keywords)."""
    return tree.sql(dialect=DIALECT)
