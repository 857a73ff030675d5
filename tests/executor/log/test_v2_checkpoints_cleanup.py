"""V2 checkpoints written by isolde, log cleanup (delta.logRetentionDuration), vacuumProtocolCheck and
in-commit timestamps -- all through the log layer, read back by isolde and by delta-rs (`deltalake`).

delta-rs refuses the pyarrow path of v2Checkpoint tables (a reader feature it lists as unsupported
there) but reads them through its DataFusion QueryBuilder, which is what these tests use.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time

import pyarrow.parquet as pq
import pytest

import deltalake
from deltalake import DeltaTable, QueryBuilder

from isolde.errors import InvalidPropertyError, UnsupportedFeatureError, VersionNotFoundError
from isolde.executor.log import DeltaLog
from isolde.executor.log.actions import CommitInfo, Metadata, Protocol, now_ms, serialize_commit
from isolde.executor.log.checkpoint import SIDECAR_SCHEMA, clear_checkpoint_cache
from isolde.executor.log.features import (
    READ_ONLY_FEATURES,
    SUPPORTED_FEATURES,
    assert_writable,
    required_protocol,
    validate_table_properties,
)

from tests.helpers.log_tables import add, create_table
from .test_interop import SCHEMA, write_file

from tests.helpers import ENGINES  # noqa: E402  (tests/data/engines)
DAY = 86_400_000


# --------------------------------------------------------------------------- helpers


def log_names(path) -> list[str]:
    return sorted(n for n in os.listdir(os.path.join(path, "_delta_log")) if not n.startswith("."))


def sidecar_names(path) -> list[str]:
    d = os.path.join(path, "_delta_log", "_sidecars")
    return sorted(n for n in os.listdir(d) if not n.startswith(".")) if os.path.isdir(d) else []


def rs_ids(path, version=None) -> list[int]:
    """The ids delta-rs reads (DataFusion: works for v2Checkpoint tables too)."""
    table = DeltaTable(path, version=version)
    out = QueryBuilder().register("t", table).execute("SELECT id FROM t").read_all()
    return sorted(out.column("id").to_pylist())


def isolde_ids(path, version=None) -> list[int]:
    """The ids of the live files at a version, read with pyarrow through isolde's snapshot."""
    clear_checkpoint_cache()
    snap = DeltaLog(path).snapshot(version)
    ids: list[int] = []
    for f in snap.all_files:
        ids += pq.read_table(os.path.join(path, f.path)).column("id").to_pylist()
    return sorted(ids)


def age(path, *names, days: float = 40) -> None:
    """Make log files look ``days`` old (file modification time)."""
    t = time.time() - days * 86_400
    for name in names:
        os.utime(os.path.join(path, "_delta_log", name), (t, t))


def commit_name(v: int) -> str:
    return f"{v:020d}.json"


def make_table(path, n_commits: int, configuration: dict, *, checkpoint_each: bool = False) -> DeltaLog:
    """Version 0 creates the table with row 0; version v appends row v. Checkpoints follow
    delta.checkpointInterval (the transaction's post-commit hook)."""
    log = DeltaLog(path)
    log.start_transaction().commit([Metadata(SCHEMA, ("p",), dict(configuration)), write_file(path, [0])],
                                   "CREATE TABLE")
    for v in range(1, n_commits):
        log.start_transaction().commit([write_file(path, [v])], "WRITE")
    return log


# --------------------------------------------------------------------------- features and properties


def test_features_v2_checkpoint_vacuum_protocol_check_and_in_commit_timestamps_are_writable():
    assert {"v2Checkpoint", "vacuumProtocolCheck", "inCommitTimestamp"} <= SUPPORTED_FEATURES
    assert not READ_ONLY_FEATURES
    p = Protocol(3, 7, ["v2Checkpoint", "vacuumProtocolCheck"], ["v2Checkpoint", "vacuumProtocolCheck"])
    assert_writable(p, Metadata(SCHEMA))
    ict = Metadata(SCHEMA, configuration={"delta.enableInCommitTimestamps": "true"})
    assert_writable(Protocol(1, 7, None, ["inCommitTimestamp"]), ict)  # the transaction stamps each commit
    assert_writable(Protocol(1, 7, None, ["inCommitTimestamp"]), Metadata(SCHEMA))


