"""The commit coordinator (executor/log/coordinator.py) at the log level, without Spark: commits
of opted-in tables are decided as numbered entries and published to the tables' logs; a
decided entry is rolled forward by the next reader; a transaction over several tables is one
entry, all or nothing; a read point reads every table at one sequence number; racing writers
commit every change exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from isolde.errors import (
    ConcurrentDeleteReadException,
    InternalError,
    InvalidPropertyError,
    MetadataChangedException,
)
from isolde.executor.log import DeltaLog
from isolde.executor.log import coordinator as C
from isolde.executor.log.actions import Metadata, parse_commit
from isolde.executor.txn.coordinated_commit import commit_together, coordinator_of
from tests.helpers.log_tables import add, create_table


class Crash(BaseException):
    """Stands for the writer dying right after its decision (not an Exception: nothing catches it)."""


@pytest.fixture
def coordinator_dir(tmp_path):
    location = str(tmp_path / "_isolde_coordinator")
    yield location
    C.Coordinator._instances.pop(C.normalize_location(location), None)
    C.AFTER_DECIDE = None


def _coordinated(path, location, files=()):
    return create_table(path, configuration={C.COORDINATED_PROPERTY: "true", C.LOCATION_PROPERTY: location},
                        files=files)


def _entries(location):
    folder = os.path.join(location, "log")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def _commit_files(path):
    return sorted(n for n in os.listdir(os.path.join(path, "_delta_log")) if n.endswith(".json"))


def _seq_of(log, version):
    return C.commit_seq(log._read_commit_bytes(version))


_DIE_AFTER_DECIDING = """
import os, sys
from isolde.executor.log import DeltaLog
from isolde.executor.log import coordinator as C
from tests.helpers.log_tables import add

C.AFTER_DECIDE = lambda seq: os._exit(9)
DeltaLog.for_table(sys.argv[1]).start_transaction().commit([add(sys.argv[2])])
"""


def _die_after_deciding(path, file_name):
    """A writer process killed between its decision and the publication."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    done = subprocess.run([sys.executable, "-c", _DIE_AFTER_DECIDING, path, file_name], cwd=root, timeout=120,
                          capture_output=True, text=True)
    assert done.returncode == 9, done.stderr


def _forget(location):
    """A fresh process's view: no in-memory knowledge of what was published."""
    C.Coordinator._instances.pop(C.normalize_location(location), None)


def test_commits_after_the_opt_in_are_decided_then_published(tmp_path, coordinator_dir):
    path = str(tmp_path / "a")
    log = _coordinated(path, coordinator_dir, [add("a.parquet")])  # version 0: written directly
    assert _entries(coordinator_dir) == [] and "isoldeCoordinatedCommits" in log.update().protocol.writer_features
    txn = log.start_transaction()
    assert txn.commit([add("b.parquet")]) == 1
    assert _entries(coordinator_dir) == ["00000000000000000001.json"]
    entry = json.loads(open(os.path.join(coordinator_dir, "log", _entries(coordinator_dir)[0])).read())
    assert [(c["log"], c["version"]) for c in entry["commits"]] == [(log.log_path, 1)]
    # the published commit is the entry's body, stamped with its sequence number
    assert log._read_commit_bytes(1).decode() == entry["commits"][0]["body"] and _seq_of(log, 1) == 1
    from deltalake import DeltaTable

    assert DeltaTable(path).version() == 1 and sorted(DeltaTable(path).file_uris()) == sorted(
        os.path.join(path, p) for p in ("a.parquet", "b.parquet"))


