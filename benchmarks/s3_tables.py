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
- loading the latest version of a 10- and a 2,000-version log, without and with a checkpoint:
  time and LIST calls, against delta-rs.
Run it alone: no test suite or other benchmark beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid

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


def log_load(s, base: str, options: dict, versions: tuple = (10, 2000), rounds: int = 5) -> None:
    """Loading the latest version of a one-file table with ``versions`` commits on S3: isolde's
    DeltaLog (fresh each round; LIST calls counted) against delta-rs's DeltaTable, without a
    checkpoint and with one at the latest version."""
    import json as _json
    from concurrent.futures import ThreadPoolExecutor

    from deltalake import DeltaTable

    from isolde.executor.log import DeltaLog
    from isolde.executor.log.s3_store import default_s3_store

    store = default_s3_store()
    lists = []
    store.client.meta.events.register("before-call.s3.ListObjectsV2", lambda **kw: lists.append(1))
    print(f"loading the latest version on S3 (median of {rounds}; LIST calls by isolde)")
    for n in versions:
        uri = f"{base}/log-{n}"
        s.execute(f"CREATE TABLE delta.`{uri}` (id INT) USING DELTA TBLPROPERTIES ('delta.checkpointInterval' = "
                  "'1000000')")
        s.execute(f"INSERT INTO delta.`{uri}` VALUES (1)")

        def commit(v):
            info = {"timestamp": int(time.time() * 1000), "operation": "SET TBLPROPERTIES",
                    "operationParameters": {"properties": "{}"}, "readVersion": v - 1, "isBlindAppend": True}
            store.put_if_absent(f"{uri}/_delta_log/{v:020d}.json", _json.dumps({"commitInfo": info}).encode())

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(commit, range(2, n + 1)))
        for label in ("no checkpoint", "checkpoint"):
            if label == "checkpoint":
                DeltaLog.for_table(uri).checkpoint()
            mine, theirs, calls = [], [], []
            for _ in range(rounds):
                lists.clear()
                t = time.perf_counter()
                assert DeltaLog.for_table(uri).update().version == n
                mine.append(time.perf_counter() - t)
                calls.append(len(lists))
                t = time.perf_counter()
                assert DeltaTable(uri.replace("s3a://", "s3://"), storage_options=options).version() == n
                theirs.append(time.perf_counter() - t)
            print(f"  {n:>6} versions, {label:<13}  isolde {statistics.median(mine) * 1000:7.1f} ms "
                  f"({max(calls)} LIST)  delta-rs {statistics.median(theirs) * 1000:7.1f} ms  "
                  f"ratio {statistics.median(mine) / statistics.median(theirs):.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--dml-rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.rows, args.dml_rounds = 5, 3, 20_000, 1

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
        log_load(s, base, options, (10, 200) if args.quick else (10, 2000))
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
