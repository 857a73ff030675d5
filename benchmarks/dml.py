"""DML benchmark: isolde (Spark, deletion vectors) vs delta-rs (`deltalake`, copy-on-write) on
identical data in the same run, each statement split into phases, each phase beside its floor.

    .venv/bin/python benchmarks/dml.py                                  # 1M rows (quick)
    .venv/bin/python benchmarks/dml.py --rows 10000000 --repeat 3       # the 10M figure
    .venv/bin/python benchmarks/dml.py --rows 1000000,10000000,50000000 --files 0,0,0 \\
        --extra 10000000:1000 --plot benchmarks/out/dml_scaling.png     # scaling + a 1,000-file table
    .venv/bin/python benchmarks/dml.py --copy-on-write                  # isolde rewriting files too

Table: id, key, date (partition column, --dates values), v1..v5; written once by delta-rs (in a
child process, in chunks) and copied, so both engines start from the same files (``--files N``
asks delta-rs for about N files; 0 = its default, one file per partition). Statements, applied
in sequence to both tables: UPDATE of 1% of the rows (key % 100 = 0: in every file), DELETE of
0.1%, MERGE upsert of a rows/100 source read from Parquet (half matches, half new).

delta-rs runs in a child process of its own, after isolde's statements of the round, so its
peak RSS is its own; isolde's peak is the Python driver's and the JVM's VmHWM over the
statements only (reset before them). Every round starts both engines from fresh copies;
medians over rounds are printed.

Phases of isolde's statement (``CommitResult.phases``, executor/runtime/phases.py) and their floors,
each timed right after the statement on the same files:
    plan    delta-rs loading the table (its log replay): what any engine pays to know the files
    source  MERGE: plain Spark reading the source's columns into the no-op sink
    find    plain Spark reading the columns the statement needs from the files it scanned (DELETE:
            the predicate's; UPDATE / MERGE: every column, as the rows they rewrite are spread over
            every page), filtered (MERGE: joined with the broadcast source's keys), with the row
            positions, into Spark's no-op sink
    dv      writing the same number of deletion-vector bytes to a new file
    write   plain Spark writing the rows isolde wrote (cached first) as Parquet
    stats   pyarrow reading the new files' footers
    commit  writing the same commit JSON to a new file
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PHASES = ("plan", "source", "find", "dv", "write", "stats", "commit")
CHUNK_ROWS = 2_000_000  # rows generated at a time: 50M rows never sit in memory at once


# --------------------------------------------------------------------------- data (child process)

def _chunks(rows: int, dates: int, seed: int):
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    day = np.array([f"2024-01-{1 + d:02d}" for d in range(dates)])
    for start in range(0, rows, CHUNK_ROWS):
        ids = np.arange(start, min(rows, start + CHUNK_ROWS), dtype=np.int64)
        n = len(ids)
        yield from pa.table({
            "id": ids,
            "key": rng.integers(0, 1_000_000, n, dtype=np.int64),
            "date": pa.array(day[ids % dates].tolist(), pa.string()),
            **{f"v{i}": rng.random(n) for i in range(1, 6)},
        }).to_batches()


def build_table(path: str, rows: int, dates: int, files: int, seed: int = 7) -> None:
    """The table delta-rs writes, chunk by chunk; ``files`` > 0 asks for about that many files."""
    import pyarrow as pa
    from deltalake import write_deltalake

    batches = _chunks(rows, dates, seed)
    first = next(batches)

    def all_batches():
        yield first
        yield from batches

    reader = pa.RecordBatchReader.from_batches(first.schema, all_batches())
    size = None
    if files:
        size = max(int(rows * 52 / files), 64 << 10)  # ~52 bytes a row in snappy Parquet
    write_deltalake(path, reader, partition_by=["date"], target_file_size=size)


def build_source(path: str, rows: int, dates: int, n: int, seed: int = 11) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    n = max(n, 2)
    existing = rng.choice(rows, n // 2, replace=False).astype(np.int64)
    new = np.arange(rows, rows + (n - n // 2), dtype=np.int64)
    ids = np.concatenate([existing, new])
    day = np.array([f"2024-01-{1 + d:02d}" for d in range(dates)])
    pq.write_table(pa.table({
        "id": ids,
        "key": rng.integers(0, 1_000_000, n, dtype=np.int64),
        "date": day[ids % dates],
        **{f"v{i}": rng.random(n) for i in range(1, 6)},
    }), path)


DRS_OPS = {
    "UPDATE": lambda dt, src: dt.update(updates={"v1": "v1 + 1", "v2": "0"}, predicate="key % 100 = 0"),
    "DELETE": lambda dt, src: dt.delete("key % 1000 = 7"),
    "MERGE": lambda dt, src: dt.merge(src, "t.id = s.id", source_alias="s", target_alias="t")
    .when_matched_update_all().when_not_matched_insert_all().execute(),
}


def drs_worker(path: str, source: str) -> dict:
    """delta-rs's three statements on its copy (each timed with its table load), then its
    peak RSS (this process only)."""
    import resource

    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    src = pq.read_table(source)
    out = {"ops": {}}
    for name, fn in DRS_OPS.items():
        t = time.perf_counter()
        dt = DeltaTable(path)
        load = time.perf_counter() - t
        t = time.perf_counter()
        metrics = fn(dt, src)
        out["ops"][name] = {"load_s": load, "op_s": time.perf_counter() - t,
                            "metrics": {k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float))}}
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def table_check(path: str) -> list:
    """(rows, round(sum(v1), 3)) read by delta-rs's query engine (which honours deletion vectors)."""
    from deltalake import DeltaTable, QueryBuilder

    t = QueryBuilder().register("t", DeltaTable(path)).execute(
        "SELECT count(*) AS n, round(sum(v1), 3) AS s FROM t").read_all()
    return [t.column("n")[0].as_py(), t.column("s")[0].as_py()]