def test_a_decided_entry_is_rolled_forward_by_the_next_reader(tmp_path, coordinator_dir):
    """The writer dies between its decision and the publication: the entry is the commit. No
    engine sees it in ``_delta_log`` yet; the next isolde reader publishes it."""
    path = str(tmp_path / "a")
    log = _coordinated(path, coordinator_dir, [add("a.parquet")])

    _die_after_deciding(path, "b.parquet")
    assert _entries(coordinator_dir) == ["00000000000000000001.json"] and _commit_files(path) == [
        "00000000000000000000.json"]
    _forget(coordinator_dir)
    fresh = DeltaLog.for_table(path)
    assert fresh.update().version == 1 and sorted(f.path for f in fresh.update().all_files) == ["a.parquet",
                                                                                                  "b.parquet"]
    assert _commit_files(path)[-1] == "00000000000000000001.json"
    # and the next writer commits after it: entry 2, version 2
    assert fresh.start_transaction().commit([add("c.parquet")]) == 2 and _seq_of(fresh, 2) == 2


def test_a_loser_catches_up_and_commits_at_the_next_version(tmp_path, coordinator_dir):
    path = str(tmp_path / "a")
    log = _coordinated(path, coordinator_dir, [add("a.parquet")])
    first, second = log.start_transaction(), log.start_transaction()
    assert first.commit([add("b.parquet")]) == 1
    assert second.commit([add("c.parquet")]) == 2  # two blind appends: no conflict
    assert second.attempts == 2 and second.winning_versions == [1]
    assert _entries(coordinator_dir) == ["00000000000000000001.json", "00000000000000000002.json"]


def test_several_tables_commit_as_one_entry(tmp_path, coordinator_dir):
    a = _coordinated(str(tmp_path / "a"), coordinator_dir, [add("a.parquet")])
    b = _coordinated(str(tmp_path / "b"), coordinator_dir, [add("b.parquet")])
    ta, tb = a.start_transaction(), b.start_transaction()
    prepared = [(None, ta, [add("a2.parquet")], "WRITE", {}, {}), (None, tb, [add("b2.parquet")], "WRITE", {}, {})]
    versions = commit_together(coordinator_of([ta, tb]), prepared)
    assert versions == {a.table_path: 1, b.table_path: 1}
    assert _entries(coordinator_dir) == ["00000000000000000001.json"]
    assert _seq_of(a, 1) == _seq_of(b, 1) == 1


def test_a_conflict_on_one_table_commits_none(tmp_path, coordinator_dir):
    """A transaction over a and b whose read of b a winner invalidated: nothing reaches a either."""
    a = _coordinated(str(tmp_path / "a"), coordinator_dir, [add("a.parquet")])
    b = _coordinated(str(tmp_path / "b"), coordinator_dir, [add("b.parquet")])
    ta, tb = a.start_transaction(), b.start_transaction()
    tb.read_whole_table()
    winner = b.start_transaction()
    winner.commit([b.update().all_files[0].remove()], "DELETE")  # entry 1: b version 1 deletes what tb read
    prepared = [(None, ta, [add("a2.parquet")], "WRITE", {}, {}), (None, tb, [add("b2.parquet")], "WRITE", {}, {})]
    with pytest.raises(ConcurrentDeleteReadException) as info:
        commit_together(coordinator_of([ta, tb]), prepared)
    assert info.value.winning_version == 1
    assert a.update().version == 0 and b.update().version == 1
    assert _entries(coordinator_dir) == ["00000000000000000001.json"]


def test_validation_runs_with_every_earlier_entry_published_just_before_the_decision(tmp_path, coordinator_dir):
    """What ``validate`` sees is everything decided before the entry it guards."""
    a = _coordinated(str(tmp_path / "a"), coordinator_dir, [add("a.parquet")])
    b = _coordinated(str(tmp_path / "b"), coordinator_dir, [add("b.parquet")])
    seen = []
    ta = a.start_transaction()
    ta.begin_commit([add("a2.parquet")])
    version, body = ta.next_attempt()
    b.start_transaction().commit([add("b2.parquet")])  # decided before ta's entry
    coordinator = coordinator_of([ta])
    coordinator.decide([C.CoordinatedCommit(a.log_path, version, body)],
                       validate=lambda: seen.append(DeltaLog.for_table(b.table_path).update().version))
    assert seen == [1] and _entries(coordinator_dir)[-1] == "00000000000000000002.json"