def test_checkpoint_policy_v2_needs_the_v2_checkpoint_feature():
    meta = Metadata(SCHEMA, configuration={"delta.checkpointPolicy": "v2"})
    p = required_protocol(meta, Protocol(1, 2))
    assert (p.min_reader_version, p.min_writer_version) == (3, 7)
    assert "v2Checkpoint" in p.reader_features and "v2Checkpoint" in p.writer_features
    classic = Metadata(SCHEMA, configuration={"delta.checkpointPolicy": "classic"})
    assert required_protocol(classic, Protocol(1, 2)) == Protocol(1, 2)
    assert validate_table_properties({"delta.CHECKPOINTPOLICY": "V2"}) == {"delta.checkpointPolicy": "v2"}
    with pytest.raises(InvalidPropertyError, match="classic or v2"):
        validate_table_properties({"delta.checkpointPolicy": "v3"})
    assert validate_table_properties({"delta.enableExpiredLogCleanup": "FALSE"}) == {
        "delta.enableExpiredLogCleanup": "false"}
    with pytest.raises(InvalidPropertyError):
        validate_table_properties({"delta.enableExpiredLogCleanup": "maybe"})
    feature = required_protocol(Metadata(SCHEMA, configuration={"delta.feature.vacuumProtocolCheck": "supported"}))
    assert feature.reader_features == ["vacuumProtocolCheck"]


def test_setting_the_policy_on_an_existing_table_upgrades_its_protocol(table_dir):
    """ALTER TABLE ... SET TBLPROPERTIES ('delta.checkpointPolicy' = 'v2') is a metaData commit; the
    transaction adds the protocol the property needs (required_protocol)."""
    log = create_table(table_dir, files=[add("a")])
    assert log.update().protocol == Protocol(1, 2)
    meta = log.update().metadata
    changed = Metadata(meta.schema_string, meta.partition_columns, {**meta.configuration, "delta.checkpointPolicy": "v2"},
                       id=meta.id, created_time=meta.created_time)
    log.start_transaction().commit([changed], "SET TBLPROPERTIES")
    snap = log.update()
    assert snap.protocol.min_reader_version == 3 and snap.protocol.min_writer_version == 7
    assert "v2Checkpoint" in snap.protocol.reader_features and "v2Checkpoint" in snap.protocol.writer_features
    log.checkpoint()
    assert any(".checkpoint." in n and n.endswith(".parquet") and len(n.split(".")) == 4 for n in log_names(table_dir))


# --------------------------------------------------------------------------- writing V2 checkpoints


def test_v2_checkpoint_layout_and_last_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    log = make_table(path, 7, {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "3"})
    names = log_names(path)
    tops = [n for n in names if ".checkpoint." in n]
    # UUID-named top-level Parquet checkpoints at 3 and 6, no classic or multi-part ones
    assert [n[:20] for n in tops] == [f"{3:020d}", f"{6:020d}"]
    assert all(len(n.split(".")) == 4 and n.endswith(".parquet") for n in tops)
    last = json.load(open(os.path.join(path, "_delta_log", "_last_checkpoint")))
    assert last["version"] == 6 and last["numOfAddFiles"] == 7
    assert last["v2Checkpoint"]["path"] == tops[-1]
    assert last["v2Checkpoint"]["sidecarFiles"][0]["path"] in sidecar_names(path)
    top = pq.read_table(os.path.join(path, "_delta_log", tops[-1])).to_pylist()
    kinds = [next(k for k, v in row.items() if v is not None) for row in top]
    assert kinds[0] == "checkpointMetadata" and kinds.count("checkpointMetadata") == 1
    assert top[0]["checkpointMetadata"]["version"] == 6
    assert "sidecar" in kinds and "add" not in kinds and {"protocol", "metaData"} <= set(kinds)
    sidecars = [row["sidecar"] for row in top if row["sidecar"] is not None]
    for s in sidecars:
        sc = pq.read_table(os.path.join(path, "_delta_log", "_sidecars", s["path"]))
        assert sc.schema.names == SIDECAR_SCHEMA.names
        assert s["sizeInBytes"] == os.path.getsize(os.path.join(path, "_delta_log", "_sidecars", s["path"]))
    assert sum(pq.read_metadata(os.path.join(path, "_delta_log", "_sidecars", s["path"])).num_rows
               for s in sidecars) == 7