def _child(*args, timeout=None) -> dict:
    """Run this file in a child process with ``args``; its last stdout line is JSON."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), *args], check=True, capture_output=True,
                         text=True, timeout=timeout)
    return json.loads(out.stdout.strip().splitlines()[-1])


CHECK_TIMEOUT_S = 180


def _checked(path: str):
    """``table_check`` in a child; "no answer" when delta-rs's reader hangs (seen on a table of
    1,220 files, each with a deletion vector: 500 threads asleep)."""
    try:
        return _child("--check", path, timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"no answer from delta-rs in {CHECK_TIMEOUT_S} s"


# --------------------------------------------------------------------------- measuring isolde

def _status_kb(pid, key: str) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return float("nan")


def reset_peaks(pids) -> None:
    """Reset VmHWM (peak RSS) of these processes to their current RSS (Linux clear_refs 5)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            pass


def _files(table_path: str, actions) -> list:
    from urllib.parse import unquote

    return [os.path.join(table_path, unquote(a["path"])) for a in actions]


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def floors(spark, table_path: str, scanned: list, op: str, commit: tuple, scratch: str) -> dict:
    """Seconds per phase for plain tools doing the statement's data work (module docstring);
    ``scanned``: the data files the statement had to read (before it ran)."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    _, adds, removes, text = commit
    removed = {r["path"] for r in removes}
    new_files = _files(table_path, [a for a in adds if a["path"] not in removed])
    out = {"source": _timed(lambda: spark.table("bench_source").write.format("noop").mode("overwrite").save())
           if op == "MERGE" else 0.0}
    rows = spark.read.parquet(*scanned) if scanned else None
    if rows is None:
        out["find"] = 0.0
    elif op == "MERGE":  # the matched rows' every column: their new versions are written
        keys = F.broadcast(spark.table("bench_source").select(F.col("id").alias("sid")))
        found = rows.select("*", F.col("_metadata.row_index").alias("r")).join(keys, F.col("id") == F.col("sid"))
        out["find"] = _timed(lambda: found.write.format("noop").mode("overwrite").save())
    else:  # DELETE reads the predicate's column; UPDATE every column of the rows it rewrites
        pred = "key % 100 = 0" if op == "UPDATE" else "key % 1000 = 7"
        found = rows.select("*" if op == "UPDATE" else "key", F.col("_metadata.row_index").alias("r")).where(pred)
        out["find"] = _timed(lambda: found.write.format("noop").mode("overwrite").save())
    dv_bytes = sum((a.get("deletionVector") or {}).get("sizeInBytes", 0) + 4 for a in adds
                   if (a.get("deletionVector") or {}).get("storageType") == "u")
    payload = os.urandom(dv_bytes)
    dv_path = os.path.join(scratch, f"dv-{time.time_ns()}.bin")

    def write_dv():
        with open(dv_path, "wb") as fh:
            fh.write(payload)

    out["dv"] = _timed(write_dv) if dv_bytes else 0.0
    if new_files:
        written = spark.read.parquet(*new_files).cache()
        written.count()
        dest = os.path.join(scratch, f"floor-{time.time_ns()}")
        out["write"] = _timed(lambda: written.write.parquet(dest))
        written.unpersist()
        shutil.rmtree(dest, ignore_errors=True)
        out["stats"] = _timed(lambda: [pq.read_metadata(p) for p in new_files])
    else:
        out["write"] = out["stats"] = 0.0
    commit_path = os.path.join(scratch, f"commit-{time.time_ns()}.json")

    def write_commit():
        fd = os.open(commit_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    out["commit"] = _timed(write_commit)
    for p in (dv_path, commit_path):
        if os.path.exists(p):
            os.remove(p)
    return out


# --------------------------------------------------------------------------- one table size

OPS = [
    ("UPDATE", "UPDATE 1%", "UPDATE bench SET v1 = v1 + 1, v2 = 0 WHERE key % 100 = 0"),
    ("DELETE", "DELETE 0.1%", "DELETE FROM bench WHERE key % 1000 = 7"),
    ("MERGE", "MERGE upsert", "MERGE INTO bench t USING bench_source s ON s.id = t.id "
                              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"),
]


def run_size(s, spark, scratch: str, rows: int, files: int, args) -> dict:
    """Every round of one table size; returns the medians (see ``summarise``)."""
    label = f"{rows:,} rows" + (f", ~{files:,} files" if files else "")
    pristine = os.path.join(scratch, f"pristine-{rows}-{files}")
    source = os.path.join(scratch, f"source-{rows}.parquet")
    wh = os.path.join(scratch, "warehouse")
    iso_path = os.path.join(wh, "default", "bench")
    drs_path = os.path.join(scratch, "deltalake", "bench")
    t = time.perf_counter()
    if not os.path.exists(pristine):
        _child("--build", pristine, str(rows), str(args.dates), str(files))
    n_source = args.source_rows or max(rows // 100, 2)
    if not os.path.exists(source):
        _child("--build-source", source, str(rows), str(args.dates), str(n_source))
    n_files = len(glob.glob(os.path.join(pristine, "**", "*.parquet"), recursive=True))
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(pristine, "**", "*.parquet"), recursive=True))
    print(f"\n== {label}: {n_files:,} files, {size / 1e6:,.0f} MB Parquet, MERGE source {n_source:,} rows "
          f"(built in {time.perf_counter() - t:.0f} s); {args.repeat} round(s)", flush=True)
    spark.read.parquet(source).createOrReplaceTempView("bench_source")
    jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    rounds = []
    warm, args.warm_up = args.warm_up, 0  # the first table size only
    for rnd in range(-warm, args.repeat):
        for path in (iso_path, drs_path):
            shutil.rmtree(path, ignore_errors=True)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            shutil.copytree(pristine, path)
        if not args.copy_on_write:
            s.execute("ALTER TABLE bench SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
        os.sync()  # the copies' dirty pages would otherwise be flushed during the first statement
        s.execute("SELECT count(*) FROM bench").rows  # warm: first plans of this table
        spark.table("bench_source").count()
        reset_peaks([os.getpid(), jvm_pid])
        per_op = {}
        for op, _name, sql in OPS:
            t = time.perf_counter()
            res = s.execute(sql)
            wall = time.perf_counter() - t
            per_op[op] = {"iso_s": wall, "phases": {k: v / 1000 for k, v in res.phases.items()},
                          "metrics": dict(res.metrics)}
        if rnd < 0:
            print(f"warm-up round (not counted): " + ", ".join(f"{op} {v['iso_s']:.2f} s" for op, v in per_op.items()),
                  flush=True)
            continue
        mem = {"python_mb": _status_kb(os.getpid(), "VmHWM") / 1024, "jvm_mb": _status_kb(jvm_pid, "VmHWM") / 1024}
        drs = _child("--drs-worker", drs_path, source)
        # floors after all three statements (the memory figure is the statements' own), from
        # isolde's log: each statement's commit and the files live before it
        for i, (op, _name, _sql) in enumerate(OPS):
            version = _version_of(iso_path, i)
            commit = _commit_at(iso_path, version)
            scanned = _files(iso_path, [{"path": p} for p in _files_at(iso_path, version - 1)])
            per_op[op]["floor"] = floors(spark, iso_path, scanned, op, commit, scratch)
            per_op[op]["floor"]["plan"] = drs["ops"][op]["load_s"]
            per_op[op]["drs_s"] = drs["ops"][op]["op_s"]
            per_op[op]["drs_metrics"] = drs["ops"][op]["metrics"]
        check = (_checked(iso_path), _checked(drs_path)) if rnd == args.repeat - 1 else None
        rounds.append({"ops": per_op, "mem": mem, "drs_rss_mb": drs["peak_rss_mb"], "check": check})
        print(f"round {rnd + 1}: " + ", ".join(
            f"{op} {per_op[op]['iso_s']:.2f} s (delta-rs {per_op[op]['drs_s']:.2f} s)" for op, _, _ in OPS), flush=True)
    return summarise(label, rows, files, n_files, rounds)


def _version_of(path: str, i: int) -> int:
    """The version of the i-th statement of the round: the log's last 3 commits are the three."""
    logs = sorted(glob.glob(os.path.join(path, "_delta_log", "*.json")))
    return int(os.path.basename(logs[-len(OPS) + i]).split(".")[0])


