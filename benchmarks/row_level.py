"""Row-level concurrency benchmark: writer processes running single-row UPDATEs of disjoint
random ids on one unpartitioned table, isolde with `isolde.rowLevelConcurrency` on (auto) and
off, and delta-rs (`deltalake`, file-level conflicts, copy-on-write) as the peer, in one run.

    .venv/bin/python benchmarks/row_level.py                      # 4 writers, 1M rows, 60 s each
    .venv/bin/python benchmarks/row_level.py --seconds 20 --rows 200000   # a quick look
    .venv/bin/python benchmarks/row_level.py --threads            # isolde's writers as threads of one process

Table: id (BIGINT, a shuffled permutation of 0..rows-1, so file statistics cannot narrow a
lookup to one file, as in a table keyed by something else), n (BIGINT counter), v (DOUBLE);
written once by delta-rs as --files appends (one file each) and copied for every
configuration; isolde's copies get deletion vectors. Writer w updates only ids with
id % writers == w (disjoint rows; every writer touches every file).

Printed per configuration: committed UPDATEs/s, conflict rate (conflicts / statements),
statement latency p50/p99, and, for isolde, the row-level check's own cost per winning
commit checked (check + deletion-vector rebase, on the driver with pyarrow) at p50/p99;
then the ratios row level / file level and row level / delta-rs. Each run ends with a
consistency check: the counters' sum, read by delta-rs, equals the committed UPDATEs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIGS = ("isolde row level", "isolde file level", "delta-rs")


def build_table(path: str, rows: int, files: int, seed: int = 3) -> None:
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    rng = np.random.default_rng(seed)
    ids = rng.permutation(rows).astype(np.int64)
    chunk = -(-rows // files)
    for i in range(files):
        part = ids[i * chunk:(i + 1) * chunk]
        data = pa.table({"id": part, "n": np.zeros(len(part), dtype=np.int64), "v": rng.random(len(part))})
        write_deltalake(path, data, mode="append")


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


# --------------------------------------------------------------------------- a writer process

def worker(engine: str, location: str, index: int, writers: int, rows: int, go_path: str, seconds: float,
           out_path: str) -> int:
    rng = random.Random(100 + index)

    def next_id() -> int:
        return rng.randrange(rows // writers) * writers + index

    checks: list[float] = []
    if engine == "isolde":
        sys.path.insert(0, ROOT)
        import isolde
        from isolde.errors import ConcurrentModificationException as Conflict
        from isolde.executor.txn.transaction import OptimisticTransaction

        real = OptimisticTransaction._check_rows

        def timed(self, *args, **kwargs):  # the real check, timed per winning commit
            t = time.perf_counter()
            try:
                return real(self, *args, **kwargs)
            finally:
                checks.append(time.perf_counter() - t)

        OptimisticTransaction._check_rows = timed
        session = isolde.connect(warehouse=location, master="local[1]")

        def update(k: int):
            return session.execute(f"UPDATE t SET n = n + 1 WHERE id = {k}")
    else:
        from deltalake import DeltaTable
        from deltalake.exceptions import CommitFailedError as Conflict

        def update(k: int):
            DeltaTable(location).update(updates={"n": "n + 1"}, predicate=f"id = {k}")

    while True:  # warm up: the first statement plans, compiles and loads everything
        try:
            update(next_id())
            break
        except Conflict:
            time.sleep(random.random())
    with open(out_path, "w", buffering=1) as out:
        out.write(json.dumps({"ready": True}) + "\n")
        while not os.path.exists(go_path):
            time.sleep(0.01)
        with open(go_path) as f:
            start = float(f.read())
        while time.time() < start:
            time.sleep(0.001)
        checks.clear()
        while time.time() < start + seconds:
            k = next_id()
            t, c = time.perf_counter(), time.process_time()
            try:
                r = update(k)
                ok, name, phases = True, None, dict(getattr(r, "phases", None) or {})
            except Conflict as e:
                ok, name, phases = False, type(e).__name__, {}
            out.write(json.dumps({"ok": ok, "conflict": name, "s": time.perf_counter() - t,
                                  "cpu": time.process_time() - c, "end": time.time(), "checks": checks[:],
                                  "phases": phases}) + "\n")
            checks.clear()
    return 0


def thread_worker(location: str, writers: int, rows: int, seconds: float, out_path: str) -> int:
    """``--threads``: the writers as threads of ONE process (one JVM, one Python, its GIL), each
    with its own Session on the shared SparkSession. Per statement: wall time, the thread's
    own CPU time, isolde's phases (plan / find / write / commit ...) and the row-level
    check's time inside the commit."""
    import threading

    sys.path.insert(0, ROOT)
    import isolde
    from isolde.errors import ConcurrentModificationException as Conflict
    from isolde.executor.runtime.spark import get_spark
    from isolde.executor.txn.transaction import OptimisticTransaction

    local = threading.local()
    real = OptimisticTransaction._check_rows

    def timed(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return real(self, *args, **kwargs)
        finally:
            local.checks.append(time.perf_counter() - t)

    OptimisticTransaction._check_rows = timed
    spark = get_spark(f"local[{os.cpu_count() or 2}]")
    records: list[dict] = []
    lock = threading.Lock()
    ready = threading.Barrier(writers + 1)
    start_at: list[float] = []

    def run(index: int) -> None:
        rng = random.Random(100 + index)
        local.checks = []
        session = isolde.connect(warehouse=location, spark=spark)

        def update() -> object:
            return session.execute(f"UPDATE t SET n = n + 1 WHERE id = {rng.randrange(rows // writers) * writers + index}")

        while True:  # warm-up statement, as the processes do
            try:
                update()
                break
            except Conflict:
                time.sleep(random.random())
        ready.wait()
        ready.wait()  # the parent thread has set start_at
        while time.time() < start_at[0] + seconds:
            local.checks = []
            t, c = time.perf_counter(), time.thread_time()
            try:
                r = update()
                ok, name, phases = True, None, dict(getattr(r, "phases", None) or {})
            except Conflict as e:
                ok, name, phases = False, type(e).__name__, {}
            rec = {"ok": ok, "conflict": name, "s": time.perf_counter() - t, "cpu": time.thread_time() - c,
                   "end": time.time(), "checks": local.checks[:], "phases": phases}
            with lock:
                records.append(rec)

    threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(writers)]
    for th in threads:
        th.start()
    ready.wait()
    start_at.append(time.time() + 0.5)
    ready.wait()
    for th in threads:
        th.join(seconds + 600)
    with open(out_path, "w") as out:
        out.write(json.dumps({"ready": True, "start": start_at[0]}) + "\n")
        for rec in records:
            out.write(json.dumps(rec) + "\n")
    return 0