def test_v2_checkpoint_alone_is_read_by_isolde_and_delta_rs(tmp_path):
    """With every commit before the checkpoint deleted, the state can only come from the
    UUID-named checkpoint and its sidecars."""
    path = str(tmp_path / "t")
    log = make_table(path, 8, {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "3"})
    t = log.start_transaction()  # a remove, so the checkpoint holds a tombstone too
    t.commit([t.snapshot.all_files[0].remove()], "DELETE")
    log.checkpoint()  # version 8
    removed = sorted(set(range(8)) - set(isolde_ids(path)))
    assert len(removed) == 1
    for v in range(8):
        os.remove(os.path.join(path, "_delta_log", commit_name(v)))
    expected = sorted(set(range(8)) - set(removed))
    assert isolde_ids(path) == expected == rs_ids(path)
    assert DeltaTable(path).version() == 8
    clear_checkpoint_cache()
    snap = DeltaLog(path).update()
    assert [r.path for r in snap.tombstones] and snap._state.checkpoint.paths[0].endswith(".parquet")


def test_sidecars_split_at_the_part_size(tmp_path, monkeypatch):
    from isolde.executor.log import checkpoint as C

    monkeypatch.setattr(C, "SIDECAR_PART_ACTIONS", 3)
    monkeypatch.setattr(C.sidecar_tables, "__defaults__", (3,))
    path = str(tmp_path / "t")
    log = make_table(path, 8, {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "100"})
    log.checkpoint()
    names = sidecar_names(path)
    assert len(names) == 3 and {n.split(".")[3] for n in names} == {"0000000003"}
    for v in range(7):
        os.remove(os.path.join(path, "_delta_log", commit_name(v)))
    assert isolde_ids(path) == list(range(8)) == rs_ids(path)


def test_classic_tables_keep_classic_checkpoints(tmp_path):
    path = str(tmp_path / "t")
    make_table(path, 4, {"delta.checkpointInterval": "3"})
    assert "00000000000000000003.checkpoint.parquet" in log_names(path)
    assert "v2Checkpoint" not in json.load(open(os.path.join(path, "_delta_log", "_last_checkpoint")))
    assert sidecar_names(path) == []
    # a v2Checkpoint table whose policy is classic writes classic checkpoints too
    path2 = str(tmp_path / "t2")
    make_table(path2, 4, {"delta.checkpointInterval": "3", "delta.feature.v2Checkpoint": "supported"})
    assert "v2Checkpoint" in DeltaLog(path2).update().protocol.reader_features
    assert "00000000000000000003.checkpoint.parquet" in log_names(path2)


# --------------------------------------------------------------------------- reading: every V2 form


@pytest.mark.parametrize("name", ["checkpoint-v2-table", "v2-checkpoint-json", "v2-checkpoint-parquet"])
def test_engine_v2_checkpoints_read_like_delta_rs(tmp_path, name):
    path = str(tmp_path / name)
    shutil.copytree(os.path.join(ENGINES, name), path)
    log = DeltaLog(path)
    latest = log.update()
    assert latest.version == DeltaTable(path).version()
    rs = DeltaTable(path)
    assert sorted(os.path.basename(u) for u in rs.file_uris()) == sorted(
        os.path.basename(f.path) for f in latest.all_files)


