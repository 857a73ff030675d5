"""UPDATE / DELETE / MERGE against a row-by-row model of their semantics (Spark).

Seeded random chains of statements on small tables: partitioned or not, deletion vectors on
or off, NULL keys, values and partition values, duplicate keys, rows that change partition,
and every MERGE clause kind with and without conditions. isolde runs each statement; a model
written from the semantics alone (SQL's three-valued logic, the first matching clause wins,
NOT MATCHED BY SOURCE, the cardinality rule) runs it on Python tuples. After every statement
the table, read by isolde and by delta-rs, and the statement's row counts must equal the
model's; a statement the model says must fail raises MergeCardinalityError and commits nothing.
A failing chain is replayed alone with ``pytest tests/executor/jobs/test_dml_model.py -k default-seed7``.
"""

from __future__ import annotations

import random
from collections import namedtuple

import pyarrow as pa
import pytest

from tests.helpers.oracle import read_delta_rows, sorted_rows  # noqa: E402
from tests.helpers.dml import PLANS, Runner, always_one_scan, force_plan, make_table  # noqa: E402

from isolde.errors import MergeCardinalityError  # noqa: E402

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("p", pa.string())])
Row = namedtuple("Row", "id v p")
STATEMENTS = 5
# (plan, seed): 16 chains under the default plan, two more under each plan the thresholds
# force (test_dml_plans.py); seed % 4 picks the table kind, (un)partitioned x deletion vectors
CHAINS = [("default", i) for i in range(16)] + [
    (plan, 16 + 2 * j + k) for j, plan in enumerate(p for p in PLANS if p != "default") for k in range(2)]


# --------------------------------------------------------------------------- SQL's logic


def _null(*xs):
    return any(x is None for x in xs)


def eq(a, b):
    return None if _null(a, b) else a == b


def gt(a, b):
    return None if _null(a, b) else a > b


def lt(a, b):
    return None if _null(a, b) else a < b


def null_safe_eq(a, b):
    return a == b if not _null(a, b) else (a is None and b is None)


def both(a, b):
    if a is False or b is False:
        return False
    return None if _null(a, b) else True


def plus(a, b):
    return None if _null(a, b) else a + b


def times(a, b):
    return None if _null(a, b) else a * b


def mod(a, b):
    return None if _null(a, b) else int(a - b * int(a / b))  # Spark's % keeps the dividend's sign


# --------------------------------------------------------------------------- statement parts: (sql, model)

