"""SQL text -> statement ASTs: ``parse(sql) -> list[Statement]``.

The script is split at top-level ``;`` (``splitter.py``); each statement is parsed in
place (offsets into the whole input, so every position is already relative to the whole
input) with the LALR tables lark builds once per process from ``isolde.lark``, by the
lexer's own loop (``SqlLexer.run``: lark's LALR loop with the lexer inline, no token
stream, no per-call parser objects). The lexer (``lexer.py``) cuts expression and query
slots; ``transformer.py``'s callbacks
build the AST as the parser reduces (no parse tree) and hand slots to sqlglot
(``slots.py``). A statement that starts a query (SELECT, WITH, VALUES, FROM, '(') is one
QUERY slot, so it goes to sqlglot without running the parser (``_select`` builds what
the grammar's ``select`` rule would, as it still does under EXPLAIN).

Every failure is an :class:`isolde.errors.ParseError` with line/column in the whole
input, the offending token, the expected tokens in words and a caret excerpt.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from lark import Lark
from lark.exceptions import UnexpectedInput, UnexpectedToken
from lark.lexer import PatternStr
from lark.parsers.lalr_analysis import Shift

from isolde.errors import ParseError

from .ast import AtomicBlock, Select, Statement
from . import typos
from .lexer import _with_before_write, QUERY_START, QUERY_WORDS, SLOTS, SqlLexer, SqlLexerError, Tok, shifts
from .slots import construct, error_at, query, span_at
from .splitter import ATOMIC_HEAD, StatementText, split_statements
from .transformer import BUILDER, callbacks

GRAMMAR = Path(__file__).with_name("isolde.lark")

# Nonterminals that, when a state can start them, are named instead of their tokens.
_PHRASES = {
    "table_or_path": "a table name or path",
    "table": "a table name",
    "source_table": "a table name",
    "data_type": "a data type",
    "column_path": "a column name",
    "property_key": "a property key",
    "config_key": "a configuration key",
    "identifier": "a name",
}
_TERMINALS = {
    "SOUP": "an expression",
    "QUERY": "a query",
    "RAW": "a value",
    "STRING": "a string",
    "NUMBER": "a number",
    "IDENT": "a name",
    "BQUOTED": "a name",
    "EXPLAIN_MODE": "an EXPLAIN mode",
    "$END": "end of input",
}


@functools.cache
def _parser() -> Lark:
    lark = Lark(
        GRAMMAR.read_text(),
        parser="lalr",
        lexer="contextual",
        cache=True,  # the grammar analysis, in the temp dir, keyed by grammar and options
        keep_all_tokens=True,  # callbacks see keyword tokens: spans start at them
        maybe_placeholders=False,
        transformer=callbacks(),
        _plugins={"ContextualLexer": SqlLexer},
    )
    frontend = lark.parser
    frontend.lexer.bind(frontend.parser._parse_table.states)
    lalr = frontend.parser.parser
    frontend.lexer.bind_parser(lalr.parse_table, lalr.callbacks)
    return lark


@functools.cache
def _run():
    """The lexer's combined lex-and-parse loop (lark's tables and reduce callbacks)."""
    return _parser().parser.lexer.run


@functools.cache
def _words() -> dict[str, str]:
    """Terminal name -> how an error message says it: 'SET' -> "'SET'", LPAR -> "'('"."""
    words = dict(_TERMINALS)
    for t in _parser().terminals:
        if isinstance(t.pattern, PatternStr):
            words[t.name] = f"'{t.pattern.value.upper()}'"
    return words


#: The longest statement ``parse`` accepts, in UTF-8 bytes (a script may hold any number
#: of statements). sqlglot, which parses expressions and queries, needs about 100-200
#: bytes of memory and 3-5 us per byte of a long value list or condition: 1 MiB is ~5 s
#: and ~200 MB at worst; the 10 MB of an unchecked statement were ~60 s and 2 GB.
#: Change it here for the process, or per call with ``parse(..., max_statement_bytes=)``.
MAX_STATEMENT_BYTES = 1 << 20
_TRANSACTION_CONTROL = re.compile(r"(BEGIN|COMMIT|ROLLBACK|START\s+TRANSACTION)\b", re.I)


def parse(sql: str, *, max_statement_bytes: int | None = None) -> list[Statement]:
    """Parse one or many ';'-separated statements; spans are offsets into ``sql``."""
    if not isinstance(sql, str):
        raise error_at("", 0, f"SQL text must be a string, not {type(sql).__name__}")
    limit = MAX_STATEMENT_BYTES if max_statement_bytes is None else max_statement_bytes
    run = _run()
    BUILDER.text = sql
    statements = []
    for piece in _pieces(sql):
        if len(piece.text) * 4 > limit:  # a UTF-8 character is at most 4 bytes
            _check_size(sql, piece, limit)
        if ATOMIC_HEAD.match(piece.text):
            statements.append(_atomic_block(sql, piece, run))
        else:
            statements.append(_statement(sql, piece, run))
    return statements


def _statement(sql: str, piece: StatementText, run) -> Statement:
    end = piece.start + len(piece.text)
    try:
        if QUERY_START.match(sql, piece.start, end) and not _with_before_write(sql, piece.start, end):
            return _select(sql, piece, end)  # a query is one slot: skip lark
        return run(sql, piece.start, end).value
    except UnexpectedInput as e:
        raise _at_statement(_syntax_error(sql, e, end), piece) from None
    except ParseError as e:
        raise _at_statement(e, piece)
    except Exception as e:  # a bug; still only ParseError leaves parse()
        raise _at_statement(error_at(sql, piece.start, f"cannot build the statement: {e!r}"), piece) from e


def _atomic_block(sql: str, piece: StatementText, run) -> AtomicBlock:
    """``BEGIN ATOMIC s1; s2; ... END``: the statements between, parsed as any others."""
    head = ATOMIC_HEAD.match(piece.text)
    body_start = piece.start + head.end()
    tail = re.search(r"(?:^|;)\s*END\Z", piece.text[head.end():], re.I)
    if tail is None:
        raise _at_statement(error_at(sql, piece.start, "BEGIN ATOMIC has no END: close the block with END;",
                                     piece.text[:head.end()], error_class="ATOMIC_BLOCK_WITHOUT_END",
                                     sqlstate="42601"), piece)
    body = sql[body_start:body_start + tail.start()]
    inner = []
    for p in split_statements(body):
        start = body_start + p.start
        inner_piece = StatementText(p.text, start, piece.line + sql.count("\n", piece.start, start))
        if ATOMIC_HEAD.match(p.text) or _TRANSACTION_CONTROL.match(p.text):
            raise _at_statement(error_at(sql, start, f"{p.text.split()[0].upper()} cannot appear inside BEGIN "
                                         "ATOMIC ... END: the block is one transaction already", p.text.split()[0],
                                         error_class="NESTED_TRANSACTION", sqlstate="25001"), inner_piece)
        inner.append(_statement(sql, inner_piece, run))
    span = span_at(sql, piece.start, piece.start + len(piece.text))
    return construct(AtomicBlock, {"statements": tuple(inner), "text": piece.text, "span": span})


def _check_size(sql: str, piece: StatementText, limit: int) -> None:
    """Refuse a statement longer than ``limit`` UTF-8 bytes before any parsing."""
    text = piece.text
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return
    first = text.split(None, 1)[0][:40] if text.strip() else text[:1]
    error = error_at(sql, piece.start, f"the statement is {_size(size, up=True)} ({size:,} bytes); isolde parses statements "
                     f"up to {_size(limit)} ({limit:,} bytes). Split it, or load a long list of values into a "
                     f"table and join it (the limit is isolde.grammar.parser.MAX_STATEMENT_BYTES)", first,
                     error_class="STATEMENT_TOO_LONG", sqlstate="54000")  # SQL's 'program limit exceeded'
    raise _at_statement(error, piece)


def _size(n: int, up: bool = False) -> str:
    """1 MB, 10.5 MB, 12 KB: a statement's size is rounded up, so it never reads as the limit."""
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            tenths = -(-n * 10 // scale) if up else n * 10 // scale
            return f"{tenths / 10:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


def _at_statement(error: ParseError, piece: StatementText) -> ParseError:
    """Record the line where the failing statement starts (for script runners)."""
    error.statement_line = piece.line
    return error


def _select(sql: str, piece: StatementText, end: int) -> Select:
    """What the grammar's ``select: QUERY`` rule builds, without running the parser."""
    q = query(sql, Tok("QUERY", piece.text, piece.start, end))
    return construct(Select, {"query": q, "span": q.span, "text": piece.text})


def _pieces(sql: str):
    """split_statements, short-cut for the usual single statement without comments."""
    if ";" in sql or "--" in sql or "/*" in sql:
        return split_statements(sql)
    stripped = sql.lstrip()
    text = stripped.rstrip()
    if not text:
        return []
    start = len(sql) - len(stripped)
    return [StatementText(text, start, sql.count("\n", 0, start) + 1)]


def _syntax_error(sql: str, e: UnexpectedInput, end: int) -> ParseError:
    if isinstance(e, UnexpectedToken):
        token = e.token
        at_end = token.type == "$END"
        offset = end if at_end else token.start_pos
        text = None if at_end else token.value
        description = "unexpected end of input" if at_end else f"unexpected {text!r}"
        expected = _expected(e.expected, e.state)
    elif isinstance(e, SqlLexerError):
        return error_at(sql, e.pos_in_stream, e.description, sql[e.pos_in_stream])
    else:
        offset = e.pos_in_stream
        text = sql[offset]
        description = f"unexpected character {text!r}"
        expected = _expected(e.allowed or (), e.state)
    typo = _keyword_typo(text, expected) if len(expected) > 1 else None
    if typo:
        description += f" (did you mean {typo}?)"
    if expected:
        description += f", expected {_join(expected)}"
    return error_at(sql, offset, description, text, expected)


def _keyword_typo(text, expected: list[str]):
    """The expected keyword the unexpected word misspells (SELEC -> SELECT), if any."""
    if not text or not (text[0].isalpha() or text[0] == "_"):
        return None
    keywords = [e.strip("'") for e in expected if e.startswith("'")]
    if "a query" in expected:
        keywords += sorted(QUERY_WORDS)
    return typos.suggest(text, keywords)


def _expected(terminals, parser_state) -> list[str]:
    """Readable expected tokens: those the parser would really shift here (LALR lists
    merged lookaheads), with a phrase instead of the name tokens where a name fits."""
    words = _words()
    states = _parser().parser.parser._parse_table.states
    stack = list(parser_state.state_stack)
    terminals = [t for t in (*terminals, *SLOTS) if shifts(states, stack, t)]
    while True:  # the state that would shift a name: reduce until there
        gotos = states[stack[-1]]
        action = gotos.get("IDENT")
        if action is None or action[0] is Shift:
            break
        rule = action[1]
        if rule.expansion:
            del stack[-len(rule.expansion) :]
        stack.append(states[stack[-1]][rule.origin.name][1])
    out = [phrase for rule, phrase in _PHRASES.items() if rule in gotos][:1]
    if out:  # the phrase covers identifier tokens and the keywords usable as names
        covered = {"IDENT", "BQUOTED"} | _non_reserved()
        terminals = [t for t in terminals if t not in covered]
    out += sorted({words.get(t, t) for t in terminals} - set(out))
    return list(dict.fromkeys(out))


@functools.cache
def _non_reserved() -> frozenset:
    rules = _parser().rules
    return frozenset(r.expansion[0].name for r in rules if r.origin.name == "non_reserved")


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]

