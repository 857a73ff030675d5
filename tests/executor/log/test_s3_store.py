"""S3LogStore against a real S3-compatible server: moto's server mode on 127.0.0.1.

The LogStore contract (conditional PUT refuses an existing key with FileExistsError, ordered
listing, read after write), a table committed through DeltaLog on ``s3://``, threads and
processes racing on one S3 table, writers SIGKILLed mid-commit, and delta-rs reading what isolde
committed to the bucket.

The server (``tests/helpers/s3_server.py``) serialises moto's PutObject handler, which checks
``If-None-Match: *`` without a lock; ``test_moto_enforces_if_none_match`` checks the 412 with
plain boto3.
"""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
import random
import signal
import threading
import time
import uuid

import pytest

import boto3  # noqa: E402  (test dependencies: a missing install must fail, not skip)
import moto.server  # noqa: E402,F401

from isolde.errors import CONFLICT_EXCEPTIONS  # noqa: E402
from isolde.executor.log import DeltaLog  # noqa: E402
from isolde.executor.log.actions import AddFile, CommitInfo, RemoveFile, parse_commit  # noqa: E402
from isolde.executor.log.s3_store import S3LogStore, default_s3_store, normalize_s3_uri  # noqa: E402
from isolde.executor.log.store import FileStatus, LocalLogStore, store_for_path  # noqa: E402

from tests.helpers.log_tables import add, create_table, schema_string  # noqa: E402
from tests.helpers.s3_server import moto_s3  # noqa: E402
from .test_race_and_crash import _crash_writer, _race_worker  # noqa: E402

BUCKET = "isolde-test"
SCHEMA = schema_string(id="long", p="string")


@pytest.fixture(scope="module")
def s3_env():
    """A moto S3 server on a free port of 127.0.0.1, the AWS environment pointing at it, a bucket."""
    with moto_s3(BUCKET) as env:
        yield env


@pytest.fixture
def store(s3_env) -> S3LogStore:
    return default_s3_store()


@pytest.fixture
def s3_path(s3_env) -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/t"


def _client(env):
    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1")


