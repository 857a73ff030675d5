"""UPDATE / DELETE / MERGE on a table with deletion vectors: the physical step writes DVs
(remove old (path, dv) + add same path with the new DV) instead of rewriting files; delta-rs
(QueryBuilder, which honours DVs) reads the same rows."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from tests.helpers.oracle import read_delta_rows  # noqa: E402
from tests.helpers.dml import Runner, make_table  # noqa: E402

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])


def test_dv_delete_update_merge(tmp_path):
    r = Runner(tmp_path / "wh")
    rows = [{"id": i, "v": i, "s": "x"} for i in range(20)]
    make_table(r.path("t"), SCHEMA, [rows[:10], rows[10:]], properties={"delta.enableDeletionVectors": "true"})
    files_before = {a.path for a in r.log("t").update().all_files}
    protocol = r.log("t").update().protocol
    assert "deletionVectors" in (protocol.writer_features or [])

    res = r.run("DELETE FROM t WHERE id IN (1, 2, 15)")
    assert res.metrics["numDeletedRows"] == 3 and res.metrics["numDeletionVectorsAdded"] == 2
    assert res.metrics["numRemovedFiles"] == 0 and res.metrics["numAddedFiles"] == 0
    snap = r.log("t").update()
    assert {a.path for a in snap.all_files} == files_before  # same files, now with DVs
    assert all(a.deletion_vector is not None for a in snap.all_files)

    res = r.run("UPDATE t SET v = v * 100 WHERE id IN (3, 4)")
    assert res.metrics["numUpdatedRows"] == 2 and res.metrics["numAddedFiles"] == 1
    snap = r.log("t").update()
    first = next(a for a in snap.all_files if a.path in files_before and a.parsed_stats["minValues"]["id"] == 0)
    assert first.deletion_vector.cardinality == 4  # 1, 2 then 3, 4: the DV grows by union

    src = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])
    make_table(r.path("src"), src, [[{"id": 5, "v": -5, "s": "m"}, {"id": 6, "v": 0, "s": "d"},
                                     {"id": 99, "v": 99, "s": "new"}]])
    r.run("MERGE INTO t USING src s ON s.id = t.id WHEN MATCHED AND s.s = 'd' THEN DELETE "
          "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    expected = sorted(
        [(i, i, "x") for i in range(20) if i not in (1, 2, 15, 3, 4, 5, 6)]
        + [(3, 300, "x"), (4, 400, "x"), (5, -5, "m"), (99, 99, "new")])
    assert r.rows("t") == expected
    assert read_delta_rows(r.path("t")) == expected


def test_dv_merge_and_delete_write_one_file_per_partition_and_nothing_for_deletes(tmp_path):
    """With deletion vectors only the changed rows are written: an upsert's updated and new
    rows go to one new file per partition (the updated rows arrive in the target's splits, two
    files per partition here); a DELETE writes no data file."""
    r = Runner(tmp_path / "wh")
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("p", pa.string())])
    batches = [[{"id": i, "v": i, "p": "ab"[i % 2]} for i in range(k * 50, (k + 1) * 50)] for k in range(4)]
    make_table(r.path("t"), schema, batches, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    assert len(r.log("t").update().all_files) == 8
    make_table(r.path("src"), schema, [[{"id": i, "v": -i, "p": "ab"[i % 2]} for i in range(0, 400, 4)]])
    res = r.run("MERGE INTO t USING src s ON s.id = t.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    assert res.metrics["numTargetRowsUpdated"] == 50 and res.metrics["numTargetRowsInserted"] == 50
    assert res.metrics["numDeletionVectorsAdded"] == 4 and res.metrics["numRemovedFiles"] == 0  # the files of 'a'
    # every source id is even (partition 'a'): its 100 rows make one new file
    assert res.metrics["numAddedFiles"] == 1
    res = r.run("DELETE FROM t WHERE id % 3 = 0")
    assert res.metrics["numAddedFiles"] == 0 and res.metrics["numDeletedRows"] > 0
    expected = sorted([(i, -i if i % 4 == 0 else i, "ab"[i % 2]) for i in range(200) if i % 3]
                      + [(i, -i, "a") for i in range(200, 400, 4) if i % 3])
    assert r.rows("t") == expected
    assert read_delta_rows(r.path("t")) == expected


def test_dv_merge_duplicate_matches(tmp_path):
    """Pass 1 keeps every (target row, source row) pair: a target row matched twice with one
    acting clause is updated once; a lone unconditional DELETE deletes it once; two acting
    clauses raise the cardinality error and leave the table and its folder as they were."""
    from isolde.errors import MergeCardinalityError

    r = Runner(tmp_path / "wh")
    make_table(r.path("t"), SCHEMA, [[{"id": i, "v": i, "s": "x"} for i in range(5)],
                                     [{"id": i, "v": i, "s": "x"} for i in range(5, 10)]],
               properties={"delta.enableDeletionVectors": "true"})
    make_table(r.path("src"), SCHEMA, [[{"id": 3, "v": 30, "s": "u"}, {"id": 3, "v": 31, "s": "skip"},
                                        {"id": 7, "v": 70, "s": "u"}, {"id": 7, "v": 71, "s": "u"}]])
    r.run("MERGE INTO t USING (SELECT * FROM src WHERE id = 3) s ON s.id = t.id "
          "WHEN MATCHED AND s.s = 'u' THEN UPDATE SET v = s.v")
    r.run("MERGE INTO t USING (SELECT * FROM src WHERE id = 7) s ON s.id = t.id WHEN MATCHED THEN DELETE")
    expected = sorted([(i, i, "x") for i in range(10) if i not in (3, 7)] + [(3, 30, "x")])
    assert r.rows("t") == expected
    version = r.log("t").update().version
    files = sorted(os.listdir(r.path("t")))
    make_table(r.path("src2"), SCHEMA, [[{"id": 5, "v": 50, "s": "u"}, {"id": 5, "v": 51, "s": "u"}]])
    with pytest.raises(MergeCardinalityError):
        r.run("MERGE INTO t USING src2 s ON s.id = t.id WHEN MATCHED THEN UPDATE SET v = s.v")
    assert r.log("t").update().version == version and sorted(os.listdir(r.path("t"))) == files
    assert r.rows("t") == expected and read_delta_rows(r.path("t")) == expected
