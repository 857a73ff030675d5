"""Footer-only file stats and the predicate evaluator that prunes by them."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isolde.executor.log.actions import AddFile
from isolde.executor.log.stats import file_stats
from isolde.executor.txn.predicates import Predicate, prune_files, split_partition_predicate

from tests.helpers.log_tables import schema_string


def test_stats_types_and_formats(tmp_path):
    path = str(tmp_path / "f.parquet")
    table = pa.table(
        {
            "i": pa.array([3, None, -1], pa.int32()),
            "l": pa.array([10, 20, 30], pa.int64()),
            "d": pa.array([1.5, float("nan"), -2.0], pa.float64()),
            "s": pa.array(["b", "a" * 40, None], pa.string()),
            "day": pa.array([dt.date(2024, 1, 2), dt.date(2023, 5, 6), None], pa.date32()),
            "ts": pa.array([dt.datetime(2024, 1, 1, 0, 0, 0, 1500), None, dt.datetime(2023, 1, 1)],
                           pa.timestamp("us", tz="UTC")),
            "ntz": pa.array([dt.datetime(2024, 1, 1), None, None], pa.timestamp("us")),
            "b": pa.array([True, False, None]),
            "bin": pa.array([b"x", b"y", None]),
            "dec": pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("-3.50")], pa.decimal128(10, 2)),
            "nested": pa.array([{"x": 1}, None, {"x": 2}], pa.struct([("x", pa.int64())])),
            "lst": pa.array([[1], [], None], pa.list_(pa.int64())),
        }
    )
    pq.write_table(table, path, row_group_size=2)
    n, text = file_stats(path)
    s = json.loads(text)
    assert n == 3 and s["numRecords"] == 3
    assert s["minValues"]["i"] == -1 and s["maxValues"]["i"] == 3 and s["nullCount"]["i"] == 1
    assert s["minValues"]["l"] == 10 and s["maxValues"]["l"] == 30
    assert s["minValues"]["d"] == -2.0 and "d" not in s["maxValues"]  # NaN sorts last in Spark: no safe max
    assert s["minValues"]["s"] == "a" * 32 and s["maxValues"]["s"] == "b"
    assert s["minValues"]["day"] == "2023-05-06" and s["maxValues"]["day"] == "2024-01-02"
    assert s["minValues"]["ts"] == "2023-01-01T00:00:00.000Z"
    assert s["maxValues"]["ts"] == "2024-01-01T00:00:00.002Z"  # rounded up to stay an upper bound
    assert s["maxValues"]["ntz"] == "2024-01-01T00:00:00.000" and s["nullCount"]["ntz"] == 2
    assert s["minValues"]["b"] is False and s["maxValues"]["b"] is True
    assert "bin" not in s["minValues"] and s["nullCount"]["bin"] == 1
    assert s["minValues"]["dec"] == -3.5 and s["maxValues"]["dec"] == 1.25
    assert "nested" not in s["minValues"] and "lst" not in s["minValues"]


def test_long_string_max_stays_an_upper_bound(tmp_path):
    path = str(tmp_path / "f.parquet")
    long = "z" * 50
    pq.write_table(pa.table({"s": [long, "a"]}), path)
    s = json.loads(file_stats(path)[1])
    assert s["maxValues"]["s"] >= long and s["maxValues"]["s"].startswith("z" * 32)


SCHEMA = json.loads(
    schema_string(id="long", name="string", day="date", ts="timestamp", ntz="timestamp_ntz", flag="boolean",
                  price="decimal(10,2)", p="string", n="integer")
)
SCHEMA["fields"].append({"name": "s", "type": {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "p", "type": "string", "nullable": True, "metadata": {}}]}, "nullable": True, "metadata": {}})


def file_with(partition=None, num_records=10, **bounds):
    stats = {
        "numRecords": num_records,
        "minValues": {k: v[0] for k, v in bounds.items() if v[0] is not None},
        "maxValues": {k: v[1] for k, v in bounds.items() if v[1] is not None},
        "nullCount": {k: v[2] for k, v in bounds.items() if len(v) > 2},
    }
    return AddFile("f", partition or {}, 1, 1, stats=json.dumps(stats))


def may(sql, add, partition_columns=("p", "n")):
    return Predicate(sql, SCHEMA, partition_columns).file_may_match(add)


FILE = file_with(
    {"p": "x", "n": "5"},
    id=(10, 20, 0), name=("bob", "dave", 1), day=("2024-01-01", "2024-01-31", 0),
    ts=("2024-01-01T00:00:00.000Z", "2024-01-01T12:00:00.000Z", 0), flag=(False, False, 0),
    price=(1.5, 9.25, 0),
)

PRUNING = [
    ("id = 15", True), ("id = 25", False), ("id <> 15", True), ("id < 10", False), ("id <= 10", True),
    ("id > 20", False), ("id >= 20", True), ("15 < id", True), ("25 <= id", False), ("id IN (1, 2, 3)", False),
    ("id IN (1, 12)", True), ("id NOT IN (1, 2)", True), ("id BETWEEN 21 AND 30", False),
    ("id BETWEEN 0 AND 10", True), ("id = -5", False), ("id = 15.5", True), ("id > 19.5", True),
    ("name = 'carl'", True), ("name = 'zed'", False), ("name < 'bob'", False), ("name IS NULL", True),
    ("id IS NULL", False), ("id IS NOT NULL", True), ("NOT (id > 5)", False), ("NOT (id = 15)", True),
    ("id = 15 AND name = 'zed'", False), ("id = 25 OR name = 'carl'", True), ("id = 25 OR name = 'zed'", False),
    ("day = DATE '2024-02-01'", False), ("day = '2024-01-15'", True), ("day >= DATE'2024-01-31'", True),
    ("ts > TIMESTAMP '2024-01-02 00:00:00+00:00'", False), ("ts > TIMESTAMP '2024-01-01 11:00:00Z'", True),
    ("ts > TIMESTAMP '2024-01-02 01:00:00'", True),  # no zone: could be any session time zone
    ("ts > TIMESTAMP '2024-01-02 10:00:00'", False), ("flag = true", False), ("flag", False), ("NOT flag", True),
    ("price > 9.5", False), ("price = 9.25", True), ("p = 'x'", True), ("p = 'y'", False), ("p IN ('y', 'z')", False),
    ("p = 'x' AND n = 5", True), ("n = 6", False), ("n > 4", True), ("p IS NULL", False), ("p IS NOT NULL", True),
    ("upper(name) = 'X'", True), ("id + 1 = 100", True), ("id = NULL", False), ("NOT (id = NULL)", False),
    ("id IN (NULL)", False), ("id NOT IN (1, NULL)", False), ("1 = 1", True), ("1 = 0", False), ("true", True),
    ("false", False), ("unknown_col = 3", True), ("NOT unknown_col = 3", True), ("name LIKE 'z%'", True),
    ("id = (SELECT max(id) FROM other)", True), ("id = 15 AND (", True), ("t.id = 25", False),
    ("t.p = 'y'", False), ("s.id = 25", True), ("s.p = 'y'", True), ("s.x.y = 1", True),
]


@pytest.mark.parametrize("sql,expected", PRUNING, ids=[p[0] for p in PRUNING])
def test_pruning(sql, expected):
    assert may(sql, FILE) is expected


def test_missing_stats_and_all_null_columns():
    bare = AddFile("f", {"p": "x", "n": "5"}, 1, 1)
    assert may("id = 1", bare) and may("id IS NULL", bare) and not may("p = 'y'", bare)
    all_null = file_with({"p": None, "n": "1"}, num_records=4, id=(None, None, 4))
    assert not may("id = 1", all_null) and may("id IS NULL", all_null) and not may("id IS NOT NULL", all_null)
    assert may("p IS NULL", all_null) and not may("p = 'x'", all_null) and not may("p <> 'x'", all_null)
    truncated = file_with({"p": "x", "n": "1"}, name=("a" * 32, "a" * 31 + "b" + "\U0010ffff"))
    # a truncated max bounds the values' 32-character prefix: a longer value sharing the prefix
    # may match, one whose prefix is larger cannot
    assert may("name = '" + "a" * 31 + "b" + "\U0010ffff" * 3 + "z'", truncated)
    assert may("name > '" + "a" * 31 + "bzzz'", truncated)
    assert not may("name = '" + "a" * 31 + "c'", truncated)


def test_split_partition_predicate():
    part, data = split_partition_predicate("p = 'x' AND id > 3 AND (n = 1 OR n = 2) AND (p = 'y' OR id = 1)", ["p", "n"])
    assert part.sql() == "p = 'x' AND (n = 1 OR n = 2)"
    assert data.sql() == "id > 3 AND (p = 'y' OR id = 1)"
    assert split_partition_predicate(None, ["p"]) == (None, None)
    assert split_partition_predicate("false AND id = 1", ["p"])[0].sql() == "FALSE"
    part, data = split_partition_predicate("s.p = 'x' AND t.p = 'y'", ["p", "n"], SCHEMA)
    assert part.sql() == "t.p = 'y'" and data.sql() == "s.p = 'x'"


def test_prune_files_and_partition_scope():
    files = [AddFile(f"f{i}", {"p": p, "n": "1"}, 1, 1, stats=json.dumps({"numRecords": 1, "minValues": {"id": i},
             "maxValues": {"id": i}, "nullCount": {"id": 0}})) for i, p in enumerate("xxyy")]
    assert [f.path for f in prune_files(files, "p = 'y' AND id >= 3", SCHEMA, ["p", "n"])] == ["f3"]
    assert prune_files(files, None, SCHEMA, ["p", "n"]) == files
    pred = Predicate("p = 'x' AND id = 1", SCHEMA, ["p", "n"])
    assert pred.partition_may_match({"p": "x", "n": "9"}) and not pred.partition_may_match({"p": "y", "n": "9"})
    assert Predicate(None, SCHEMA, ["p"], partition_sql="p = 'x'").sql == "p = 'x'"


@given(
    lo=st.integers(-100, 100), width=st.integers(0, 50), value=st.integers(-200, 200),
    op=st.sampled_from(["=", "<>", "<", "<=", ">", ">="]),
    rows=st.lists(st.integers(-100, 150), min_size=1, max_size=8),
)
@settings(max_examples=300, deadline=None)
def test_pruning_is_sound(lo, width, value, op, rows):
    """If some row of the file satisfies the predicate, the file is never pruned."""
    rows = [min(max(r, lo), lo + width) for r in rows]
    add = file_with({"p": "x", "n": "1"}, num_records=len(rows), id=(min(rows), max(rows), 0))
    sql = f"id {op} {value}"
    holds = {"=": value.__eq__, "<>": value.__ne__, "<": value.__gt__, "<=": value.__ge__, ">": value.__lt__,
             ">=": value.__le__}[op]
    if any(holds(r) for r in rows):
        assert may(sql, add)
    if any(not holds(r) for r in rows):
        assert may(f"NOT ({sql})", add)


@pytest.mark.parametrize("values, has_max", [
    ([1.5, -2.0, None], True),
    ([1.5, float("nan")], False),  # footers leave NaN out: the max would lie
    ([None, None], False),  # no value: no bounds at all
    ([float("inf"), 0.0], False),  # JSON has no Infinity: no max written, nothing to trust
])
def test_float_max_only_for_files_read_and_found_without_nan(tmp_path, values, has_max):
    from isolde.executor.log.stats import NAN_FREE_TAG, file_stats_and_tags

    path = str(tmp_path / "f.parquet")
    pq.write_table(pa.table({"x": pa.array(values, pa.float64()), "i": [1] * len(values)}), path)
    n, text, tags = file_stats_and_tags(path)
    s = json.loads(text)
    assert n == len(values)
    assert ("x" in s["maxValues"]) is has_max
    assert (json.loads(tags[NAN_FREE_TAG]) == ["x"]) if has_max else NAN_FREE_TAG not in tags
    assert "x" not in json.loads(file_stats(path)[1])["maxValues"]  # the footer alone never tells


@pytest.mark.parametrize("tagged, pruned", [(True, True), (False, False)])
def test_a_float_max_prunes_only_when_the_file_is_known_nan_free(tagged, pruned):
    from isolde.executor.log.stats import NAN_FREE_TAG

    stats = json.dumps({"numRecords": 3, "minValues": {"x": 0.0}, "maxValues": {"x": 1.0}, "nullCount": {"x": 0}})
    tags = {NAN_FREE_TAG: '["x"]'} if tagged else None
    f = AddFile("f", {}, 1, 1, stats=stats, tags=tags)
    schema = json.loads(schema_string(x="double"))
    got = Predicate("x > 2.5", schema, []).filter([f])
    assert (got == []) is pruned
    assert Predicate("x < -1", schema, []).filter([f]) == []  # the min always prunes
