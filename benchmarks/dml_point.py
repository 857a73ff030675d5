"""Point-statement latency of deletion-vector DML (issue 23): isolde vs plain Spark vs delta-rs.

    .venv/bin/python benchmarks/dml_point.py                # 200k rows, 30 rounds
    .venv/bin/python benchmarks/dml_point.py --rounds 50 --jobs   # + the Spark jobs of each statement

Table: id BIGINT, v DOUBLE, s STRING; 200k rows in TWO files, ids 0..99999 and 100000..199999,
so min/max statistics prune a point predicate to one file. isolde's copy has deletion vectors
on (the default); delta-rs gets the same rows in two files of its own (it never writes
deletion vectors: its UPDATE / DELETE / MERGE rewrite the 100k-row file).

Each round runs, on ids drawn without replacement (each statement finds its row), one each of
    UPDATE bench SET v = v + 1 WHERE id = X
    DELETE FROM bench WHERE id = X
    MERGE INTO bench t USING (VALUES (X, 0.5, 'm')) AS s(id, v, s) ON t.id = s.id
        WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *
    INSERT INTO bench VALUES (new id, 0.5, 'i')
    SELECT * FROM bench WHERE id = X            (collected)
through ``isolde.connect(...)`` (``execute`` for writes, ``sql(...).collect()`` for the query),
then the same on delta-rs, then the plain-Spark floor of each kind (in the same round, so the
machine's load is shared fairly):
    point SELECT       read the one file with the filter, collect
    DELETE             the same read selecting ``_metadata.row_index`` (the positions), collect
    UPDATE / MERGE     that read + a one-row ``df.write.parquet``
    INSERT             a one-row ``df.write.parquet``
The floor is no commit, no log, no statistics: what Spark alone costs for the statement's data
work. Printed per kind: p50 / p99 of isolde, floor and delta-rs, the ratios, and the number of
Spark jobs per statement (the DAG scheduler's job counter before / after, so jobs submitted from
other threads count too). Warm-up rounds (default 3) are not timed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("UPDATE", "DELETE", "MERGE", "INSERT", "SELECT")
HALF = 100_000


def build_half(lo: int, n: int):
    """One file's rows: ids lo..lo+n-1 and two payload columns."""
    import numpy as np
    import pyarrow as pa

    ids = np.arange(lo, lo + n, dtype=np.int64)
    return pa.table({"id": ids, "v": (ids % 997).astype(np.float64) / 7.0,
                     "s": pa.array([f"row-{i % 1000}" for i in ids.tolist()])})


def job_counter(spark):
    """A function returning how many Spark jobs were ever submitted in this JVM."""
    sched = spark.sparkContext._jsc.sc().dagScheduler()
    return lambda: int(sched.nextJobId())  # an AtomicInteger, which py4j hands over as an int


