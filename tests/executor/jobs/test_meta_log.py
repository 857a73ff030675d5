"""Metadata commands at the log level: no Spark job, the real parser, runners and transaction.

ALTER (properties, columns, constraints, clustering, features), DESCRIBE / SHOW, RESTORE,
VACUUM, CLONE and CONVERT. Every table written here is read back with delta-rs
(``deltalake`` QueryBuilder, which honours deletion vectors) and compared with the rows the
test expects; error paths check the error class and that the table version did not move.
(test_meta_spark.py repeats the main paths through a Session and compares isolde's own
Spark read with delta-rs row for row.)
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from isolde import errors as E

from tests.helpers.meta import (
    SCHEMA,
    LogCtx,
    age_files,
    append,
    as_tuples,
    delete_positions,
    delta_rows,
    make_table,
    prepare_stmt,
    rows_of,
    run_stmt,
    snapshot,
    sorted_rows,
    version_of,
)

# runs no Spark job (log-level runners only): part of the fast suite
NEEDS_SPARK = False

DAY = 86_400
T_ROWS = as_tuples(rows_of(3, 0, "a") + rows_of(3, 3, "b"))


@pytest.fixture
def ctx(tmp_path):
    return LogCtx(str(tmp_path / "wh"))


def table_path(ctx, name="t"):
    return os.path.join(ctx.catalog.warehouse, "default", name)


@pytest.fixture
def t(ctx):
    """default.t: (id bigint, x int, s string), DVs enabled, version 1 holds 2 files of 3 rows."""
    path = table_path(ctx)
    make_table(path, [rows_of(3, 0, "a"), rows_of(3, 3, "b")])
    return path


def last_commit_info(path):
    return snapshot(path).history(limit=1)[0]


# =========================================================================== SET / UNSET TBLPROPERTIES


def test_set_isolation_level_canonical_and_invalid(ctx, t):
    r = run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.isolationlevel' = 'serializable', 'owner' = 'me')")
    assert r.operation == "SET TBLPROPERTIES" and r.version == 2
    conf = snapshot(t).metadata.configuration
    assert conf["delta.isolationLevel"] == "Serializable" and conf["owner"] == "me"
    info = last_commit_info(t)
    assert info["operation"] == "SET TBLPROPERTIES"
    assert json.loads(info["operationParameters"]["properties"])["owner"] == "me"
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.isolationLevel' = 'WriteSerializable')")
    for bad in ("Snapshot", "ReadCommitted", ""):
        with pytest.raises(E.InvalidPropertyError, match="Serializable, WriteSerializable"):
            run_stmt(ctx, f"ALTER TABLE t SET TBLPROPERTIES ('delta.isolationLevel' = '{bad}')")
    assert version_of(t) == 3
    assert delta_rows(t) == T_ROWS


def test_unknown_and_reserved_keys_are_refused(ctx, t):
    with pytest.raises(E.InvalidPropertyError, match="Did you mean `delta.enableDeletionVectors`"):
        run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.enableDeletionVector' = 'true')")
    with pytest.raises(E.InvalidPropertyError, match="Did you mean `delta.logRetentionDuration`"):
        run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.logRetentionDurations' = 'interval 1 days')")
    with pytest.raises(E.InvalidPropertyError, match="ADD CONSTRAINT"):
        run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.constraints.c' = 'x > 0')")
    with pytest.raises(E.InvalidPropertyError, match="true or false"):
        run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.appendOnly' = 'yes')")
    with pytest.raises(E.InvalidPropertyError):
        run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = '7 days')")
    with pytest.raises(E.TableNotFoundError):
        run_stmt(ctx, "ALTER TABLE nope SET TBLPROPERTIES ('a' = 'b')")
    assert version_of(t) == 1


def test_enable_deletion_vectors_upgrades_protocol(ctx):
    path = table_path(ctx)
    make_table(path, [rows_of(4)], properties={"delta.enableDeletionVectors": "false"})
    p = snapshot(path).protocol
    assert (p.min_reader_version, p.min_writer_version) == (1, 2)
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    snap = snapshot(path)
    p = snap.protocol
    assert (p.min_reader_version, p.min_writer_version) == (3, 7)
    assert p.reader_features == ["deletionVectors"]
    assert {"deletionVectors", "appendOnly", "invariants"} <= set(p.writer_features)
    assert snap.metadata.configuration["delta.enableDeletionVectors"] == "true"
    # the new protocol really works: put a DV on the file, delta-rs applies it
    delete_positions(path, snap.all_files[0], [0, 2])
    assert delta_rows(path) == as_tuples([r for r in rows_of(4) if r["id"] not in (0, 2)])


def test_protocol_change_fails_a_concurrent_writer(ctx):
    path = table_path(ctx)
    make_table(path, [rows_of(2)], properties={"delta.enableDeletionVectors": "false"})
    from isolde.executor.log.delta_log import DeltaLog
    from tests.helpers.meta import SCHEMA, _write_file

    log = DeltaLog.for_table(path)
    writer = log.start_transaction()  # a writer that started before the ALTER
    add = _write_file(path, rows_of(1, 10), SCHEMA, ())
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.feature.checkConstraints' = 'supported')")
    from isolde.executor.log.actions import Protocol

    with pytest.raises(E.ProtocolChangedException) as info:  # this writer changes the protocol too
        writer.commit([Protocol(1, 4), add], operation="WRITE")
    assert info.value.winning_operation == "SET TBLPROPERTIES"
    assert version_of(path) == 2
    # a plain property change is a metadata change: MetadataChangedException
    writer = DeltaLog.for_table(path).start_transaction()
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('team' = 'blue')")
    with pytest.raises(E.MetadataChangedException):
        writer.commit([add], operation="WRITE")
    assert delta_rows(path) == as_tuples(rows_of(2))
    # enabling deletion vectors (protocol and metadata) fails no writer that changes neither
    # (Delta 4.1+, FeatureEnablementConcurrencySuite): the append commits on top
    writer = DeltaLog.for_table(path).start_transaction()
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    assert writer.commit([add], operation="WRITE") == version_of(path) == 5
    assert delta_rows(path) == as_tuples(rows_of(2) + rows_of(1, 10))
    # a protocol that only gained a feature fails no writer either (as Delta 4.4: the feature asks
    # nothing until a property turns it on)
    add2 = _write_file(path, rows_of(1, 20), SCHEMA, ())
    writer = DeltaLog.for_table(path).start_transaction()
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.feature.changeDataFeed' = 'supported')")
    assert writer.commit([add2], operation="WRITE") == 7


def test_feature_and_protocol_properties(ctx, t):
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.feature.checkConstraints' = 'supported')")
    snap = snapshot(t)
    assert "checkConstraints" in snap.protocol.writer_features
    assert not any(k.startswith("delta.feature") for k in snap.metadata.configuration)
    with pytest.raises(E.InvalidPropertyError, match="only go up|DROP FEATURE"):
        run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.minWriterVersion' = '2')")
    assert version_of(t) == 2


def test_unset_tblproperties(ctx, t):
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('a' = '1', 'b' = '2')")
    with pytest.raises(E.AnalysisError, match="non-existent property 'zzz'") as info:
        run_stmt(ctx, "ALTER TABLE t UNSET TBLPROPERTIES ('a', 'zzz')")
    assert info.value.error_class == "DELTA_UNSET_NON_EXISTENT_PROPERTY"
    assert version_of(t) == 2
    r = run_stmt(ctx, "ALTER TABLE t UNSET TBLPROPERTIES IF EXISTS ('zzz')")
    assert version_of(t) == 2 and "nothing" in r.message
    r = run_stmt(ctx, "ALTER TABLE t UNSET TBLPROPERTIES IF EXISTS ('a', 'zzz')")
    assert r.operation == "UNSET TBLPROPERTIES" and r.version == 3
    conf = snapshot(t).metadata.configuration
    assert "a" not in conf and conf["b"] == "2"
    with pytest.raises(E.InvalidPropertyError, match="DROP CONSTRAINT"):
        run_stmt(ctx, "ALTER TABLE t UNSET TBLPROPERTIES ('delta.constraints.c')")
    assert delta_rows(t) == T_ROWS


# =========================================================================== ADD COLUMNS


def test_add_columns(ctx, t):
    r = run_stmt(ctx, "ALTER TABLE t ADD COLUMNS (note STRING COMMENT 'free text', score DOUBLE)")
    assert r.operation == "ADD COLUMNS"
    fields = snapshot(t).metadata.schema["fields"]
    assert [f["name"] for f in fields] == ["id", "x", "s", "note", "score"]
    assert fields[3]["metadata"]["comment"] == "free text" and fields[4]["nullable"] is True
    info = last_commit_info(t)
    assert [c["column"]["name"] for c in json.loads(info["operationParameters"]["columns"])] == ["note", "score"]
    assert delta_rows(t) == sorted_rows(r + (None, None) for r in T_ROWS)
    append(t, [{"id": 9, "x": 90, "s": "c"}], schema=pa.schema(
        [("id", pa.int64()), ("x", pa.int32()), ("s", pa.string()), ("note", pa.string()), ("score", pa.float64())]))
    assert (9, 90, "c", None, None) in delta_rows(t)


@pytest.mark.parametrize("sql, error_class, text", [
    ("ALTER TABLE t ADD COLUMNS (X INT)", "FIELDS_ALREADY_EXISTS", "already exists"),
    ("ALTER TABLE t ADD COLUMNS (a INT, A STRING)", "COLUMN_ALREADY_EXISTS", "listed twice"),
    ("ALTER TABLE t ADD COLUMNS (a INT NOT NULL)", "DELTA_NOT_NULL_COLUMN_NOT_FOUND_IN_STRUCT", "nullable"),
    ("ALTER TABLE t ADD COLUMNS (a FANCYTYPE)", "UNSUPPORTED_DATATYPE", "FANCYTYPE"),
])
def test_add_columns_refused(ctx, t, sql, error_class, text):
    with pytest.raises(E.AnalysisError, match=text) as info:
        run_stmt(ctx, sql)
    assert info.value.error_class == error_class
    assert version_of(t) == 1


# =========================================================================== constraints (log part)


def test_drop_constraint(ctx):
    path = table_path(ctx)
    make_table(path, [rows_of(2)], properties={"delta.constraints.pos": "x >= 0"})
    assert version_of(path) == 1
    with pytest.raises(E.AnalysisError, match="Did you mean `pos`") as info:
        run_stmt(ctx, "ALTER TABLE t DROP CONSTRAINT poss")
    assert info.value.error_class == "DELTA_CONSTRAINT_DOES_NOT_EXIST"
    r = run_stmt(ctx, "ALTER TABLE t DROP CONSTRAINT IF EXISTS nothing_here")
    assert version_of(path) == 1 and "nothing" in r.message
    with pytest.raises(E.AnalysisError, match="already exists.*x >= 0") as info:
        run_stmt(ctx, "ALTER TABLE t ADD CONSTRAINT POS CHECK (x > 5)")
    assert info.value.error_class == "DELTA_CONSTRAINT_ALREADY_EXISTS"
    r = run_stmt(ctx, "ALTER TABLE t DROP CONSTRAINT POS")
    assert r.operation == "DROP CONSTRAINT" and r.version == 2
    assert "delta.constraints.pos" not in snapshot(path).metadata.configuration
    assert last_commit_info(path)["operationParameters"] == {"name": "POS", "expr": "x >= 0"}
    assert delta_rows(path) == as_tuples(rows_of(2))


# =========================================================================== CLUSTER BY


def test_cluster_by_and_none(ctx, t):
    r = run_stmt(ctx, "ALTER TABLE t CLUSTER BY (s, ID)")
    assert r.operation == "CLUSTER BY"
    snap = snapshot(t)
    dm = snap.domain_metadata["delta.clustering"]
    assert json.loads(dm.configuration) == {"clusteringColumns": [["s"], ["id"]]}
    assert {"clustering", "domainMetadata"} <= set(snap.protocol.writer_features)
    detail = run_stmt(ctx, "DESCRIBE DETAIL t").as_dicts()[0]
    assert detail["clusteringColumns"] == ["s", "id"]
    assert last_commit_info(t)["operationParameters"] == {"oldClusteringColumns": "", "newClusteringColumns": "s,id"}
    run_stmt(ctx, "ALTER TABLE t CLUSTER BY NONE")
    assert json.loads(snapshot(t).domain_metadata["delta.clustering"].configuration) == {"clusteringColumns": []}
    assert run_stmt(ctx, "DESCRIBE DETAIL t").as_dicts()[0]["clusteringColumns"] == []
    assert delta_rows(t) == T_ROWS


def test_cluster_by_refused(ctx, t):
    with pytest.raises(E.ColumnNotFoundError, match="Did you mean `id`"):
        run_stmt(ctx, "ALTER TABLE t CLUSTER BY (idd)")
    with pytest.raises(E.AnalysisError, match="twice"):
        run_stmt(ctx, "ALTER TABLE t CLUSTER BY (id, id)")
    part = table_path(ctx, "p")
    make_table(part, [rows_of(2)], partition_by=["s"])
    with pytest.raises(E.AnalysisError, match="partitioned") as info:
        run_stmt(ctx, "ALTER TABLE p CLUSTER BY (id)")
    assert info.value.error_class == "DELTA_ALTER_TABLE_CLUSTER_BY_ON_PARTITIONED_TABLE_NOT_ALLOWED"
    assert version_of(t) == 1 and version_of(part) == 1
    r = run_stmt(ctx, "ALTER TABLE t CLUSTER BY NONE")  # not clustered: nothing to do
    assert version_of(t) == 1 and r.message


# =========================================================================== DROP FEATURE


def test_drop_feature_deletion_vectors(ctx, t):
    """Log level (no Spark): with no live deletion vector the drop needs no rewrite; TRUNCATE
    HISTORY first waits for the young history that still has them, the default drop protects
    it. (Purging live vectors is a Spark job: tests/executor/jobs/test_drop_feature_history.py.)"""
    snap = snapshot(t)
    delete_positions(t, snap.all_files[0], [1])
    expected = delta_rows(t)
    assert len(expected) == 5
    # no live file carries a DV once the DV'd file is replaced by a clean copy
    from isolde.executor.log.delta_log import DeltaLog
    from tests.helpers.meta import SCHEMA, _write_file

    dv_file = next(a for a in snapshot(t).all_files if a.deletion_vector is not None)
    kept = [{"id": r[0], "x": r[1], "s": r[2]} for r in expected if r[2] == dv_file_s(t, dv_file)]
    clean = _write_file(t, kept, SCHEMA, ())
    txn = DeltaLog.for_table(t).start_transaction()
    txn.commit([dv_file.remove(data_change=False), clean.__class__(**{**clean.__dict__, "data_change": False})],
               operation="REORG")
    with pytest.raises(E.ExecutionError) as err:  # the DV commits are younger than 24 hours
        run_stmt(ctx, "ALTER TABLE t DROP FEATURE deletionVectors TRUNCATE HISTORY")
    assert err.value.error_class == "DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD"
    assert "deletionVectors" in (snapshot(t).protocol.reader_features or [])
    r = run_stmt(ctx, "ALTER TABLE t DROP FEATURE deletionVectors")
    assert r.operation == "DROP FEATURE"
    snap = snapshot(t)
    assert snap.protocol.min_reader_version == 1 and snap.protocol.reader_features is None
    assert "deletionVectors" not in snap.protocol.writer_features
    assert "checkpointProtection" in snap.protocol.writer_features
    assert snap.metadata.configuration["delta.enableDeletionVectors"] == "false"
    assert snap.metadata.configuration["delta.requireCheckpointProtectionBeforeVersion"] == str(snap.version)
    assert delta_rows(t) == expected


def dv_file_s(path, add):
    """The ``s`` value of a file written by rows_of (every file holds one s)."""
    table = pq.read_table(os.path.join(path, add.path))
    return table.column("s")[0].as_py()


def test_drop_feature_refused(ctx, t):
    with pytest.raises(E.UnsupportedFeatureError, match="the features it can drop"):
        run_stmt(ctx, "ALTER TABLE t DROP FEATURE appendOnly")
    with pytest.raises(E.AnalysisError, match="Did you mean `deletionVectors`"):
        run_stmt(ctx, "ALTER TABLE t DROP FEATURE deletionVector")
    plain = table_path(ctx, "plain")
    make_table(plain, [rows_of(1)], properties={"delta.enableDeletionVectors": "false"})
    with pytest.raises(E.AnalysisError, match="does not have it"):
        run_stmt(ctx, "ALTER TABLE plain DROP FEATURE deletionVectors")
    assert version_of(t) == 1 and version_of(plain) == 1


# =========================================================================== DESCRIBE / SHOW


def test_describe_history(ctx, t):
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('k' = 'v')")
    append(t, rows_of(1, 100))
    h = run_stmt(ctx, "DESCRIBE HISTORY t")
    assert h.columns[:4] == ["version", "timestamp", "userName", "operation"]
    for col in ("operationParameters", "readVersion", "isolationLevel", "isBlindAppend", "operationMetrics",
                "engineInfo"):
        assert col in h.columns
    d = h.as_dicts()
    assert [r["version"] for r in d] == [3, 2, 1, 0]
    assert [r["operation"] for r in d] == ["WRITE", "SET TBLPROPERTIES", "WRITE", "CREATE TABLE"]
    assert d[1]["readVersion"] == 1 and d[0]["isBlindAppend"] is True
    assert d[0]["timestamp"] >= d[1]["timestamp"] >= d[3]["timestamp"]
    assert [r["version"] for r in run_stmt(ctx, "DESCRIBE HISTORY t LIMIT 2").as_dicts()] == [3, 2]


def test_describe_detail(ctx):
    path = table_path(ctx, "d")
    make_table(path, [rows_of(2, 0, "a"), rows_of(3, 2, "b")], partition_by=["s"], properties={"team": "x"})
    d = run_stmt(ctx, "DESCRIBE DETAIL d").as_dicts()[0]
    assert d["format"] == "delta" and d["name"] == "spark_catalog.default.d"
    assert d["location"] == "file:" + path
    assert d["partitionColumns"] == ["s"] and d["clusteringColumns"] == []
    assert d["numFiles"] == 2
    assert d["sizeInBytes"] == sum(a.size for a in snapshot(path).all_files)
    assert d["properties"] == {"delta.enableDeletionVectors": "true", "team": "x"}
    assert (d["minReaderVersion"], d["minWriterVersion"]) == (3, 7)
    assert "deletionVectors" in d["tableFeatures"]
    assert d["createdAt"] <= d["lastModified"]
    by_path = run_stmt(ctx, f"DESCRIBE DETAIL delta.`{path}`").as_dicts()[0]
    assert by_path["id"] == d["id"] and by_path["name"] is None


def test_describe_table_and_extended(ctx):
    path = table_path(ctx, "d")
    meta = {"id": {"delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.allowExplicitInsert": False,
                   "delta.identity.highWaterMark": 7},
            "x": {"comment": "the x", "delta.generationExpression": "id * 10"}}
    make_table(path, [rows_of(2)], partition_by=["s"], field_metadata=meta,
               properties={"delta.constraints.xpos": "x >= 0"})
    rows = run_stmt(ctx, "DESCRIBE TABLE d").rows
    assert rows[:3] == [("id", "bigint", None), ("x", "int", "the x"), ("s", "string", None)]
    assert ("# Partition Information", "", "") in rows
    i = rows.index(("# Partition Information", "", ""))
    assert rows[i + 2] == ("s", "string", None)
    ident = rows.index(("# Identity Columns", "", ""))
    assert rows[ident + 2] == ("id", "GENERATED ALWAYS AS IDENTITY (START WITH 1 INCREMENT BY 1)", "7")
    gen = rows.index(("# Generated Columns", "", ""))
    assert rows[gen + 2] == ("x", "GENERATED ALWAYS AS (id * 10)", "")
    assert not any(r[0] == "# Detailed Table Information" for r in rows)
    ext = run_stmt(ctx, "DESCRIBE EXTENDED d").rows
    assert ("xpos", "CHECK (x >= 0)", "") in ext
    details = {r[0]: r[1] for r in ext[ext.index(("# Detailed Table Information", "", "")):]}
    assert details["Provider"] == "delta" and details["Type"] == "MANAGED"
    assert details["Location"] == "file:" + path
    assert "delta.constraints.xpos=x >= 0" in details["Table Properties"]


def test_show_tblproperties(ctx, t):
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('Owner' = 'ops')")
    props = dict(run_stmt(ctx, "SHOW TBLPROPERTIES t").rows)
    assert props["Owner"] == "ops" and props["delta.enableDeletionVectors"] == "true"
    assert props["delta.minReaderVersion"] == "3" and props["delta.minWriterVersion"] == "7"
    assert props["delta.feature.deletionVectors"] == "supported"
    assert run_stmt(ctx, "SHOW TBLPROPERTIES t ('owner')").rows == [("Owner", "ops")]
    missing = run_stmt(ctx, "SHOW TBLPROPERTIES t ('nope')").rows
    assert missing == [("nope", "Table t does not have property: nope")]


# =========================================================================== RESTORE


def test_restore_to_version(ctx, t):
    v1 = delta_rows(t)
    append(t, rows_of(2, 50, "c"))                                   # v2
    delete_positions(t, snapshot(t).all_files[0], [0])               # v3: a DV
    run_stmt(ctx, "ALTER TABLE t ADD COLUMNS (extra STRING)")        # v4: schema change
    r = run_stmt(ctx, "RESTORE TABLE t TO VERSION AS OF 1")
    assert r.operation == "RESTORE" and r.version == 5
    snap = snapshot(t)
    assert {a.key for a in snap.all_files} == {a.key for a in snapshot(t, 1).all_files}
    assert [f["name"] for f in snap.metadata.schema["fields"]] == ["id", "x", "s"]
    m = r.metrics
    assert m["numOfFilesAfterRestore"] == 2 and m["numRestoredFiles"] == 1  # the DV'd file comes back clean
    assert m["numRemovedFiles"] == 2  # the appended file and the DV'd version of the file
    assert m["tableSizeAfterRestore"] == sum(a.size for a in snap.all_files)
    info = last_commit_info(t)
    assert info["operation"] == "RESTORE" and info["operationParameters"] == {"version": "1"}
    assert set(info["operationMetrics"]) == {"tableSizeAfterRestore", "numOfFilesAfterRestore", "numRemovedFiles",
                                             "numRestoredFiles", "removedFilesSize", "restoredFilesSize"}
    assert delta_rows(t) == v1 == delta_rows(t, version=1)
    assert delta_rows(t, version=4) != v1  # history is intact


def test_restore_by_timestamp_and_bad_versions(ctx, t):
    append(t, rows_of(1, 70))
    ts = snapshot(t, 1).timestamp
    import datetime as dt

    when = dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    r = run_stmt(ctx, f"RESTORE TABLE t TO TIMESTAMP AS OF '{when}'")
    assert r.version == 3 and delta_rows(t) == delta_rows(t, version=1)
    with pytest.raises(E.VersionNotFoundError, match="0 to 3"):
        run_stmt(ctx, "RESTORE TABLE t TO VERSION AS OF 9")
    with pytest.raises(E.VersionNotFoundError):
        run_stmt(ctx, "RESTORE TABLE t TO TIMESTAMP AS OF '2001-01-01 00:00:00'")
    assert version_of(t) == 3


def test_restore_never_downgrades_protocol(ctx):
    path = table_path(ctx)
    make_table(path, [rows_of(3)], properties={"delta.enableDeletionVectors": "false"})
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    delete_positions(path, snapshot(path).all_files[0], [1])
    run_stmt(ctx, "RESTORE TABLE t TO VERSION AS OF 1")
    snap = snapshot(path)
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (3, 7)
    assert snap.metadata.configuration["delta.enableDeletionVectors"] == "false"
    assert delta_rows(path) == as_tuples(rows_of(3))


def test_restore_fails_cleanly_when_files_were_vacuumed(ctx, t):
    old = snapshot(t, 1).all_files
    append(t, rows_of(1, 80))
    from isolde.executor.log.delta_log import DeltaLog

    txn = DeltaLog.for_table(t).start_transaction()
    txn.read_whole_table()
    txn.commit([a.remove() for a in old], operation="DELETE")      # v3: everything from v1 deleted
    os.remove(os.path.join(t, old[0].path))                        # ... and vacuumed
    with pytest.raises(E.ExecutionError, match="no longer exist.*VACUUM") as info:
        run_stmt(ctx, "RESTORE TABLE t TO VERSION AS OF 1")
    assert info.value.error_class == "DELTA_CANNOT_RESTORE_MISSING_FILES"
    assert version_of(t) == 3
    assert delta_rows(t) == as_tuples(rows_of(1, 80))


def test_restore_against_concurrent_writes(ctx, t):
    append(t, rows_of(1, 60, "c"))
    # a concurrent DELETE that removes a file RESTORE read: the restore must fail, not undo it silently
    prepared = prepare_stmt(ctx, "RESTORE TABLE t TO VERSION AS OF 1")
    from isolde.executor.log.delta_log import DeltaLog

    victim = snapshot(t).all_files[0]
    txn = DeltaLog.for_table(t).start_transaction()
    txn.read_whole_table()
    txn.commit([victim.remove()], operation="DELETE")
    with pytest.raises(E.ConcurrentModificationException) as info:
        prepared.commit()
    assert info.value.winning_operation == "DELETE"
    assert version_of(t) == 3
    # a concurrent blind append is kept (WriteSerializable, as in Delta): restore rebases over it
    prepared = prepare_stmt(ctx, "RESTORE TABLE t TO VERSION AS OF 1")
    append(t, rows_of(1, 90, "z"))
    r = prepared.commit()
    assert r.version == 5
    assert delta_rows(t) == sorted_rows(delta_rows(t, version=1) + as_tuples(rows_of(1, 90, "z")))


# =========================================================================== VACUUM


def _old_tombstones(path, adds, days=8):
    """Commit removes of ``adds`` with a deletion timestamp ``days`` ago (an old DELETE)."""
    from isolde.executor.log.delta_log import DeltaLog

    ts = int((time.time() - days * DAY) * 1000)
    txn = DeltaLog.for_table(path).start_transaction()
    txn.read_whole_table()
    return txn.commit([a.remove(deletion_timestamp=ts) for a in adds], operation="DELETE")


def test_vacuum_retention_check(ctx, t):
    with pytest.raises(E.AnalysisError, match="spark.databricks.delta.retentionDurationCheck.enabled") as info:
        run_stmt(ctx, "VACUUM t RETAIN 0 HOURS")
    assert info.value.error_class == "DELTA_VACUUM_RETENTION_PERIOD_TOO_SHORT"
    with pytest.raises(E.AnalysisError):
        run_stmt(ctx, "VACUUM t RETAIN 167 HOURS DRY RUN")
    assert version_of(t) == 1
    run_stmt(ctx, "VACUUM t RETAIN 168 HOURS")
    assert version_of(t) == 3
    # a table with a shorter deletedFileRetentionDuration accepts a shorter RETAIN
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 1 hours')")
    run_stmt(ctx, "VACUUM t RETAIN 2 HOURS")
    ctx.conf["spark.databricks.delta.retentionDurationCheck.enabled"] = "false"
    run_stmt(ctx, "VACUUM t RETAIN 0 HOURS DRY RUN")


def test_vacuum_deletes_only_unneeded_files(ctx, t):
    snap1 = snapshot(t)
    gone, live = snap1.all_files
    _old_tombstones(t, [gone])                                   # v2: removed 8 days ago
    append(t, rows_of(1, 40))                                    # v3
    recent = [a for a in snapshot(t).all_files if a.path != live.path][0]
    append(t, rows_of(1, 41))                                    # v4
    from isolde.executor.log.delta_log import DeltaLog

    txn = DeltaLog.for_table(t).start_transaction()
    txn.read_whole_table()
    txn.commit([recent.remove()], operation="DELETE")            # v5: removed just now (within retention)
    # files nobody references: an old orphan, a young one (a writer that has not committed yet),
    # an old file in a hidden folder, an old leftover of a staging folder, a DV of a live file
    orphan_old = os.path.join(t, "part-orphan-old.parquet")
    orphan_young = os.path.join(t, "part-orphan-young.parquet")
    hidden = os.path.join(t, "_hidden", "part-h.parquet")
    staged = os.path.join(t, ".isolde-staging-abc", "part-s.parquet")
    for p in (orphan_old, orphan_young, hidden, staged):
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as fh:
            fh.write(b"x")
    delete_positions(t, snapshot(t).file(live.path), [0])        # v6: DV file for a live file
    age_files(t, 9 * DAY)
    os.utime(orphan_young, None)
    before = version_of(t)
    dry = run_stmt(ctx, "VACUUM t DRY RUN")
    assert version_of(t) == before
    listed = sorted(r[0] for r in dry.rows)
    assert listed == sorted([os.path.join(t, gone.path), orphan_old, staged])
    assert all(os.path.exists(p) for p in listed)
    r = run_stmt(ctx, "VACUUM t")
    assert r.operation == "VACUUM END" and r.metrics["numDeletedFiles"] == 3
    assert not any(os.path.exists(p) for p in listed)
    for p in (orphan_young, hidden, os.path.join(t, recent.path), os.path.join(t, live.path)):
        assert os.path.exists(p), p
    hist = run_stmt(ctx, "DESCRIBE HISTORY t LIMIT 2").as_dicts()
    assert [h["operation"] for h in hist] == ["VACUUM END", "VACUUM START"]
    assert hist[1]["operationMetrics"]["numFilesToDelete"] == "3"
    assert hist[0]["operationParameters"] == {"status": "COMPLETED"}
    # every version within the retention is still readable, the current one too
    assert delta_rows(t, version=5) == delta_rows(t, version=5)
    assert len(delta_rows(t, version=4)) == 5
    expected = sorted_rows([r for r in as_tuples(rows_of(3, 3, "b")) if r[0] != 3] + as_tuples(rows_of(1, 41)))
    assert delta_rows(t) == expected


def test_vacuum_zero_retention_and_dv_files(ctx, t):
    ctx.conf["spark.databricks.delta.retentionDurationCheck.enabled"] = "false"
    a, b = snapshot(t).all_files
    delete_positions(t, a, [0])                 # DV file 1 on a
    delete_positions(t, snapshot(t).file(a.path), [0, 1])   # DV file 2 replaces it
    from isolde.executor.log.deletion_vectors import dv_file_path

    live_dv = dv_file_path(t, snapshot(t).file(a.path).deletion_vector)
    old_dv = dv_file_path(t, snapshot(t, 2).file(a.path).deletion_vector)
    age_files(t, 60)
    run_stmt(ctx, "VACUUM t RETAIN 0 HOURS")
    assert os.path.exists(live_dv) and not os.path.exists(old_dv)
    assert os.path.exists(os.path.join(t, a.path)) and os.path.exists(os.path.join(t, b.path))
    assert len(delta_rows(t)) == 4


def test_vacuum_keeps_files_of_a_prepared_write(ctx, t):
    """A write staged but not committed (young files) survives VACUUM with the default retention,
    and commits fine afterwards; with the retention check off and 0 hours it would not."""
    from isolde.executor.log.delta_log import DeltaLog
    from tests.helpers.meta import SCHEMA, _write_file

    writer = DeltaLog.for_table(t).start_transaction()
    add = _write_file(t, rows_of(2, 200, "new"), SCHEMA, ())
    age_files(t, 30 * DAY)
    os.utime(os.path.join(t, add.path), None)    # the staged file is young
    _old_tombstones(t, [snapshot(t).all_files[0]], days=10)
    r = run_stmt(ctx, "VACUUM t")
    assert r.metrics["numDeletedFiles"] == 1
    assert os.path.exists(os.path.join(t, add.path))
    writer.commit([add], operation="WRITE")
    assert delta_rows(t) == sorted_rows(as_tuples(rows_of(3, 3, "b")) + as_tuples(rows_of(2, 200, "new")))


def test_vacuum_lite(ctx, t):
    gone = snapshot(t).all_files[0]
    _old_tombstones(t, [gone])
    orphan = os.path.join(t, "part-never-committed.parquet")
    with open(orphan, "wb") as fh:
        fh.write(b"x")
    age_files(t, 9 * DAY)
    r = run_stmt(ctx, "VACUUM t LITE")
    assert r.metrics["numDeletedFiles"] == 1
    assert not os.path.exists(os.path.join(t, gone.path)) and os.path.exists(orphan)
    assert json.loads(json.dumps(last_commit_info(t)["operation"])) == "VACUUM END"
    assert delta_rows(t) == as_tuples(rows_of(3, 3, "b"))


# =========================================================================== CLONE


def test_shallow_clone(ctx, t):
    delete_positions(t, snapshot(t).all_files[0], [2])          # v2: a file DV in the source
    append(t, rows_of(1, 30, "later"))                          # v3
    r = run_stmt(ctx, "CREATE TABLE c SHALLOW CLONE t VERSION AS OF 2 TBLPROPERTIES ('delta.isolationLevel' = "
                      "'serializable', 'cloned' = 'yes')")
    c = table_path(ctx, "c")
    assert r.operation == "CLONE" and r.version == 0
    snap = snapshot(c)
    assert all(a.path.startswith("file:/") for a in snap.all_files)
    dvs = [a.deletion_vector for a in snap.all_files if a.deletion_vector is not None]
    assert len(dvs) == 1 and dvs[0].storage_type == "p"
    assert snap.metadata.id != snapshot(t).metadata.id
    assert snap.metadata.configuration["delta.isolationLevel"] == "Serializable"
    assert snap.metadata.configuration["cloned"] == "yes"
    assert r.metrics["sourceNumOfFiles"] == 2 and r.metrics["numCopiedFiles"] == 0
    params = last_commit_info(c)["operationParameters"]
    assert params["sourceVersion"] == "2" and params["isShallow"] == "true"
    assert not [n for n in os.listdir(c) if n != "_delta_log"]  # nothing copied
    assert delta_rows(c) == delta_rows(t, version=2)
    append(t, rows_of(1, 31, "later"))
    assert delta_rows(c) == delta_rows(t, version=2)            # the clone does not follow its source


def test_deep_clone_and_clone_errors(ctx, t):
    delete_positions(t, snapshot(t).all_files[0], [0])
    run_stmt(ctx, "CREATE TABLE d DEEP CLONE t")
    d = table_path(ctx, "d")
    expected = delta_rows(t)
    assert all(not a.path.startswith("file:") for a in snapshot(d).all_files)
    shutil.rmtree(t)
    assert delta_rows(d) == expected and len(expected) == 5
    make_table(t, [rows_of(1)])
    with pytest.raises(E.TableAlreadyExistsError):
        run_stmt(ctx, "CREATE TABLE d SHALLOW CLONE t")
    r = run_stmt(ctx, "CREATE TABLE IF NOT EXISTS d SHALLOW CLONE t")
    assert r.message and version_of(d) == 0
    with pytest.raises(E.InvalidPropertyError, match="Did you mean"):
        run_stmt(ctx, "CREATE TABLE e SHALLOW CLONE t TBLPROPERTIES ('delta.appendOnlyy' = 'true')")
    assert not os.path.exists(os.path.join(table_path(ctx, "e"), "_delta_log"))
    with pytest.raises(E.TableNotFoundError):
        run_stmt(ctx, "CREATE TABLE e SHALLOW CLONE nope")
    r = run_stmt(ctx, "CREATE OR REPLACE TABLE d SHALLOW CLONE t")
    assert r.version == 1 and r.metrics["numRemovedFiles"] == 2
    assert delta_rows(d) == as_tuples(rows_of(1))


# =========================================================================== CONVERT TO DELTA


def _parquet(path, rows, schema=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def test_convert_unpartitioned(ctx, tmp_path):
    folder = str(tmp_path / "raw")
    _parquet(f"{folder}/a.parquet", [{"id": 1, "name": "x"}, {"id": 2, "name": None}])
    _parquet(f"{folder}/b.parquet", [{"id": 3, "name": "z"}])
    _parquet(f"{folder}/_ignored/c.parquet", [{"id": 99, "name": "hidden"}])
    r = run_stmt(ctx, f"CONVERT TO DELTA parquet.`{folder}`")
    assert r.operation == "CONVERT" and r.version == 0
    snap = snapshot(folder)
    assert [f["name"] for f in snap.metadata.schema["fields"]] == ["id", "name"]
    assert [f["type"] for f in snap.metadata.schema["fields"]] == ["long", "string"]
    assert len(snap.all_files) == 2 and all(a.num_records for a in snap.all_files)
    stats = json.loads(next(a for a in snap.all_files if a.path == "a.parquet").stats)
    assert stats["minValues"]["id"] == 1 and stats["nullCount"]["name"] == 1
    assert last_commit_info(folder)["operationParameters"]["numFiles"] == "2"
    assert delta_rows(folder) == [(1, "x"), (2, None), (3, "z")]
    r = run_stmt(ctx, f"CONVERT TO DELTA parquet.`{folder}`")        # already Delta: nothing happens
    assert "already a Delta table" in r.message and version_of(folder) == 0


def test_convert_partitioned_no_statistics(ctx, tmp_path):
    folder = str(tmp_path / "raw p")
    _parquet(f"{folder}/day=2024-01-01/region=eu/f1.parquet", [{"v": 1.5}])
    _parquet(f"{folder}/day=2024-01-02/region=us%20east/f2.parquet", [{"v": 2.5}, {"v": 3.5}])
    _parquet(f"{folder}/day=2024-01-02/region=__HIVE_DEFAULT_PARTITION__/f3.parquet", [{"v": 4.5}])
    r = run_stmt(ctx, f"CONVERT TO DELTA parquet.`{folder}` NO STATISTICS PARTITIONED BY (day DATE, region STRING)")
    assert r.version == 0
    snap = snapshot(folder)
    assert snap.metadata.partition_columns == ("day", "region")
    assert all(a.stats is None for a in snap.all_files)
    values = sorted((a.partition_values["day"], a.partition_values["region"] or "") for a in snap.all_files)
    assert values == [("2024-01-01", "eu"), ("2024-01-02", ""), ("2024-01-02", "us east")]
    import datetime as dt

    assert delta_rows(folder, columns=["v", "day", "region"]) == sorted_rows([
        (1.5, dt.date(2024, 1, 1), "eu"), (2.5, dt.date(2024, 1, 2), "us east"), (3.5, dt.date(2024, 1, 2), "us east"),
        (4.5, dt.date(2024, 1, 2), None)])
    assert last_commit_info(folder)["operationParameters"]["partitionedBy"] == '["day", "region"]'


@pytest.mark.parametrize("layout, clause, error_class", [
    ({"p=1/a.parquet": [{"v": 1}]}, "", "DELTA_CONVERSION_UNEXPECTED_PARTITION_DIRECTORY"),
    ({"q=1/a.parquet": [{"v": 1}]}, "PARTITIONED BY (p INT)", "DELTA_CONVERSION_PARTITION_MISMATCH"),
    ({"p=abc/a.parquet": [{"v": 1}]}, "PARTITIONED BY (p INT)", "DELTA_CONVERSION_INVALID_PARTITION"),
    ({"a.parquet": [{"v": 1}], "b.parquet": [{"v": "text"}]}, "", "DELTA_FAILED_TO_MERGE_FIELDS"),
    ({}, "", "DELTA_CONVERSION_NO_FILES"),
    ({"a.parquet": [{"v": 1, "p": 2}]}, "", None),
])
def test_convert_refused(ctx, tmp_path, layout, clause, error_class):
    folder = str(tmp_path / "raw")
    os.makedirs(folder)
    for rel, rows in layout.items():
        _parquet(os.path.join(folder, rel), rows)
    if error_class is None:  # control case: converts fine
        run_stmt(ctx, f"CONVERT TO DELTA parquet.`{folder}` {clause}")
        assert delta_rows(folder) == [(1, 2)]
        return
    with pytest.raises(E.IsoldeError) as info:
        run_stmt(ctx, f"CONVERT TO DELTA parquet.`{folder}` {clause}")
    assert info.value.error_class == error_class
    assert not os.path.exists(os.path.join(folder, "_delta_log", "00000000000000000000.json"))


def test_convert_not_parquet_and_partition_column_in_data(ctx, tmp_path):
    folder = str(tmp_path / "raw")
    os.makedirs(folder)
    with open(os.path.join(folder, "notes.txt"), "w") as fh:
        fh.write("hello")
    with pytest.raises(E.ExecutionError, match="notes.txt is not a Parquet file"):
        run_stmt(ctx, f"CONVERT TO DELTA parquet.`{folder}`")
    os.remove(os.path.join(folder, "notes.txt"))
    _parquet(os.path.join(folder, "p=1", "a.parquet"), [{"v": 1, "p": 1}])
    with pytest.raises(E.AnalysisError, match="also stored in the data files"):
        run_stmt(ctx, f"CONVERT TO DELTA parquet.`{folder}` PARTITIONED BY (p INT)")
    with pytest.raises(E.AnalysisError, match="by path only"):
        run_stmt(ctx, "CONVERT TO DELTA some_table")


@pytest.mark.parametrize("prop, error_class", [
    ("'delta.columnMapping.mode' = 'id'", "DELTA_UNSUPPORTED_COLUMN_MAPPING_MODE_CHANGE"),  # none -> name is allowed
    ("'delta.enableIcebergCompatV2' = 'true'", "DELTA_UNSUPPORTED_TABLE_PROPERTY_CHANGE"),
])
def test_set_tblproperties_refuses_what_needs_a_rewrite(ctx, t, prop, error_class):
    with pytest.raises(E.InvalidPropertyError, match="existing table") as info:
        run_stmt(ctx, f"ALTER TABLE t SET TBLPROPERTIES ({prop})")
    assert info.value.error_class == error_class
    assert version_of(t) == 1
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.enableRowTracking' = 'false')")  # off stays allowed


def test_row_tracking_turned_on_for_an_existing_table(ctx, t):
    """One commit adds the feature (with domainMetadata), the property and the materialised
    column names, and gives every live file a base row id (re-added, dataChange=false), as
    Delta's backfill does; the rows are unchanged and their ids distinct."""
    before = {f.path for f in snapshot(t).all_files}
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')")
    snap = snapshot(t)
    assert {"rowTracking", "domainMetadata"} <= set(snap.protocol.writer_features)
    conf = snap.metadata.configuration
    assert conf["delta.enableRowTracking"] == "true"
    assert conf["delta.rowTracking.materializedRowIdColumnName"].startswith("_row-id-col-")
    files = snap.all_files
    assert {f.path for f in files} == before and all(f.base_row_id is not None for f in files)
    ranges = sorted((f.base_row_id, f.base_row_id + f.num_records - 1) for f in files)
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))
    assert delta_rows(t) == sorted_rows(T_ROWS)