def _commit_at(path: str, version: int) -> tuple:
    info, adds, removes = {}, [], []
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        text = fh.read()
    for line in text.splitlines():
        a = json.loads(line)
        if "commitInfo" in a:
            info = a["commitInfo"]
        elif "add" in a:
            adds.append(a["add"])
        elif "remove" in a:
            removes.append(a["remove"])
    return info, adds, removes, text


def _files_at(path: str, version: int) -> list:
    from deltalake import DeltaTable

    return DeltaTable(path, version=version).get_add_actions(flatten=True).column("path").to_pylist()


def _med(values):
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def summarise(label: str, rows: int, files: int, n_files: int, rounds: list) -> dict:
    out = {"label": label, "rows": rows, "files_asked": files, "files": n_files, "ops": {}}
    for op, name, _ in OPS:
        per = [r["ops"][op] for r in rounds]
        out["ops"][op] = {
            "name": name,
            "iso_s": _med([p["iso_s"] for p in per]),
            "drs_s": _med([p["drs_s"] for p in per]),
            "ratio": _med([p["iso_s"] / p["drs_s"] for p in per if p["drs_s"]]),
            "phases": {k: _med([p["phases"].get(k, 0.0) for p in per]) for k in PHASES},
            "floor": {k: _med([p["floor"].get(k, 0.0) for p in per]) for k in PHASES},
            "metrics": per[-1]["metrics"], "drs_metrics": per[-1]["drs_metrics"],
        }
        out["ops"][op]["floor_s"] = sum(out["ops"][op]["floor"].values())
    out["python_mb"] = max(r["mem"]["python_mb"] for r in rounds)
    out["jvm_mb"] = max(r["mem"]["jvm_mb"] for r in rounds)
    out["drs_rss_mb"] = max(r["drs_rss_mb"] for r in rounds)
    out["check"] = rounds[-1]["check"]
    return out


