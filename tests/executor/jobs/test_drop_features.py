"""DROP FEATURE for every feature isolde can let go: refused while the table still relies on
it (naming what), otherwise the protocol goes down and delta-rs still reads the table."""

from __future__ import annotations

import pytest

from isolde import errors as E
from isolde.executor.log.delta_log import DeltaLog


def _features(path):
    p = DeltaLog(path).update().protocol
    return set(p.reader_features or ()) | set(p.writer_features or ())


def _conf(path):
    return DeltaLog(path).update().metadata.configuration


@pytest.mark.parametrize("feature, props", [
    ("vacuumProtocolCheck", "'delta.feature.vacuumProtocolCheck' = 'supported'"),
    ("inCommitTimestamp", "'delta.enableInCommitTimestamps' = 'true'"),
    ("typeWidening", "'delta.enableTypeWidening' = 'true'"),
    ("deletionVectors", "'delta.enableDeletionVectors' = 'true'"),
])
def test_an_unused_feature_is_dropped(session, table_path, delta_rows, feature, props):
    s = session
    s.execute(f"CREATE TABLE t (id INT, v STRING) TBLPROPERTIES ({props})")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    path = table_path(s, "t")
    assert feature in _features(path)
    r = s.execute(f"ALTER TABLE t DROP FEATURE {feature}")
    assert r.operation == "DROP FEATURE"
    assert feature not in _features(path)
    conf = {k.lower(): v for k, v in _conf(path).items()}
    assert conf.get("delta.enableincommittimestamps", "false") == "false"
    assert "delta.incommittimestampenablementversion" not in conf
    assert conf.get("delta.enabletypewidening", "false") == "false"
    assert delta_rows(path, ["id", "v"]) == [(1, "a"), (2, "b")]
    s.execute("INSERT INTO t VALUES (3, 'c')")  # still written
    assert sorted(r[0] for r in s.sql("SELECT id FROM t").collect()) == [1, 2, 3]
    assert s.execute("DESCRIBE HISTORY t").first().version == r.version + 1


@pytest.mark.parametrize("setup, feature, says", [
    (["CREATE TABLE t (id INT, v INT)", "ALTER TABLE t ADD CONSTRAINT positive CHECK (v > 0)"],
     "checkConstraints", "positive"),
    (["CREATE TABLE t (id INT, v INT DEFAULT 7) TBLPROPERTIES ('delta.feature.allowColumnDefaults' = 'supported')"],
     "allowColumnDefaults", "v"),
])  # widened columns no longer block: their files are rewritten (tests/executor/jobs/test_drop_feature_history.py)
def test_a_feature_in_use_is_not_dropped(session, table_path, setup, feature, says):
    s = session
    for sql in setup:
        s.execute(sql)
    path = table_path(s, "t")
    before = DeltaLog(path).update().version
    with pytest.raises(E.ExecutionError) as info:
        s.execute(f"ALTER TABLE t DROP FEATURE {feature}")
    assert info.value.error_class == "DELTA_FEATURE_DROP_FEATURE_IS_IN_USE"
    assert says in str(info.value)
    assert DeltaLog(path).update().version == before and feature in _features(path)


def test_check_constraints_dropped_after_the_last_constraint_and_a_racing_add_wins(session, table_path):
    s = session
    s.execute("CREATE TABLE t (id INT, v INT)")
    s.execute("ALTER TABLE t ADD CONSTRAINT positive CHECK (v > 0)")
    s.execute("ALTER TABLE t DROP CONSTRAINT positive")
    path = table_path(s, "t")
    drop = s.prepare("ALTER TABLE t DROP FEATURE checkConstraints")
    s.execute("ALTER TABLE t ADD CONSTRAINT small CHECK (v < 100)")  # relies on the feature again
    with pytest.raises(E.ConcurrentModificationException) as info:
        drop.commit()
    assert type(info.value) in (E.MetadataChangedException, E.ProtocolChangedException)
    assert "checkConstraints" in _features(path) and "delta.constraints.small" in _conf(path)
    s.execute("ALTER TABLE t DROP CONSTRAINT small")
    s.execute("ALTER TABLE t DROP FEATURE checkConstraints")
    assert "checkConstraints" not in _features(path)


def test_features_isolde_cannot_drop_are_named(session):
    session.execute("CREATE TABLE t (id INT) TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    with pytest.raises(E.UnsupportedFeatureError) as info:
        session.execute("ALTER TABLE t DROP FEATURE columnMapping")
    assert info.value.error_class == "DELTA_FEATURE_DROP_NONREMOVABLE_FEATURE"
    assert "deletionVectors" in str(info.value) and "checkConstraints" in str(info.value)
