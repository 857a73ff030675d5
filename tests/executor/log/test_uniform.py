"""Delta UniForm (Iceberg): after every commit pyiceberg (StaticTable on the latest metadata file
in <table>/metadata) returns exactly isolde's rows, and delta-rs still reads the table."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest

pytestmark = pytest.mark.spark

UNIFORM = ("TBLPROPERTIES ('delta.enableIcebergCompatV2' = 'true', "
           "'delta.universalFormat.enabledFormats' = 'iceberg')")


def _norm(v):
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    if isinstance(v, list) and v and isinstance(v[0], tuple) and len(v[0]) == 2:  # pyarrow map
        return tuple(sorted((k, _norm(x)) for k, x in v))
    if isinstance(v, list):
        return tuple(_norm(x) for x in v)
    if hasattr(v, "asDict"):
        return _norm(v.asDict())
    return v


def _sorted(rows):
    return sorted((tuple(_norm(x) for x in r) for r in rows), key=lambda r: repr(r))


def iceberg(path):
    from isolde.executor.log import uniform

    return uniform.read_iceberg(path)


def iceberg_rows(path, columns):
    t = iceberg(path).scan().to_arrow()
    return _sorted([tuple(r[c] for c in columns) for r in t.to_pylist()])


def isolde_rows(session, name, columns):
    res = session.execute(f"SELECT {', '.join(columns)} FROM {name}")
    return _sorted(res.rows)


def delta_version(path):
    return int(iceberg(path).metadata.properties["delta-version"])


def check(session, table_path, delta_rows, name, columns):
    path = table_path(session, name)
    from isolde.executor.log.delta_log import DeltaLog

    version = DeltaLog(path).update().version
    assert delta_version(path) == version
    expected = isolde_rows(session, name, columns)
    assert iceberg_rows(path, columns) == expected
    assert _sorted(delta_rows(path, columns)) == expected
    return path


@pytest.mark.parametrize("partitioned", [False, True])
def test_uniform_follows_every_dml(session, table_path, delta_rows, partitioned):
    part = "PARTITIONED BY (p)" if partitioned else ""
    session.execute(f"CREATE TABLE t (id INT, s STRING, p STRING) {part} {UNIFORM}")
    cols = ["id", "s", "p"]
    session.execute("INSERT INTO t VALUES (1, 'a', 'x'), (2, 'b', 'y'), (3, 'c', NULL), (4, 'd', 'x')")
    path = check(session, table_path, delta_rows, "t", cols)
    conf = json.loads(open(os.path.join(path, "_delta_log", "00000000000000000000.json")).read().splitlines()[2])
    configuration = conf["metaData"]["configuration"]
    assert configuration["delta.columnMapping.mode"] == "name"
    assert configuration["delta.enableDeletionVectors"] == "false"

    plan = "\n".join(str(r[0]) for r in session.execute("EXPLAIN UPDATE t SET s = 'z' WHERE id = 1").rows)
    assert "deletion vectors are disabled" in plan  # routes.choose_mode -> REWRITE (copy-on-write)
    assert "Write: copy-on-write: rewrites the touched files (deletion vectors are off)" in plan
    session.execute("UPDATE t SET s = 'z' WHERE id = 1")
    check(session, table_path, delta_rows, "t", cols)
    session.execute("DELETE FROM t WHERE id = 2")
    check(session, table_path, delta_rows, "t", cols)
    session.execute("MERGE INTO t USING (SELECT 3 AS id, 'm' AS s, 'y' AS p UNION ALL SELECT 9, 'n', 'x') src "
                    "ON t.id = src.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    check(session, table_path, delta_rows, "t", cols)
    session.execute("INSERT INTO t VALUES (5, 'e', 'y')")
    session.execute("OPTIMIZE t")
    check(session, table_path, delta_rows, "t", cols)
    from isolde.executor.log.delta_log import DeltaLog

    for a in DeltaLog(path).update().all_files:
        assert a.deletion_vector is None
        assert "numRecords" in json.loads(a.stats)
        assert a.tags.get("ICEBERG_COMPAT_VERSION") == "2"
    ops = [s.summary.operation.value for s in iceberg(path).metadata.snapshots]
    assert ops[0] == "append" and "overwrite" in ops
    assert ("delete" in ops) == partitioned  # DELETE emptied the p='y' file: remove only
    assert ops[-1] == "replace"  # OPTIMIZE: dataChange=false rewrite


def test_uniform_every_primitive_type(session, table_path, delta_rows):
    session.execute(
        "CREATE TABLE ty (b TINYINT, sh SMALLINT, i INT, l BIGINT, f FLOAT, d DOUBLE, dec DECIMAL(10, 2), "
        "s STRING, bin BINARY, bo BOOLEAN, day DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, "
        "st STRUCT<x: INT, y: STRING>, arr ARRAY<INT>, m MAP<STRING, INT>) " + UNIFORM)
    session.execute(
        "INSERT INTO ty VALUES "
        "(1, 2, 3, 4000000000, 1.5, 2.25, 12.34, 'x', X'CAFE', true, DATE'2024-01-02', "
        "TIMESTAMP'2024-01-02 03:04:05.123456', TIMESTAMP_NTZ'2024-05-06 07:08:09.5', named_struct('x', 1, 'y', 'q'), "
        "array(1, 2), map('k', 7)), "
        "(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
    cols = ["b", "sh", "i", "l", "f", "d", "dec", "s", "bin", "bo", "day", "ts", "ntz"]
    path = check(session, table_path, delta_rows, "ty", cols)
    t = iceberg(path).scan().to_arrow()
    got = {r["i"]: r for r in t.to_pylist()}
    assert got[3]["st"] == {"x": 1, "y": "q"} and got[3]["arr"] == [1, 2] and dict(got[3]["m"]) == {"k": 7}
    # Delta column-mapping ids are the Iceberg field ids
    from isolde.executor.log.delta_log import DeltaLog

    fields = DeltaLog(path).update().metadata.schema["fields"]
    schema = iceberg(path).schema()
    for f in fields:
        assert schema.find_field(f["name"]).field_id == f["metadata"]["delta.columnMapping.id"]
    # bounds from the Delta stats: pruning on an int column plans no file for a missing value
    from pyiceberg.expressions import EqualTo

    assert list(iceberg(path).scan(row_filter=EqualTo("i", 99)).plan_files()) == []


def test_uniform_partitioned_types(session, table_path, delta_rows):
    session.execute("CREATE TABLE pt (id INT, day DATE, n BIGINT, dec DECIMAL(5, 1)) PARTITIONED BY (day, n, dec) "
                    + UNIFORM)
    session.execute("INSERT INTO pt VALUES (1, DATE'2024-01-01', 5, 1.5), (2, NULL, NULL, NULL), "
                    "(3, DATE'2024-02-01', 6, 2.5)")
    check(session, table_path, delta_rows, "pt", ["id", "day", "n", "dec"])


def test_conversion_failure_never_fails_the_commit(session, table_path, delta_rows, monkeypatch):
    from isolde.executor.log import uniform

    session.execute(f"CREATE TABLE f (id INT, s STRING) {UNIFORM}")
    session.execute("INSERT INTO f VALUES (1, 'a')")
    path = check(session, table_path, delta_rows, "f", ["id", "s"])

    def boom(*a, **k):
        raise RuntimeError("simulated converter failure")

    monkeypatch.setattr(uniform, "convert_table", boom)
    session.execute("INSERT INTO f VALUES (2, 'b')")
    session.execute("DELETE FROM f WHERE id = 1")
    assert isolde_rows(session, "f", ["id", "s"]) == [(2, "b")]
    assert delta_version(path) == 1  # Iceberg lags, Delta committed
    monkeypatch.undo()
    session.execute("INSERT INTO f VALUES (3, 'c')")
    check(session, table_path, delta_rows, "f", ["id", "s"])
    ice = iceberg(path).metadata
    assert [s.summary.additional_properties.get("delta-version") for s in ice.snapshots] == ["1", "2", "3", "4"]
    assert ice.properties["base-delta-version"] == "1"


def test_msck_repair_sync_metadata_catches_up_after_failed_conversions(session, table_path, delta_rows,
                                                                      monkeypatch):
    from isolde.errors import AnalysisError, ExecutionError
    from isolde.executor.log import uniform

    session.execute(f"CREATE TABLE m (id INT, s STRING) {UNIFORM}")
    session.execute("INSERT INTO m VALUES (1, 'a')")
    path = table_path(session, "m")
    real = uniform.convert_table

    def boom(*a, **k):
        raise RuntimeError("simulated converter failure")

    monkeypatch.setattr(uniform, "convert_table", boom)
    session.execute("INSERT INTO m VALUES (2, 'b')")
    session.execute("UPDATE m SET s = 'z' WHERE id = 1")
    assert delta_version(path) == 1  # the hook failed twice; Delta is at 3
    with pytest.raises(ExecutionError, match="simulated converter failure") as err:  # the explicit sync reports it
        session.execute("MSCK REPAIR TABLE m SYNC METADATA")
    assert err.value.error_class == "DELTA_UNIVERSAL_FORMAT_CONVERSION_FAILED"
    monkeypatch.setattr(uniform, "convert_table", real)
    message = session.execute("MSCK REPAIR TABLE m SYNC METADATA").message
    assert "synced to Delta version 3" in message
    assert delta_version(path) == 3
    check(session, table_path, delta_rows, "m", ["id", "s"])
    assert "already at Delta version 3" in session.execute("REPAIR TABLE m SYNC METADATA").message
    session.execute("CREATE TABLE plain (id INT)")
    assert "no UniForm format" in session.execute("MSCK REPAIR TABLE plain SYNC METADATA").message
    for sql in ("MSCK REPAIR TABLE m", "MSCK REPAIR TABLE m ADD PARTITIONS"):
        with pytest.raises(AnalysisError, match="SYNC METADATA"):
            session.execute(sql)


def test_uniform_needs_the_compat(session):
    from isolde.errors import InvalidPropertyError

    with pytest.raises(InvalidPropertyError, match="IcebergCompatV2"):
        session.execute("CREATE TABLE bad (id INT) TBLPROPERTIES ('delta.universalFormat.enabledFormats' = 'iceberg')")
    with pytest.raises(InvalidPropertyError, match="deletion vectors"):
        session.execute("CREATE TABLE bad (id INT) TBLPROPERTIES ('delta.enableIcebergCompatV2' = 'true', "
                        "'delta.enableDeletionVectors' = 'true')")


@pytest.mark.parametrize("partitioned", [False, True])
def test_reorg_upgrade_uniform(session, table_path, delta_rows, partitioned):
    part = "PARTITIONED BY (p)" if partitioned else ""
    session.execute(f"CREATE TABLE r (id INT, s STRING, ts TIMESTAMP, arr ARRAY<INT>, p STRING) {part}")
    session.execute("INSERT INTO r VALUES (1, 'a', TIMESTAMP'2024-01-01 00:00:01', array(1), 'x'), "
                    "(2, 'b', NULL, NULL, 'y'), (3, 'c', TIMESTAMP'2024-03-01 10:00:00', array(2, 3), 'x')")
    session.execute("DELETE FROM r WHERE id = 3")  # a deletion vector (isolde's default)
    path = table_path(session, "r")
    from isolde.executor.log.delta_log import DeltaLog

    if not partitioned:  # (partitioned: the rows may sit in files of their own, removed outright)
        assert any(a.deletion_vector is not None for a in DeltaLog(path).update().all_files)
    before = DeltaLog(path).update().version
    session.execute("REORG TABLE r APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION = 2))")
    snap = DeltaLog(path).update()
    assert snap.version == before + 3
    ops = [json.loads(line)["commitInfo"]["operation"]
           for v in range(before + 1, snap.version + 1)
           for line in open(os.path.join(path, "_delta_log", f"{v:020d}.json")) if '"commitInfo"' in line]
    assert ops == ["SET TBLPROPERTIES", "REORG", "SET TBLPROPERTIES"]
    conf = snap.metadata.configuration
    assert conf["delta.columnMapping.mode"] == "name" and conf["delta.enableIcebergCompatV2"] == "true"
    assert conf["delta.enableDeletionVectors"] == "false" and conf["delta.universalFormat.enabledFormats"] == "iceberg"
    for f in snap.metadata.schema["fields"]:
        assert f["metadata"]["delta.columnMapping.physicalName"] == f["name"]
    for a in snap.all_files:
        assert a.deletion_vector is None and a.tags.get("ICEBERG_COMPAT_VERSION") == "2"
    assert {"columnMapping", "icebergCompatV2"} <= set(snap.protocol.writer_features or ())
    cols = ["id", "s", "ts", "p"]
    check(session, table_path, delta_rows, "r", cols)
    assert iceberg_rows(path, ["id", "arr"]) == _sorted([(1, [1]), (2, None)])
    session.execute("UPDATE r SET s = 'u' WHERE id = 2")
    session.execute("INSERT INTO r VALUES (4, 'd', NULL, array(4), 'z')")
    check(session, table_path, delta_rows, "r", cols)
    detail = session.execute("DESCRIBE DETAIL r")
    row = dict(zip(detail.columns, detail.rows[0]))
    assert row["universalFormats"] == ["iceberg"]


def test_partition_values_are_in_the_data_files(session, table_path, delta_rows):
    """IcebergCompatV2: Delta writes the partition columns into the data files too (physical
    name, field id, real type); isolde and delta-rs still read the values from the log."""
    import pyarrow.parquet as pq
    from urllib.parse import unquote

    session.execute("CREATE TABLE mp (id INT, ts TIMESTAMP, day DATE, dec DECIMAL(5, 1), s STRING) "
                    "PARTITIONED BY (ts, day, dec, s) " + UNIFORM)
    session.execute("INSERT INTO mp VALUES (1, TIMESTAMP'2024-01-02 03:04:05', DATE'2024-01-01', 1.5, 'a b'), "
                    "(2, NULL, NULL, NULL, NULL)")
    session.execute("UPDATE mp SET id = 3 WHERE id = 2")
    path = check(session, table_path, delta_rows, "mp", ["id", "ts", "day", "dec", "s"])
    from isolde.executor.log.delta_log import DeltaLog

    snap = DeltaLog(path).update()
    fields = {f["name"]: f["metadata"] for f in snap.metadata.schema["fields"]}
    for a in snap.all_files:
        schema = pq.read_schema(os.path.join(path, unquote(a.path)))
        for name in ("ts", "day", "dec", "s"):
            phys = fields[name]["delta.columnMapping.physicalName"]
            assert schema.field(phys).metadata[b"PARQUET:field_id"] == str(fields[name]["delta.columnMapping.id"]).encode()
        t = pq.read_table(os.path.join(path, unquote(a.path)))
        id_phys = fields["id"]["delta.columnMapping.physicalName"]
        s_phys = fields["s"]["delta.columnMapping.physicalName"]
        assert t.column(s_phys).to_pylist() == [a.partition_values[s_phys]] * t.num_rows
        assert a.size == os.path.getsize(os.path.join(path, unquote(a.path)))
        assert set(json.loads(a.stats)["minValues"]) <= {id_phys}


def test_add_column_and_refused_types(session, table_path, delta_rows):
    from isolde.errors import UnsupportedFeatureError

    session.execute(f"CREATE TABLE ac (id INT, s STRING) {UNIFORM}")
    session.execute("INSERT INTO ac VALUES (1, 'a')")
    session.execute("ALTER TABLE ac ADD COLUMNS (n BIGINT, tags ARRAY<STRING>)")
    session.execute("INSERT INTO ac VALUES (2, 'b', 20, array('t'))")
    path = check(session, table_path, delta_rows, "ac", ["id", "s", "n"])
    ice = iceberg(path)
    assert [f.name for f in ice.schema().fields] == ["id", "s", "n", "tags"]
    assert len(ice.metadata.schemas) == 2
    assert iceberg_rows(path, ["id", "tags"]) == _sorted([(1, None), (2, ["t"])])
    with pytest.raises(UnsupportedFeatureError, match="Iceberg cannot represent"):
        session.execute(f"CREATE TABLE bad (id INT, v VARIANT) {UNIFORM}")