def pct(values: list, p: float) -> float:
    """The p-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def create_isolde_table(s, spark) -> str:
    """CREATE the deletion-vector table and INSERT each half as one file; returns its folder."""
    s.execute("CREATE TABLE bench (id BIGINT, v DOUBLE, s STRING)")
    for lo in (0, HALF):
        spark.createDataFrame(build_half(lo, HALF).to_pandas()).coalesce(1).createOrReplaceTempView("bench_half")
        s.execute("INSERT INTO bench SELECT * FROM bench_half")
    spark.catalog.dropTempView("bench_half")
    return s.execute("DESCRIBE DETAIL bench").first().location


def isolde_statements(s):
    def select(x, new):
        return s.sql(f"SELECT * FROM bench WHERE id = {x}").collect()

    return {
        "UPDATE": lambda x, new: s.execute(f"UPDATE bench SET v = v + 1 WHERE id = {x}"),
        "DELETE": lambda x, new: s.execute(f"DELETE FROM bench WHERE id = {x}"),
        "MERGE": lambda x, new: s.execute(
            f"MERGE INTO bench t USING (VALUES ({x}, 0.5, 'm')) AS src(id, v, s) ON t.id = src.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"),
        "INSERT": lambda x, new: s.execute(f"INSERT INTO bench VALUES ({new}, 0.5, 'i')"),
        "SELECT": select,
    }


def deltalake_statements(path: str):
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder, write_deltalake

    def row(x, text):
        return pa.table({"id": pa.array([x], pa.int64()), "v": pa.array([0.5]), "s": pa.array([text])})

    def merge(x, new):
        (DeltaTable(path).merge(source=row(x, "m"), predicate="t.id = src.id", source_alias="src", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())

    def select(x, new):
        return QueryBuilder().register("bench", DeltaTable(path)).execute(
            f"SELECT * FROM bench WHERE id = {x}").read_all()

    return {
        "UPDATE": lambda x, new: DeltaTable(path).update(updates={"v": "v + 1"}, predicate=f"id = {x}"),
        "DELETE": lambda x, new: DeltaTable(path).delete(f"id = {x}"),
        "MERGE": merge,
        "INSERT": lambda x, new: write_deltalake(path, row(new, "i"), mode="append"),
        "SELECT": select,
    }


def floor_statements(spark, files: list, scratch: str):
    """Plain Spark doing each statement's data work on the one file the id falls in."""
    from pyspark.sql import functions as F

    def one_file(x):
        return spark.read.parquet(files[0] if x < HALF else files[1])

    def find(x, positions):
        df = one_file(x).filter(F.col("id") == x)
        return df.select("_metadata.row_index").collect() if positions else df.collect()

    def tiny_write(x):
        out = os.path.join(scratch, f"floor-{time.time_ns()}")
        spark.createDataFrame([(x, 0.5, "f")], "id long, v double, s string").write.parquet(out)
        shutil.rmtree(out, ignore_errors=True)

    return {
        "UPDATE": lambda x, new: (find(x, True), tiny_write(x)),
        "DELETE": lambda x, new: find(x, True),
        "MERGE": lambda x, new: (find(x, True), tiny_write(x)),
        "INSERT": lambda x, new: tiny_write(new),
        "SELECT": lambda x, new: find(x, False),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ",".join(KINDS))
    ap.add_argument("--skip-deltalake", action="store_true")
    ap.add_argument("--skip-floor", action="store_true")
    ap.add_argument("--jobs", action="store_true", help="print the job counts of every timed statement")
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temp dir, removed after)")
    args = ap.parse_args(argv)
    kinds = [k.strip().upper() for k in args.kinds.split(",") if k.strip()]

    sys.path.insert(0, os.path.dirname(HERE))
    import numpy as np
    from deltalake import write_deltalake

    import isolde
    from isolde.executor.runtime.spark import get_spark

    scratch = args.dir or tempfile.mkdtemp(prefix="isolde-bench-point-")
    os.makedirs(scratch, exist_ok=True)
    try:
        spark = get_spark()
        s = isolde.connect(warehouse=os.path.join(scratch, "warehouse"), spark=spark)
        location = create_isolde_table(s, spark)
        location = location[5:] if location.startswith("file:") else location
        files = sorted(os.path.join(location, f) for f in os.listdir(location) if f.endswith(".parquet"))
        assert len(files) == 2, f"expected two data files, found {files}"
        drs = os.path.join(scratch, "deltalake", "bench")
        for lo in (0, HALF):
            write_deltalake(drs, build_half(lo, HALF), mode="append")
        print(f"table: {2 * HALF:,} rows in 2 files (ids split at {HALF:,}), deletion vectors on; "
              f"{args.rounds} timed rounds after {args.warmup} warm-up; JVM profile "
              f"{os.environ.get('ISOLDE_JVM', 'throughput')}; Spark {spark.version}")

        engines = {"isolde": isolde_statements(s)}
        if not args.skip_floor:
            engines["floor"] = floor_statements(spark, files, scratch)
        if not args.skip_deltalake:
            engines["delta-rs"] = deltalake_statements(drs)
        jobs_now = job_counter(spark)
        rng = np.random.default_rng(args.seed)
        per_round = sum(1 for k in kinds if k != "INSERT")
        ids = rng.permutation(2 * HALF)[: (args.rounds + args.warmup) * per_round].tolist()
        times = {(e, k): [] for e in engines for k in kinds}
        jobs = {k: [] for k in kinds}
        new_id = 10 * HALF
        for r in range(args.warmup + args.rounds):
            timed = r >= args.warmup
            order = list(kinds)
            rng.shuffle(order)
            for k in order:
                x = ids.pop() if k != "INSERT" else None
                new_id += 1
                for engine, statements in engines.items():
                    before = jobs_now()
                    t = time.perf_counter()
                    statements[k](x, new_id)
                    dt = time.perf_counter() - t
                    if timed:
                        times[(engine, k)].append(dt)
                        if engine == "isolde":
                            jobs[k].append(jobs_now() - before)

        if args.jobs:
            for k in kinds:
                print(f"jobs {k}: {jobs[k]}")
        head = f"{'statement':<8} {'isolde p50':>10} {'p99':>6} {'jobs':>6}"
        if "floor" in engines:
            head += f" {'floor p50':>10} {'p99':>6} {'/floor':>7}"
        if "delta-rs" in engines:
            head += f" {'delta-rs p50':>12} {'p99':>6} {'/delta-rs':>9}"
        print(head)
        for k in kinds:
            iso = times[("isolde", k)]
            p50 = statistics.median(iso)
            n_jobs = sorted(set(jobs[k]))
            line = f"{k:<8} {p50:>10.3f} {pct(iso, 99):>6.3f} {'/'.join(map(str, n_jobs)):>6}"
            if "floor" in engines:
                fl = times[("floor", k)]
                line += f" {statistics.median(fl):>10.3f} {pct(fl, 99):>6.3f} {p50 / statistics.median(fl):>6.2f}x"
            if "delta-rs" in engines:
                d = times[("delta-rs", k)]
                line += f" {statistics.median(d):>12.3f} {pct(d, 99):>6.3f} {p50 / statistics.median(d):>8.2f}x"
            print(line)
        return 0
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
