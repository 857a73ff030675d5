"""INSERT and scan throughput: isolde (Spark) vs deltalake (delta-rs) on the same data, same run.

    .venv/bin/python benchmarks/insert_scan.py               # 1M rows (quick)
    .venv/bin/python benchmarks/insert_scan.py --rows 10000000
    .venv/bin/python benchmarks/insert_scan.py --with-10m     # 1M, then 10M

For each size N it measures, median of --repeat runs (default 3):
  insert   isolde: CREATE TABLE + INSERT INTO t SELECT ... FROM range(N) (rows generated
           inside Spark; ~8 files via spark.sql.files.maxRecordsPerFile)
           delta-rs: write_deltalake of the same rows as an in-memory Arrow table (generation
           excluded), target_file_size chosen for a similar file count
  select   a selective range query on the sorted id column: data skipping keeps 1 file
           (files read / files total reported for isolde)
  scan     full scan with an aggregate over every row (count, sum)
Spark start-up is excluded from the ratios and reported on its own (cold start to the first
result of `SELECT 1`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

COLUMNS_SQL = ("CAST(id AS BIGINT) AS id, CAST(id % 1000 AS INT) AS k, CAST(id AS DOUBLE) * 0.5 AS v, "
               "concat('s', CAST(id % 100 AS STRING)) AS s, date_add(DATE'2024-01-01', CAST(id % 365 AS INT)) AS day")


def arrow_rows(n: int):
    """The same rows as COLUMNS_SQL, built with Arrow compute (no Python objects per row)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = np.arange(n, dtype=np.int64)
    days = (np.datetime64("2024-01-01") + (ids % 365).astype("timedelta64[D]")).astype("datetime64[D]")
    s_values = pc.binary_join_element_wise(pa.scalar("s"), pc.cast(pa.array(ids % 100), pa.string()), "")
    return pa.table({
        "id": pa.array(ids),
        "k": pa.array((ids % 1000).astype(np.int32)),
        "v": pa.array(ids.astype(np.float64) * 0.5),
        "s": s_values,
        "day": pa.array(days, pa.date32()),
    })


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def median(xs):
    return statistics.median(xs)


def bench_size(session, n: int, repeat: int, workdir: str) -> dict:
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder, write_deltalake

    files = 8
    lo, hi = n // 2, n // 2 + 100
    sel_sql = f"SELECT count(*), sum(v) FROM {{t}} WHERE id BETWEEN {lo} AND {hi}"
    scan_sql = "SELECT count(*), sum(v), max(s) FROM {t}"
    res = {"rows": n, "isolde": {"insert": [], "select": [], "scan": []},
           "deltalake": {"insert": [], "select": [], "scan": []}}
    session.execute(f"SET spark.sql.files.maxRecordsPerFile = {max(n // files, 1)}")
    data = arrow_rows(n)
    for r in range(repeat):
        name = f"bench_{n}_{r}"
        session.execute(f"CREATE TABLE {name} (id BIGINT, k INT, v DOUBLE, s STRING, day DATE)")
        # range() partitions are contiguous id ranges: min/max stats let the selective query skip files
        t, _ = timed(lambda: session.execute(
            f"INSERT INTO {name} SELECT {COLUMNS_SQL} FROM range(0, {n})"))
        res["isolde"]["insert"].append(t)
        t, out = timed(lambda: session.execute(sel_sql.format(t=name)).rows)
        res["isolde"]["select"].append(t)
        res["isolde_select_result"] = out
        res["isolde_files"] = session.last_metrics.get("files_read"), session.last_metrics.get("files_total")
        t, out = timed(lambda: session.execute(scan_sql.format(t=name)).rows)
        res["isolde"]["scan"].append(t)
        res["isolde_scan_result"] = out

        path = os.path.join(workdir, f"rs_{n}_{r}")
        size = max(data.nbytes // files // 2, 1 << 20)
        t, _ = timed(lambda: write_deltalake(path, data, target_file_size=size))
        res["deltalake"]["insert"].append(t)
        dt = DeltaTable(path)
        res["deltalake_files"] = len(dt.file_uris())

        def rs(sql):
            return pa.table(QueryBuilder().register("t", DeltaTable(path)).execute(sql).read_all()).to_pylist()

        t, out = timed(lambda: rs(sel_sql.format(t="t")))
        res["deltalake"]["select"].append(t)
        res["deltalake_select_result"] = out
        t, out = timed(lambda: rs(scan_sql.format(t="t")))
        res["deltalake"]["scan"].append(t)
        shutil.rmtree(path, ignore_errors=True)
        session.execute(f"DROP TABLE {name}")
    session.execute("RESET spark.sql.files.maxRecordsPerFile")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--with-10m", action="store_true", help="also run 10M rows after --rows")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default=None)
    args = ap.parse_args(argv)

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import isolde

    workdir = tempfile.mkdtemp(prefix="isolde-bench-")
    try:
        t0 = time.perf_counter()
        session = isolde.connect(warehouse=os.path.join(workdir, "wh"), master=args.master)
        session.execute("SELECT 1").rows
        cold = time.perf_counter() - t0
        print(f"Spark cold start to first result: {cold:.2f} s (excluded below)")
        sizes = [args.rows] + ([10_000_000] if args.with_10m and args.rows != 10_000_000 else [])
        for n in sizes:
            res = bench_size(session, n, args.repeat, workdir)
            print(f"\n== {n:,} rows x 5 columns, median of {args.repeat} ==")
            print(f"{'':10}{'isolde':>10}{'delta-rs':>10}{'isolde/delta-rs':>18}")
            for step in ("insert", "select", "scan"):
                a, b = median(res["isolde"][step]), median(res["deltalake"][step])
                print(f"{step:10}{a:9.3f}s{b:9.3f}s{a / b:17.2f}x")
            fr, ft = res["isolde_files"]
            print(f"data skipping (isolde): selective query read {fr} of {ft} files; "
                  f"delta-rs table has {res['deltalake_files']} files")
            print(f"rows/s insert: isolde {n / median(res['isolde']['insert']):,.0f}, "
                  f"delta-rs {n / median(res['deltalake']['insert']):,.0f}")
            print(f"check: isolde select {res['isolde_select_result']} / delta-rs {res['deltalake_select_result']}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
