"""A writer process SIGKILLed inside a multi-statement transaction (its own Spark JVM): after
its statements staged their files but before COMMIT, while COMMIT writes the version, and just
after the version landed. The table is then either exactly as before or has the whole
transaction as one version -- never a part of it -- and delta-rs agrees; VACUUM (RETAIN 0
HOURS) removes the files the killed transaction staged and nothing a live version references."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import isolde
from isolde.executor.log import DeltaLog

NEEDS_SPARK = True

WORKER = r"""
import os, sys, time
import isolde
from isolde.executor.txn import transaction as T

point = sys.argv[2]
real_write = T.OptimisticTransaction._write_commit

def write(self, version, body):
    if getattr(self.log, "staged", False):
        return real_write(self, version, body)
    if point == "during-commit":
        print("committing", flush=True); time.sleep(600)
    real_write(self, version, body)
    if point == "after-commit":
        print("committed", flush=True); time.sleep(600)

T.OptimisticTransaction._write_commit = write
s = isolde.connect(warehouse=sys.argv[1], master="local[1]")
s.execute("BEGIN")
s.execute("UPDATE acc SET bal = bal - 10 WHERE id = 1")
s.execute("INSERT INTO acc VALUES (9, 10)")
s.execute("UPDATE acc SET bal = bal + 10 WHERE id = 2")
if point == "before-commit":
    print("staged", flush=True); time.sleep(600)
s.execute("COMMIT")
"""

BEFORE = [(1, 100), (2, 100), (3, 100)]
AFTER = [(1, 90), (2, 110), (3, 100), (9, 10)]


@pytest.mark.parametrize("point, signal_word, expected", [
    ("before-commit", "staged", BEFORE),
    ("during-commit", "committing", BEFORE),
    ("after-commit", "committed", AFTER),
])
def test_a_killed_transaction_is_all_or_nothing(spark, tmp_path, delta_rows, point, signal_word, expected):
    wh = str(tmp_path / "wh")
    s = isolde.connect(warehouse=wh, spark=spark)
    s.execute("CREATE TABLE acc (id INT, bal INT) USING DELTA TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    s.execute("INSERT INTO acc VALUES (1, 100), (2, 100), (3, 100)")
    path = f"{wh}/default/acc"
    before_version = DeltaLog.for_table(path).update().version
    child = subprocess.Popen([sys.executable, "-c", WORKER, wh, point], stdout=subprocess.PIPE, text=True,
                             start_new_session=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        deadline = time.time() + 300
        line = ""
        while time.time() < deadline and signal_word not in line:
            line = child.stdout.readline()
            if not line and child.poll() is not None:
                break
        assert signal_word in line, f"the worker ended before {point} (exit {child.poll()})"
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    latest = DeltaLog.for_table(path).update().version
    assert latest == before_version + (1 if expected is AFTER else 0)
    rows = [tuple(r) for r in s.execute("SELECT * FROM acc ORDER BY id").rows]
    assert rows == expected and delta_rows(path) == expected
    live = {f.path for f in DeltaLog.for_table(path).update().all_files}
    data_files = lambda: {f for f in os.listdir(path) if f.endswith(".parquet")}  # noqa: E731
    staged_orphans = data_files() - live
    if expected is BEFORE:
        assert staged_orphans, "the killed transaction staged no file"  # it had written data
    s.execute("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    s.execute("VACUUM acc RETAIN 0 HOURS")
    assert data_files() == live  # the orphans are gone, every live file stays
    assert [tuple(r) for r in s.execute("SELECT * FROM acc ORDER BY id").rows] == expected
