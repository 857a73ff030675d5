"""Shared pytest set-up for the whole suite: the environment, the ``spark`` marker and the
fixtures every room uses.

Layout: ``tests/`` mirrors the source rooms (``grammar/``, ``planner/``, ``repl/``,
``executor/{log,txn,session,catalog,runtime,rows,jobs,streaming}/``); a room holds both its unit
tests and its Spark integration tests. ``tests/reliability/`` (torture, bank, crash suites) and
``tests/layout/`` (the import checker) stand apart. Shared helpers live in the ``tests.helpers``
package (oracles, the DML / metadata helpers, workloads, the worker scripts run as
subprocesses), imported as ``from tests.helpers.oracle import read_delta_rows``; ``tests`` is a
package, so pytest puts the repository root on ``sys.path``. Test data: ``tests/data``
(``tests.helpers.DATA``, ``tests.helpers.ENGINES``).

The ``spark`` marker (``-m "not spark"`` gives the fast suite) is decided per test: a test is
``spark`` when it uses the ``spark`` fixture, directly or through another fixture (``session``
...), or when its module says ``NEEDS_SPARK = True`` (a module whose tests start Spark some other
way: ``isolde.connect()``, a worker process with its own JVM). Modules may also carry
``pytestmark = pytest.mark.spark`` themselves.

The ``torture`` marker (the long variants: crash loops, thousands of model-checked histories)
is skipped unless ``-m`` names it (``make torture``).

``tests/reference/`` runs beside Delta Lake on Spark, in the second environment ``.venv-ref``
(``make test-reference``); its tests carry the ``reference`` marker, which ``make test-main``
leaves out (see tests/reference/conftest.py).

Fixtures (the one SparkSession is shared by the whole run, tests/reliability included):

    spark        session-scoped SparkSession (isolde.executor.runtime.spark.get_spark)
    session      an isolde Session on it, warehouse in tmp_path (function scope)
    delta_rows   delta_rows(path, columns=None) -> sorted list of tuples read by delta-rs
                 (QueryBuilder, which honours deletion vectors): the interop oracle
    table_path   table_path(session, name) -> the folder of a table
    table_dir    str path of a fresh (not yet created) table folder in tmp_path, for the
                 log-level tests (tests.helpers.log_tables builds tables there)
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


REFERENCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference")


def pytest_collection_modifyitems(config, items):
    torture_chosen = "torture" in (config.getoption("-m") or "")
    skip_torture = pytest.mark.skip(reason="long torture run: `make torture` (pytest -m torture) runs it")
    for item in items:
        if str(item.path).startswith(REFERENCE_DIR + os.sep):
            item.add_marker(pytest.mark.reference)
        if "spark" in getattr(item, "fixturenames", ()) or getattr(getattr(item, "module", None), "NEEDS_SPARK", False) is True:
            item.add_marker(pytest.mark.spark)
        if "torture" in item.keywords and not torture_chosen:
            item.add_marker(skip_torture)


@pytest.fixture(scope="session")
def spark():
    from isolde.executor.runtime.spark import get_spark

    return get_spark()


@pytest.fixture
def session(spark, tmp_path):
    import isolde

    s = isolde.connect(warehouse=str(tmp_path / "warehouse"), spark=spark)
    yield s
    s.close()


@pytest.fixture
def delta_rows():
    from tests.helpers.oracle import read_delta_rows

    return read_delta_rows


@pytest.fixture
def table_path():
    def _path(session, name: str) -> str:
        from isolde.grammar import ast

        parts = tuple(name.split("."))
        return session.catalog.resolve(ast.TableRef(parts=parts), session.current_database).path

    return _path


@pytest.fixture
def table_dir(tmp_path):
    return str(tmp_path / "t")
