"""Loading a snapshot from a checkpoint: the column-wise AddFile conversion and the JSON-tail overlay."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from isolde.executor.log import DeltaLog
from isolde.executor.log.actions import AddFile, DeletionVectorDescriptor
from isolde.executor.log.checkpoint import (
    CHECKPOINT_SCHEMA,
    CheckpointFiles,
    _valid_rows,
    checkpoint_bytes,
    clear_checkpoint_cache,
)

from tests.helpers.log_tables import DEFAULT_SCHEMA, add, create_table, stats


def _comparable(files):
    out = []
    for f in files:
        d = f.to_dict()
        d.pop("dataChange")  # a checkpoint states what is: dataChange false
        out.append(d)
    return sorted(out, key=lambda d: (d["path"], str(d.get("deletionVector"))))


def _fresh(table_dir, version=None):
    clear_checkpoint_cache()
    return DeltaLog.for_table(table_dir).snapshot(version)


def test_checkpoint_files_equal_json_replay_for_every_field(table_dir):
    dv = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 34, 2, offset=1)
    files = [
        AddFile("a", {"date": "2024-01-01", "country": None}, 10, 1, stats=stats(3, id=(1, 3))),
        AddFile("b", {"date": "2024-01-02", "country": "nl"}, 20, 2, tags={"k": "v"}),
        AddFile("c", {"date": None, "country": "de"}, 30, 3, deletion_vector=dv, base_row_id=7,
                default_row_commit_version=0, clustering_provider="liquid"),
    ]
    log = create_table(table_dir, partition_columns=("date", "country"),
                       configuration={"delta.enableDeletionVectors": "true"}, files=files)
    expected = _comparable(log.snapshot().all_files)
    log.checkpoint()
    snap = _fresh(table_dir)
    got = snap.all_files
    assert all(type(f) is AddFile for f in got)
    assert _comparable(got) == expected
    by_path = {f.path: f for f in got}
    assert by_path["c"].deletion_vector == dv and by_path["c"].key == ("c", dv.unique_id)
    assert by_path["b"].tags == {"k": "v"} and by_path["a"].tags is None
    assert by_path["a"].num_records == 3 and by_path["b"].parsed_stats is None
    # every AddFile owns its dicts
    by_path["a"].partition_values["x"] = "1"
    by_path["a"].extra["y"] = 1
    assert "x" not in by_path["b"].partition_values and by_path["b"].extra == {}


def test_json_tail_overlays_the_checkpoint_in_order(table_dir):
    log = create_table(table_dir, files=[add(f"f{i:03d}") for i in range(200)])
    log.checkpoint()
    t = log.start_transaction()
    # a few removes (deleted one by one), then many (filtered), a re-add and new files
    t.commit([t.snapshot.file(f"f{i:03d}").remove() for i in (5, 50, 150)], "DELETE")
    v_few = log.snapshot().version
    t = log.start_transaction()
    t.commit([t.snapshot.file(f"f{i:03d}").remove() for i in range(100, 180) if i != 150], "DELETE")
    t = log.start_transaction()
    t.commit([add("f050"), add("new1"), add("new2")], "WRITE")
    few = _fresh(table_dir, v_few)
    assert [f.path for f in few.all_files] == [f"f{i:03d}" for i in range(200) if i not in (5, 50, 150)]
    latest = _fresh(table_dir)
    kept = [f"f{i:03d}" for i in range(200) if i not in (5, 50, 150) and not 100 <= i < 180]
    assert [f.path for f in latest.all_files] == kept + ["f050", "new1", "new2"]
    replayed = DeltaLog.for_table(table_dir)._load(None)  # same version, same files through the cache
    assert [f.path for f in replayed.all_files] == [f.path for f in latest.all_files]


def _write_checkpoint(table_dir, version, table):
    path = os.path.join(table_dir, "_delta_log", f"{version:020d}.checkpoint.parquet")
    with open(path, "wb") as fh:
        fh.write(checkpoint_bytes(table))
    return path


def test_interleaved_checkpoint_rows_and_unknown_add_fields(table_dir):
    log = create_table(table_dir, files=[add("a"), add("b"), add("c")])
    path = log.checkpoint()
    table = pq.read_table(path)
    # another engine's layout: adds interleaved with the other actions, an unknown add field
    order = [i for i in range(len(table)) if table.column("add")[i].is_valid]
    others = [i for i in range(len(table)) if i not in order]
    interleaved = table.take([order[0], others[0], order[1], others[1], order[2], *others[2:]])
    adds = interleaved.column("add").combine_chunks()
    origin = pa.array([None if not v else "engine-x" for v in adds.is_valid().to_pylist()], pa.string())
    extended = pa.StructArray.from_arrays(
        [adds.field(i) for i in range(adds.type.num_fields)] + [origin],
        fields=list(adds.type) + [pa.field("origin", pa.string())],
        mask=adds.is_null(),
    )
    interleaved = interleaved.set_column(interleaved.schema.get_field_index("add"), "add", extended)
    _write_checkpoint(table_dir, log.snapshot().version, interleaved)
    snap = _fresh(table_dir)
    assert sorted(f.path for f in snap.all_files) == ["a", "b", "c"]
    assert all(f.extra == {"origin": "engine-x"} for f in snap.all_files)
    assert all(f.to_dict()["origin"] == "engine-x" for f in snap.all_files)
    assert snap.metadata is not None and snap.metadata.schema_string == DEFAULT_SCHEMA


def test_valid_rows_slices_contiguous_runs_and_filters_the_rest():
    arr = pa.array([None, 1, 2, 3, None])
    assert _valid_rows(arr).to_pylist() == [1, 2, 3]
    assert _valid_rows(pa.array([1, None, 2])).to_pylist() == [1, 2]
    assert _valid_rows(pa.array([None, None], pa.int64())).to_pylist() == []
    assert _valid_rows(pa.array([4, 5])).to_pylist() == [4, 5]


def test_checkpoint_files_with_missing_and_null_columns():
    adds = pa.array(
        [{"path": "p", "size": None, "modificationTime": None, "dataChange": None}],
        pa.struct([("path", pa.string()), ("size", pa.int64()), ("modificationTime", pa.int64()),
                   ("dataChange", pa.bool_())]),
    )
    (f,) = CheckpointFiles(adds).materialize()
    assert (f.path, f.size, f.modification_time, f.data_change, f.partition_values, f.stats) == ("p", 0, 0, True, {}, None)
    assert CheckpointFiles(None).materialize() == [] and len(CheckpointFiles(None)) == 0


def test_checkpoint_schema_round_trips_through_the_reader(table_dir):
    assert CHECKPOINT_SCHEMA.get_field_index("add") >= 0
    log = create_table(table_dir, files=[add("x", stats_json=stats(1, id=(0, 0)))])
    log.checkpoint()
    assert _comparable(_fresh(table_dir).all_files) == _comparable(log.snapshot().all_files)


def test_loading_a_snapshot_does_not_import_pandas(table_dir):
    log = create_table(table_dir, files=[add(f"f{i}") for i in range(5)])
    log.checkpoint()
    t = log.start_transaction()
    t.commit([t.snapshot.file("f0").remove(), add("g")])
    code = (
        "import sys\n"
        "from isolde.executor.log import DeltaLog\n"
        f"s = DeltaLog.for_table({table_dir!r}).snapshot()\n"
        "assert len(s.all_files) == 5 and len(s.tombstones) == 1, s\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_repeated_checkpoint_keys_fall_back_to_filtering():
    from isolde.executor.log.snapshot import ReplayState

    adds = pa.array([{"path": "p", "size": 1}, {"path": "p", "size": 2}, {"path": "q", "size": 3}],
                    pa.struct([("path", pa.string()), ("size", pa.int64())]))
    files = CheckpointFiles(adds)
    assert files.key_index() is None
    state = ReplayState()
    state.checkpoint_files = files
    state.apply([add("p").remove(), add("r")])
    assert [f.path for f in state.live_files()] == ["q", "r"]
