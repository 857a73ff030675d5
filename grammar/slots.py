"""Expression and query slots: the user's text of a slot, parsed by sqlglot (databricks).

sqlglot's parser is called directly (cached dialect, one tokenizer pass per slot), and
not at all for slots whose tree is known from the text alone: a plain column reference
(``s.id``), a literal, one arithmetic operation on those (``n + 1``), or comparisons of
them joined by AND (``t.id = s.id AND t.dt >= '2024-01-01'``), which covers most MERGE ON /
SET / VALUES and many WHERE slots. Those trees equal what sqlglot builds (tests check it).

Time travel in queries needs no pre-processing: sqlglot 30 parses ``VERSION AS OF n`` /
``TIMESTAMP AS OF expr`` and ``delta.`/path``` on databricks table references, and
``Query.tables`` is read from its tree (depth-first, CTE names left out). sqlglot keeps
source offsets for literals only, so a ``TIMESTAMP AS OF`` expression other than a
literal gets sqlglot's rendering of it as its ``Expr.sql``.

Errors inside a slot are re-raised as :class:`isolde.errors.ParseError` with the position
translated from the slot to the whole input.
"""

from __future__ import annotations

import re

import sqlglot.errors
import sqlglot.expressions as exp
from sqlglot.dialects.dialect import Dialect

from isolde.errors import ParseError, caret_excerpt

from .ast import Expr, Query, Span, TableRef
from .splitter import COMMENT, STRING, UNTERMINATED

DIALECT = Dialect.get_or_raise("databricks")
_KEYWORDS = frozenset(DIALECT.tokenizer_class.KEYWORDS)
_NAME = r"(?:[A-Za-z_]\w*|`[^`]+`)"
_SIMPLE_COLUMN = re.compile(rf"{_NAME}(?:\.{_NAME}){{0,3}}")
_SIMPLE_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SIMPLE_STRING = re.compile(r"'[^'\\]*'")
_COLUMN_PARTS = ("this", "table", "db", "catalog")
_OPERAND = rf"{_NAME}(?:\.{_NAME}){{0,3}}|\d+(?:\.\d+)?|'[^'\\]*'"
_COMPARISON = re.compile(rf"(?P<left>{_OPERAND})\s*(?P<op><>|!=|<=|>=|=|<|>)\s*(?P<right>{_OPERAND})(?![\w.`'])")
_COMPARISONS = {"=": exp.EQ, "<>": exp.NEQ, "!=": exp.NEQ, "<": exp.LT, "<=": exp.LTE, ">": exp.GT, ">=": exp.GTE}
_ARITHMETIC = re.compile(rf"(?P<left>{_OPERAND})\s*(?P<op>[-+*])\s*(?P<right>{_OPERAND})")
_ARITHMETICS = {"+": exp.Add, "-": exp.Sub, "*": exp.Mul}
_CONSTANTS = {"TRUE": lambda: exp.Boolean(this=True), "FALSE": lambda: exp.Boolean(this=False), "NULL": exp.Null}
_COMPARE_CHARS = re.compile(r"[=<>]")
_AND = re.compile(r"\s+AND\s+", re.I)
_LEAVES = frozenset({exp.Column, exp.Identifier, exp.Literal, exp.DataType, exp.Star, exp.Boolean, exp.Null})
_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.SENTINEL.*?>")
_UNTERMINATED = re.compile(rf"(?:{COMMENT}|{STRING}|[^'\"`/]|/(?!\*))*(?={UNTERMINATED})", re.S)


def _line_col(source: str, offset: int) -> tuple[int, int]:
    return source.count("\n", 0, offset) + 1, offset - (source.rfind("\n", 0, offset) + 1) + 1


def error_at(source: str, offset: int, description: str, token: str | None = None, expected=()) -> ParseError:
    """A ParseError at character ``offset`` of ``source`` (the whole input)."""
    line, column = _line_col(source, offset)
    width = len(token) if token and "\n" not in token else 1
    return ParseError(
        description,
        line=line,
        column=column,
        token=token,
        expected=expected,
        excerpt=caret_excerpt(source, line, column, width),
    )


def span_of(token) -> Span:
    return Span(token.start_pos, token.end_pos, token.line, token.column, token.end_line, token.end_column)


def fast_tree(text: str):
    """The sqlglot tree of a trivial slot, or None when sqlglot must parse it: an operand
    (column, unsigned number, escape-free string, TRUE/FALSE/NULL), one + - * of two
    operands (``SET n = n + 1``), or comparisons of two operands joined by AND (the usual
    shape of MERGE ON and WHERE conditions)."""
    tree = _operand(text)
    if tree is not None:
        return tree
    m = _ARITHMETIC.fullmatch(text)
    if m is not None:
        left, right = _operand(m["left"]), _operand(m["right"])
        return None if left is None or right is None else _ARITHMETICS[m["op"]](this=left, expression=right)
    if not _COMPARE_CHARS.search(text):
        return None
    pos, tree = 0, None
    while True:
        m = _COMPARISON.match(text, pos)
        if m is None:
            return None
        left, right = _operand(m["left"]), _operand(m["right"])
        if left is None or right is None:
            return None
        node = _COMPARISONS[m["op"]](this=left, expression=right)
        tree = node if tree is None else exp.And(this=tree, expression=node)
        pos = m.end()
        if pos == len(text):
            return tree
        m = _AND.match(text, pos)
        if m is None:
            return None
        pos = m.end()


