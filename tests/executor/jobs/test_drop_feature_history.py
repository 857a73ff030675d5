"""DROP FEATURE and history (executor/jobs/drop_feature.py), as Delta 4 does it:

* by default the feature goes at once: deletion vectors still in live files are purged first
  (own commits), the downgrade adds ``checkpointProtection`` with the barrier version and
  protected checkpoints, and a client without the feature (delta-rs's plain reader) reads it;
* TRUNCATE HISTORY waits until the last 24 hours of history are free of the feature, then cuts
  the log to that window and downgrades fully (no checkpointProtection);
* checkpointProtection itself goes only with TRUNCATE HISTORY, once its barrier is old enough.

Time passing is the commit files' modification times moved back, as Delta's own tests do."""

from __future__ import annotations

import os
import time

import pytest
from deltalake import DeltaTable

from isolde import errors as E
from isolde.executor.log.delta_log import DeltaLog

pytestmark = pytest.mark.spark

DAY = 86_400


def _protocol(path):
    p = DeltaLog(path).update().protocol
    return set(p.reader_features or ()) | set(p.writer_features or ()), p


def _log_files(path):
    return sorted(os.listdir(os.path.join(path, "_delta_log")))


def _age_log(path, seconds):
    """Make every commit (and checkpoint) file ``seconds`` older."""
    folder = os.path.join(path, "_delta_log")
    for name in os.listdir(folder):
        full = os.path.join(folder, name)
        if os.path.isfile(full):
            st = os.stat(full)
            os.utime(full, (st.st_atime - seconds, st.st_mtime - seconds))


def _ids(session):
    return sorted(r[0] for r in session.sql("SELECT id FROM t").collect())


@pytest.fixture
def dv_table(session, table_path):
    s = session
    s.execute("CREATE TABLE t (id INT, v STRING)")  # deletion vectors on by default
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")
    s.execute("DELETE FROM t WHERE id = 2")
    path = table_path(s, "t")
    assert any(a.deletion_vector is not None for a in DeltaLog(path).update().all_files)
    return path


def test_drop_purges_live_deletion_vectors_and_protects_history(session, dv_table):
    s, path = session, dv_table
    before = DeltaLog(path).update().version
    result = s.execute("ALTER TABLE t DROP FEATURE deletionVectors")
    snap = DeltaLog(path).update()
    assert result.version == snap.version == before + 3  # SET TBLPROPERTIES, REORG (purge), DROP FEATURE
    ops = [r.operation for r in s.execute("DESCRIBE HISTORY t").collect()][:3]
    assert ops == ["DROP FEATURE", "REORG", "SET TBLPROPERTIES"]
    features, protocol = _protocol(path)
    assert "deletionVectors" not in features and "checkpointProtection" in features
    assert protocol.min_reader_version == 1 and protocol.min_writer_version == 7
    assert snap.metadata.configuration["delta.requireCheckpointProtectionBeforeVersion"] == str(snap.version)
    assert snap.metadata.configuration["delta.enableDeletionVectors"] == "false"
    assert not any(a.deletion_vector is not None for a in snap.all_files)
    names = _log_files(path)
    for v in (snap.version - 1, snap.version):  # the protected checkpoints
        assert f"{v:020d}.checkpoint.parquet" in names
    # a client without deletion vectors reads it (plain to_pyarrow_table refuses DV tables)
    table = DeltaTable(path).to_pyarrow_table()
    assert sorted(table.column("id").to_pylist()) == [1, 3, 4]
    assert _ids(s) == [1, 3, 4]
    # isolde still time-travels through the history that had them
    assert sorted(r[0] for r in s.execute("SELECT id FROM t VERSION AS OF 2").rows) == [1, 3, 4]
    assert sorted(r[0] for r in s.execute("SELECT id FROM t VERSION AS OF 1").rows) == [1, 2, 3, 4]
    s.execute("DELETE FROM t WHERE id = 3")  # copy-on-write from now on
    assert not any(a.deletion_vector is not None for a in DeltaLog(path).update().all_files)
    assert sorted(DeltaTable(path).to_pyarrow_table().column("id").to_pylist()) == [1, 4]


