"""Snapshot replay, checkpoints, time travel, history, protocol features and properties."""

from __future__ import annotations

import json
import os
import time

import pyarrow.parquet as pq
import pytest

from isolde.errors import InvalidPropertyError, UnsupportedFeatureError, VersionNotFoundError
from isolde.executor.log import DeltaLog, validate_table_properties
from isolde.executor.log.actions import (
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    serialize_commit,
)
from isolde.executor.log.checkpoint import CHECKPOINT_SCHEMA
from isolde.executor.log.deletion_vectors import inline_descriptor
from isolde.executor.log.features import SUPPORTED_FEATURES, required_protocol

from tests.helpers.log_tables import DEFAULT_SCHEMA, add, create_table


def test_for_table_creates_nothing(tmp_path):
    path = tmp_path / "nothing"
    log = DeltaLog.for_table(str(path))
    snap = log.snapshot()
    assert snap.version == -1 and snap.all_files == [] and snap.metadata is None and snap.protocol is None
    assert snap.partition_columns == () and snap.configuration == {} and snap.schema is None
    assert not path.exists()
    txn = log.start_transaction()
    assert txn.snapshot.version == -1 and txn.txn_version("x") == -1
    assert not path.exists()


def test_plain_directory_and_file_uri(tmp_path):
    create_table(str(tmp_path), files=[add("a.parquet")])
    assert DeltaLog.for_table("file://" + str(tmp_path)).snapshot().version == 0
    assert DeltaLog.for_table(tmp_path).snapshot().all_files[0].path == "a.parquet"


def test_replay_files_tombstones_txn_and_domains(table_dir):
    log = create_table(table_dir, ["date"], {"delta.enableDeletionVectors": "true"},
                       files=[add("a", date="1"), add("b", date="2")])
    t = log.start_transaction()
    a = t.snapshot.file("a")
    t.commit([a.remove(), add("c", date="1"), SetTransaction("app", 5),
              DomainMetadata("delta.clustering", '{"clusteringColumns":[]}')])
    dv = inline_descriptor([1, 2])
    t = log.start_transaction()
    c = t.snapshot.file("c")
    c_dv = AddFile(c.path, c.partition_values, c.size, c.modification_time, deletion_vector=dv)
    t.commit([c.remove(), c_dv, SetTransaction("app", 6), DomainMetadata("delta.clustering", "", removed=True)])
    snap = DeltaLog.for_table(table_dir).snapshot()
    assert snap.version == 2
    assert sorted(f.path for f in snap.all_files) == ["b", "c"]
    assert snap.file("c").deletion_vector == dv
    assert {r.key for r in snap.tombstones} == {("a", None), ("c", None)}
    assert snap.transaction_version("app") == 6 and snap.transaction_version("nope") == -1
    assert snap.app_transaction_versions == {"app": 6}
    assert snap.domain_metadata == {}
    assert snap.partition_columns == ("date",)
    assert snap.schema["fields"][0]["name"] == "id"
    assert DeltaLog.for_table(table_dir).snapshot(1).domain_metadata["delta.clustering"].domain == "delta.clustering"


def test_incremental_update_matches_full_load(table_dir):
    log = create_table(table_dir)
    for i in range(25):
        log.start_transaction().commit([add(f"f{i}")])
        if i % 3 == 0:
            t = log.start_transaction()
            t.commit([t.snapshot.file(f"f{i}").remove()])
    fresh = DeltaLog.for_table(table_dir).snapshot()
    cached = log.snapshot()
    assert cached.version == fresh.version
    assert {f.path for f in cached.all_files} == {f.path for f in fresh.all_files}
    assert {r.path for r in cached.tombstones} == {r.path for r in fresh.tombstones}