def test_a_json_v2_checkpoint_without_sidecars_is_read(tmp_path):
    """V2 spec, file actions inline in a UUID-named JSON checkpoint (no sidecar)."""
    path = str(tmp_path / "t")
    log = make_table(path, 4, {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "100"})
    snap = log.update()
    lines = [{"checkpointMetadata": {"version": 3, "tags": {}}},
             {"protocol": snap.protocol.to_dict()}, {"metaData": snap.metadata.to_dict()}]
    lines += [{"add": {**f.to_dict(), "dataChange": False}} for f in snap.all_files]
    name = "00000000000000000003.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json"
    with open(os.path.join(path, "_delta_log", name), "w") as fh:
        fh.write("\n".join(json.dumps(x) for x in lines) + "\n")
    for v in range(4):
        os.remove(os.path.join(path, "_delta_log", commit_name(v)))
    assert isolde_ids(path) == [0, 1, 2, 3] == rs_ids(path)


def test_a_parquet_v2_checkpoint_without_sidecars_is_read(tmp_path):
    """V2 spec, file actions inline in a UUID-named Parquet checkpoint (no sidecar)."""
    from isolde.executor.log.checkpoint import V2_CHECKPOINT_SCHEMA, checkpoint_bytes, checkpoint_table

    path = str(tmp_path / "t")
    log = make_table(path, 4, {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "100"})
    snap = log.update()
    table = checkpoint_table(snap.protocol, snap.metadata, (), (), snap.all_files, (), schema=V2_CHECKPOINT_SCHEMA,
                             leading=[("checkpointMetadata", {"version": 3, "tags": None})])
    name = "00000000000000000003.checkpoint.16ae953a-37a9-438e-8683-9a9a4a79a395.parquet"
    with open(os.path.join(path, "_delta_log", name), "wb") as fh:
        fh.write(checkpoint_bytes(table))
    for v in range(4):
        os.remove(os.path.join(path, "_delta_log", commit_name(v)))
    assert isolde_ids(path) == [0, 1, 2, 3] == rs_ids(path)


# --------------------------------------------------------------------------- log cleanup


def test_cleanup_deletes_expired_commits_and_checkpoints_below_the_cutoff_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    log = make_table(path, 10, {"delta.checkpointInterval": "4"})  # checkpoints at 4 and 8
    for v in range(10):
        with open(os.path.join(path, "_delta_log", f".{commit_name(v)}.crc"), "w") as fh:
            fh.write("x")  # Hadoop's checksum siblings go with their file
    with open(os.path.join(path, "_delta_log", f"{2:020d}.crc"), "w") as fh:
        fh.write("{}")  # a version checksum file
    age(path, *[commit_name(v) for v in range(0, 6)], f"{2:020d}.crc",
        "00000000000000000004.checkpoint.parquet")
    deleted = log.cleanup_expired_logs()
    # commits 0-5 are expired; the newest checkpoint at or below version 5 is 4: keep 4 on
    names = log_names(path)
    assert sorted(os.path.basename(p) for p in deleted) == sorted(
        [commit_name(v) for v in range(4)] + [f"{2:020d}.crc"])
    assert names[0] == "00000000000000000004.checkpoint.parquet"
    assert commit_name(4) in names and "00000000000000000008.checkpoint.parquet" in names
    hidden = [n for n in os.listdir(os.path.join(path, "_delta_log")) if n.startswith(".")]
    assert sorted(hidden) == sorted(f".{commit_name(v)}.crc" for v in range(4, 10))
    # every kept version still reads, in isolde and delta-rs; older ones fail clearly in both
    assert DeltaLog(path).earliest_available_version() == 4
    for v in (4, 5, 9):
        assert isolde_ids(path, v) == list(range(v + 1)) == rs_ids(path, v)
    with pytest.raises(VersionNotFoundError, match="earliest available version is 4"):
        DeltaLog(path).snapshot(3)
    with pytest.raises(Exception):
        DeltaTable(path, version=3).version()
    assert DeltaTable(path).version() == 9
    # history lists what is left
    assert [h["version"] for h in DeltaLog(path).history()] == list(range(9, 3, -1))


