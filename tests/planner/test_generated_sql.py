"""Statements of the shape generated SQL and BI tools produce: thousands of conditions and
hundreds of nesting levels. They run with the right answer, or fail with a ParseError that
names the limit -- never a RecursionError (issue 18, point 4).

Spark itself takes tens of seconds per statement on a few thousand conjuncts (a plain Spark
count over 5,000 ANDs took 216 s here), so the Spark cases use 1,000-5,000 conditions once per
statement kind; parsing and planning 5,000 and the nesting limit are checked without Spark in
tests/planner/test_generated_sql_planning.py."""

from __future__ import annotations

import pytest


pytestmark = pytest.mark.slow


def ids(session, sql):
    return sorted(r[0] for r in session.sql(sql).collect())


@pytest.fixture
def t(session):
    session.execute("CREATE TABLE t (id INT, v INT)")
    session.execute("INSERT INTO t SELECT id, 0 FROM range(0, 100)")
    session.execute("INSERT INTO t SELECT id, 0 FROM range(100, 200)")
    return session


def nested(condition: str, depth: int) -> str:
    return "(" * depth + condition + ")" * depth


def alternating(depth: int) -> str:
    """(id <> 1000 AND (id = 3 OR (id <> 1002 AND ... id = 1)))): true for ids 1 and the odd 3..199."""
    out = "id = 1"
    for i in range(depth):
        out = f"(id = {i + 2} OR {out})" if i % 2 else f"(id <> {1000 + i} AND {out})"
    return out


def test_select_with_thousands_of_conditions(t):
    s = t
    ors = " OR ".join(f"id = {i}" for i in range(0, 5000, 7))  # 715 disjuncts, every 7th id
    assert ids(s, f"SELECT id FROM t WHERE {ors}") == list(range(0, 200, 7))
    many_ors = " OR ".join(f"id = {i}" for i in range(5000))
    assert len(ids(s, f"SELECT id FROM t WHERE {many_ors}")) == 200
    assert ids(s, f"SELECT id FROM t WHERE {nested('id = 199', 200)}") == [199]
    assert ids(s, f"SELECT id FROM t WHERE {alternating(200)}") == [1] + list(range(3, 200, 2))


def test_update_delete_merge_with_thousands_of_conditions(t):
    s = t
    ands = " AND ".join(f"id <> {i}" for i in range(1000) if not 190 <= i < 200)
    r = s.execute(f"UPDATE t SET v = v + 1 WHERE id >= 190 AND {ands}")
    assert r.metrics["numUpdatedRows"] == 10
    ors = " OR ".join(f"id = {i}" for i in range(10_000, 15_000)) + " OR id = 5"
    assert s.execute(f"DELETE FROM t WHERE {ors}").metrics["numDeletedRows"] == 1
    on = " AND ".join(f"t.id <> {i}" for i in range(1000, 2000))
    r = s.execute(f"MERGE INTO t USING (SELECT 7 AS id) src ON t.id = src.id AND {on} "
                  "WHEN MATCHED THEN UPDATE SET v = 70")
    assert r.metrics["numTargetRowsUpdated"] == 1
    assert ids(s, "SELECT id FROM t WHERE v = 1") == list(range(190, 200))
    assert ids(s, "SELECT v FROM t WHERE id = 7") == [70] and 5 not in ids(s, "SELECT id FROM t")


def test_update_delete_merge_nested_200_levels(t):
    s = t
    r = s.execute(f"UPDATE t SET v = {nested('v + 1', 200)} WHERE {nested('id = 199', 200)}")
    assert r.metrics["numUpdatedRows"] == 1
    assert s.execute(f"DELETE FROM t WHERE {alternating(200)}").metrics["numDeletedRows"] == 100
    r = s.execute(f"MERGE INTO t USING (SELECT 198 AS id) src ON {nested('t.id = src.id', 200)} "
                  "WHEN MATCHED THEN DELETE")
    assert r.metrics["numTargetRowsDeleted"] == 1
    assert len(ids(s, "SELECT id FROM t")) == 99 and ids(s, "SELECT v FROM t WHERE id = 199") == []
