"""The reference matrix "without row-level concurrency", through prepare()/commit().

For each cell: prepare THIS (all data work done, files staged), let the WINNER commit, then
commit THIS. Asserted: whether it conflicts, the exact exception class, and that the table
afterwards holds exactly the winner's effect (conflict) or both effects (no conflict), from
a small Python model of the statements. Tables are written through the log (no DVs).
"""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.dml import Runner, make_table  # noqa: E402

from isolde.errors import (  # noqa: E402
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
)

pytestmark = pytest.mark.spark

WS, SER = "WriteSerializable", "Serializable"
D1, D2 = "2024-01-01", "2024-01-02"
SCHEMA = pa.schema([("id", pa.int64()), ("date", pa.string()), ("v", pa.int64())])
MATCH_ID = {D1: 1, D2: 5}


def initial() -> dict:
    return {i: (D1 if i < 4 else D2, i) for i in range(8)}


def create(r: Runner, name: str, partitioned: bool, level: str) -> None:
    rows = [{"id": i, "date": d, "v": v} for i, (d, v) in initial().items()]
    batches = [[x for x in rows if x["id"] % 4 in (0, 1)], [x for x in rows if x["id"] % 4 in (2, 3)]]
    make_table(r.path(name), SCHEMA, batches, partition_by=["date"] if partitioned else [],
               properties={"delta.isolationLevel": level})


# --------------------------------------------------------------------------- statements + model


class Op:
    def __init__(self, kind: str, date: str):
        self.kind, self.date = kind, date

    def __repr__(self):
        return f"{self.kind}({self.date[-2:]})"

    def sql(self, table: str) -> str:
        d = self.date
        if self.kind == "UPD":
            return f"UPDATE {table} SET v = v + 100 WHERE date = '{d}'"
        if self.kind == "DEL":
            return f"DELETE FROM {table} WHERE date = '{d}' AND v % 2 = 0"
        if self.kind == "MRG":
            return (f"MERGE INTO {table} t USING (SELECT * FROM VALUES ({MATCH_ID[d]}, '{d}', 1000), "
                    f"({50 + MATCH_ID[d]}, '{d}', 50) AS s(id, date, v)) s "
                    f"ON s.id = t.id AND t.date = '{d}' WHEN MATCHED THEN UPDATE SET v = s.v "
                    "WHEN NOT MATCHED THEN INSERT *")
        raise ValueError(self.kind)

    def apply(self, rows: dict) -> dict:
        rows = dict(rows)
        d = self.date
        if self.kind == "UPD":
            return {i: (dd, v + 100 if dd == d else v) for i, (dd, v) in rows.items()}
        if self.kind == "DEL":
            return {i: (dd, v) for i, (dd, v) in rows.items() if not (dd == d and v % 2 == 0)}
        if self.kind == "MRG":
            m = MATCH_ID[d]
            if m in rows and rows[m][0] == d:
                rows[m] = (d, 1000)
            else:
                rows[m] = (d, 1000)
            rows[50 + m] = (d, 50)
            return rows
        if self.kind == "INS":
            rows[60 + MATCH_ID[d]] = (d, 60)
            return rows
        if self.kind == "OPT":
            return rows
        raise ValueError(self.kind)

    # -- running
    def prepare(self, r: Runner, table: str):
        if self.kind == "INS":
            return BlindAppend(r.path(table), [{"id": 60 + MATCH_ID[self.date], "date": self.date, "v": 60}])
        if self.kind == "OPT":
            return Compaction(r.path(table), self.date)
        return r.prepare(self.sql(table))

    def run(self, r: Runner, table: str):
        return self.prepare(r, table).commit()


class BlindAppend:
    """A blind INSERT at the log level: the file is written first, the commit reads nothing."""

    def __init__(self, path: str, rows: list):
        from isolde.executor.log.delta_log import DeltaLog

        self.txn = DeltaLog.for_table(path).start_transaction()
        parts = list(self.txn.snapshot.partition_columns)
        self.adds = [_write_file(path, rows, parts)]

    def commit(self):
        return self.txn.commit(self.adds, operation="WRITE", operation_parameters={"mode": "Append"})