def test_change_data_feed_turned_on_for_an_existing_table(ctx, t):
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    snap = snapshot(t)
    assert snap.metadata.configuration["delta.enableChangeDataFeed"] == "true"
    p = snap.protocol
    assert "changeDataFeed" in (p.writer_features or ()) or p.min_writer_version >= 4


def test_the_column_mapping_mode_never_leaves_name_mode(ctx):
    """name -> none (or UNSET) would leave every file's physical column names unmapped (none ->
    name is the one change allowed: tests/executor/catalog/test_column_mapping_upgrade.py)."""
    path = table_path(ctx, "cm")
    ids = {name: {"delta.columnMapping.id": i + 1, "delta.columnMapping.physicalName": name}
           for i, name in enumerate(SCHEMA.names)}  # physical names = the names the files hold
    make_table(path, [rows_of(2)], field_metadata=ids,
               properties={"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": str(len(ids))})
    for sql in ["ALTER TABLE cm SET TBLPROPERTIES ('delta.columnMapping.mode' = 'none')",
                "ALTER TABLE cm SET TBLPROPERTIES ('delta.columnMapping.mode' = 'id')",
                "ALTER TABLE cm UNSET TBLPROPERTIES ('delta.columnMapping.mode')"]:
        with pytest.raises(E.InvalidPropertyError) as info:
            run_stmt(ctx, sql)
        assert info.value.error_class == "DELTA_UNSUPPORTED_COLUMN_MAPPING_MODE_CHANGE"
    assert version_of(path) == 1
    run_stmt(ctx, "ALTER TABLE cm SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")  # unchanged: fine
    assert snapshot(path).metadata.configuration["delta.columnMapping.mode"] == "name"
    assert delta_rows(path) == as_tuples(rows_of(2))


