"""The background warm-up (executor/runtime/warmup.py): it runs isolde's DML statements on a throwaway
table, leaves nothing behind, and never makes a statement of the user wait or see its effects."""

from __future__ import annotations

import os
import time

import pytest

import isolde
from isolde.executor.runtime import warmup

pytestmark = pytest.mark.spark


def test_the_warm_up_runs_every_statement_and_leaves_nothing(spark, tmp_path):
    before = dict(spark.conf.getAll)
    s = isolde.connect(warehouse=str(tmp_path / "wh"), spark=spark, warm_up=True)
    assert s.warm_up is not None and s.warm_up.wait(600)
    assert s.warm_up.error is None
    assert s.warm_up.statements_run == len(warmup.STATEMENTS)
    assert s.tables() == [] and s.current_database == "default"  # the user's warehouse is untouched
    assert os.listdir(tmp_path / "wh" / "default") == []
    leftovers = [n for n in os.listdir(os.path.dirname(str(tmp_path))) if n.startswith("isolde-warm-up-")]
    assert leftovers == []
    after = dict(spark.conf.getAll)
    assert {k: v for k, v in after.items() if before.get(k) != v and "warehouse" not in k} == {}
    s.execute("CREATE TABLE t (id INT)")
    s.execute("INSERT INTO t VALUES (1)")
    assert [tuple(r) for r in s.sql("SELECT * FROM t").collect()] == [(1,)]


def test_a_statement_cancels_a_running_warm_up_and_runs_right(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(warmup, "ROWS", 3_000_000)  # long enough to be caught mid-way
    s = isolde.connect(warehouse=str(tmp_path / "wh"), spark=spark, warm_up=True)
    time.sleep(1.0)
    assert s.warm_up.running
    s.execute("CREATE TABLE t (id INT)")
    s.execute("INSERT INTO t VALUES (7)")
    assert [tuple(r) for r in s.sql("SELECT * FROM t").collect()] == [(7,)]
    assert not s.warm_up.running and s.warm_up.done.is_set()
    assert s.warm_up.statements_run < len(warmup.STATEMENTS)
    assert s.warm_up.error is None  # a cancelled warm-up is not an error


def test_no_warm_up_unless_asked(spark, tmp_path):
    s = isolde.connect(warehouse=str(tmp_path / "wh"), spark=spark)
    assert s.warm_up is None