class Compaction:
    """An OPTIMIZE-like commit: the files of one partition (or all) -> one file, dataChange=false."""

    def __init__(self, path: str, date: str):
        from isolde.executor.log.delta_log import DeltaLog

        self.txn = DeltaLog.for_table(path).start_transaction()
        parts = list(self.txn.snapshot.partition_columns)
        files = [a for a in self.txn.snapshot.all_files if not parts or a.partition_values.get("date") == date]
        rows = []
        for a in files:
            for row in pq.read_table(os.path.join(path, a.path)).to_pylist():
                if parts:
                    row["date"] = a.partition_values["date"]
                rows.append(row)
        self.txn.filter_files("date = '%s'" % date if parts else None)
        self.removes = [a.remove(data_change=False) for a in files]
        add = _write_file(path, rows, parts)
        add.data_change = False
        self.add = add

    def commit(self):
        return self.txn.commit(self.removes + [self.add], operation="OPTIMIZE", operation_parameters={})


def _write_file(path: str, rows: list, parts: list):
    from isolde.executor.log.actions import AddFile
    from isolde.executor.log.stats import file_stats

    pv = {p: rows[0][p] for p in parts}
    sub = "/".join(f"{p}={v}" for p, v in pv.items())
    name = f"part-{uuid.uuid4().hex}.snappy.parquet"
    rel = f"{sub}/{name}" if sub else name
    local = os.path.join(path, rel)
    os.makedirs(os.path.dirname(local), exist_ok=True)
    data = pa.schema([f for f in SCHEMA if f.name not in parts])
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in r.items() if k not in parts} for r in rows], schema=data),
                   local)
    _, stats = file_stats(local)
    return AddFile(rel, pv, os.path.getsize(local), 0, True, stats)


def table_state(r: Runner, table: str) -> dict:
    return {i: (d, v) for i, d, v in r.rows(table, ["id", "date", "v"])}


# --------------------------------------------------------------------------- the cells

A, DD, DR = ConcurrentAppendException, ConcurrentDeleteDeleteException, ConcurrentDeleteReadException
DML = ("UPD", "DEL", "MRG")

# (this, winner, level, layout, expected exception or None)
#   layout: "flat" (unpartitioned; both on D1), "same" (partitioned, both on D1),
#           "other" (partitioned, this on D1, winner on D2)
CELLS = []
for this in DML:
    # under Serializable an append conflicts when a row it added may satisfy this read: UPDATE /
    # DELETE read date = D1 (the appended row's date); MERGE reads its key set, which the
    # appended file's statistics show it cannot hold (the row-scoped pruning issue 19 asks for)
    CELLS += [(this, "INS", WS, "flat", None), (this, "INS", SER, "flat", None if this == "MRG" else A)]
for k, this in enumerate(DML):
    for j, winner in enumerate(DML):
        CELLS.append((this, winner, (WS, SER)[(j + k) % 2], "flat", A))
    CELLS.append((this, "OPT", (SER, WS)[k % 2], "flat", DD))
for winner in ("INS", "UPD", "MRG", "OPT"):
    CELLS.append(("INS", winner, SER, "flat", None))
# the OPTIMIZE row (a dataChange=false compaction, no DVs): snapshot isolation for appends,
# but a file it compacts must not have been rewritten or compacted concurrently
CELLS += [("OPT", "INS", SER, "flat", None), ("OPT", "UPD", WS, "flat", DR), ("OPT", "OPT", WS, "flat", DD),
          ("OPT", "MRG", SER, "other", None)]
CELLS += [
    ("UPD", "UPD", WS, "other", None),
    ("DEL", "MRG", SER, "other", None),
    ("MRG", "DEL", WS, "other", None),
    ("UPD", "INS", SER, "other", None),
    ("MRG", "INS", SER, "other", None),
    ("DEL", "OPT", SER, "other", None),
    ("UPD", "UPD", SER, "same", A),
    ("DEL", "INS", SER, "same", A),
    ("DEL", "INS", WS, "same", None),
    ("MRG", "MRG", WS, "same", A),
    ("UPD", "OPT", WS, "same", DD),
]


@pytest.mark.parametrize("this,winner,level,layout,expected", CELLS,
                         ids=[f"{a}-vs-{b}-{lv[:2]}-{lay}" for a, b, lv, lay, _ in CELLS])
