"""Column mapping in 'id' mode, written: every Parquet file isolde writes to an id-mode table
carries each column's ``delta.columnMapping.id`` as its Parquet field id (nested struct fields
too) under its physical name, whatever statement wrote it, and isolde and delta-rs read the
same rows back -- after renames, and after a column is dropped and one of the same name added
(the new column has a new id, so the old files' values never show in it)."""

from __future__ import annotations

import json
import os
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from isolde.errors import InvalidPropertyError, IsoldeError
from isolde.executor.catalog import properties as P
from isolde.executor.catalog import schema as S
from isolde.executor.log.actions import CommitInfo, serialize_commit
from isolde.executor.log.delta_log import DeltaLog
from isolde.executor.txn import row_tracking

pytestmark = pytest.mark.spark

ID_MODE = "'delta.columnMapping.mode' = 'id'"


# --------------------------------------------------------------------------- helpers


def _schema_ids(dt):
    """What a data file must hold for ``dt``: (physical name, field id, children) per struct field."""
    from pyspark.sql import types as T

    if isinstance(dt, T.StructType):
        return [(S.physical_name(f), int(f.metadata[S.COLUMN_ID]), _schema_ids(f.dataType)) for f in dt.fields]
    if isinstance(dt, T.ArrayType):
        return _schema_ids(dt.elementType)
    if isinstance(dt, T.MapType):
        return (_schema_ids(dt.keyType), _schema_ids(dt.valueType))
    return None


def _file_ids(t: pa.DataType):
    if pa.types.is_struct(t):
        return [_file_field(t.field(i)) for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _file_ids(t.value_type)
    if pa.types.is_map(t):
        return (_file_ids(t.key_type), _file_ids(t.item_type))
    return None


def _file_field(f: pa.Field):
    ident = (f.metadata or {}).get(b"PARQUET:field_id")
    return (f.name, int(ident) if ident is not None else None, _file_ids(f.type))


def assert_files_carry_field_ids(path: str, dropped: frozenset = frozenset()) -> tuple[int, int]:
    """Every live file holds its data columns under their physical names with their column ids
    as Parquet field ids (nested too), and no other columns but row tracking's materialised
    ones and the ``dropped`` (physical names). Returns (files, files holding every column of
    the current schema): a file written before ADD COLUMNS lacks the new ones."""
    snap = DeltaLog(path).update()
    expected = _schema_ids(S.data_schema(snap.metadata))
    names = {name for name, _, _ in expected}
    hidden = set(row_tracking.materialized_columns(snap.metadata) or ())
    complete = 0
    for add in snap.all_files:
        schema = pq.read_schema(os.path.join(path, unquote(add.path)))
        fields = [_file_field(schema.field(i)) for i in range(len(schema))]
        held = [f for f in fields if f[0] in names]
        assert held and held == [e for e in expected if e[0] in {f[0] for f in held}], add.path
        assert {f[0] for f in fields} - names <= hidden | dropped, add.path
        complete += held == expected
    return len(snap.all_files), complete


def _sorted(rows: list) -> list:
    return sorted(rows, key=repr)


def isolde_rows(session, path: str) -> list:
    return _sorted(session.sql(f"SELECT * FROM delta.`{path}`").toArrow().to_pylist())


def delta_rs_rows(path: str) -> list:
    from deltalake import DeltaTable, QueryBuilder

    table = pa.table(QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t").read_all())
    return _sorted(table.to_pylist())


def assert_rows(session, path: str, expected: list) -> None:
    assert isolde_rows(session, path) == _sorted(expected)
    assert delta_rs_rows(path) == _sorted(expected)


def commit_metadata(path: str, change) -> int:
    """Commit ``change(metadata) -> metadata`` as the next version, as another engine's ALTER
    (RENAME / DROP COLUMN) would; returns the version."""
    snap = DeltaLog(path).update()
    metadata = change(snap.metadata)
    version = snap.version + 1
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), "wb") as fh:
        fh.write(serialize_commit([CommitInfo(timestamp=1, operation="CHANGE COLUMN"), metadata]))
    return version


def with_fields(metadata, fields_json: list, **config):
    schema = dict(metadata.schema)
    schema["fields"] = fields_json
    return P.copy_metadata(metadata, schema_string=json.dumps(schema),
                           configuration={**metadata.configuration, **config})


