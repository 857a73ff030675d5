"""Interop with delta-rs (`deltalake`), both ways, with and without checkpoints."""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from isolde.errors import ConcurrentAppendException
from isolde.executor.log import DeltaLog
from isolde.executor.log.actions import AddFile, Metadata, SetTransaction
from isolde.executor.log.stats import file_stats

from tests.helpers.log_tables import schema_string

import deltalake

SCHEMA = schema_string(id="long", name="string", day="date", p="string")


def write_file(table_path: str, rows: list[int], p: str | None = "a") -> AddFile:
    folder = "p=__HIVE_DEFAULT_PARTITION__" if p is None else f"p={p}"
    rel = f"{folder}/part-{uuid.uuid4()}.parquet"
    full = os.path.join(table_path, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    import datetime as dt

    pq.write_table(
        pa.table(
            {
                "id": pa.array(rows, pa.int64()),
                "name": pa.array([f"n{r}" for r in rows]),
                "day": pa.array([dt.date(2024, 1, 1 + r % 28) for r in rows], pa.date32()),
            }
        ),
        full,
    )
    _, stats = file_stats(full)
    return AddFile(rel, {"p": p}, os.path.getsize(full), int(os.path.getmtime(full) * 1000), stats=stats)


def rows_at(path, version):
    dt_ = deltalake.DeltaTable(path, version=version)
    return sorted(dt_.to_pyarrow_table().column("id").to_pylist())


def test_delta_rs_reads_isolde_table_at_every_version(tmp_path):
    path = str(tmp_path / "t")
    log = DeltaLog.for_table(path)
    expected = {}
    live: list[int] = []
    log.start_transaction().commit([Metadata(SCHEMA, ("p",)), write_file(path, [0])], "CREATE TABLE")
    live = [0]
    expected[0] = sorted(live)
    for v in range(1, 23):
        t = log.start_transaction()
        if v % 5 == 0:  # a delete that rewrites one file
            victim = t.filter_files("p = 'a'")[0]
            ids = pq.read_table(os.path.join(path, victim.path)).column("id").to_pylist()
            keep = [i for i in ids if i % 2]
            actions = [victim.remove()]
            if keep:
                actions.append(write_file(path, keep))
            for i in ids:
                live.remove(i)
            live.extend(keep)
            t.commit(actions, "DELETE")
        else:
            p = None if v % 7 == 0 else ("a" if v % 2 else "b")
            t.commit([write_file(path, [v * 10, v * 10 + 1], p)], "WRITE", {"mode": "Append"})
            live.extend([v * 10, v * 10 + 1])
        expected[v] = sorted(live)
    names = os.listdir(os.path.join(path, "_delta_log"))
    assert "00000000000000000010.checkpoint.parquet" in names and "00000000000000000020.checkpoint.parquet" in names
    for v, ids in expected.items():
        assert rows_at(path, v) == ids, v
        assert sorted(
            i for a in DeltaLog.for_table(path).snapshot(v).all_files
            for i in pq.read_table(os.path.join(path, a.path)).column("id").to_pylist()
        ) == ids
    dt_ = deltalake.DeltaTable(path)
    assert dt_.version() == 22
    assert dt_.metadata().partition_columns == ["p"]
    history = dt_.history()
    assert history[0]["operation"] in ("WRITE", "DELETE") and len(history) == 23
    # delta-rs can also append on top of an isolde table, and isolde replays it
    deltalake.write_deltalake(
        path, pa.table({"id": pa.array([999], pa.int64()), "name": ["x"], "day": pa.array([None], pa.date32()),
                        "p": ["c"]}), mode="append"
    )
    snap = DeltaLog.for_table(path).snapshot()
    assert snap.version == 23 and any(a.partition_values == {"p": "c"} for a in snap.all_files)


def test_isolde_reads_delta_rs_tables_with_checkpoints(tmp_path):
    path = str(tmp_path / "rs")
    expected = {}
    total: list[int] = []
    for v in range(14):
        batch = [v * 3, v * 3 + 1]
        deltalake.write_deltalake(
            path, pa.table({"id": pa.array(batch, pa.int64()), "p": [f"x{v % 3}"] * 2}),
            mode="append", partition_by=["p"],
        )
        total += batch
        expected[v] = sorted(total)
        if v == 6:
            deltalake.DeltaTable(path).create_checkpoint()
    dt_ = deltalake.DeltaTable(path)
    dt_.delete("id < 4")  # delta-rs rewrites/removes files
    total = [i for i in total if i >= 4]
    expected[14] = sorted(total)
    deltalake.DeltaTable(path).create_checkpoint()
    names = os.listdir(os.path.join(path, "_delta_log"))
    assert any(n.endswith(".checkpoint.parquet") for n in names)
    for v, ids in expected.items():
        snap = DeltaLog.for_table(path).snapshot(v)
        got = sorted(
            i for a in snap.all_files
            for i in pq.read_table(os.path.join(path, a.path.replace("%3D", "="))).column("id").to_pylist()
        )
        assert got == ids, v
    snap = DeltaLog.for_table(path).snapshot()
    assert snap.version == 14 and snap.partition_columns == ("p",)
    assert snap.protocol.min_reader_version >= 1 and snap.metadata.schema["fields"][0]["name"] == "id"
    assert all(a.num_records is not None for a in snap.all_files)
    assert {r.path for r in snap.tombstones}  # the delete left tombstones, read lazily from the checkpoint
    # isolde commits on top of the delta-rs table, delta-rs reads it
    t = DeltaLog.for_table(path).start_transaction()
    assert t.filter_files("p = 'x1'")
    t.commit([SetTransaction("app", 1)], "SET TXN")
    assert deltalake.DeltaTable(path).version() == 15
    assert deltalake.DeltaTable(path).transaction_version("app") == 1


def test_delta_rs_blind_append_is_blind_for_isolde(tmp_path):
    path = str(tmp_path / "rs")
    deltalake.write_deltalake(path, pa.table({"id": pa.array([1], pa.int64()), "p": ["a"]}), partition_by=["p"])
    ser = DeltaLog.for_table(path).start_transaction()
    ser.filter_files("p = 'a'")
    deltalake.write_deltalake(path, pa.table({"id": pa.array([2], pa.int64()), "p": ["a"]}), mode="append")
    ser.commit([], "UPDATE")  # WriteSerializable: a delta-rs append-mode WRITE is a blind append
    deltalake.DeltaTable(path).alter.set_table_properties({"delta.isolationLevel": "Serializable"})
    t = DeltaLog.for_table(path).start_transaction()
    t.filter_files("p = 'a'")
    deltalake.write_deltalake(path, pa.table({"id": pa.array([3], pa.int64()), "p": ["a"]}), mode="append")
    with pytest.raises(ConcurrentAppendException) as info:
        t.commit([], "UPDATE")
    assert info.value.winning_operation == "WRITE" and info.value.partition == "p=a"
