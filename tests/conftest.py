"""Shared pytest set-up for the whole suite.

Everything under ``tests/spark/`` and ``tests/reliability/`` is marked ``spark`` automatically (so ``-m "not spark"``
gives the fast suite) unless its module sets ``NEEDS_SPARK = False``; the one SparkSession
lives in ``tests/spark/conftest.py``.
"""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# the suite's Spark jobs are small: the quick-JIT JVM starts ~1 s sooner and wins on them
# (the embedded default is the throughput profile; JVM flags change no result)
os.environ.setdefault("ISOLDE_JVM", "startup")

_SPARK_DIR = os.path.join(os.path.dirname(__file__), "spark")
_SPARK_DIRS = (_SPARK_DIR, os.path.join(os.path.dirname(__file__), "reliability"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        # a module there that runs no Spark job says so with NEEDS_SPARK = False
        if str(item.fspath).startswith(tuple(d + os.sep for d in _SPARK_DIRS)) and getattr(item.module, "NEEDS_SPARK", True):
            item.add_marker(pytest.mark.spark)
