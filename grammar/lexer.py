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

from lark.exceptions import UnexpectedCharacters
from lark.lexer import Lexer, PatternStr, Token
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


class SqlLexerError(UnexpectedCharacters):
    """A lexical error with its own description (unterminated quote, unclosed bracket)."""

    def __init__(self, text: str, pos: int, description: str, state=None):
        line = text.count("\n", 0, pos) + 1
        super().__init__(text, pos, line, pos - text.rfind("\n", 0, pos), state=state)
        self.description = description


class SqlLexer(Lexer):
    """Plugged into lark as its ContextualLexer; ``bind`` gives it the parse table."""

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

    def lex(self, lexer_state, parser_state):
        text = lexer_state.text.text
        pos, end = lexer_state.text.start, lexer_state.text.end
        line = text.count("\n", 0, pos) + 1
        line_start = text.rfind("\n", 0, pos) + 1
        states, stack = self.states, parser_state.state_stack
        while pos < end:
            state = stack[-1]
            slot = self.slot_states.get(state)
            if slot:
                token = self._slot(text, pos, end, state, slot, stack)
                if token is not None:
                    token.line = line + text.count("\n", pos, token.start_pos)
                    if token.line != line:
                        line_start = text.rfind("\n", pos, token.start_pos) + 1
                    token.column = token.start_pos - line_start + 1
                    line = token.end_line = token.line + token.count("\n")
                    if line != token.line:
                        line_start = text.rfind("\n", 0, token.end_pos) + 1
                    token.end_column = token.end_pos - line_start + 1
                    pos = token.end_pos
                    lexer_state.last_token = token
                    yield token
                    continue
            m = _SCAN.match(text, pos, end)
            kind = m.lastgroup
            value = m.group()
            if kind == "skip":
                newlines = value.count("\n")
                if newlines:
                    line += newlines
                    line_start = text.rfind("\n", pos, m.end()) + 1
                pos = m.end()
                continue
            if kind == "word":
                kind = self._word(value, state, stack)
            elif kind == "punct":
                kind = self.punct[value]
            elif kind == "open":
                raise SqlLexerError(text, pos, "unterminated quote or comment", parser_state)
            elif kind == "other":
                allowed = {name for name in states[state] if name.isupper()}
                raise UnexpectedCharacters(text, pos, line, pos - line_start + 1, allowed=allowed, state=parser_state)
            start_line, start_column = line, pos - line_start + 1
            newlines = value.count("\n") if kind == "STRING" else 0
            if newlines:
                line += newlines
                line_start = text.rfind("\n", pos, m.end()) + 1
            token = Token(kind, value, pos, start_line, start_column, line, m.end() - line_start + 1, m.end())
            pos = m.end()
            lexer_state.last_token = token
            yield token

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

    def _slot(self, text, pos, end, state, slot, stack):
        """The ``slot`` token starting at the first significant character from ``pos``
        (positions only; the caller fills in lines and columns), or None."""
        if slot == "QUERY":
            m = _BLANKS_THEN_QUERY.match(text, pos, end)
            if m is None or not shifts(self.states, stack, slot):
                return None
            start, stop = m.start("query"), end  # statements end at a significant token
        else:
            start = _BLANKS.match(text, pos, end).end()
            if start >= end:
                return None
            stop = _soup_end(text, start, end, *self._stops_after(state)) if slot == "SOUP" else end
            if stop <= start:
                return None
        return Token(slot, text[start:stop], start, None, None, None, None, stop)


def _soup_end(text, pos, end_limit, stop_words, stop_punct):
    """Offset just after the last token of the expression starting at ``pos``."""
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
            elif depth == 0 and word in stop_words:
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


def shifts(states, stack, terminal: str) -> bool:
    """Whether the LALR parser with ``stack`` would shift ``terminal`` (after the
    reductions it triggers), without touching the parser."""
    action = states[stack[-1]].get(terminal)
    if action is None or action[0] is Shift:
        return action is not None
    stack = list(stack)
    while True:
        action = states[stack[-1]].get(terminal)
        if action is None:
            return False
        if action[0] is Shift:
            return True
        rule = action[1]
        if rule.expansion:
            del stack[-len(rule.expansion) :]
        stack.append(states[stack[-1]][rule.origin.name][1])