def test_matrix_cell(tmp_path, this, winner, level, layout, expected):
    r = Runner(tmp_path / "wh")
    create(r, "t", partitioned=layout != "flat", level=level)
    mine = Op(this, D1)
    theirs = Op(winner, D2 if layout == "other" else D1)
    prepared = mine.prepare(r, "t")
    theirs.run(r, "t")
    winner_version = r.log("t").update().version
    if expected is None:
        prepared.commit()
        if level == WS and winner == "INS":  # this is ordered before the blind append it did not see
            want = theirs.apply(mine.apply(initial()))
        else:
            want = mine.apply(theirs.apply(initial()))
    else:
        with pytest.raises(ConcurrentModificationException) as info:
            prepared.commit()
        assert type(info.value) is expected
        assert info.value.winning_version == winner_version and info.value.sqlstate == "2D521"
        assert r.log("t").update().version == winner_version
        want = theirs.apply(initial())
    assert table_state(r, "t") == want


# --------------------------------------------------------------------------- the reference's examples


def test_reference_long_running_delete_vs_insert(tmp_path):
    """txn1 a long-running DELETE, txn2 INSERTs rows txn1 would delete; txn2 commits first."""
    for level, conflict in ((WS, False), (SER, True)):
        r = Runner(tmp_path / level)
        create(r, "t", partitioned=False, level=level)
        delete = r.prepare(f"DELETE FROM t WHERE date = '{D1}'")
        BlindAppend(r.path("t"), [{"id": 99, "date": D1, "v": 99}]).commit()
        if conflict:
            with pytest.raises(ConcurrentAppendException):
                delete.commit()
            assert 0 in table_state(r, "t")  # the delete did not happen
        else:
            delete.commit()
            state = table_state(r, "t")
            assert state[99] == (D1, 99)  # the inserted row survives under WriteSerializable
            assert not any(i < 4 for i in state)


def _merge(d: str, explicit: bool, ids=(1,)) -> str:
    values = ", ".join(f"({i}, '{d}', 'US', {1000 + i})" for i in ids)
    cond = "s.id = t.id AND s.date = t.date AND s.country = t.country"
    if explicit:
        cond += f" AND t.date = '{d}' AND t.country = 'US'"
    return (f"MERGE INTO t USING (SELECT * FROM VALUES {values} AS s(id, date, country, v)) s ON {cond} "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")


def _country_table(r: Runner, level=WS):
    schema = pa.schema([("id", pa.int64()), ("date", pa.string()), ("country", pa.string()), ("v", pa.int64())])
    rows = [{"id": i, "date": d, "country": c, "v": i} for i in range(4) for d in (D1, D2) for c in ("US", "FR")]
    make_table(r.path("t"), schema, [rows], partition_by=["date", "country"],
               properties={"delta.isolationLevel": level})


@pytest.mark.parametrize("explicit", [True, False], ids=["explicit-partition", "dynamic-source-keys"])
def test_reference_partitioned_merges_different_dates(tmp_path, explicit):
    """The reference's MERGE on (date, country): with t.date/t.country pinned no conflict; isolde
    also scopes `s.date = t.date` by the source's dates, so the implicit form does not conflict
    either (going beyond the reference)."""
    r = Runner(tmp_path / "wh")
    _country_table(r, SER)
    first = r.prepare(_merge(D1, explicit))
    r.run(_merge(D2, explicit))
    first.commit()
    state = {(i, d, c): v for i, d, c, v in r.rows("t", ["id", "date", "country", "v"])}
    assert state[(1, D1, "US")] == 1001 and state[(1, D2, "US")] == 1001
    assert state[(1, D1, "FR")] == 1
    h = r.log("t").history(1)[0]
    assert "date = '2024-01-01'" in h["readPredicates"][0]


def test_dynamic_source_keys_same_date_conflicts(tmp_path):
    r = Runner(tmp_path / "wh")
    _country_table(r)
    first = r.prepare(_merge(D1, explicit=False, ids=(1,)))
    r.run(_merge(D1, explicit=False, ids=(2,)))
    with pytest.raises(ConcurrentAppendException):
        first.commit()


def test_dynamic_source_keys_large_source_uses_range(tmp_path):
    """More than 1,000 source keys: the scope becomes a min/max range of the key, which still
    keeps merges on different dates apart (the date has one value)."""
    r = Runner(tmp_path / "wh")
    _country_table(r, SER)
    first = r.prepare(_merge(D1, explicit=False, ids=range(1, 1202)))
    r.run(_merge(D2, explicit=False, ids=(3,)))
    first.commit()
    h = r.log("t").history(1)[0]
    assert "id BETWEEN 1 AND 1201" in h["readPredicates"][0]