def print_size(res: dict) -> None:
    print(f"\n{res['label']} ({res['files']:,} files): medians, seconds")
    print(f"{'statement':<14}{'isolde':>8}{'delta-rs':>10}{'iso/drs':>9}{'floor':>8}{'iso/floor':>10}   "
          + "  ".join(f"{k:>13}" for k in PHASES))
    for op, name, _ in OPS:
        r = res["ops"][op]
        cells = "  ".join(f"{r['phases'].get(k, 0.0):>6.3f}/{r['floor'].get(k, 0.0):<6.3f}" for k in PHASES)
        print(f"{name:<14}{r['iso_s']:>8.2f}{r['drs_s']:>10.2f}{r['ratio']:>9.2f}{r['floor_s']:>8.2f}"
              f"{r['iso_s'] / r['floor_s'] if r['floor_s'] else float('nan'):>10.2f}   {cells}")
    print("(phase cells: isolde / floor; plan's floor is delta-rs loading the table)")
    keys = ("numUpdatedRows", "numDeletedRows", "numTargetRowsUpdated", "numTargetRowsInserted",
            "numDeletionVectorsAdded", "numAddedFiles", "numRemovedFiles")
    for op, name, _ in OPS:
        m = res["ops"][op]["metrics"]
        print(f"  {name}: isolde {({k: m[k] for k in keys if k in m})}; delta-rs {res['ops'][op]['drs_metrics']}")
    print(f"peak memory during the statements: isolde Python driver {res['python_mb']:,.0f} MB + JVM "
          f"{res['jvm_mb']:,.0f} MB; delta-rs process {res['drs_rss_mb']:,.0f} MB")
    if res["check"]:
        iso, drs = res["check"]
        verdict = "not compared" if isinstance(iso, str) or isinstance(drs, str) else \
            "same" if iso == drs else "DIFFERENT"
        print(f"check (read by delta-rs): isolde {iso}; delta-rs {drs} -> {verdict}")


