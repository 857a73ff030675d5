"""isolde against the reference engine, Delta Lake on Spark, in ONE SparkSession (issue 56).

    .venv-ref/bin/python benchmarks/reference.py                     # every shape, full size
    .venv-ref/bin/python benchmarks/reference.py --quick             # tiny sizes, 1 round (smoke)
    .venv-ref/bin/python benchmarks/reference.py --only dml --rows 1000000 --rounds 3

The session is Delta's (DeltaSparkSessionExtension + DeltaCatalog, tests/helpers/delta_spark.py)
and isolde connects to it with ``spark=``: both engines run on the same Spark version, JVM,
flags, data and machine. Each round runs isolde's statement and then Delta's (the order flips
every round, so neither always runs second on a warmer cache), each on its OWN copy of the same
table (data files hard-linked, log copied: both start from identical state; a new folder every
round, so neither engine's log cache sees a stale table). Delta names a copy by path
(delta.`/path`), isolde by its name in isolde's warehouse. delta-rs (``deltalake``) runs the
shape too where it can, on a copy of its own, after the two.

Shapes (--only, comma-separated):
    dml       UPDATE 1% / DELETE 0.1% / MERGE upsert of rows/100 rows (half matched) into --rows rows
              (id, key, date partition of 10 values, v1..v3 DOUBLE; deletion vectors on), on a table
              written by Delta-Spark and on one written by isolde; MERGE's source a temp view over a
              local pandas DataFrame, a Delta table, and a temp view over Parquet files
    point     UPDATE / DELETE / SELECT of one row of a 200k-row deletion-vector table (p50)
    optimize  OPTIMIZE and OPTIMIZE ZORDER BY (a, b) of --opt-files small files (same target file
              size for both), then the share of files a 0.1%-wide range on a, and on b, must read
    writers   4 writers UPDATE-ing disjoint rows of one file for --seconds: commits/s and conflicts,
              isolde (row-level checks) vs Delta (file level), 4 threads in one process and 4
              processes (each its own Delta session, local[1])
    insert    one-row INSERT latency (p50)
    snapshot  a 2,000-version log (checkpoint every 10): DESCRIBE DETAIL, and the first query, on a
              fresh copy (isolde vs Delta vs delta-rs's DeltaTable() / its first query)
    first     a fresh process's first statement: isolde.connect + SELECT vs a Delta session + the
              same SELECT, from process launch to the rows

Printed per shape: isolde and Delta times of the first round and the median of the rest (warm),
their ratio (warm; first in brackets), the goal (issue 56: <= 1.0x Delta's time everywhere,
<= 0.7x on MERGE, >= 3x Delta's commits/s for the writers), and delta-rs's time and ratio. For a
missed goal, isolde's phase breakdown (``CommitResult.phases``, executor/runtime/phases.py, warm
medians). All of it also as JSON (--json, default benchmarks/out/reference[-quick].json).
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
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (ROOT, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

SHAPES = ("dml", "point", "optimize", "writers", "insert", "snapshot", "first")
GOAL_TIME, GOAL_MERGE, GOAL_WRITERS = 1.0, 0.7, 3.0
PHASES = ("plan", "source", "find", "dv", "write", "stats", "commit")


def ref(path: str) -> str:
    from tests.helpers.reference import ref as _ref

    return _ref(path)


def med(xs):
    xs = [x for x in xs if x is not None and x == x]
    return statistics.median(xs) if xs else None


def link_copy(src: str, dst: str) -> str:
    """A table folder's copy: data and deletion-vector files hard-linked (no engine rewrites
    one in place), the log copied (``_last_checkpoint`` is rewritten in place)."""
    for root, _dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        in_log = rel.split(os.sep)[0] == "_delta_log"
        for f in files:
            a, b = os.path.join(root, f), os.path.join(dst, rel, f)
            shutil.copy2(a, b) if in_log else os.link(a, b)
    return dst


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def phases_of(result) -> dict:
    return {k: v / 1000 for k, v in (getattr(result, "phases", None) or {}).items()}


class Results:
    """Rows of the final table, each: shape, unit, isolde / Delta / delta-rs values per round."""

    def __init__(self):
        self.rows: list[dict] = []

    def add(self, shape: str, iso: list, delta: list, drs=None, goal: float = GOAL_TIME, unit: str = "s",
            phases=None, note: str = "", higher_is_better: bool = False, **extra) -> dict:
        def split(xs):
            if not xs:
                return None, None
            return xs[0], med(xs[1:]) if len(xs) > 1 else xs[0]

        (i1, iw), (d1, dw) = split(iso), split(delta)
        r1, rw = split(drs) if isinstance(drs, list) else (None, None)
        ratio = iw / dw if iw is not None and dw else None
        met = None if ratio is None else (ratio >= goal if higher_is_better else ratio <= goal)
        row = {"shape": shape, "unit": unit, "iso": iso, "delta": delta, "drs": drs, "iso_first": i1, "iso_warm": iw,
               "delta_first": d1, "delta_warm": dw, "ratio": ratio,
               "ratio_first": i1 / d1 if i1 is not None and d1 else None, "goal": goal,
               "higher_is_better": higher_is_better, "met": met, "drs_first": r1, "drs_warm": rw,
               "ratio_drs": iw / rw if iw is not None and rw else None, "note": note,
               "phases": {k: med([p.get(k, 0.0) for p in phases[1:] or phases]) for k in PHASES} if phases else None,
               **extra}
        self.rows.append(row)
        print(f"  {line(row)}", flush=True)
        return row


def fmt(x, unit="s"):
    if x is None:
        return "-"
    return f"{x:.2f}/s" if unit == "/s" else f"{x * 1000:.0f}ms" if x < 1 else f"{x:.2f}s"


def line(r: dict) -> str:
    u = r["unit"]
    ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x ({r['ratio_first']:.2f}x)" \
        if r["ratio_first"] is not None else f"{r['ratio']:.2f}x"
    goal = (">= " if r["higher_is_better"] else "<= ") + f"{r['goal']:.1f}x"
    met = "" if r["met"] is None else "met" if r["met"] else "MISSED"
    drs = r["drs"] if isinstance(r["drs"], str) else fmt(r["drs_warm"], u)
    rdrs = "-" if r["ratio_drs"] is None else f"{r['ratio_drs']:.2f}x"
    return (f"{r['shape']:<46}{fmt(r['iso_first'], u):>9}{fmt(r['iso_warm'], u):>9}{fmt(r['delta_first'], u):>9}"
            f"{fmt(r['delta_warm'], u):>9}{ratio:>16}{goal:>9}{met:>7}   {drs:>9}{rdrs:>8}"
            + (f"  {r['note']}" if r["note"] else ""))


HEADER = (f"{'shape':<46}{'iso 1st':>9}{'iso warm':>9}{'Dlt 1st':>9}{'Dlt warm':>9}{'iso/Delta (1st)':>16}"
          f"{'goal':>9}{'':>7}   {'delta-rs':>9}{'iso/drs':>8}")


# --------------------------------------------------------------------------- context

class Bench:
    def __init__(self, args, scratch: str):
        import isolde
        from tests.helpers.delta_spark import delta_session

        self.args, self.scratch = args, scratch
        self.spark = delta_session()
        self.wh = os.path.join(scratch, "wh")
        os.makedirs(os.path.join(self.wh, "default"), exist_ok=True)
        self.s = isolde.connect(warehouse=self.wh, spark=self.spark)
        self.results = Results()
        self.n = 0

    def warm_up(self) -> float:
        """Untimed: each engine's CREATE / INSERT / UPDATE / DELETE / MERGE / OPTIMIZE / SELECT once on
        a small table of its own, so the JVM has loaded and compiled both write paths before any
        shape (a cold process is the "first" shape's business)."""
        t = time.perf_counter()
        self.s.execute("CREATE TABLE warm (id BIGINT, v DOUBLE) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
        path = self.other_copy(self.iso_location("warm"), "warm_d")
        src = "(SELECT id, id * 2.0 AS v FROM range(50, 150)) s"
        for t_iso, run in (("warm", self.s.execute), (ref(path), self.delta)):
            run(f"INSERT INTO {t_iso} SELECT id, id * 0.5 FROM range(100)")
            run(f"UPDATE {t_iso} SET v = v + 1 WHERE id % 10 = 0")
            run(f"DELETE FROM {t_iso} WHERE id % 10 = 1")
            run(f"MERGE INTO {t_iso} t USING {src} ON s.id = t.id WHEN MATCHED THEN UPDATE SET * "
                "WHEN NOT MATCHED THEN INSERT *")
            run(f"OPTIMIZE {t_iso}")
            run(f"SELECT count(*), sum(v) FROM {t_iso}")
        return time.perf_counter() - t

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n}"

    def iso_copy(self, src: str, prefix: str) -> tuple[str, str]:
        name = self.fresh(prefix)
        return name, link_copy(src, os.path.join(self.wh, "default", name))

    def other_copy(self, src: str, prefix: str) -> str:
        return link_copy(src, os.path.join(self.scratch, "copies", self.fresh(prefix)))

    def delta(self, sql: str):
        return self.spark.sql(sql).collect()

    def iso_location(self, name: str) -> str:
        return os.path.join(self.wh, "default", name)

    def rounds(self):
        return range(self.args.rounds)


def alternate(rnd: int, iso_fn, delta_fn):
    """Run both, isolde first on even rounds, Delta first on odd ones; returns their results."""
    if rnd % 2 == 0:
        a = iso_fn()
        return a, delta_fn()
    b = delta_fn()
    return iso_fn(), b


def rmtree(*paths):
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)


