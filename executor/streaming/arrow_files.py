"""One Delta data file as Arrow record batches in the table's logical shape (pyarrow only).

A streaming task reads its files with pyarrow, not Spark: it renames physical columns
(column mapping, nested fields too) back to logical names, adds partition columns from the
log's partitionValues, drops the rows the file's deletion vector marks, fills columns the file
predates with nulls, and casts to the exact Arrow schema Spark expects from a Python source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import pyarrow as pa

from ..catalog import properties as P
from ..log import table_files
from ..log.actions import AddFile
from ..log.deletion_vectors import read_deleted_rows

PHYSICAL_NAME = "delta.columnMapping.physicalName"
_ZONED = re.compile(r"(Z|UTC|GMT|[+-]\d{1,2}(:?\d{2})?)$")


@dataclass(frozen=True)
class Column:
    """A logical column, the name it has in data files, and the same for its struct fields."""

    name: str
    physical: str
    partition: bool = False
    children: tuple = field(default_factory=tuple)  # of Column, for struct (or array-of-struct) types


def _type_children(node, mapped: bool) -> tuple:
    if isinstance(node, dict):
        if node.get("type") == "struct":
            return tuple(_column(f, mapped, False) for f in node.get("fields", []))
        if node.get("type") == "array":
            return _type_children(node.get("elementType"), mapped)
    return ()


def _column(f: dict, mapped: bool, partition: bool) -> Column:
    physical = (f.get("metadata") or {}).get(PHYSICAL_NAME, f["name"]) if mapped else f["name"]
    return Column(f["name"], physical, partition, _type_children(f.get("type"), mapped))


def columns_of(schema: dict, partition_columns, configuration: dict) -> list[Column]:
    """The table's columns (Delta schema JSON as a dict) with their physical names."""
    mapped = str((configuration or {}).get("delta.columnMapping.mode", "none")).lower() != "none"
    parts = {p.lower() for p in partition_columns}
    return [_column(f, mapped, f["name"].lower() in parts) for f in schema.get("fields", [])]


#: where an AddFile.path lives (a local path, or an s3a:// URI)
local_path = P.local_path


def partition_array(value: Optional[str], arrow_type: pa.DataType, n: int) -> pa.Array:
    """``n`` copies of a partitionValues string typed as the column ('' and None are null)."""
    if value is None or value == "":
        return pa.nulls(n, arrow_type)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pa.repeat(pa.scalar(value, arrow_type), n)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return pa.repeat(pa.scalar(value.encode("utf-8"), arrow_type), n)
    text = pa.array([value.strip()], pa.string())
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None and not _ZONED.search(value.strip()):
        typed = text.cast(pa.timestamp(arrow_type.unit)).cast(arrow_type)  # no offset: UTC
    else:
        typed = text.cast(arrow_type)
    return pa.repeat(typed[0], n)


def conform_array(arr: pa.Array, column: Optional[Column], arrow_type: pa.DataType) -> pa.Array:
    """``arr`` (a file column) renamed to logical field names and cast to ``arrow_type``."""
    if pa.types.is_struct(arrow_type) and pa.types.is_struct(arr.type):
        by_name = {c.name: c for c in (column.children if column else ())}
        present = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
        children = []
        for i in range(arrow_type.num_fields):
            target = arrow_type.field(i)
            spec = by_name.get(target.name)
            physical = spec.physical if spec else target.name
            if physical in present:
                children.append(conform_array(arr.field(present[physical]), spec, target.type))
            else:
                children.append(pa.nulls(len(arr), target.type))
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=mask)
    if pa.types.is_list(arrow_type) and pa.types.is_list(arr.type) and column is not None and column.children:
        values = conform_array(arr.values, column, arrow_type.value_type)
        mask = arr.is_null() if arr.null_count else None
        return pa.ListArray.from_arrays(arr.offsets, values, type=arrow_type, mask=mask)
    return arr if arr.type == arrow_type else arr.cast(arrow_type)


def read_file(table_path: str, add: AddFile, columns: list[Column], schema: pa.Schema) -> pa.Table:
    """The live rows of one data file as a table with exactly ``schema`` (columns in order)."""
    data = table_files.read_parquet(local_path(table_path, add.path), coerce_int96_timestamp_unit="us")
    n = data.num_rows
    names = set(data.column_names)
    arrays = []
    for column, target in zip(columns, schema):
        if column.partition:
            pv = add.partition_values or {}
            value = pv.get(column.physical, pv.get(column.name))
            arrays.append(partition_array(value, target.type, n))
        elif column.physical in names:
            arrays.append(conform_array(data.column(column.physical).combine_chunks(), column, target.type))
        else:  # added to the table after this file was written
            arrays.append(pa.nulls(n, target.type))
    table = pa.Table.from_arrays(arrays, schema=schema)
    deleted = read_deleted_rows(table_path, add.deletion_vector)
    if deleted:
        keep = [True] * n
        for row in deleted:
            if row < n:
                keep[row] = False
        table = table.filter(pa.array(keep, pa.bool_()))
    return table