def plot(results: list, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(no plot: matplotlib is not installed; pip install matplotlib to get {path})")
        return
    base = sorted((r for r in results if not r["files_asked"]), key=lambda r: r["rows"])  # (run in any order)
    many = sorted((r for r in results if r["files_asked"]), key=lambda r: r["rows"])
    fig, axes = plt.subplots(1, len(OPS), figsize=(5 * len(OPS), 4.2), sharey=True)
    for ax, (op, name, _) in zip(axes, OPS):
        for key, label, style in (("iso_s", "isolde (deletion vectors)", "o-"), ("drs_s", "delta-rs", "s-"),
                                  ("floor_s", "floor (sum of phase floors)", "^--")):
            ax.plot([r["rows"] for r in base], [r["ops"][op][key] for r in base], style, label=label)
            if many:
                ax.plot([r["rows"] for r in many], [r["ops"][op][key] for r in many], style[0], mfc="none", ms=11,
                        color=ax.lines[-1].get_color(), label=f"{label.split(' (')[0]}, {many[0]['files']:,} files")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(name)
        ax.set_xlabel("table rows")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("seconds (warm median)")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def report(results: list, plot_path) -> None:
    """The scaling summary over table sizes (and the plot)."""
    if len(results) > 1:
        print("\nscaling (warm medians, seconds: isolde / delta-rs [ratio])")
        print(f"{'table':<28}" + "".join(f"{name:>24}" for _, name, _ in OPS) + f"{'py+JVM MB':>12}{'drs MB':>9}")
        for r in results:
            print(f"{r['label']:<28}" + "".join(
                f"{r['ops'][op]['iso_s']:>10.2f} / {r['ops'][op]['drs_s']:>6.2f} [{r['ops'][op]['ratio']:.2f}]"
                for op, _, _ in OPS) + f"{r['python_mb'] + r['jvm_mb']:>12,.0f}{r['drs_rss_mb']:>9,.0f}")
    if plot_path:
        plot(results, plot_path)


def _int_list(text: str) -> list:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("--build", "--build-source", "--drs-worker", "--check"):
        return _child_main(argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1000000", help="table sizes, comma-separated (1000000,10000000)")
    ap.add_argument("--files", default="0", help="files per size (comma-separated, aligned with --rows; "
                                                 "0 = delta-rs's default, one per partition)")
    ap.add_argument("--extra", default="", help="more rows:files configurations, e.g. 10000000:1000")
    ap.add_argument("--dates", type=int, default=10)
    ap.add_argument("--source-rows", type=int, default=None, help="MERGE source rows (default rows/100)")
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temp dir, removed after)")
    ap.add_argument("--copy-on-write", action="store_true", help="isolde without deletion vectors")
    ap.add_argument("--deletion-vectors", action="store_true", help="(the default; kept for old command lines)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds per size, from fresh copies; medians shown")
    ap.add_argument("--warm-up", type=int, default=1,
                    help="untimed rounds of isolde's statements before the first size (the JIT compiles Spark's "
                         "Parquet read and write code; see benchmarks/first_statement.py for a cold start)")
    ap.add_argument("--plot", default=None, help="PNG of time against rows (log-log), matplotlib")
    ap.add_argument("--json", default=None, help="write the medians here")
    ap.add_argument("--from-json", default=None,
                    help="comma-separated --json outputs of earlier runs: print their tables, the scaling "
                         "summary and --plot, without running anything")
    args = ap.parse_args(argv)
    if args.from_json:
        results = []
        for path in args.from_json.split(","):
            with open(path) as fh:
                results += json.load(fh)
        for res in results:
            print_size(res)
        report(results, args.plot)
        return 0

    sys.path.insert(0, os.path.dirname(HERE))
    import isolde
    from isolde.executor.runtime.spark import get_spark

    sizes = _int_list(args.rows)
    files = _int_list(args.files)
    files = files + [files[-1]] * (len(sizes) - len(files)) if files else [0] * len(sizes)
    configs = list(zip(sizes, files)) + [tuple(_int_list(x.replace(":", ","))) for x in args.extra.split() if x]
    scratch = args.dir or tempfile.mkdtemp(prefix="isolde-bench-dml-")
    os.makedirs(scratch, exist_ok=True)
    print(f"isolde {'copy-on-write' if args.copy_on_write else 'with deletion vectors'} vs delta-rs (copy-on-write); "
          f"JVM profile {os.environ.get('ISOLDE_JVM', 'throughput')} (ISOLDE_JVM); {os.cpu_count()} cores")
    try:
        spark = get_spark()
        s = isolde.connect(warehouse=os.path.join(scratch, "warehouse"), spark=spark)
        results = []
        for rows, n_files in configs:
            res = run_size(s, spark, scratch, rows, n_files, args)
            print_size(res)
            results.append(res)
        report(results, args.plot)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(results, fh, indent=1, default=str)
        return 0
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)


def _child_main(argv: list) -> int:
    kind, rest = argv[0], argv[1:]
    if kind == "--build":
        build_table(rest[0], int(rest[1]), int(rest[2]), int(rest[3]))
        print(json.dumps({}))
    elif kind == "--build-source":
        build_source(rest[0], int(rest[1]), int(rest[2]), int(rest[3]))
        print(json.dumps({}))
    elif kind == "--drs-worker":
        print(json.dumps(drs_worker(rest[0], rest[1])))
    else:
        print(json.dumps(table_check(rest[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
