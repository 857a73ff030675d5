"""Spark's own catalog folder stays inside isolde's warehouse: a user's working directory
never gets a spark-warehouse/ folder (a fresh JVM, as a user's first run)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

SCRIPT = """
import isolde
s = isolde.connect(warehouse="wh")
s.execute("CREATE TABLE t (a INT)")
s.execute("INSERT INTO t VALUES (1)")
s.execute("CREATE TEMP VIEW v AS SELECT * FROM t")
s.spark.catalog.listTables()  # makes Spark's session catalog create its default database folder
s.spark.sql("CREATE DATABASE IF NOT EXISTS spark_side")
print(s.execute("SELECT * FROM v").collect())
"""


def test_no_spark_warehouse_folder_in_the_working_directory(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Row(a=1)" in out.stdout
    assert not (tmp_path / "spark-warehouse").exists()
    assert sorted(os.listdir(tmp_path)) == ["wh"]
    assert (tmp_path / "wh" / ".spark-catalog" / "spark_side.db").is_dir()
