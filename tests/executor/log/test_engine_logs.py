"""The logs of tables other engines wrote (tests/data/engines, see its README), replayed
without Spark: V2 checkpoints (JSON and Parquet, sidecar files, classic-named), multi-part
checkpoints, versions whose protocol isolde cannot read beside versions it can, metaData
without a schema, deletion vectors that cannot be read, and the wording of refusals."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from isolde.errors import ExecutionError, UnsupportedFeatureError, VersionNotFoundError
from isolde.executor.log.actions import CommitInfo, Metadata, Protocol, serialize_commit
from isolde.executor.log.checkpoint import clear_checkpoint_cache, complete_checkpoints
from isolde.executor.log.deletion_vectors import DeletionVectorError, dv_file_path, read_deletion_vector
from isolde.executor.log.delta_log import DeltaLog
from isolde.executor.log.features import assert_readable, assert_writable

from tests.helpers.log_tables import DEFAULT_SCHEMA

from tests.helpers import ENGINES  # noqa: E402  (tests/data/engines)


def _copy(name: str, tmp_path) -> str:
    target = str(tmp_path / name)
    shutil.copytree(os.path.join(ENGINES, name), target)
    return target


def _files(snapshot) -> list:
    return sorted((a.path, a.deletion_vector.unique_id if a.deletion_vector else None, a.size)
                  for a in snapshot.all_files)


def _drop_commits_before(path: str, version: int) -> None:
    log = os.path.join(path, "_delta_log")
    for name in os.listdir(log):
        if name.endswith(".json") and name[:20].isdigit() and name[20:] == ".json" and int(name[:20]) < version:
            os.remove(os.path.join(log, name))


# --------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("name,checkpoint,files", [
    ("v2-checkpoint-json", 2, 4),
    ("v2-checkpoint-parquet", 2, 4),
    ("checkpoint-v2-table", 8, 7),
    ("multi-part-checkpoint", 1, 10),
    ("only-checkpoint-files", 2, 7),
    ("dv-partitioned-with-checkpoint", 10, None),
])
def test_replay_from_the_checkpoint_alone_equals_the_json_replay(tmp_path, name, checkpoint, files):
    """With the commits before the checkpoint gone, the state can only come from the
    checkpoint (and its sidecars): it must be the state the full JSON replay gives."""
    full = DeltaLog(os.path.join(ENGINES, name))
    expected = _files(full.update())
    at_checkpoint = _files(full.snapshot(checkpoint))
    path = _copy(name, tmp_path)
    _drop_commits_before(path, checkpoint)
    clear_checkpoint_cache()
    log = DeltaLog(path)
    snap = log.update()
    assert snap._state.checkpoint is not None  # it did start from a checkpoint
    assert _files(snap) == expected
    assert _files(log.snapshot(checkpoint)) == at_checkpoint
    if files is not None:
        assert len(at_checkpoint) == files
    if not any(n.startswith(f"{checkpoint - 1:020d}.checkpoint") for n in os.listdir(os.path.join(path, "_delta_log"))):
        with pytest.raises(VersionNotFoundError):  # the versions before the checkpoint are gone
            log.snapshot(checkpoint - 1)


def test_a_classic_named_v2_checkpoint_is_read_through_its_sidecars(tmp_path):
    """A V2 checkpoint may carry a classic name; its file actions then sit in sidecar files
    only. Reading it as a classic checkpoint would see a table without files."""
    path = _copy("v2-checkpoint-parquet", tmp_path)
    log_dir = os.path.join(path, "_delta_log")
    (uuid_named,) = [n for n in os.listdir(log_dir) if n.startswith("00000000000000000002.checkpoint.")]
    os.rename(os.path.join(log_dir, uuid_named), os.path.join(log_dir, "00000000000000000002.checkpoint.parquet"))
    os.remove(os.path.join(log_dir, "_last_checkpoint"))
    _drop_commits_before(path, 2)
    clear_checkpoint_cache()
    snap = DeltaLog(path).update()
    assert snap._state.checkpoint.paths == [os.path.join(log_dir, "00000000000000000002.checkpoint.parquet")]
    assert _files(snap) == _files(DeltaLog(os.path.join(ENGINES, "v2-checkpoint-parquet")).update())
    assert len(snap.all_files) == 4


def test_last_checkpoint_naming_a_v2_checkpoint_is_followed(tmp_path):
    path = os.path.join(ENGINES, "checkpoint-v2-table")
    info = json.loads(open(os.path.join(path, "_delta_log", "_last_checkpoint")).read())
    assert info["v2Checkpoint"]["path"].endswith(".json")
    clear_checkpoint_cache()
    snap = DeltaLog(path).update()
    assert snap.version == 9
    assert [os.path.basename(p) for p in snap._state.checkpoint.paths] == [info["v2Checkpoint"]["path"]]


def test_checkpoint_names_v2_multi_part_and_classic():
    names = [
        "00000000000000000002.checkpoint.6374b053-df23-479b-b2cf-c9c550132b49.json",
        "00000000000000000004.checkpoint.e8fa2696-9728-4e9c-b285-634743fdd4fb.parquet",
        "00000000000000000004.checkpoint.parquet",
        "00000000000000000006.checkpoint.0000000001.0000000002.parquet",
        "00000000000000000006.checkpoint.0000000002.0000000002.parquet",
        "00000000000000000008.checkpoint.0000000001.0000000002.parquet",  # incomplete
        # a sidecar's name (they live in _sidecars/, never listed with the log)
        "00000000000000000010.checkpoint.0000000001.0000000002.bd1885fd-6ec0-4370-b0f5-43b5162fd4de.parquet",
    ]
    assert complete_checkpoints(names) == {
        2: ["00000000000000000002.checkpoint.6374b053-df23-479b-b2cf-c9c550132b49.json"],
        4: ["00000000000000000004.checkpoint.parquet"],
        6: ["00000000000000000006.checkpoint.0000000001.0000000002.parquet",
            "00000000000000000006.checkpoint.0000000002.0000000002.parquet"],
    }


# --------------------------------------------------------------------------- protocols per version


def test_only_the_version_read_needs_to_be_readable():
    """type-widening took on typeWidening-preview at version 1: isolde reads and writes it now,
    every version (the refusal of a later version's feature is in test_snapshot)."""
    path = os.path.join(ENGINES, "type-widening")
    log = DeltaLog(path)
    latest = log.update()
    assert latest.version == 2 and latest.readable
    assert "typeWidening-preview" in latest.protocol.reader_features
    assert [h["version"] for h in latest.history()] == [2, 1, 0]
    assert [len(log.snapshot(v).all_files) for v in (0, 1, 2)] == [1, 1, 2]
    assert log.start_transaction().read_version == 2


def test_v2_checkpoint_and_vacuum_protocol_check_tables_are_read_and_written():
    for name in ("basic-with-vacuum-protocol-check-feature", "checkpoint-v2-table"):
        log = DeltaLog(os.path.join(ENGINES, name))
        snap = log.update()
        assert snap.readable and snap.all_files
        txn = log.start_transaction()  # no UnsupportedFeatureError: isolde writes both features now
        assert txn.read_version == snap.version


def test_column_mapping_id_mode_is_read_and_written():
    """Id mode is written as Delta writes it (field ids in every Parquet file): a writer starts
    on every id-mode table other engines made, icebergCompatV2 and legacy 2/5 protocols included."""
    for name in ("table-with-columnmapping-mode-id", "table-with-icebegCompatV2Enabled",
                 "data-skipping-basic-stats-all-types-columnmapping-id", "data-reader-timestamp_ntz-id-mode"):
        log = DeltaLog(os.path.join(ENGINES, name))
        snap = log.update()
        assert snap.readable and snap.configuration["delta.columnMapping.mode"] == "id"
        assert log.start_transaction().read_version == snap.version
        assert_writable(snap.protocol, snap.metadata, name, snap.version)


def test_change_data_feed_tables_are_writable_listed_or_enabled():
    """Databricks lists every legacy feature when it moves a table to writer version 7;
    changeDataFeed asks nothing of a writer until delta.enableChangeDataFeed is true, and once it
    is isolde writes the change data (executor/rows/cdf.py)."""
    listed = DeltaLog(os.path.join(ENGINES, "table_with_partitioning_mapping")).update()
    assert "changeDataFeed" in listed.protocol.writer_features
    assert "delta.enableChangeDataFeed" not in listed.configuration
    assert_writable(listed.protocol, listed.metadata, "t", listed.version)
    enabled = DeltaLog(os.path.join(ENGINES, "cdf-table-with-cdc-and-dvs")).update()
    assert enabled.configuration["delta.enableChangeDataFeed"] == "true"
    assert_writable(enabled.protocol, enabled.metadata, "t", enabled.version)
    on = Metadata(listed.metadata.schema_string, listed.metadata.partition_columns,
                  {**listed.configuration, "delta.enableChangeDataFeed": "true"})
    assert_writable(listed.protocol, on, "t")


def _without_ids(node):
    if isinstance(node, dict):
        return {k: _without_ids(v) for k, v in node.items()
                if k not in ("delta.columnMapping.id", "delta.columnMapping.nested.ids")}
    return [_without_ids(v) for v in node] if isinstance(node, list) else node


def _without_empty_nested_ids(node):
    if isinstance(node, dict):
        return {k: _without_empty_nested_ids(v) for k, v in node.items()
                if not (k == "delta.columnMapping.nested.ids" and not v)}
    return [_without_empty_nested_ids(v) for v in node] if isinstance(node, list) else node


@pytest.mark.parametrize("name,nested", [("table-with-icebegCompatV2Enabled", True),
                                         ("table-with-columnmapping-mode-id", False)])
def test_column_ids_are_numbered_as_delta_numbers_them(name, nested):
    """Ids assigned to the schema of a table Delta created (physical names kept, ids removed)
    are Delta's own: columns in pre-order, then (icebergCompatV2) array elements and map keys /
    values after them, under ``delta.columnMapping.nested.ids`` of the enclosing field."""
    from pyspark.sql import types as T

    from isolde.executor.catalog import schema as S

    snap = DeltaLog(os.path.join(ENGINES, name)).update()
    golden = json.loads(snap.metadata.schema_string)
    assert S.iceberg_compat_v2(snap.configuration) is nested
    struct, max_id = S.assign_column_mapping(T.StructType.fromJson(_without_ids(golden)), nested_ids=nested)
    assert struct.jsonValue() == _without_empty_nested_ids(golden)
    assert max_id == int(snap.configuration["delta.columnMapping.maxColumnId"])


def test_refusal_wording():
    protocol = Protocol(3, 7, ["deletionVectors", "variantType", "typeWidening", "madeUpFeature", "collations"],
                        ["variantType"])
    with pytest.raises(UnsupportedFeatureError) as info:
        assert_readable(protocol, None, "/data/t", 4)
    assert str(info.value) == ("Cannot read version 4 of table /data/t: it needs the reader features "
                               "collations, madeUpFeature, which isolde does not support.")
    with pytest.raises(UnsupportedFeatureError) as info:
        assert_readable(Protocol(4, 7, [], []))
    assert str(info.value) == "Cannot read the table: it needs Delta reader version 4; isolde reads up to 3."
    with pytest.raises(UnsupportedFeatureError) as info:
        assert_writable(Protocol(1, 8), None, "db.t")
    assert str(info.value) == "Cannot write to table db.t: it needs Delta writer version 8; isolde writes up to 7."
    invalid = DeltaLog(os.path.join(ENGINES, "deltalog-invalid-protocol-version")).update()
    with pytest.raises(UnsupportedFeatureError) as info:
        invalid.all_files
    assert str(info.value).startswith("Cannot read version 0 of table ")
    assert str(info.value).endswith(": it needs Delta reader version 99; isolde reads up to 3.")


# --------------------------------------------------------------------------- odd logs


def test_metadata_without_a_schema_is_a_table_without_columns():
    log = DeltaLog(os.path.join(ENGINES, "delta-live-table"))
    first = log.snapshot(0)
    assert first.schema == {"type": "struct", "fields": []} and first.all_files == []
    latest = log.update()
    assert [f["name"] for f in latest.schema["fields"]][:2] == ["sherpa_user_id", "enabled"]


def _write(path, version, *lines):
    os.makedirs(os.path.join(path, "_delta_log"), exist_ok=True)
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), "wb") as fh:
        fh.write(b"\n".join(lines) + b"\n")