# --------------------------------------------------------------------------- the parent

def run_config_threads(name: str, location: str, table: str, args, scratch: str) -> dict:
    out = os.path.join(scratch, f"{name.replace(' ', '-')}-threads.jsonl")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("ISOLDE_DRIVER_MEMORY", "2g")
    proc = subprocess.run([sys.executable, __file__, "--thread-worker", location, str(args.writers), str(args.rows),
                           str(args.seconds), out], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, timeout=args.seconds + 900)
    if proc.returncode:
        raise SystemExit(f"{name}: the threads' process failed:\n{proc.stderr[-3000:]}")
    lines = open(out).read().splitlines()
    start = json.loads(lines[0])["start"]
    records = [json.loads(line) for line in lines[1:]]
    return _summary(name, records, start, table, args)


def _summary(name: str, records: list, start: float, table: str, args) -> dict:
    ended = max([r["end"] for r in records] + [start + args.seconds])
    committed = sum(r["ok"] for r in records)
    conflicts = [r["conflict"] for r in records if not r["ok"]]
    latencies = [r["s"] for r in records]
    checks = [c for r in records for c in r["checks"]]
    phases: dict = {}
    for r in records:
        for k, v in (r.get("phases") or {}).items():
            phases.setdefault(k, []).append(v)
    cpu = [r["cpu"] for r in records if "cpu" in r]

    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    # QueryBuilder honours deletion vectors; rows counted too: a lost rebase would resurrect one
    got = pa.table(QueryBuilder().register("t", DeltaTable(table))
                   .execute("SELECT sum(n) AS s, count(*) AS c FROM t").read_all()).to_pylist()[0]
    baseline = args.writers  # each writer's warm-up UPDATE
    total = got["s"]
    consistent = total == committed + baseline and got["c"] == args.rows
    return {"name": name, "statements": len(records), "committed": committed, "conflicts": len(conflicts),
            "conflict_classes": sorted(set(conflicts)), "tps": committed / (ended - start),
            "p50": percentile(latencies, 50), "p99": percentile(latencies, 99),
            "check_p50": percentile(checks, 50), "check_p99": percentile(checks, 99), "checks": len(checks),
            "check_total": sum(checks), "phases_p50": {k: percentile(v, 50) for k, v in phases.items()},
            "cpu_p50": percentile(cpu, 50) if cpu else None,
            "consistent": consistent, "sum": total, "count": got["c"], "expected": committed + baseline}


