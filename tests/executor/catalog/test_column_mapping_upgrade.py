"""Column mapping turned on for an existing table (``SET TBLPROPERTIES ('delta.columnMapping.mode'
= 'name')``), as Delta upgrades: metadata only, every field's physical name is its current name,
so the files already written read as before, then RENAME / DROP COLUMN work. Other mode
changes stay refused. The upgrade is a metadata change: a concurrent writer loses."""

from __future__ import annotations

import json
import os

import pytest

from isolde.errors import InvalidPropertyError

pytestmark = pytest.mark.spark

UPGRADE = "ALTER TABLE t SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"


def _rows(session, order="1"):
    return [tuple(r) for r in session.sql(f"SELECT * FROM t ORDER BY {order}").collect()]


@pytest.mark.parametrize("dvs", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_upgrade_keeps_old_files_readable_and_enables_rename_and_drop(session, table_path, delta_rows, dvs):
    session.execute("CREATE TABLE t (id INT, s STRUCT<a: INT, b: STRING>, d STRING) PARTITIONED BY (d) "
                    f"TBLPROPERTIES (delta.enableDeletionVectors = {str(dvs).lower()})")
    session.execute("INSERT INTO t VALUES (1, named_struct('a', 1, 'b', 'x'), 'p'), (2, named_struct('a', 2, 'b', 'y'), 'q')")
    session.execute("DELETE FROM t WHERE id = 2")  # a deletion vector (or a rewrite) before the upgrade
    path = table_path(session, "t")
    files_before = {f for _, _, fs in os.walk(path) for f in fs if f.endswith(".parquet")}
    version = session.execute(UPGRADE).version
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        actions = [json.loads(line) for line in fh]
    assert not any("add" in a or "remove" in a for a in actions)  # metadata only: nothing rewritten
    metadata = next(a["metaData"] for a in actions if "metaData" in a)
    fields = json.loads(metadata["schemaString"])["fields"]
    assert [(f["name"], f["metadata"]["delta.columnMapping.physicalName"]) for f in fields] == \
        [("id", "id"), ("s", "s"), ("d", "d")]
    nested = fields[1]["type"]["fields"]
    assert [f["metadata"]["delta.columnMapping.physicalName"] for f in nested] == ["a", "b"]
    ids = [f["metadata"]["delta.columnMapping.id"] for f in fields + nested]
    assert sorted(ids) == list(range(1, 6))
    assert metadata["configuration"]["delta.columnMapping.maxColumnId"] == "5"
    protocol = next(a["protocol"] for a in actions if "protocol" in a)
    assert "columnMapping" in protocol.get("readerFeatures", []) or protocol["minReaderVersion"] == 2
    assert _rows(session) == [(1, (1, "x"), "p")]
    assert delta_rows(path) == [(1, {"a": 1, "b": "x"}, "p")]

    session.execute("ALTER TABLE t RENAME COLUMN s.b TO bee")
    session.execute("ALTER TABLE t RENAME COLUMN id TO ident")
    session.execute("INSERT INTO t VALUES (3, named_struct('a', 3, 'bee', 'z'), 'q')")
    session.execute("UPDATE t SET ident = ident + 10 WHERE ident = 1")
    assert _rows(session) == [(3, (3, "z"), "q"), (11, (1, "x"), "p")]
    assert delta_rows(path) == [(3, {"a": 3, "bee": "z"}, "q"), (11, {"a": 1, "bee": "x"}, "p")]
    session.execute("ALTER TABLE t DROP COLUMN s")
    assert _rows(session) == [(3, "q"), (11, "p")]
    assert delta_rows(path) == [(3, "q"), (11, "p")]
    files_after = {f for _, _, fs in os.walk(path) for f in fs if f.endswith(".parquet")}
    assert files_before <= files_after  # nothing was rewritten in place


@pytest.mark.parametrize("create_mode,target", [("none", "id"), ("name", "none"), ("name", "id"), ("id", "name")])
def test_other_mode_changes_are_refused(session, table_path, create_mode, target):
    session.execute(f"CREATE TABLE t (id INT) TBLPROPERTIES ('delta.columnMapping.mode' = '{create_mode}')")
    before = session.execute("DESCRIBE HISTORY t").count()
    with pytest.raises(InvalidPropertyError) as err:
        session.execute(f"ALTER TABLE t SET TBLPROPERTIES ('delta.columnMapping.mode' = '{target}')")
    assert err.value.error_class == "DELTA_UNSUPPORTED_COLUMN_MAPPING_MODE_CHANGE"
    assert session.execute("DESCRIBE HISTORY t").count() == before


def test_a_writer_that_read_before_the_upgrade_commits_on_top(session, table_path, delta_rows):
    """The upgrade commits first: the insert prepared on the old schema still commits (as in Delta
    4.1+: enabling name mapping keeps every column's name as its physical name, so the insert's
    file reads through the new mapping)."""
    session.execute("CREATE TABLE t (id INT) TBLPROPERTIES (delta.enableDeletionVectors = false)")
    session.execute("INSERT INTO t VALUES (1)")
    insert = session.prepare("INSERT INTO t VALUES (2)")
    session.prepare(UPGRADE).commit()
    insert.commit()
    session.execute("ALTER TABLE t RENAME COLUMN id TO n")
    assert _rows(session) == [(1,), (2,)]
    assert delta_rows(table_path(session, "t")) == [(1,), (2,)]


def test_the_upgrade_commits_on_top_of_a_write_that_won(session, table_path, delta_rows):
    """The write commits first: the upgrade read no rows, so it commits on top (as in Delta), and
    the file the writer added (written without mapping) reads through the new mapping."""
    session.execute("CREATE TABLE t (id INT) TBLPROPERTIES (delta.enableDeletionVectors = false)")
    session.execute("INSERT INTO t VALUES (1)")
    insert = session.prepare("INSERT INTO t VALUES (2)")
    upgrade = session.prepare(UPGRADE)
    insert.commit()
    upgrade.commit()
    session.execute("ALTER TABLE t RENAME COLUMN id TO n")
    assert _rows(session) == [(1,), (2,)]
    assert delta_rows(table_path(session, "t")) == [(1,), (2,)]
