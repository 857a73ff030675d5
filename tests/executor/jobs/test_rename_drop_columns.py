"""RENAME COLUMN / DROP COLUMN on column mapping tables: metadata only (no file rewritten),
read back by isolde and delta-rs, refused where Delta refuses, a metadata change for
concurrent writers."""

from __future__ import annotations

import os

import pytest

from isolde import errors as E
from isolde.executor.log.delta_log import DeltaLog


@pytest.fixture(params=["name", "id"])
def mapped(request, session, table_path):
    s = session
    s.execute("CREATE TABLE t (id INT, v STRING, s STRUCT<a: INT, b: STRING>, p STRING) PARTITIONED BY (p) "
              f"TBLPROPERTIES ('delta.columnMapping.mode' = '{request.param}', "
              "'delta.enableDeletionVectors' = 'true')")
    s.execute("INSERT INTO t VALUES (1, 'a', named_struct('a', 10, 'b', 'x'), 'p1'), "
              "(2, 'b', named_struct('a', 20, 'b', 'y'), 'p2')")
    return s, table_path(s, "t")


def _files(path):
    return sorted(a.path for a in DeltaLog(path).update().all_files)


def test_rename_keeps_data_and_files(mapped, delta_rows):
    s, path = mapped
    files = _files(path)
    s.execute("ALTER TABLE t RENAME COLUMN v TO value")
    s.execute("ALTER TABLE t RENAME COLUMN s.b TO label")
    s.execute("ALTER TABLE t RENAME COLUMN p TO part")  # a partition column too
    assert _files(path) == files  # nothing rewritten
    rows = sorted(tuple(r) for r in s.sql("SELECT id, value, s.label, part FROM t").collect())
    assert rows == [(1, "a", "x", "p1"), (2, "b", "y", "p2")]
    s.execute("INSERT INTO t VALUES (3, 'c', named_struct('a', 30, 'label', 'z'), 'p1')")
    s.execute("UPDATE t SET value = 'B' WHERE id = 2")
    assert sorted(tuple(r) for r in s.sql("SELECT id, value, part FROM t WHERE part = 'p1' OR id = 2").collect()) == [
        (1, "a", "p1"), (2, "B", "p2"), (3, "c", "p1")]
    assert delta_rows(path, ["id", "value", "part"]) == [(1, "a", "p1"), (2, "B", "p2"), (3, "c", "p1")]
    with pytest.raises(E.AnalysisError) as info:
        s.execute("ALTER TABLE t RENAME COLUMN value TO ID")
    assert info.value.error_class == "DELTA_DUPLICATE_COLUMNS_FOUND"


def test_drop_then_add_the_same_name_never_reads_old_values(mapped, delta_rows):
    s, path = mapped
    files = _files(path)
    s.execute("ALTER TABLE t DROP COLUMN v")
    s.execute("ALTER TABLE t DROP COLUMNS IF EXISTS (s.a, nothing)")
    assert _files(path) == files
    assert [c.name for c in s.sql("SELECT * FROM t").schema.fields] == ["id", "s", "p"]
    s.execute("ALTER TABLE t ADD COLUMNS (v STRING)")
    assert sorted(tuple(r) for r in s.sql("SELECT id, v, s.b FROM t").collect()) == [(1, None, "x"), (2, None, "y")]
    assert delta_rows(path, ["id", "v"]) == [(1, None), (2, None)]


@pytest.mark.parametrize("sql, error_class", [
    ("ALTER TABLE t DROP COLUMN p", "DELTA_DROP_PARTITION_COLUMN"),
    ("ALTER TABLE t DROP COLUMN nope", "UNRESOLVED_COLUMN"),
    ("ALTER TABLE t RENAME COLUMN nope TO x", "UNRESOLVED_COLUMN"),
    ("ALTER TABLE t DROP COLUMNS (s.a, s.b)", "DELTA_DROP_COLUMN_ON_SINGLE_FIELD_SCHEMA"),
])
def test_refusals_change_nothing(mapped, sql, error_class):
    s, path = mapped
    before = DeltaLog(path).update().version
    with pytest.raises(E.AnalysisError) as info:
        s.execute(sql)
    assert info.value.error_class == error_class
    assert DeltaLog(path).update().version == before


def test_dependents_and_tables_without_column_mapping_refuse(session):
    s = session
    s.execute("CREATE TABLE c (id INT, v INT) TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    s.execute("ALTER TABLE c ADD CONSTRAINT positive CHECK (v > 0)")
    with pytest.raises(E.AnalysisError) as info:
        s.execute("ALTER TABLE c DROP COLUMN v")
    assert info.value.error_class == "DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE"
    s.execute("CREATE TABLE plain (id INT, v INT)")
    for sql, cls in [("ALTER TABLE plain RENAME COLUMN v TO w", "DELTA_UNSUPPORTED_RENAME_COLUMN"),
                     ("ALTER TABLE plain DROP COLUMN v", "DELTA_UNSUPPORTED_DROP_COLUMN")]:
        with pytest.raises(E.AnalysisError) as info:
            s.execute(sql)
        assert info.value.error_class == cls


def test_a_rename_fails_a_concurrent_writer(mapped):
    s, path = mapped
    writer = s.prepare("INSERT INTO t VALUES (9, 'z', named_struct('a', 90, 'b', 'q'), 'p9')")
    s.execute("ALTER TABLE t RENAME COLUMN v TO w")
    with pytest.raises(E.ConcurrentModificationException) as info:
        writer.commit()
    assert type(info.value) is E.MetadataChangedException
    assert sorted(r[0] for r in s.sql("SELECT id FROM t").collect()) == [1, 2]
