"""Readers other than Spark read the tables isolde writes: polars' Delta reader (``pl.read_delta``,
built on the ``deltalake`` package) and DuckDB's ``delta`` extension.

Requirements (``.venv-ref``): ``polars>=2.1`` (reads deletion vectors itself with deltalake>=1.4.2;
refuses column mapping: its own DeltaProtocolError "reader version 2 (column mapping)" or "reader
features ['columnMapping']"), ``duckdb>=2.0``; DuckDB's ``delta`` extension downloads from
extensions.duckdb.org on ``INSTALL delta``; where that fails (no network) its tests skip naming it."""

from __future__ import annotations

import pytest

from tests.helpers.oracle import sorted_rows

# one isolde table per shape: (DDL after the name, statements after inserting ROWS)
SHAPES = {
    "plain": ("(id INT, v STRING, p STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')", []),
    "partitioned": ("(id INT, v STRING, p STRING) PARTITIONED BY (p) "
                    "TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')", []),
    "deletion_vectors": ("(id INT, v STRING, p STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
                         ["UPDATE t SET v = 'u' WHERE id = 2", "DELETE FROM t WHERE id = 3"]),
    "column_mapping": ("(id INT, v STRING, p STRING) TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
                       "'delta.enableDeletionVectors' = 'false')",
                       ["ALTER TABLE t RENAME COLUMN v TO v2", "ALTER TABLE t RENAME COLUMN v2 TO v"]),
}
ROWS = "(1, 'a', 'x y'), (2, 'b', 'x/y'), (3, 'c', '50%'), (4, 'd', NULL)"


def _make(session, table_path, shape):
    ddl, after = SHAPES[shape]
    session.execute(f"CREATE TABLE t {ddl}")
    session.execute(f"INSERT INTO t VALUES {ROWS}")
    for stmt in after:
        session.execute(stmt)
    expected = sorted_rows(session.sql("SELECT id, v, p FROM t").collect())
    return table_path(session, "t"), expected


@pytest.fixture(scope="module")
def polars():
    return pytest.importorskip("polars", reason="polars is not installed in .venv-ref (requirement: polars>=2.1)")


@pytest.fixture(scope="module")
def duckdb_delta():
    duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed in .venv-ref (requirement: duckdb>=2.0)")
    con = duckdb.connect()
    try:
        con.execute("LOAD delta")
    except Exception:
        try:
            con.execute("INSTALL delta")
            con.execute("LOAD delta")
        except Exception as exc:
            pytest.skip(f"DuckDB's delta extension cannot be installed here (extensions.duckdb.org): "
                        f"{str(exc).splitlines()[0]}")
    return con


@pytest.mark.parametrize("shape", ["plain", "partitioned", "deletion_vectors"])
def test_polars_reads_isolde_tables(shape, polars, session, table_path):
    path, expected = _make(session, table_path, shape)
    df = polars.read_delta(path)
    assert sorted_rows(df.select(["id", "v", "p"]).rows()) == expected
    if shape == "deletion_vectors":
        assert expected == [(1, "a", "x y"), (2, "u", "x/y"), (4, "d", None)]


def test_polars_refuses_column_mapping(polars, session, table_path):
    """polars' documented limitation (io/delta/_dataset.py: data files store physical names):
    it refuses column mapping by protocol, naming it, rather than reading wrong columns."""
    from deltalake.exceptions import DeltaProtocolError

    path, _ = _make(session, table_path, "column_mapping")
    with pytest.raises(DeltaProtocolError, match="column mapping|columnMapping"):
        polars.read_delta(path)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_duckdb_reads_isolde_tables(shape, duckdb_delta, session, table_path):
    path, expected = _make(session, table_path, shape)
    rows = duckdb_delta.execute(f"SELECT id, v, p FROM delta_scan('{path}')").fetchall()
    assert sorted_rows(rows) == expected
