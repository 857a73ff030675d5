"""Reading files through their deletion vectors (``scan.DeletedRows``): each row's file
ordinal finds its file's vector as bitmap words, its row index the bit; a sparse vector over a
huge table takes the anti join on (ordinal, row) instead. Both ways, with few files (a literal
map gives the ordinal) and many (a broadcast join does), partitioned or not, with and without
row ids, must drop exactly the deleted rows -- word edges (rows 0, 63, 64, 127), a file's
last row, files without a vector -- and agree with delta-rs."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from oracle_helpers import read_delta_rows  # noqa: E402
from test_dml_helpers import Runner, make_table  # noqa: E402

from isolde.executor import scan as scan_module  # noqa: E402

pytestmark = pytest.mark.spark

ROWS_PER_FILE = 1000
PARTS = ("it's", "plain")
# positions deleted from every file that gets a vector: word edges, the first and the last row
EDGES = (0, 1, 62, 63, 64, 65, 127, 128, 500, 998, 999)


def _deleted(i: int) -> bool:
    pos = i % ROWS_PER_FILE
    return i // ROWS_PER_FILE % 3 != 2 and (pos in EDGES or pos % 37 == 5)


@pytest.mark.parametrize("n_files", [6, 60], ids=["map-lookup", "join-lookup"])
@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
@pytest.mark.parametrize("bitmaps", [True, False], ids=["bitmaps", "key-join"])
def test_scan_drops_exactly_the_deleted_rows(tmp_path, monkeypatch, n_files, partitioned, bitmaps):
    assert (n_files <= scan_module.MAP_LOOKUP_MAX_FILES) == (n_files == 6)  # each id names its lookup
    if not bitmaps:
        monkeypatch.setattr(scan_module.DeletedRows, "use_bitmaps", lambda self: False)
    r = Runner(tmp_path / "wh")
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    batches = [[{"id": f * ROWS_PER_FILE + k, "p": PARTS[f % 2] if partitioned else "x"} for k in range(ROWS_PER_FILE)]
               for f in range(n_files)]
    make_table(r.path("t"), schema, batches, partition_by=["p"] if partitioned else (),
               properties={"delta.enableDeletionVectors": "true"})
    gone = [i for i in range(n_files * ROWS_PER_FILE) if _deleted(i)]
    # every third file keeps no vector; the others lose their edge rows and every 37th row
    first = r.run("DELETE FROM t WHERE id % 3000 < 2000 AND (id % 1000 IN (0, 1, 62, 63, 64, 65, 999) "
                  "OR id % 1000 % 37 = 5)")
    r.run("DELETE FROM t WHERE id % 3000 < 2000 AND id % 1000 IN (127, 128, 500, 998)")  # DVs grow by union
    assert first.metrics["numDeletionVectorsAdded"] == len(range(0, n_files, 3)) + len(range(1, n_files, 3))
    snap = r.log("t").update()
    assert sum(a.deletion_vector is not None for a in snap.all_files) == first.metrics["numDeletionVectorsAdded"]
    assert sum(a.deletion_vector.cardinality for a in snap.all_files if a.deletion_vector) == len(gone)

    expected = sorted((i, PARTS[i // ROWS_PER_FILE % 2] if partitioned else "x")
                      for i in range(n_files * ROWS_PER_FILE) if not _deleted(i))
    assert r.rows("t") == expected
    assert read_delta_rows(r.path("t")) == expected

    # with row ids (what UPDATE / DELETE / MERGE read): every surviving row keeps its position
    df = scan_module.scan(r.session.spark, snap, r.path("t"), with_row_ids=True)
    rows = df.select("id", scan_module.ROW_COL).collect()
    assert len(rows) == len(expected)
    assert all(row[1] == row[0] % ROWS_PER_FILE for row in rows)
    # and a DML statement over those rows sees the same table
    r.run("UPDATE t SET id = -id WHERE id % 1000 = 66")
    assert r.rows("t") == sorted((-i if i % 1000 == 66 else i, p) for i, p in expected)
    assert read_delta_rows(r.path("t")) == r.rows("t")