def test_checkpoints_every_interval_and_are_used(table_dir):
    log = create_table(table_dir, configuration={"delta.checkpointInterval": "5"})
    for i in range(12):
        t = log.start_transaction()
        acts = [add(f"f{i}"), SetTransaction("app", i)]
        if i == 4:
            acts.append(t.snapshot.file("f0").remove())
        t.commit(acts)
    names = sorted(os.listdir(os.path.join(table_dir, "_delta_log")))
    assert "00000000000000000005.checkpoint.parquet" in names
    assert "00000000000000000010.checkpoint.parquet" in names
    assert json.load(open(os.path.join(table_dir, "_delta_log", "_last_checkpoint")))["version"] == 10
    schema = pq.read_schema(os.path.join(table_dir, "_delta_log", "00000000000000000010.checkpoint.parquet"))
    assert set(schema.names) == set(CHECKPOINT_SCHEMA.names)
    # remove the JSON before the checkpoint: loading must not need it
    for v in range(0, 10):
        os.remove(os.path.join(table_dir, "_delta_log", f"{v:020d}.json"))
    snap = DeltaLog.for_table(table_dir).snapshot()
    assert snap.version == 12
    assert {f.path for f in snap.all_files} == {f"f{i}" for i in range(1, 12)}
    assert snap.transaction_version("app") == 11
    assert [r.path for r in snap.tombstones] == ["f0"]
    assert snap.configuration["delta.checkpointInterval"] == "5"
    assert DeltaLog.for_table(table_dir).snapshot(10).version == 10
    with pytest.raises(VersionNotFoundError, match="cleaned up"):
        DeltaLog.for_table(table_dir).snapshot(3)


def test_stale_or_missing_last_checkpoint(table_dir):
    log = create_table(table_dir, configuration={"delta.checkpointInterval": "3"})
    for i in range(7):
        log.start_transaction().commit([add(f"f{i}")])
    last = os.path.join(table_dir, "_delta_log", "_last_checkpoint")
    os.remove(last)
    assert DeltaLog.for_table(table_dir).snapshot().num_files == 7
    with open(last, "w") as fh:
        fh.write(json.dumps({"version": 3, "size": 1}))  # stale hint
    assert DeltaLog.for_table(table_dir).snapshot().num_files == 7
    with open(last, "w") as fh:
        fh.write("garbage")
    assert DeltaLog.for_table(table_dir).snapshot().version == 7


def test_version_not_found(table_dir):
    log = create_table(table_dir)
    log.start_transaction().commit([add("a")])
    with pytest.raises(VersionNotFoundError, match="latest version is 1"):
        log.snapshot(5)
    with pytest.raises(VersionNotFoundError):
        log.snapshot(-3)
    with pytest.raises(VersionNotFoundError, match="does not exist"):
        DeltaLog.for_table(table_dir + "_missing").snapshot(0)


def test_time_travel_by_version_and_timestamp(table_dir):
    log = create_table(table_dir)
    stamps = [log.snapshot().timestamp]
    for i in range(4):
        time.sleep(0.01)
        log.start_transaction().commit([add(f"f{i}")])
        stamps.append(log.snapshot().timestamp)
    assert stamps == sorted(stamps) and len(set(stamps)) == 5
    for v, ts in enumerate(stamps):
        assert log.snapshot(v).num_files == v
        assert log.snapshot(timestamp=ts).version == v
        if v < 4:
            assert log.snapshot(timestamp=ts + 1).version == v
    with pytest.raises(VersionNotFoundError, match="before"):
        log.snapshot(timestamp=stamps[0] - 1000)
    with pytest.raises(VersionNotFoundError, match="after"):
        log.snapshot(timestamp=stamps[-1] + 60_000)
    import datetime as dt

    when = dt.datetime.fromtimestamp(stamps[2] / 1000, dt.timezone.utc)
    assert log.snapshot(timestamp=when).version == 2
    assert log.snapshot(timestamp=when.isoformat()).version == 2
    assert log.snapshot(3).timestamp == stamps[3]


def test_history_newest_first(table_dir):
    log = create_table(table_dir)
    t = log.start_transaction()
    t.filter_files("id = 1")
    t.commit([add("x")], "DELETE", {"predicate": ["id = 1"], "flag": True}, metrics={"numDeletedRows": 3})
    hist = log.history()
    assert [h["version"] for h in hist] == [1, 0]
    h = hist[0]
    assert h["operation"] == "DELETE" and h["readVersion"] == 0
    assert h["operationParameters"] == {"predicate": '["id = 1"]', "flag": "true"}
    assert h["operationMetrics"] == {"numDeletedRows": "3"}
    assert h["engineInfo"] == "isolde/0.1.0" and h["isBlindAppend"] is False
    assert h["readPredicates"] == ["id = 1"] and len(h["txnId"]) == 36
    assert log.history(limit=1) == hist[:1]
    assert hist[1]["operation"] == "CREATE TABLE" and "readVersion" not in hist[1]
    assert log.snapshot(0).history() == hist[1:]


