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

import bisect
import dataclasses
import re
import sys
import threading

import sqlglot.errors
import sqlglot.expressions as exp

from isolde.errors import ParseError, caret_excerpt

from .ast import Expr, Query, Span, TableRef
from .dialect import DIALECT as ISOLDE_DIALECT, needs_quotes
from . import typos
from .splitter import COMMENT, STRING, UNTERMINATED

DIALECT = ISOLDE_DIALECT

#: sqlglot parses recursively, about 20 Python frames per level of parentheses: Python's
#: default limit (1,000) stopped at 49 levels, which generated SQL exceeds. CPython 3.11
#: does not grow the C stack for Python-to-Python calls, so a higher limit is safe; past it
#: the statement fails with a ParseError that says so, never a RecursionError.
RECURSION_LIMIT = 20_000
MAX_NESTING = RECURSION_LIMIT // 25
if sys.getrecursionlimit() < RECURSION_LIMIT:
    sys.setrecursionlimit(RECURSION_LIMIT)
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
# Nodes that hold no tables (names, literals, types; a table alias holds names only).
# (a Hint's arguments name relations by alias, /*+ BROADCAST(x) */: not table reads)
_LEAVES = frozenset({exp.Column, exp.Identifier, exp.Literal, exp.DataType, exp.Star, exp.Boolean, exp.Null, exp.TableAlias,
                     exp.Hint})
_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.SENTINEL.*?>")
_UNTERMINATED = re.compile(rf"(?:{COMMENT}|{STRING}|[^'\"`/]|/(?!\*))*(?={UNTERMINATED})", re.S)


_NEWLINE = re.compile("\n")


class _LineIndex(threading.local):
    source = ""  # the last source asked about (per thread: parses may run in parallel)
    offsets: tuple | list = ()  # the offsets of its newlines


_LINES = _LineIndex()


def _newlines(source: str):
    """Offsets of the newlines of ``source``, indexed once per input: a line number is
    then a bisection, not a count from the start (which made spans and errors of a
    many-line script quadratic). The cache holds the source, so ``is`` cannot confuse it
    with a later string at the same address."""
    lines = _LINES
    if lines.source is source:
        return lines.offsets
    offsets = [m.start() for m in _NEWLINE.finditer(source)] if "\n" in source else ()
    lines.source, lines.offsets = source, offsets
    return offsets


def _line_col(source: str, offset: int) -> tuple[int, int]:
    newlines = _newlines(source)
    if not newlines:
        return 1, offset + 1
    before = bisect.bisect_left(newlines, offset)  # newlines before offset
    if before == 0:
        return 1, offset + 1
    return before + 1, offset - newlines[before - 1]


def error_at(source: str, offset: int, description: str, token: str | None = None, expected=(), *,
             error_class: str | None = None, sqlstate: str | None = None) -> ParseError:
    """A ParseError at character ``offset`` of ``source`` (the whole input)."""
    line, column = _line_col(source, offset)
    width = len(token) if token and "\n" not in token else 1
    return ParseError(
        description,
        line=line,
        column=column,
        token=token,
        expected=expected,
        excerpt=_excerpt(source, offset, line, column, width),
        error_class=error_class,
        sqlstate=sqlstate,
    )


#: The longest source line an excerpt shows whole; a longer one is cut around the caret
#: (a 10 MB one-line statement must not make a 10 MB message).
EXCERPT_WIDTH = 160


