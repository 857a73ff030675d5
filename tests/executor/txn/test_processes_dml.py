"""Processes racing, and killed: three worker processes, each with its own Spark JVM, run
UPDATE / DELETE / MERGE / INSERT on one partitioned Serializable table; two of them are
killed with SIGKILL (Python and JVM together) in the middle of a statement.

Afterwards the log must hold only whole commits, each made by exactly one statement (its tag
in commitInfo.userMetadata); everything a worker reported committed is there at the version
it reported; the only commits nobody reported are a killed worker's last statement; and the
table -- read by isolde and by delta-rs -- equals a serial replay of the committed
statements in log order. The table then takes new writes.

Races for ~20 s by default; ISOLDE_STRESS_SECONDS lengthens it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest


from tests.helpers import HELPERS  # noqa: E402
from tests.helpers.dml_workload import SCHEMA, Stmt, initial  # noqa: E402
from tests.helpers.oracle import read_delta_rows  # noqa: E402
from tests.helpers.dml import Runner, make_table  # noqa: E402
from tests.helpers.worker_output import commit_infos, report_lines, wait_for  # noqa: E402

from isolde.errors import CONFLICT_EXCEPTIONS  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WORKERS = 3
WORKER = os.path.join(HELPERS, "dml_worker.py")  # run by path: a fresh process with its own JVM
CONFLICT_NAMES = {cls.__name__ for cls in CONFLICT_EXCEPTIONS}


def _kill_mid_statement(proc, out: str, rng: random.Random, after: int) -> bool:
    """SIGKILL the worker's process group (Python and its JVM) a random moment after it
    starts a statement, once it has finished ``after``; True if the kill landed before that
    statement reported an outcome."""
    def started_next():
        lines = report_lines(out)
        done = sum(1 for line in lines if line.split(" ", 1)[0] in ("ok", "conflict"))
        return done >= after and lines[-1].startswith("start ")

    wait_for(started_next, 180, f"worker {out} to start statement {after + 1}")
    time.sleep(rng.uniform(0.05, 1.5))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return report_lines(out)[-1].startswith("start ")


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_processes_race_and_killed_workers_leave_a_serial_table(tmp_path, deletion_vectors):
    seconds = float(os.environ.get("ISOLDE_STRESS_SECONDS", "20"))
    r = Runner(tmp_path / "wh")
    path = r.path("t")
    rows = [{"id": i, "date": d, "v": v} for (i, d), v in initial().items()]
    make_table(path, SCHEMA, [rows[: len(rows) // 2], rows[len(rows) // 2:]], partition_by=["date"],
               properties={"delta.isolationLevel": "Serializable"})
    if deletion_vectors:
        r.run("ALTER TABLE t SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    base = r.log("t").update().version

    env = dict(os.environ, ISOLDE_JVM="startup", ISOLDE_DRIVER_MEMORY="1g", PYTHONUNBUFFERED="1")
    stop = str(tmp_path / "stop")
    outs = [str(tmp_path / f"worker{n}.out") for n in range(WORKERS)]
    procs = [subprocess.Popen([sys.executable, WORKER, r.warehouse, str(n), outs[n], stop], env=env,
                              start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=open(str(tmp_path / f"worker{n}.err"), "w"))
             for n in range(WORKERS)]
    rng = random.Random(5 if deletion_vectors else 4)
    killed = {}
    try:
        wait_for(lambda: all("ready" in report_lines(o) for o in outs), 240, "the workers' Spark sessions")
        started = time.time()
        killed[0] = _kill_mid_statement(procs[0], outs[0], rng, after=3)
        time.sleep(max(0.0, started + seconds / 2 - time.time()))
        killed[1] = _kill_mid_statement(procs[1], outs[1], rng, after=len(report_lines(outs[1])) // 2 + 1)
        after_kills = len(report_lines(outs[2]))
        time.sleep(max(0.0, started + seconds - time.time()))
        wait_for(lambda: len(report_lines(outs[2])) > after_kills + 2, 120, "the surviving worker to go on")
        open(stop, "w").close()
        assert procs[2].wait(180) == 0, open(str(tmp_path / "worker2.err")).read()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)

    # what each worker ran and reported
    regenerated: dict[str, Stmt] = {}
    reported: dict[str, str] = {}  # tag -> "ok <version>" | "conflict"
    started_tags: dict[int, list[str]] = {}
    for n, out in enumerate(outs):
        rng_n = random.Random(1000 + n)
        for line in report_lines(out):
            kind, _, rest = line.partition(" ")
            assert kind != "error", f"worker {n} failed: {line}"
            if kind == "start":
                tag, _, sql = rest.partition(" ")
                st = Stmt(rng_n, n, int(tag.split("-")[1]))
                assert st.sql() == sql  # the parent replays the very statement the worker ran
                regenerated[tag] = st
                started_tags.setdefault(n, []).append(tag)
            elif kind == "conflict":
                tag, name = rest.split(" ")
                assert name in CONFLICT_NAMES, line
                reported[tag] = "conflict"
            elif kind == "ok":
                tag, version = rest.split(" ")
                reported[tag] = f"ok {version}"

    commits = [(c["version"], c.get("userMetadata")) for c in commit_infos(path, base + 1)]
    latest = r.log("t").update().version
    assert [v for v, _ in commits] == list(range(base + 1, latest + 1))  # contiguous, nothing torn
    tags = [tag for _, tag in commits]
    assert None not in tags and len(set(tags)) == len(tags)  # each commit is one tagged statement
    for version, tag in commits:
        if tag in reported:
            assert reported[tag] == f"ok {version}", (tag, reported[tag], version)
        else:  # committed, never reported: only a killed worker's last statement
            worker = int(tag[1:].split("-")[0])
            assert worker in killed and started_tags[worker][-1] == tag, tag
    for tag, outcome in reported.items():  # a reported commit is in the log (or changed nothing)
        if outcome.startswith("ok") and tag not in tags:
            assert int(outcome.split()[1]) <= latest

    model = initial()
    for _, tag in commits:
        regenerated[tag].apply(model)
    got = {(i, d): v for i, d, v in r.rows("t", ["id", "date", "v"])}
    assert got == model
    theirs = {(i, d): v for i, d, v in read_delta_rows(path, ["id", "date", "v"])}
    assert theirs == model

    # the table takes writes after the kills
    r.run("UPDATE t SET v = v + 1 WHERE date = '2024-01-01'")
    for (i, d), v in list(model.items()):
        if d == "2024-01-01":
            model[(i, d)] = v + 1
    assert {(i, d): v for i, d, v in r.rows("t", ["id", "date", "v"])} == model

    assert any(killed.values()), f"no kill landed mid-statement: {killed}"
    committed = sum(1 for o in reported.values() if o.startswith("ok"))
    conflicts = sum(1 for o in reported.values() if o == "conflict")
    print(f"\nprocesses: {len(commits)} commits, {committed} reported ok, {conflicts} conflicts, "
          f"kills mid-statement {killed}")
    assert committed > 0 and len(commits) > 0