def test_commit_info_from_other_engines_and_unknown_actions_survive_replay(table_dir):
    os.makedirs(os.path.join(table_dir, "_delta_log"))
    lines = [
        {"commitInfo": {"timestamp": 1000, "operation": "CREATE TABLE", "vendor": {"a": 1}}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": "x", "format": {"provider": "parquet", "options": {}}, "schemaString": DEFAULT_SCHEMA,
                      "partitionColumns": [], "configuration": {}, "createdTime": 1, "newField": 3}},
        {"add": {"path": "a", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": True, "z": 1}},
        {"futureAction": {"what": "ever"}},
    ]
    with open(os.path.join(table_dir, "_delta_log", f"{0:020d}.json"), "w") as fh:
        fh.write("\n".join(json.dumps(x) for x in lines))
    log = DeltaLog.for_table(table_dir)
    snap = log.snapshot()
    assert snap.all_files[0].extra == {"z": 1}
    assert snap.metadata.extra == {"newField": 3}
    assert snap.timestamp == 1000
    log.checkpoint()
    again = DeltaLog.for_table(table_dir).snapshot()
    assert again.all_files[0].path == "a" and again.metadata.id == "x"


def test_unsupported_features_are_refused(table_dir):
    create_table(table_dir, protocol=Protocol(3, 7, ["deletionVectors"], ["deletionVectors"]))
    upgrade = Protocol(3, 7, ["deletionVectors", "collations"], ["deletionVectors", "collations"])
    with open(os.path.join(table_dir, "_delta_log", f"{1:020d}.json"), "wb") as fh:
        fh.write(serialize_commit([CommitInfo(timestamp=int(time.time() * 1000), operation="UPGRADE"), upgrade]))
    # the snapshot loads (its version, protocol and history stay available); its data is refused
    snap = DeltaLog.for_table(table_dir).snapshot()
    assert snap.version == 1 and not snap.readable
    with pytest.raises(UnsupportedFeatureError, match="version 1 of table .*collations") as info:
        snap.all_files
    assert info.value.error_class == "DELTA_UNSUPPORTED_FEATURES_FOR_READ"
    with pytest.raises(UnsupportedFeatureError, match="collations"):
        DeltaLog.for_table(table_dir).start_transaction()
    # the version before the upgrade still reads (time travel)
    assert DeltaLog.for_table(table_dir).snapshot(0).all_files == []
    # a writer-only feature: readable, not writable
    other = table_dir + "2"
    write_commit(other, 0, [Protocol(1, 7, None, ["appendOnly", "madeUpWriterFeature"]), Metadata(DEFAULT_SCHEMA)])
    log = DeltaLog.for_table(other)
    assert log.snapshot().version == 0
    with pytest.raises(UnsupportedFeatureError, match="madeUpWriterFeature") as info:
        log.start_transaction()
    assert info.value.error_class == "DELTA_UNSUPPORTED_FEATURES_FOR_WRITE"
    # legacy versions: writer version 4 with the change data feed on is written (executor/rows/cdf.py)
    third = table_dir + "3"
    write_commit(third, 0, [Protocol(1, 4), Metadata(DEFAULT_SCHEMA, (), {"delta.enableChangeDataFeed": "true"})])
    assert DeltaLog.for_table(third).start_transaction().read_version == 0
    with pytest.raises(UnsupportedFeatureError, match="reader version 4"):
        DeltaLog.for_table(table_dir + "4").start_transaction().commit([Protocol(4, 7, [], []), Metadata(DEFAULT_SCHEMA)])


def write_commit(path, version, actions):
    os.makedirs(os.path.join(path, "_delta_log"), exist_ok=True)
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), "wb") as fh:
        fh.write(serialize_commit([CommitInfo(timestamp=int(time.time() * 1000), operation="HAND"), *actions]))


def test_supported_features_constant():
    assert {"deletionVectors", "v2Checkpoint", "vacuumProtocolCheck"} <= SUPPORTED_FEATURES
    assert {"typeWidening", "typeWidening-preview", "variantType", "variantType-preview"} <= SUPPORTED_FEATURES
    assert "collations" not in SUPPORTED_FEATURES
    assert isinstance(SUPPORTED_FEATURES, frozenset)


