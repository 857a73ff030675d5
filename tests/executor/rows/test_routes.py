"""The route tables (executor/rows/routes.py), without Spark: each rule at its threshold and one
past it gives the route the statement takes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from isolde.executor.rows import routes as R
from isolde.planner.scope import file_level_reason

UPDATE = dict(kind=R.UPDATE, deletion_vectors=True)
DELETE = dict(kind=R.DELETE, deletion_vectors=True)
MERGE = dict(kind=R.MERGE, deletion_vectors=True, matched=True)


@pytest.mark.parametrize("facts, route", [
    # copy-on-write: Spark counts the changed rows, whatever the sizes
    (dict(UPDATE, deletion_vectors=False, file_rows=0), R.SPARK),
    (dict(DELETE, deletion_vectors=False), R.SPARK),
    (dict(MERGE, deletion_vectors=False, source_rows=1), R.SPARK),
    # a non-deterministic UPDATE / DELETE: Spark (a MERGE decides its pairs once anyway)
    (dict(UPDATE, deterministic=False, file_rows=1), R.SPARK),
    (dict(DELETE, deterministic=False), R.SPARK),
    (dict(MERGE, deterministic=False, source_rows=1), R.POINT),
    # UPDATE: point up to SMALL_SCAN_ROWS candidate rows, bounded past it or when unknown
    (dict(UPDATE, file_rows=0), R.POINT),
    (dict(UPDATE, file_rows=R.SMALL_SCAN_ROWS), R.POINT),
    (dict(UPDATE, file_rows=R.SMALL_SCAN_ROWS + 1), R.BOUNDED),
    (dict(UPDATE, file_rows=None), R.BOUNDED),
    # DELETE: bounded (it writes no row: no point route)
    (dict(DELETE, file_rows=0), R.BOUNDED),
    # MERGE: point up to FEW_ROWS source rows, bounded up to COUNTED_ROWS, then Spark
    (dict(MERGE, source_rows=R.FEW_ROWS), R.POINT),
    (dict(MERGE, source_rows=R.FEW_ROWS + 1), R.BOUNDED),
    (dict(MERGE, source_rows=R.COUNTED_ROWS), R.BOUNDED),
    (dict(MERGE, source_rows=R.COUNTED_ROWS + 1), R.SPARK),
    # ... only for an inner join with a clause on matches
    (dict(MERGE, source_rows=1, by_source=True), R.SPARK),
    (dict(MERGE, source_rows=1, matched=False), R.SPARK),
])
def test_find(facts, route):
    assert R.choose(R.FIND, R.Statement(**facts)) == route


def test_find_reads_the_thresholds_when_it_chooses(monkeypatch):
    monkeypatch.setattr(R, "FEW_ROWS", 3)
    monkeypatch.setattr(R, "SMALL_SCAN_ROWS", 10)
    assert R.choose(R.FIND, R.Statement(**MERGE, source_rows=4)) == R.BOUNDED
    assert R.choose(R.FIND, R.Statement(**UPDATE, file_rows=11)) == R.BOUNDED


POINT_SOURCE = dict(kind=R.MERGE, deletion_vectors=True, key_filtered=True, local_source=True, plain_on=True)


@pytest.mark.parametrize("facts, route", [
    (dict(POINT_SOURCE, source_rows=R.INLINE_ROWS), R.INLINE),
    (dict(POINT_SOURCE, source_rows=R.INLINE_ROWS + 1), R.JOINED),
    (dict(POINT_SOURCE, source_rows=1, deletion_vectors=False), R.JOINED),
    (dict(POINT_SOURCE, source_rows=1, by_source=True), R.JOINED),
    (dict(POINT_SOURCE, source_rows=1, key_filtered=False), R.JOINED),
    (dict(POINT_SOURCE, source_rows=1, local_source=False), R.JOINED),
    (dict(POINT_SOURCE, source_rows=1, plain_on=False), R.JOINED),
])
def test_pass1_source(facts, route):
    assert R.choose(R.PASS1_SOURCE, R.Statement(**facts)) == route


@pytest.mark.parametrize("rows, route", [(0, R.BROADCAST), (R.BROADCAST_ROWS, R.BROADCAST),
                                         (R.BROADCAST_ROWS + 1, R.SHUFFLE)])
def test_source_join(rows, route):
    assert R.choose(R.SOURCE_JOIN, R.Statement(kind=R.MERGE, source_rows=rows)) == route


@pytest.mark.parametrize("ids, route", [(1, R.IN_LIST), (R.IN_LIST_IDS, R.IN_LIST), (R.IN_LIST_IDS + 1, R.BITMAP)])
def test_matched_ids(ids, route):
    assert R.choose(R.MATCHED_IDS, ids) == route


def test_mode():
    assert R.choose_mode(True) == R.DV
    assert R.choose_mode(False) == R.REWRITE


def test_every_table_ends_with_a_rule_that_always_holds():
    for table, facts in ((R.MODE, R.Statement()), (R.FIND, R.Statement()), (R.PASS1_SOURCE, R.Statement()),
                         (R.SOURCE_JOIN, R.Statement()), (R.MATCHED_IDS, 0)):
        assert table[-1].when(facts) and all(rule.why for rule in table)


def _files(*rows):
    return [SimpleNamespace(num_records=n) for n in rows]


def test_file_rows_and_interpreted():
    assert R.file_rows([]) == 0
    assert R.file_rows(_files(2, 3)) == 5
    assert R.file_rows(_files(2, None)) is None
    assert R.interpreted(_files(R.INTERPRETED_ROWS))
    assert not R.interpreted(_files(R.INTERPRETED_ROWS, 1))
    assert not R.interpreted(_files(None))


def test_counted_rows_on_the_driver():
    assert R.driver_writes(R.COUNTED_ROWS, 1) and not R.driver_writes(R.COUNTED_ROWS + 1, 1)
    assert R.driver_writes(1, R.COUNTED_BYTES) and not R.driver_writes(1, R.COUNTED_BYTES + 1)
    assert R.counted_limit(1) == min(R.COUNTED_ROWS, R.COUNTED_BYTES)
    assert R.counted_limit(1000) == R.COUNTED_BYTES // 1000
    assert R.driver_writes(R.counted_limit(1000), 1000) and not R.driver_writes(R.counted_limit(1000) + 1, 1000)


def test_jobs_per_partition():
    size = R.GROUP_MIN_BYTES * R.MAX_GROUP_JOBS
    assert R.jobs_per_partition(R.MAX_GROUP_JOBS, size)
    assert not R.jobs_per_partition(R.MAX_GROUP_JOBS + 1, size + R.GROUP_MIN_BYTES)
    assert not R.jobs_per_partition(2, 2 * R.GROUP_MIN_BYTES - 1)


@pytest.mark.parametrize("dvs, partitioned, mode, row_level", [
    (True, False, "auto", True),
    (True, True, "auto", False),  # partitioned (a CLUSTER BY table is not: the caller says so)
    (True, True, "always", True),
    (False, False, "always", False),
    (True, False, "off", False),
])
def test_row_level_scope(dvs, partitioned, mode, row_level):
    assert (file_level_reason(dvs, partitioned, mode) is None) == row_level
