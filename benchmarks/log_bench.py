"""Delta log benchmark: isolde's log layer against delta-rs (`deltalake`) in the same run.

1. Snapshot load at versions 10, 1,000 and 10,000 (isolde ``DeltaLog.snapshot(v)``, with and
   without turning the live files into Python AddFiles, vs ``deltalake.DeltaTable(path, version=v)``).
   Every isolde load uses a new DeltaLog; "isolde" and "+AddFiles" also clear the per-process
   checkpoint-files cache (cold), "warm" keeps it (a long-lived process loading the table again).
   Two table shapes, built by writing commit files directly:
   - rolling: every commit adds one file and removes the one added 10 commits earlier
     (about 10 live files at every version; checkpoints every 10 commits; the history spans
     60 days, so tombstones older than the 7-day retention leave the checkpoints);
   - append: every commit adds one file (live files grow with the version; checkpoints only
     at the measured versions, which is all either engine reads).
   For the append table also the FIRST load in a fresh process (what a CLI or a new worker
   pays: checkpoint read, JSON tail replay and building every AddFile; imports are done before
   the clock starts), at the last version (checkpoint only) and 5 versions earlier (a checkpoint
   10 versions back plus 5 JSON commits), against delta-rs's first ``DeltaTable(path, version=v)``
   in its own fresh process. Processes alternate isolde / delta-rs; each then repeats the load
   in-process ("again": new DeltaLog, per-process checkpoint cache kept; "again cold": cache
   cleared; delta-rs: a new DeltaTable).
2. Commit latency and throughput of small blind appends (one AddFile, no data written):
   isolde ``start_transaction().commit`` vs delta-rs ``create_write_transaction``, in 1 and
   in 4 processes on one table.

    .venv/bin/python benchmarks/log_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import deltalake  # noqa: E402
from deltalake.transaction import AddAction  # noqa: E402

from isolde.errors import ConcurrentModificationException  # noqa: E402
from isolde.executor.log import DeltaLog, LocalLogStore  # noqa: E402
from isolde.executor.log.checkpoint import clear_checkpoint_cache  # noqa: E402
from isolde.executor.log.actions import (  # noqa: E402
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    serialize_commit,
)

SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "name", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)
DAY_MS = 86_400_000
ROLLING_WINDOW = 10


def _stats(i: int) -> str:
    return json.dumps(
        {"numRecords": 100, "minValues": {"id": i * 100, "name": "a"}, "maxValues": {"id": i * 100 + 99, "name": "z"},
         "nullCount": {"id": 0, "name": 0}}
    )


def _add(i: int, ts: int) -> AddFile:
    return AddFile(f"part-{i:06d}-0000.snappy.parquet", {}, 1024, ts, True, _stats(i))


def build_table(path: str, versions: int, shape: str, checkpoints: list[int] | None) -> float:
    """Write ``versions + 1`` commits directly; checkpoints every 10 (rolling) or at ``checkpoints``."""
    start = time.perf_counter()
    log_dir = os.path.join(path, "_delta_log")
    os.makedirs(log_dir)
    now = int(time.time() * 1000)
    t0 = now - 60 * DAY_MS
    step = (59 * DAY_MS) // max(versions, 1)
    log = DeltaLog.for_table(path, LocalLogStore(durability="none"))  # a benchmark fixture needs no fsync
    for v in range(versions + 1):
        ts = t0 + v * step
        actions = [CommitInfo(timestamp=ts, operation="WRITE", operation_parameters={"mode": "Append"},
                              read_version=v - 1 if v else None, isolation_level="WriteSerializable",
                              is_blind_append=shape == "append", engine_info="bench")]
        if v == 0:
            actions += [Protocol(1, 2), Metadata(SCHEMA, (), {}, id="bench-table", created_time=t0)]
        actions.append(_add(v, ts))
        if shape == "rolling" and v >= ROLLING_WINDOW:
            old = _add(v - ROLLING_WINDOW, ts)
            actions.append(RemoveFile(old.path, True, {}, old.size, ts, extended_file_metadata=True))
        with open(os.path.join(log_dir, f"{v:020d}.json"), "wb") as fh:
            fh.write(serialize_commit(actions))
        if v and ((shape == "rolling" and v % 10 == 0) or (checkpoints and v in checkpoints)):
            log.update()  # incremental: replays only the commits since the last checkpoint
            log.checkpoint(v)
    return time.perf_counter() - start


def interleaved_medians(fns: dict, repeats: int) -> dict:
    """Median time of each function, running them in turn so machine noise hits all alike."""
    for fn in fns.values():
        fn()  # warm (imports, OS cache)
    times: dict = {k: [] for k in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def bench_loads(path: str, versions: list[int], repeats: int) -> list[dict]:
    rows = []
    for v in versions:
        got = interleaved_medians(
            {
                "isolde": lambda: (clear_checkpoint_cache(), DeltaLog.for_table(path).snapshot(v)),
                "isolde_files": lambda: (clear_checkpoint_cache(), DeltaLog.for_table(path).snapshot(v).all_files),
                "isolde_warm": lambda: DeltaLog.for_table(path).snapshot(v).all_files,
                "delta_rs": lambda: deltalake.DeltaTable(path, version=v),
            },
            repeats,
        )
        n_isolde = len(DeltaLog.for_table(path).snapshot(v).all_files)
        n_rs = len(deltalake.DeltaTable(path, version=v).file_uris())
        assert n_isolde == n_rs, (v, n_isolde, n_rs)
        rows.append({"version": v, "files": n_isolde, **got})
    return rows


FRESH_SNIPPET_ISOLDE = """
import sys, time
sys.path.insert(0, {root!r})
from isolde.executor.log import DeltaLog
from isolde.executor.log.checkpoint import clear_checkpoint_cache
path, v, n = {path!r}, {version}, {repeats}
t = time.perf_counter(); files = DeltaLog.for_table(path).snapshot(v).all_files; first = time.perf_counter() - t
assert files and all(f.path for f in files)  # every AddFile is built (all_files is a list of AddFiles)
count = len(files)
again, cold = [], []
for _ in range(n):
    t = time.perf_counter(); DeltaLog.for_table(path).snapshot(v).all_files; again.append(time.perf_counter() - t)
    clear_checkpoint_cache()
    t = time.perf_counter(); DeltaLog.for_table(path).snapshot(v).all_files; cold.append(time.perf_counter() - t)