def test_new_table_protocol_follows_properties(table_dir):
    create_table(table_dir, configuration={"delta.enableDeletionVectors": "true"})
    p = DeltaLog.for_table(table_dir).snapshot().protocol
    assert (p.min_reader_version, p.min_writer_version) == (3, 7)
    assert p.reader_features == ["deletionVectors"] and "deletionVectors" in p.writer_features
    plain = required_protocol(Metadata(DEFAULT_SCHEMA))
    assert (plain.min_reader_version, plain.min_writer_version) == (1, 2)
    upgraded = required_protocol(Metadata(DEFAULT_SCHEMA, (), {"delta.enableDeletionVectors": "true"}), Protocol(1, 2))
    assert "appendOnly" in upgraded.writer_features and "invariants" in upgraded.writer_features


@pytest.mark.parametrize("conf", [{"delta.feature.rowTracking": "supported"}, {"delta.enableRowTracking": "true"},
                                  {"delta.feature.clustering": "supported"}])
def test_features_bring_the_features_they_need(conf):
    """Row tracking and clustering keep their state in domain metadata (PROTOCOL.md): a protocol
    that supports either supports domainMetadata, however the feature was asked for."""
    p = required_protocol(Metadata(DEFAULT_SCHEMA, (), conf))
    assert "domainMetadata" in p.writer_features


def test_append_only_refuses_deletes(table_dir):
    from isolde.errors import ExecutionError

    log = create_table(table_dir, configuration={"delta.appendOnly": "true"}, files=[add("a")])
    t = log.start_transaction()
    with pytest.raises(ExecutionError) as info:
        t.commit([t.snapshot.file("a").remove()])
    assert info.value.error_class == "DELTA_CANNOT_MODIFY_APPEND_ONLY"
    t = log.start_transaction()
    t.commit([t.snapshot.file("a").remove(data_change=False), add("b", data_change=False)], "OPTIMIZE")


def test_deletion_vectors_need_the_feature(table_dir):
    log = create_table(table_dir, files=[add("a")])
    t = log.start_transaction()
    a = t.snapshot.file("a")
    with pytest.raises(UnsupportedFeatureError):
        t.commit([a.remove(), AddFile("a", {}, 1, 1, deletion_vector=inline_descriptor([0]))])


def test_validate_table_properties():
    out = validate_table_properties(
        {"delta.isolationlevel": "serializable", "delta.enableDeletionVectors": "TRUE", "delta.checkpointInterval": "7",
         "delta.logRetentionDuration": "interval 30 days", "delta.appendOnly": "false", "owner": "me",
         "delta.feature.deletionVectors": "supported", "delta.constraints.c1": "id > 0"}
    )
    assert out["delta.isolationLevel"] == "Serializable" and out["delta.enableDeletionVectors"] == "true"
    assert out["owner"] == "me"
    assert validate_table_properties({"delta.feature.variantType": "supported", "delta.enableTypeWidening": "true"}) == {
        "delta.feature.variantType": "supported", "delta.enableTypeWidening": "true"}
    for bad in (
        {"delta.isolationLevel": "SnapshotIsolation"},
        {"delta.isolationLevel": "ReadCommitted"},
        {"delta.enableDeletionVectors": "yes"},
        {"delta.checkpointInterval": "0"},
        {"delta.checkpointInterval": "ten"},
        {"delta.deletedFileRetentionDuration": "7 days"},
        {"delta.noSuchProperty": "1"},
        {"delta.feature.collations": "supported"},
    ):
        with pytest.raises(InvalidPropertyError):
            validate_table_properties(bad)


def test_invalid_isolation_level_refused_at_commit(table_dir):
    with pytest.raises(InvalidPropertyError):
        create_table(table_dir, configuration={"delta.isolationLevel": "Snapshot"})
    assert not os.path.exists(os.path.join(table_dir, "_delta_log", f"{0:020d}.json"))


def test_txn_api_extras(table_dir):
    log = create_table(table_dir, ["date"], files=[add("a", date="1"), add("b", date="2")])
    t = log.start_transaction()
    assert t.isolation_level == "WriteSerializable"
    files = t.record_read("id > 1", partition_predicate_sql="date = '1'", files=[t.snapshot.file("a")])
    assert [f.path for f in files] == ["a"]
    assert [f.path for f in t.filter_files(partition_predicate_sql="date = '2'")] == ["b"]
    v = t.commit([add("c", date="1")])
    assert v == 1 and t.attempts == 1 and t.commit_info.read_version == 0
    assert t.commit_info.extra["readPredicates"] == ["(date = '1') AND (id > 1)", "date = '2'"]
    b = log.start_transaction()
    b.set_blind_append()
    b.commit([add("d", date="1")])
    assert b.commit_info.is_blind_append is True