def test_a_log_without_protocol_or_metadata_is_refused_clearly(tmp_path):
    no_metadata = str(tmp_path / "a")
    _write(no_metadata, 0, serialize_commit([Protocol(1, 2)]).strip())
    with pytest.raises(ExecutionError) as info:
        DeltaLog(no_metadata).update().all_files
    assert str(info.value) == (f"Cannot read version 0 of table {no_metadata}: the log up to that version has no "
                               "metaData action (was a file in _delta_log deleted or truncated?).")
    assert info.value.error_class == "DELTA_STATE_RECOVER_ERROR"
    no_protocol = str(tmp_path / "b")
    _write(no_protocol, 0, serialize_commit([Metadata(DEFAULT_SCHEMA)]).strip())
    with pytest.raises(ExecutionError, match="has no protocol action"):
        DeltaLog(no_protocol).update().all_files


def test_a_malformed_commit_names_its_version(tmp_path):
    path = str(tmp_path / "t")
    _write(path, 0, serialize_commit([CommitInfo(timestamp=1, operation="X"), Protocol(1, 2),
                                      Metadata(DEFAULT_SCHEMA)]).strip())
    _write(path, 1, b'{"add": {"partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true}}')
    with pytest.raises(ExecutionError) as info:
        DeltaLog(path).update()
    assert str(info.value) == (f"Cannot read version 1 of table {path}: its commit file is not a valid Delta "
                               "commit (an action lacks the field 'path').")
    assert DeltaLog(path).snapshot(0).version == 0