def run_config(name: str, location: str, table: str, args, scratch: str) -> dict:
    engine = "delta-rs" if name == "delta-rs" else "isolde"
    go = os.path.join(scratch, f"go-{name.replace(' ', '-')}")
    outs = [os.path.join(scratch, f"{name.replace(' ', '-')}-{w}.jsonl") for w in range(args.writers)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("ISOLDE_DRIVER_MEMORY", "1g")
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", engine, location, str(w), str(args.writers),
                               str(args.rows), go, str(args.seconds), outs[w]], env=env,
                              stdout=subprocess.DEVNULL, stderr=open(outs[w] + ".err", "w"))
             for w in range(args.writers)]
    try:
        deadline = time.time() + 600
        while not all(os.path.exists(o) and open(o).readline().strip() for o in outs):
            if any(p.poll() not in (None, 0) for p in procs) or time.time() > deadline:
                raise SystemExit(f"{name}: a writer failed to start:\n" + open(outs[0] + ".err").read()[-3000:])
            time.sleep(0.2)
        start = time.time() + 1.0
        with open(go + ".tmp", "w") as f:
            f.write(repr(start))
        os.replace(go + ".tmp", go)
        for w, p in enumerate(procs):
            if p.wait(args.seconds + 600) != 0:
                raise SystemExit(f"{name}: writer {w} failed:\n" + open(outs[w] + ".err").read()[-3000:])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    records = [json.loads(line) for o in outs for line in open(o).read().splitlines()[1:]]
    return _summary(name, records, start, table, args)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of: " + ", ".join(CONFIGS))
    ap.add_argument("--dir", help="scratch folder (default: a new temporary one, removed afterwards)")
    ap.add_argument("--threads", action="store_true",
                    help="isolde's writers as threads of one process (one JVM, one GIL), with each statement's "
                         "phases and CPU time; delta-rs stays processes")
    args = ap.parse_args(argv)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]

    sys.path.insert(0, ROOT)
    import isolde
    from isolde.executor.runtime.spark import get_spark

    scratch = args.dir or tempfile.mkdtemp(prefix="isolde-bench-row-level-")
    try:
        pristine = os.path.join(scratch, "pristine")
        t = time.perf_counter()
        build_table(pristine, args.rows, args.files)
        print(f"table: {args.rows:,} rows in {args.files} files (ids shuffled across files), {args.writers} "
              f"{'writer threads in one process (delta-rs: processes)' if args.threads else 'writer processes'}, "
              f"{args.seconds:.0f} s per configuration, single-row UPDATE "
              f"SET n = n + 1 WHERE id = <random id of the writer's own residue class> "
              f"(built in {time.perf_counter() - t:.1f} s); {os.cpu_count()} CPUs")
        locations = {}
        spark = None
        for name in configs:
            if name == "delta-rs":
                table = os.path.join(scratch, "delta-rs", "t")
                shutil.copytree(pristine, table)
                locations[name] = (table, table)
                continue
            wh = os.path.join(scratch, name.replace(" ", "-"))
            table = os.path.join(wh, "default", "t")
            shutil.copytree(pristine, table)
            spark = spark or get_spark()
            mode = "auto" if name == "isolde row level" else "off"
            s = isolde.connect(warehouse=wh, spark=spark)
            s.execute("ALTER TABLE t SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
                      f"'isolde.rowLevelConcurrency' = '{mode}', 'delta.isolationLevel' = 'WriteSerializable')")
            effective = {r[0]: r[1] for r in s.execute("SHOW TBLPROPERTIES t").collect()}
            print(f"  {name}: isolde.rowLevelConcurrency = {effective.get('isolde.rowLevelConcurrency.effective')}")
            locations[name] = (wh, table)
        if spark is not None:
            spark.stop()  # the writers need the memory and the cores
        results = []
        for name in configs:
            location, table = locations[name]
            threaded = args.threads and name != "delta-rs"
            r = (run_config_threads if threaded else run_config)(name, location, table, args, scratch)
            results.append(r)
            check = (f"; row check per winning commit p50 {r['check_p50'] * 1000:.1f} ms, "
                     f"p99 {r['check_p99'] * 1000:.1f} ms over {r['checks']} checks"
                     if r["checks"] else "")
            print(f"{name:>18}: {r['committed']:5d} committed of {r['statements']:5d} "
                  f"({r['tps']:.2f}/s), conflict rate {r['conflicts'] / max(r['statements'], 1):.0%} "
                  f"{r['conflict_classes'] or ''}, latency p50 {r['p50']:.2f} s p99 {r['p99']:.2f} s{check}; "
                  f"delta-rs reads sum(n) {r['sum']} (expected {r['expected']}), {r['count']:,} rows: "
                  f"{'OK' if r['consistent'] else 'INCONSISTENT'}")
            if r["phases_p50"]:
                parts = ", ".join(f"{k} {v:.0f}" for k, v in r["phases_p50"].items())
                cpu = f"; Python CPU per statement p50 {r['cpu_p50'] * 1000:.0f} ms" if r["cpu_p50"] else ""
                print(f"{'':>18}  committed statements' phases p50 (ms): {parts}{cpu}; row checks "
                      f"{r['check_total']:.1f} s in all")
        by = {r["name"]: r for r in results}
        on = by.get("isolde row level")
        for peer in ("isolde file level", "delta-rs"):
            if on and peer in by and by[peer]["tps"] > 0:
                print(f"ratio committed/s row level / {peer}: {on['tps'] / by[peer]['tps']:.2f}x")
        return 0 if all(r["consistent"] for r in results) else 1
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--thread-worker":
        a = sys.argv[2:]
        sys.exit(thread_worker(a[0], int(a[1]), int(a[2]), float(a[3]), a[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        a = sys.argv[2:]
        sys.exit(worker(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), a[5], float(a[6]), a[7]))
    sys.exit(main())