def test_commit_is_atomic_file_never_torn(table_dir):
    """Losing a race leaves no temp files and no partial commit."""
    log = create_table(table_dir)
    body = serialize_commit([CommitInfo(timestamp=1, operation="X")])
    with pytest.raises(FileExistsError):
        log.store.put_if_absent(log.commit_path(0), body)
    assert [n for n in os.listdir(log.log_path) if n.startswith(".")] == []
    RemoveFile("z")  # constructor default timestamp works without a table


def test_properties_of_other_engines_survive_a_metadata_change(table_dir):
    write_commit(table_dir, 0, [Protocol(1, 2), Metadata(DEFAULT_SCHEMA, (), {"delta.vendorThing": "x", "k": "v"})])
    log = DeltaLog.for_table(table_dir)
    old = log.snapshot().metadata
    t = log.start_transaction()
    conf = {**old.configuration, "delta.isolationlevel": "serializable", "delta.appendOnly": True}
    t.commit([Metadata(old.schema_string, (), conf, id=old.id)], "SET TBLPROPERTIES")
    new = DeltaLog.for_table(table_dir).snapshot()
    assert new.configuration == {"delta.vendorThing": "x", "k": "v", "delta.isolationLevel": "Serializable",
                                 "delta.appendOnly": "true"}
    assert new.isolation_level == "Serializable"
    t = log.start_transaction()
    with pytest.raises(InvalidPropertyError):
        t.commit([Metadata(old.schema_string, (), {**new.configuration, "delta.typo": "1"}, id=old.id)])


def test_partition_columns_must_be_in_schema(table_dir):
    from isolde.errors import AnalysisError

    with pytest.raises(AnalysisError):
        create_table(table_dir, ["nope"])


def test_files_matching_and_max_attempts(table_dir):
    log = create_table(table_dir, ["date"], files=[add("a", date="1"), add("b", date="2")])
    snap = log.snapshot()
    assert [f.path for f in snap.files_matching("date = '2'")] == ["b"]
    assert len(snap.files_matching()) == 2
    t = log.start_transaction(max_attempts=3)
    assert t.max_attempts == 3 and t.read_predicates == []  # files_matching recorded nothing


def test_time_travel_finds_older_checkpoint_without_listing(table_dir, monkeypatch):
    log = create_table(table_dir, configuration={"delta.checkpointInterval": "5"})
    for i in range(23):
        log.start_transaction().commit([add(f"f{i}")])
    fresh = DeltaLog.for_table(table_dir)
    monkeypatch.setattr(fresh, "_list_log", lambda: (_ for _ in ()).throw(AssertionError("listed")))
    for v in (5, 7, 12, 20, 23):
        assert fresh.snapshot(v).num_files == v


def test_checkpoint_keeps_tombstones_in_their_own_row_group(table_dir):
    from isolde.executor.log.checkpoint import _row_groups_with

    import deltalake
    log = create_table(table_dir, files=[add(f"f{i}") for i in range(30)])
    t = log.start_transaction()
    t.commit([t.snapshot.file(f"f{i}").remove() for i in range(20)], "DELETE")
    path = log.checkpoint()
    md = pq.ParquetFile(path).metadata
    assert md.num_row_groups == 2
    assert _row_groups_with(md, ["protocol", "metaData", "add", "txn"]) == [0]
    assert _row_groups_with(md, ["remove"]) == [1]
    snap = DeltaLog.for_table(table_dir).snapshot()
    assert snap.num_files == 10 and len(snap.tombstones) == 20
    assert len(deltalake.DeltaTable(table_dir).file_uris()) == 10


def test_checkpoint_files_are_shared_until_the_checkpoint_changes(table_dir):
    log = create_table(table_dir, files=[add(f"f{i}") for i in range(5)])
    log.checkpoint()
    a = DeltaLog.for_table(table_dir).snapshot().all_files
    b = DeltaLog.for_table(table_dir).snapshot().all_files
    assert a[0] is b[0]  # one process, one copy of an immutable checkpoint's files
    t = log.start_transaction()
    t.commit([t.snapshot.file("f0").remove()])
    log.checkpoint()  # a new checkpoint file: a new identity
    c = DeltaLog.for_table(table_dir).snapshot().all_files
    assert sorted(f.path for f in c) == [f"f{i}" for i in range(1, 5)]