def test_a_read_point_reads_every_table_at_one_sequence_number(tmp_path, coordinator_dir):
    a = _coordinated(str(tmp_path / "a"), coordinator_dir, [add("a.parquet")])
    b = _coordinated(str(tmp_path / "b"), coordinator_dir, [add("b.parquet")])
    a.start_transaction().commit([add("a1.parquet")])  # entry 1
    token = C.READ_POINT.set({})
    try:
        assert DeltaLog.for_table(a.table_path).update().version == 1  # fixes the read point at seq 1
        ta, tb = a.start_transaction(), b.start_transaction()
        commit_together(coordinator_of([ta, tb]), [(None, ta, [add("a2.parquet")], "WRITE", {}, {}),
                                                   (None, tb, [add("b2.parquet")], "WRITE", {}, {})])  # entry 2
        assert DeltaLog.for_table(b.table_path).update().version == 0  # b as of seq 1: without entry 2
        assert DeltaLog.for_table(a.table_path).update().version == 1
    finally:
        C.READ_POINT.reset(token)
    assert DeltaLog.for_table(b.table_path).update().version == 1 and a.update().version == 2


def test_a_writer_that_read_before_the_opt_in_fails_on_the_metadata_change(tmp_path, coordinator_dir):
    path = str(tmp_path / "a")
    log = create_table(path, files=[add("a.parquet")])
    stale = log.start_transaction()
    stale.read_whole_table()
    opt_in = log.start_transaction()
    metadata = log.update().metadata
    opt_in.commit([Metadata(metadata.schema_string, metadata.partition_columns,
                            {**metadata.configuration, C.COORDINATED_PROPERTY: "true",
                             C.LOCATION_PROPERTY: coordinator_dir}, id=metadata.id)], "SET TBLPROPERTIES")
    with pytest.raises(MetadataChangedException):
        stale.commit([add("b.parquet")])
    assert log.update().version == 1 and _entries(coordinator_dir) == []
    assert log.start_transaction().commit([add("c.parquet")]) == 2 and _entries(coordinator_dir) == [
        "00000000000000000001.json"]


def test_a_commit_written_around_the_coordinator_is_refused_loudly(tmp_path, coordinator_dir):
    """A decided entry whose version another writer took directly: the log is inconsistent, and
    every isolde access says so instead of reading a forked table."""
    path = str(tmp_path / "a")
    log = _coordinated(path, coordinator_dir, [add("a.parquet")])
    _die_after_deciding(path, "b.parquet")
    with open(log.commit_path(1), "w") as f:  # a writer that ignored the table's writer feature
        f.write(json.dumps({"add": {"path": "rogue.parquet", "partitionValues": {}, "size": 1,
                                    "modificationTime": 1, "dataChange": True}}) + "\n")
    _forget(coordinator_dir)
    with pytest.raises(InternalError, match="without its coordinator"):
        DeltaLog.for_table(path).update()


def test_opting_in_needs_a_coordinator_location(tmp_path):
    with pytest.raises(InvalidPropertyError, match="isolde.coordinator"):
        create_table(str(tmp_path / "a"), configuration={C.COORDINATED_PROPERTY: "true"})
    token = C.DEFAULT_LOCATION.set(str(tmp_path / "wh" / C.FOLDER))
    try:
        log = create_table(str(tmp_path / "b"), configuration={C.COORDINATED_PROPERTY: "TRUE"})
    finally:
        C.DEFAULT_LOCATION.reset(token)
    conf = log.update().configuration
    assert conf[C.COORDINATED_PROPERTY] == "true" and conf[C.LOCATION_PROPERTY] == str(tmp_path / "wh" / C.FOLDER)
    with pytest.raises(InvalidPropertyError, match="true or false"):
        create_table(str(tmp_path / "c"), configuration={C.COORDINATED_PROPERTY: "yes"})


