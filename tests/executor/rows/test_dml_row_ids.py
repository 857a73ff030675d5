"""Row ids through DML on row-tracking tables (executor/rows/stable_row_ids.py).

Delta keeps a row's id when UPDATE or MERGE changes it, and gives it the commit's version. A
deletion-vector UPDATE / MERGE writes the new values to a new file: they carry their old id in
the materialised row-id column, and the commit says ``delta.rowTracking.preserved = true``.
Every id here is read from the data files and the log as PROTOCOL.md defines it (the
materialised value, else ``baseRowId`` + position; deleted rows left out), not through isolde.
"""

from __future__ import annotations

import glob
import json
import os
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.spark

TRACKED = "'delta.enableRowTracking' = 'true', 'delta.enableDeletionVectors' = 'true'"


def _live_rows(path: str) -> dict:
    """id -> (stable row id, row commit version) of every live row."""
    from isolde.executor.catalog import schema as S
    from isolde.executor.log.delta_log import DeltaLog
    from isolde.executor.txn.row_level import TableFiles

    snap = DeltaLog.for_table(path).snapshot()
    conf = snap.metadata.configuration
    id_col = conf["delta.rowTracking.materializedRowIdColumnName"]
    version_col = conf["delta.rowTracking.materializedRowCommitVersionColumnName"]
    files = TableFiles(path, snap.metadata)
    key = next(S.physical_name(f) for f in S.metadata_schema(snap.metadata).fields if f.name == "id")
    out = {}
    for f in snap.all_files:
        t = pq.read_table(os.path.join(path, unquote(f.path)))  # (the log's paths are URL-encoded)
        keys = t.column(key).to_pylist()
        ids = t.column(id_col).to_pylist() if id_col in t.column_names else [None] * t.num_rows
        versions = t.column(version_col).to_pylist() if version_col in t.column_names else [None] * t.num_rows
        for pos in files.live_rows(f):
            assert keys[pos] not in out, f"id {keys[pos]} live twice"
            out[keys[pos]] = (ids[pos] if ids[pos] is not None else f.base_row_id + pos,
                              versions[pos] if versions[pos] is not None else f.default_row_commit_version)
    return out


def _tag(path: str, version: int) -> str:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        info = next(json.loads(line)["commitInfo"] for line in fh if '"commitInfo"' in line)
    return info["tags"]["delta.rowTracking.preserved"]


def _create(s, props=TRACKED, partitioned=False):
    s.execute(f"CREATE TABLE t (id INT, v INT, p STRING) {'PARTITIONED BY (p)' if partitioned else ''} "
              f"TBLPROPERTIES ({props})")
    s.execute("INSERT INTO t SELECT id, id, IF(id % 2 = 0, 'even', 'odd') FROM range(0, 60) AS r(id)")
    s.execute("INSERT INTO t SELECT id, id, IF(id % 2 = 0, 'even', 'odd') FROM range(60, 100) AS r(id)")


def _assert_kept(before: dict, after: dict, changed: set, version: int) -> None:
    assert set(after) == set(before)
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}, "a row id changed"
    for k, (_, ver) in after.items():
        assert ver == (version if k in changed else before[k][1]), f"row {k}: commit version {ver}"


@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_update_keeps_row_ids(session, table_path, delta_rows, partitioned):
    s = session
    _create(s, partitioned=partitioned)
    path = table_path(s, "t")
    before = _live_rows(path)
    assert sorted(i for i, _ in before.values()) == list(range(100))
    r = s.execute("UPDATE t SET v = -v WHERE id % 7 = 0")
    changed = {i for i in range(100) if i % 7 == 0}
    after = _live_rows(path)
    _assert_kept(before, after, changed, r.version)
    assert _tag(path, r.version) == "true"
    # again, now through the materialised ids of the rows' new file, and moving a partition
    r2 = s.execute("UPDATE t SET v = 0, p = 'moved' WHERE id % 14 = 0")
    _assert_kept(after, _live_rows(path), {i for i in range(100) if i % 14 == 0}, r2.version)
    assert _tag(path, r2.version) == "true"
    # other readers see the rows, not the hidden column
    rows = delta_rows(path)
    assert len(rows) == 100 and all(len(row) == 3 for row in rows)
    assert sorted(rows)[14] == (14, 0, "moved")
    # the hidden column takes no statistics
    for add_line in glob.glob(os.path.join(path, "_delta_log", f"{r2.version:020d}.json")):
        with open(add_line) as fh:
            for line in fh:
                add = json.loads(line).get("add")
                if add and add.get("stats"):
                    assert set(json.loads(add["stats"])["minValues"]) <= {"id", "v", "p"}


