"""VARIANT columns on Spark: reading delta-rs's variantType-preview test table (checkpoint
included), and tables isolde creates and writes with VARIANT at the top level and nested.

The oracle is delta-rs 1.6.6, which reads variantType(-preview) tables and hands each variant
back as its Parquet struct of binary ``metadata`` and ``value``: isolde's VariantVal must hold the
very same bytes. The engine table's values are also known (``{"key": id}``, written by Delta).
"""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from isolde.executor.log.delta_log import DeltaLog

from tests.helpers.meta import snapshot, sorted_rows

pytestmark = pytest.mark.spark

from tests.helpers import ENGINES  # noqa: E402  (tests/data/engines)

ENGINE = os.path.join(ENGINES, "spark-variant-checkpoint")


def _path(session, name):
    from isolde.grammar import ast

    return session.catalog.resolve(ast.TableRef(parts=(name,)), session.current_database, must_exist=False).path


def _norm(value, arrow: bool = False):
    """Spark values and delta-rs (Arrow) values in one shape: a variant is ("variant", value
    bytes, metadata bytes), a struct the tuple of its values, a map its sorted (key, value)
    pairs. Spark gives structs as Rows and maps as dicts; Arrow structs as dicts, maps as lists
    of pairs."""
    if value is None:
        return None
    if type(value).__name__ == "VariantVal":
        return ("variant", bytes(value.value), bytes(value.metadata))
    if hasattr(value, "asDict"):
        return tuple(_norm(v) for v in value)
    if isinstance(value, dict):
        if arrow and set(value) == {"metadata", "value"}:
            return ("variant", bytes(value["value"]), bytes(value["metadata"]))
        if arrow:
            return tuple(_norm(v, arrow) for v in value.values())
        return tuple(sorted((k, _norm(v)) for k, v in value.items()))
    if isinstance(value, list):
        if arrow and value and all(isinstance(x, tuple) and len(x) == 2 for x in value):  # an Arrow map
            return tuple(sorted((k, _norm(v, arrow)) for k, v in value))
        return tuple(_norm(v, arrow) for v in value)
    return value


def _key(row):
    return json.dumps(row, default=lambda b: b.hex(), sort_keys=True)


def isolde_rows(session, ref: str) -> list:
    return sorted((tuple(_norm(v) for v in r) for r in session.execute(f"SELECT * FROM {ref}").collect()), key=_key)


def delta_rs_rows(path: str, version=None) -> list:
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(path, version=version)
    table = pa.table(QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all())
    return sorted((tuple(_norm(r[n], arrow=True) for n in table.column_names) for r in table.to_pylist()), key=_key)


def _all_variants_unshredded(path: str, files) -> bool:
    """Every variant in these files is Delta's unshredded struct {value, metadata} (no typed_value)."""
    def plain(t: pa.DataType) -> bool:
        if pa.types.is_struct(t):
            names = {t.field(i).name for i in range(t.num_fields)}
            if "typed_value" in names:
                return False
            return all(plain(t.field(i).type) for i in range(t.num_fields))
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return plain(t.value_type)
        if pa.types.is_map(t):
            return plain(t.key_type) and plain(t.item_type)
        return True

    return all(plain(f.type) for a in files for f in pq.read_schema(os.path.join(path, a.path)))


# --------------------------------------------------------------------------- delta-rs's table


@pytest.mark.parametrize("version", [0, 1, 2])
def test_engine_table_reads_as_delta_rs_does(session, version):
    ref = f"delta.`{ENGINE}` VERSION AS OF {version}"
    mine = isolde_rows(session, ref)
    assert mine == delta_rs_rows(ENGINE, version)
    assert len(mine) == {0: 100, 1: 101, 2: 102}[version]
    # the values Delta wrote: {"key": id} at the top level and inside every container
    bad = session.execute(f"""SELECT count(*) FROM {ref} WHERE to_json(v) <> concat('{{"key":', id, '}}')
        OR to_json(struct_of_variants.v) <> to_json(v) OR variant_get(v, '$.key', 'bigint') <> id""").collect()
    assert bad[0][0] == 0


def test_engine_table_write_round_trip(session, tmp_path):
    """INSERT + UPDATE + DELETE on the preview table (whose last version is a checkpoint): the
    rows delta-rs reads back are isolde's, variants unshredded."""
    path = str(tmp_path / "v")
    shutil.copytree(ENGINE, path)
    ref = f"delta.`{path}`"
    session.execute(f"""INSERT INTO {ref} (id, v, array_of_variants, map_of_variants)
        SELECT 1000, parse_json('{{"a": [1, 2.5, "x"], "b": null}}'), array(parse_json('7')), map('k', parse_json('true'))""")
    session.execute(f"UPDATE {ref} SET v = parse_json('{{\"updated\": 1}}') WHERE id = 3")
    session.execute(f"DELETE FROM {ref} WHERE id >= 40 AND id < 1000")
    assert isolde_rows(session, ref) == delta_rs_rows(path)
    got = session.execute(f"SELECT id, to_json(v), v:a[1]::double FROM {ref} WHERE id IN (3, 1000) ORDER BY id").collect()
    assert [tuple(r) for r in got] == [(3, '{"updated":1}', None), (1000, '{"a":[1,2.5,"x"],"b":null}', 2.5)]
    snap = snapshot(path)
    assert "variantType-preview" in snap.protocol.reader_features
    assert _all_variants_unshredded(path, snap.all_files)


