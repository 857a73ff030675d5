"""The log and transaction layers never import Spark (DESIGN.md section 1)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAYERS = [os.path.join(ROOT, "executor", "log"), os.path.join(ROOT, "executor", "txn")]


def _modules():
    for layer in LAYERS:
        for name in sorted(os.listdir(layer)):
            if name.endswith(".py"):
                yield os.path.join(layer, name)


def test_no_module_imports_pyspark():
    offenders = []
    for path in _modules():
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path}: {n}" for n in names if n.split(".")[0] in ("pyspark", "py4j", "delta")]
    assert offenders == []


def test_importing_the_layers_loads_no_spark():
    code = (
        "import sys; import isolde.executor.log, isolde.executor.txn, isolde.executor.log.deletion_vectors, "
        "isolde.executor.log.stats; from isolde.executor.log import DeltaLog; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
