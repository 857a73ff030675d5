"""A fresh REPL's first result: launch -> `SELECT * FROM t LIMIT 10;` typed at the first prompt
-> its rows on the screen, against a fresh Delta-Spark process and a fresh delta-rs process.

    .venv/bin/python benchmarks/first_result.py [--runs 3] [--rows 1000000]

Run alone on an idle machine (it starts a JVM per run; two at once double the figures).
Measured, each run in a new process and a pseudo-terminal (pexpect), the modes alternating:

  isolde REPL          spawn -> rows of the first SELECT: a plain look at a table, which the REPL
                       reads on the driver while Spark starts (executor/jobs/driver_query.py)
  ..., Spark query     spawn -> rows of a first query only Spark answers (GROUP BY / ORDER BY),
                       with the JVM class archive (executor/runtime/jvm_archive.py) and without it
                       (ISOLDE_JVM_ARCHIVE=0, what a machine without it gets)
  \\dt / DESCRIBE      spawn -> a log-only answer typed at the first prompt (never waits for Spark)
  Delta-Spark          a fresh Python: configure a Delta session (its JARs from ~/.m2), run
                       spark.sql("SELECT * FROM delta.`<path>` LIMIT 10").collect() (the reference
                       environment .venv-ref; skipped, and said so, when it is missing)
  delta-rs             a fresh Python: DeltaTable(path) -> QueryBuilder SELECT ... LIMIT 10

Prints medians, the ratio isolde / peer, and one JSON line. The issue's goal: the first result
within 4.5 s of launch on an idle machine.
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
REPO = os.path.dirname(HERE)
PY = sys.executable
REF_PY = os.path.join(REPO, ".venv-ref", "bin", "python")
QUERY = "SELECT * FROM t LIMIT 10"
#: a first query only Spark answers (the REPL's driver read takes plain looks at a table only)
SPARK_QUERY = "SELECT k, count(*) AS n FROM t GROUP BY k ORDER BY k LIMIT 10"


def _env(home: str, **extra) -> dict:
    env = dict(os.environ)
    env.update(XDG_CONFIG_HOME=os.path.join(home, "config"), XDG_DATA_HOME=os.path.join(home, "data"),
               TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1", NO_COLOR="1", **extra)
    return env


def _settle() -> None:
    """Wait until the last run's JVM has exited (its shutdown would share the cores)."""
    for _ in range(100):
        if subprocess.run(["pgrep", "-f", "SparkSubmit"], capture_output=True).returncode != 0:
            break
        time.sleep(0.2)
    time.sleep(0.5)


