"""isolde's lexer: lark's contextual lexing, done with one regex, plus the slot terminals.

lark's contextual lexer keeps one lexer per LALR state; here one master pattern scans
every token and the parser state decides what a word is:

* a keyword the state accepts is that keyword; any other word is a name (IDENT), so
  keywords (OPTIMIZE, ZORDER, FULL, HISTORY, ...) are names wherever a keyword cannot
  be, unless SQL reserves them (``RESERVED``: SELECT, FROM, WHERE, ... stay keywords and
  produce a clear error where a name was expected). LALR merges lookaheads, so a state
  may list a keyword that the reductions it triggers would then reject (TIMESTAMP after
  ``ts`` in ``(ts TIMESTAMP, ...)``, merged from ``t TIMESTAMP AS OF``): where a name
  fits too, replaying the reductions on the state stack (``shifts``) decides.
* the declared slot terminals of ``isolde.lark`` are cut here when the state accepts
  them: ``SOUP`` (an expression: tokens with balanced brackets and CASE ... END, up to a
  depth-0 closing bracket or a keyword/punctuation the state accepts after the slot, read
  from the parse table, so ``ON a = b WHEN`` stops at WHEN but ``CASE WHEN`` does not),
  ``QUERY`` (the rest of the statement, when it starts with SELECT, WITH, VALUES, FROM or
  '(' before one of them) and ``RAW`` (the rest of the statement, verbatim).

Each slot is one token, so lark never sees expression syntax and sqlglot parses each
slot's text exactly once.
"""

from __future__ import annotations

import re

from lark.exceptions import UnexpectedCharacters, UnexpectedToken
from lark.lexer import Lexer, PatternStr
from lark.parse_tree_builder import ExpandSingleChild
from lark.parsers.lalr_analysis import Shift

from .splitter import BACKQUOTED, COMMENT, STRING, STRING_LITERAL, UNTERMINATED

SLOTS = ("SOUP", "QUERY", "RAW")
QUERY_WORDS = frozenset({"SELECT", "WITH", "VALUES", "FROM"})
EXPLAIN_MODES = frozenset({"EXTENDED", "FORMATTED", "CODEGEN", "COST", "LOGICAL", "SIMPLE"})
# SQL's reserved words: never names unless backquoted (`DELETE FROM WHERE x` reports the
# missing table instead of deleting from a table called WHERE).
RESERVED = frozenset(
    "SELECT FROM WHERE SET INTO VALUES WHEN THEN ELSE END CASE AND OR NOT NULL ON USING AS "
    "TABLE WITH UNION INTERSECT EXCEPT GROUP ORDER HAVING JOIN IN IS BY".split()
)

_SCAN = re.compile(
    rf"(?P<skip>(?:\s+|{COMMENT})+)|(?P<STRING>{STRING_LITERAL})|(?P<BQUOTED>{BACKQUOTED})"
    rf"|(?P<NUMBER>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<word>[^\W\d]\w*)|(?P<punct>[(),.=*<>:-])"
    rf"|(?P<open>{UNTERMINATED})|(?P<other>.)",
    re.S,
)
_SLOT_TOKEN = re.compile(
    rf"(?P<skip>\s+|{COMMENT})|(?P<str>{STRING})|(?P<word>[^\W\d][\w$]*)|(?P<open>[(\[{{])|(?P<close>[)\]}}])"
    r"|(?P<num>\d[\w.]*)|(?P<op><=>|<>|!=|<=|>=|==|\|\||::|->|=>|.)",
    re.S,
)
QUERY_START = re.compile(rf"(?:\((?:\s+|{COMMENT})*)*(?:SELECT|WITH|VALUES|FROM)(?![\w$])", re.I | re.S)
_BLANKS = re.compile(rf"(?:\s+|{COMMENT})*", re.S)
_BLANKS_THEN_QUERY = re.compile(rf"(?:\s+|{COMMENT})*(?P<query>{QUERY_START.pattern})", re.I | re.S)
_PUNCT_NAMES = {"COMMA": ",", "SEMICOLON": ";"}


