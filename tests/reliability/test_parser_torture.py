"""Hostile input to the parser (issue 25): grammar-aware fuzzing and linear time.

Statements are built from the grammar's statement shapes with random names, literals and
expressions, then mutated (tokens dropped, doubled, swapped; random characters, unicode,
unbalanced quotes, brackets and comments inserted). The property: ``isolde.parse``
returns, or raises ``ParseError`` -- never another exception, never a hang -- and the
error's line and column lie inside the input and its caret excerpt is printable.

A few hundred examples run in the normal suite; tens of thousands (and the atheris
harness, when atheris is installed) under ``make torture``. This file is also the
atheris harness itself: ``python test_parser_torture.py -runs=N corpus_dir``.

The complexity checks parse sizes n, 2n, 4n, 8n of each long shape and bound the growth
(median of repeats): linear work grows ~8x, the bound is 16x; a quadratic step is 64x
(the old per-span line count made 1,000 MERGE clauses 18-30x slower than 125).
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NEEDS_SPARK = False
if __name__ != "__main__":  # the atheris harness imports it under instrumentation instead
    import isolde.grammar.parser  # noqa: E402,F401  (sets the recursion limit before hypothesis records it)
ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "grammar" / "golden"
HANG_SECONDS = 20  # a hang, not a speed target: these inputs are a few hundred characters

# ------------------------------------------------------------------ the property


@contextmanager
def no_hang(seconds: int = HANG_SECONDS):
    """Fail (instead of blocking the run) when the body takes ``seconds``: a hang."""

    def alarm(signum, frame):
        raise AssertionError(f"parse() did not return within {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def check_parse(sql, counts=None) -> None:
    """parse() returns or raises a well-placed, printable ParseError; nothing else."""
    from isolde import parse
    from isolde.errors import ParseError

    if counts is not None:
        counts["fuzz inputs tried"] += 1
    try:
        parse(sql)
    except ParseError as e:
        if counts is not None:
            counts["errors: ParseError"] += 1
        check_position(sql, e)
    else:
        if counts is not None:
            counts["fuzz inputs parsed"] += 1


def check_position(sql, e) -> None:
    lines = sql.split("\n") if isinstance(sql, str) else [""]
    assert 1 <= e.line <= len(lines), (e.line, len(lines), str(e))
    assert 1 <= e.column <= len(lines[e.line - 1]) + 1, (e.line, e.column, str(e))
    shown = e.excerpt.split("\n")
    assert len(shown) == 2 and all(line.isprintable() for line in shown), repr(e.excerpt)
    assert shown[1].strip() and set(shown[1].strip()) == {"^"}, repr(e.excerpt)
    assert len(e.excerpt) < 1000, len(e.excerpt)


# ------------------------------------------------------------------ grammar-aware inputs

KEYWORDS = ("SELECT FROM WHERE SET INTO VALUES WHEN THEN ELSE END CASE AND OR NOT NULL ON USING AS TABLE WITH "
            "MATCHED BY SOURCE TARGET UPDATE DELETE INSERT MERGE OPTIMIZE ZORDER HISTORY VACUUM RETAIN HOURS "
            "CREATE REPLACE PARTITIONED CLUSTER LOCATION COMMENT TBLPROPERTIES VERSION TIMESTAMP OF").split()
NAME = st.one_of(
    st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True),
    st.sampled_from(KEYWORDS).map(str.lower),
    st.text(st.characters(blacklist_characters="`\x00", blacklist_categories=("Cs",)), max_size=6).map(lambda s: f"`{s}`"),
    st.text(st.characters(whitelist_categories=("Lu", "Ll", "Lo")), min_size=1, max_size=5),  # unicode names
)
STRING = st.text(st.characters(blacklist_categories=("Cs",)), max_size=10).map(
    lambda s: "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'")
LITERAL = st.one_of(
    st.integers(-10**20, 10**20).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    STRING,
    st.sampled_from(["NULL", "TRUE", "FALSE", "DATE'2024-01-01'", "TIMESTAMP'2024-01-01 00:00:00'", "X'0A'",
                     "INTERVAL 1 DAY", "1e308", "0.000001", "-0"]),
)
COLUMN = st.lists(NAME, min_size=1, max_size=3).map(".".join)


def _expressions():
    leaf = st.one_of(COLUMN, LITERAL)

    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%", "=", "<>", "!=", "<", "<=", ">", ">=",
                                              "<=>", "||", "AND", "OR", "LIKE", "IS NOT DISTINCT FROM"]), inner)
            .map(" ".join),
            inner.map(lambda e: f"({e})"),
            inner.map(lambda e: f"NOT {e}"),
            st.tuples(NAME, st.lists(inner, max_size=3)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
            st.tuples(inner, st.lists(LITERAL, min_size=1, max_size=4)).map(lambda t: f"{t[0]} IN ({', '.join(t[1])})"),
            st.tuples(inner, inner, inner).map(lambda t: f"CASE WHEN {t[0]} THEN {t[1]} ELSE {t[2]} END"),
            st.tuples(inner, NAME).map(lambda t: f"CAST({t[0]} AS {t[1]})"),
            st.tuples(inner, inner, inner).map(lambda t: f"{t[0]} BETWEEN {t[1]} AND {t[2]}"),
            inner.map(lambda e: f"{e} IS NULL"),
        )

    return st.recursive(leaf, extend, max_leaves=8)


EXPR = _expressions()
TYPE = st.sampled_from(["INT", "BIGINT", "STRING", "DOUBLE", "DATE", "TIMESTAMP", "DECIMAL(10, 2)", "BOOLEAN",
                        "ARRAY<INT>", "MAP<STRING, BIGINT>", "STRUCT<a: INT, b: STRING>", "VARCHAR(10)"])


def _join(parts, sep=", "):
    return sep.join(parts)


@st.composite
def statement(draw):
    """One statement of one of the grammar's shapes, with random parts."""
    d = draw
    t, s = d(COLUMN), d(NAME)
    cols = d(st.lists(NAME, min_size=1, max_size=4))
    shapes = {
        "select": lambda: f"SELECT {_join(d(st.lists(EXPR, min_size=1, max_size=3)))} FROM {t} WHERE {d(EXPR)}",
        "insert_values": lambda: f"INSERT INTO {t} ({_join(cols)}) VALUES "
                                 + _join(f"({_join(d(st.lists(EXPR, min_size=1, max_size=3)))})" for _ in range(d(st.integers(1, 3)))),
        "insert_select": lambda: f"INSERT {d(st.sampled_from(['INTO', 'OVERWRITE']))} {t} SELECT * FROM {s} WHERE {d(EXPR)}",
        "update": lambda: f"UPDATE {t} SET " + _join(f"{c} = {d(EXPR)}" for c in cols) + f" WHERE {d(EXPR)}",
        "delete": lambda: f"DELETE FROM {t} WHERE {d(EXPR)}",
        "merge": lambda: f"MERGE INTO {t} AS t USING {s} AS s ON {d(EXPR)} " + " ".join(
            d(st.sampled_from([
                f"WHEN MATCHED AND {d(EXPR)} THEN UPDATE SET {cols[0]} = {d(EXPR)}",
                "WHEN MATCHED THEN DELETE", "WHEN MATCHED THEN UPDATE SET *", "WHEN NOT MATCHED THEN INSERT *",
                f"WHEN NOT MATCHED THEN INSERT ({_join(cols)}) VALUES ({_join(d(EXPR) for _ in cols)})",
                f"WHEN NOT MATCHED BY SOURCE AND {d(EXPR)} THEN DELETE",
            ])) for _ in range(d(st.integers(0, 4)))),
        "create": lambda: f"CREATE {d(st.sampled_from(['', 'OR REPLACE ']))}TABLE {t} ("
                          + _join(f"{c} {d(TYPE)}{d(st.sampled_from(['', ' NOT NULL', ' COMMENT ' + d(STRING)]))}" for c in cols)
                          + f") USING delta PARTITIONED BY ({cols[0]}) TBLPROPERTIES ({d(STRING)} = {d(LITERAL)})",
        "create_as": lambda: f"CREATE TABLE {t} AS SELECT {d(EXPR)} AS {s} FROM {s}",
        "alter": lambda: f"ALTER TABLE {t} SET TBLPROPERTIES ('delta.{s}' = {d(LITERAL)})",
        "add_columns": lambda: f"ALTER TABLE {t} ADD COLUMNS ({_join(f'{c} {d(TYPE)}' for c in cols)})",
        "optimize": lambda: f"OPTIMIZE {t} WHERE {d(EXPR)} ZORDER BY ({_join(cols)})",
        "vacuum": lambda: f"VACUUM {t} RETAIN {d(st.integers(0, 10**6))} HOURS DRY RUN",
        "restore": lambda: f"RESTORE TABLE {t} TO VERSION AS OF {d(st.integers(0, 10**6))}",
        "history": lambda: f"DESCRIBE HISTORY {t} LIMIT {d(st.integers(0, 100))}",
        "time_travel": lambda: f"SELECT * FROM {t} TIMESTAMP AS OF {d(LITERAL)}",
        "set": lambda: f"SET spark.{s} = {d(LITERAL)}",
        "explain": lambda: f"EXPLAIN DELETE FROM {t} WHERE {d(EXPR)}",
        "cte": lambda: f"WITH {s} AS (SELECT {d(EXPR)}) SELECT * FROM {s} JOIN {t} ON {d(EXPR)}",
    }
    return shapes[d(st.sampled_from(sorted(shapes)))]()


