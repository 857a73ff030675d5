"""``s.read``: Delta's DataFrame-reader options give what the SQL they stand for gives."""

from __future__ import annotations

import pytest

from isolde import errors as E


@pytest.fixture
def feed(session):
    s = session
    s.execute("CREATE TABLE f (id INT, v STRING) TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    s.execute("INSERT INTO f VALUES (1, 'a'), (2, 'b')")  # version 1
    s.execute("UPDATE f SET v = 'B' WHERE id = 2")  # version 2
    s.execute("DELETE FROM f WHERE id = 1")  # version 3
    return s


def _rows(df):
    return sorted(tuple(r) for r in df.collect())


def test_load_table_and_time_travel(feed, table_path):
    s = feed
    path = table_path(s, "f")
    assert _rows(s.read.format("delta").load(path)) == [(2, "B")]
    assert _rows(s.read.table("f")) == [(2, "B")]
    assert _rows(s.read.format("delta").option("versionAsOf", 1).load(path)) == [(1, "a"), (2, "b")]
    assert _rows(s.read.option("versionAsOf", "2").table("f")) == [(1, "a"), (2, "B")]
    ts = s.execute("DESCRIBE HISTORY f").rows[-2].timestamp  # version 1's commit time
    by_ts = _rows(s.read.option("timestampAsOf", str(ts)).table("f"))
    assert by_ts == _rows(s.sql(f"SELECT * FROM f TIMESTAMP AS OF '{ts}'"))


def test_read_change_feed_options(feed, table_path):
    s = feed
    want = _rows(s.sql("SELECT * FROM table_changes('f', 2, 3)"))
    assert [r[2] for r in want] == ["delete", "update_postimage", "update_preimage"]
    got = s.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 2) \
        .option("endingVersion", 3).table("f")
    assert _rows(got) == want
    by_path = s.read.format("delta").options(readChangeFeed=True, startingVersion=2, endingVersion=3) \
        .load(table_path(s, "f"))
    assert _rows(by_path) == want
    everything = _rows(s.read.option("readChangeFeed", "true").option("startingVersion", 0).table("f"))
    assert everything == _rows(s.sql("SELECT * FROM table_changes('f', 0)"))


@pytest.mark.parametrize("build, error_class", [
    (lambda r: r.format("parquet"), "UNSUPPORTED_DATA_SOURCE"),
    (lambda r: r.option("versionAsof", 1).option("timestampAsOf", "2024-01-01").table("f"),
     "DELTA_CANNOT_SPECIFY_BOTH_VERSION_AND_TIMESTAMP"),
    (lambda r: r.option("readChangeFeed", "true").table("f"), "DELTA_NO_START_FOR_CDC_READ"),
    (lambda r: r.option("verionAsOf", 1), "DELTA_UNKNOWN_READ_OPTION"),
])
def test_reader_errors(feed, build, error_class):
    with pytest.raises(E.AnalysisError) as info:
        build(feed.read)
    assert info.value.error_class == error_class
