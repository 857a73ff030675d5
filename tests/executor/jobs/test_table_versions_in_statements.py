"""Every place a statement names a table reads the version it names (issue 52, items 4 and 5).

One table-driven test: a target ``t`` and a second table ``src``, each at version 1 (lower-case
values) and version 2 (upper-cased), and every spelling of a table reference in every slot of a
write -- MERGE source as a query and as a bare name, WHERE / SET subqueries at any depth, CTEs
(one shadowing a real table's name), persistent and temporary views, a user's Spark view,
``delta.`/path` ``, ``VERSION AS OF``, ``TIMESTAMP AS OF`` and Delta's ``@v`` / ``@yyyyMMddHHmmssSSS``
path syntax. Each case checks

* the table after the statement (which version's values it read), by isolde and by delta-rs;
* EXPLAIN's list of the other reads (the version each reference reads) and whether the conflict
  scope counts a read of the target's current rows (a time-travel read of the target does not:
  an old version is immutable, no concurrent commit changes it);
* the commit's recorded read (``readWholeTable``, ``isBlindAppend``).

Before the fix, time travel inside MERGE / DELETE / UPDATE read the current version (Delta's own
repair recipe, a MERGE from ``t VERSION AS OF n``, left the bad values in place and reported rows
updated), a view as a MERGE source lost its name, and an isolde temp view was unknown inside a
DELETE subquery.
"""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from isolde import errors as E

LOWER = [(1, "a"), (2, "b"), (3, "c")]
UPPER = [(1, "A"), (2, "B"), (3, "C")]
MERGE = "MERGE INTO t USING {src} ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v"

TT = "time travel: an immutable version"
PINNED = "the target, at the transaction's snapshot"


def rows(s, table="t"):
    return sorted(tuple(r) for r in s.sql(f"SELECT id, v FROM {table}").collect())


@pytest.fixture
def tables(session, table_path, spark):
    s = session
    for name, values in (("t", "(1, 'a'), (2, 'b'), (3, 'c')"), ("src", "(1, 'p'), (2, 'q')")):
        s.execute(f"CREATE TABLE {name} (id INT, v STRING)")  # v0
        s.execute(f"INSERT INTO {name} VALUES {values}")  # v1
        s.execute(f"UPDATE {name} SET v = upper(v)")  # v2
    s.execute("CREATE VIEW old_t AS SELECT * FROM t VERSION AS OF 1")
    s.execute("CREATE TEMP VIEW old_tmp AS SELECT * FROM t VERSION AS OF 1")
    s.execute("CREATE VIEW cur_t AS SELECT * FROM t")
    spark.createDataFrame([(1, "z")], "id INT, v STRING").createOrReplaceTempView("sparkv")
    from isolde.executor.log import DeltaLog

    path = table_path(s, "t")
    ms = DeltaLog.for_table(path).snapshot(1).timestamp
    when = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    yield {"P": path, "ts1": when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
           "at1": when.strftime("%Y%m%d%H%M%S%f")[:-3]}
    spark.catalog.dropTempView("sparkv")


def last_commit_info(path: str) -> dict:
    log = os.path.join(path, "_delta_log")
    latest = max(f for f in os.listdir(log) if f.endswith(".json") and f[:20].isdigit())
    with open(os.path.join(log, latest)) as fh:
        for line in fh:
            action = json.loads(line)
            if "commitInfo" in action:
                return action["commitInfo"]
    return {}


