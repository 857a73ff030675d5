"""Many processes racing on one log, and writers killed with SIGKILL at random moments."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import signal
import time

import pytest

from isolde.errors import CONFLICT_EXCEPTIONS
from isolde.executor.log import DeltaLog
from isolde.executor.log.actions import AddFile, CommitInfo, RemoveFile, parse_commit

from tests.helpers.log_tables import create_table, schema_string

SCHEMA = schema_string(id="long", p="string")

PROCESSES = 4
COMMITS_PER_PROCESS = 50


def _race_worker(path: str, worker: int, commits: int, seed: int) -> list[tuple]:
    """Mix blind appends and read-modify-write commits; report (txn id, version | error class)."""
    rng = random.Random(seed)
    log = DeltaLog.for_table(path)
    out = []
    for i in range(commits):
        txn = log.start_transaction()
        p = rng.choice("ab")
        new = AddFile(f"p={p}/w{worker}-{i}.parquet", {"p": p}, 10, 1)
        if rng.random() < 0.5:
            actions, op = [new], "WRITE"
        else:
            files = txn.filter_files(f"p = '{p}'")
            actions = [rng.choice(files).remove(), new] if files else [new]
            op = "UPDATE"
        try:
            out.append((txn.txn_id, op, txn.commit(actions, op)))
        except CONFLICT_EXCEPTIONS as exc:
            out.append((txn.txn_id, op, type(exc).__name__))
    return out


@pytest.mark.slow
def test_processes_race_on_one_table(tmp_path):
    import deltalake
    path = str(tmp_path / "race")
    create_table(path, ["p"], files=[AddFile("p=a/seed.parquet", {"p": "a"}, 10, 1)], schema=SCHEMA)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(PROCESSES) as pool:
        results = pool.starmap(
            _race_worker, [(path, w, COMMITS_PER_PROCESS, 1000 + w) for w in range(PROCESSES)]
        )
    outcomes = [r for rs in results for r in rs]
    assert len(outcomes) == PROCESSES * COMMITS_PER_PROCESS
    committed = {txn_id: v for txn_id, _, v in outcomes if isinstance(v, int)}
    refused = [(txn_id, v) for txn_id, _, v in outcomes if not isinstance(v, int)]
    assert all(name in {c.__name__ for c in CONFLICT_EXCEPTIONS} for _, name in refused)
    assert all(op == "UPDATE" for _, op, v in outcomes if not isinstance(v, int))  # blind appends never lose
    latest = DeltaLog.for_table(path).snapshot().version
    assert latest == len(committed)  # versions 1..latest are exactly the successful commits
    assert sorted(committed.values()) == list(range(1, latest + 1))
    # every version holds exactly the transaction that was told it got that version
    live = {"p=a/seed.parquet"}
    for v in range(1, latest + 1):
        actions = DeltaLog.for_table(path).read_commit(v)
        info = next(a for a in actions if isinstance(a, CommitInfo))
        assert committed[info.txn_id] == v
        for a in actions:  # and the history is serial: nothing removes a file that is gone
            if isinstance(a, RemoveFile):
                assert a.path in live
                live.discard(a.path)
            elif isinstance(a, AddFile):
                live.add(a.path)
    assert {a.path for a in DeltaLog.for_table(path).snapshot().all_files} == live
    dt = deltalake.DeltaTable(path)
    assert dt.version() == latest
    assert len(dt.file_uris()) == len(live)


def _crash_writer(path: str, seed: int, ready) -> None:
    """Commit forever (appends and read-modify-writes); the parent kills it with SIGKILL."""
    rng = random.Random(seed)
    log = DeltaLog.for_table(path)
    log.snapshot()
    ready.set()
    i = 0
    while True:
        i += 1
        txn = log.start_transaction()
        p = rng.choice("ab")
        actions = [AddFile(f"p={p}/s{seed}-{i}.parquet", {"p": p}, 10, 1)]
        if rng.random() < 0.3:
            files = txn.filter_files(f"p = '{p}'")
            if files:
                actions.append(files[0].remove())
        try:
            txn.commit(actions, "WRITE")
        except CONFLICT_EXCEPTIONS:
            pass


@pytest.mark.slow
def test_writers_killed_at_random_moments(tmp_path):
    path = str(tmp_path / "crash")
    create_table(path, ["p"], configuration={"delta.checkpointInterval": "3"}, schema=SCHEMA)
    rng = random.Random(7)
    seen: dict[str, str] = {}  # committed file name -> digest: committed versions never change
    # fork: writers start in milliseconds with everything imported, so many kills fit in seconds
    ctx = multiprocessing.get_context("fork")
    for round_ in range(25):
        ready = [ctx.Event() for _ in range(3)]
        writers = [ctx.Process(target=_crash_writer, args=(path, round_ * 10 + w, ready[w]), daemon=True)
                   for w in range(3)]
        for proc in writers:
            proc.start()
        for event in ready:
            assert event.wait(30)
        time.sleep(rng.uniform(0.0, 0.3))
        for proc in writers:
            os.kill(proc.pid, signal.SIGKILL)
        for proc in writers:
            proc.join()
            assert proc.exitcode == -signal.SIGKILL
        log_dir = os.path.join(path, "_delta_log")
        snap = DeltaLog.for_table(path).snapshot()  # always loads
        commits = sorted(n for n in os.listdir(log_dir) if n.endswith(".json") and not n.startswith("."))
        assert [int(n[:20]) for n in commits] == list(range(snap.version + 1))  # contiguous, no torn tail
        for name in commits:
            body = open(os.path.join(log_dir, name), "rb").read()
            actions = parse_commit(body)  # every commit parses whole
            assert isinstance(actions[0], CommitInfo) and body.endswith(b"\n")
            digest = hashlib.sha256(body).hexdigest()
            assert seen.setdefault(name, digest) == digest
        if os.path.exists(os.path.join(log_dir, "_last_checkpoint")):
            json.load(open(os.path.join(log_dir, "_last_checkpoint")))
        # replay from checkpoints agrees with replay from JSON alone
        full = {a.path for a in snap.all_files}
        from_json = set()
        for v in range(snap.version + 1):
            for a in DeltaLog.for_table(path).read_commit(v):
                if isinstance(a, AddFile):
                    from_json.add(a.path)
                elif isinstance(a, RemoveFile):
                    from_json.discard(a.path)
        assert full == from_json
    assert DeltaLog.for_table(path).snapshot().version > 50  # the writers did make progress
