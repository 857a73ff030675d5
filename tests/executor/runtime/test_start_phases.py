"""A Session's Spark start reports what it is doing (the REPL's spinner shows it), in order,
and nothing once Spark is up. A fresh interpreter and JVM (~6 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from isolde.executor.runtime.spark import START_PHASES

pytestmark = pytest.mark.spark


def test_start_phases_in_order(tmp_path):
    code = textwrap.dedent("""
        import json, sys
        from isolde.executor.session.session import Session
        seen = []
        original = Session._set_start_phase
        def record(self, name):
            seen.append(name)
            original(self, name)
        Session._set_start_phase = record
        s = Session(warehouse=sys.argv[1], start=True)
        s.wait_ready(300)
        print(json.dumps({"seen": seen, "after": s.start_phase}))
    """)
    env = dict(os.environ, ISOLDE_JVM="startup", ISOLDE_DRIVER_MEMORY="1g", SPARK_LOCAL_IP="127.0.0.1")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "wh")], capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out == {"seen": [*START_PHASES, None], "after": None}