def row(id, a, b, c, p=None, **more):
    out = {"id": id, "s": None if a is None and b is None else {"a": a, "b": b},
           "xs": None if c is None else [{"c": c}]}
    if p is not None:
        out["p"] = p
    out.update(more)
    return out


# --------------------------------------------------------------------------- CREATE


@pytest.mark.parametrize("dv,protocol", [
    ("true", (3, 7, ["columnMapping", "deletionVectors"], ["columnMapping", "deletionVectors"])),
    ("false", (2, 5, None, None)),
])
def test_create_assigns_ids_and_physical_names_and_the_protocol(session, table_path, dv, protocol):
    session.execute("CREATE TABLE t (id BIGINT, s STRUCT<a: INT, b: STRING>, xs ARRAY<STRUCT<c: INT>>, "
                    f"m MAP<STRING, STRUCT<d: INT>>) TBLPROPERTIES ({ID_MODE}, 'delta.enableDeletionVectors' = '{dv}')")
    snap = DeltaLog(table_path(session, "t")).update()
    got = snap.protocol
    assert (got.min_reader_version, got.min_writer_version, got.reader_features, got.writer_features) == protocol
    fields = list(S._walk_fields(S.metadata_schema(snap.metadata)))
    assert [f.name for f in fields] == ["id", "s", "a", "b", "xs", "c", "m", "d"]
    assert [f.metadata[S.COLUMN_ID] for f in fields] == [1, 2, 3, 4, 5, 6, 7, 8]
    physical = [f.metadata[S.PHYSICAL_NAME] for f in fields]
    assert len(set(physical)) == 8 and all(p.startswith("col-") for p in physical)
    assert snap.configuration["delta.columnMapping.mode"] == "id"
    assert snap.configuration["delta.columnMapping.maxColumnId"] == "8"


@pytest.mark.parametrize("start", ["none", "name"])
def test_switching_an_existing_table_to_id_mode_is_refused(session, table_path, start):
    """Delta turns column mapping on for an existing table in name mode only: files already
    written carry no field ids, so an id-mode reader could not find their columns."""
    session.execute(f"CREATE TABLE t (id BIGINT) TBLPROPERTIES ('delta.columnMapping.mode' = '{start}')")
    with pytest.raises(InvalidPropertyError, match="delta.columnMapping.mode"):
        session.execute("ALTER TABLE t SET TBLPROPERTIES ('delta.columnMapping.mode' = 'id')")
    snap = DeltaLog(table_path(session, "t")).update()
    assert snap.version == 0 and snap.configuration["delta.columnMapping.mode"] == start


# --------------------------------------------------------------------------- every write path

TABLE = ("CREATE TABLE t (id BIGINT, s STRUCT<a: INT, b: STRING>, xs ARRAY<STRUCT<c: INT>>, p STRING) "
         "PARTITIONED BY (p) TBLPROPERTIES ({mode}, 'delta.enableDeletionVectors' = '{dv}')")
DML = [
    "INSERT INTO t VALUES (1, named_struct('a', 1, 'b', 'x'), array(named_struct('c', 10)), 'p1'), "
    "(2, named_struct('a', 2, 'b', 'y'), array(named_struct('c', 20)), 'p1'), "
    "(3, named_struct('a', 3, 'b', 'z'), array(named_struct('c', 30)), 'p2'), "
    "(4, named_struct('a', 4, 'b', 'w'), array(named_struct('c', 40)), 'p2')",
    "UPDATE t SET s = named_struct('a', 20, 'b', 'upd') WHERE id = 2",
    "DELETE FROM t WHERE id = 3",
    "MERGE INTO t USING (SELECT 4L AS id, 'merged' AS b UNION ALL SELECT 5L, 'new') src ON t.id = src.id "
    "WHEN MATCHED THEN UPDATE SET s = named_struct('a', 40, 'b', src.b) "
    "WHEN NOT MATCHED THEN INSERT (id, s, xs, p) VALUES (src.id, named_struct('a', 50, 'b', src.b), "
    "array(named_struct('c', 50)), 'p3')",
]
AFTER_DML = [row(1, 1, "x", 10, "p1"), row(2, 20, "upd", 20, "p1"), row(4, 40, "merged", 40, "p2"),
             row(5, 50, "new", 50, "p3")]


