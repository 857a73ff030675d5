"""The embedded JVM's log (executor/runtime/spark.py): removed at a normal exit, kept on request, and
without the once-per-MERGE "locally checkpointed" warning. Each run is a fresh process with its
own temp dir, where the log is made."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

SCRIPT = """
import isolde
from isolde.executor.runtime.spark import jvm_log_path
s = isolde.connect(warehouse="wh")
s.execute("CREATE TABLE t (k INT, v STRING)")
s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
s.execute("MERGE INTO t USING (SELECT 2 AS k, 'B' AS v UNION ALL SELECT 3, 'c') s ON t.k = s.k "
          "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *")
print(sorted(tuple(r) for r in s.execute("SELECT * FROM t").collect()))
print("LOG", jvm_log_path())
"""


def _run(tmp_path, **env_extra) -> str:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp), **env_extra}
    env.pop("ISOLDE_SPARK_STDERR", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "[(1, 'a'), (2, 'B'), (3, 'c')]" in out.stdout
    log = out.stdout.split("LOG ", 1)[1].strip()
    assert os.path.dirname(log) == str(tmp), log
    return log


def test_a_normal_exit_removes_the_jvm_log(tmp_path):
    log = _run(tmp_path)
    assert not os.path.exists(log)
    assert not [n for n in os.listdir(tmp_path / "tmp") if n.startswith("isolde-jvm-")]


def test_the_log_is_kept_on_request_and_a_merge_adds_no_checkpoint_warning(tmp_path):
    log = _run(tmp_path, ISOLDE_KEEP_JVM_LOG="1")
    with open(log) as fh:
        text = fh.read()
    assert "locally checkpointed" not in text