def test_deep_clone_of_a_shallow_clone_and_location(ctx, t, tmp_path):
    delete_positions(t, snapshot(t).all_files[0], [1])
    run_stmt(ctx, "CREATE TABLE sc SHALLOW CLONE t")
    ext = str(tmp_path / "elsewhere" / "dc")
    r = run_stmt(ctx, f"CREATE TABLE dc DEEP CLONE sc LOCATION '{ext}'")
    assert r.metrics["numCopiedFiles"] == 2
    snap = snapshot(ext)
    assert all(not a.path.startswith("file:") for a in snap.all_files)
    assert [a.deletion_vector.storage_type for a in snap.all_files if a.deletion_vector] == ["u"]
    expected = delta_rows(t)
    shutil.rmtree(t)
    assert delta_rows(ext) == expected and len(expected) == 5
    detail = run_stmt(ctx, "DESCRIBE DETAIL dc").as_dicts()[0]          # registered as an external table
    assert detail["location"] == "file:" + ext
    ext_rows = run_stmt(ctx, "DESCRIBE EXTENDED dc").rows
    assert ("Type", "EXTERNAL", "") in ext_rows


def test_vacuum_partitioned_removes_emptied_folders(ctx):
    path = table_path(ctx, "p")
    make_table(path, [rows_of(2, 0, "a"), rows_of(2, 2, "b")], partition_by=["s"])
    gone = next(a for a in snapshot(path).all_files if a.partition_values["s"] == "a")
    _old_tombstones(path, [gone])
    age_files(path, 9 * DAY)
    r = run_stmt(ctx, "VACUUM p")
    assert r.metrics["numDeletedFiles"] == 1 and r.metrics["numDeletedDirectories"] == 1
    assert not os.path.exists(os.path.join(path, "s=a")) and os.path.isdir(os.path.join(path, "s=b"))
    assert delta_rows(path, columns=["id", "x", "s"]) == as_tuples(rows_of(2, 2, "b"))


