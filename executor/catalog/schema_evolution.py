"""Schema evolution: the table schema a write's data evolves it to (Delta's ``mergeSchemas`` for
MERGE WITH SCHEMA EVOLUTION, ``spark.databricks.delta.schema.autoMerge.enabled`` and INSERT).

Evolution only ADDS: columns the data has and the table lacks are appended, and fields a
struct in the data has that the table's struct lacks are appended to it, at any depth (inside
arrays and map values too). Names match case-insensitively and keep the table's spelling; an
existing column keeps its type (the write casts to it; type widening by evolution is not done,
README "Known limits"), and every added field is nullable: the rows already written have no
value for it. Measured on Delta-Spark 4.4: a MERGE whose ``UPDATE SET *`` source carries
``st STRUCT<x, y, z>`` into ``st STRUCT<x, y>`` ends with ``st STRUCT<x, y, z>``, old rows'
``st.z`` NULL; ``INSERT INTO t SELECT <every column>, 99`` under autoMerge adds a column named
``99`` (Spark's name for the literal).
"""

from __future__ import annotations

from typing import Iterable

from pyspark.sql import types as T

from isolde.errors import AnalysisError

from . import schema as S


AUTO_MERGE_KEY = "spark.databricks.delta.schema.autoMerge.enabled"


def auto_merge(conf) -> bool:
    """Delta's session setting that turns schema evolution on for every MERGE and INSERT."""
    return str(conf.get(AUTO_MERGE_KEY, "false")).strip().lower() == "true"


def evolved_type(table_type: T.DataType, data_type: T.DataType) -> T.DataType:
    """``table_type`` with the struct fields ``data_type`` adds (same shape: struct, array, map)."""
    if isinstance(table_type, T.StructType) and isinstance(data_type, T.StructType):
        return by_name(table_type, data_type.fields)
    if isinstance(table_type, T.ArrayType) and isinstance(data_type, T.ArrayType):
        return T.ArrayType(evolved_type(table_type.elementType, data_type.elementType), table_type.containsNull)
    if isinstance(table_type, T.MapType) and isinstance(data_type, T.MapType):
        return T.MapType(table_type.keyType, evolved_type(table_type.valueType, data_type.valueType),
                         table_type.valueContainsNull)
    return table_type


def by_name(table: T.StructType, data_fields: Iterable[T.StructField]) -> T.StructType:
    """``table`` evolved by data matched to it by name (MERGE's ``*``, INSERT ... BY NAME)."""
    data_fields = list(data_fields)
    have = {f.name.lower() for f in table.fields}
    named = {d.name.lower(): d for d in data_fields}
    return _evolved(table, {f.name: named[f.name.lower()] for f in table.fields if f.name.lower() in named},
                    [d for d in data_fields if d.name.lower() not in have])


def by_position(table: T.StructType, data: T.StructType) -> T.StructType:
    """``table`` evolved by data matched to it by position (INSERT INTO t SELECT ...): each table
    column merges the struct fields of the data column at its position; the data's columns past
    the table's last are added under their names."""
    fields = list(data.fields)
    have = {f.name.lower() for f in table.fields}
    extra = fields[len(table.fields):]
    clash = [d.name for d in extra if d.name.lower() in have]
    if clash:
        raise AnalysisError(f"Cannot add column(s) {', '.join(f'`{c}`' for c in clash)} by schema evolution: the "
                            "table has a column of that name already. Name the data's extra columns apart.",
                            error_class="DELTA_DUPLICATE_COLUMNS_FOUND", sqlstate="42711")
    return _evolved(table, {f.name: d for f, d in zip(table.fields, fields)}, extra)


def changed(before: T.StructType, after: T.StructType) -> bool:
    return S.struct_to_delta(before) != S.struct_to_delta(after)


def _evolved(table: T.StructType, matched: dict, extra: list) -> T.StructType:
    out = [f if f.name not in matched else
           T.StructField(f.name, evolved_type(f.dataType, matched[f.name].dataType), f.nullable, f.metadata)
           for f in table.fields]
    # (metadata of another table's fields, column-mapping ids above all, means nothing here)
    out += [T.StructField(d.name, S.nullable_type(S.map_field_metadata(d.dataType, lambda f: {})), True)
            for d in extra]
    return T.StructType(out)


def _lacks_fields(data_type: T.DataType, table_type: T.DataType) -> bool:
    """A data struct missing some of the table struct's fields (at any depth of structs)."""
    if not (isinstance(data_type, T.StructType) and isinstance(table_type, T.StructType)):
        return False
    named = {f.name.lower(): f for f in data_type.fields}
    return any(f.name.lower() not in named or _lacks_fields(named[f.name.lower()].dataType, f.dataType)
               for f in table_type.fields)


def update_paths(data_type: T.DataType, table_type: T.DataType) -> list[tuple[str, ...]]:
    """What an evolving ``UPDATE SET *`` assigns inside a column: ``[()]``, the whole value, unless
    the data's struct lacks some of the table's fields; then each field the data has, on its own
    (recursively), so the fields it lacks keep the row's values -- as Delta-Spark 4.4 does (a
    NULL target struct becomes a struct of the assigned fields; a NULL source struct assigns
    NULL to each of its fields)."""
    if not _lacks_fields(data_type, table_type):
        return [()]
    by_name = {f.name.lower(): f for f in table_type.fields}
    return [(by_name[d.name.lower()].name,) + path for d in data_type.fields if d.name.lower() in by_name
            for path in update_paths(d.dataType, by_name[d.name.lower()].dataType)]


def filled_sql(sql: str, data_type: T.DataType, table_type: T.DataType) -> str:
    """An evolving ``INSERT *``'s value for a column whose data struct lacks some of the table's
    fields: the struct with those fields NULL (NULL stays NULL), as Delta-Spark 4.4 inserts it."""
    if not _lacks_fields(data_type, table_type):
        return sql
    named = {f.name.lower(): f for f in data_type.fields}
    parts = []
    for f in table_type.fields:
        d = named.get(f.name.lower())
        value = "NULL" if d is None else filled_sql(f"{sql}.`{d.name.replace('`', '``')}`", d.dataType, f.dataType)
        parts.append(f"'{f.name}', {value}")
    return f"CASE WHEN {sql} IS NULL THEN NULL ELSE named_struct({', '.join(parts)}) END"