def _operand(text: str):
    constant = _CONSTANTS.get(text.upper())
    if constant is not None:
        return constant()
    if _SIMPLE_COLUMN.fullmatch(text):
        parts = text.split(".") if "`" not in text else re.findall(_NAME, text)
        if any(p[0] != "`" and p.upper() in _KEYWORDS for p in parts):
            return None
        idents = [exp.Identifier(this=p[1:-1], quoted=True) if p[0] == "`" else exp.Identifier(this=p, quoted=False) for p in reversed(parts)]
        return exp.Column(**dict(zip(_COLUMN_PARTS, idents)))
    if _SIMPLE_NUMBER.fullmatch(text):
        return exp.Literal.number(text)
    if _SIMPLE_STRING.fullmatch(text):
        return exp.Literal.string(text[1:-1])
    return None


def _parse(source: str, token, into):
    """Run sqlglot on a slot token; translate its errors to the whole input."""
    text = token.value
    parser = DIALECT.parser(error_message_context=len(text) + 1)
    try:
        tokens = DIALECT.tokenize(text)
        return parser.parse_into(into, tokens, text)[0] if into else parser.parse(tokens, text)[0]
    except sqlglot.errors.ParseError as e:
        info = e.errors[0] if e.errors else {}
        offset = token.start_pos + len(info.get("start_context") or "")
        description = _TOKEN_REPR.sub("the end", info.get("description") or str(e))
        raise error_at(source, offset, description, info.get("highlight") or None) from None
    except Exception as e:  # sqlglot's tokenizer and parser raise more than ParseError on bad input
        unterminated = _UNTERMINATED.match(text)
        if unterminated:
            at = unterminated.end()
            raise error_at(source, token.start_pos + at, "unterminated quote or comment", text[at]) from None
        raise error_at(source, token.start_pos, f"invalid expression: {e}", text.split(None, 1)[0]) from None


def expression(source: str, token) -> Expr:
    tree = fast_tree(token.value)
    if tree is None:
        tree = _parse(source, token, exp.Condition)
    if tree is None:
        raise error_at(source, token.start_pos, "expected an expression", token.value)
    return Expr(token.value, tree, span=span_of(token))


def query(source: str, token) -> Query:
    tree = _parse(source, token, None)
    if not isinstance(tree, (exp.Query, exp.Values)):
        raise error_at(source, token.start_pos, "expected a query", token.value.split(None, 1)[0])
    return Query(token.value, tree, _tables(source, token, tree), span=span_of(token))


def _tables(source: str, token, tree) -> tuple[TableRef, ...]:
    """Every table the query reads (CTE names excluded), with its time travel."""
    tables, ctes = [], set()
    stack = [tree]
    while stack:  # depth-first, in source order, not entering nodes that hold no tables
        node = stack.pop()
        if type(node) in _LEAVES:
            continue
        if isinstance(node, exp.Table):
            if isinstance(node.this, exp.Identifier):  # not a table-valued function
                tables.append(node)
        elif isinstance(node, exp.CTE):
            ctes.add(node.alias_or_name.lower())
        for value in reversed(node.args.values()):
            if isinstance(value, exp.Expression):
                stack.append(value)
            elif type(value) is list:
                stack.extend(v for v in reversed(value) if isinstance(v, exp.Expression))
    refs = []
    for table in tables:
        parts = tuple(p.name for p in table.parts)
        if len(parts) == 1 and parts[0].lower() in ctes:
            continue
        refs.append(table_ref(parts, _quoted_last(table), **_time_travel(source, token, table)))
    return tuple(refs)


def _quoted_last(table: exp.Table) -> bool:
    return bool(table.this.args.get("quoted"))


def table_ref(parts: tuple[str, ...], quoted_last: bool, span=None, **travel) -> TableRef:
    """``delta.`/path``` (a backquoted name in the ``delta`` namespace) becomes a path."""
    if len(parts) == 2 and quoted_last and parts[0].lower() == "delta":
        return TableRef(path=parts[1], span=span, **travel)
    return TableRef(parts=parts, span=span, **travel)


def _time_travel(source: str, token, table: exp.Table) -> dict:
    version = table.args.get("version")
    if not isinstance(version, exp.Version):
        return {}
    value = version.expression
    if version.name.upper() == "VERSION":
        if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
            return {"version": int(value.this)}
        raise error_at(source, token.start_pos, "VERSION AS OF needs an integer version", token.value.split(None, 1)[0])
    start, end = value.meta.get("start"), value.meta.get("end")
    if start is not None and end is not None:
        text = token.value[start : end + 1]
        origin = token.start_pos + start
        span = Span(origin, origin + len(text), *_line_col(source, origin), *_line_col(source, origin + len(text)))
        return {"timestamp": Expr(text, value, span=span)}
    return {"timestamp": Expr(value.sql(dialect=DIALECT), value)}