_TOKENS = re.compile(r"'(?:[^'\\]|\\.)*'|`[^`]*`|\w+|\s+|.", re.S)
HOSTILE = st.one_of(
    st.sampled_from(["'", '"', "`", "(", ")", "((", "))", "/*", "*/", "--", ";", "\\", "\n", "\r", "\t", "\x00",
                     "\u2028", "\ufeff", "\u202e", "${x}", "?", ":x", "CASE", "END", "WHEN", "SELECT", "r'",
                     "/*+ BROADCAST(x) */", ",", ".", "*"]),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=4),
    st.binary(min_size=1, max_size=4).map(lambda b: b.decode("latin-1")),
)


@st.composite
def mutated(draw, base=statement()):
    """A generated statement with tokens dropped, doubled, swapped, cut or hostile text inserted."""
    tokens = _TOKENS.findall(draw(base))
    for _ in range(draw(st.integers(0, 5))):
        if not tokens:
            break
        i = draw(st.integers(0, len(tokens) - 1))
        op = draw(st.sampled_from(["drop", "dup", "swap", "insert", "insert", "truncate", "repeat"]))
        if op == "drop":
            del tokens[i]
        elif op == "dup":
            tokens.insert(i, tokens[i])
        elif op == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif op == "insert":
            tokens.insert(i, draw(HOSTILE))
        elif op == "repeat":
            tokens.insert(i, tokens[i] * draw(st.integers(2, 60)))
        else:
            tokens = tokens[:i]
    sep = draw(st.sampled_from([";", ";\n", "\n", ""]))
    tail = draw(st.sampled_from(["", ";", " -- c", " /* c", ";;", "\n"]))
    return sep.join(["".join(tokens)] * draw(st.integers(1, 2))) + tail


FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])


@settings(FUZZ, max_examples=300)
@given(sql=statement())
def test_generated_statements(sql, counts):
    with no_hang():
        check_parse(sql, counts)


@settings(FUZZ, max_examples=400)
@given(sql=mutated())
def test_mutated_statements(sql, counts):
    with no_hang():
        check_parse(sql, counts)


@pytest.mark.torture
@settings(FUZZ, max_examples=20_000)
@given(sql=mutated())
def test_mutated_statements_long(sql, counts):
    with no_hang():
        check_parse(sql, counts)


@pytest.mark.torture
@settings(FUZZ, max_examples=10_000)
@given(sql=statement())
def test_generated_statements_long(sql, counts):
    with no_hang():
        check_parse(sql, counts)


# Hostile inputs found by hand or by the fuzzers, kept as cases.
CASES = [
    "", ";", ";;;", "\x00", "\ufeff", "'", '"', "`", "/*", "--", "(", ")", "\\",
    "SELECT '", "DELETE FROM t WHERE a = '\x00", "UPDATE t SET a = 1 WHERE\u2028b = 2",
    "DELETE FROM t WHERE a = 1\r\nAND b = ", "MERGE INTO t USING s ON (", "SELECT 1 /* never closed",
    "DELETE FROM t WHERE a IN (" + "1, " * 50, "SELECT " + "(" * 2000 + "1" + ")" * 2000,
    "DELETE FROM t WHERE " + "NOT " * 5000 + "a", "UPDATE t SET a = " + "CASE WHEN x THEN " * 3000 + "1" + " END" * 3000,
    "SELECT * FROM " + "(SELECT * FROM " * 3000 + "t" + ")" * 3000,
    "CREATE TABLE t (a " + "ARRAY<" * 3000 + "INT" + ">" * 3000 + ")",
    "DELETE FROM t WHERE a = '\x1b[31mred'\x1b", "SELECT \u202e1", "DELETE FROM t WHERE a = 1 " + "x" * 5000 + " \x07",
    "INSERT INTO t VALUES ('" + "\x00" * 500, "SET a = \x00", "EXPLAIN " * 500 + "SELECT 1",
]


