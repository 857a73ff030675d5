"""Names that are keywords somewhere round-trip (issue: render and re-parse every predicate
shape with identifiers drawn from Spark's and sqlglot's keyword lists).

isolde renders predicates to SQL text and parses them again: the planner's scope text, the
commitInfo ``readPredicates`` the conflict checker re-reads (executor/txn/predicates.py), the
executor's regenerated SQL. A name spelled like a keyword that loses its quotes on the way
reads back as something else (a function, a literal, a syntax error), and the scope then
describes other rows than the statement read.

Part 1 (no Spark job; the keyword lists only): for every keyword of Spark's
``sql_keywords()`` and of sqlglot's tokenizer (isolde's dialect and plain Databricks; ~550
words) and every predicate shape in SHAPES, the predicate is built over the name as a quoted
identifier (lower, upper and mixed case, rotating over the shapes) and goes through isolde's
parser, ``conflict_scope``, the rendered scope through ``parse_condition`` and the executor's
``Predicate``, and the direct render; half the keywords also through UPDATE and MERGE (six
shapes), all through ``key_predicate`` and a struct field. The same column names and the same
tree (ignoring the ``quoted`` flag, table qualifiers and parentheses) must come back, and the
planner must never raise. (~20-25 s: the cost is sqlglot parsing, ~90k shape instances.)

Part 2 (no Spark job; Spark's parser only): every keyword UNQUOTED in a few positions. Where
Spark's own parser refuses it, isolde must refuse it with a ParseError carrying line/column;
where isolde accepts it, it must read the word as Spark does (a column, or not), in what it
analyses and in the SQL it executes; the words isolde claims to accept unquoted
(grammar/dialect.py BARE_NAME_WORDS and the plain words) must be accepted.

Part 3 (Spark): one Delta table whose columns are keyword names, real UPDATE / DELETE / MERGE
through ``session.execute`` (quoted, and unquoted for the claimed words; names on both sides of
comparisons), rows checked with delta-rs against a model, recorded read predicates evaluated by
Spark; isolde's reserved words (and true/false/null/...) unquoted give a ParseError at the right
line and write nothing, or, where isolde accepts the text, change exactly the rows Spark's own
reading of it selects.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Optional

import pytest
import sqlglot.expressions as exp
from sqlglot.dialects.databricks import Databricks

import isolde
import isolde.grammar.ast
from isolde import errors as E
from isolde.executor.txn.predicates import Predicate
from isolde.grammar import dialect as D
from isolde.grammar.dialect import DIALECT
from isolde.planner.predicates import conjuncts, parse_condition, to_sql
from isolde.planner.scope import KeyRange, conflict_scope, key_predicate

_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@pytest.fixture(scope="module")
def keywords(spark) -> list[str]:
    """Spark's keywords and sqlglot's single-word tokenizer keywords (isolde's dialect and plain
    Databricks), upper case, sorted."""
    words = {r[0].upper() for r in spark.sql("SELECT keyword FROM sql_keywords()").collect()}
    assert len(words) > 300, "Spark's keyword list looks truncated"
    for table in (DIALECT.tokenizer_class.KEYWORDS, Databricks.Tokenizer.KEYWORDS):
        words |= {k.upper() for k in table if _WORD.match(k)}
    return sorted(words)


@pytest.fixture(autouse=True, scope="module")
def _quiet_sqlglot():
    # sqlglot logs a warning each time it falls back to a Command ("if = 1"): thousands here
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def _cases(word: str) -> list[str]:
    mixed = "".join(ch.upper() if i % 2 else ch.lower() for i, ch in enumerate(word))
    return [word.lower(), word.upper(), mixed]


# --------------------------------------------------------------------------- tree comparison


def _shape(node, strip_qualifiers: bool):
    """A comparable structure of a sqlglot tree: node types and values, names lower-cased,
    without the ``quoted`` flag, parentheses and (optionally) column qualifiers."""
    if isinstance(node, list):
        return tuple(_shape(n, strip_qualifiers) for n in node)
    if isinstance(node, exp.Paren):
        return _shape(node.this, strip_qualifiers)
    if isinstance(node, exp.Expression):
        items = []
        for key, value in sorted(node.args.items()):
            if key == "quoted" or value is None or value == [] or value is False:
                continue
            if strip_qualifiers and isinstance(node, exp.Column) and key in ("table", "db", "catalog"):
                continue
            items.append((key, _shape(value, strip_qualifiers)))
        return (type(node).__name__, tuple(items))
    if isinstance(node, str):
        return node.lower()
    return node


def _columns(tree) -> set[str]:
    return {c.name.lower() for c in tree.find_all(exp.Column)}


def _conjunct_shapes(tree, strip_qualifiers=True) -> list:
    return [_shape(c, strip_qualifiers) for c in conjuncts(tree)]


# --------------------------------------------------------------------------- part 1: quoted names

# {c}: the quoted column (qualified with the target's name in MERGE), {q}: always qualified;
# every shape holds only that column (and literals)
SHAPES = [
    ("=", "{c} = 1"),
    ("<>", "{c} <> 2"),
    ("<", "{c} < 2.5"),
    ("<=>", "{c} <=> 3"),
    ("IN", "{c} IN (1, 2, 3)"),
    ("BETWEEN", "{c} BETWEEN 1 AND 5"),
    ("IS NULL", "{c} IS NULL"),
    ("IS NOT NULL", "{c} IS NOT NULL"),
    ("NOT", "NOT ({c} = 1)"),
    ("AND/OR", "({c} = 1 OR {c} > 5 OR ({c} < -1 AND {c} <> -7)) AND ({c} <> 3 OR {c} IS NULL)"),
    ("LIKE", "CAST({c} AS STRING) LIKE '1%'"),
    ("arithmetic", "{c} + 1 > {c} * 2 - 3 / {c}"),
    ("CASE WHEN", "CASE WHEN {c} > 1 THEN {c} ELSE 0 END = 2"),
    ("function", "abs({c}) = 1 AND coalesce({c}, 0) >= 1"),
    ("CAST", "CAST({c} AS STRING) = '1'"),
    ("qualified", "{q} = 1 AND {q} IS NOT NULL"),
    ("right-hand side", "1 < {c} AND 7 <> {c} AND 2 BETWEEN {c} AND {c} + 4"),
    ("boolean NOT", "NOT {c}"),
]
DIAGNOSE = 40  # failing keyword spellings re-checked shape by shape (the rest: one combined report)
STRUCT_SHAPE = "{c}.{c} = 1"  # a struct column K with a field K: not analysable, but must parse back


def _quote(name: str) -> str:
    return "`" + name + "`"


def _spelled(word: str, case: int) -> str:
    return _cases(word)[case % 3]


def _pred(word: str, shapes, case: int, qualify: bool = False) -> str:
    """The shapes ANDed, shape j spelling the name in case ``case + j`` (lower, upper, mixed)."""
    parts = []
    for j, (_, tpl) in enumerate(shapes):
        name = _quote(_spelled(word, case + j))
        parts.append("(" + tpl.format(c=("t." if qualify else "") + name, q="t." + name) + ")")
    return " AND ".join(parts)


class Checker:
    """Runs keywords through every path; collects failures as text."""

    def __init__(self):
        self.failures: list[str] = []
        self.checked = 0
        self.diagnosed = 0  # keywords whose failure was narrowed down to shapes

    def fail(self, word: str, what: str, detail: str) -> None:
        self.failures.append(f"{word!r}: {what}: {detail}")

    def parse(self, word: str, statement: str):
        try:
            return isolde.parse(statement)[0]
        except Exception as e:  # noqa: BLE001 -- any refusal of a quoted name is a finding
            self.fail(word, "isolde does not parse the quoted name", f"{statement}  ->  {type(e).__name__}: "
                                                                     f"{str(e).splitlines()[0]}")
            return None

    def scope(self, word, what, *args, **kwargs):
        try:
            return conflict_scope(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 -- the planner must widen, never fail, on a name
            self.fail(word, what, f"conflict_scope raised {type(e).__name__}: {str(e).splitlines()[0]}")
            return None

    def check(self, word: str, shapes=SHAPES, case: int = 0, statements=("DELETE",), direct: bool = False) -> None:
        """``word`` (the table declares it in lower case) through ``statements``; shape j spells it
        in case ``case + j``. All shapes go in one predicate (fast); when that fails, each shape
        alone says which (for the first DIAGNOSE failing keywords)."""
        self.checked += len(shapes)
        before = len(self.failures)
        self._check(word, shapes, case, statements, direct)
        if len(self.failures) > before and len(shapes) > 1 and self.diagnosed < DIAGNOSE:
            self.diagnosed += 1
            del self.failures[before:]
            for j, shape in enumerate(shapes):
                mark = len(self.failures)
                self._check(word, [shape], case + j, statements, direct)
                self.failures[mark:] = [f"[{shape[0]}] {f}" for f in self.failures[mark:]]

    def _check(self, word: str, shapes, case: int, statements, direct: bool) -> None:
        declared = word.lower()
        columns = {declared: "int", "id": "int"}
        schema = {"type": "struct", "fields": [{"name": declared, "type": "integer", "nullable": True, "metadata": {}},
                                               {"name": "id", "type": "integer", "nullable": True, "metadata": {}}]}
        pred = _pred(word, shapes, case)
        # -- the statement's own tree
        stmt = self.parse(declared, f"DELETE FROM t WHERE {pred}")
        if stmt is None:
            return
        tree = stmt.where.tree
        if _columns(tree) != {declared}:
            self.fail(declared, "parsed columns", f"{sorted(_columns(tree))} from {pred!r}")
            return
        want = _conjunct_shapes(tree)
        # -- direct render and re-parse, qualifiers kept (the executor's regenerated SQL)
        if direct:
            text = to_sql(tree)
            try:
                again = parse_condition(text)
                if _shape(again, False) != _shape(tree, False):
                    self.fail(declared, "render / parse_condition", f"{pred!r} rendered {text!r}, "
                                                                    f"read back {to_sql(again)!r}")
            except Exception as e:  # noqa: BLE001
                self.fail(declared, "render / parse_condition", f"{text!r}: {type(e).__name__}: {e}")
        # -- DELETE / UPDATE scope: the WHERE over the plain column name
        scopes = []
        if "DELETE" in statements:
            scopes.append(("DELETE scope", stmt))
        if "UPDATE" in statements:
            target = _quote(_spelled(word, case + 1))
            up = self.parse(declared, f"UPDATE t SET {target} = {target} + 1 WHERE {pred}")
            if up is None:
                return
            if [x.lower() for x in up.assignments[0].column] != [declared]:
                self.fail(declared, "UPDATE SET column", repr(up.assignments[0].column))
            scopes.append(("UPDATE scope", up))
        for what, st in scopes:
            scope = self.scope(declared, what, st, columns, deletion_vectors=True)
            if scope is None:
                continue
            if scope.reads_whole_table or scope.read_predicate is None:
                self.fail(declared, what, f"widened to the whole table: {list(scope.notes)}")
                continue
            self.round_trip(declared, what, scope.read_predicate, want, schema)
        # -- MERGE: ON pins the key (source values given) and target-only conjuncts
        if "MERGE" in statements:
            qpred = _pred(word, shapes, case, qualify=True)
            q = _quote(_spelled(word, case + 2))
            mg = self.parse(declared, f"MERGE INTO t USING s ON t.{q} = s.{q} AND {qpred} "
                                      f"WHEN MATCHED THEN UPDATE SET {q} = s.{q}")
            if mg is None:
                return
            scope = self.scope(declared, "MERGE scope", mg, columns, source_key_values={declared: [1, 2]},
                               source_columns=[declared, "id"], deletion_vectors=True)
            if scope is None:
                return
            if scope.read_predicate is None:
                self.fail(declared, "MERGE scope", f"widened to the whole table: {list(scope.notes)}")
                return
            key = key_predicate(declared, [1, 2])
            try:
                key_shape = _shape(parse_condition(key), True)
            except Exception as e:  # noqa: BLE001 -- reported by check_keys too
                self.fail(declared, "MERGE key predicate", f"{key!r}: {type(e).__name__}")
                return
            self.round_trip(declared, "MERGE scope", scope.read_predicate, want + [key_shape], schema, sort=True)

    def check_keys(self, declared: str) -> None:
        """``key_predicate`` for sets, a single value, null-safe keys and ranges reads back."""
        word = declared
        schema = {"type": "struct", "fields": [{"name": declared, "type": "integer", "nullable": True, "metadata": {}}]}
        for values, null_safe in (([1, 2, 3], False), ([7], False), ([None, 4], True),
                                  (KeyRange(1, 2000, 2000, True), True)):
            text = key_predicate(declared, values, null_safe)
            if text is None:
                self.fail(word, "key_predicate", f"no predicate for {values!r}")
                continue
            try:
                for reader, tree2 in (("parse_condition", parse_condition(text)),
                                      ("Predicate", Predicate(text, schema).expression)):
                    if tree2 is None or _columns(tree2) != {declared.lower()}:
                        self.fail(word, f"key_predicate / {reader}", f"{text!r} reads back as a "
                                  f"{type(tree2).__name__} with columns {sorted(_columns(tree2)) if tree2 else None}")
            except Exception as e:  # noqa: BLE001
                self.fail(word, "key_predicate", f"{text!r}: {type(e).__name__}: {str(e).splitlines()[0]}")

    def round_trip(self, word, what, text, want, schema, sort=False):
        try:
            tree = parse_condition(text)
        except Exception as e:  # noqa: BLE001
            self.fail(word, what, f"{text!r} does not parse again: {type(e).__name__}: {str(e).splitlines()[0]}")
            return
        got = _conjunct_shapes(tree)
        if (sorted(map(repr, got)) != sorted(map(repr, want))) if sort else (got != want):
            self.fail(word, what, f"recorded {text!r}, which reads back with another shape")
            return
        if _columns(tree) != {word.lower()}:
            self.fail(word, what, f"recorded {text!r}: columns {sorted(_columns(tree))}")
            return
        p = Predicate(text, schema)
        if not p.analysable or p.expression is None:
            self.fail(word, what + " / Predicate", f"the checker cannot parse {text!r}")
            return
        got_p = _conjunct_shapes(p.expression)
        if ((sorted(map(repr, got_p)) != sorted(map(repr, want))) if sort else (got_p != want)) \
                or _columns(p.expression) != {word.lower()}:
            self.fail(word, what + " / Predicate", f"the checker reads {text!r} as a {type(p.expression).__name__}: "
                                                   f"{D.sql(p.expression)!r}, columns {sorted(_columns(p.expression))}")

    def check_struct(self, word: str, case: int) -> None:
        q = _quote(_spelled(word, case))
        text = f"DELETE FROM t WHERE {STRUCT_SHAPE.format(c=q)}"
        declared = word.lower()
        stmt = self.parse(declared, text)
        if stmt is None:
            return
        tree = stmt.where.tree
        col = next(iter(tree.find_all(exp.Column)), None)
        if col is None or [p.name.lower() for p in col.parts] != [declared, declared]:
            self.fail(declared, "struct field", f"{text!r} parsed as {tree!r}")
            return
        rendered = to_sql(tree)
        try:
            if _shape(parse_condition(rendered), False) != _shape(tree, False):
                self.fail(declared, "struct field render", f"{rendered!r}")
        except Exception as e:  # noqa: BLE001
            self.fail(declared, "struct field render", f"{rendered!r}: {type(e).__name__}: {e}")
        scope = self.scope(declared, "struct field scope", stmt, {declared: f"struct<{declared}:int>", "id": "int"})
        if scope is not None and not scope.reads_whole_table:  # a struct condition is not analysable
            self.fail(declared, "struct field scope", f"narrowed to {scope.read_predicate!r}")


def _rotation(items: list, index: int, n: int) -> list:
    return [items[(index * n + j) % len(items)] for j in range(n)]


def _report(failures: list[str], limit: int = 40) -> str:
    """Failures grouped by what failed (shape and path), with example words."""
    groups: dict[str, list[str]] = {}
    for f in failures:
        word, _, rest = f.partition(": ")
        shape = ""
        if word.startswith("["):
            shape, _, word = word.partition("] ")
            shape += "] "
        what = rest.split(": ", 1)[0]
        groups.setdefault(shape + what, []).append(f)
    lines = []
    for key, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        words = sorted({i.split(": ", 1)[0].split("] ")[-1] for i in items})
        lines.append(f"{key}: {len(items)} failures, words {', '.join(words[:12])}{' ...' if len(words) > 12 else ''}"
                     f"\n    e.g. {items[0]}")
    return "\n".join(lines[:limit])


def test_quoted_keyword_names_round_trip_through_every_predicate_shape(keywords):
    """Every keyword with every shape through DELETE: isolde's parser, conflict_scope, the
    rendered scope through parse_condition and the executor's Predicate, and the direct render
    (qualifiers kept). Shape j of keyword i spells the name in case (i + j) mod 3 (lower, upper,
    mixed; the table declares it in lower case), so every keyword meets all three cases and every
    (shape, case) pair meets a third of the keywords. Every other keyword also goes through
    UPDATE (SET column, scope) and MERGE (key and target-only conjuncts) with six shapes
    (rotating); every keyword through key_predicate and a struct field K.K."""
    started = time.time()
    c = Checker()
    for i, word in enumerate(keywords):
        c.check(word, SHAPES, case=i, statements=("DELETE",), direct=True)
        if i % 2 == 0:
            c.check(word, _rotation(SHAPES, i // 2, 6), case=i + 1, statements=("UPDATE", "MERGE"))
        c.check_keys(word.lower())
        c.check_struct(word, case=i)
    took = time.time() - started
    print(f"\nquoted keyword names: {len(keywords)} keywords x {len(SHAPES)} shapes (3 cases) + UPDATE/MERGE "
          f"{len(keywords) // 2} x 6: {c.checked} keyword-shapes in {took:.1f} s; {len(c.failures)} failures")
    assert not c.failures, f"{len(c.failures)} failures:\n" + _report(c.failures)


# --------------------------------------------------------------------------- part 2: unquoted, against Spark's parser

#: what isolde claims to read as a name unquoted in an expression (grammar/dialect.py)
CLAIMED = frozenset(w.upper() for w in D.BARE_NAME_WORDS) | frozenset(D._PLAIN_WORDS)

# (label, statement; {w} is the bare word). kw has the column; o and s are other tables.
UNQUOTED = [
    ("WHERE w = 1", "DELETE FROM kw WHERE {w} = 1"),
    ("WHERE 1 < w", "DELETE FROM kw WHERE 1 < {w}"),
    ("WHERE w + 1 > 0", "DELETE FROM kw WHERE {w} + 1 > 0"),
    ("WHERE w IS NULL", "DELETE FROM kw WHERE id = 1 AND {w} IS NULL"),
    ("SET w = 1", "UPDATE kw SET {w} = 1 WHERE id = 1"),
    ("SET id = w + 1", "UPDATE kw SET id = {w} + 1 WHERE id = 1"),
    ("WHERE with a subquery (regenerated SQL)", "DELETE FROM kw WHERE {w} = 1 AND id IN (SELECT id FROM o)"),
    ("MERGE ON / SET", "MERGE INTO kw USING s ON kw.{w} = s.{w} WHEN MATCHED THEN UPDATE SET {w} = s.{w}"),
]


class SparkReader:
    """Spark's own parser (no job): does a statement parse, and which names does it read as
    column references?"""

    def __init__(self, spark):
        self.parser = spark._jsparkSession.sessionState().sqlParser()

    def attributes(self, statement: str) -> Optional[set[str]]:
        """Lower-cased last name parts of the unresolved attributes, or None if Spark refuses."""
        try:
            plan = self.parser.parsePlan(statement)
        except Exception:  # noqa: BLE001 -- a ParseException
            return None
        # an unresolved attribute prints as 'name or 'a.name, spelled as written (lower case in
        # these statements, upper case where isolde regenerated it); an unresolved plan node
        # as 'CamelCase, an unresolved function as 'name(...)
        found = re.findall(r"'((?:`[^`]*`|\w+)(?:\.(?:`[^`]*`|\w+))*)(?![\w(`.])", plan.toString())  # not 'f(...)
        return {m.split(".")[-1].strip("`").lower() for m in found if m in (m.lower(), m.upper())}


def _isolde_trees(stmt) -> list:
    trees = []
    for attr in ("where", "on"):
        x = getattr(stmt, attr, None)
        if x is not None:
            trees.append(x.tree)
    for a in getattr(stmt, "assignments", ()):
        trees.append(a.value.tree)
    for clause in getattr(stmt, "clauses", ()):
        for a in getattr(clause.action, "assignments", ()):
            trees.append(a.value.tree)
    return trees


def _isolde_names(stmt) -> set[str]:
    names = set()
    for tree in _isolde_trees(stmt):
        names |= _columns(tree)
    for a in getattr(stmt, "assignments", ()):
        names.add(a.column[-1].lower())
    for clause in getattr(stmt, "clauses", ()):
        for a in getattr(clause.action, "assignments", ()):
            names.add(a.column[-1].lower())
    return names


def test_unquoted_keywords_read_as_spark_reads_them_or_fail_to_parse(spark, keywords):
    """Never a different reading from Spark's: a statement Spark refuses is a ParseError (with
    line and column); one isolde accepts reads the word as Spark does wherever isolde analyses
    it (a column or not), in the SQL it regenerates and in the scope it records; a word isolde
    claims as a name (BARE_NAME_WORDS, the plain words, any non-reserved word as a SET target)
    is accepted wherever Spark accepts it."""
    from isolde.grammar.lexer import RESERVED

    started = time.time()
    reader = SparkReader(spark)
    failures: list[str] = []
    counts = {"spark refuses": 0, "isolde refuses": 0, "both read a column": 0, "both read something else": 0,
              "isolde reads something else, harmless": 0}
    for word in keywords:
        w = word.lower()
        for label, template in UNQUOTED:
            sql = template.format(w=w)
            spark_names = reader.attributes(sql)
            spark_col = spark_names is not None and w in spark_names
            try:
                stmt = isolde.parse(sql)[0]
            except E.ParseError as e:
                counts["isolde refuses"] += 1
                if not (isinstance(e.line, int) and isinstance(e.column, int) and e.line >= 1
                        and 1 <= e.column <= len(sql) + 1):
                    failures.append(f"{label} {w!r}: ParseError without a usable position ({e.line}, {e.column})")
                # a statement-level name (SET target) follows the lexer: its RESERVED words are
                # documented as never names unless backquoted
                name_position = label.startswith(("SET w", "MERGE"))
                claimed = (word in CLAIMED or name_position) and not (name_position and word in RESERVED)
                if claimed and spark_col:
                    failures.append(f"{label} {w!r}: isolde claims the word as a name but refuses {sql!r}: "
                                    f"{str(e).splitlines()[0]}")
                continue
            except Exception as e:  # noqa: BLE001
                failures.append(f"{label} {w!r}: isolde crashed on {sql!r}: {type(e).__name__}: {e}")
                continue
            if spark_names is None:
                counts["spark refuses"] += 1
                failures.append(f"{label} {w!r}: Spark refuses {sql!r}, isolde accepts it")
                continue
            isolde_col = w in _isolde_names(stmt)
            if isolde_col and not spark_col:
                failures.append(f"{label} {w!r}: isolde reads a column {w!r} in {sql!r}, Spark reads something else")
                continue
            if spark_col and not isolde_col:
                counts["isolde reads something else, harmless"] += 1  # unless a check below says otherwise
            else:
                counts["both read a column" if spark_col else "both read something else"] += 1
            # the SQL isolde regenerates (a slot holding a table is rendered from the tree)
            for tree in _isolde_trees(stmt):
                if not any(True for _ in tree.find_all(exp.Table)):
                    continue
                rendered = D.sql(tree)
                got = reader.attributes(f"DELETE FROM kw WHERE {rendered}")
                if got is None or (w in got) != spark_col:
                    failures.append(f"{label} {w!r}: isolde executes {rendered!r} for {sql!r}: Spark reads "
                                    f"{'nothing (refuses it)' if got is None else sorted(got)}")
            # the scope isolde records
            if isinstance(stmt, (isolde.grammar.ast.Delete, isolde.grammar.ast.Update)):
                try:
                    scope = conflict_scope(stmt, {w: "int", "id": "int"})
                except Exception as e:  # noqa: BLE001
                    failures.append(f"{label} {w!r}: conflict_scope raised {type(e).__name__} on {sql!r}: "
                                    f"{str(e).splitlines()[0]}")
                    continue
                if scope.read_predicate is not None:
                    got = reader.attributes(f"DELETE FROM kw WHERE {scope.read_predicate}")
                    if got is None or not got <= (spark_names | {"id"}):
                        failures.append(f"{label} {w!r}: the recorded scope {scope.read_predicate!r} of {sql!r} reads "
                                        f"{'nothing (Spark refuses it)' if got is None else sorted(got)} in Spark, "
                                        f"the statement {sorted(spark_names)}")
    took = time.time() - started
    print(f"\nunquoted keywords: {len(keywords)} words x {len(UNQUOTED)} positions in {took:.1f} s: {counts}; "
          f"{len(failures)} failures")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:60])


# --------------------------------------------------------------------------- part 3: real statements on Spark

#: columns spelled like keywords that must be quoted (Spark's ANSI-reserved words, isolde's
#: lexer RESERVED, literals and functions), all of them accepted by Spark when quoted
E2E_QUOTED = ["select", "from", "where", "and", "order", "group", "table", "case", "end", "null", "true",
              "interval", "current_user", "date", "limit"]
#: the words isolde claims to read as names unquoted (BARE_NAME_WORDS and the plain words)
E2E_BARE = sorted(w.lower() for w in CLAIMED)


def _q(name: str) -> str:
    return f"`{name}`"


class KwTable:
    """The kw table and a Python model of its rows (id -> {column: value})."""

    def __init__(self, session, path, columns):
        self.s, self.path, self.columns = session, path, columns
        self.rows = {i: {c: i for c in columns} for i in (1, 2, 3, 4)}
        self.failures: list[str] = []
        self.ran = 0

    def version(self) -> int:
        import os

        names = os.listdir(os.path.join(self.path, "_delta_log"))
        return max(int(n[:20]) for n in names if n.endswith(".json") and n[:20].isdigit())

    def run(self, sql: str, apply) -> None:
        """Run ``sql``; on success apply the model change ``apply(rows)`` and check the recorded
        read predicates evaluate in Spark. A failure is recorded, not raised: later statements
        still run against the state the model describes."""
        self.ran += 1
        before = self.version()
        try:
            self.s.execute(sql)
        except Exception as e:  # noqa: BLE001
            self.failures.append(f"{sql}\n    -> {type(e).__name__}: {str(e).splitlines()[0]}")
            assert self.version() == before, f"a failed statement committed: {sql}"
            return
        apply(self.rows)
        if self.version() > before:
            import json
            import os

            with open(os.path.join(self.path, "_delta_log", f"{self.version():020d}.json")) as fh:
                info = next(json.loads(line)["commitInfo"] for line in fh if '"commitInfo"' in line)
            for pred in info.get("readPredicates") or []:
                try:
                    self.s.spark.sql(f"SELECT count(*) FROM kw_plain WHERE {pred}").collect()
                except Exception as e:  # noqa: BLE001
                    self.failures.append(f"{sql}\n    -> recorded read predicate {pred!r} does not evaluate in Spark: "
                                         f"{str(e).splitlines()[0]}")

    def expected(self) -> list[tuple]:
        from tests.helpers.oracle import sorted_rows

        return sorted_rows(tuple(r.get(c) for c in ["id", *self.columns]) for i, r in self.rows.items()
                           if r is not None and r.get("id", i) is not None)


def test_keyword_named_columns_through_real_statements(session, table_path, delta_rows):
    s = session
    columns = E2E_QUOTED + E2E_BARE
    s.execute(f"CREATE TABLE kw (id INT, {', '.join(f'{_q(c)} INT' for c in columns)})")
    values = ", ".join("(" + ", ".join([str(i)] * (len(columns) + 1)) + ")" for i in (1, 2, 3, 4))
    s.execute(f"INSERT INTO kw VALUES {values}")
    t = KwTable(s, table_path(s, "kw"), columns)
    for r in t.rows.values():
        r["id"] = next(iter(r.values()))

    def refresh_plain():  # Spark's own reading of conditions is evaluated over a plain copy
        s.spark.createDataFrame([tuple(r[c] for c in ["id", *columns]) for r in t.rows.values()],
                                ", ".join([_q("id") + " INT"] + [f"{_q(c)} INT" for c in columns])
                                ).createOrReplaceTempView("kw_plain")

    refresh_plain()
    Q = {c: _q(c) for c in columns}

    # 1. quoted names in every position of an UPDATE (row 1)
    shapes = [f"{Q['select']} = 1", f"{Q['from']} IN (1, 2)", f"{Q['where']} BETWEEN 0 AND 1", f"NOT ({Q['and']} <> 1)",
              f"1 <= {Q['order']}", f"abs({Q['group']}) = 1", f"CAST({Q['table']} AS STRING) = '1'",
              f"kw.{Q['case']} IS NOT NULL", f"({Q['end']} = 1 OR {Q['null']} > 100)", f"{Q['true']} <=> 1",
              f"{Q['interval']} + 1 = 2", f"{Q['current_user']} = 1", f"{Q['date']} * 2 = 2", f"1 = {Q['limit']}"]
    sets = ", ".join(f"{Q[c]} = {Q[c]} + 10" for c in E2E_QUOTED)
    t.run(f"UPDATE kw SET {sets} WHERE {' AND '.join(shapes)}",
          lambda rows: rows[1].update({c: 11 for c in E2E_QUOTED}))
    # 2. quoted DELETE (row 2), names on both sides of the comparisons
    t.run(f"DELETE FROM kw WHERE {Q['select']} = 2 AND 2 = {Q['from']} AND {Q['where']} + 0 = {Q['order']} "
          f"AND {Q['current_user']} IN (2) AND {Q['interval']} IS NOT NULL",
          lambda rows: rows.update({2: None}))
    # 3. quoted MERGE (row 3 updated, a new row 9)
    t.run(f"MERGE INTO kw USING (SELECT 3 AS {Q['where']}, 30 AS {Q['order']} UNION ALL SELECT 9, 90) s "
          f"ON kw.{Q['where']} = s.{Q['where']} AND kw.{Q['select']} >= 3 "
          f"WHEN MATCHED AND kw.{Q['from']} = 3 THEN UPDATE SET {Q['order']} = s.{Q['order']}, "
          f"{Q['and']} = kw.{Q['and']} + s.{Q['order']} "
          f"WHEN NOT MATCHED THEN INSERT (id, {Q['where']}, {Q['order']}) VALUES (9, s.{Q['where']}, s.{Q['order']})",
          lambda rows: (rows[3].update({"order": 30, "and": 33}),
                        rows.update({9: {**{c: None for c in columns}, "id": 9, "where": 9, "order": 90}})))
    rows_now = {k: v for k, v in t.rows.items() if v is not None}
    t.rows = rows_now
    refresh_plain()
    # 4. the claimed words unquoted, in WHERE (column first) and SET (row 4)
    where = " AND ".join(f"{w} {op} 4" for w, op in zip(E2E_BARE, ["=", ">=", "<=", "IN (4, 5) AND 0 <", "+ 0 ="] * 9))
    t.run(f"UPDATE kw SET minus = minus + 100, xor = 7, optimize = optimize * 2 WHERE {where}",
          lambda rows: rows[4].update({"minus": 104, "xor": 7, "optimize": 8}))
    # 5. unquoted DELETE (row 9: its claimed columns are NULL)
    t.run("DELETE FROM kw WHERE like IS NULL AND ilike IS NULL AND values IS NULL AND id = 9",
          lambda rows: rows.pop(9))
    # 6. unquoted MERGE (row 4)
    minus4 = t.rows[4]["minus"]  # 104 when statement 4 ran (the model follows what did run)
    t.run(f"MERGE INTO kw USING (SELECT {minus4} AS minus, 5 AS v) s ON kw.minus = s.minus "
          "WHEN MATCHED THEN UPDATE SET qualify = s.v, rlike = kw.rlike + s.v",
          lambda rows: rows[4].update({"qualify": 5, "rlike": 9}))
    refresh_plain()
    # 7. a claimed word on the right-hand side, unquoted and quoted (row 3)
    t.run("UPDATE kw SET xor = 8 WHERE 3 = minus", lambda rows: rows[3].update({"xor": 8}))
    t.run(f"UPDATE kw SET {Q['drop']} = 9 WHERE 1 < {Q['except']} AND {Q['except']} < 4",
          lambda rows: rows[3].update({"drop": 9}))
    t.run(f"UPDATE kw SET {Q['alter']} = 6 WHERE {Q['alter']} BETWEEN 2 AND 3 OR 5 <= {Q['if']} - 100",
          lambda rows: rows[3].update({"alter": 6}))

    got = delta_rows(t.path, ["id", *columns])
    if got != t.expected():
        want = {r[0]: r for r in t.expected()}
        for row in got:
            diff = {c: (v, want.get(row[0], (None,) * len(row))[j + 1]) for j, (c, v) in enumerate(zip(columns, row[1:]))
                    if v != want.get(row[0], (None,) * len(row))[j + 1]}
            if diff or row[0] not in want:
                t.failures.append(f"row id={row[0]} differs from the model (column: (table, model)): {diff}")
        missing = set(want) - {r[0] for r in got}
        if missing:
            t.failures.append(f"rows {sorted(missing)} are missing")
    read = sorted(tuple(r) for r in s.sql(f"SELECT id, {', '.join(Q[c] for c in columns)} FROM kw").collect())
    if read != sorted(got, key=lambda r: r[0]):
        t.failures.append("isolde's own query of kw differs from what delta-rs reads")

    # 8. reserved words unquoted: a ParseError with line/column and nothing written, or (where
    # isolde accepts the text) exactly Spark's own reading of it: the same rows changed
    refresh_plain()
    from isolde.grammar.lexer import RESERVED

    words = sorted({w.lower() for w in RESERVED} | {"true", "false", "null", "interval", "current_user", "date"})
    checked = refused = 0
    for n, w in enumerate(words):
        marker = 500 + n
        for sql, cond in ((f"UPDATE kw SET xor = {marker} WHERE {w} = 1", f"{w} = 1"),
                          (f"UPDATE kw SET xor = {marker}\n  WHERE id > 0 AND {w} IS NOT NULL", f"id > 0 AND {w} IS NOT NULL")):
            checked += 1
            before = t.version()
            try:
                spark_ids = sorted(r[0] for r in s.spark.sql(f"SELECT id FROM kw_plain WHERE {cond}").collect())
            except Exception:  # noqa: BLE001 -- Spark refuses or cannot resolve it
                spark_ids = None
            try:
                s.execute(sql)
            except E.ParseError as e:
                refused += 1
                line = sql.count("\n", 0, sql.index(cond)) + 1
                if e.line != line or not isinstance(e.column, int) or e.column < 1:
                    t.failures.append(f"{sql!r}: ParseError at line {e.line}, column {e.column}; expected line {line}")
                if t.version() != before:
                    t.failures.append(f"{sql!r}: refused, but a commit was written")
                continue
            except Exception as e:  # noqa: BLE001
                if spark_ids is not None:
                    t.failures.append(f"{sql!r}: {type(e).__name__} (not a ParseError): {str(e).splitlines()[0]}")
                continue
            changed = sorted(r[0] for r in delta_rows(t.path, ["id", "xor"]) if r[1] == marker)
            if spark_ids is None or changed != spark_ids:
                t.failures.append(f"{sql!r}: isolde changed rows {changed}, Spark's reading of {cond!r} selects "
                                  f"{spark_ids if spark_ids is not None else 'nothing (it refuses it)'}")
            for i in changed:
                t.rows[i]["xor"] = marker
    print(f"\nkeyword columns: {len(columns)} columns, {t.ran} statements; {checked} unquoted reserved-word "
          f"statements, {refused} refused with a ParseError")
    assert not t.failures, f"{len(t.failures)} failures:\n" + "\n".join(t.failures)