def test_racing_writers_commit_every_change_exactly_once(tmp_path, coordinator_dir):
    """Threads committing blind appends to two tables, alone and together: each table's
    versions are contiguous, every commit is one entry, each entry's commits are in the logs
    with its sequence number, and the sequence numbers rise with the versions."""
    logs = [_coordinated(str(tmp_path / n), coordinator_dir) for n in ("a", "b")]
    done, errors = [], []

    def writer(w):
        try:
            for i in range(12):
                if i % 3 == 2:  # both tables in one entry
                    ta, tb = (DeltaLog.for_table(l.table_path).start_transaction() for l in logs)
                    commit_together(coordinator_of([ta, tb]),
                                    [(None, ta, [add(f"w{w}-{i}-a.parquet")], "WRITE", {}, {}),
                                     (None, tb, [add(f"w{w}-{i}-b.parquet")], "WRITE", {}, {})])
                    done.append(("a", w, i)); done.append(("b", w, i))
                else:
                    name = "ab"[i % 2]
                    log = DeltaLog.for_table(logs[i % 2].table_path)
                    log.start_transaction().commit([add(f"w{w}-{i}-{name}.parquet")])
                    done.append((name, w, i))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    entries = _entries(coordinator_dir)
    assert len(entries) == 4 * 12 and entries[-1] == f"{48:020d}.json"
    for name, log in zip("ab", logs):
        snap = DeltaLog.for_table(log.table_path).update()
        files = sorted(f.path for f in snap.all_files)
        assert files == sorted(f"w{w}-{i}-{name}.parquet" for n, w, i in done if n == name)
        assert _commit_files(log.table_path) == [f"{v:020d}.json" for v in range(snap.version + 1)]
        seqs = [_seq_of(log, v) for v in range(1, snap.version + 1)]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    for name in entries:
        entry = json.loads(open(os.path.join(coordinator_dir, "log", name)).read())
        for commit in entry["commits"]:
            published = open(os.path.join(commit["log"], f"{commit['version']:020d}.json")).read()
            assert published == commit["body"]
            assert [type(a).__name__ for a in parse_commit(published)][0] == "CommitInfo"


def test_stamp_and_read_back_the_sequence_number():
    body = b'{"commitInfo":{"operation":"WRITE"}}\n{"add":{"path":"a"}}\n'
    stamped = C.stamp(body, 42)
    assert C.commit_seq(stamped) == 42 and stamped.endswith(b'{"add":{"path":"a"}}\n')
    assert C.commit_seq(body) is None
    with pytest.raises(InternalError):
        C.stamp(b'{"add":{"path":"a"}}\n', 1)


def test_an_error_after_the_decision_keeps_the_commit(tmp_path, coordinator_dir):
    """The entry was decided, then the writer's thread got an error (here: the crash hook raising
    in-process): the commit stands, counts as committed, and is published; nothing is discarded."""
    a = _coordinated(str(tmp_path / "a"), coordinator_dir, [add("a.parquet")])
    b = _coordinated(str(tmp_path / "b"), coordinator_dir, [add("b.parquet")])
    ta, tb = a.start_transaction(), b.start_transaction()
    C.AFTER_DECIDE = lambda seq: (_ for _ in ()).throw(Crash(seq))
    with pytest.raises(Crash):
        commit_together(coordinator_of([ta, tb]), [(None, ta, [add("a2.parquet")], "WRITE", {}, {}),
                                                   (None, tb, [add("b2.parquet")], "WRITE", {}, {})])
    C.AFTER_DECIDE = None
    assert ta.committed_version == 1 and tb.committed_version == 1
    assert _commit_files(a.table_path)[-1] == _commit_files(b.table_path)[-1] == "00000000000000000001.json"