def test_nothing_is_deleted_within_retention_or_without_a_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    log = make_table(path, 6, {"delta.checkpointInterval": "4"})
    before = log_names(path)
    assert log.cleanup_expired_logs() == [] and log_names(path) == before  # all fresh
    age(path, commit_name(0), commit_name(1), commit_name(2))
    # expired commits, but no checkpoint at or below the newest expired one (2): keep everything
    assert log.cleanup_expired_logs() == [] and log_names(path) == before
    # a commit whose file time went backwards counts as later than its predecessor (Delta's rule)
    age(path, commit_name(3), "00000000000000000004.checkpoint.parquet")
    age(path, commit_name(4), days=40)
    age(path, commit_name(3), days=0)  # version 3 is fresh: 4 cannot be older than it
    assert log.cleanup_expired_logs() == []


def test_expired_log_cleanup_can_be_turned_off_and_retention_set(tmp_path):
    path = str(tmp_path / "t")
    log = make_table(path, 6, {"delta.checkpointInterval": "4", "delta.enableExpiredLogCleanup": "false"})
    age(path, *[commit_name(v) for v in range(6)])
    assert log.cleanup_expired_logs() == []
    path2 = str(tmp_path / "t2")
    log2 = make_table(path2, 6, {"delta.checkpointInterval": "4", "delta.logRetentionDuration": "interval 60 days"})
    age(path2, *[commit_name(v) for v in range(6)])  # 40 days: within 60
    assert log2.cleanup_expired_logs() == []
    age(path2, *[commit_name(v) for v in range(6)], days=70)
    assert len(log2.cleanup_expired_logs()) == 4


def test_the_post_commit_checkpoint_cleans_up(tmp_path):
    """The transaction's checkpoint (every delta.checkpointInterval commits) runs the cleanup."""
    path = str(tmp_path / "t")
    log = make_table(path, 5, {"delta.checkpointInterval": "4"})
    age(path, *[commit_name(v) for v in range(5)], "00000000000000000004.checkpoint.parquet")
    for v in range(5, 9):
        log.start_transaction().commit([write_file(path, [v])], "WRITE")  # checkpoint at 8
    assert log_names(path)[0] == "00000000000000000004.checkpoint.parquet"
    assert isolde_ids(path) == list(range(9)) == rs_ids(path)
    assert rs_ids(path, 4) == list(range(5))


def test_time_travel_by_timestamp_after_cleanup(tmp_path):
    path = str(tmp_path / "t")
    log = make_table(path, 10, {"delta.checkpointInterval": "4"})
    age(path, *[commit_name(v) for v in range(6)], "00000000000000000004.checkpoint.parquet")
    log.cleanup_expired_logs()
    log = DeltaLog(path)
    earliest = log.commit_timestamp(4)
    assert log.version_at_timestamp(earliest) == 4
    with pytest.raises(VersionNotFoundError, match="earliest available version 4"):
        log.version_at_timestamp(earliest - 1)


