"""driver_write's pure parts, no Spark: rows grouped by partition, the counted bound, sizes."""

from __future__ import annotations

import datetime
import random

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from isolde.executor.rows import driver_write
from isolde.executor.rows.dml import _rows_to_write


@pytest.mark.parametrize("seed", range(5))
def test_partition_groups_hold_every_row_once_under_its_folder_values(seed):
    rng = random.Random(seed)
    n = rng.randrange(0, 300)
    table = pa.table({
        "v": pa.array(range(n), pa.int64()),
        "ps": pa.array([rng.choice(["a", "", None, "é/x"]) for _ in range(n)], pa.string()),
        "pi": pa.array([rng.choice([None, -1, 0, 7]) for _ in range(n)], pa.int32()),
        "pd": pa.array([rng.choice([None, datetime.date(2024, 2, 29)]) for _ in range(n)], pa.date32()),
        "pb": pa.array([rng.choice([None, True, False]) for _ in range(n)], pa.bool_()),
    })
    names = rng.sample(["ps", "pi", "pd", "pb"], rng.randrange(1, 5))
    groups = driver_write._partition_groups(table, names)
    seen = []
    for key, rows in groups.items():
        for i in rows.to_pylist():
            seen.append(i)
            expected = tuple(driver_write._partition_text(table.column(c)[i].as_py()) for c in names)
            assert key == expected
    assert sorted(seen) == list(range(n))
    # '' and NULL are one partition in the log (NULL)
    assert all(v != "" for key in groups for v in key)


def test_no_partition_columns_is_one_group_of_every_row_or_none():
    assert driver_write._partition_groups(pa.table({"v": [1, 2]}), []) == {(): None}
    assert driver_write._partition_groups(pa.table({"v": pa.array([], pa.int64())}), []) == {}


def test_rows_to_write_counts_updated_and_inserted_rows_only_when_nothing_is_rewritten():
    changed, deleted = {"a": 10, "b": 4}, {"a": 3}
    assert _rows_to_write(["a", "b"], [], changed, deleted, 0) == 11
    assert _rows_to_write(["a", "b"], [], changed, deleted, 50) == 61
    assert _rows_to_write(["a"], [], changed, {}, 0) == 10
    assert _rows_to_write([], [], {}, {}, 7) == 7  # an insert-only MERGE
    assert _rows_to_write(["a"], ["b"], changed, deleted, 0) is None  # a rewrite copies rows
    assert _rows_to_write(["a"], [], changed, None, 0) is None
    assert _rows_to_write(["a"], [], changed, deleted, None) is None  # inserts not bounded


def test_arrow_bytes_by_type():
    assert driver_write.arrow_bytes(T.LongType()) == 8
    assert driver_write.arrow_bytes(T.IntegerType()) == 4
    assert driver_write.arrow_bytes(T.StringType()) == 8 + driver_write._VARIABLE_BYTES
    nested = T.StructType([T.StructField("a", T.ArrayType(T.ShortType())), T.StructField("b", T.BooleanType())])
    assert driver_write.arrow_bytes(nested) == (4 + 4 * 2) + 1 + 1
