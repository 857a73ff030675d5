"""The streaming source's file reader (pyarrow only): logical names, partition values,
deletion vectors, columns a file predates, Spark's Arrow types."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq

from isolde.executor.log.actions import AddFile
from isolde.executor.log.deletion_vectors import inline_descriptor
from isolde.executor.streaming.arrow_files import columns_of, partition_array, read_file

MAPPED_SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {"delta.columnMapping.physicalName": "col-1"}},
    {"name": "point", "type": {"type": "struct", "fields": [
        {"name": "x", "type": "integer", "nullable": True, "metadata": {"delta.columnMapping.physicalName": "col-2"}},
    ]}, "nullable": True, "metadata": {"delta.columnMapping.physicalName": "col-3"}},
    {"name": "day", "type": "date", "nullable": True, "metadata": {"delta.columnMapping.physicalName": "col-4"}},
    {"name": "added_later", "type": "string", "nullable": True,
     "metadata": {"delta.columnMapping.physicalName": "col-5"}},
]}
TARGET = pa.schema([("id", pa.int64()), ("point", pa.struct([("x", pa.int32())])), ("day", pa.date32()),
                    ("added_later", pa.string())])


def test_mapped_nested_partitioned_file_with_a_deletion_vector(tmp_path):
    point = pa.StructArray.from_arrays([pa.array([10, 20, 30], pa.int32())], names=["col-2"])
    pq.write_table(pa.table({"col-1": pa.array([1, 2, 3], pa.int64()), "col-3": point}),
                   tmp_path / "part-0.parquet")
    columns = columns_of(MAPPED_SCHEMA, ["day"], {"delta.columnMapping.mode": "name"})
    assert [(c.name, c.physical, c.partition) for c in columns] == [
        ("id", "col-1", False), ("point", "col-3", False), ("day", "col-4", True), ("added_later", "col-5", False)]
    add = AddFile("part-0.parquet", {"col-4": "2024-02-29"}, 1, 0, deletion_vector=inline_descriptor([1]))
    table = read_file(str(tmp_path), add, columns, TARGET)
    assert table.schema == TARGET
    assert table.to_pylist() == [
        {"id": 1, "point": {"x": 10}, "day": dt.date(2024, 2, 29), "added_later": None},
        {"id": 3, "point": {"x": 30}, "day": dt.date(2024, 2, 29), "added_later": None},
    ]


def test_plain_names_and_int96_timestamps_become_utc_microseconds(tmp_path):
    ts = pa.array([dt.datetime(2024, 1, 1, 12, 0, 0, 123456)], pa.timestamp("us"))
    pq.write_table(pa.table({"t": ts}), tmp_path / "f%20x.parquet", use_deprecated_int96_timestamps=True)
    schema = {"type": "struct", "fields": [{"name": "t", "type": "timestamp", "nullable": True, "metadata": {}}]}
    target = pa.schema([("t", pa.timestamp("us", tz="UTC"))])
    table = read_file(str(tmp_path), AddFile("f%2520x.parquet", {}, 1, 0), columns_of(schema, [], {}), target)
    assert table.column("t").to_pylist() == [dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)]


def test_partition_values_as_delta_writes_them():
    utc = pa.timestamp("us", tz="UTC")
    assert partition_array("2024-01-01 10:00:00", utc, 2).to_pylist() == [
        dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc)] * 2  # no offset: UTC
    assert partition_array("2024-01-01T10:00:00.5Z", utc, 1).to_pylist() == [
        dt.datetime(2024, 1, 1, 10, 0, 0, 500000, tzinfo=dt.timezone.utc)]
    assert partition_array(None, pa.int32(), 2).to_pylist() == [None, None]
    assert partition_array("", pa.string(), 1).to_pylist() == [None]  # Delta: '' is null
    assert partition_array("12.30", pa.decimal128(5, 2), 1).to_pylist()[0].as_tuple().digits == (1, 2, 3, 0)
    assert partition_array("true", pa.bool_(), 1).to_pylist() == [True]
    assert partition_array("a b", pa.binary(), 1).to_pylist() == [b"a b"]
    assert json.dumps(partition_array("7", pa.int8(), 3).to_pylist()) == "[7, 7, 7]"