# --------------------------------------------------------------------------- tables isolde creates

SCHEMA = "id BIGINT, v VARIANT, s STRUCT<x: VARIANT, n: INT>, a ARRAY<VARIANT>, m MAP<STRING, VARIANT>"


def test_create_insert_and_dml_with_variant_columns(session):
    s = session
    s.execute(f"CREATE TABLE t ({SCHEMA}) TBLPROPERTIES ('delta.checkpointInterval' = '3')")
    path = _path(s, "t")
    p = snapshot(path).protocol
    assert (p.min_reader_version, p.min_writer_version) == (3, 7)
    assert "variantType" in p.reader_features and "variantType" in p.writer_features
    s.execute("""INSERT INTO t SELECT id, parse_json(format_string('{"n": %d, "tag": "r%d"}', id, id)),
        named_struct('x', parse_json(CAST(id AS STRING)), 'n', CAST(id AS INT)),
        array(parse_json('[1, {"z": 2}]'), NULL), map('k', parse_json('"s"')) FROM range(6)""")
    s.execute("INSERT INTO t VALUES (10, parse_json('{\"n\": 10}'), NULL, NULL, NULL)")
    s.execute("UPDATE t SET v = parse_json('{\"n\": -1}') WHERE variant_get(v, '$.n', 'int') = 2")
    s.execute("DELETE FROM t WHERE s.x::int = 3")
    s.execute("""MERGE INTO t USING (SELECT 4 AS id, parse_json('{"merged": true}') AS v UNION ALL
        SELECT 20, parse_json('[]')) u ON t.id = u.id
        WHEN MATCHED THEN UPDATE SET v = u.v WHEN NOT MATCHED THEN INSERT (id, v) VALUES (u.id, u.v)""")
    got = s.execute("SELECT id, to_json(v), to_json(s.x), v:n::int, to_json(a[0]), to_json(m['k']) FROM t ORDER BY id")
    assert [tuple(r) for r in got.collect()] == [
        (0, '{"n":0,"tag":"r0"}', "0", 0, '[1,{"z":2}]', '"s"'),
        (1, '{"n":1,"tag":"r1"}', "1", 1, '[1,{"z":2}]', '"s"'),
        (2, '{"n":-1}', "2", -1, '[1,{"z":2}]', '"s"'),
        (4, '{"merged":true}', "4", None, '[1,{"z":2}]', '"s"'),
        (5, '{"n":5,"tag":"r5"}', "5", 5, '[1,{"z":2}]', '"s"'),
        (10, '{"n":10}', None, 10, None, None),
        (20, "[]", None, None, None, None),
    ]
    before = isolde_rows(s, "t")
    s.execute("OPTIMIZE t")
    assert isolde_rows(s, "t") == before
    snap = snapshot(path)
    assert len(snap.all_files) == 1
    assert any(name.endswith(".checkpoint.parquet") for name in os.listdir(os.path.join(path, "_delta_log")))
    assert DeltaLog(path).update().version == snap.version  # replay from the checkpoint
    assert isolde_rows(s, "t") == delta_rs_rows(path)
    assert _all_variants_unshredded(path, snap.all_files)
    for add in snap.all_files:  # Delta keeps no min/max for variants; isolde no stats at all for them
        stats = json.loads(add.stats)
        assert set(stats["minValues"]) <= {"id"} and "v" not in stats["nullCount"]


def test_variant_predicates_never_skip_a_match(session):
    s = session
    s.execute("CREATE TABLE p (id INT, v VARIANT)")
    for i in range(3):
        s.execute(f"INSERT INTO p SELECT id, parse_json(format_string('{{\"a\": %d}}', id + {i * 10})) "
                  f"FROM range({i * 10}, {i * 10 + 10})")
    rows = s.execute("SELECT id FROM p WHERE variant_get(v, '$.a', 'int') = 25 OR v:a::int = 5 ORDER BY id")
    assert [r[0] for r in rows.collect()] == [5, 15]


def test_add_variant_column_describe_and_show(session):
    s = session
    s.execute("CREATE TABLE a (id INT) TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")
    s.execute("INSERT INTO a VALUES (1)")
    s.execute("ALTER TABLE a ADD COLUMNS (v VARIANT, arr ARRAY<VARIANT>)")
    p = snapshot(_path(s, "a")).protocol
    assert "variantType" in p.reader_features and "variantType" in p.writer_features
    s.execute("INSERT INTO a VALUES (2, parse_json('{\"b\": 1}'), array(parse_json('null')))")
    described = [(r[0], r[1]) for r in s.execute("DESCRIBE TABLE a").collect()]
    assert described[:3] == [("id", "int"), ("v", "variant"), ("arr", "array<variant>")]
    ddl = s.execute("SHOW CREATE TABLE a").collect()[0][0]
    assert "v VARIANT" in ddl and "arr ARRAY<VARIANT>" in ddl
    fields = snapshot(_path(s, "a")).metadata.schema["fields"]
    assert [f["type"] for f in fields][1:] == ["variant", {"type": "array", "elementType": "variant",
                                                           "containsNull": True}]
    assert isolde_rows(s, "a") == delta_rs_rows(_path(s, "a"))