class Tok:
    """A token: its terminal name, text and offsets in the whole input (lines and
    columns are computed only where a span is made)."""

    __slots__ = ("type", "value", "start_pos", "end_pos")

    def __init__(self, type: str, value: str, start_pos: int, end_pos: int):
        self.type = type
        self.value = value
        self.start_pos = start_pos
        self.end_pos = end_pos

    def __repr__(self) -> str:
        return f"Tok({self.type!r}, {self.value!r}, {self.start_pos}, {self.end_pos})"


class _ParserState:
    """What error reporting reads of the parser where it failed (lark's ``state``)."""

    __slots__ = ("state_stack",)

    def __init__(self, stack):
        self.state_stack = list(stack)


class SqlLexerError(UnexpectedCharacters):
    """A lexical error with its own description (unterminated quote, unclosed bracket)."""

    def __init__(self, text: str, pos: int, description: str, state=None):
        line = text.count("\n", 0, pos) + 1
        super().__init__(text, pos, line, pos - text.rfind("\n", 0, pos), state=state)
        self.description = description


class SqlLexer(Lexer):
    """Plugged into lark as its ContextualLexer (so lark builds the tables once); ``bind``
    gives it the parse table, ``bind_parser`` the reduce callbacks, and ``run`` lexes and
    parses a statement in one loop (lark's own parse loop is not used)."""

    def __init__(self, conf, states, always_accept=()):
        self.keywords = {}  # upper-case word -> terminal name
        self.punct = {}  # character -> terminal name
        for t in conf.terminals:
            if isinstance(t.pattern, PatternStr):
                table = self.keywords if t.pattern.value[0].isalpha() else self.punct
                table[t.pattern.value.upper()] = t.name

    def bind(self, states) -> None:
        self.states = states
        # The slot a state may start: SOUP and RAW are always shifted right away; QUERY
        # may first need reductions (INSERT INTO t SELECT: t is reduced to a table).
        self.slot_states = {}
        for s, actions in states.items():
            slots = [k for k in SLOTS if k in actions and (k == "QUERY" or actions[k][0] is Shift)]
            assert len(slots) <= 1, (s, slots)
            if slots:
                self.slot_states[s] = slots[0]
        self.words = {name: word for word, name in self.keywords.items()}
        self.stops: dict[int, tuple[frozenset, frozenset]] = {}

    def bind_parser(self, parse_table, callbacks) -> None:
        """Prepare ``run``: lark's parse table in a form the loop reads fastest (a shift
        is the next state; a reduce is (size, rule name, callback or None when the
        rule's value is its only child: ``?rule``s) and lark's reduce callbacks."""
        self.start_state = parse_table.start_states["start"]
        self.end_state = parse_table.end_states["start"]
        assert not any(isinstance(k, str) for k in callbacks), "terminal callbacks are not supported"
        reduces = {}
        self.actions = actions = {}
        for state, row in parse_table.states.items():
            out = actions[state] = {}
            for symbol, (action, arg) in row.items():
                if action is Shift:
                    out[symbol] = arg
                    continue
                reduce = reduces.get(arg)
                if reduce is None:
                    callback = callbacks[arg]
                    size = len(arg.expansion)
                    if type(callback) is ExpandSingleChild and size == 1:
                        callback = None
                    reduce = reduces[arg] = (size, arg.origin.name, callback)
                out[symbol] = reduce

    def lex(self, lexer_state, parser_state):
        raise NotImplementedError("isolde lexes and parses in one loop: SqlLexer.run")

    def run(self, text: str, pos: int, end: int):
        """Lex and parse ``text[pos:end]`` (one statement) in one loop: the value of the
        grammar's ``start`` rule. lark's LALR loop, with the lexer inline (the parser
        state decides what a word is and where a slot is cut). Tokens carry offsets
        only; lines and columns are computed for the spans that are made."""
        states, actions, slot_states = self.states, self.actions, self.slot_states
        end_state = self.end_state
        stack = [self.start_state]
        values = []
        scan, word, cut, punct, keywords = _SCAN.match, self._word, self._slot, self.punct, self.keywords
        while True:
            state = stack[-1]
            if pos >= end:
                token = Tok("$END", "", end, end)
            else:
                token = None
                slot = slot_states.get(state)
                if slot is not None and slot != "QUERY":  # SOUP and RAW: shifted right away
                    token = cut(text, pos, end, state, slot, stack)
                if token is None:
                    m = scan(text, pos, end)
                    kind = m.lastgroup
                    if kind == "skip":
                        pos = m.end()
                        continue
                    value = m.group()
                    if slot == "QUERY" and (value == "(" or (kind == "word" and value.upper() in QUERY_WORDS)):
                        token = cut(text, pos, end, state, slot, stack)
                if token is None:
                    if kind == "word":  # _word, with its common case inline: a keyword shifted here
                        upper = value.upper()
                        keyword = keywords.get(upper)
                        action = states[state].get(keyword) if keyword else None
                        if action is not None and (action[0] is Shift or upper in RESERVED):
                            kind = keyword
                        elif upper in RESERVED and values and type(values[-1]) is Tok and values[-1].value == "." \
                                and "IDENT" in states[state]:
                            kind = "IDENT"  # a name part after a dot (`db.table`): no keyword can stand there
                        else:
                            kind = word(value, state, stack)
                    elif kind == "punct":
                        kind = punct[value]
                    elif kind == "open":
                        raise SqlLexerError(text, pos, "unterminated quote or comment", _ParserState(stack))
                    elif kind == "other":
                        allowed = {name for name in states[state] if name.isupper()}
                        line = text.count("\n", 0, pos) + 1
                        column = pos - text.rfind("\n", 0, pos)
                        raise UnexpectedCharacters(text, pos, line, column, allowed=allowed, state=_ParserState(stack))
                    token = Tok(kind, value, pos, m.end())
                    pos = token.end_pos
                else:
                    pos = token.end_pos
            kind = token.type
            while True:  # feed the token: reduce until it shifts
                action = actions[state].get(kind)
                if action is None:
                    expected = {s for s in states[state] if s.isupper()}
                    raise UnexpectedToken(token, expected, state=_ParserState(stack))
                if type(action) is int:
                    stack.append(action)
                    values.append(token)
                    break
                size, origin, callback = action
                if size:
                    children = values[-size:]
                    del stack[-size:]
                    del values[-size:]
                else:
                    children = []
                value = callback(children) if callback is not None else children[0]
                state = actions[stack[-1]][origin]
                stack.append(state)
                values.append(value)
                if state == end_state and kind == "$END":
                    return value

    def _word(self, word: str, state: int, stack) -> str:
        upper = word.upper()
        keyword = self.keywords.get(upper)
        actions = self.states[state]
        if keyword in actions:
            if upper in RESERVED or "IDENT" not in actions or actions[keyword][0] is Shift:
                return keyword
            if shifts(self.states, stack, keyword) or not shifts(self.states, stack, "IDENT"):
                return keyword
            return "IDENT"
        if upper in EXPLAIN_MODES and "EXPLAIN_MODE" in actions:
            return "EXPLAIN_MODE"
        if upper in RESERVED:
            return keyword or "RESERVED"
        return "IDENT"

    def _stops_after(self, state: int):
        """(stop words, stop punctuation) for a SOUP shifted in ``state``."""
        try:
            return self.stops[state]
        except KeyError:
            follow = self.states[self.states[state]["SOUP"][1]]
            words = {self.words[n] for n in follow if n in self.words}
            if "QUERY" in follow:
                words |= QUERY_WORDS
            punct = {_PUNCT_NAMES[n] for n in follow if n in _PUNCT_NAMES}
            self.stops[state] = result = (frozenset(words), frozenset(punct))
            return result

    def _keyword_ends_slot(self, text: str, pos: int, end: int, state: int, stack, word: str) -> bool:
        """Does stop word ``word`` (its text ending at ``pos``) end the SOUP shifted in ``state``?
        Only if the token after it is one the grammar accepts after that keyword: ``ZORDER BY``
        ends an OPTIMIZE's WHERE, ``zorder = 1`` is a column of it (Delta's non-reserved words)."""
        after = shifted(self.states, [*stack, self.states[state]["SOUP"][1]], self.keywords[word])
        if after is None or any(slot in self.states[after[-1]] for slot in SLOTS):
            return True  # (a slot follows the keyword: whatever comes next is its text)
        m = _SCAN.match(text, pos, end)
        while m is not None and m.lastgroup == "skip":
            m = _SCAN.match(text, m.end(), end)
        if m is None or pos >= end or m.start() >= end:
            terminal = "$END"
        else:
            kind, value = m.lastgroup, m.group()
            if kind == "word":
                keyword = self.keywords.get(value.upper())
                terminal = keyword if keyword and keyword in self.states[after[-1]] else "IDENT"
            elif kind == "punct":
                terminal = self.punct.get(value, value)
            else:
                terminal = kind
        return shifts(self.states, after, terminal) or (terminal == "$END" and "$END" in self.states[after[-1]])

    def _slot(self, text, pos, end, state, slot, stack):
        """The ``slot`` token starting at the first significant character from ``pos``
        (positions only; the caller fills in lines and columns), or None."""
        if slot == "QUERY":
            m = _BLANKS_THEN_QUERY.match(text, pos, end)
            if m is None or not shifts(self.states, stack, slot):
                return None
            if "WITH" in self.keywords and self.keywords["WITH"] in self.states[state] \
                    and _with_before_write(text, m.start("query"), end):
                return None  # WITH w AS (...) INSERT / UPDATE / DELETE / MERGE: the grammar's with_dml
            start, stop = m.start("query"), end  # statements end at a significant token
        else:
            start = _BLANKS.match(text, pos, end).end()
            if start >= end:
                return None
            stop = _soup_end(text, start, end, *self._stops_after(state),
                             ends=lambda word, at: self._keyword_ends_slot(text, at, end, state, stack, word)) \
                if slot == "SOUP" else end
            if stop <= start:
                return None
        return Tok(slot, text[start:stop], start, stop)