@pytest.mark.parametrize("sql", CASES, ids=range(len(CASES)))
def test_hostile_cases(sql, counts):
    with no_hang():
        check_parse(sql, counts)


EXCERPTS = [  # (sql, the excerpt's two lines): unprintable characters shown as '?', long lines cut
    ("DELETE FROM t WHERE a = 1 \x00", ["1 | DELETE FROM t WHERE a = 1 ?", " " * 30 + "^"]),
    ("DELETE FROM t\tWHERE a = \x1b[31m", ["1 | DELETE FROM t WHERE a = ?[31m", " " * 29 + "^"]),  # '[' unclosed
    ("SELECT 1;\r\nUPDATE t SET WHERE", ["2 | UPDATE t SET WHERE", " " * 17 + "^^^^^"]),
    ("UPDATE t SET a = 1 WHERE b = 2 " + "x " * 200 + "(", ["1 | ..." + ("x " * 200 + "(")[-160:], " " * 166 + "^"]),
    ("DELETE FROM t WHERE " + "(" * 400 + "a", ["1 | DELETE FROM t WHERE " + "(" * 140 + "...", " " * 24 + "^"]),
]


@pytest.mark.parametrize("sql,lines", EXCERPTS, ids=range(len(EXCERPTS)))
def test_excerpt_is_a_printable_window(sql, lines):
    from isolde import parse
    from isolde.errors import ParseError

    with pytest.raises(ParseError) as info:
        parse(sql)
    check_position(sql, info.value)
    assert info.value.excerpt.split("\n") == lines


# ------------------------------------------------------------------ atheris (coverage-guided)


def _atheris_corpus(directory: Path) -> None:
    """Seed inputs: every golden statement."""
    from isolde.grammar.splitter import split_statements

    directory.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in sorted(GOLDEN.glob("*.sql")):
        for s in split_statements(f.read_text()):
            (directory / f"seed{n}").write_text(s.text)
            n += 1


@pytest.mark.torture
def test_atheris(tmp_path, counts):
    """Coverage-guided fuzzing with atheris (libFuzzer) in a subprocess; a crash (any
    exception but ParseError, or a misplaced error) or a hang (libFuzzer's -timeout) fails."""
    try:
        import atheris  # noqa: F401
    except ImportError:
        pytest.skip("atheris is not installed (pip install atheris)")
    corpus = tmp_path / "corpus"
    _atheris_corpus(corpus)
    runs = int(os.environ.get("ISOLDE_ATHERIS_RUNS", "30000"))
    proc = subprocess.run(
        [sys.executable, __file__, f"-runs={runs}", f"-timeout={HANG_SECONDS}", "-rss_limit_mb=4096",
         "-max_len=2000", f"-artifact_prefix={tmp_path}/", str(corpus)],
        capture_output=True, text=True, timeout=3600, cwd=ROOT,
    )
    done = re.search(r"Done (\d+) runs", proc.stderr)
    tried = int(done.group(1)) if done else 0
    counts["fuzz inputs tried (atheris)"] += tried
    assert proc.returncode == 0 and done, proc.stderr[-4000:]
    assert tried >= runs