ON = [
    ("s.id = t.id", lambda t, s: eq(s.id, t.id)),
    ("s.id <=> t.id", lambda t, s: null_safe_eq(s.id, t.id)),
    ("s.id = t.id AND t.p = 'a'", lambda t, s: both(eq(s.id, t.id), eq(t.p, "a"))),
    ("t.id = s.id AND s.v > 2", lambda t, s: both(eq(t.id, s.id), gt(s.v, 2))),
]
MATCHED_CONDITIONS = [
    ("s.v > 4", lambda t, s: gt(s.v, 4)),
    ("t.v IS NULL", lambda t, s: t.v is None),
    ("s.v < t.v", lambda t, s: lt(s.v, t.v)),
    ("t.p = 'a'", lambda t, s: eq(t.p, "a")),
]
MATCHED_ACTIONS = [  # None: DELETE
    ("UPDATE SET *", lambda t, s: Row(s.id, s.v, s.p)),
    ("UPDATE SET v = s.v", lambda t, s: Row(t.id, s.v, t.p)),
    ("UPDATE SET v = t.v + 1", lambda t, s: Row(t.id, plus(t.v, 1), t.p)),
    ("UPDATE SET p = s.p, v = coalesce(s.v, -1)", lambda t, s: Row(t.id, -1 if s.v is None else s.v, s.p)),
    ("DELETE", None),
]
SOURCE_CONDITIONS = [
    ("s.v > 4", lambda s: gt(s.v, 4)),
    ("s.v IS NULL", lambda s: s.v is None),
    ("s.p = 'b'", lambda s: eq(s.p, "b")),
]
INSERTS = [
    ("INSERT *", lambda s: Row(s.id, s.v, s.p)),
    ("INSERT (id, v, p) VALUES (s.id, s.v * 10, 'c')", lambda s: Row(s.id, times(s.v, 10), "c")),
    ("INSERT (id, p) VALUES (s.id, s.p)", lambda s: Row(s.id, None, s.p)),
]
TARGET_CONDITIONS = [  # by-source conditions and UPDATE / DELETE WHERE (t's columns only)
    ("t.v > 4", lambda t, src: gt(t.v, 4)),
    ("t.v IS NULL", lambda t, src: t.v is None),
    ("t.p = 'b'", lambda t, src: eq(t.p, "b")),
    ("t.id % 2 = 0", lambda t, src: eq(mod(t.id, 2), 0)),
]
WHERE_ONLY = [  # a subquery over another table: only in UPDATE / DELETE
    ("t.id IN (SELECT id FROM src WHERE v > 3)",
     lambda t, src: t.id is not None and t.id in {s.id for s in src if s.id is not None and gt(s.v, 3)}),
]
BY_SOURCE_ACTIONS = [
    ("UPDATE SET v = -1", lambda t: Row(t.id, -1, t.p)),
    ("UPDATE SET v = t.v * 2", lambda t: Row(t.id, times(t.v, 2), t.p)),
    ("DELETE", None),
]
UPDATE_SETS = [
    ("v = t.v + 1", lambda t: Row(t.id, plus(t.v, 1), t.p)),
    ("p = 'b'", lambda t: Row(t.id, t.v, "b")),
    ("v = CASE WHEN t.v IS NULL THEN 0 ELSE t.v * 2 END", lambda t: Row(t.id, 0 if t.v is None else t.v * 2, t.p)),
]


# --------------------------------------------------------------------------- the model


class Expected(Exception):
    """The model's verdict that the statement must fail with MergeCardinalityError."""


def model_merge(target, source, on, matched, not_matched, by_source):
    """(new rows, updated, deleted, inserted). Clauses are (condition or None, action)."""

    def first(clauses, *args):
        for cond, action in clauses:
            if cond is None or cond(*args) is True:
                return (action,)
        return None

    lone_delete = len(matched) == 1 and matched[0] == (None, None)
    out, updated, deleted = [], 0, 0
    for t in target:
        hits = [s for s in source if on(t, s) is True]
        acting = [(s, c) for s in hits if (c := first(matched, t, s)) is not None]
        if len(acting) > 1 and not lone_delete:
            raise Expected()
        if acting:
            s, (action,) = acting[0]
            new = None if action is None else action(t, s)
        elif not hits and (c := first(by_source, t)) is not None:
            new = None if c[0] is None else c[0](t)
        else:
            out.append(t)
            continue
        if new is None:
            deleted += 1
        else:
            updated += 1
            out.append(new)
    inserted = 0
    for s in source:
        if any(on(t, s) is True for t in target):
            continue
        c = first(not_matched, s)
        if c is not None:
            out.append(c[0](s))
            inserted += 1
    return out, updated, deleted, inserted


# --------------------------------------------------------------------------- random statements


def _rows(rng, n, ids):
    return [Row(rng.choice(ids), rng.choice([None, *range(10)]), rng.choice(["a", "a", "b", "b", None]))
            for _ in range(n)]


def _clauses(rng, conditions, actions, most):
    """0..most clauses; every clause but the last has a condition (Spark's rule)."""
    n = rng.randint(0, most)
    out = []
    for i in range(n):
        cond = rng.choice(conditions) if i < n - 1 or rng.random() < 0.5 else None
        out.append((cond, rng.choice(actions)))
    return out


