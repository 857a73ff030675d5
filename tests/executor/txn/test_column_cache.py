"""The row-level check's process-wide cache of decoded columns (executor/txn/row_level.py)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from isolde.executor.txn.row_level import ColumnCache


def _write(path, ids):
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([str(i) for i in ids])}), path)


def test_columns_are_read_once_and_combined(tmp_path, monkeypatch):
    path = str(tmp_path / "a.parquet")
    _write(path, [1, 2, 3])
    cache = ColumnCache()
    reads = []
    real = pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda p, columns: reads.append(tuple(columns)) or real(p, columns=columns))
    assert cache.read(path, ["id"]).column("id").to_pylist() == [1, 2, 3]
    got = cache.read(path, ["v", "id"])
    assert got.column_names == ["v", "id"] and got.column("v").to_pylist() == ["1", "2", "3"]
    assert cache.read(path, ["id", "v"]).column("id").to_pylist() == [1, 2, 3]
    assert reads == [("id",), ("v",)]  # only what was missing, once


def test_a_file_replaced_in_place_is_read_again(tmp_path):
    path = str(tmp_path / "a.parquet")
    _write(path, [1, 2, 3])
    cache = ColumnCache()
    assert cache.read(path, ["id"]).column("id").to_pylist() == [1, 2, 3]
    _write(path, [7, 8, 9, 10])
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    assert cache.read(path, ["id"]).column("id").to_pylist() == [7, 8, 9, 10]


def test_least_recently_used_columns_go_first(tmp_path):
    paths = [str(tmp_path / f"{i}.parquet") for i in range(3)]
    for i, p in enumerate(paths):
        _write(p, list(range(i * 1000, i * 1000 + 1000)))
    size = pq.read_table(paths[0], columns=["id"]).column("id").nbytes
    cache = ColumnCache(max_bytes=2 * size + size // 2)  # room for two such columns
    cache.read(paths[0], ["id"])
    cache.read(paths[1], ["id"])
    cache.read(paths[0], ["id"])  # 0 is now the most recent
    cache.read(paths[2], ["id"])  # evicts 1
    held = {key[0][0] for key in cache._columns}
    assert held == {paths[0], paths[2]} and cache.bytes <= cache.max_bytes
