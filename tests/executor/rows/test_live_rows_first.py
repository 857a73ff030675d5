"""A statement never fails for a row a deletion vector deletes (executor/rows/live_rows_first.py).

Deletion vectors are applied late (a DELETE's positions on the driver, a MERGE's after its join,
a WHERE pushed below the vectors' broadcast join), so an expression may meet a deleted row; one
that raises there (ANSI overflow) must not fail the statement. Each case has a deleted row whose
``x`` is INT's maximum and an expression ``x + 1`` the statement evaluates; both shapes of the
vectors' test (a literal list of few rows, a broadcast bitmap of many). A row the statement
does see still raises, and leaves the table as it was."""

from __future__ import annotations

import pytest

from isolde.errors import IsoldeError

pytestmark = pytest.mark.spark

MAX = 2147483647
PROPS = "'delta.enableDeletionVectors' = 'true'"


def _table(session, deleted_every: int) -> dict:
    """ids 0..3999, x = id but x(5) = INT max; id 5 and every ``deleted_every``-th row deleted."""
    session.execute(f"CREATE TABLE t (id BIGINT, x INT) TBLPROPERTIES ({PROPS})")
    session.execute(f"INSERT INTO t SELECT id, CAST(IF(id = 5, {MAX}, id) AS INT) FROM range(0, 4000) AS r(id)")
    session.execute(f"DELETE FROM t WHERE id % {deleted_every} = 1 OR id = 5")
    return {i: i for i in range(4000) if not (i % deleted_every == 1 or i == 5)}


def _check(session, table_path, delta_rows, want: dict) -> None:
    rows = sorted(want.items())
    assert sorted(tuple(r) for r in session.sql("SELECT id, x FROM t").collect()) == rows
    assert delta_rows(table_path(session, "t"), ["id", "x"]) == rows


@pytest.mark.parametrize("deleted_every", [2, 1000], ids=["bitmaps", "literal-test"])
def test_expressions_that_raise_on_deleted_rows_do_not_fail(session, table_path, delta_rows, deleted_every):
    want = _table(session, deleted_every)
    # MERGE: ON pairs id 5 with its deleted target row before the vectors apply; SET overflows there
    res = session.execute("MERGE INTO t USING (SELECT * FROM VALUES (5L), (6L) AS v(id)) s ON s.id = t.id "
                          "WHEN MATCHED THEN UPDATE SET x = t.x + 1 WHEN NOT MATCHED THEN INSERT (id, x) VALUES (s.id, 0)")
    assert (res.metrics["numTargetRowsUpdated"], res.metrics["numTargetRowsInserted"]) == (1, 1)
    want[5], want[6] = 0, 7
    # UPDATE / DELETE: a WHERE that overflows on the deleted row
    assert session.execute("UPDATE t SET x = x + 1 WHERE x + 1 > 0 AND id IN (4, 8)").metrics["numUpdatedRows"] == 2
    want[4], want[8] = 5, 9
    assert session.execute("DELETE FROM t WHERE x + 1 = 11").metrics["numDeletedRows"] == 1
    del want[10]
    _check(session, table_path, delta_rows, want)


def test_a_live_row_that_raises_still_fails_the_statement(session, table_path, delta_rows):
    want = _table(session, 2)
    session.execute(f"INSERT INTO t VALUES (9000, {MAX})")
    want[9000] = MAX
    version = len(session.execute("DESCRIBE HISTORY t").rows)
    for sql in ("UPDATE t SET x = x + 1 WHERE id = 9000",
                "DELETE FROM t WHERE x + 1 > 0",
                "MERGE INTO t USING (SELECT 9000L AS id) s ON s.id = t.id WHEN MATCHED THEN UPDATE SET x = t.x + 1"):
        with pytest.raises(IsoldeError) as err:
            session.execute(sql)
        assert "overflow" in str(err.value).lower()
    assert len(session.execute("DESCRIBE HISTORY t").rows) == version
    _check(session, table_path, delta_rows, want)


def test_only_a_job_error_on_a_table_with_vectors_runs_again(spark):
    """A cancelled job, a plan's error, or a table without vectors: the error, at once."""
    from dataclasses import dataclass
    from types import SimpleNamespace

    from pyspark.errors.exceptions.captured import AnalysisException, CapturedException

    from isolde.executor.rows.live_rows_first import retried

    @dataclass
    class Target:
        snapshot: object
        live_rows_first: bool = False

    with_vector = SimpleNamespace(all_files=[SimpleNamespace(deletion_vector=object())])
    without = SimpleNamespace(all_files=[SimpleNamespace(deletion_vector=None)])
    overflow = CapturedException(desc="[ARITHMETIC_OVERFLOW] integer overflow", stackTrace="")
    cases = [
        (overflow, with_vector, [False, True]),
        (overflow, without, [False]),
        (CapturedException(desc="Job 3 cancelled part of cancelled job group g", stackTrace=""), with_vector, [False]),
        (AnalysisException(desc="[UNRESOLVED_COLUMN] x", stackTrace=""), with_vector, [False]),
    ]
    for error, snapshot, runs in cases:
        seen = []

        def run(target, error=error, seen=seen):
            seen.append(target.live_rows_first)
            raise error

        with pytest.raises(type(error)):
            retried(Target(snapshot), run)
        assert seen == runs, (str(error), seen)
    assert retried(Target(with_vector), lambda target: "done") == "done"
