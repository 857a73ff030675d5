"""MERGE into a deletion-vector table whose rows were deleted or updated before it.

A MERGE's pass 1 joins the target's rows with the source and applies the target's deletion
vectors to the pairs the join kept (``scan.scan_for_join``), not to every row before it. A
deleted row must then behave as absent in every role: it is never updated or deleted again, a
source row matching only deleted rows is inserted, it does not count towards the cardinality
check, and NOT MATCHED BY SOURCE clauses do not act on it. Each case runs on tables whose
vectors take each of the scan's three forms (literal row lists up to 128 deleted rows, bitmap
words beyond), in 3 files (row paths by literal lookup) and 60 files (by a broadcast table),
and is checked against a model of the table, isolde's metrics, and delta-rs's read.
"""

from __future__ import annotations


import pyarrow as pa
import pytest

from tests.helpers.oracle import read_delta_rows  # noqa: E402
from tests.helpers.dml import Runner, make_table  # noqa: E402

from isolde.errors import MergeCardinalityError  # noqa: E402

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])
ROWS = 600


def _layout(files: int, deleted_mod: int):
    """rows 0..ROWS-1 over ``files`` files; ids divisible by ``deleted_mod`` are deleted, ids
    with id % 10 == 1 updated (their old version deleted, the new one in a new file)."""
    per = -(-ROWS // files)
    batches = [[{"id": i, "v": i, "s": "x"} for i in range(lo, min(ROWS, lo + per))] for lo in range(0, ROWS, per)]
    model = {i: (i, "x") for i in range(ROWS)}
    deleted = {i for i in range(ROWS) if i % deleted_mod == 0}
    for i in deleted:
        del model[i]
    for i in model:
        if i % 10 == 1:
            model[i] = (i + 1000, "x")
    return batches, model, deleted


# (name, source rows (id, v, s), MERGE clauses, expected change of the model, metrics)
def _upsert(model, src):
    out = dict(model)
    for i, v, s in src:
        out[i] = (v, s)
    return out


def _matched_delete(model, src):
    return {i: r for i, r in model.items() if i not in {x[0] for x in src}}


def _by_source_delete(model, src):
    keys = {x[0] for x in src}
    return {i: r for i, r in model.items() if i in keys or i >= 100}


CASES = [
    ("upsert", "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *", _upsert),
    ("matched_delete", "WHEN MATCHED THEN DELETE", _matched_delete),
    ("by_source_delete", "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT * "
                         "WHEN NOT MATCHED BY SOURCE AND t.id < 100 THEN DELETE", None),
]


def _source(deleted: set) -> list:
    """deleted ids, updated ids, untouched ids and new ids, each a few times over."""
    live_plain = [i for i in range(ROWS) if i not in deleted and i % 10 != 1]
    updated = [i for i in range(ROWS) if i not in deleted and i % 10 == 1]
    ids = sorted(deleted)[:40] + updated[:30] + live_plain[:30] + list(range(ROWS, ROWS + 20))
    return [(i, -i, "m") for i in ids]


@pytest.mark.parametrize("files", [3, 60])
@pytest.mark.parametrize("deleted_mod", [97, 3], ids=["few-deleted-rows", "many-deleted-rows"])
@pytest.mark.parametrize("name,clauses,apply", CASES, ids=[c[0] for c in CASES])
def test_merge_ignores_rows_deleted_before_it(tmp_path, files, deleted_mod, name, clauses, apply):
    r = Runner(tmp_path / "wh")
    batches, model, deleted = _layout(files, deleted_mod)
    make_table(r.path("t"), SCHEMA, batches, properties={"delta.enableDeletionVectors": "true"})
    r.run(f"DELETE FROM t WHERE id % {deleted_mod} = 0")
    r.run("UPDATE t SET v = v + 1000 WHERE id % 10 = 1")
    snap = r.log("t").update()
    assert sum(a.deletion_vector is not None for a in snap.all_files) >= min(files, 3)
    src = _source(deleted)
    make_table(r.path("src"), SCHEMA, [[{"id": i, "v": v, "s": s} for i, v, s in src]])

    res = r.run(f"MERGE INTO t USING src s ON s.id = t.id {clauses}")

    if apply is None:  # upsert, then the live rows below 100 that no source row names go
        expected = _by_source_delete(_upsert(model, src), src)
    else:
        expected = apply(model, src)
    want = sorted((i, v, s) for i, (v, s) in expected.items())
    assert r.rows("t") == want
    assert read_delta_rows(r.path("t")) == want
    live_matched = [i for i, _, _ in src if i in model]
    inserted = [i for i, _, _ in src if i not in model]
    m = res.metrics
    if name == "matched_delete":
        assert (m["numTargetRowsDeleted"], m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == \
            (len(live_matched), 0, 0)
    else:
        by_source = len([i for i in model if i < 100 and i not in {x[0] for x in src}]) if apply is None else 0
        assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"], m["numTargetRowsDeleted"]) == \
            (len(live_matched), len(inserted), by_source)


@pytest.mark.parametrize("files", [3, 60])
def test_cardinality_counts_live_rows_only(tmp_path, files):
    """Two source rows for a key whose only target row is deleted are two inserts; two for a key
    whose old version is deleted and new version live match one row twice: the MERGE fails and
    the table is unchanged."""
    r = Runner(tmp_path / "wh")
    batches, model, deleted = _layout(files, 3)
    make_table(r.path("t"), SCHEMA, batches, properties={"delta.enableDeletionVectors": "true"})
    r.run("DELETE FROM t WHERE id % 3 = 0")
    r.run("UPDATE t SET v = v + 1000 WHERE id % 10 = 1")
    make_table(r.path("dup_deleted"), SCHEMA, [[{"id": 6, "v": 1, "s": "a"}, {"id": 6, "v": 2, "s": "b"}]])
    make_table(r.path("dup_live"), SCHEMA, [[{"id": 11, "v": 1, "s": "a"}, {"id": 11, "v": 2, "s": "b"}]])

    res = r.run("MERGE INTO t USING dup_deleted s ON s.id = t.id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    assert (res.metrics["numTargetRowsInserted"], res.metrics["numTargetRowsUpdated"]) == (2, 0)
    want = sorted([(i, v, s) for i, (v, s) in model.items()] + [(6, 1, "a"), (6, 2, "b")])
    assert r.rows("t") == want

    version = r.log("t").update().version
    with pytest.raises(MergeCardinalityError):
        r.run("MERGE INTO t USING dup_live s ON s.id = t.id WHEN MATCHED THEN UPDATE SET *")
    assert r.log("t").update().version == version
    assert r.rows("t") == want
    assert read_delta_rows(r.path("t")) == want
