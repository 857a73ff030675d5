"""V2 checkpoints and vacuumProtocolCheck through SQL: ALTER TABLE ... SET TBLPROPERTIES
('delta.checkpointPolicy' = 'v2') upgrades the protocol, later checkpoints are UUID-named with
sidecars, DML and VACUUM work on such tables, and delta-rs reads the result."""

from __future__ import annotations

import os
import shutil

from deltalake import DeltaTable, QueryBuilder

from isolde.executor.log import DeltaLog

from tests.helpers import ENGINES  # noqa: E402  (tests/data/engines)


def _path(session, name):
    from isolde.grammar import ast

    return session.catalog.resolve(ast.TableRef(parts=(name,)), session.current_database).path


def _rs(path, column="id"):
    out = QueryBuilder().register("t", DeltaTable(path)).execute(f"SELECT {column} FROM t").read_all()
    return sorted(out.column(column).to_pylist())


def test_alter_checkpoint_policy_v2_then_write(session):
    s = session
    s.execute("CREATE TABLE t (id BIGINT) TBLPROPERTIES ('delta.checkpointInterval' = '3')")
    s.execute("INSERT INTO t VALUES (1), (2)")
    path = _path(s, "t")
    s.execute("ALTER TABLE t SET TBLPROPERTIES ('delta.checkpointPolicy' = 'v2')")
    p = DeltaLog(path).update().protocol
    assert (p.min_reader_version, p.min_writer_version) == (3, 7)
    assert "v2Checkpoint" in p.reader_features and "v2Checkpoint" in p.writer_features
    for i in range(3, 8):
        s.execute(f"INSERT INTO t VALUES ({i})")
    s.execute("DELETE FROM t WHERE id = 4")
    log_dir = os.path.join(path, "_delta_log")
    uuid_named = [n for n in os.listdir(log_dir) if ".checkpoint." in n and len(n.split(".")) == 4]
    assert uuid_named and os.listdir(os.path.join(log_dir, "_sidecars"))
    expected = [1, 2, 3, 5, 6, 7]
    assert sorted(r[0] for r in s.execute("SELECT id FROM t").rows) == expected == _rs(path)
    # VACUUM (DRY RUN and real) checks the protocol and works on the v2Checkpoint table
    assert s.execute("VACUUM t DRY RUN").rows == []
    s.execute("VACUUM t")
    assert _rs(path) == expected


def test_engine_v2_checkpoint_and_vacuum_protocol_check_tables_are_writable(session, tmp_path):
    """delta-rs 1.6.6 refuses vacuumProtocolCheck tables (its DataFusion reader lists the feature as
    unsupported): isolde's own read is the check there."""
    for name, column, by_delta_rs in (("checkpoint-v2-table", "id", True),
                                      ("basic-with-vacuum-protocol-check-feature", "id", False)):
        path = str(tmp_path / name)
        shutil.copytree(os.path.join(ENGINES, name), path)

        def ids():
            mine = sorted(r[0] for r in session.execute(f"SELECT {column} FROM delta.`{path}`").rows)
            if by_delta_rs:
                assert _rs(path, column) == mine
            return mine

        before = ids()
        start = DeltaLog(path).update().version
        r = session.execute(f"DELETE FROM delta.`{path}` WHERE {column} = {before[0]}")
        assert r.version == start + 1
        assert ids() == before[1:]
        session.execute(f"VACUUM delta.`{path}` DRY RUN")