# --------------------------------------------------------------------------- dml

DML = [
    ("UPDATE 1%", "UPDATE {t} SET v1 = v1 + 1, v2 = 0 WHERE key % 100 = 0", "UPDATE", GOAL_TIME),
    ("DELETE 0.1%", "DELETE FROM {t} WHERE key % 1000 = 7", "DELETE", GOAL_TIME),
    ("MERGE 1% (temp view, pandas)", "MERGE INTO {t} t USING ref_src s ON s.id = t.id "
     "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *", "MERGE", GOAL_MERGE),
    ("MERGE 1% (Delta table)", "MERGE INTO {t} t USING {src} s ON s.id = t.id "
     "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *", "MERGE", GOAL_MERGE),
    ("MERGE 1% (Parquet files)", "MERGE INTO {t} t USING ref_src_pq s ON s.id = t.id "
     "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *", "MERGE", GOAL_MERGE),
]
DML_COLS = "id BIGINT, key BIGINT, date DATE, v1 DOUBLE, v2 DOUBLE, v3 DOUBLE"


def merge_source(rows: int, seed: int = 11):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    n = max(rows // 100, 2)
    ids = np.concatenate([rng.choice(rows, n // 2, replace=False), np.arange(rows, rows + n - n // 2)]).astype("int64")
    day0 = np.datetime64("2024-01-01")
    return pd.DataFrame({"id": ids, "key": rng.integers(0, 1_000_000, n, dtype=np.int64),
                         "date": [(day0 + int(i % 10)).astype(object) for i in ids],
                         "v1": rng.random(n), "v2": rng.random(n), "v3": rng.random(n)})


def table_check(b: Bench, path: str) -> list:
    """(rows, round(sum(v1), 3)) as Delta-Spark reads the table."""
    r = b.delta(f"SELECT count(*) AS n, round(sum(v1), 3) AS s FROM {ref(path)}")[0]
    return [r["n"], r["s"]]


def bench_dml(b: Bench):
    import pyarrow as pa
    from dml import DRS_OPS

    rows, spark = b.args.rows, b.spark
    t0 = time.perf_counter()
    staging = os.path.join(b.scratch, "dml_staging")
    spark.sql(f"SELECT id, CAST(floor(rand(7) * 1000000) AS BIGINT) AS key, "
              f"date_add(DATE'2024-01-01', CAST(id % 10 AS INT)) AS date, rand(1) AS v1, rand(2) AS v2, "
              f"rand(3) AS v3 FROM range({rows})").write.parquet(staging)
    spark.read.parquet(staging).createOrReplaceTempView("ref_staging")
    origins = {}
    dpath = os.path.join(b.scratch, "pristine", "dml_delta")
    b.delta(f"CREATE TABLE {ref(dpath)} ({DML_COLS}) USING delta PARTITIONED BY (date) "
            "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    b.delta(f"INSERT INTO {ref(dpath)} SELECT * FROM ref_staging")
    origins["Delta-written"] = dpath
    b.s.execute(f"CREATE TABLE dml_isolde ({DML_COLS}) PARTITIONED BY (date) "
                "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    b.s.execute("INSERT INTO dml_isolde SELECT * FROM ref_staging")
    origins["isolde-written"] = b.iso_location("dml_isolde")
    pdf = merge_source(rows)
    src_df = spark.createDataFrame(pdf).selectExpr("id", "key", "CAST(date AS DATE) AS date", "v1", "v2", "v3")
    src_df.createOrReplaceTempView("ref_src")
    src_parquet = os.path.join(b.scratch, "dml_src_parquet")
    src_df.repartition(4).write.parquet(src_parquet)
    spark.read.parquet(src_parquet).createOrReplaceTempView("ref_src_pq")
    b.s.execute("CREATE TABLE ref_src_t AS SELECT * FROM ref_src")
    src_path = b.iso_location("ref_src_t")
    arrow_src = pa.Table.from_pandas(pdf, preserve_index=False)
    n_files = {o: sum(f.endswith(".parquet") for _r, _d, fs in os.walk(p) for f in fs) for o, p in origins.items()}
    print(f"\n== dml: {rows:,} rows ({', '.join(f'{o} {n} files' for o, n in n_files.items())}), MERGE source "
          f"{len(pdf):,} rows (half matched); built in {time.perf_counter() - t0:.0f} s; {b.args.rounds} round(s)",
          flush=True)
    for origin, pristine in origins.items():
        for name, sql, drs_op, goal in DML:
            iso_t, delta_t, drs_t, phases, check = [], [], [], [], None
            for rnd in b.rounds():
                iname, ipath = b.iso_copy(pristine, "dml")
                dpath = b.other_copy(pristine, "dml_d")
                b.s.execute(f"SELECT count(*) FROM {iname}").rows  # both: the table's first plans, untimed
                b.delta(f"SELECT count(*) FROM {ref(dpath)}")

                def iso():
                    return timed(lambda: b.s.execute(sql.format(t=iname, src="ref_src_t")))

                def dlt():
                    return timed(lambda: b.delta(sql.format(t=ref(dpath), src=ref(src_path))))

                (it, res), (dt, _) = alternate(rnd, iso, dlt)
                iso_t.append(it)
                delta_t.append(dt)
                phases.append(phases_of(res))
                if rnd == b.args.rounds - 1:
                    check = (table_check(b, ipath), table_check(b, dpath))
                rmtree(ipath, dpath)
                if not b.args.no_delta_rs and not isinstance(drs_t, str):
                    rpath = b.other_copy(pristine, "dml_r")
                    try:
                        from deltalake import DeltaTable

                        drs_t.append(timed(lambda: DRS_OPS[drs_op](DeltaTable(rpath), arrow_src))[0])
                    except Exception as exc:  # e.g. a table feature delta-rs cannot write
                        drs_t = f"n/a ({type(exc).__name__})"
                        print(f"    delta-rs cannot run {name} on the {origin} table: {str(exc)[:200]}")
                    rmtree(rpath)
            same = "same rows" if check[0] == check[1] else f"DIFFERENT rows {check[0]} vs {check[1]}"
            b.results.add(f"{name} [{origin}]", iso_t, delta_t, drs_t or None, goal=goal, phases=phases, note=same)


# --------------------------------------------------------------------------- point statements

def bench_point(b: Bench):
    import numpy as np
    from deltalake import write_deltalake

    import isolde
    from dml_point import build_half, deltalake_statements, isolde_statements

    half = b.args.point_rows // 2
    wh = os.path.join(b.scratch, "point_wh")
    s = isolde.connect(warehouse=wh, spark=b.spark)
    s.execute("CREATE TABLE bench (id BIGINT, v DOUBLE, s STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    for lo in (0, half):
        b.spark.createDataFrame(build_half(lo, half).to_pandas()).coalesce(1).createOrReplaceTempView("bench_half")
        s.execute("INSERT INTO bench SELECT * FROM bench_half")
    dpath = b.other_copy(os.path.join(wh, "default", "bench"), "point_d")
    drs = os.path.join(b.scratch, "point_drs")
    for lo in (0, half):
        write_deltalake(drs, build_half(lo, half), mode="append")
    iso = isolde_statements(s)
    t = ref(dpath)
    dlt = {"UPDATE": lambda x: b.delta(f"UPDATE {t} SET v = v + 1 WHERE id = {x}"),
           "DELETE": lambda x: b.delta(f"DELETE FROM {t} WHERE id = {x}"),
           "SELECT": lambda x: b.delta(f"SELECT * FROM {t} WHERE id = {x}")}
    rs = None if b.args.no_delta_rs else deltalake_statements(drs)
    n = b.args.point_n
    print(f"\n== point: {2 * half:,} rows in 2 files (written by isolde, deletion vectors on; Delta on a copy, "
          f"delta-rs on its own copy-on-write table); {n} statements of each kind, p50 of all but the first",
          flush=True)
    ids = np.random.default_rng(23).permutation(2 * half)[: 3 * n].tolist()
    for kind in ("UPDATE", "DELETE", "SELECT"):
        it, dt, rt, phases = [], [], [], []
        for i in range(n):
            x = ids.pop()
            (a, res), (d, _) = alternate(i, lambda: timed(lambda: iso[kind](x, None)),
                                         lambda: timed(lambda: dlt[kind](x)))
            it.append(a)
            dt.append(d)
            phases.append(phases_of(res))
            if rs:
                rt.append(timed(lambda: rs[kind](x, None))[0])
        b.results.add(f"point {kind}", it, dt, rt or None, phases=phases if kind != "SELECT" else None)


# --------------------------------------------------------------------------- optimize / zorder

def bench_optimize(b: Bench):
    from deltalake import DeltaTable
    from zorder import build, fraction_read, ranges, table_stats

    rows, files = b.args.opt_rows, b.args.opt_files
    pristine = os.path.join(b.scratch, "pristine", "opt")
    t0 = time.perf_counter()
    build(pristine, rows, files, "double")
    size = sum(os.path.getsize(os.path.join(pristine, f)) for f in os.listdir(pristine) if f.endswith(".parquet"))
    target = max(size // b.args.target_files, 1024)
    preds = ranges("double")
    print(f"\n== optimize: {rows:,} rows (id, a BIGINT, b DOUBLE) in {files} files, {size / 1e6:.0f} MB, written by "
          f"delta-rs (built in {time.perf_counter() - t0:.0f} s); target file size {target:,} B (table / "
          f"{b.args.target_files}) for all: isolde's delta.targetFileSize, Delta's "
          f"spark.databricks.delta.optimize.maxFileSize, delta-rs's target_size", flush=True)
    conf_key = "spark.databricks.delta.optimize.maxFileSize"
    for label, suffix, drs_fn in (
            ("OPTIMIZE", "", lambda dt: dt.optimize.compact(target_size=target)),
            ("OPTIMIZE ZORDER BY (a, b)", " ZORDER BY (a, b)", lambda dt: dt.optimize.z_order(["a", "b"], target_size=target))):
        it, dt_, rt, phases, reads = [], [], [], [], {}
        for rnd in b.rounds():
            iname, ipath = b.iso_copy(pristine, "opt")
            dpath = b.other_copy(pristine, "opt_d")
            prop = f"ALTER TABLE {{t}} SET TBLPROPERTIES ('delta.targetFileSize' = '{target}')"
            b.s.execute(prop.format(t=iname))  # Delta OSS knows no delta.targetFileSize: its session conf below

            def dlt():
                old = b.spark.conf.get(conf_key, None)
                b.spark.conf.set(conf_key, str(target))
                try:
                    return timed(lambda: b.delta(f"OPTIMIZE {ref(dpath)}{suffix}"))
                finally:
                    b.spark.conf.unset(conf_key) if old is None else b.spark.conf.set(conf_key, old)

            (a, res), (d, _) = alternate(rnd, lambda: timed(lambda: b.s.execute(f"OPTIMIZE {iname}{suffix}")), dlt)
            it.append(a)
            dt_.append(d)
            phases.append(phases_of(res))
            rpath = None
            if not b.args.no_delta_rs:
                rpath = b.other_copy(pristine, "opt_r")
                rt.append(timed(lambda: drs_fn(DeltaTable(rpath)))[0])
            if rnd == b.args.rounds - 1:
                for who, p in (("isolde", ipath), ("Delta", dpath), ("delta-rs", rpath)):
                    if p:
                        st = table_stats(p)
                        reads[who] = {"files": len(st["a"][0]), **fraction_read(st, preds)}
            rmtree(ipath, dpath, *(p for p in [rpath] if p))
        note = "; ".join(f"{who} {r['files']} files, reads {r['a']:.2f} on a / {r['b']:.2f} on b"
                         for who, r in reads.items())
        b.results.add(label, it, dt_, rt or None, phases=phases, note=note, files_read=reads)


# --------------------------------------------------------------------------- writers

WRITER_TABLE = "id BIGINT, n BIGINT, v DOUBLE"


def writers_table(b: Bench) -> str:
    """One file, deletion vectors and isolde's row-level checks on (Delta ignores isolde.*)."""
    rows = b.args.writer_rows
    b.s.execute(f"CREATE TABLE writers ({WRITER_TABLE}) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
                "'isolde.rowLevelConcurrency' = 'auto', 'delta.isolationLevel' = 'WriteSerializable')")
    b.spark.sql(f"SELECT id, CAST(0 AS BIGINT) AS n, rand(5) AS v FROM range({rows})").coalesce(1) \
        .createOrReplaceTempView("writers_src")
    b.s.execute("INSERT INTO writers SELECT * FROM writers_src")
    return b.iso_location("writers")


def is_conflict(exc) -> str | None:
    from isolde.errors import ConcurrentModificationException
    from tests.helpers.reference import conflict_names, error_class

    if isinstance(exc, ConcurrentModificationException):
        return type(exc).__name__
    name = error_class(exc)
    return name if name in conflict_names else None


def writer_loop(update, index: int, writers: int, rows: int, start: float, seconds: float, seed: int) -> list:
    """UPDATE rows with id % writers == index until start + seconds: [(ok, conflict class, s, end)]."""
    import random

    rng = random.Random(seed + index)
    out = []
    while time.time() < start:
        time.sleep(0.001)
    while time.time() < start + seconds:
        k = rng.randrange(rows // writers) * writers + index
        t = time.perf_counter()
        try:
            update(k)
            out.append((True, None, time.perf_counter() - t, time.time()))
        except Exception as exc:
            name = is_conflict(exc)
            if name is None:
                raise
            out.append((False, name, time.perf_counter() - t, time.time()))
    return out


def summarise_writers(records: list, start: float, seconds: float) -> dict:
    """Commits per second of the run's real length (a statement begun before the deadline counts,
    and so does the time it took past it)."""
    ok = sum(r[0] for r in records)
    seconds = max([r[3] for r in records] + [start + seconds]) - start
    conflicts = [r[1] for r in records if not r[0]]
    return {"committed": ok, "statements": len(records), "tps": ok / seconds, "conflicts": len(conflicts),
            "classes": sorted(set(conflicts)), "p50_s": med([r[2] for r in records])}


def updater(engine: str, spark, wh: str, name: str, path: str):
    if engine == "isolde":
        import isolde

        s = isolde.connect(warehouse=wh, spark=spark)
        return lambda k: s.execute(f"UPDATE {name} SET n = n + 1 WHERE id = {k}")
    t = ref(path)
    return lambda k: spark.sql(f"UPDATE {t} SET n = n + 1 WHERE id = {k}").collect()


def warm_one(update, k: int):
    while True:  # the first statement plans and compiles; retried past a conflict
        try:
            return update(k)
        except Exception as exc:
            if is_conflict(exc) is None:
                raise
            time.sleep(0.2)


def threads_run(b: Bench, engine: str, name: str, path: str) -> dict:
    w, rows, seconds = b.args.writers, b.args.writer_rows, b.args.seconds
    ups = [updater(engine, b.spark, b.wh, name, path) for _ in range(w)]
    for i, up in enumerate(ups):
        warm_one(up, i)
    start, results, errors = time.time() + 0.5, [None] * w, []

    def run(i):
        try:
            results[i] = writer_loop(ups[i], i, w, rows, start, seconds, 100)
        except Exception as exc:  # not a conflict: reported, not swallowed
            errors.append(exc)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(w)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    if errors:
        raise errors[0]
    return summarise_writers([r for rs in results for r in rs], start, seconds)


def process_run(b: Bench, engine: str, name: str, path: str, tag: str) -> dict:
    w, seconds = b.args.writers, b.args.seconds
    go = os.path.join(b.scratch, f"go-{tag}")
    outs = [os.path.join(b.scratch, f"{tag}-{i}.json") for i in range(w)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", ISOLDE_DRIVER_MEMORY=os.environ.get("ISOLDE_WRITER_MEMORY", "1g"))
    procs = [subprocess.Popen([sys.executable, __file__, "--writer-child", engine, b.wh, name, path, str(i), str(w),
                               str(b.args.writer_rows), str(seconds), go, outs[i]], env=env,
                              stdout=subprocess.DEVNULL, stderr=open(outs[i] + ".err", "w")) for i in range(w)]
    try:
        deadline = time.time() + 900
        while not all(os.path.exists(o + ".ready") for o in outs):
            if any(p.poll() is not None for p in procs) or time.time() > deadline:
                raise RuntimeError(f"{tag}: a writer failed to start:\n" + open(outs[0] + ".err").read()[-3000:])
            time.sleep(0.2)
        start = time.time() + 1.0
        with open(go + ".tmp", "w") as f:
            f.write(repr(start))
        os.replace(go + ".tmp", go)
        for i, p in enumerate(procs):
            if p.wait(seconds + 900) != 0:
                raise RuntimeError(f"{tag}: writer {i} failed:\n" + open(outs[i] + ".err").read()[-3000:])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return summarise_writers([tuple(r) for o in outs for r in json.load(open(o))], start, seconds)


def writer_child(engine, wh, name, path, index, writers, rows, seconds, go, out) -> int:
    from tests.helpers.delta_spark import delta_session

    spark = delta_session(conf={"spark.master": "local[1]"})
    up = updater(engine, spark, wh, name, path)
    warm_one(up, int(index))
    open(out + ".ready", "w").close()
    while not os.path.exists(go):
        time.sleep(0.01)
    start = float(open(go).read())
    records = writer_loop(up, int(index), int(writers), int(rows), start, float(seconds), 100)
    with open(out, "w") as f:
        json.dump(records, f)
    return 0


def bench_writers(b: Bench):
    pristine = writers_table(b)
    w = b.args.writers
    print(f"\n== writers: {w} writers, single-row UPDATE SET n = n + 1 of ids with id % {w} == writer, one "
          f"{b.args.writer_rows:,}-row file (deletion vectors on), {b.args.seconds:.0f} s per run; isolde row level, "
          "Delta file level", flush=True)
    for mode in ("threads", "processes"):
        out = {}
        order = ("isolde", "delta")
        for engine in order:
            name, path = b.iso_copy(pristine, "wr")
            b.s.execute(f"SELECT count(*) FROM {name}").rows
            out[engine] = threads_run(b, engine, name, path) if mode == "threads" else \
                process_run(b, engine, name, path, f"{mode}-{engine}-{b.fresh('p')}")
            got = b.delta(f"SELECT sum(n) AS s, count(*) AS c FROM {ref(path)}")[0]
            # every committed UPDATE counted once (+ each writer's warm-up), no row lost or resurrected
            out[engine]["consistent"] = got["s"] == out[engine]["committed"] + w and got["c"] == b.args.writer_rows
            rmtree(path)
        i, d = out["isolde"], out["delta"]
        note = (f"isolde {i['committed']} commits, {i['conflicts']} conflicts {' '.join(i['classes'])}, p50 "
                f"{fmt(i['p50_s'])}; Delta {d['committed']} commits, {d['conflicts']} conflicts {' '.join(d['classes'])}, "
                f"p50 {fmt(d['p50_s'])}; sum(n) "
                + ("OK" if i["consistent"] and d["consistent"] else "INCONSISTENT"))
        b.results.add(f"{w} writers, disjoint rows ({mode})", [i["tps"]], [d["tps"]], None, goal=GOAL_WRITERS,
                      unit="/s", higher_is_better=True, note=note, detail=out)


# --------------------------------------------------------------------------- small INSERT

def bench_insert(b: Bench):
    from deltalake import write_deltalake
    import pyarrow as pa

    b.s.execute("CREATE TABLE ins (id BIGINT, v DOUBLE, s STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    b.s.execute("INSERT INTO ins VALUES (0, 0.5, 'seed')")
    dpath = b.other_copy(b.iso_location("ins"), "ins_d")
    rpath = os.path.join(b.scratch, "ins_drs")
    write_deltalake(rpath, pa.table({"id": pa.array([0], pa.int64()), "v": [0.5], "s": ["seed"]}))
    n = b.args.point_n
    print(f"\n== insert: one-row INSERT ... VALUES, {n} each (isolde-written table; Delta on a copy; delta-rs "
          "write_deltalake append on its own)", flush=True)
    it, dt, rt, phases = [], [], [], []
    for i in range(1, n + 1):
        (a, res), (d, _) = alternate(
            i, lambda: timed(lambda: b.s.execute(f"INSERT INTO ins VALUES ({i}, 0.5, 'i')")),
            lambda: timed(lambda: b.delta(f"INSERT INTO {ref(dpath)} VALUES ({i}, 0.5, 'i')")))
        it.append(a)
        dt.append(d)
        phases.append(phases_of(res))
        if not b.args.no_delta_rs:
            row = pa.table({"id": pa.array([i], pa.int64()), "v": [0.5], "s": ["i"]})
            rt.append(timed(lambda: write_deltalake(rpath, row, mode="append"))[0])
    same = b.delta(f"SELECT count(*) FROM {ref(b.iso_location('ins'))}")[0][0] == \
        b.delta(f"SELECT count(*) FROM {ref(dpath)}")[0][0] == n + 1
    b.results.add("small INSERT (1 row)", it, dt, rt or None, phases=phases,
                  note="same row counts" if same else "DIFFERENT row counts")


# --------------------------------------------------------------------------- snapshot load

def build_log(path: str, versions: int) -> None:
    """A table of ``versions + 1`` commits, each adding a 100-row file and removing the one added
    10 commits earlier (about 10 live files), checkpoints every 10 (Delta's default interval),
    written directly (isolde's log actions and checkpoint writer; real Parquet files)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from isolde.executor.log import DeltaLog, LocalLogStore
    from isolde.executor.log.actions import AddFile, CommitInfo, Metadata, Protocol, RemoveFile, serialize_commit

    schema = json.dumps({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}}]})
    log_dir = os.path.join(path, "_delta_log")
    os.makedirs(log_dir)
    now = int(time.time() * 1000)
    log = DeltaLog.for_table(path, LocalLogStore(durability="none"))
    adds = {}
    for v in range(versions + 1):
        f = f"part-{v:06d}.parquet"
        pq.write_table(pa.table({"id": pa.array(range(v * 100, v * 100 + 100), pa.int64())}), os.path.join(path, f))
        stats = json.dumps({"numRecords": 100, "minValues": {"id": v * 100}, "maxValues": {"id": v * 100 + 99},
                            "nullCount": {"id": 0}})
        adds[v] = AddFile(f, {}, os.path.getsize(os.path.join(path, f)), now, True, stats)
        actions = [CommitInfo(timestamp=now, operation="WRITE", operation_parameters={"mode": "Append"},
                              read_version=v - 1 if v else None, isolation_level="WriteSerializable",
                              is_blind_append=False, engine_info="bench")]
        if v == 0:
            actions += [Protocol(1, 2), Metadata(schema, (), {}, id="bench-log", created_time=now)]
        actions.append(adds[v])
        if v >= 10:
            old = adds.pop(v - 10)
            actions.append(RemoveFile(old.path, True, {}, old.size, now, extended_file_metadata=True))
        with open(os.path.join(log_dir, f"{v:020d}.json"), "wb") as fh:
            fh.write(serialize_commit(actions))
        if v and v % 10 == 0:
            log.update()
            log.checkpoint(v)


def bench_snapshot(b: Bench):
    from deltalake import DeltaTable, QueryBuilder

    versions = b.args.versions - 1
    pristine = os.path.join(b.scratch, "pristine", "snap")
    t0 = time.perf_counter()
    build_log(pristine, versions)
    print(f"\n== snapshot: a {versions + 1:,}-version log, checkpoint every 10, ~10 live files (built in "
          f"{time.perf_counter() - t0:.0f} s); each load on a fresh copy", flush=True)
    q = "SELECT count(*) AS c, sum(id) AS s FROM {t}"
    for label, iso_fn, dlt_fn, drs_fn in (
            ("snapshot load: DESCRIBE DETAIL", lambda n: b.s.execute(f"DESCRIBE DETAIL {n}").rows,
             lambda p: b.delta(f"DESCRIBE DETAIL {ref(p)}"), lambda p: DeltaTable(p).version()),
            ("snapshot load + first query", lambda n: b.s.sql(q.format(t=n)).collect(),
             lambda p: b.delta(q.format(t=ref(p))),
             lambda p: QueryBuilder().register("t", DeltaTable(p)).execute(q.format(t="t")).read_all())):
        it, dt, rt = [], [], []
        for rnd in b.rounds():
            iname, ipath = b.iso_copy(pristine, "snap")
            dpath = b.other_copy(pristine, "snap_d")
            (a, _), (d, _) = alternate(rnd, lambda: timed(lambda: iso_fn(iname)), lambda: timed(lambda: dlt_fn(dpath)))
            it.append(a)
            dt.append(d)
            if not b.args.no_delta_rs:
                rpath = b.other_copy(pristine, "snap_r")
                rt.append(timed(lambda: drs_fn(rpath))[0])
                rmtree(rpath)
            rmtree(ipath, dpath)
        b.results.add(label, it, dt, rt or None)


# --------------------------------------------------------------------------- first statement

FIRST_SQL = "SELECT count(*) AS c, sum(v) AS s FROM {t}"


def first_child(engine: str, wh: str, path: str) -> int:
    if engine == "isolde":
        import isolde

        s = isolde.connect(warehouse=wh)
        rows = s.sql(FIRST_SQL.format(t="first")).collect()
    else:
        from tests.helpers.delta_spark import delta_session

        rows = delta_session().sql(FIRST_SQL.format(t=ref(path))).collect()
    print(json.dumps({"end": time.time(), "rows": [list(r) for r in rows]}))
    return 0


def bench_first(b: Bench):
    b.s.execute("CREATE TABLE first (id BIGINT, v DOUBLE) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    b.s.execute(f"INSERT INTO first SELECT id, id * 0.5 FROM range({b.args.point_rows})")
    path = b.iso_location("first")
    print(f"\n== first: a fresh Python process: isolde.connect(warehouse) + SELECT vs delta_session() + the same "
          f"SELECT ({b.args.point_rows:,} rows), from launch to the rows; {b.args.first_n} process(es) each, "
          "alternating", flush=True)

    def launch(engine):
        t = time.time()
        out = subprocess.run([sys.executable, __file__, "--first-child", engine, b.wh, path], capture_output=True,
                             text=True, timeout=900, env=dict(os.environ))
        if out.returncode:
            raise RuntimeError(f"first statement child ({engine}) failed:\n{out.stderr[-3000:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        return r["end"] - t, r["rows"]

    it, dt = [], []
    for rnd in range(b.args.first_n):
        (a, ra), (d, rd) = alternate(rnd, lambda: launch("isolde"), lambda: launch("delta"))
        it.append(a)
        dt.append(d)
    b.results.add("first statement, fresh process", it, dt, None,
                  note="same rows" if ra == rd else f"DIFFERENT rows {ra} vs {rd}")


# --------------------------------------------------------------------------- main

RUNNERS = {"dml": bench_dml, "point": bench_point, "optimize": bench_optimize, "writers": bench_writers,
           "insert": bench_insert, "snapshot": bench_snapshot, "first": bench_first}

FULL = {"rows": 10_000_000, "rounds": 5, "point_rows": 200_000, "point_n": 30, "opt_rows": 10_000_000,
        "opt_files": 200, "target_files": 80, "writer_rows": 1_000_000, "seconds": 60.0, "versions": 2000,
        "first_n": 4}
QUICK = {"rows": 20_000, "rounds": 1, "point_rows": 2_000, "point_n": 3, "opt_rows": 20_000, "opt_files": 10,
         "target_files": 4, "writer_rows": 2_000, "seconds": 4.0, "versions": 60, "first_n": 1}


def report(b: Bench, started: float, path: str) -> None:
    rows = b.results.rows
    print(f"\n== isolde vs Delta Lake on Spark {b.spark.version} (same session), {os.cpu_count()} cores; times: first "
          "round, median of the rest (warm); ratio warm (first); commits/s for writers")
    print(HEADER)
    for r in rows:
        print(line(r))
    missed = [r for r in rows if r["met"] is False and r.get("phases")]
    for r in missed:
        print(f"phases of isolde's {r['shape']} (warm medians): "
              + ", ".join(f"{k} {fmt(v)}" for k, v in r["phases"].items() if v))
    met = sum(1 for r in rows if r["met"])
    print(f"goals met: {met} of {sum(1 for r in rows if r['met'] is not None)}; total {time.perf_counter() - started:.0f} s")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump({"spark": b.spark.version, "cores": os.cpu_count(), "args": vars(b.args), "rows": rows}, fh,
                  indent=1, default=str)
    print(f"json: {path}")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--writer-child":
        return writer_child(*argv[1:])
    if argv and argv[0] == "--first-child":
        return first_child(*argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 1 round: a smoke test, not a measurement")
    ap.add_argument("--only", default=",".join(SHAPES), help="comma-separated subset of " + ",".join(SHAPES))
    for key, value in FULL.items():
        ap.add_argument("--" + key.replace("_", "-"), type=type(value), default=None,
                        help=f"default {value} ({QUICK[key]} with --quick)")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--no-delta-rs", action="store_true", help="skip delta-rs")
    ap.add_argument("--no-warm-up", action="store_true",
                    help="skip the untimed warm-up of both engines' write paths (then the first shape's "
                         "first round pays the JVM's class loading and compiling)")
    ap.add_argument("--json", default=None, help="default benchmarks/out/reference[-quick].json")
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temp dir, removed after)")
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    shapes = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = set(shapes) - set(SHAPES)
    if unknown:
        ap.error(f"unknown shape(s) {sorted(unknown)}: choose from {','.join(SHAPES)}")
    json_path = args.json or os.path.join(HERE, "out", "reference-quick.json" if args.quick else "reference.json")
    started = time.perf_counter()
    scratch = args.dir or tempfile.mkdtemp(prefix="isolde-bench-ref-")
    os.makedirs(scratch, exist_ok=True)
    try:
        b = Bench(args, scratch)
        print(f"isolde and Delta Lake (delta-spark) in one SparkSession, Spark {b.spark.version}; shapes "
              f"{', '.join(shapes)}{' (--quick: tiny sizes, not a measurement)' if args.quick else ''}", flush=True)
        if not args.no_warm_up:
            print(f"warm-up of both engines (untimed): {b.warm_up():.0f} s", flush=True)
        for shape in shapes:
            RUNNERS[shape](b)
        report(b, started, json_path)
        return 0
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
