"""OPTIMIZE (bin-packing) benchmark: isolde vs delta-rs (`deltalake` optimize.compact) on
identical data in the same run, and a plain Spark floor.

    .venv/bin/python benchmarks/optimize.py                  # 10M rows in 200 files
    .venv/bin/python benchmarks/optimize.py --rows 2000000   # a quick look

Table: a (BIGINT, uniform), b (DOUBLE, uniform), c (STRING, 24 characters sharing a
16-character prefix); written once by delta-rs as --files appends (one small file each) and
copied for each engine (a DELETE first would not compare: delta-rs's DELETE already rewrites
the small files). Printed: wall time of each OPTIMIZE, files before/after, the ratio isolde /
delta-rs, and the floor: plain Spark reading the same rows and writing as many files as
isolde wrote (isolde / floor is what the compaction's own work costs: the per-bin sort that
fixes the row order the deletion-vector carry-over relies on, and the bookkeeping). Each run
ends with a check that both engines' tables hold the same rows (count and sums, by delta-rs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def build(path: str, rows: int, files: int, seed: int = 5) -> None:
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    rng = np.random.default_rng(seed)
    chunk = -(-rows // files)
    prefix = "customer-region-01"[:16]
    for i in range(files):
        n = min(chunk, rows - i * chunk)
        if n <= 0:
            break
        ids = np.arange(i * chunk, i * chunk + n, dtype=np.int64)
        data = pa.table({
            "id": ids,
            "a": rng.integers(0, 1 << 40, n, dtype=np.int64),
            "b": rng.random(n),
            "c": pa.array([f"{prefix}{x:08d}" for x in rng.integers(0, 10**8, n)]),
        })
        write_deltalake(path, data, mode="append")


def summary(path: str) -> tuple:
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    out = QueryBuilder().register("t", DeltaTable(path)).execute(
        "SELECT count(*) AS n, sum(a) AS a, sum(id) AS i FROM t").read_all()
    row = pa.table(out).to_pylist()[0]
    return row["n"], row["a"], row["i"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--dir", help="scratch folder (default: a temporary one, removed afterwards)")
    args = ap.parse_args(argv)

    sys.path.insert(0, ROOT)
    from deltalake import DeltaTable

    import isolde
    from isolde.executor.log import DeltaLog
    from isolde.executor.runtime.spark import get_spark

    scratch = args.dir or tempfile.mkdtemp(prefix="isolde-bench-optimize-")
    try:
        pristine = os.path.join(scratch, "pristine")
        t = time.perf_counter()
        build(pristine, args.rows, args.files)
        size = sum(os.path.getsize(os.path.join(pristine, n)) for n in os.listdir(pristine) if n.endswith(".parquet"))
        print(f"data: {args.rows:,} rows in {args.files} files, {size / 1e6:.0f} MB (built in "
              f"{time.perf_counter() - t:.1f} s); {os.cpu_count()} CPUs")
        wh = os.path.join(scratch, "wh")
        iso = os.path.join(wh, "default", "t")
        drs = os.path.join(scratch, "drs")
        shutil.copytree(pristine, iso)
        shutil.copytree(pristine, drs)
        spark = get_spark()
        s = isolde.connect(warehouse=wh, spark=spark)
        s.execute("ALTER TABLE t SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
        s.execute("SELECT count(*) FROM t").rows  # warm the JVM on this table
        # and its Parquet read, sort and write code, untimed: otherwise the first timed write pays
        # the optimising JIT's compiling of it
        s.sql("SELECT * FROM t").coalesce(1).sortWithinPartitions("id").write.mode("overwrite") \
            .parquet(os.path.join(scratch, "warm-up"))

        t = time.perf_counter()
        r = s.execute("OPTIMIZE t")
        iso_s = time.perf_counter() - t
        t = time.perf_counter()
        drs_metrics = DeltaTable(drs).optimize.compact()
        drs_s = time.perf_counter() - t

        # the floor: the same live rows read and written as as many files by plain Spark
        snap = DeltaLog.for_table(iso).update()
        added = len(snap.all_files)
        floor_out = os.path.join(scratch, "floor")
        t = time.perf_counter()
        s.sql("SELECT * FROM t VERSION AS OF {}".format(r.version - 1)).coalesce(max(1, added)) \
            .write.mode("overwrite").parquet(floor_out)
        floor_s = time.perf_counter() - t

        same = summary(iso) == summary(drs)
        print(f"isolde OPTIMIZE: {iso_s:.2f} s, {r.metrics['numRemovedFiles']} files -> {r.metrics['numAddedFiles']}")
        print(f"delta-rs optimize.compact: {drs_s:.2f} s, {drs_metrics.get('numFilesRemoved')} files -> "
              f"{drs_metrics.get('numFilesAdded')}")
        print(f"plain Spark read + write of the same rows into {added} file(s): {floor_s:.2f} s")
        print(f"ratio isolde / delta-rs: {iso_s / drs_s:.2f}x; isolde / floor: {iso_s / floor_s:.2f}x; "
              f"same rows: {'OK' if same else 'DIFFERENT'}")
        return 0 if same else 1
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
