"""Spark integration fixtures: ONE SparkSession for the whole run (fast flags, quiet logs),
a fresh warehouse per test.

    spark        session-scoped SparkSession (isolde.executor.runtime.spark.get_spark)
    session      an isolde Session on it, warehouse in tmp_path (function scope)
    delta_rows   delta_rows(path, columns=None) -> sorted list of tuples read by delta-rs
                 (QueryBuilder, which honours deletion vectors): the interop oracle
    table_path   table_path(session, name) -> the folder of a table
"""

from __future__ import annotations


import pytest


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


from oracle_helpers import read_delta_rows  # noqa: E402


@pytest.fixture
def delta_rows():
    return read_delta_rows


@pytest.fixture
def table_path():
    def _path(session, name: str) -> str:
        from isolde.grammar import ast

        parts = tuple(name.split("."))
        return session.catalog.resolve(ast.TableRef(parts=parts), session.current_database).path

    return _path
