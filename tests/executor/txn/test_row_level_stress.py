"""Row-level stress: threads, and worker processes with their own JVMs, increment counters and
upsert keys on one unpartitioned deletion-vector table (one file of counters). No lost
increment, no duplicate key, every statement committed or raised a named conflict, and the
table equals the serial replay of the committed statements in log order. ISOLDE_STRESS_SECONDS lengthens it (default 20)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from isolde.errors import CONFLICT_EXCEPTIONS, ConcurrentModificationException

pytestmark = pytest.mark.slow
KEYS = 12


@pytest.mark.parametrize("level", ["WriteSerializable", "Serializable"])
def test_counters_and_upserts_equal_the_serial_replay(session, level, delta_rows, table_path):
    s = session
    seconds = float(os.environ.get("ISOLDE_STRESS_SECONDS", "20")) / 2
    s.execute(f"CREATE TABLE c (id INT, n INT) TBLPROPERTIES ('delta.isolationLevel' = '{level}')")
    s.execute("INSERT INTO c VALUES " + ", ".join(f"({i}, 0)" for i in range(KEYS)))
    base = s.execute("DESCRIBE HISTORY c").first().version
    committed: dict[int, tuple] = {}
    counts = {"committed": 0, "conflict": 0}
    errors: list = []
    lock = threading.Lock()
    deadline = time.time() + seconds

    def worker(n: int):
        rng = random.Random(n)
        while time.time() < deadline:
            if rng.random() < 0.7:
                k = rng.randrange(KEYS)
                op, sql = ("inc", k), f"UPDATE c SET n = n + 1 WHERE id = {k}"
            else:
                k = rng.randrange(KEYS, KEYS + 6)
                op, sql = ("upsert", k), (f"MERGE INTO c USING (SELECT {k} AS id) s ON c.id = s.id "
                                          "WHEN MATCHED THEN UPDATE SET n = c.n + 1 "
                                          "WHEN NOT MATCHED THEN INSERT (id, n) VALUES (s.id, 1)")
            try:
                r = s.execute(sql)
            except ConcurrentModificationException as e:
                with lock:
                    assert isinstance(e, CONFLICT_EXCEPTIONS)
                    counts["conflict"] += 1
                continue
            except BaseException as e:  # anything else fails the test
                with lock:
                    errors.append((sql, repr(e)))
                return
            with lock:
                assert r.version not in committed
                committed[r.version] = op
                counts["committed"] += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    latest = s.execute("DESCRIBE HISTORY c").first().version
    assert sorted(committed) == list(range(base + 1, latest + 1))  # every version is one of ours
    model = {i: 0 for i in range(KEYS)}
    for version in sorted(committed):
        kind, k = committed[version]
        model[k] = model.get(k, 0) + 1  # an increment, or an upsert's insert (1) / increment
    got = sorted(tuple(r) for r in s.sql("SELECT id, n FROM c").collect())
    assert got == sorted(model.items())  # no lost increment, no duplicate key
    assert sorted(delta_rows(table_path(s, "c"), ["id", "n"])) == got
    assert counts["committed"] > 0
    print(f"\n{level}: {counts}")


from tests.helpers import HELPERS  # noqa: E402
from tests.helpers.worker_output import commit_infos, report_lines, wait_for  # noqa: E402

WORKER = os.path.join(HELPERS, "row_level_worker.py")  # run by path: a fresh process with its own JVM


def test_processes_increment_counters_and_upsert_without_losing_one(session, tmp_path, delta_rows, table_path):
    """Three worker processes, each with its own Spark JVM, race increments and upserts on one
    unpartitioned deletion-vector table (WriteSerializable, row level): every commit is one
    reported statement, nothing is lost or duplicated, and the table -- read by isolde and by
    delta-rs -- equals the serial replay of the log."""
    s = session
    seconds = float(os.environ.get("ISOLDE_STRESS_SECONDS", "20"))
    s.execute("CREATE TABLE c (id INT, n INT) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    s.execute("INSERT INTO c VALUES " + ", ".join(f"({i}, 0)" for i in range(KEYS)))
    path = table_path(s, "c")
    base = s.execute("DESCRIBE HISTORY c").first().version
    warehouse = str(tmp_path / "warehouse")
    env = dict(os.environ, ISOLDE_JVM="startup", ISOLDE_DRIVER_MEMORY="1g", PYTHONUNBUFFERED="1")
    stop = str(tmp_path / "stop")
    outs = [str(tmp_path / f"worker{n}.out") for n in range(3)]
    procs = [subprocess.Popen([sys.executable, WORKER, warehouse, str(n), str(KEYS), outs[n], stop], env=env,
                              start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=open(str(tmp_path / f"worker{n}.err"), "w"))
             for n in range(3)]
    try:
        wait_for(lambda: all("ready" in report_lines(o) for o in outs), 240, "the workers' Spark sessions")
        time.sleep(seconds)
        open(stop, "w").close()
        for n, proc in enumerate(procs):
            assert proc.wait(180) == 0, open(str(tmp_path / f"worker{n}.err")).read()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)

    started: dict[str, tuple[str, int]] = {}
    outcome: dict[str, str] = {}
    names = {cls.__name__ for cls in CONFLICT_EXCEPTIONS}
    for out in outs:
        for line in report_lines(out)[1:]:
            kind, tag, rest = line.split(" ", 2)
            assert kind != "error", line
            if kind == "start":
                op, key = rest.split(" ")
                started[tag] = (op, int(key))
            else:
                assert kind == "ok" or rest in names, line  # a conflict is a named one
                outcome[tag] = f"ok {rest}" if kind == "ok" else "conflict"
    assert set(outcome) == set(started)  # every statement committed or raised a named conflict

    commits = commit_infos(path, base + 1)
    latest = s.execute("DESCRIBE HISTORY c").first().version
    assert [c["version"] for c in commits] == list(range(base + 1, latest + 1))
    tags = [c.get("userMetadata") for c in commits]
    assert None not in tags and len(set(tags)) == len(tags)  # each commit is one statement
    for c in commits:
        assert outcome[c["userMetadata"]] == f"ok {c['version']}"  # at the version it reported
    assert {t for t, o in outcome.items() if o.startswith("ok")} == set(tags)

    model = {i: 0 for i in range(KEYS)}
    for tag in tags:
        _, k = started[tag]
        model[k] = model.get(k, 0) + 1  # an increment, or an upsert's insert (1) / increment
    got = sorted(tuple(r) for r in s.sql("SELECT id, n FROM c").collect())
    assert got == sorted(model.items())  # no lost increment, no duplicate key
    assert sorted(delta_rows(path, ["id", "n"])) == got

    assert all(c.get("rowLevel") for c in commits)  # checked per row
    rebased = sum(1 for c in commits if c["readVersion"] < c["version"] - 1)
    assert rebased > 0, "no statement committed past a concurrent winner: the workers never raced"
    conflicts = sum(1 for o in outcome.values() if o == "conflict")
    print(f"\nprocesses: {len(commits)} commits ({rebased} past concurrent winners), {conflicts} conflicts")
