"""Deletion vectors: Z85, the RoaringBitmapArray payload, inline and file descriptors, and
delta-rs reading a table whose DVs isolde wrote."""

from __future__ import annotations

import os
import struct
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap64

from isolde.executor.log import DeltaLog
from isolde.executor.log.actions import AddFile, Metadata
from isolde.executor.log.deletion_vectors import (
    RBA_MAGIC,
    deserialize_bitmap,
    dv_file_path,
    inline_descriptor,
    read_deleted_rows,
    read_deletion_vector,
    serialize_bitmap,
    union_deletion_vector,
    write_deletion_vector,
    write_deletion_vectors,
    z85_decode,
    z85_encode,
)
from isolde.executor.log.stats import file_stats

from tests.helpers.log_tables import schema_string


def test_z85_reference_vector():
    # the ZeroMQ RFC 32 test vector
    data = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(data) == "HelloWorld"
    assert z85_decode("HelloWorld") == data


@given(st.binary(max_size=64).map(lambda b: b + b"\x00" * (-len(b) % 4)))
@settings(max_examples=200, deadline=None)
def test_z85_round_trip(data):
    assert z85_decode(z85_encode(data)) == data


@given(st.sets(st.integers(min_value=0, max_value=2**40), max_size=200))
@settings(max_examples=100, deadline=None)
def test_bitmap_round_trip(rows):
    payload = serialize_bitmap(rows)
    assert struct.unpack_from("<I", payload)[0] == RBA_MAGIC
    assert set(deserialize_bitmap(payload)) == rows
    d = inline_descriptor(rows)
    assert d.storage_type == "i" and d.cardinality == len(rows) and d.size_in_bytes == len(payload)
    assert set(read_deletion_vector("/nowhere", d)) == rows


def test_file_dv_layout(tmp_path):
    descriptors = write_deletion_vectors(str(tmp_path), {"a": [1, 2, 3], "b": BitMap64([7, 2**33])})
    a, b = descriptors["a"], descriptors["b"]
    assert a.storage_type == b.storage_type == "u" and a.path_or_inline_dv == b.path_or_inline_dv
    assert len(a.path_or_inline_dv) == 20 and a.offset == 1
    path = dv_file_path(str(tmp_path), a)
    assert os.path.basename(path).startswith("deletion_vector_") and path.endswith(".bin")
    raw = open(path, "rb").read()
    assert raw[0] == 1
    size = struct.unpack(">i", raw[1:5])[0]
    payload = raw[5 : 5 + size]
    assert size == a.size_in_bytes
    assert struct.unpack(">I", raw[5 + size : 9 + size])[0] == zlib.crc32(payload)
    assert b.offset == 1 + 4 + size + 4
    assert read_deleted_rows(str(tmp_path), a) == {1, 2, 3}
    assert read_deleted_rows(str(tmp_path), b) == {7, 2**33}
    assert a.unique_id == "u" + a.path_or_inline_dv + "@1"
    grown = union_deletion_vector(str(tmp_path), a, [9])
    assert read_deleted_rows(str(tmp_path), grown) == {1, 2, 3, 9}
    prefixed = write_deletion_vectors(str(tmp_path), {"x": [5]}, prefix_length=2)["x"]
    assert len(prefixed.path_or_inline_dv) == 22
    assert read_deleted_rows(str(tmp_path), prefixed) == {5}


def test_corrupt_dv_detected(tmp_path):
    d = write_deletion_vector(str(tmp_path), [1, 2])
    path = dv_file_path(str(tmp_path), d)
    raw = bytearray(open(path, "rb").read())
    raw[-6] ^= 0xFF
    open(path, "wb").write(bytes(raw))
    with pytest.raises(ValueError):
        read_deletion_vector(str(tmp_path), d)


def _write_data(table_path, name, ids):
    os.makedirs(table_path, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), os.path.join(table_path, name))
    n, stats = file_stats(os.path.join(table_path, name))
    return AddFile(name, {}, os.path.getsize(os.path.join(table_path, name)), 1_700_000_000_000, stats=stats)


def test_delta_rs_honours_isolde_deletion_vectors(tmp_path):
    import deltalake
    path = str(tmp_path / "dv")
    f1 = _write_data(path, "part-1.parquet", list(range(0, 10)))
    f2 = _write_data(path, "part-2.parquet", list(range(100, 110)))
    log = DeltaLog.for_table(path)
    log.start_transaction().commit(
        [Metadata(schema_string(id="long"), (), {"delta.enableDeletionVectors": "true"}), f1, f2], "CREATE TABLE"
    )
    assert log.snapshot().protocol.reader_features == ["deletionVectors"]
    t = log.start_transaction()
    t.filter_files("id < 5 OR id >= 105")
    inline = inline_descriptor([0, 1, 2])
    on_disk = write_deletion_vector(path, [5, 9])
    t.commit(
        [
            f1.remove(), AddFile(f1.path, {}, f1.size, f1.modification_time, stats=f1.stats, deletion_vector=inline),
            f2.remove(), AddFile(f2.path, {}, f2.size, f2.modification_time, stats=f2.stats, deletion_vector=on_disk),
        ],
        "DELETE",
    )
    dt = deltalake.DeltaTable(path)
    assert dt.version() == 1
    result = deltalake.QueryBuilder().register("t", dt).execute("SELECT id FROM t ORDER BY id").read_all()
    ids = result.column("id").to_pylist()
    assert ids == [3, 4, 5, 6, 7, 8, 9, 100, 101, 102, 103, 104, 106, 107, 108]
    # isolde reads its own descriptors back from the snapshot
    snap = DeltaLog.for_table(path).snapshot()
    deleted = {a.path: read_deleted_rows(path, a.deletion_vector) for a in snap.all_files}
    assert deleted == {"part-1.parquet": {0, 1, 2}, "part-2.parquet": {5, 9}}
    # a checkpoint keeps the descriptors; delta-rs still honours them from there
    log.checkpoint()
    dt = deltalake.DeltaTable(path)
    result = deltalake.QueryBuilder().register("t", dt).execute("SELECT count(*) AS n FROM t").read_all()
    assert result.column("n").to_pylist() == [15]
    again = DeltaLog.for_table(path).snapshot()
    assert {a.path: a.deletion_vector for a in again.all_files} == {a.path: a.deletion_vector for a in snap.all_files}
