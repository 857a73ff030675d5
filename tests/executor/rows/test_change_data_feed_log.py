"""Change data feed logic that needs no Spark: the protocol a CDF table needs, table_changes'
range rules (versions, timestamps, versions without change data) and argument checks."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest
import sqlglot

from isolde.errors import AnalysisError
from isolde.executor.rows import cdf
from isolde.executor.session import table_functions
from isolde.executor.jobs.table_changes import _commits, resolve_range
from isolde.executor.log.actions import CommitInfo, Metadata, Protocol, serialize_commit
from isolde.executor.log.delta_log import DeltaLog
from isolde.executor.log.features import assert_writable, required_protocol

from tests.helpers.log_tables import DEFAULT_SCHEMA

from tests.helpers import ENGINES  # noqa: E402  (tests/data/engines)
CDF_ON = {"delta.enableChangeDataFeed": "true"}


@pytest.mark.parametrize("base, expected", [
    (Protocol(1, 2), Protocol(1, 7, None, ["appendOnly", "changeDataFeed", "invariants"])),
    (Protocol(1, 4), Protocol(1, 4)),  # legacy writer 4 already implies it
    (Protocol(3, 7, ["deletionVectors"], ["deletionVectors"]),
     Protocol(3, 7, ["deletionVectors"], ["changeDataFeed", "deletionVectors"])),
])
def test_enabling_the_feed_needs_the_change_data_feed_writer_feature(base, expected):
    metadata = Metadata(DEFAULT_SCHEMA, (), CDF_ON)
    needed = required_protocol(metadata, base)
    assert needed == expected
    assert_writable(needed, metadata, "t")  # and isolde writes it


def test_enabled_reads_the_property_case_insensitively():
    assert cdf.enabled(Metadata(DEFAULT_SCHEMA, (), {"DELTA.enableChangeDataFeed": "TRUE"}))
    assert not cdf.enabled(Metadata(DEFAULT_SCHEMA, (), {"delta.enableChangeDataFeed": "false"}))
    assert not cdf.enabled(Metadata(DEFAULT_SCHEMA))
    assert not cdf.enabled(None)


def test_change_data_files_have_the_table_columns_and_change_type():
    metadata = Metadata(DEFAULT_SCHEMA, (), CDF_ON)
    fields = json.loads(cdf.with_change_type(metadata).schema_string)["fields"]
    assert [f["name"] for f in fields] == [f["name"] for f in metadata.schema["fields"]] + ["_change_type"]
    assert fields[-1]["type"] == "string"
    assert json.loads(metadata.schema_string)["fields"][-1]["name"] != "_change_type"  # not changed in place


def _utc(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@pytest.mark.parametrize("start, end, expected", [
    (0, None, (0, 25)),
    (3, 100, (3, 25)),  # an end beyond the latest version reads to the latest
    (25, 25, (25, 25)),
    ("0", "4", (0, 4)),
    (26, None, "DELTA_CDC_START_VERSION_AFTER_LATEST"),
    (5, 4, "DELTA_INVALID_CDC_RANGE"),
    (-1, None, "DELTA_INVALID_CDC_RANGE"),
    (None, None, "DELTA_NO_START_FOR_CDC_READ"),
])
def test_version_ranges(start, end, expected):
    log = DeltaLog(os.path.join(ENGINES, "cdf-table-with-cdc-and-dvs"))
    if isinstance(expected, str):
        with pytest.raises(AnalysisError) as info:
            resolve_range(log, start, end)
        assert info.value.error_class == expected
    else:
        assert resolve_range(log, start, end) == expected


def test_timestamp_ranges_use_in_commit_timestamps():
    log = DeltaLog(os.path.join(ENGINES, "cdc_ict_table"))
    stamps = [log.commit_timestamp(v) for v in range(4)]  # (version 1's is years before version 0's)
    assert resolve_range(log, _utc(stamps[2]), None) == (2, 3)
    assert resolve_range(log, _utc(stamps[2] - 1), None) == (2, 3)  # the first version at or after
    assert resolve_range(log, _utc(stamps[2]), _utc(stamps[3] - 1)) == (2, 2)  # the last at or before
    assert resolve_range(log, _utc(stamps[2]), _utc(stamps[3] + 60_000)) == (2, 3)
    with pytest.raises(AnalysisError) as info:
        resolve_range(log, _utc(stamps[3] + 60_000), None)
    assert info.value.error_class == "DELTA_TIMESTAMP_GREATER_THAN_COMMIT"
    with pytest.raises(AnalysisError) as info:
        resolve_range(log, "not a time", None)
    assert info.value.error_class == "DELTA_TIMESTAMP_INVALID"


def test_a_range_with_a_version_that_recorded_no_change_data_is_refused(tmp_path):
    path = str(tmp_path / "t")
    os.makedirs(os.path.join(path, "_delta_log"))
    off = Metadata(DEFAULT_SCHEMA, (), {}, id="same")
    on = Metadata(DEFAULT_SCHEMA, (), CDF_ON, id="same")
    commits = [[CommitInfo(timestamp=1000, operation="CREATE TABLE"), Protocol(1, 4), off],
               [CommitInfo(timestamp=2000, operation="SET TBLPROPERTIES"), on],
               [CommitInfo(timestamp=3000, operation="SET TBLPROPERTIES"), off]]
    for v, actions in enumerate(commits):
        with open(os.path.join(path, "_delta_log", f"{v:020d}.json"), "wb") as fh:
            fh.write(serialize_commit(actions))
    log = DeltaLog(path)
    assert [v for v, _ in _commits(log, 1, 1)] == [1]
    for first, last, missing in [(0, 1, 0), (1, 2, 2)]:
        with pytest.raises(AnalysisError) as info:
            _commits(log, first, last)
        assert info.value.error_class == "DELTA_MISSING_CHANGE_DATA"
        assert f"range [{first} , {last}]" in str(info.value) and f"version [{missing}]" in str(info.value)


def _table_node(sql: str):
    return sqlglot.parse_one(sql, read="databricks")


@pytest.mark.parametrize("sql, error_class", [
    ("SELECT * FROM table_changes('t')", "WRONG_NUM_ARGS"),
    ("SELECT * FROM table_changes('t', 0, 1, 2)", "WRONG_NUM_ARGS"),
    ("SELECT * FROM table_changes('t', x)", "DELTA_TABLE_VALUED_FUNCTION_INVALID_ARG"),
    ("SELECT * FROM table_changes(1, 0)", "DELTA_TABLE_VALUED_FUNCTION_INVALID_ARG"),
])
def test_table_changes_arguments_are_checked_before_any_read(sql, error_class):
    with pytest.raises(AnalysisError) as info:
        table_functions.bind(None, _table_node(sql), lambda df: "v")
    assert info.value.error_class == error_class


def test_table_changes_binds_to_a_view_keeping_its_alias(monkeypatch):
    calls = []
    monkeypatch.setattr(table_functions, "change_rows", lambda ctx, *args: calls.append(args) or "rows")
    views = []
    tree = table_functions.bind(None, _table_node(
        "SELECT c.id FROM table_changes('db.t', 2, '2024-01-01 00:00:00') AS c JOIN table_changes('u', -0) u "
        "ON c.id = u.id"), lambda df: views.append(df) or f"v{len(views)}")
    assert calls == [("db.t", 2, "2024-01-01 00:00:00"), ("u", 0, None)]
    assert tree.sql(dialect="databricks") == "SELECT c.id FROM v1 AS c JOIN v2 AS u ON c.id = u.id"


def test_the_python_call_builds_the_same_query():
    assert table_functions.table_changes_sql("db.t", 1, 3) == "SELECT * FROM table_changes('db.t', 1, 3)"
    assert table_functions.table_changes_sql("it's", dt.datetime(2024, 1, 2, 3, 4, 5)) == \
        "SELECT * FROM table_changes('it\\'s', '2024-01-02 03:04:05')"
    tree = _table_node(table_functions.table_changes_sql("it's", "2024-01-02"))
    assert [a.this for a in tree.find(sqlglot.exp.Anonymous).expressions] == ["it's", "2024-01-02"]