def test_truncate_history_waits_then_downgrades_fully(session, dv_table):
    s, path = session, dv_table
    with pytest.raises(E.ExecutionError) as err:
        s.execute("ALTER TABLE t DROP FEATURE deletionVectors TRUNCATE HISTORY")
    assert err.value.error_class == "DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD"
    assert "24 hours" in str(err.value) and "TRUNCATE HISTORY" in str(err.value)
    snap = DeltaLog(path).update()  # step 1 happened: off, and no live deletion vector
    assert snap.metadata.configuration["delta.enableDeletionVectors"] == "false"
    assert not any(a.deletion_vector is not None for a in snap.all_files)
    assert "deletionVectors" in _protocol(path)[0]  # not downgraded yet
    s.execute("INSERT INTO t VALUES (5, 'e')")  # writes go on meanwhile, without the feature
    with pytest.raises(E.ExecutionError):  # still younger than the window
        s.execute("ALTER TABLE t DROP FEATURE deletionVectors TRUNCATE HISTORY")
    _age_log(path, 2 * DAY)
    s.execute("INSERT INTO t VALUES (6, 'f')")  # a young commit without traces stays
    young = DeltaLog(path).update().version
    result = s.execute("ALTER TABLE t DROP FEATURE deletionVectors TRUNCATE HISTORY")
    features, protocol = _protocol(path)
    assert "deletionVectors" not in features and "checkpointProtection" not in features
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    conf = DeltaLog(path).update().metadata.configuration
    assert "delta.requireCheckpointProtectionBeforeVersion" not in conf
    commits = sorted(int(n[:20]) for n in _log_files(path) if n.endswith(".json") and n[:20].isdigit())
    assert commits[0] == young - 1 and commits[-1] == result.version  # the log starts at the window
    assert f"{young - 1:020d}.checkpoint.parquet" in _log_files(path)
    assert sorted(DeltaTable(path).to_pyarrow_table().column("id").to_pylist()) == [1, 3, 4, 5, 6]
    assert _ids(s) == [1, 3, 4, 5, 6]
    with pytest.raises(E.IsoldeError, match=str(young - 1)):  # older versions are gone, and it says where history starts
        s.execute("SELECT * FROM t VERSION AS OF 1").rows