def test_concurrent_alters_second_one_fails(ctx, t):
    first = prepare_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('owner' = 'a')")
    second = prepare_stmt(ctx, "ALTER TABLE t ADD COLUMNS (extra INT)")
    append_version = append(t, rows_of(1, 500))         # a blind append between: does not block an ALTER
    assert first.commit().version == append_version + 1
    with pytest.raises(E.MetadataChangedException) as info:
        second.commit()
    assert info.value.winning_operation == "SET TBLPROPERTIES"
    assert [f["name"] for f in snapshot(t).metadata.schema["fields"]] == ["id", "x", "s"]
    assert delta_rows(t) == sorted_rows(T_ROWS + as_tuples(rows_of(1, 500)))


def test_clone_timestamp_as_of(ctx, t):
    import datetime as dt

    append(t, rows_of(2, 300, "new"))
    when = dt.datetime.fromtimestamp(snapshot(t, 1).timestamp / 1000, dt.timezone.utc)
    r = run_stmt(ctx, f"CREATE TABLE c SHALLOW CLONE t TIMESTAMP AS OF '{when.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]}'")
    assert last_commit_info(table_path(ctx, "c"))["operationParameters"]["sourceVersion"] == "1"
    assert r.metrics["sourceNumOfFiles"] == 2
    assert delta_rows(table_path(ctx, "c")) == T_ROWS