def _excerpt(source: str, offset: int, line: int, column: int, width: int) -> str:
    """The caret excerpt of ``line`` (the ``\\n``-separated line holding ``offset``), made
    safe to print: control and other unprintable characters become '?', and a long line
    is cut to a window around the caret. Characters are replaced one for one, so the
    caret stays under the column."""
    start = offset - (column - 1)
    end = source.find("\n", offset)
    text = source[start : end if end >= 0 else len(source)]
    at = column - 1
    prefix = suffix = ""
    if len(text) > EXCERPT_WIDTH:
        lo = max(0, min(at - EXCERPT_WIDTH // 2, len(text) - EXCERPT_WIDTH))
        hi = lo + EXCERPT_WIDTH
        prefix, suffix = ("..." if lo else ""), ("..." if hi < len(text) else "")
        text, at = text[lo:hi], at - lo + len(prefix)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else " " if c == "\t" else "?" for c in text)
    width = max(1, min(width, len(text) - (at - len(prefix)))) if text else 1
    return caret_excerpt(prefix + text + suffix, line, at + 1, width)


def span_at(source: str, start: int, end: int) -> Span:
    """The span of ``source[start:end]`` (1-based lines and columns; the end column is
    the one just after the last character). Made without the frozen dataclass's
    ``__init__`` (six guarded setattrs), as spans are made for most grammar rules."""
    span = _new(Span)
    if not _newlines(source):
        span.__dict__.update(start=start, end=end, line=1, column=start + 1, end_line=1, end_column=end + 1)
    else:
        line, column = _line_col(source, start)
        end_line, end_column = _line_col(source, end)
        span.__dict__.update(
            start=start, end=end, line=line, column=column, end_line=end_line, end_column=end_column
        )
    return span


_new = object.__new__
_SPECS: dict = {}


def construct(cls, values: dict):
    """``cls(**values)`` for an AST dataclass (frozen, no ``__post_init__``, no default
    factories), without its ``__init__``: the instance dict is filled directly. Values
    that ``__init__`` would reject (an unknown or missing field) go to it, so it raises
    as it would have."""
    spec = _SPECS.get(cls)
    if spec is None:
        fields = dataclasses.fields(cls)
        defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
        names = frozenset(f.name for f in fields)
        assert not hasattr(cls, "__post_init__") and all(f.init for f in fields), cls
        spec = _SPECS[cls] = (defaults, names, names - defaults.keys())
    defaults, names, required = spec
    if not (values.keys() <= names and required <= values.keys()):
        return cls(**values)
    node = _new(cls)
    attrs = node.__dict__
    attrs.update(defaults)
    attrs.update(values)
    return node


def fast_tree(text: str):
    """The sqlglot tree of a trivial slot, or None when sqlglot must parse it: an operand
    (column, unsigned number, escape-free string, TRUE/FALSE/NULL), one + - * of two
    operands (``SET n = n + 1``), or comparisons of two operands joined by AND (the usual
    shape of MERGE ON and WHERE conditions)."""
    if "(" in text:  # a call or a parenthesised expression: not trivial (fails fast)
        return None
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
    first = text[:1]
    if first == "'":
        return exp.Literal.string(text[1:-1]) if _SIMPLE_STRING.fullmatch(text) else None
    if first.isdigit():
        return exp.Literal.number(text) if _SIMPLE_NUMBER.fullmatch(text) else None
    if _SIMPLE_COLUMN.fullmatch(text):
        upper = text.upper()
        constant = _CONSTANTS.get(upper)
        if constant is not None:
            return constant()
        if "." not in text and "`" not in text:  # the usual bare column name
            if upper in _KEYWORDS or needs_quotes(text):  # not a plain column to isolde's dialect
                return None
            return exp.Column(this=exp.Identifier(this=text, quoted=False))
        parts = text.split(".") if "`" not in text else re.findall(_NAME, text)
        if any(p[0] != "`" and (p.upper() in _KEYWORDS or needs_quotes(p)) for p in parts):
            return None
        idents = [exp.Identifier(this=p[1:-1], quoted=True) if p[0] == "`" else exp.Identifier(this=p, quoted=False) for p in reversed(parts)]
        return exp.Column(**dict(zip(_COLUMN_PARTS, idents)))
    return None


class _Sqlglot(threading.local):
    """This thread's sqlglot tokenizer and parser, made once: both reset themselves at
    the start of every call (fresh token list, fresh state), and making them is a
    large part of the cost of parsing a short slot."""

    def __init__(self):
        self.tokenizer = DIALECT.tokenizer()
        self.parser = DIALECT.parser()


_SQLGLOT = _Sqlglot()


def _parse(source: str, token, into):
    """Run sqlglot on a slot token; translate its errors to the whole input."""
    text = token.value
    parser = _SQLGLOT.parser
    parser.error_message_context = len(text) + 1
    try:
        tokens = _SQLGLOT.tokenizer.tokenize(text)
        return parser.parse_into(into, tokens, text)[0] if into else parser.parse(tokens, text)[0]
    except sqlglot.errors.ParseError as e:
        info = e.errors[0] if e.errors else {}
        at = len(info.get("start_context") or "")
        typo = typos.slot_typo(text, at)
        if typo is not None:
            where, word, keyword = typo
            raise error_at(source, token.start_pos + where, f"unexpected {word!r}. Did you mean {keyword}?",
                           word) from None
        description = _TOKEN_REPR.sub("the end", info.get("description") or str(e))
        raise error_at(source, token.start_pos + at, description, info.get("highlight") or None) from None
    except RecursionError:
        raise _too_deep(source, token) from None
    except Exception as e:  # sqlglot's tokenizer and parser raise more than ParseError on bad input
        unterminated = _UNTERMINATED.match(text)
        if unterminated:
            at = unterminated.end()
            raise error_at(source, token.start_pos + at, "unterminated quote or comment", text[at]) from None
        raise error_at(source, token.start_pos, f"invalid expression: {e}", text.split(None, 1)[0]) from None


_NESTING_TOKEN = re.compile(rf"\s+|{COMMENT}|{STRING}|(?P<open>[(\[{{]|(?<![\w$])CASE(?![\w$]))"
                            rf"|(?P<close>[)\]}}]|(?<![\w$])END(?![\w$]))|[\w$]+|.", re.S | re.I)


def nesting_depth(text: str) -> int:
    """The deepest nesting of brackets and CASE ... END in ``text`` (quotes and comments
    skipped): what a recursive-descent parser recurses on."""
    depth = deepest = 0
    for m in _NESTING_TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "open":
            depth += 1
            deepest = max(deepest, depth)
        elif kind == "close" and depth:
            depth -= 1
    return deepest


def _too_deep(source: str, token) -> ParseError:
    """The ParseError for a slot that ran out of Python stack in sqlglot, naming its depth."""
    depth = nesting_depth(token.value)
    what = f"{depth:,} levels of parentheses, subqueries and CASE" if depth > MAX_NESTING // 2 else \
        "operators chained without parentheses (NOT NOT ..., - - ...)"
    return error_at(source, token.start_pos, f"the expression nests too deeply ({what}); isolde parses up to "
                    f"about {MAX_NESTING:,} levels", token.value.split(None, 1)[0][:40],
                    error_class="STATEMENT_TOO_COMPLEX", sqlstate="54001")  # SQL's 'statement too complex'


def _refuse_at_aliases(source: str, token, tree) -> None:
    """``t@v1``: sqlglot reads ``@v1`` as an alias of ``t`` -- a query that would silently read
    the current version. Spark refuses it (Delta's ``@`` syntax is for paths only), so does isolde."""
    for table in tree.find_all(exp.Table):
        alias = table.args.get("alias")
        if isinstance(alias, exp.TableAlias) and isinstance(alias.this, exp.Parameter):
            word = "@" + alias.this.name
            at = token.value.find(word)
            path = f"delta.`{table.name}{word}`" if (table.db or "").lower() == "delta" else f"delta.`/path{word}`"
            raise error_at(source, token.start_pos + max(at, 0),
                           f"unexpected {word!r}: time travel on a table name is `{table.name} VERSION AS OF n` or "
                           f"`TIMESTAMP AS OF ts`; the @ form goes inside a path's quotes ({path})", word)


def expression(source: str, token) -> Expr:
    tree = fast_tree(token.value)
    if tree is None:
        tree = _parse(source, token, exp.Condition)
    if tree is None:
        raise error_at(source, token.start_pos, "expected an expression", token.value)
    if "@" in token.value:
        _refuse_at_aliases(source, token, tree)
    return construct(Expr, {"sql": token.value, "tree": tree, "span": span_at(source, token.start_pos, token.end_pos)})


def query(source: str, token) -> Query:
    tree = _parse(source, token, None)
    if not isinstance(tree, (exp.Query, exp.Values)):
        raise error_at(source, token.start_pos, "expected a query", token.value.split(None, 1)[0])
    if "@" in token.value:
        _refuse_at_aliases(source, token, tree)
    span = span_at(source, token.start_pos, token.end_pos)
    return construct(Query, {"sql": token.value, "tree": tree, "tables": _tables(source, token, tree), "span": span})


_NODE, _TABLE, _CTE, _SKIP = range(4)


# Without a '(' in the query there is no subquery, CTE or table function: a table can
# only be a FROM / JOIN item, so conditions, expressions and clauses made of them are
# not entered (most of a simple query's tree).
_NO_SUBQUERY_LEAVES = (exp.Condition, exp.Where, exp.Having, exp.Group, exp.Order, exp.Ordered, exp.Limit,
                       exp.Offset, exp.Alias)


class _Kinds(dict):
    """Class -> how ``_tables`` treats its instances (a dict lookup instead of
    isinstance tests): a Table, a CTE, another node to enter, or something to skip
    (a leaf, or not a sqlglot node at all)."""

    def __init__(self, leaves=()):
        super().__init__()
        self.leaves = leaves

    def __missing__(self, cls):
        if not issubclass(cls, exp.Expression) or cls in _LEAVES:
            kind = _SKIP
        elif issubclass(cls, self.leaves) and not issubclass(cls, (exp.Query, exp.Table, exp.CTE)):
            kind = _SKIP
        elif issubclass(cls, exp.Table):
            kind = _TABLE
        elif issubclass(cls, exp.CTE):
            kind = _CTE
        else:
            kind = _NODE
        self[cls] = kind
        return kind


_KINDS = _Kinds()
_KINDS_NO_SUBQUERY = _Kinds(_NO_SUBQUERY_LEAVES)


def _tables(source: str, token, tree) -> tuple[TableRef, ...]:
    """Every table the query reads (CTE names excluded), with its time travel."""
    tables, ctes = [], set()
    stack = [tree]
    pop, push = stack.pop, stack.append
    kinds = _KINDS if "(" in token.value else _KINDS_NO_SUBQUERY
    while stack:  # depth-first, in source order, not entering nodes that hold no tables
        node = pop()
        kind = kinds[type(node)]
        if kind == _TABLE:
            if isinstance(node.this, exp.Identifier):  # not a table-valued function
                tables.append(node)
        elif kind == _CTE:
            ctes.add(node.alias_or_name.lower())
        for value in reversed(node.args.values()):
            if value is None:
                continue
            if type(value) is list:
                for v in reversed(value):
                    if kinds[type(v)] < _SKIP:
                        push(v)
            elif kinds[type(value)] < _SKIP:
                push(value)
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
        return construct(TableRef, {"path": parts[1], "span": span, **travel})
    return construct(TableRef, {"parts": parts, "span": span, **travel})


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
        span = span_at(source, origin, origin + len(text))
        return {"timestamp": Expr(text, value, span=span)}
    return {"timestamp": Expr(value.sql(dialect=DIALECT), value)}

