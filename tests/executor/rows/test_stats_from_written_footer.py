"""Statistics of a file the driver has just written, from its writer's footer and the Arrow
table in memory (``file_stats_and_tags(written=...)``), equal those read back from the file."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isolde.executor.rows.driver_write import _write_parquet
from isolde.executor.log.stats import file_stats_and_tags

FLOATS = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=64))
TABLES = st.integers(0, 40).flatmap(lambda n: st.tuples(
    st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)), min_size=n, max_size=n),
    st.lists(FLOATS, min_size=n, max_size=n),
    st.lists(st.one_of(st.none(), st.floats(allow_nan=False, width=32)), min_size=n, max_size=n),
    st.lists(st.one_of(st.none(), st.text(max_size=40)), min_size=n, max_size=n),
    st.lists(st.one_of(st.none(), st.datetimes(min_value=dt.datetime(1900, 1, 1),
                                                 max_value=dt.datetime(2200, 1, 1))), min_size=n, max_size=n),
    st.lists(st.one_of(st.none(), st.decimals(min_value=-10**6, max_value=10**6, places=2)), min_size=n, max_size=n),
))


def _table(cols) -> pa.Table:
    ints, doubles, floats, texts, times, decimals = cols
    return pa.table({
        "i": pa.array(ints, pa.int64()),
        "d": pa.array(doubles, pa.float64()),
        "f": pa.array(floats, pa.float32()),
        "s": pa.array(texts, pa.string()),
        "t": pa.array([x.replace(tzinfo=dt.timezone.utc) if x else None for x in times], pa.timestamp("us", "UTC")),
        "m": pa.array([decimal.Decimal(x) if x is not None else None for x in decimals], pa.decimal128(10, 2)),
        "nested": pa.array([{"a": x} for x in ints], pa.struct([("a", pa.int64())])),
    })


@settings(max_examples=60, deadline=None)
@given(TABLES, st.sampled_from([frozenset(), frozenset({"d"})]))
def test_written_footer_gives_the_stats_read_back(tmp_path_factory, cols, hidden):
    table = _table(cols)
    path = str(tmp_path_factory.mktemp("w") / "part-0.parquet")
    footer = _write_parquet(table, path)
    assert file_stats_and_tags(path, hidden, written=(footer, table)) == file_stats_and_tags(path, hidden)


@pytest.mark.parametrize("values, tagged", [([1.0, 2.0], True), ([1.0, float("nan")], False), ([None, None], False)])
def test_nan_free_tag_from_the_table_in_memory(tmp_path, values, tagged):
    table = pa.table({"d": pa.array(values, pa.float64())})
    path = str(tmp_path / "part-0.parquet")
    num, stats, tags = file_stats_and_tags(path, written=(_write_parquet(table, path), table))
    assert num == 2
    assert (tags != {}) == tagged
    assert (num, stats, tags) == file_stats_and_tags(path)
