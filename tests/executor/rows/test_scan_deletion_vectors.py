"""Reading files through their deletion vectors (``scan.DeletedRows``): each row's file
ordinal finds its file's vector as bitmap words, its row index the bit; a sparse vector over a
huge table takes the anti join on (ordinal, row) instead. Both ways, with few files (a literal
map gives the ordinal) and many (a broadcast join does), partitioned or not, with and without
row ids, must drop exactly the deleted rows -- word edges (rows 0, 63, 64, 127), a file's
last row, files without a vector -- and agree with delta-rs."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from tests.helpers.oracle import read_delta_rows  # noqa: E402
from tests.helpers.dml import Runner, make_table  # noqa: E402

from isolde.executor.rows import routes
from isolde.executor.rows import scan as scan_module

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
@pytest.mark.parametrize("file_key", ["size", "path"])  # (sizes collide among some files: mixed)
def test_scan_drops_exactly_the_deleted_rows(tmp_path, monkeypatch, n_files, partitioned, bitmaps, file_key):
    assert (n_files <= routes.MAP_LOOKUP_MAX_FILES) == (n_files == 6)  # each id names its lookup
    if file_key == "path":  # as if every file's size were another's: each is found by its path
        monkeypatch.setattr(scan_module, "_size_known", lambda add: False)
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


def _twin_files_table(r, name: str) -> None:
    """Two partitions holding byte-identical files (the partition value is not in the file):
    their sizes collide, so a row's file must be told by its path."""
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    batches = [[{"id": k, "p": p} for k in range(ROWS_PER_FILE)] for p in ("a", "b")]
    make_table(r.path(name), schema, batches, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})


@pytest.mark.parametrize("lookup", ["map", "join"])
def test_files_of_equal_size_are_told_apart_by_path(tmp_path, monkeypatch, lookup):
    if lookup == "join":
        monkeypatch.setattr(routes, "MAP_LOOKUP_MAX_FILES", 0)
    r = Runner(tmp_path / "wh")
    _twin_files_table(r, "t")
    files = r.log("t").update().all_files
    assert len({a.size for a in files}) == 1
    r.run("DELETE FROM t WHERE p = 'a' AND id % 10 = 3")  # a vector on one twin only
    expected = sorted([(k, "a") for k in range(ROWS_PER_FILE) if k % 10 != 3] + [(k, "b") for k in range(ROWS_PER_FILE)])
    assert r.rows("t") == expected
    assert read_delta_rows(r.path("t")) == expected


def test_a_log_size_that_no_file_has_fails_the_read(tmp_path):
    """Were a file's logged size wrong, the size-keyed lookup would find no vector for its rows
    and bring deleted rows back: the read must fail naming the file instead."""
    import json

    r = Runner(tmp_path / "wh")
    schema = pa.schema([("id", pa.int64())])
    make_table(r.path("t"), schema, [[{"id": f * 100 + k} for k in range(100 + f)] for f in range(3)],
               properties={"delta.enableDeletionVectors": "true"})
    r.run("DELETE FROM t WHERE id % 7 = 0")
    log_dir = os.path.join(r.path("t"), "_delta_log")
    last = sorted(n for n in os.listdir(log_dir) if n.endswith(".json"))[-1]
    with open(os.path.join(log_dir, last)) as fh:
        actions = [json.loads(line) for line in fh]
    bumped = next(a["add"] for a in actions if "add" in a)
    bumped["size"] += 1
    with open(os.path.join(log_dir, last), "w") as fh:
        fh.write("".join(json.dumps(a) + "\n" for a in actions))
    with pytest.raises(Exception, match="the log and the files disagree") as err:
        r.rows("t")
    assert os.path.basename(bumped["path"]) in str(err.value)


def test_many_paths_reach_the_jvm_in_one_call_unchanged(tmp_path):
    """``read_parquet`` hands past 16 paths to the JVM as one string: the same files (names with
    spaces, glob characters escaped by ``_exact``, non-ASCII) and rows as ``parquet(*paths)``."""
    import pyarrow.parquet as pq

    from isolde.executor.runtime.spark import get_spark

    spark = get_spark()
    paths = []
    for i in range(20):
        folder = tmp_path / f"p=a b [{i}] é"
        folder.mkdir()
        path = str(folder / f"part {i}.parquet")
        pq.write_table(pa.table({"id": [i, i + 100]}), path)
        paths.append(scan_module._exact(path))
    schema = "id BIGINT"
    one_call = scan_module.read_parquet(spark.read.schema(schema), paths, scan_module.READ_OPTIONS)
    listed = spark.read.schema(schema).parquet(*paths)
    assert sorted(one_call.inputFiles()) == sorted(listed.inputFiles()) and len(one_call.inputFiles()) == 20
    assert sorted(r[0] for r in one_call.collect()) == sorted([i for i in range(20)] + [i + 100 for i in range(20)])