print(repr(dict(first=first, again=again, cold=cold, files=count, pandas="pandas" in sys.modules)))
"""

FRESH_SNIPPET_DELTA_RS = """
import sys, time
import deltalake
path, v, n = {path!r}, {version}, {repeats}
t = time.perf_counter(); dt = deltalake.DeltaTable(path, version=v); first = time.perf_counter() - t
count = len(dt.file_uris())
again = []
for _ in range(n):
    t = time.perf_counter(); deltalake.DeltaTable(path, version=v); again.append(time.perf_counter() - t)
print(repr(dict(first=first, again=again, cold=again, files=count)))
"""


def _fresh_process(snippet: str, path: str, version: int, repeats: int) -> dict:
    import ast

    code = snippet.format(root=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), path=path,
                          version=version, repeats=repeats)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


def bench_first_load(path: str, version: int, processes: int, repeats: int = 5) -> dict:
    """First load in a fresh process, isolde and delta-rs alternating; medians over processes."""
    runs: dict = {"isolde": [], "delta_rs": []}
    for i in range(processes):
        order = (("isolde", FRESH_SNIPPET_ISOLDE), ("delta_rs", FRESH_SNIPPET_DELTA_RS))
        for engine, snippet in order if i % 2 == 0 else order[::-1]:
            runs[engine].append(_fresh_process(snippet, path, version, repeats))
    assert runs["isolde"][0]["files"] == runs["delta_rs"][0]["files"], (version, runs)
    med = statistics.median
    return {
        "version": version,
        "files": runs["isolde"][0]["files"],
        "pandas": any(r["pandas"] for r in runs["isolde"]),
        **{f"{engine}_first": med(r["first"] for r in rs) for engine, rs in runs.items()},
        **{f"{engine}_again": med(t for r in rs for t in r["again"]) for engine, rs in runs.items()},
        "isolde_again_cold": med(t for r in runs["isolde"] for t in r["cold"]),
    }


def print_first_loads(rows: list[dict], processes: int) -> None:
    print(f"\nFirst load in a fresh process, append table (incl. building every AddFile); medians of {processes}"
          " processes per engine, alternating")
    print(f"{'version':>8} {'files':>6} {'isolde':>10} {'delta-rs':>10} {'ratio':>6} |"
          f" {'again':>9} {'again cold':>10} {'rs again':>9} {'again/rs':>8} {'cold/rs':>8}")
    for r in rows:
        print(
            f"{r['version']:>8,} {r['files']:>6,} {r['isolde_first'] * 1000:>8.2f}ms {r['delta_rs_first'] * 1000:>8.2f}ms"
            f" {r['isolde_first'] / r['delta_rs_first']:>6.2f} | {r['isolde_again'] * 1000:>7.2f}ms"
            f" {r['isolde_again_cold'] * 1000:>8.2f}ms {r['delta_rs_again'] * 1000:>7.2f}ms"
            f" {r['isolde_again'] / r['delta_rs_again']:>8.2f} {r['isolde_again_cold'] / r['delta_rs_again']:>8.2f}"
            + ("  (pandas got imported!)" if r["pandas"] else "")
        )


# --------------------------------------------------------------------------- commits


def _new_table(path: str) -> None:
    log = DeltaLog.for_table(path)
    log.start_transaction().commit([Metadata(SCHEMA)], "CREATE TABLE")


def _isolde_commits(path: str, n: int, worker: int, barrier=None) -> tuple[list[float], int]:
    log = DeltaLog.for_table(path)
    log.snapshot()
    if barrier is not None:
        barrier.wait()
    times, failures = [], 0
    for i in range(n):
        t = time.perf_counter()
        try:
            log.start_transaction().commit([AddFile(f"w{worker}-{i}.parquet", {}, 1024, 1, True, _stats(i))])
        except ConcurrentModificationException:
            failures += 1
        times.append(time.perf_counter() - t)
    return times, failures


def _delta_rs_commits(path: str, n: int, worker: int, barrier=None) -> tuple[list[float], int]:
    dt = deltalake.DeltaTable(path)
    schema = dt.schema()
    if barrier is not None:
        barrier.wait()
    times, failures = [], 0
    for i in range(n):
        t = time.perf_counter()
        try:
            dt.update_incremental()  # read the latest version, as isolde's start_transaction does
            dt.create_write_transaction(
                [AddAction(f"w{worker}-{i}.parquet", 1024, {}, 1, True, _stats(i))], mode="append", schema=schema
            )
        except Exception:  # delta-rs reports every conflict as one CommitFailedError
            failures += 1
        times.append(time.perf_counter() - t)
    return times, failures


def _worker(args):
    engine, path, n, worker, barrier = args
    fn = _isolde_commits if engine == "isolde" else _delta_rs_commits
    return fn(path, n, worker, barrier)


def bench_commits(root: str, n: int, processes: int) -> dict:
    out = {}
    for engine in ("isolde", "delta-rs"):
        path = os.path.join(root, f"commits-{engine}-{processes}")
        _new_table(path)
        if processes == 1:
            wall = time.perf_counter()
            times, failures = _worker((engine, path, n, 0, None))
            wall = time.perf_counter() - wall
            all_times = times
        else:
            ctx = multiprocessing.get_context("spawn")
            manager = ctx.Manager()
            barrier = manager.Barrier(processes + 1)
            with ctx.Pool(processes) as pool:
                pending = pool.map_async(_worker, [(engine, path, n, w, barrier) for w in range(processes)])
                barrier.wait()
                wall = time.perf_counter()
                results = pending.get()
                wall = time.perf_counter() - wall
            manager.shutdown()
            all_times = [t for times, _ in results for t in times]
            failures = sum(f for _, f in results)
        committed = processes * n - failures
        version = DeltaLog.for_table(path).snapshot().version
        assert version == committed, (engine, version, committed)
        all_times.sort()
        out[engine] = {
            "p50_ms": all_times[len(all_times) // 2] * 1000,
            "p90_ms": all_times[int(len(all_times) * 0.9)] * 1000,
            "commits_per_s": committed / wall,
            "failures": failures,
        }
    return out


# --------------------------------------------------------------------------- report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 versions and fewer commits")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    versions = [10, 100, 1000] if args.quick else [10, 1000, 10000]
    repeats = args.repeats or (15 if args.quick else 21)
    fresh_processes = 7 if args.quick else 15
    commits = 60 if args.quick else 200
    root = args.workdir or tempfile.mkdtemp(prefix="isolde-log-bench-")
    os.makedirs(root, exist_ok=True)
    print(f"isolde log benchmark  (deltalake {deltalake.__version__}, {os.cpu_count()} cpus, work dir {root})")
    try:
        for shape in ("rolling", "append"):
            path = os.path.join(root, f"load-{shape}")
            tail_base = versions[-1] - 10  # a checkpoint 10 versions back: the first-load case with a JSON tail
            built = build_table(path, versions[-1], shape, versions + ([tail_base] if shape == "append" else []))
            print(f"\nSnapshot load, {shape} table ({versions[-1]:,} versions, built in {built:.1f} s); medians of {repeats}")
            print(f"{'version':>8} {'files':>6} {'isolde':>10} {'+AddFiles':>10} {'warm':>10} {'delta-rs':>10}"
                  f" {'isolde/rs':>10} {'+Add/rs':>8} {'warm/rs':>8}")
            rows = bench_loads(path, versions, repeats)
            for r in rows:
                print(
                    f"{r['version']:>8,} {r['files']:>6,} {r['isolde'] * 1000:>8.2f}ms {r['isolde_files'] * 1000:>8.2f}ms"
                    f" {r['isolde_warm'] * 1000:>8.2f}ms {r['delta_rs'] * 1000:>8.2f}ms"
                    f" {r['isolde'] / r['delta_rs']:>10.2f} {r['isolde_files'] / r['delta_rs']:>8.2f}"
                    f" {r['isolde_warm'] / r['delta_rs']:>8.2f}"
                )
            first, last = rows[0], rows[-1]
            print(
                f"  v{last['version']:,} / v{first['version']}: isolde {last['isolde'] / first['isolde']:.2f}x"
                f" (+AddFiles {last['isolde_files'] / first['isolde_files']:.2f}x), delta-rs {last['delta_rs'] / first['delta_rs']:.2f}x"
            )
            if shape == "append":
                fresh = [bench_first_load(path, v, fresh_processes) for v in (versions[-1], tail_base + 5)]
                print_first_loads(fresh, fresh_processes)
        for processes in (1, 4):
            res = bench_commits(root, commits, processes)
            print(f"\nBlind-append commits, {processes} process(es) x {commits}")
            print(f"{'engine':>9} {'p50':>9} {'p90':>9} {'commits/s':>10} {'failed':>7}")
            for engine, r in res.items():
                print(f"{engine:>9} {r['p50_ms']:>7.2f}ms {r['p90_ms']:>7.2f}ms {r['commits_per_s']:>10.1f} {r['failures']:>7}")
            i, rs = res["isolde"], res["delta-rs"]
            print(f"  isolde/delta-rs: p50 latency {i['p50_ms'] / rs['p50_ms']:.2f}x, throughput {i['commits_per_s'] / rs['commits_per_s']:.2f}x")
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
