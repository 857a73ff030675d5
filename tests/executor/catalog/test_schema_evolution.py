"""executor/catalog/schema_evolution.py without Spark: the evolved schemas, the per-field UPDATE
paths and the filled INSERT values (what Delta-Spark 4.4 was measured to do:
tests/reference/test_differential_fuzz.py runs the same statements on both engines)."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from isolde.errors import AnalysisError
from isolde.executor.catalog import properties as P
from isolde.executor.catalog import schema as S
from isolde.executor.catalog import schema_evolution as evolution
from isolde.executor.log.actions import Metadata, Protocol


def struct(ddl: str) -> T.StructType:
    return S.parse_data_type(f"STRUCT<{ddl}>")


TABLE = "id INT, b BIGINT, st STRUCT<x: INT, y: STRING>"

BY_NAME = [
    ("same columns", "id INT, b BIGINT, st STRUCT<x: INT, y: STRING>", TABLE),
    ("fewer columns", "b BIGINT", TABLE),
    ("a new column, appended", "nc INT, id INT", TABLE + ", nc INT"),
    ("names match case-insensitively, the table's spelling kept", "ID INT, NC STRING", TABLE + ", NC STRING"),
    ("a new struct field", "st STRUCT<x: INT, y: STRING, z: BIGINT>",
     "id INT, b BIGINT, st STRUCT<x: INT, y: STRING, z: BIGINT>"),
    ("a struct lacking a field adds nothing", "st STRUCT<x: INT>", TABLE),
    ("an existing column keeps its type", "b STRING, id DOUBLE", TABLE),
    ("a new column's struct, whole", "m STRUCT<p: INT>", TABLE + ", m STRUCT<p: INT>"),
]


@pytest.mark.parametrize("data, expected", [c[1:] for c in BY_NAME], ids=[c[0] for c in BY_NAME])
def test_by_name(data, expected):
    assert evolution.by_name(struct(TABLE), struct(data).fields) == struct(expected)


def test_fields_deep_in_arrays_and_map_values_are_added():
    table = struct("a ARRAY<STRUCT<x: INT>>, m MAP<STRING, STRUCT<x: INT>>")
    data = struct("a ARRAY<STRUCT<x: INT, y: INT>>, m MAP<STRING, STRUCT<x: INT, z: STRING>>")
    assert evolution.by_name(table, data.fields) == \
        struct("a ARRAY<STRUCT<x: INT, y: INT>>, m MAP<STRING, STRUCT<x: INT, z: STRING>>")


def test_added_fields_are_nullable_and_carry_no_metadata():
    data = T.StructType([T.StructField("nc", T.StructType([T.StructField("p", T.IntegerType(), False)]), False,
                                       {"delta.columnMapping.id": 9})])
    (added,) = evolution.by_name(struct("id INT"), data.fields).fields[1:]
    assert added.nullable and added.metadata == {} and added.dataType.fields[0].nullable


BY_POSITION = [
    ("every column", "a INT, b BIGINT, c STRUCT<x: INT, y: STRING>", TABLE),
    ("extra columns appended under their names", "a INT, b BIGINT, c STRUCT<x: INT, y: STRING>, `99` INT",
     TABLE + ", `99` INT"),
    ("a struct field at its position", "a INT, b BIGINT, c STRUCT<x: INT, y: STRING, z: BIGINT>",
     "id INT, b BIGINT, st STRUCT<x: INT, y: STRING, z: BIGINT>"),
]


@pytest.mark.parametrize("data, expected", [c[1:] for c in BY_POSITION], ids=[c[0] for c in BY_POSITION])
def test_by_position(data, expected):
    assert evolution.by_position(struct(TABLE), struct(data)) == struct(expected)


def test_an_extra_column_named_like_a_table_column_is_refused():
    with pytest.raises(AnalysisError, match="`b`"):
        evolution.by_position(struct("id INT, b INT"), struct("x INT, y INT, b INT"))


UPDATE_PATHS = [
    ("not a struct", "BIGINT", "BIGINT", [()]),
    ("every field", "STRUCT<x: INT, y: STRING>", "STRUCT<x: INT, y: STRING>", [()]),
    ("more fields (evolved into the table)", "STRUCT<x: INT, y: STRING, z: INT>", "STRUCT<x: INT, y: STRING, z: INT>",
     [()]),
    ("a field missing", "STRUCT<x: INT>", "STRUCT<x: INT, y: STRING>", [("x",)]),
    ("deeper", "STRUCT<x: INT, s: STRUCT<p: INT>>", "STRUCT<x: INT, s: STRUCT<p: INT, q: INT>>", [("x",), ("s", "p")]),
    ("case", "STRUCT<X: INT>", "STRUCT<x: INT, y: STRING>", [("x",)]),
]


@pytest.mark.parametrize("data, table, expected", [c[1:] for c in UPDATE_PATHS], ids=[c[0] for c in UPDATE_PATHS])
def test_update_paths(data, table, expected):
    assert evolution.update_paths(struct(f"c {data}")[0].dataType, struct(f"c {table}")[0].dataType) == expected


def test_filled_sql():
    full = struct("c STRUCT<x: INT, y: STRING>")[0].dataType
    assert evolution.filled_sql("s.c", full, full) == "s.c"
    assert evolution.filled_sql("s.c", struct("c STRUCT<x: INT>")[0].dataType, full) == \
        "CASE WHEN s.c IS NULL THEN NULL ELSE named_struct('x', s.c.`x`, 'y', NULL) END"


def test_with_schema_gives_new_fields_column_mapping_ids():
    schema = S.struct_to_delta(S.assign_column_mapping(struct("id INT, st STRUCT<x: INT>"))[0])
    meta = Metadata(id="t", schema_string=schema, partition_columns=[],
                    configuration={"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "3"})
    proto = Protocol(min_reader_version=2, min_writer_version=5)
    evolved = evolution.by_name(S.metadata_schema(meta), struct("st STRUCT<x: INT, z: INT>, nc INT").fields)
    new_meta, _ = P.with_schema(meta, proto, evolved)
    out = S.metadata_schema(new_meta)
    ids = {f.name: f.metadata.get("delta.columnMapping.id") for f in [*out.fields, *out["st"].dataType.fields]}
    assert ids == {"id": 1, "st": 2, "x": 3, "z": 4, "nc": 5}
    assert new_meta.configuration["delta.columnMapping.maxColumnId"] == "5"