def test_cleanup_of_a_multi_part_checkpoint_table(tmp_path):
    """Delta's multi-part-checkpoint table (delta.checkpointInterval 1: a checkpoint after every commit)."""
    path = str(tmp_path / "t")
    shutil.copytree(os.path.join(ENGINES, "multi-part-checkpoint"), path)
    parts = [n for n in log_names(path) if ".checkpoint.0" in n]
    assert len(parts) == 2
    age(path, commit_name(0), commit_name(1), *parts)
    log = DeltaLog(path)
    log.start_transaction().commit([], "WRITE")  # version 2 + its checkpoint + cleanup
    # the newest expired commit is 1; the newest checkpoint at or below it is the multi-part one at 1
    assert log_names(path)[:3] == parts + [commit_name(1)]
    age(path, commit_name(2), "00000000000000000002.checkpoint.parquet")
    log.start_transaction().commit([], "WRITE")  # version 3: now the cutoff checkpoint is 2
    assert log_names(path)[0] == "00000000000000000002.checkpoint.parquet"
    assert not any(".checkpoint.0" in n for n in log_names(path))
    clear_checkpoint_cache()
    files = sorted(os.path.basename(f.path) for f in DeltaLog(path).update().all_files)
    assert files == sorted(os.path.basename(u) for u in DeltaTable(path).file_uris())
    assert DeltaTable(path, version=2).version() == 2


def test_cleanup_of_a_v2_table_keeps_referenced_sidecars_and_writes_a_compatibility_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    log = make_table(path, 10, {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "4"})
    old_sidecars = sidecar_names(path)
    assert len(old_sidecars) == 2  # for the checkpoints at 4 and 8
    at4 = next(n for n in old_sidecars if n.startswith(f"{4:020d}"))
    at8 = next(n for n in old_sidecars if n.startswith(f"{8:020d}"))
    # an orphan sidecar (a checkpoint that never got written), old and young
    for name, days in (("orphan-old.parquet", 40), ("orphan-young.parquet", 0)):
        shutil.copy(os.path.join(path, "_delta_log", "_sidecars", at4), os.path.join(path, "_delta_log", "_sidecars", name))
        age(path, os.path.join("_sidecars", name), days=days)
    top4 = next(n for n in log_names(path) if n.startswith(f"{4:020d}.checkpoint."))
    age(path, *[commit_name(v) for v in range(10)], top4, os.path.join("_sidecars", at4))
    age(path, *[n for n in log_names(path) if n.startswith(f"{8:020d}.checkpoint.")], os.path.join("_sidecars", at8))
    deleted = sorted(os.path.basename(p) for p in log.cleanup_expired_logs())
    # the newest expired commit is 9; the cutoff checkpoint is 8
    assert top4 in deleted and at4 in deleted and "orphan-old.parquet" in deleted
    assert sidecar_names(path) == sorted([at8, "orphan-young.parquet"])
    names = log_names(path)
    assert names[0].startswith(f"{8:020d}.checkpoint.")
    # a classic-named compatibility copy of the UUID-named checkpoint at 8
    assert "00000000000000000008.checkpoint.parquet" in names
    compat = pq.read_table(os.path.join(path, "_delta_log", "00000000000000000008.checkpoint.parquet"))
    assert "checkpointMetadata" in compat.column_names and compat.column("sidecar").null_count < compat.num_rows
    assert isolde_ids(path) == list(range(10)) == rs_ids(path)
    assert rs_ids(path, 8) == list(range(9)) == isolde_ids(path, 8)
    with pytest.raises(VersionNotFoundError, match="earliest available version is 8"):
        DeltaLog(path).snapshot(7)


# --------------------------------------------------------------------------- vacuumProtocolCheck


class _Handle:
    def __init__(self, path):
        self.path = path
        self.log = DeltaLog(path)
        self.name = os.path.basename(path)


class _Ctx:
    conf = {}