# --------------------------------------------------------------------------- deletion vectors


def test_unreadable_deletion_vectors_are_isolde_errors(tmp_path):
    path = _copy("table-with-dv-small", tmp_path)
    (add,) = [a for a in DeltaLog(path).update().all_files if a.deletion_vector is not None]
    dv = dv_file_path(path, add.deletion_vector)
    assert len(read_deletion_vector(path, add.deletion_vector)) == 2
    raw = bytearray(open(dv, "rb").read())
    raw[-1] ^= 0xFF
    open(dv, "wb").write(bytes(raw))
    with pytest.raises(DeletionVectorError) as info:
        read_deletion_vector(path, add.deletion_vector)
    assert isinstance(info.value, ExecutionError) and isinstance(info.value, ValueError)
    assert info.value.error_class == "DELTA_DELETION_VECTOR_CHECKSUM_MISMATCH"
    assert str(info.value) == f"The deletion vector file {dv} fails its CRC-32 checksum."
    placed = info.value.in_context(path, add.path, 1)
    assert str(placed) == (f"Cannot read version 1 of table {path}: the deletion vector file {dv} of data file "
                           f"{add.path} fails its CRC-32 checksum.")
    os.remove(dv)
    with pytest.raises(DeletionVectorError) as info:
        read_deletion_vector(path, add.deletion_vector)
    assert info.value.error_class == "DELTA_FILE_NOT_FOUND_DETAILED"
    assert str(info.value) == f"The deletion vector file {dv} does not exist."