def _merge(rng, k):
    on = rng.choice(ON)
    while True:
        matched = _clauses(rng, MATCHED_CONDITIONS, MATCHED_ACTIONS, 2)
        not_matched = _clauses(rng, SOURCE_CONDITIONS, INSERTS, 2)
        by_source = _clauses(rng, TARGET_CONDITIONS, BY_SOURCE_ACTIONS, 2)
        if matched or not_matched or by_source:
            break
    text = [f"MERGE INTO t USING src{k} AS s ON {on[0]}"]
    for kind, clauses in (("MATCHED", matched), ("NOT MATCHED", not_matched), ("NOT MATCHED BY SOURCE", by_source)):
        for cond, action in clauses:
            text.append(f"WHEN {kind}" + (f" AND {cond[0]}" if cond else "") + f" THEN {action[0]}")
    # the model's clauses: (condition fn or None, action fn or None for DELETE)
    return " ".join(text), (on[1], [(c and c[1], a[1]) for c, a in matched],
                            [(c and c[1], a[1]) for c, a in not_matched],
                            [(c and (lambda t, f=c[1]: f(t, ())), a[1]) for c, a in by_source])


def _chain(seed):
    rng = random.Random(seed)
    return {
        "partitioned": seed % 2 == 0,
        "dvs": seed % 4 < 2,
        "files": [_rows(rng, rng.randint(0, 6), [None, *range(6)]) for _ in range(rng.randint(1, 3))],
        "rng": rng,
    }


@pytest.mark.parametrize("plan,seed", CHAINS, ids=[f"{plan}-seed{seed}" for plan, seed in CHAINS])
def test_statements_match_the_model(tmp_path, monkeypatch, plan, seed):
    always_one_scan(monkeypatch)
    force_plan(monkeypatch, plan)
    chain = _chain(seed)
    rng = chain["rng"]
    r = Runner(tmp_path / "wh")
    parts = ("p",) if chain["partitioned"] else ()
    make_table(r.path("t"), SCHEMA, [[row._asdict() for row in f] for f in chain["files"]], partition_by=parts,
               properties={"delta.enableDeletionVectors": str(chain["dvs"]).lower()})
    table = [row for f in chain["files"] for row in f]
    story = [f"partitioned={chain['partitioned']} dvs={chain['dvs']} rows={table}"]
    for k in range(STATEMENTS):
        source = _rows(rng, rng.randint(0, 6), [None, *range(8)])
        make_table(r.path(f"src{k}"), SCHEMA, [[s._asdict() for s in source]])
        kind = rng.choice(["merge", "merge", "merge", "update", "delete", "insert"])
        if kind == "insert":
            sql = f"INSERT INTO t SELECT * FROM src{k}"
            expected, want = table + source, {}
        elif kind == "merge":
            sql, (on, matched, not_matched, by_source) = _merge(rng, k)
            try:
                expected, upd, dele, ins = model_merge(table, source, on, matched, not_matched, by_source)
                want = {"numTargetRowsUpdated": upd, "numTargetRowsDeleted": dele, "numTargetRowsInserted": ins,
                        "numSourceRows": len(source)}
            except Expected:
                expected = want = None
        else:
            cond = rng.choice(TARGET_CONDITIONS + WHERE_ONLY + [None])
            where = f" WHERE {cond[0]}".replace("FROM src ", f"FROM src{k} ") if cond else ""
            hit = [cond is None or cond[1](t, source) is True for t in table]
            if kind == "update":
                sets = rng.choice(UPDATE_SETS)
                sql = f"UPDATE t SET {sets[0]}{where}"
                expected = [sets[1](t) if h else t for t, h in zip(table, hit)]
                want = {"numUpdatedRows": sum(hit)}
            else:
                sql = f"DELETE FROM t{where}"
                expected = [t for t, h in zip(table, hit) if not h]
                want = {"numDeletedRows": sum(hit)}
        story.append(f"{sql}    -- source {source}")
        version = r.log("t").update().version
        if want is None:
            with pytest.raises(MergeCardinalityError):
                r.run(sql)
            assert r.log("t").update().version == version, "\n".join(story)
        else:
            result = r.run(sql)
            got = {key: result.metrics.get(key) for key in want}
            assert got == want, "\n".join(story)
            table = expected
        assert r.rows("t") == sorted_rows(table), "\n".join(story)
        assert read_delta_rows(r.path("t")) == sorted_rows(table), "\n".join(story)
