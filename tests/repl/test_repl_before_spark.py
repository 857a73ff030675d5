"""While Spark starts, the REPL is usable for what reads the log (issue 55, item 6).

The table is written by delta-rs (no JVM). The REPL is then given a ``java`` that never starts
(``JAVA_HOME`` pointing to a script that sleeps): whatever answers came, came without Spark.
``\\dt``, ``\\d``, ``DESCRIBE HISTORY``, ``SHOW TBLPROPERTIES`` and completion of table names
answer; a query shows what it waits for ("starting Spark: launching the JVM…": the java never
comes up) and Ctrl-C leaves the loop alive.
In a pseudo-terminal (pexpect); no JVM runs at all.
"""

from __future__ import annotations

import os
import re
import sys

import pexpect
import pytest

from .test_repl_first_hour import Screen, _env

TIMEOUT = 60


@pytest.fixture
def stuck_java(tmp_path):
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\nexec sleep 300\n")
    java.chmod(0o755)
    return str(home)


@pytest.fixture
def warehouse(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    path = tmp_path / "wh" / "default" / "events"
    path.parent.mkdir(parents=True)
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2, 3], pa.int64()), "kind": ["a", "b", "c"]}))
    write_deltalake(str(path), pa.table({"id": pa.array([4], pa.int64()), "kind": ["d"]}), mode="append")
    return str(tmp_path / "wh")


def _repl_without_java(tmp_path, stuck_java, warehouse):
    """A REPL whose ``java`` never starts, and the Screen its output goes to."""
    env = _env(tmp_path)
    env.update(JAVA_HOME=stuck_java, NO_COLOR="1")
    child = pexpect.spawn(sys.executable, ["-m", "isolde", "--warehouse", warehouse], cwd=str(tmp_path), env=env,
                          encoding="utf-8", timeout=TIMEOUT, dimensions=(40, 200))
    screen = Screen()
    child.logfile_read = screen
    return child, screen


def _answered_without_spark(child, screen, steps) -> None:
    """Type each step; its answer (``done``, then the prompt) comes with ``shown`` and no error,
    without waiting for Spark."""
    for typed, done, shown in steps:
        mark = len(screen.log)
        child.send(typed)
        child.expect_exact(done)
        child.expect_exact("isolde> ")
        text = screen.since(mark)
        assert "ERROR" not in text and "starting Spark" not in text, text
        for word in shown:
            assert word in text, (typed, text)


def test_log_reads_answer_while_spark_cannot_start(tmp_path, stuck_java, warehouse):
    child, screen = _repl_without_java(tmp_path, stuck_java, warehouse)
    try:
        child.expect_exact("isolde> ")
        steps = [("\\dt\r", "(1 table)", ["events", "MANAGED", "delta"]),
                 ("\\d events\r", 'Table "events"', []),
                 ("DESCRIBE HISTORY events;\r", "(2 rows)", ["WRITE"]),
                 ("SHOW TBLPROPERTIES events;\r", "(4 rows)", ["delta.minWriterVersion"])]
        _answered_without_spark(child, screen, steps)
        # \dt's listing read the log: version 1 (two commits), one file per commit
        assert re.search(r"\|\s*events\s*\|\s*MANAGED\s*\|\s*delta\s*\|\s*1\s*\|\s*2\s*\|", screen.text())
        # completion's table names come from the log as well
        mark = len(screen.log)
        child.send("SELECT * FROM eve\t")
        child.expect_exact(["events", "\x1b[0mnts"])  # a menu, or the one name completed in the line
        child.send("\x15")  # Ctrl-U: clear the line
        # a query needs Spark: it says what it waits for, and Ctrl-C gives the prompt back
        child.send("SELECT count(*) FROM events;\r")
        child.expect_exact("starting Spark: launching the JVM…")
        child.sendintr()
        child.expect_exact("isolde> ")
        child.send("\\dt\r")
        child.expect_exact("(1 table)")
        child.expect_exact("isolde> ")
    finally:
        child.close(force=True)
    assert not os.path.exists(os.path.join(warehouse, "default", "events", "_delta_log", "00000000000000000002.json"))


def test_a_first_look_at_a_table_is_answered_while_spark_cannot_start(tmp_path, stuck_java, warehouse):
    """``SELECT * FROM t LIMIT n`` and a small table's ``SELECT cols FROM t`` are read on the
    driver (executor/jobs/driver_query.py): their rows come although Spark never starts; a
    read that needs Spark (a WHERE) still waits for it."""
    child, screen = _repl_without_java(tmp_path, stuck_java, warehouse)
    try:
        child.expect_exact("isolde> ")
        steps = [("SELECT * FROM events LIMIT 10;\r", "(4 rows)", ["id", "kind", "a", "d"]),
                 ("SELECT kind AS k FROM events;\r", "(4 rows)", ["k", "b", "c"]),
                 ("SELECT id FROM events LIMIT 2;\r", "(2 rows)", ["id"])]
        _answered_without_spark(child, screen, steps)
        child.send("SELECT * FROM events WHERE id = 1;\r")
        child.expect_exact("starting Spark: launching the JVM…")
        child.sendintr()
        child.expect_exact("isolde> ")
    finally:
        child.close(force=True)
