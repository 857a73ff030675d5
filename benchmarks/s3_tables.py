"""Tables on S3: commit latency and throughput on one s3a:// table, isolde against delta-rs with
conditional put, and a deletion-vector UPDATE on S3 against the same UPDATE on a local disk.

    .venv/bin/python benchmarks/s3_tables.py                   # 40 INSERTs, 4 writers x 15 s, 1M rows
    .venv/bin/python benchmarks/s3_tables.py --quick            # a smoke run (seconds)

The S3 server is moto's server mode on 127.0.0.1 (tests/helpers/s3_server.py: its own process),
so the figures measure each engine's requests and their number, not a network: a real bucket
adds ~10-30 ms per request on top. Both engines commit with a conditional PUT (If-None-Match):
isolde's S3 log store, delta-rs with ``conditional_put = etag`` (no DynamoDB lock).

Printed:
- a one-row INSERT into an s3a table, one writer: commit latency p50 / p99 (isolde: the
  statement, end to end, after a warm-up; delta-rs: ``write_deltalake(mode="append")``);
- 4 writers appending one-row INSERTs for --seconds: commits/s and lost races (isolde: 4
  threads of one process sharing its Spark session; delta-rs: 4 threads);
- UPDATE of 1% of a --rows table (ids spread over every file) with deletion vectors: on S3 and
  on the local disk (median of --rounds), and delta-rs's copy-on-write UPDATE on S3 as the peer;
- loading the latest version of a log of --log-versions commits (10, 2,000 and 100,000 by
  default), on S3 and on the local disk, without a checkpoint (the whole log listed and every
  commit replayed) and with one at the latest version: isolde's DeltaLog (a fresh one each round;
  its LIST calls counted on S3) against delta-rs's DeltaTable, median of min(--rounds, 5) rounds
  (3 from 10,000 versions). The commits are written straight into the log (a commitInfo each:
  on S3 conditional PUTs from 32 threads, on the disk plain file writes); the time that takes is
  printed too. ``--log-only`` runs this part alone:

    .venv/bin/python benchmarks/s3_tables.py --log-only --log-versions 10,2000

Run it alone: no test suite or other benchmark beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

BUCKET = "bench"


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


def delta_rs_options(env: dict) -> dict:
    return {"AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"], "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"], "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true", "conditional_put": "etag"}


def isolde_latency(s, uri: str, rounds: int) -> list[float]:
    s.execute(f"CREATE TABLE lat (id BIGINT, v STRING) USING DELTA LOCATION '{uri}'")
    for i in range(3):  # warm-up: the first statements compile Spark's code
        s.execute(f"INSERT INTO lat VALUES ({i}, 'w')")
    out = []
    for i in range(rounds):
        t = time.perf_counter()
        s.execute(f"INSERT INTO lat VALUES ({i}, 'x')")
        out.append(time.perf_counter() - t)
    return out


def delta_rs_latency(uri: str, options: dict, rounds: int) -> list[float]:
    import pyarrow as pa
    from deltalake import write_deltalake

    uri = uri.replace("s3a://", "s3://")
    write_deltalake(uri, pa.table({"id": [0], "v": ["w"]}), mode="append", storage_options=options)
    out = []
    for i in range(rounds):
        t = time.perf_counter()
        write_deltalake(uri, pa.table({"id": [i], "v": ["x"]}), mode="append", storage_options=options)
        out.append(time.perf_counter() - t)
    return out


def race(work, writers: int, seconds: float) -> tuple[int, int, int]:
    """(commits, lost races retried by the engine or failed, errors) of ``writers`` threads."""
    stop = time.time() + seconds
    counts = {"ok": 0, "err": 0}
    lock = threading.Lock()

    def loop(n):
        i = 0
        while time.time() < stop:
            i += 1
            try:
                work(n, i)
                with lock:
                    counts["ok"] += 1
            except Exception:  # noqa: BLE001 - counted and reported
                with lock:
                    counts["err"] += 1

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts["ok"], counts["err"]


def build_rows(s, ref: str, rows: int, files: int) -> None:
    s.execute(f"CREATE TABLE {ref} (id BIGINT, v DOUBLE) USING DELTA "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    per = rows // files
    for f in range(files):
        s.execute(f"INSERT INTO {ref} SELECT id * {files} + {f} AS id, rand() AS v FROM range({per})")


def commit_json(version: int) -> bytes:
    info = {"timestamp": int(time.time() * 1000), "operation": "SET TBLPROPERTIES",
            "operationParameters": {"properties": "{}"}, "readVersion": version - 1, "isBlindAppend": True}
    return json.dumps({"commitInfo": info}).encode()


def write_commits(uri: str, n: int, threads: int = 32) -> float:
    """Commits 2..n written straight into the log of the table at ``uri`` (conditional PUTs from
    ``threads`` threads on S3, plain file writes on a local disk); the seconds it took."""
    t = time.perf_counter()
    if uri.startswith("s3a://"):
        import boto3
        from botocore.config import Config

        from isolde.executor.log.s3_store import S3LogStore

        config = Config(max_pool_connections=threads, s3={"addressing_style": "path"})  # a connection a thread
        store = S3LogStore(boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], config=config))
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda v: store.put_if_absent(f"{uri}/_delta_log/{v:020d}.json", commit_json(v)),
                          range(2, n + 1)))
    else:
        for v in range(2, n + 1):
            with open(os.path.join(uri, "_delta_log", f"{v:020d}.json"), "xb") as f:
                f.write(commit_json(v))
    return time.perf_counter() - t


def checkpoint_from_version_1(uri: str, n: int) -> None:
    """The checkpoint of version ``n`` without replaying the log: versions 2..n carry only
    commitInfo, so the table's state at ``n`` is its state at version 1 (a replay of 100,000
    commits on S3 takes ~10 minutes, one GET each)."""
    from isolde.executor.log import DeltaLog
    from isolde.executor.log.checkpoint import checkpoint_bytes, checkpoint_name, checkpoint_table

    log = DeltaLog.for_table(uri)
    snap = log.snapshot(1)
    table = checkpoint_table(snap.protocol, snap.metadata, snap.set_transactions.values(),
                             snap.domain_metadata.values(), snap.all_files, [])
    body = checkpoint_bytes(table)
    log.store.write(f"{log.log_path}/{checkpoint_name(n)}", body)
    last = {"version": n, "size": table.num_rows, "sizeInBytes": len(body), "numOfAddFiles": snap.num_files}
    log.store.write(f"{log.log_path}/_last_checkpoint", json.dumps(last).encode())


def log_load(s, base: str, wh: str, options: dict, versions, rounds: int, replay_max: int = 20_000) -> None:
    """Loading the latest version of a one-file table with ``versions`` commits, on S3 and on the
    local disk: isolde's DeltaLog (fresh each round; LIST calls counted on S3) against delta-rs's
    DeltaTable, without a checkpoint and with one at the latest version."""
    from deltalake import DeltaTable

    from isolde.executor.log import DeltaLog
    from isolde.executor.log.s3_store import default_s3_store

    lists = []
    default_s3_store().client.meta.events.register("before-call.s3.ListObjectsV2", lambda **kw: lists.append(1))
    print(f"loading the latest version (median of {rounds} rounds, {min(rounds, 3)} from 10,000 versions; "
          "LIST calls by isolde)")
    for where, root in (("S3", base), ("local disk", f"{wh}/logs")):
        for n in versions:
            uri = f"{root}/log-{n}"
            s.execute(f"CREATE TABLE delta.`{uri}` (id INT) USING DELTA TBLPROPERTIES ('delta.checkpointInterval' = "
                      "'1000000')")
            s.execute(f"INSERT INTO delta.`{uri}` VALUES (1)")
            took = write_commits(uri, n)
            print(f"  {where:<10} {n:>7,} versions: commits written in {took:.1f} s ({(n - 1) / took:,.0f}/s)")
            rs_uri, rs_options = (uri.replace("s3a://", "s3://"), options) if where == "S3" else (uri, None)
            runs = min(rounds, 3) if n >= 10_000 else rounds
            for label in ("no checkpoint", "checkpoint"):
                if label == "no checkpoint" and where == "S3" and n > replay_max:
                    print(f"  {where:<10} {n:>7,} versions, no checkpoint  not measured: a replay of every commit, "
                          "one GET each (~5.8 ms per commit for isolde, ~8.2 ms for delta-rs at 20,000)")
                    checkpoint_from_version_1(uri, n)
                    continue
                mine, theirs, calls = [], [], []
                for _ in range(runs):
                    lists.clear()
                    t = time.perf_counter()
                    log = DeltaLog.for_table(uri)
                    assert log.update().version == n
                    mine.append(time.perf_counter() - t)
                    calls.append(len(lists))
                    t = time.perf_counter()
                    assert DeltaTable(rs_uri, storage_options=rs_options).version() == n
                    theirs.append(time.perf_counter() - t)
                listed = f"{max(calls):>3}" if where == "S3" else "  -"
                print(f"  {where:<10} {n:>7,} versions, {label:<13}  isolde {statistics.median(mine) * 1000:8.1f} ms "
                      f"({listed} LIST)  delta-rs {statistics.median(theirs) * 1000:8.1f} ms  "
                      f"ratio {statistics.median(mine) / statistics.median(theirs):.2f}x", flush=True)
                if label == "no checkpoint":
                    log.checkpoint()  # at version n, by the last round's log (its snapshot loaded)


def commits_and_update(s, base: str, wh: str, options: dict, args) -> None:
    """The INSERT latency, the concurrent writers and the UPDATE parts (see the module docstring)."""
    mine = isolde_latency(s, f"{base}/lat-isolde", args.rounds)
    theirs = delta_rs_latency(f"{base}/lat-deltars", options, args.rounds)
    print(f"one-row INSERT commit latency on S3 ({args.rounds} rounds; moto on 127.0.0.1)")
    print(f"  isolde    p50 {pct(mine, .5) * 1000:7.1f} ms  p99 {pct(mine, .99) * 1000:7.1f} ms")
    print(f"  delta-rs  p50 {pct(theirs, .5) * 1000:7.1f} ms  p99 {pct(theirs, .99) * 1000:7.1f} ms")
    print(f"  ratio isolde / delta-rs (p50): {pct(mine, .5) / pct(theirs, .5):.2f}x")

    s.execute(f"CREATE TABLE app (id BIGINT, w INT) USING DELTA LOCATION '{base}/app-isolde'")
    ok_i, err_i = race(lambda n, i: s.execute(f"INSERT INTO app VALUES ({i}, {n})"), args.writers, args.seconds)
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    rs_uri = f"{base}/app-deltars".replace("s3a://", "s3://")
    write_deltalake(rs_uri, pa.table({"id": [0], "w": [0]}), mode="append", storage_options=options)
    ok_r, err_r = race(lambda n, i: write_deltalake(rs_uri, pa.table({"id": [i], "w": [n]}), mode="append",
                                                    storage_options=options), args.writers, args.seconds)
    rows_i = s.execute("SELECT count(*) FROM app").rows[0][0]
    rows_r = DeltaTable(rs_uri, storage_options=options).to_pyarrow_table().num_rows - 1
    print(f"{args.writers} writers appending one-row INSERTs for {args.seconds:g} s")
    print(f"  isolde    {ok_i / args.seconds:6.2f} commits/s  errors {err_i}  rows {rows_i} (= commits: "
          f"{rows_i == ok_i})")
    print(f"  delta-rs  {ok_r / args.seconds:6.2f} commits/s  errors {err_r}  rows {rows_r} (= commits: "
          f"{rows_r == ok_r})")
    print(f"  ratio isolde / delta-rs: {(ok_i / max(ok_r, 1)):.2f}x")

    timings = {}
    for where, ref in (("S3", f"delta.`{base}/dml`"), ("local disk", f"delta.`{wh}/dml-local`")):
        build_rows(s, ref, args.rows, args.files)
        runs = []
        for r in range(args.dml_rounds):
            t = time.perf_counter()
            s.execute(f"UPDATE {ref} SET v = v + 1 WHERE id % 100 = {r}")
            runs.append(time.perf_counter() - t)
        timings[where] = statistics.median(runs)
    dml_rs = f"{base}/dml-deltars".replace("s3a://", "s3://")
    per = args.rows // args.files
    for f in range(args.files):  # the same shape: --files files, ids spread over all of them
        ids = pa.array(range(f, per * args.files, args.files), pa.int64())
        write_deltalake(dml_rs, pa.table({"id": ids, "v": pa.array([0.5] * len(ids))}), mode="append",
                        storage_options=options)
    runs = []
    for r in range(args.dml_rounds):
        t = time.perf_counter()
        DeltaTable(dml_rs, storage_options=options).update(predicate=f"id % 100 = {r}",
                                                           updates={"v": "v + 1"})
        runs.append(time.perf_counter() - t)
    timings["delta-rs S3"] = statistics.median(runs)
    print(f"UPDATE of 1% of {args.rows:,} rows in {args.files} files (median of {args.dml_rounds})")
    print(f"  isolde, deletion vectors, S3          {timings['S3']:6.2f} s")
    print(f"  isolde, deletion vectors, local disk  {timings['local disk']:6.2f} s")
    print(f"  delta-rs, copy-on-write, S3           {timings['delta-rs S3']:6.2f} s")
    print(f"  ratio S3 / local disk: {timings['S3'] / timings['local disk']:.2f}x; "
          f"isolde / delta-rs on S3: {timings['S3'] / timings['delta-rs S3']:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--dml-rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--log-only", action="store_true", help="only the log loads")
    ap.add_argument("--log-versions", help="log lengths to load, comma-separated (default 10,2000,100000)")
    ap.add_argument("--replay-max", type=int, default=20_000,
                    help="on S3, longer logs are loaded only from a checkpoint (a full replay takes minutes)")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.rows, args.dml_rounds = 5, 3, 20_000, 1
    default_versions = "10,200" if args.quick else "10,2000,100000"
    args.log_versions = [int(n) for n in (args.log_versions or default_versions).split(",")]

    from tests.helpers.s3_server import moto_s3

    import isolde
    from isolde.executor.runtime import s3a

    if not s3a.spark_jars():
        print("The S3A connector is not fetched: run `make s3a` first.")
        return 2
    with moto_s3(BUCKET) as env:
        wh = tempfile.mkdtemp(prefix="isolde-s3-bench-")
        s = isolde.connect(warehouse=wh)
        options = delta_rs_options(env)
        base = f"s3a://{BUCKET}/{uuid.uuid4().hex[:8]}"

        if not args.log_only:
            commits_and_update(s, base, wh, options, args)
        log_load(s, base, wh, options, args.log_versions, min(args.rounds, 5), args.replay_max)
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