def _soup_end(text, pos, end_limit, stop_words, stop_punct, ends=None):
    """Offset just after the last token of the expression starting at ``pos``. ``ends(word,
    offset)``: does a stop word really end it (else it is a name in the expression)?"""
    depth = 0
    end = pos
    opened = []  # offsets of the brackets still open
    match = _SLOT_TOKEN.match
    while pos < end_limit:
        m = match(text, pos, end_limit)
        kind = m.lastgroup
        pos = m.end()
        if kind == "skip":
            continue
        if kind == "word":
            word = m.group().upper()
            if word == "CASE":
                depth += 1
            elif word == "END" and depth:
                depth -= 1
            elif depth == 0 and word in stop_words and (ends is None or ends(word, pos)):
                return end
        elif kind == "open":
            depth += 1
            opened.append(m.start())
        elif kind == "close":
            if depth == 0:
                return end
            depth -= 1
            if opened:
                opened.pop()
        elif depth == 0 and kind == "op" and m.group() in stop_punct:
            return end
        end = pos
    if opened:
        raise SqlLexerError(text, opened[0], f"{text[opened[0]]!r} is never closed")
    return end


WRITE_WORDS = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE"})


def _with_before_write(text: str, pos: int, end: int) -> bool:
    """Does the text at ``pos`` start with ``WITH`` named queries followed by a write? The first
    word outside brackets after the WITH's names, column lists and bodies decides."""
    match = _SLOT_TOKEN.match
    m = match(text, pos, end)
    if m is None or m.group().upper() != "WITH":
        return False
    pos, depth = m.end(), 0
    while pos < end:
        m = match(text, pos, end)
        kind, pos = m.lastgroup, m.end()
        if kind == "open":
            depth += 1
        elif kind == "close":
            depth = max(0, depth - 1)
        elif kind == "word" and depth == 0:
            word = m.group().upper()
            if word in WRITE_WORDS:
                return True
            if word in QUERY_WORDS or word == "TABLE":
                return False
    return False


def shifted(states, stack, terminal: str):
    """The LALR stack after ``terminal`` is shifted (the reductions it triggers done on a copy),
    or None when the parser would not accept it."""
    stack = list(stack)
    while True:
        action = states[stack[-1]].get(terminal)
        if action is None:
            return None
        if action[0] is Shift:
            stack.append(action[1])
            return stack
        rule = action[1]
        if rule.expansion:
            del stack[-len(rule.expansion) :]
        stack.append(states[stack[-1]][rule.origin.name][1])


def shifts(states, stack, terminal: str) -> bool:
    """Whether the LALR parser with ``stack`` would shift ``terminal`` (after the
    reductions it triggers), without touching the parser."""
    action = states[stack[-1]].get(terminal)
    if action is None or action[0] is Shift:  # (the common case: no copy of the stack)
        return action is not None
    return shifted(states, stack, terminal) is not None