def test_merge_keeps_the_ids_of_updated_rows_and_numbers_new_ones(session, table_path, delta_rows):
    s = session
    _create(s)
    path = table_path(s, "t")
    before = _live_rows(path)
    r = s.execute("MERGE INTO t USING (SELECT id, id * 10 AS v FROM range(90, 110) AS r(id)) AS src "
                  "ON src.id = t.id WHEN MATCHED AND src.id = 95 THEN DELETE "
                  "WHEN MATCHED THEN UPDATE SET v = src.v WHEN NOT MATCHED THEN INSERT (id, v, p) VALUES (src.id, src.v, 'new')")
    after = _live_rows(path)
    assert _tag(path, r.version) == "true"
    kept = {k: v for k, v in after.items() if k < 100}
    assert 95 not in kept
    _assert_kept({k: v for k, v in before.items() if k != 95}, kept, set(range(90, 100)) - {95}, r.version)
    new_ids = [after[k][0] for k in range(100, 110)]
    assert len(set(new_ids)) == 10 and min(new_ids) >= 100, new_ids  # fresh, above the high-water mark
    assert all(after[k][1] == r.version for k in range(100, 110))
    assert len(delta_rows(path)) == 109


def test_merge_that_deletes_and_inserts_moves_no_row(session, table_path):
    s = session
    _create(s)
    path = table_path(s, "t")
    before = _live_rows(path)
    r = s.execute("MERGE INTO t USING (SELECT id FROM range(95, 105) AS r(id)) AS src ON src.id = t.id "
                  "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT (id, v, p) VALUES (src.id, 0, 'new')")
    assert _tag(path, r.version) == "true"
    after = _live_rows(path)
    assert {k: after[k] for k in range(95)} == {k: before[k] for k in range(95)}
    assert set(after) == set(range(95)) | set(range(100, 105))


def test_optimize_after_an_update_keeps_the_ids(session, table_path):
    s = session
    _create(s)
    path = table_path(s, "t")
    before = _live_rows(path)
    r = s.execute("UPDATE t SET v = 1 WHERE id >= 50")
    s.execute("OPTIMIZE t")
    after = _live_rows(path)
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}
    assert all(after[k][1] == r.version for k in range(50, 100))


def test_column_mapped_table(session, table_path):
    s = session
    _create(s, props=TRACKED + ", 'delta.columnMapping.mode' = 'name'")
    s.execute("ALTER TABLE t RENAME COLUMN v TO w")
    path = table_path(s, "t")
    before = _live_rows(path)
    r = s.execute("UPDATE t SET w = 5 WHERE id < 10")
    _assert_kept(before, _live_rows(path), set(range(10)), r.version)


def test_copy_on_write_says_it_did_not_keep_them(session, table_path):
    """Without deletion vectors an UPDATE rewrites the files and numbers every row afresh: the
    commit says so, where it used to claim the ids were kept."""
    s = session
    _create(s, props="'delta.enableRowTracking' = 'true', 'delta.enableDeletionVectors' = 'false'")
    path = table_path(s, "t")
    r = s.execute("UPDATE t SET v = 0 WHERE id = 3")
    assert _tag(path, r.version) == "false"
    r = s.execute("DELETE FROM t WHERE id = 4")
    assert _tag(path, r.version) == "false"  # the file's other rows were copied to a new one
    r = s.execute("INSERT INTO t VALUES (200, 200, 'x')")
    assert _tag(path, r.version) == "true"


def test_statements_that_change_no_row(session, table_path):
    """No candidate file (statistics rule every file out, or an empty table): nothing to keep,
    and the statements still run (they failed on the missing hidden column)."""
    s = session
    _create(s)
    path = table_path(s, "t")
    before = _live_rows(path)
    assert s.execute("UPDATE t SET v = 0 WHERE id = 999").metrics["numUpdatedRows"] == 0
    r = s.execute("MERGE INTO t USING (SELECT 999 AS id) AS src ON src.id = t.id "
                  "WHEN MATCHED THEN UPDATE SET v = 0 WHEN NOT MATCHED THEN INSERT (id, v, p) VALUES (src.id, 9, 'x')")
    assert r.metrics["numTargetRowsInserted"] == 1
    after = _live_rows(path)
    assert {k: after[k] for k in before} == before
    s.execute("DELETE FROM t")
    assert s.execute("UPDATE t SET v = 2").metrics["numUpdatedRows"] == 0
    assert _live_rows(path) == {}