def test_metadata_commands_on_a_table_delta_rs_wrote(ctx):
    """A table written by delta-rs: history, properties, restore, clone and vacuum all work on it,
    and delta-rs keeps reading (and writing) what isolde committed."""
    from deltalake import DeltaTable, write_deltalake

    path = table_path(ctx, "rs")
    first = pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]})
    write_deltalake(path, first)
    write_deltalake(path, pa.table({"id": pa.array([3], pa.int64()), "v": ["c"]}), mode="append")
    hist = run_stmt(ctx, "DESCRIBE HISTORY rs").as_dicts()
    assert [h["version"] for h in hist] == [1, 0]
    run_stmt(ctx, "ALTER TABLE rs SET TBLPROPERTIES ('delta.isolationLevel' = 'Serializable', 'origin' = 'rs')")
    run_stmt(ctx, "RESTORE TABLE rs TO VERSION AS OF 0")
    assert delta_rows(path) == [(1, "a"), (2, "b")]
    assert snapshot(path).metadata.configuration.get("origin") is None   # the metadata of version 0 is back
    run_stmt(ctx, "CREATE TABLE rsc SHALLOW CLONE rs VERSION AS OF 1")
    assert delta_rows(table_path(ctx, "rsc")) == [(1, "a"), (2, "b"), (3, "c")]
    write_deltalake(path, pa.table({"id": pa.array([4], pa.int64()), "v": ["d"]}), mode="append")
    assert DeltaTable(path).version() == 4
    dry = run_stmt(ctx, "VACUUM rs DRY RUN")
    assert dry.rows == []
    assert delta_rows(path) == [(1, "a"), (2, "b"), (4, "d")]