@pytest.mark.parametrize("dv,optimize", [
    ("true", "OPTIMIZE t"),                      # deletion vectors, then bin-packing purges them
    ("false", "OPTIMIZE t ZORDER BY (id)"),      # copy-on-write, then a Z-order rewrite
])
def test_dml_and_optimize_write_field_ids(session, table_path, dv, optimize):
    session.execute(TABLE.format(mode=ID_MODE, dv=dv))
    path = table_path(session, "t")
    results = [session.execute(sql) for sql in DML]
    dvs_added = sum(int(r.metrics.get("numDeletionVectorsAdded", 0)) for r in results[1:])
    assert (dvs_added > 0) == (dv == "true")
    files, complete = assert_files_carry_field_ids(path)
    assert files == complete >= 3
    assert_rows(session, path, AFTER_DML)
    session.execute(optimize)
    assert assert_files_carry_field_ids(path) == (3, 3)  # one file per partition
    assert all(a.deletion_vector is None for a in DeltaLog(path).update().all_files)
    assert_rows(session, path, AFTER_DML)
    # partition values and statistics are keyed by physical names
    snap = DeltaLog(path).update()
    fields = {f.name: S.physical_name(f) for f in S.metadata_schema(snap.metadata).fields}
    for add in snap.all_files:
        assert list(add.partition_values) == [fields["p"]]
        assert fields["id"] in add.parsed_stats["minValues"]


def test_clustered_id_mode_table_keeps_physical_clustering_columns(session, table_path):
    session.execute(f"CREATE TABLE c (id BIGINT, v STRING) CLUSTER BY (id) TBLPROPERTIES ({ID_MODE})")
    path = table_path(session, "c")
    for batch in ("(3, 'c'), (1, 'a')", "(2, 'b')"):
        session.execute(f"INSERT INTO c VALUES {batch}")
    session.execute("OPTIMIZE c")
    snap = DeltaLog(path).update()
    id_field = S.field_named(S.metadata_schema(snap.metadata), "id")
    assert json.loads(snap.domain_metadata["delta.clustering"].configuration) == {
        "clusteringColumns": [[S.physical_name(id_field)]]}
    assert P.clustering_columns(snap) == ["id"]
    assert [a.clustering_provider for a in snap.all_files] == ["liquid"]
    assert assert_files_carry_field_ids(path) == (1, 1)
    assert_rows(session, path, [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}])


