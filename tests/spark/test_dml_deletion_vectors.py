"""UPDATE / DELETE / MERGE on a table with deletion vectors: the physical step writes DVs
(remove old (path, dv) + add same path with the new DV) instead of rewriting files; delta-rs
(QueryBuilder, which honours DVs) reads the same rows."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from oracle_helpers import read_delta_rows  # noqa: E402
from test_dml_helpers import Runner, make_table  # noqa: E402

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