def test_vacuum_checks_the_read_and_write_protocol(tmp_path):
    from isolde.executor.jobs.vacuum import plan_vacuum

    path = str(tmp_path / "t")
    shutil.copytree(os.path.join(ENGINES, "basic-with-vacuum-protocol-check-feature"), path)
    snap = DeltaLog(path).update()
    assert "vacuumProtocolCheck" in snap.protocol.reader_features
    candidates, *_ = plan_vacuum(_Ctx(), _Handle(path))  # isolde reads and writes every listed feature
    assert candidates == []
    # a writer feature isolde lacks: VACUUM refuses, even a DRY RUN (it plans the same way)
    p = snap.protocol
    bad = Protocol(3, 7, list(p.reader_features), [*p.writer_features, "madeUpWriterFeature"])
    meta = snap.metadata
    conf = dict(meta.configuration)
    line = serialize_commit([CommitInfo(timestamp=now_ms(), operation="SET TBLPROPERTIES"), bad,
                             Metadata(meta.schema_string, meta.partition_columns, conf, id=meta.id)])
    with open(os.path.join(path, "_delta_log", commit_name(snap.version + 1)), "wb") as fh:
        fh.write(line)
    with pytest.raises(UnsupportedFeatureError, match="madeUpWriterFeature"):
        plan_vacuum(_Ctx(), _Handle(path))


# --------------------------------------------------------------------------- in-commit timestamps


def test_ict_engine_table_history_and_time_travel_use_in_commit_timestamps():
    log = DeltaLog(os.path.join(ENGINES, "cdc_ict_table"))
    stamps = {}
    for v in range(4):
        line = open(os.path.join(log.log_path, commit_name(v))).readline()
        stamps[v] = json.loads(line)["commitInfo"]["inCommitTimestamp"]
    history = {h["version"]: h["timestamp"] for h in log.history()}
    assert history == stamps  # version 1's inCommitTimestamp differs from its commitInfo.timestamp
    assert log.commit_timestamp(1) == stamps[1]
    assert log.version_at_timestamp(stamps[2]) == 2
    assert log.version_at_timestamp(stamps[3] - 1) == 2
    rs = {h["version"]: h["timestamp"] for h in DeltaTable(log.table_path).history()}
    assert rs[2] == stamps[2] and rs[3] == stamps[3]


def _write(log: DeltaLog, version: int, info: CommitInfo, actions: list) -> None:
    """What OptimisticTransaction.next_attempt and _write_commit do per attempt, with the ICT call."""
    actions = log.stamp_in_commit_timestamp(info, actions, version)
    log.store.put_if_absent(log.commit_path(version), serialize_commit([info, *actions]))


def test_in_commit_timestamps_written_through_the_log_layer_read_by_delta_rs(tmp_path):
    path = str(tmp_path / "t")
    log = make_table(path, 3, {})  # versions 0-2 without in-commit timestamps
    age(path, commit_name(0), days=3)
    age(path, commit_name(1), days=2)
    age(path, commit_name(2), days=1)
    mtime2 = log.store.status(log.commit_path(2)).modification_time
    snap = log.update()
    # version 3 turns them on (ALTER TABLE SET TBLPROPERTIES delta.enableInCommitTimestamps = true)
    meta = snap.metadata
    on = Metadata(meta.schema_string, meta.partition_columns,
                  {**meta.configuration, "delta.enableInCommitTimestamps": "true"}, id=meta.id,
                  created_time=meta.created_time)
    protocol = Protocol(1, 7, None, ["appendOnly", "inCommitTimestamp", "invariants"])
    info = CommitInfo(timestamp=now_ms(), operation="SET TBLPROPERTIES")
    _write(log, 3, info, [protocol, on])
    first = json.loads(open(log.commit_path(3)).readline())
    assert list(first) == ["commitInfo"]  # commitInfo is the first action
    ict3 = first["commitInfo"]["inCommitTimestamp"]
    assert ict3 > mtime2
    enabled = log.update().metadata.configuration
    assert enabled["delta.inCommitTimestampEnablementVersion"] == "3"
    assert enabled["delta.inCommitTimestampEnablementTimestamp"] == str(ict3)
    # version 4: a clock behind the previous commit still gets a larger timestamp
    info4 = CommitInfo(timestamp=ict3 - 10_000, operation="WRITE")
    _write(log, 4, info4, [write_file(path, [3])])
    assert info4.extra["inCommitTimestamp"] == ict3 + 1 == info4.timestamp
    log = DeltaLog(path)
    history = {h["version"]: h["timestamp"] for h in log.history()}
    assert history[4] == ict3 + 1 and history[3] == ict3
    assert history[2] == mtime2  # before enablement: the file time
    # TIMESTAMP AS OF: at/after the enablement timestamp only versions >= 3 count, before it only < 3
    assert log.version_at_timestamp(ict3) == 3
    assert log.version_at_timestamp(ict3 + 1) == 4
    assert log.version_at_timestamp(ict3 - 1) == 2
    assert log.version_at_timestamp(mtime2 - 1) == 1
    rs = DeltaTable(path)
    assert rs.version() == 4
    rs_history = {h["version"]: h for h in rs.history()}
    assert rs_history[4]["inCommitTimestamp"] == ict3 + 1
    assert rs_ids(path) == [0, 1, 2, 3]
    # the value to write never goes backwards, even when the previous commit came from the future
    info5 = CommitInfo(timestamp=now_ms(), operation="WRITE")
    assert log.stamp_in_commit_timestamp(info5, [], 5) == [] and info5.extra["inCommitTimestamp"] > ict3