def test_checkpoint_protection_goes_only_with_truncate_history_after_the_window(session, dv_table):
    s, path = session, dv_table
    s.execute("ALTER TABLE t DROP FEATURE deletionVectors")
    barrier = int(DeltaLog(path).update().metadata.configuration["delta.requireCheckpointProtectionBeforeVersion"])
    s.execute("INSERT INTO t VALUES (7, 'g')")
    with pytest.raises(E.ExecutionError) as err:
        s.execute("ALTER TABLE t DROP FEATURE checkpointProtection")
    assert err.value.error_class == "DELTA_FEATURE_CAN_ONLY_DROP_CHECKPOINT_PROTECTION_WITH_HISTORY_TRUNCATION"
    with pytest.raises(E.ExecutionError) as err:
        s.execute("ALTER TABLE t DROP FEATURE checkpointProtection TRUNCATE HISTORY")
    assert err.value.error_class == "DELTA_FEATURE_DROP_CHECKPOINT_PROTECTION_WAIT_FOR_RETENTION_PERIOD"
    assert "checkpointProtection" in _protocol(path)[0]
    _age_log(path, 2 * DAY)
    s.execute("ALTER TABLE t DROP FEATURE checkpointProtection TRUNCATE HISTORY")
    features, protocol = _protocol(path)
    assert "checkpointProtection" not in features and (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    assert "delta.requireCheckpointProtectionBeforeVersion" not in DeltaLog(path).update().metadata.configuration
    commits = sorted(int(n[:20]) for n in _log_files(path) if n.endswith(".json") and n[:20].isdigit())
    assert commits[0] >= barrier
    assert sorted(DeltaTable(path).to_pyarrow_table().column("id").to_pylist()) == [1, 3, 4, 7]


def test_a_delete_prepared_before_the_drop_loses(session, dv_table):
    """The drop's first commit turns deletion vectors off: a DELETE planned with them fails and
    adds none."""
    s, path = session, dv_table
    delete = s.prepare("DELETE FROM t WHERE id = 4")
    s.execute("ALTER TABLE t DROP FEATURE deletionVectors")
    with pytest.raises((E.MetadataChangedException, E.ProtocolChangedException)):
        delete.commit()
    assert not any(a.deletion_vector is not None for a in DeltaLog(path).update().all_files)
    assert _ids(s) == [1, 3, 4]
    assert "deletionVectors" not in _protocol(path)[0]


def test_writer_only_features_drop_without_protection(session, table_path):
    s = session
    s.execute("CREATE TABLE t (id INT) TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true', "
              "'delta.enableDeletionVectors' = 'false')")
    s.execute("INSERT INTO t VALUES (1)")
    path = table_path(s, "t")
    s.execute("ALTER TABLE t DROP FEATURE inCommitTimestamp")
    features, _ = _protocol(path)
    assert "inCommitTimestamp" not in features and "checkpointProtection" not in features
    assert not any(n.endswith(".checkpoint.parquet") for n in _log_files(path))


def test_v2_checkpoints_dropped_with_a_classic_checkpoint_and_truncated_later(session, table_path):
    s = session
    s.execute("CREATE TABLE t (id INT) TBLPROPERTIES ('delta.checkpointPolicy' = 'v2', "
              "'delta.enableDeletionVectors' = 'false', 'delta.checkpointInterval' = '2')")
    for i in range(3):
        s.execute(f"INSERT INTO t VALUES ({i})")
    path = table_path(s, "t")
    assert any(n.endswith(".parquet") and len(n) > 40 for n in _log_files(path))  # a UUID-named v2 checkpoint
    result = s.execute("ALTER TABLE t DROP FEATURE v2Checkpoint")
    features, _ = _protocol(path)
    assert "v2Checkpoint" not in features and "checkpointProtection" in features
    snap = DeltaLog(path).update()
    assert snap.metadata.configuration["delta.checkpointPolicy"] == "classic"
    assert f"{result.version:020d}.checkpoint.parquet" in _log_files(path)
    assert sorted(DeltaTable(path).to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2]
    with pytest.raises(E.ExecutionError) as err:  # v2 checkpoints are still in the young history
        s.execute("ALTER TABLE t DROP FEATURE checkpointProtection TRUNCATE HISTORY")
    assert err.value.error_class == "DELTA_FEATURE_DROP_CHECKPOINT_PROTECTION_WAIT_FOR_RETENTION_PERIOD"
    _age_log(path, 2 * DAY)
    s.execute("ALTER TABLE t DROP FEATURE checkpointProtection TRUNCATE HISTORY")
    assert not any(n.endswith(".parquet") and len(n) > 40 and not n.startswith(".") for n in _log_files(path)
                   if n[:20].isdigit() and int(n[:20]) < result.version)
    assert "checkpointProtection" not in _protocol(path)[0]
    assert _ids(s) == [0, 1, 2]


def test_type_widening_dropped_by_rewriting_the_narrow_files(session, table_path, delta_rows):
    import pyarrow.parquet as pq

    s = session
    s.execute("CREATE TABLE t (id INT, v INT, s STRUCT<x: SMALLINT>, p STRING) PARTITIONED BY (p) "
              "TBLPROPERTIES ('delta.enableTypeWidening' = 'true', 'delta.enableDeletionVectors' = 'false')")
    s.execute("INSERT INTO t VALUES (1, 10, named_struct('x', 1), 'a'), (2, 20, named_struct('x', 2), 'b')")
    s.execute("ALTER TABLE t ALTER COLUMN v TYPE BIGINT")
    s.execute("ALTER TABLE t ALTER COLUMN s.x TYPE INT")
    s.execute("INSERT INTO t VALUES (3, 30000000000, named_struct('x', 70000), 'a')")  # written wide
    path = table_path(s, "t")
    with pytest.raises(Exception):  # delta-rs refuses the typeWidening reader feature
        DeltaTable(path).to_pyarrow_table()
    s.execute("ALTER TABLE t DROP FEATURE typeWidening")
    snap = DeltaLog(path).update()
    features, _ = _protocol(path)
    assert "typeWidening" not in features and "checkpointProtection" in features
    assert "delta.typeChanges" not in snap.metadata.schema_string
    for add in snap.all_files:  # every live file holds the wide types
        schema = pq.read_schema(os.path.join(path, add.path))
        assert str(schema.field("v").type) == "int64" and str(schema.field("s").type.field("x").type) == "int32"
    ops = [r.operation for r in s.execute("DESCRIBE HISTORY t").collect()][:4]
    assert ops == ["DROP FEATURE", "SET TBLPROPERTIES", "REORG", "SET TBLPROPERTIES"]
    expected = [(1, 10, {"x": 1}, "a"), (2, 20, {"x": 2}, "b"), (3, 30000000000, {"x": 70000}, "a")]
    assert sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == \
        [dict(zip(["id", "v", "s", "p"], r)) for r in expected]
    assert [tuple(r) for r in s.sql("SELECT id, v, s.x, p FROM t ORDER BY id").collect()] == \
        [(1, 10, 1, "a"), (2, 20, 2, "b"), (3, 30000000000, 70000, "a")]