# (id, statement, rows after, EXPLAIN "Other reads"/"Source reads" line fragments, the scope
#  counts a read of the target's current rows?, commitInfo readWholeTable (None: not checked))
CASES = [
    # MERGE sources reading the target's version 1: Delta's repair recipe
    ("merge-subquery-version", MERGE.format(src="(SELECT * FROM t VERSION AS OF 1) s"), LOWER,
     [f"t @ version 1 ({TT})"], False, False),
    ("merge-name-version", MERGE.format(src="t VERSION AS OF 1 AS s"), LOWER, [f"t @ version 1 ({TT})"], False, False),
    ("merge-name-timestamp", MERGE.format(src="t TIMESTAMP AS OF '{ts1}' AS s"), LOWER,
     [f"t @ version 1 ({TT})"], False, False),
    ("merge-path-version", MERGE.format(src="delta.`{P}` VERSION AS OF 1 AS s"), LOWER,
     [f"@ version 1 ({TT})"], False, False),
    ("merge-path-at-version", MERGE.format(src="(SELECT * FROM delta.`{P}@v1`) s"), LOWER,
     [f"@ version 1 ({TT})"], False, False),
    ("merge-path-at-timestamp", MERGE.format(src="(SELECT * FROM delta.`{P}@{at1}`) s"), LOWER,
     [f"@ version 1 ({TT})"], False, False),
    ("merge-view", MERGE.format(src="old_t s"), LOWER, [f"t @ version 1 ({TT})"], False, False),
    ("merge-view-unaliased", "MERGE INTO t USING old_t ON t.id = old_t.id WHEN MATCHED THEN UPDATE SET v = old_t.v",
     LOWER, [f"t @ version 1 ({TT})"], False, False),
    ("merge-temp-view", MERGE.format(src="old_tmp s"), LOWER, [f"t @ version 1 ({TT})"], False, False),
    ("merge-cte", MERGE.format(src="(WITH o AS (SELECT * FROM t VERSION AS OF 1) SELECT * FROM o) s"), LOWER,
     [f"t @ version 1 ({TT})"], False, False),
    ("merge-nested", MERGE.format(src="(SELECT * FROM (SELECT * FROM (SELECT * FROM t VERSION AS OF 1) a) b) s"),
     LOWER, [f"t @ version 1 ({TT})"], False, False),
    # the target's current rows: pinned to the transaction's snapshot, and a read of the target
    ("merge-current-target", MERGE.format(src="(SELECT id, lower(v) AS v FROM t) s"), LOWER, [f"t @ version 2 ({PINNED})"],
     True, True),
    ("merge-current-view", MERGE.format(src="(SELECT id, lower(v) AS v FROM cur_t) s"), LOWER,
     [f"t @ version 2 ({PINNED})"], True, True),
    # another table, old and latest
    ("merge-other-version", MERGE.format(src="src VERSION AS OF 1 AS s"), [(1, "p"), (2, "q"), (3, "C")],
     ["src @ version 1"], False, False),
    ("merge-other-latest", MERGE.format(src="src s"), [(1, "P"), (2, "Q"), (3, "C")], ["src @ version 2 (latest)"],
     False, False),
    ("merge-spark-view", MERGE.format(src="sparkv s"), [(1, "z"), (2, "B"), (3, "C")], ["sparkv: not an isolde table"],
     False, False),
    # DELETE / UPDATE subqueries
    ("delete-subquery-version", "DELETE FROM t WHERE id IN (SELECT id FROM t VERSION AS OF 1 WHERE v = 'a')",
     UPPER[1:], [f"t @ version 1 ({TT})"], False, None),
    ("delete-subquery-current", "DELETE FROM t WHERE id IN (SELECT id FROM t WHERE v = 'A')", UPPER[1:],
     [f"t @ version 2 ({PINNED})"], True, True),
    ("delete-temp-view", "DELETE FROM t WHERE id IN (SELECT id FROM old_tmp WHERE v = 'b')", [UPPER[0], UPPER[2]],
     [f"t @ version 1 ({TT})"], False, None),
    ("delete-cte-shadows-table", "DELETE FROM t WHERE id IN (WITH src AS (SELECT 3 AS id) SELECT id FROM src)",
     UPPER[:2], [], False, None),
    ("delete-deep", "DELETE FROM t WHERE id IN (SELECT id FROM (SELECT * FROM (SELECT * FROM src VERSION AS OF 1) a "
     "WHERE v = 'q') b)", [UPPER[0], UPPER[2]], ["src @ version 1"], False, None),
    ("update-scalar-version", "UPDATE t SET v = (SELECT o.v FROM t VERSION AS OF 1 o WHERE o.id = t.id) WHERE id = 2",
     [(1, "A"), (2, "b"), (3, "C")], [f"t @ version 1 ({TT})"], False, None),
    ("update-exists-path", "UPDATE t SET v = 'z' WHERE EXISTS (SELECT 1 FROM delta.`{P}` VERSION AS OF 1 o "
     "WHERE o.id = t.id AND o.v = 'c')", [(1, "A"), (2, "B"), (3, "z")], [f"@ version 1 ({TT})"], False, None),
    # INSERT ... SELECT: an old version of the target is no read of it (a blind append)
    ("insert-version", "INSERT INTO t SELECT id + 10, v FROM t VERSION AS OF 1",
     UPPER + [(11, "a"), (12, "b"), (13, "c")], ["t @ version 1"], False, False),
    ("insert-current", "INSERT INTO t SELECT id + 10, v FROM t", UPPER + [(11, "A"), (12, "B"), (13, "C")],
     ["t @ version 2"], True, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_reference_reads_the_version_it_names(session, tables, delta_rows, case):
    s = session
    _, template, expected, reads, reads_current_target, whole = case
    sql = template.format(**tables)
    plan = s.explain(sql)
    for fragment in reads:
        assert fragment in plan, plan
    mentions_target = "reads the target table" in plan or "is the target table" in plan \
        or "reading the target table" in plan
    assert mentions_target is reads_current_target, plan
    s.execute(sql)
    assert rows(s) == sorted(expected)
    assert delta_rows(tables["P"], ["id", "v"]) == sorted(expected)
    info = last_commit_info(tables["P"])
    if whole is not None:
        assert bool(info.get("readWholeTable")) is whole, info
    if case[0] == "insert-version":
        assert info["isBlindAppend"] is True


ERRORS = [
    ("timestamp-before-creation", "DELETE FROM t WHERE id IN (SELECT id FROM t TIMESTAMP AS OF '2000-01-01')",
     E.VersionNotFoundError),
    ("version-past-latest", MERGE.format(src="t VERSION AS OF 9 AS s"), E.VersionNotFoundError),
    ("time-travel-of-a-view", MERGE.format(src="(SELECT * FROM old_t VERSION AS OF 1) s"), E.AnalysisError),
    ("at-on-a-name", MERGE.format(src="(SELECT * FROM t@v1) s"), E.ParseError),
    ("write-with-time-travel", "UPDATE t VERSION AS OF 1 SET v = 'x'", E.IsoldeError),
    ("at-and-as-of", MERGE.format(src="(SELECT * FROM delta.`{P}@v1` VERSION AS OF 1) s"), E.AnalysisError),
]


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_a_version_that_cannot_be_read_fails_and_changes_nothing(session, tables, case):
    s = session
    _, template, cls = case
    with pytest.raises(cls):
        s.execute(template.format(**tables))
    assert rows(s) == UPPER