def make_table(wh: str, rows: int) -> str:
    out = subprocess.run([PY, "-m", "isolde", "--warehouse", wh, "-e",
                          "CREATE TABLE t (id BIGINT, k BIGINT, v DOUBLE, s STRING, d DATE) PARTITIONED BY (d); "
                          f"INSERT INTO t SELECT id, id % 1000, id * 0.5, concat('s', id), "
                          f"date_add(DATE'2024-01-01', CAST(id % 10 AS INT)) FROM range({rows})"],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if out.returncode:
        raise SystemExit(f"could not make the table:\n{out.stderr}")
    return os.path.join(wh, "default", "t")


def repl_first(home: str, wh: str, typed: str, done: str, **env_extra) -> dict:
    """Seconds from spawn to the prompt, and to ``done`` after ``typed`` at the first prompt."""
    import pexpect

    _settle()
    began = time.perf_counter()
    child = pexpect.spawn(PY, ["-m", "isolde", "--warehouse", wh], env=_env(home, **env_extra), encoding="utf-8",
                          timeout=300, dimensions=(50, 200))
    try:
        child.expect_exact("isolde> ")
        prompt = time.perf_counter() - began
        child.send(typed + "\r")
        child.expect_exact(done)
        return {"prompt": prompt, "result": time.perf_counter() - began}
    finally:
        child.close(force=True)


PEER_CODE = {
    "delta-spark": (
        "import sys, time; t = float(sys.argv[1]); sys.path.insert(0, sys.argv[3])\n"
        "from tests.helpers.delta_spark import delta_session\n"
        "rows = delta_session().sql(\"SELECT * FROM delta.`%s` LIMIT 10\" % sys.argv[2]).collect()\n"
        "assert len(rows) == 10\n"
        "print(time.time() - t)\n"),
    "delta-rs": (
        "import sys, time; t = float(sys.argv[1])\n"
        "from deltalake import DeltaTable, QueryBuilder\n"
        "dt = DeltaTable(sys.argv[2])\n"
        "rows = QueryBuilder().register('t', dt).execute('SELECT * FROM t LIMIT 10').read_all()\n"
        "assert rows.num_rows == 10\n"
        "print(time.time() - t)\n"),
}


def peer_first(engine: str, path: str) -> float:
    python = REF_PY if engine == "delta-spark" else PY
    _settle()
    out = subprocess.run([python, "-c", PEER_CODE[engine], repr(time.time()), path, REPO], capture_output=True,
                         text=True, timeout=600, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"))
    if out.returncode:
        raise RuntimeError(f"{engine} failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    sys.path.insert(0, REPO)
    from isolde.executor.runtime import jvm_archive

    archive = jvm_archive.archive_option()
    has_ref = os.path.exists(REF_PY)
    home = tempfile.mkdtemp(prefix="isolde-first-result-")
    try:
        wh = os.path.join(home, "wh")
        path = make_table(wh, args.rows)
        modes = {"isolde REPL": lambda: repl_first(home, wh, QUERY + ";", "(10 rows)")["result"],
                 "isolde REPL, Spark query": lambda: repl_first(home, wh, SPARK_QUERY + ";", "(10 rows)")["result"],
                 "isolde REPL, Spark query, no archive": lambda: repl_first(
                     home, wh, SPARK_QUERY + ";", "(10 rows)", ISOLDE_JVM_ARCHIVE="0")["result"],
                 "isolde REPL \\dt": lambda: repl_first(home, wh, "\\dt", "(1 table)")["result"],
                 "delta-rs": lambda: peer_first("delta-rs", path)}
        if has_ref:
            modes["Delta-Spark"] = lambda: peer_first("delta-spark", path)
        if not archive:
            modes.pop("isolde REPL, Spark query, no archive")
        times: dict[str, list[float]] = {m: [] for m in modes}
        for rnd in range(args.runs):
            order = list(modes) if rnd % 2 == 0 else list(reversed(modes))
            for mode in order:
                times[mode].append(modes[mode]())
            print(f"round {rnd + 1}: " + ", ".join(f"{m} {times[m][-1]:.2f} s" for m in modes), flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)

    med = {m: statistics.median(v) for m, v in times.items()}
    print(f"\nfresh process -> first rows of `{QUERY}` ({args.rows:,}-row table, 10 date partitions; "
          f"median of {args.runs}; JVM archive: {'yes' if archive else 'none built'})")
    for mode, value in med.items():
        print(f"  {mode:38} {value:6.2f} s   (runs: {', '.join(f'{v:.2f}' for v in times[mode])})")
    isolde_s = med["isolde REPL"]
    if "Delta-Spark" in med:
        print(f"  isolde / Delta-Spark                   {isolde_s / med['Delta-Spark']:.2f}x")
    else:
        print("  Delta-Spark: not run (no .venv-ref: `make reference` sets it up)")
    print(f"  isolde / delta-rs                      {isolde_s / med['delta-rs']:.2f}x")
    if "isolde REPL, Spark query, no archive" in med:
        print(f"  Spark query with / without the archive "
              f"{med['isolde REPL, Spark query'] / med['isolde REPL, Spark query, no archive']:.2f}x")
    print(f"  goal 4.5 s (the first look at a table): {'met' if isolde_s <= 4.5 else 'missed'}")
    print(json.dumps({"median_s": {m: round(v, 2) for m, v in med.items()}, "runs": args.runs, "rows": args.rows,
                      "archive": bool(archive)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
