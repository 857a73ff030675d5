"""The first statement of a fresh JVM against a warm one, with and without the warm-up.

    python benchmarks/first_statement.py [--rows 2000000] [--repeat 4]

A deletion-vector table of ``--rows`` rows (10 date partitions) is written once. Then, for each
statement kind (DELETE 0.1%, UPDATE 1%, MERGE upsert of rows/100 keys from
a subquery on the table, and from a staging table) and each mode, a fresh
Python + JVM process runs the statement ``--repeat`` times on different keys, on a copy of the
table: ``cold`` starts at once, ``warm-up`` first lets executor/runtime/warmup.py finish (what a REPL user
gets while typing). Printed: the first run, the median of the others, and their ratio -- the
issue's target is a first statement within 1.3x of a warm one. Spark start and the warm-up
itself are printed apart: they are not on a statement's clock.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

STATEMENTS = {
    "DELETE": "DELETE FROM t WHERE k = {i} AND id % 10 = 0",             # 0.1% of the rows
    "UPDATE": "UPDATE t SET v = v + 1 WHERE id % 100 = {i}",             # 1%
    "MERGE": ("MERGE INTO t USING (SELECT id, k, v + 1 AS v, s, d FROM t WHERE id % 100 = {i} AND id % 7 = 0 "
              "UNION ALL SELECT {rows} + {i} * 1000000 + id, 0, 0.0, 'new', DATE'2024-01-01' FROM range({new})) src "
              "ON t.id = src.id WHEN MATCHED THEN UPDATE SET v = src.v WHEN NOT MATCHED THEN INSERT *"),
    # the source is another Delta table (a staging table): rows/100 of its rows per run, a quarter matched
    "MERGE-table": ("MERGE INTO t USING (SELECT id, k, v, s, d FROM staging WHERE g = {i}) src ON t.id = src.id "
                    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"),
}


def make_table(warehouse: str, rows: int) -> None:
    import isolde

    s = isolde.connect(warehouse=warehouse)
    s.execute("CREATE TABLE t (id BIGINT, k BIGINT, v DOUBLE, s STRING, d DATE) PARTITIONED BY (d)")
    s.execute(f"INSERT INTO t SELECT id, id % 1000, id * 0.5, concat('s', id), "
              f"date_add(DATE'2024-01-01', CAST(id % 10 AS INT)) FROM range({rows})")
    # staging: rows/100 rows per run g; a quarter of them keys of t (id * 25 < rows), the rest new keys
    s.execute(f"CREATE TABLE staging AS SELECT CAST((id div 2) % 8 AS INT) + 1 AS g, "
              f"CASE WHEN id % 2 = 0 THEN id * 25 ELSE {rows} * 10 + id END AS id, id % 1000 AS k, id * 0.25 AS v, "
              f"concat('n', id) AS s, date_add(DATE'2024-01-01', CAST(id % 10 AS INT)) AS d FROM range({rows // 100 * 8})")


def child(warehouse: str, kind: str, rows: int, repeat: int, warm_up: bool) -> None:
    import isolde

    t0 = time.perf_counter()
    s = isolde.connect(warehouse=warehouse, warm_up=warm_up)
    s.wait_ready()
    started = time.perf_counter() - t0
    warm_s = None
    if warm_up:
        s.warm_up.wait()
        warm_s = s.warm_up.elapsed_s
    times = []
    for i in range(repeat):
        sql = STATEMENTS[kind].format(i=i + 1, rows=rows, new=max(1, rows // 1000))
        t = time.perf_counter()
        s.execute(sql)
        times.append(time.perf_counter() - t)
    print(json.dumps({"start_s": started, "warm_up_s": warm_s, "times": times}))


def run_child(base: str, kind: str, rows: int, repeat: int, warm_up: bool) -> dict:
    copy = tempfile.mkdtemp(prefix="isolde-first-")
    try:
        shutil.copytree(base, os.path.join(copy, "wh"))
        out = subprocess.run([sys.executable, __file__, "--child", kind, "--warehouse", os.path.join(copy, "wh"),
                              "--rows", str(rows), "--repeat", str(repeat)] + (["--warm-up"] if warm_up else []),
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--repeat", type=int, default=4)
    p.add_argument("--child")
    p.add_argument("--warehouse")
    p.add_argument("--warm-up", action="store_true")
    p.add_argument("--kinds", default=",".join(STATEMENTS), help="which statements (default: all)")
    a = p.parse_args()
    if a.child:
        child(a.warehouse, a.child, a.rows, a.repeat, a.warm_up)
        return
    base = tempfile.mkdtemp(prefix="isolde-first-base-")
    try:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {HERE!r}); import first_statement as f; "
                        f"f.make_table({os.path.join(base, 'wh')!r}, {a.rows})"], check=True, capture_output=True)
        print(f"table: {a.rows:,} rows written in {time.perf_counter() - t:.1f} s")
        print(f"{'statement':<12} {'mode':<8} {'start s':>8} {'warm-up s':>9} {'first s':>8} {'warm s':>7} {'first/warm':>10}")
        for kind in a.kinds.split(","):
            for warm_up in (False, True):
                r = run_child(os.path.join(base, "wh"), kind, a.rows, a.repeat, warm_up)
                first, rest = r["times"][0], statistics.median(r["times"][1:])
                wu = f"{r['warm_up_s']:.1f}" if r["warm_up_s"] is not None else "-"
                print(f"{kind:<12} {'warm-up' if warm_up else 'cold':<8} {r['start_s']:>8.1f} {wu:>9} {first:>8.2f} "
                      f"{rest:>7.2f} {first / rest:>9.2f}x", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