def test_feature_properties_that_need_more_than_a_protocol_change(ctx, t):
    with pytest.raises(E.InvalidPropertyError, match="rowTracking") as info:
        run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.feature.rowTracking' = 'supported')")
    assert info.value.error_class == "DELTA_UNSUPPORTED_TABLE_PROPERTY_CHANGE"
    with pytest.raises(E.InvalidPropertyError, match="noSuchFeature"):
        run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.feature.noSuchFeature' = 'supported')")
    with pytest.raises(E.InvalidPropertyError, match="supported"):
        run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.feature.clustering' = 'on')")
    assert version_of(t) == 1
    run_stmt(ctx, "ALTER TABLE t SET TBLPROPERTIES ('delta.feature.clustering' = 'enabled')")
    assert "clustering" in snapshot(t).protocol.writer_features


def test_vacuum_keeps_iceberg_metadata_of_uniform_tables(ctx):
    path = table_path(ctx, "u")
    make_table(path, [rows_of(2)], properties={"delta.universalFormat.enabledFormats": "iceberg"})
    iceberg = os.path.join(path, "metadata", "v1.metadata.json")
    orphan = os.path.join(path, "part-orphan.parquet")
    for p in (iceberg, orphan):
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as fh:
            fh.write("{}")
    age_files(path, 30 * DAY)
    run_stmt(ctx, "VACUUM u")
    assert os.path.exists(iceberg) and not os.path.exists(orphan)
    assert delta_rows(path) == as_tuples(rows_of(2))