def test_stamping_is_a_no_op_without_the_feature(table_dir):
    log = create_table(table_dir, files=[add("a")])
    info = CommitInfo(timestamp=123, operation="WRITE")
    actions = [add("b")]
    assert log.stamp_in_commit_timestamp(info, actions, 1) is actions
    assert "inCommitTimestamp" not in info.extra and info.timestamp == 123


def test_ict_on_from_creation_needs_no_enablement_properties(tmp_path):
    path = str(tmp_path / "t")
    log = DeltaLog(path)
    os.makedirs(log.log_path)
    info = CommitInfo(timestamp=now_ms(), operation="CREATE TABLE")
    meta = Metadata(SCHEMA, ("p",), {"delta.enableInCommitTimestamps": "true"})
    _write(log, 0, info, [Protocol(1, 7, None, ["inCommitTimestamp"]), meta])
    assert "delta.inCommitTimestampEnablementVersion" not in log.update().metadata.configuration
    assert log.commit_timestamp(0) == info.extra["inCommitTimestamp"]
    assert DeltaTable(path).version() == 0


def test_cleanup_removes_log_compactions_up_to_the_cutoff_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    log = make_table(path, 10, {"delta.checkpointInterval": "4"})
    for a, b in ((1, 3), (2, 6), (5, 7)):
        with open(os.path.join(path, "_delta_log", f"{a:020d}.{b:020d}.compacted.json"), "w") as fh:
            fh.write("")
    age(path, *[commit_name(v) for v in range(6)], "00000000000000000004.checkpoint.parquet")
    deleted = {os.path.basename(p) for p in log.cleanup_expired_logs()}
    # PROTOCOL.md: every compaction that starts at or before the cutoff checkpoint (4) goes
    assert f"{1:020d}.{3:020d}.compacted.json" in deleted and f"{2:020d}.{6:020d}.compacted.json" in deleted
    assert f"{5:020d}.{7:020d}.compacted.json" in log_names(path)


def test_a_hole_in_the_log_names_the_earliest_available_version(tmp_path):
    path = str(tmp_path / "t")
    make_table(path, 10, {"delta.checkpointInterval": "4"})
    for v in range(0, 6):
        os.remove(os.path.join(path, "_delta_log", commit_name(v)))
    os.remove(os.path.join(path, "_delta_log", "00000000000000000004.checkpoint.parquet"))
    log = DeltaLog(path)
    assert log.earliest_available_version() == 8
    with pytest.raises(VersionNotFoundError, match="earliest available version is 8"):
        log.snapshot(6)
    assert log.snapshot(8).version == 8