def _atheris_main() -> None:
    import atheris

    with atheris.instrument_imports():
        import sqlglot  # noqa: F401
        import lark  # noqa: F401
        import isolde.grammar.parser  # noqa: F401

    def one_input(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        check_parse(fdp.ConsumeUnicodeNoSurrogates(len(data)))

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


# ------------------------------------------------------------------ linear time


def _median_time(sql: str, repeats: int) -> float:
    from isolde import parse

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        parse(sql)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


SHAPES = {  # shape -> (SQL of size n, n)
    "long IN list": (lambda n: "DELETE FROM t WHERE id IN (" + ", ".join(str(10**6 + i) for i in range(n)) + ")", 500),
    "long IN list in a query": (lambda n: "SELECT * FROM t WHERE id IN (" + ", ".join(str(i) for i in range(n)) + ")", 500),
    "long VALUES list": (lambda n: "INSERT INTO t VALUES\n" + ",\n".join(f"({i}, 'v{i}')" for i in range(n)), 250),
    "long AND chain": (lambda n: "DELETE FROM t WHERE " + " AND ".join(f"c{i} = {i}" for i in range(n)), 250),
    "long OR chain": (lambda n: "UPDATE t SET a = 1 WHERE " + "\n OR ".join(f"(c{i} > {i})" for i in range(n)), 250),
    "many MERGE clauses": (lambda n: "MERGE INTO t USING s ON t.id = s.id\n" + "\n".join(
        f"WHEN MATCHED AND s.k = {i} THEN UPDATE SET v = s.v + {i}" for i in range(n)), 200),
    "many CREATE TABLE columns": (lambda n: "CREATE TABLE t (\n" + ",\n".join(f"c{i} BIGINT" for i in range(n)) + ")", 500),
    "many assignments": (lambda n: "UPDATE t SET " + ", ".join(f"c{i} = c{i} + 1" for i in range(n)), 250),
    "long string literal": (lambda n: "INSERT INTO t VALUES ('" + "abc " * n * 50 + "')", 1000),
    "long comments": (lambda n: "-- a comment line\n" * n + "/* " + "x" * n * 50 + " */ DELETE FROM t", 1000),
    "many statements in a script": (lambda n: "UPDATE t SET a = 1 WHERE b = 2;\n" * n, 125),
    "many statements on one line": (lambda n: "DELETE FROM t WHERE a = 1; " * n, 125),
    "long syntax error at the end": (lambda n: "UPDATE t SET a = 1;\n" * n + "UPDATE t SET WHERE", 250),
}


def _growth(make, n: int) -> list[float]:
    sizes = [n, 2 * n, 4 * n, 8 * n]
    texts = [make(k) for k in sizes]
    from isolde.errors import ParseError

    def timed(sql):
        try:
            return _median_time(sql, 5)
        except ParseError:  # the last shape ends with an error on purpose
            start = time.perf_counter()
            for _ in range(5):
                try:
                    __import__("isolde").parse(sql)
                except ParseError:
                    pass
            return (time.perf_counter() - start) / 5

    timed(texts[0])  # warm up (grammar tables, sqlglot caches)
    return [timed(t) for t in texts]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_parse_time_grows_linearly(shape):
    """time(8n) / time(n) < 16 (linear: ~8; quadratic: ~64). Measured up to three times
    before failing, so a neighbour's burst of CPU does not fail it."""
    make, n = SHAPES[shape]
    for attempt in range(3):
        times = _growth(make, n)
        ratio = times[3] / max(times[0], 1e-4)
        if ratio < 16:
            break
    assert ratio < 16, f"{shape}: {', '.join(f'{t * 1e3:.1f} ms' for t in times)} for n..8n (ratio {ratio:.1f})"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _atheris_main()