def test_ctas_and_copy_into_write_field_ids(session, table_path, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    pq.write_table(pa.table({"id": pa.array([7, 8], pa.int64()),
                             "s": pa.array([{"a": 7, "b": "q"}, None],
                                           pa.struct([("a", pa.int32()), ("b", pa.string())])),
                             "xs": pa.array([[{"c": 70}], None], pa.list_(pa.struct([("c", pa.int32())])))}),
                   str(source / "part-0.parquet"))
    session.execute(f"CREATE TABLE a TBLPROPERTIES ({ID_MODE}) AS SELECT 1L AS id, "
                    "named_struct('a', 1, 'b', 'x') AS s, array(named_struct('c', 10)) AS xs")
    path = table_path(session, "a")
    snap = DeltaLog(path).update()
    assert snap.configuration["delta.columnMapping.mode"] == "id"
    assert snap.configuration["delta.columnMapping.maxColumnId"] == "6"
    session.execute(f"COPY INTO a FROM '{source}' FILEFORMAT = PARQUET")
    assert assert_files_carry_field_ids(path) == (2, 2)
    assert_rows(session, path, [row(1, 1, "x", 10), row(7, 7, "q", 70), row(8, None, None, None)])


def _element_ids(t: pa.DataType) -> list:
    """Parquet field ids of the list elements and map keys / values in an Arrow type, depth first."""
    if pa.types.is_list(t):
        f = t.value_field
        return [(f.metadata or {}).get(b"PARQUET:field_id")] + _element_ids(f.type)
    if pa.types.is_map(t):
        return [(f.metadata or {}).get(b"PARQUET:field_id") for f in (t.key_field, t.item_field)] + \
            _element_ids(t.key_type) + _element_ids(t.item_type)
    if pa.types.is_struct(t):
        return [i for k in range(t.num_fields) for i in _element_ids(t.field(k).type)]
    return []


def test_iceberg_compat_v2_gives_array_elements_and_map_entries_ids(session, table_path):
    """With icebergCompatV2 Delta numbers array elements and map keys / values after the columns
    (``delta.columnMapping.nested.ids`` of the enclosing field) and writes those ids into the
    Parquet list and map groups, which Spark's writer alone does not."""
    session.execute("CREATE TABLE t (id BIGINT, xs ARRAY<INT>, m MAP<STRING, ARRAY<STRUCT<c: INT>>>) "
                    f"TBLPROPERTIES ({ID_MODE}, 'delta.enableIcebergCompatV2' = 'true', "
                    "'delta.enableDeletionVectors' = 'false')")
    path = table_path(session, "t")
    snap = DeltaLog(path).update()
    fields = {f.name: f for f in S.metadata_schema(snap.metadata).fields}
    xs, m = S.physical_name(fields["xs"]), S.physical_name(fields["m"])
    assert fields["xs"].metadata[S.NESTED_IDS] == {f"{xs}.element": 5}
    assert fields["m"].metadata[S.NESTED_IDS] == {f"{m}.key": 6, f"{m}.value": 7, f"{m}.value.element": 8}
    assert snap.configuration["delta.columnMapping.maxColumnId"] == "8"
    session.execute("INSERT INTO t VALUES (1, array(1, 2), map('k', array(named_struct('c', 3))))")
    session.execute("UPDATE t SET xs = array(9) WHERE id = 1")
    (add,) = DeltaLog(path).update().all_files
    schema = pq.read_schema(os.path.join(path, unquote(add.path)))
    assert [(schema.field(i).metadata[b"PARQUET:field_id"], _element_ids(schema.field(i).type))
            for i in range(len(schema))] == [(b"1", []), (b"2", [b"5"]), (b"3", [b"6", b"7", b"8"])]
    assert assert_files_carry_field_ids(path) == (1, 1)
    assert_rows(session, path, [{"id": 1, "xs": [9], "m": [("k", [{"c": 3}])]}])


# --------------------------------------------------------------------------- schema changes


def test_add_columns_takes_the_next_id_and_old_files_read_null(session, table_path):
    session.execute(f"CREATE TABLE t (id BIGINT, s STRUCT<a: INT, b: STRING>) TBLPROPERTIES ({ID_MODE})")
    path = table_path(session, "t")
    session.execute("INSERT INTO t VALUES (1, named_struct('a', 1, 'b', 'x'))")
    session.execute("ALTER TABLE t ADD COLUMNS (n STRUCT<e: INT>, v STRING)")
    snap = DeltaLog(path).update()
    struct = S.metadata_schema(snap.metadata)
    assert [f.metadata[S.COLUMN_ID] for f in S._walk_fields(struct)] == [1, 2, 3, 4, 5, 6, 7]
    assert snap.configuration["delta.columnMapping.maxColumnId"] == "7"
    session.execute("INSERT INTO t VALUES (2, named_struct('a', 2, 'b', 'y'), named_struct('e', 5), 'new')")
    assert assert_files_carry_field_ids(path) == (2, 1)
    assert_rows(session, path, [{"id": 1, "s": {"a": 1, "b": "x"}, "n": None, "v": None},
                                {"id": 2, "s": {"a": 2, "b": "y"}, "n": {"e": 5}, "v": "new"}])


def test_merge_schema_evolution_adds_a_column_with_the_next_id(session, table_path):
    session.execute(f"CREATE TABLE t (id BIGINT) TBLPROPERTIES ({ID_MODE})")
    path = table_path(session, "t")
    session.execute("INSERT INTO t VALUES (1)")
    session.execute("MERGE WITH SCHEMA EVOLUTION INTO t USING (SELECT 2L AS id, named_struct('e', 7) AS extra) s "
                    "ON t.id = s.id WHEN NOT MATCHED THEN INSERT *")
    snap = DeltaLog(path).update()
    assert [f.metadata[S.COLUMN_ID] for f in S._walk_fields(S.metadata_schema(snap.metadata))] == [1, 2, 3]
    assert snap.configuration["delta.columnMapping.maxColumnId"] == "3"
    assert assert_files_carry_field_ids(path) == (2, 1)
    assert_rows(session, path, [{"id": 1, "extra": None}, {"id": 2, "extra": {"e": 7}}])


def test_rename_then_write_then_read(session, table_path):
    """A rename (as Delta commits it: the logical name changes, id and physical name stay) of a
    top-level and a nested column; isolde's next writes carry the same ids."""
    session.execute(f"CREATE TABLE t (id BIGINT, s STRUCT<a: INT, b: STRING>) TBLPROPERTIES ({ID_MODE})")
    path = table_path(session, "t")
    session.execute("INSERT INTO t VALUES (1, named_struct('a', 1, 'b', 'x'))")

    def rename(metadata):
        fields = json.loads(metadata.schema_string)["fields"]
        fields[0]["name"] = "key"
        fields[1]["name"] = "rec"
        fields[1]["type"]["fields"][0]["name"] = "alpha"
        return with_fields(metadata, fields)

    commit_metadata(path, rename)
    session.execute("INSERT INTO t VALUES (2, named_struct('alpha', 2, 'b', 'y'))")
    session.execute("UPDATE t SET rec = named_struct('alpha', 10, 'b', 'upd') WHERE key = 1")
    assert assert_files_carry_field_ids(path) == (2, 2)
    assert_rows(session, path, [{"key": 1, "rec": {"alpha": 10, "b": "upd"}},
                                {"key": 2, "rec": {"alpha": 2, "b": "y"}}])


def test_a_dropped_column_does_not_come_back_in_a_new_one_of_the_same_name(session, table_path):
    session.execute(f"CREATE TABLE t (id BIGINT, v STRING) TBLPROPERTIES ({ID_MODE})")
    path = table_path(session, "t")
    session.execute("INSERT INTO t VALUES (1, 'old'), (3, 'old')")
    old_v = S.field_named(S.metadata_schema(DeltaLog(path).update().metadata), "v")
    commit_metadata(path, lambda m: with_fields(m, json.loads(m.schema_string)["fields"][:1]))  # DROP COLUMN v
    session.execute("ALTER TABLE t ADD COLUMNS (v STRING)")
    new_v = S.field_named(S.metadata_schema(DeltaLog(path).update().metadata), "v")
    assert new_v.metadata[S.COLUMN_ID] == 3 and old_v.metadata[S.COLUMN_ID] == 2  # never reused
    assert new_v.metadata[S.PHYSICAL_NAME] != old_v.metadata[S.PHYSICAL_NAME]
    assert_rows(session, path, [{"id": 1, "v": None}, {"id": 3, "v": None}])
    session.execute("INSERT INTO t VALUES (2, 'new')")
    session.execute("UPDATE t SET v = 'set' WHERE id = 1")
    assert assert_files_carry_field_ids(path, frozenset({old_v.metadata[S.PHYSICAL_NAME]})) == (3, 2)
    # the first file, its row 1 hidden by a deletion vector, still holds the dropped column
    assert_rows(session, path, [{"id": 1, "v": "set"}, {"id": 2, "v": "new"}, {"id": 3, "v": None}])


# --------------------------------------------------------------------------- refusals


def test_a_file_without_field_ids_is_refused_not_read_as_nulls(session, table_path):
    """PROTOCOL.md: a reader of an id-mode table must refuse a data file without field ids or
    read NULLs; isolde refuses. A blind INSERT still writes a proper file beside it and leaves
    the old file as it was."""
    session.execute(f"CREATE TABLE t (id BIGINT) TBLPROPERTIES ({ID_MODE})")
    path = table_path(session, "t")
    session.execute("INSERT INTO t VALUES (1)")
    (add,) = DeltaLog(path).update().all_files
    local = os.path.join(path, unquote(add.path))
    table = pq.read_table(local)
    pq.write_table(pa.table({table.column_names[0]: table.column(0)}), local)  # the same column, no id
    before = open(local, "rb").read()
    session.execute("INSERT INTO t VALUES (2)")
    with pytest.raises(IsoldeError):
        session.execute("SELECT * FROM t").collect()
    assert open(local, "rb").read() == before
    fresh = [a for a in DeltaLog(path).update().all_files if a.path != add.path]
    schema = pq.read_schema(os.path.join(path, unquote(fresh[0].path)))
    assert schema.field(0).metadata[b"PARQUET:field_id"] == b"1"


def test_writes_refuse_when_the_session_would_drop_field_ids(session, table_path, spark):
    session.execute(f"CREATE TABLE t (id BIGINT) TBLPROPERTIES ({ID_MODE})")
    key = "spark.sql.parquet.fieldId.write.enabled"
    spark.conf.set(key, "false")
    try:
        with pytest.raises(IsoldeError, match=key):
            session.execute("INSERT INTO t VALUES (1)")
    finally:
        spark.conf.unset(key)
    assert DeltaLog(table_path(session, "t")).update().version == 0
