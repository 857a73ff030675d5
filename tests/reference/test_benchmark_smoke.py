"""benchmarks/reference.py still runs: its --quick mode on one cheap shape, in a process of its own
(its own Delta + isolde SparkSession), prints the isolde/Delta ratio line and writes its JSON.
No timing is asserted: the sizes are tiny and the machine is shared; the numbers mean nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.reference.conftest import _missing_reference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "reference.py")
RATIO_LINE = re.compile(r"^small INSERT \(1 row\)\s.*\s(\d+\.\d\d)x \((\d+\.\d\d)x\)\s+<= 1\.0x\s+(met|MISSED)\s",
                        re.MULTILINE)


def test_reference_benchmark_quick_prints_a_ratio(tmp_path):
    missing = _missing_reference()
    if missing:
        if os.environ.get("ISOLDE_REFERENCE_REQUIRED") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    out_json = tmp_path / "reference-quick.json"
    env = dict(os.environ)
    env.setdefault("ISOLDE_DRIVER_MEMORY", "1g")
    done = subprocess.run([sys.executable, SCRIPT, "--quick", "--only", "insert", "--point-n", "2", "--no-warm-up",
                           "--json", str(out_json), "--dir", str(tmp_path / "scratch")],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert RATIO_LINE.search(done.stdout), done.stdout[-3000:]
    assert "same row counts" in done.stdout
    rows = json.loads(out_json.read_text())["rows"]
    assert [r["shape"] for r in rows] == ["small INSERT (1 row)"]
    (row,) = rows
    assert len(row["iso"]) == len(row["delta"]) == 2
    assert row["ratio"] == pytest.approx(row["iso_warm"] / row["delta_warm"])