# ---------------------------------------------------------------------------- the LogStore contract
def test_moto_enforces_if_none_match(s3_env):
    """Plain boto3, no isolde: the server refuses a conditional PUT on an existing key with 412."""
    from botocore.exceptions import ClientError

    client = _client(s3_env)
    key = f"raw/{uuid.uuid4().hex}"
    client.put_object(Bucket=BUCKET, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=BUCKET, Key=key, Body=b"second", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"first"


def test_put_if_absent_refuses_an_existing_key(store, s3_path):
    path = f"{s3_path}/_delta_log/{0:020d}.json"
    store.put_if_absent(path, b"one\n")
    with pytest.raises(FileExistsError):  # what LocalLogStore raises; the transaction retries on it
        store.put_if_absent(path, b"two\n")
    with pytest.raises(FileExistsError):  # even with the same bytes: the key exists
        store.put_if_absent(path, b"one\n")
    assert store.read(path) == b"one\n"  # read after write, and the loser changed nothing
    store.write(path, b"three\n")  # a plain write replaces (checkpoints, _last_checkpoint)
    assert store.read(path) == b"three\n"


def test_read_exists_status_delete(store, s3_path):
    path = f"{s3_path}/_delta_log/_last_checkpoint"
    with pytest.raises(FileNotFoundError):
        store.read(path)
    with pytest.raises(FileNotFoundError):
        store.status(path)
    assert not store.exists(path)
    assert store.delete(path) is False
    before = int(time.time() * 1000)
    store.write(path, b"{}")
    assert store.exists(path)
    st = store.status(path)
    assert st.path == path and st.size == 2 and abs(st.modification_time - before) < 60_000
    ident = store.identity(path)
    store.write(path, b'{"version": 1}')
    assert store.identity(path) != ident  # replaced: caches keyed by identity see it
    assert store.delete(path) is True
    assert not store.exists(path)
    with pytest.raises(FileNotFoundError):
        store.read(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/t/_delta_log/x")


def test_list_from_is_ordered_and_starts_at_the_name(store, s3_path):
    log = f"{s3_path}/_delta_log"
    names = [f"{v:020d}.json" for v in (0, 1, 2, 9, 10, 11, 100)]
    names += [f"{10:020d}.checkpoint.parquet", "_last_checkpoint", f"{5:020d}.crc"]
    for name in random.Random(3).sample(names, len(names)):
        store.write(f"{log}/{name}", name.encode())
    store.write(f"{log}/_sidecars/{1:020d}.x.parquet", b"s")  # a "subdirectory": not listed
    store.write(f"{log}/.{1:020d}.json.tmp", b"h")  # hidden, as LocalLogStore hides them
    store.write(f"{s3_path}/_delta_log_other/{0:020d}.json", b"o")  # a sibling sharing the prefix
    listed = store.list_from(f"{log}/{0:020d}")
    assert [s.path.rsplit("/", 1)[1] for s in listed] == sorted(names)
    assert all(isinstance(s, FileStatus) and s.size == len(s.path.rsplit("/", 1)[1]) for s in listed)
    start = f"{10:020d}.json"
    assert [s.path.rsplit("/", 1)[1] for s in store.list_from(f"{log}/{start}")] == sorted(
        n for n in names if n >= start)
    assert [s.path.rsplit("/", 1)[1] for s in store.list_from(f"{log}/{10:020d}")] == sorted(
        n for n in names if n >= f"{10:020d}")
    assert store.list_from(f"{s3_path}/nothing/{0:020d}") == []
    # list after write: a new commit is listed at once (S3 is strongly consistent)
    store.put_if_absent(f"{log}/{101:020d}.json", b"x")
    assert store.list_from(f"{log}/{101:020d}")[0].path == f"{log}/{101:020d}.json"


def test_listing_spans_pages(store, s3_path):
    log = f"{s3_path}/_delta_log"
    paged = S3LogStore(store.client)
    paged.list_page_size = 4  # ListObjectsV2 pages of 4 keys (1000 on S3)
    for v in range(15):
        store.write(f"{log}/{v:020d}.json", b"")
    listed = [s.path.rsplit("/", 1)[1] for s in paged.list_from(f"{log}/{5:020d}.json")]
    assert listed == [f"{v:020d}.json" for v in range(5, 15)]


def test_a_conditional_put_whose_response_was_lost(store, s3_path, monkeypatch):
    """The PUT created the object but the answer never came: the retry gets a 412 for our own
    object, and the store must report success, not a lost race (and a lost race stays lost)."""
    from botocore.exceptions import ConnectionClosedError

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    real = client.put_object
    calls = []
    mode = {"apply_first": True}

    def flaky(**kwargs):
        calls.append(kwargs["Key"])
        if len(calls) == 1:
            if mode["apply_first"]:
                real(**kwargs)  # the server applied it; the answer is lost
            raise ConnectionClosedError(endpoint_url="http://moto")
        return real(**kwargs)

    mine = S3LogStore(client)
    monkeypatch.setattr(client, "put_object", flaky)
    path = f"{s3_path}/_delta_log/{0:020d}.json"
    mine.put_if_absent(path, b"mine\n")
    assert len(calls) == 2 and mine.read(path) == b"mine\n"
    # the same, but another writer's commit is there: a lost race stays lost
    calls.clear()
    mode["apply_first"] = False
    other = f"{s3_path}/_delta_log/{1:020d}.json"
    store.put_if_absent(other, b"theirs\n")
    with pytest.raises(FileExistsError):
        mine.put_if_absent(other, b"mine\n")
    assert len(calls) == 2 and mine.read(other) == b"theirs\n"


def test_store_chosen_by_scheme(s3_env, tmp_path):
    assert isinstance(store_for_path(f"s3://{BUCKET}/a/t"), S3LogStore)
    assert isinstance(store_for_path(f"s3a://{BUCKET}/a/t"), S3LogStore)
    assert isinstance(store_for_path(str(tmp_path)), LocalLogStore)
    log = DeltaLog.for_table(f"s3a://{BUCKET}//a/t/")
    assert log.table_path == f"s3a://{BUCKET}/a/t" and log.log_path == f"s3a://{BUCKET}/a/t/_delta_log"
    assert isinstance(log.store, S3LogStore)
    assert normalize_s3_uri("S3://b/x/") == "s3://b/x"
    explicit = S3LogStore(endpoint_url=s3_env["AWS_ENDPOINT_URL"], aws_access_key_id="k",
                          aws_secret_access_key="s", region_name="us-east-1")
    assert DeltaLog(f"s3://{BUCKET}/a/t", store=explicit).store is explicit


# ---------------------------------------------------------------------------- a table on s3://
def test_table_committed_through_delta_log(s3_path):
    log = create_table(s3_path, ["country"], configuration={"delta.checkpointInterval": "3"},
                       files=[add("country=FR/a.parquet", country="FR")])
    assert isinstance(log.store, S3LogStore)
    for i in range(5):
        txn = log.start_transaction()
        actions = [add(f"country=DE/{i}.parquet", country="DE")]
        if i == 2:
            actions.append(txn.filter_files("country = 'FR'")[0].remove())
        assert txn.commit(actions, "WRITE") == i + 1
    fresh = DeltaLog.for_table(s3_path)  # a new reader: _last_checkpoint, the checkpoint, the tail
    snap = fresh.snapshot()
    assert snap.version == 5
    assert sorted(a.path for a in snap.all_files) == [f"country=DE/{i}.parquet" for i in range(5)]
    assert fresh._last_checkpoint_info()["version"] == 3
    assert fresh.store.exists(f"{s3_path}/_delta_log/{3:020d}.checkpoint.parquet")
    assert {a.path for a in fresh.snapshot(1).all_files} == {"country=FR/a.parquet", "country=DE/0.parquet"}
    assert [h["version"] for h in fresh.history()] == [5, 4, 3, 2, 1, 0]
    assert fresh.history(1)[0]["operation"] == "WRITE"
    # the same table through Hadoop's spelling of the scheme
    assert DeltaLog.for_table(s3_path.replace("s3://", "s3a://", 1)).snapshot().version == 5
    # a stale transaction conflicts exactly as on a local disk
    stale = DeltaLog.for_table(s3_path).start_transaction()
    stale.filter_files("country = 'DE'")
    txn = log.start_transaction()
    txn.commit([txn.filter_files("country = 'DE'")[0].remove()], "DELETE")
    with pytest.raises(CONFLICT_EXCEPTIONS):
        stale.commit([stale.filter_files("country = 'DE'")[0].remove()], "DELETE")


def test_a_missing_table_on_s3(s3_path):
    log = DeltaLog.for_table(s3_path)
    assert log.snapshot().version == -1 and not log.table_exists()


# ---------------------------------------------------------------------------- races
def _check_race(path: str, outcomes: list[tuple], seed_files: set[str]) -> int:
    """Every version written exactly once by the writer told it got it; every other commit raised
    a named conflict; the history is serial; the final snapshot equals a replay. Returns latest."""
    committed = {txn_id: v for txn_id, _, v in outcomes if isinstance(v, int)}
    refused = [v for _, _, v in outcomes if not isinstance(v, int)]
    assert all(name in {c.__name__ for c in CONFLICT_EXCEPTIONS} for name in refused)
    assert all(op == "UPDATE" for _, op, v in outcomes if not isinstance(v, int))  # blind appends never lose
    log = DeltaLog.for_table(path)
    latest = log.snapshot().version
    assert latest == len(committed)
    assert sorted(committed.values()) == list(range(1, latest + 1))
    live = set(seed_files)
    for v in range(1, latest + 1):
        actions = log.read_commit(v)
        info = next(a for a in actions if isinstance(a, CommitInfo))
        assert committed[info.txn_id] == v
        for a in actions:
            if isinstance(a, RemoveFile):
                assert a.path in live
                live.discard(a.path)
            elif isinstance(a, AddFile):
                live.add(a.path)
    assert {a.path for a in DeltaLog.for_table(path).snapshot().all_files} == live
    names = [s.path.rsplit("/", 1)[1] for s in log.store.list_from(f"{path}/_delta_log/{0:020d}")]
    assert [n for n in names if n.endswith(".json")] == [f"{v:020d}.json" for v in range(latest + 1)]
    return latest


def _seeded_race_table(path: str) -> set[str]:
    create_table(path, ["p"], files=[AddFile("p=a/seed.parquet", {"p": "a"}, 10, 1)], schema=SCHEMA)
    return {"p=a/seed.parquet"}


def test_threads_race_on_one_s3_table(s3_path, monkeypatch):
    seed = _seeded_race_table(s3_path)
    results: dict[int, list] = {}
    lost = []  # conditional PUTs refused by the server: the writers really did race for versions
    put = S3LogStore.put_if_absent

    def counting(self, path, data):
        try:
            put(self, path, data)
        except FileExistsError:
            lost.append(path)
            raise

    monkeypatch.setattr(S3LogStore, "put_if_absent", counting)

    def run(w):
        results[w] = _race_worker(s3_path, w, 8, 2000 + w)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outcomes = [r for rs in results.values() for r in rs]
    assert len(outcomes) == 32
    assert _check_race(s3_path, outcomes, seed) >= 16
    assert lost  # at least one writer lost a race for a version and retried or conflicted


def _in_env(env: dict, fn, *args):
    """Run ``fn`` in a worker process with the AWS environment of the test (forkserver workers
    inherit the environment of the fork server, not of the test)."""
    os.environ.update(env)
    return fn(*args)


def _ctx():
    ctx = multiprocessing.get_context("forkserver")  # fork from a clean, thread-free server: fast starts
    ctx.set_forkserver_preload(["isolde.executor.log", "isolde.executor.txn", "boto3", "botocore"])
    return ctx


@pytest.mark.slow
def test_processes_race_on_one_s3_table(s3_env, s3_path):
    seed = _seeded_race_table(s3_path)
    processes, commits = 3, 15
    with _ctx().Pool(processes) as pool:
        results = pool.starmap(_in_env, [(s3_env, _race_worker, s3_path, w, commits, 3000 + w)
                                         for w in range(processes)])
    outcomes = [r for rs in results for r in rs]
    assert len(outcomes) == processes * commits
    assert _check_race(s3_path, outcomes, seed) >= processes * commits // 2


@pytest.mark.slow
def test_writers_killed_mid_commit_on_s3(s3_env, s3_path):
    create_table(s3_path, ["p"], configuration={"delta.checkpointInterval": "4"}, schema=SCHEMA)
    store = default_s3_store()
    log_dir = f"{s3_path}/_delta_log"
    rng = random.Random(11)
    seen: dict[str, str] = {}
    ctx = _ctx()
    kills = 0
    for round_ in range(8):
        ready = [ctx.Event() for _ in range(2)]
        writers = [ctx.Process(target=_in_env, args=(s3_env, _crash_writer, s3_path, round_ * 10 + w, ready[w]),
                               daemon=True) for w in range(2)]
        for proc in writers:
            proc.start()
        for event in ready:
            assert event.wait(60)
        time.sleep(rng.uniform(0.05, 0.6))
        for proc in writers:
            os.kill(proc.pid, signal.SIGKILL)
        for proc in writers:
            proc.join()
            assert proc.exitcode == -signal.SIGKILL
            kills += 1
        snap = DeltaLog.for_table(s3_path).snapshot()  # always loads
        names = [s.path.rsplit("/", 1)[1] for s in store.list_from(f"{log_dir}/{0:020d}")]
        commits = [n for n in names if n.endswith(".json")]
        assert [int(n[:20]) for n in commits] == list(range(snap.version + 1))  # contiguous, no torn tail
        for name in commits:
            body = store.read(f"{log_dir}/{name}")
            actions = parse_commit(body)  # every commit parses whole
            assert isinstance(actions[0], CommitInfo) and body.endswith(b"\n")
            assert seen.setdefault(name, hashlib.sha256(body).hexdigest()) == hashlib.sha256(body).hexdigest()
        if "_last_checkpoint" in names:
            json.loads(store.read(f"{log_dir}/_last_checkpoint"))
        full = {a.path for a in snap.all_files}
        from_json: set[str] = set()
        for v in range(snap.version + 1):
            for a in DeltaLog.for_table(s3_path).read_commit(v):
                if isinstance(a, AddFile):
                    from_json.add(a.path)
                elif isinstance(a, RemoveFile):
                    from_json.discard(a.path)
        assert full == from_json
    assert kills == 16
    final = DeltaLog.for_table(s3_path)
    assert final.snapshot().version > 8  # the writers made progress
    txn = final.start_transaction()  # and the next writer succeeds
    assert txn.commit([AddFile("p=a/after.parquet", {"p": "a"}, 10, 1)], "WRITE") == final.snapshot().version


# ---------------------------------------------------------------------------- interop
def test_delta_rs_reads_a_table_isolde_committed_to_s3(s3_env, s3_path):
    import deltalake
    import pyarrow as pa
    import pyarrow.parquet as pq

    client = _client(s3_env)
    prefix = s3_path.split("/", 3)[3]

    def upload(rel: str, ids: list[int]) -> AddFile:
        buf = io.BytesIO()
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), buf)
        body = buf.getvalue()
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{rel}", Body=body)
        p = rel.split("/", 1)[0].split("=", 1)[1]
        return AddFile(rel, {"p": p}, len(body), int(time.time() * 1000))

    log = create_table(s3_path, ["p"], schema=SCHEMA, files=[upload("p=a/0.parquet", [1, 2])])
    log.start_transaction().commit([upload("p=b/1.parquet", [3])], "WRITE")
    txn = log.start_transaction()
    old = txn.filter_files("p = 'a'")[0]
    txn.commit([old.remove(), upload("p=a/2.parquet", [1, 2, 4])], "UPDATE")
    options = {"AWS_ENDPOINT_URL": s3_env["AWS_ENDPOINT_URL"], "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    dt = deltalake.DeltaTable(s3_path, storage_options=options)
    assert dt.version() == 2
    rows = sorted(zip(*dt.to_pyarrow_table().select(["id", "p"]).to_pydict().values()))
    assert rows == [(1, "a"), (2, "a"), (3, "b"), (4, "a")]
    dt.load_as_version(1)
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]
