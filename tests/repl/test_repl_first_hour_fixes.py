"""Issue 21, the REPL's first hour: timing that owns up to waiting for Spark, RESTORE's result
row, `\\d` listing each column once, `\\dt` with type / files / size, DESCRIBE HISTORY fitted
to the terminal, and commit results with result rows shown as a small table. No Spark."""

from __future__ import annotations

import datetime as dt
import io
import threading
import time

import pytest

from isolde.executor.jobs.restore import RESULT_COLUMNS, RestoreResult
from isolde.executor.session.results import CommitResult, QueryResult
from isolde.repl import formatting
from isolde.repl.config import Settings, parse_config
from isolde.repl.formatting import (
    HISTORY_DROP_ORDER,
    HISTORY_FOLDABLE,
    fit_table,
    format_result,
    format_rows,
    metrics_summary,
    size_pretty,
    timing,
    truncate,
)
from isolde.repl.metacommands import Meta, run_meta
from isolde.repl.runner import Runner, SessionHolder
from isolde.repl.tables import column_listing, table_listing
from tests.helpers.repl_fakes import FakeSession

# --------------------------------------------------------------------------- timing


def test_timing_says_how_long_it_waited_for_spark():
    assert timing(0.8412) == "0.84 s"
    assert timing(12.3, 8.1) == "12.30 s (8.10 s waiting for Spark to start)"
    assert timing(0.5, 0.01) == "0.50 s"  # a blink is not worth a mention
    assert formatting.row_footer(2, 12.3, 8.1) == "(2 rows) · 12.30 s (8.10 s waiting for Spark to start)"
    commit = CommitResult(1, "WRITE", {"numOutputRows": 2})
    assert formatting.format_commit(commit, 3.0, 2.5) == \
        "version 1 · WRITE · 2 rows written · 3.00 s (2.50 s waiting for Spark to start)"
    assert format_result(None, "table", 1.0, waited=0.7) == ("", "OK · 1.00 s (0.70 s waiting for Spark to start)")


class SlowStart(FakeSession):
    """Spark takes ``delay`` seconds to start (wait_ready blocks)."""

    def __init__(self, delay):
        super().__init__()
        self.delay = delay

    def wait_ready(self, timeout=None):
        time.sleep(self.delay)
        return True


@pytest.mark.parametrize("interactive", [False, True])
def test_first_statement_time_includes_the_wait_for_spark(interactive):
    session = SlowStart(0.6)
    holder = SessionHolder({}, factory=lambda **kw: session)
    out = io.StringIO()
    runner = Runner(holder, Settings(timing=True), out, out, interactive=interactive)
    holder.start_background()
    assert runner.run_text("CREATE TABLE t (a INT); INSERT INTO t VALUES (1);")
    first, second = [line for line in out.getvalue().splitlines() if line.startswith("version")]
    took = float(first.split(" · ")[-1].split(" s")[0])
    waited = float(first.split("(")[1].split(" s")[0])
    assert first.endswith(" waiting for Spark to start)") and 0.3 < waited <= took
    assert "waiting" not in second  # Spark is up: the second statement did not wait


def test_no_wait_mentioned_when_spark_was_already_up():
    session = FakeSession()
    holder = SessionHolder({}, factory=lambda **kw: session)
    holder.get()
    out = io.StringIO()
    Runner(holder, Settings(timing=True), out, out).run_text("SELECT 1;")
    assert "(1 row) · " in out.getvalue() and "waiting" not in out.getvalue()


# --------------------------------------------------------------------------- commit result rows


def restore_result():
    metrics = {"tableSizeAfterRestore": 2048, "numOfFilesAfterRestore": 2, "numRemovedFiles": 3,
               "numRestoredFiles": 1, "removedFilesSize": 3000, "restoredFilesSize": 1024}
    return RestoreResult(version=5, operation="RESTORE", metrics=metrics, table="t")


def test_restore_answers_with_deltas_result_row():
    r = restore_result()
    assert r.columns == ["table_size_after_restore", "num_of_files_after_restore", "num_removed_files",
                         "num_restored_files", "removed_files_size", "restored_files_size"]
    assert [c for c, _ in RESULT_COLUMNS] == r.columns
    row = r.first()
    assert tuple(row) == (2048, 2, 3, 1, 3000, 1024) and row.num_restored_files == 1
    assert r.collect() == r.rows and formatting.is_commit(r)


def test_restore_commit_line_names_restored_files():
    assert metrics_summary("RESTORE", restore_result().metrics) == "3 files removed, 1 file restored"


def test_commit_with_result_rows_prints_a_table_and_the_commit_line():
    body, status = format_result(restore_result(), "table", 0.5)
    assert status == "version 5 · RESTORE · 3 files removed, 1 file restored · 0.50 s"
    assert body == format_rows(restore_result().columns, [(2048, 2, 3, 1, 3000, 1024)], "table")
    # vertical (\x) shows the same row as a record
    body, _ = format_result(restore_result(), "vertical", None)
    assert body.startswith("-[ RECORD 1 ]") and "num_restored_files         | 1" in body
    # csv / json stay machine-readable: only query rows go to stdout
    assert format_result(restore_result(), "csv", None)[0] == ""
    assert format_result(restore_result(), "json", None)[0] == ""


class DmlResult(CommitResult):
    """What a DML commit with Databricks' result row looks like (another change adds it)."""

    columns = ["num_affected_rows", "num_updated_rows", "num_deleted_rows", "num_inserted_rows"]
    rows = [(4, 3, 0, 1)]


def test_any_commit_exposing_columns_and_rows_gets_its_table():
    r = DmlResult(7, "MERGE", {"numTargetRowsUpdated": 3, "numTargetRowsInserted": 1})
    body, status = format_result(r, "table", None)
    assert body.splitlines() == [
        "+-------------------+------------------+------------------+-------------------+",
        "| num_affected_rows | num_updated_rows | num_deleted_rows | num_inserted_rows |",
        "+-------------------+------------------+------------------+-------------------+",
        "|                 4 |                3 |                0 |                 1 |",
        "+-------------------+------------------+------------------+-------------------+",
    ]
    assert status == "version 7 · MERGE · 3 updated, 1 inserted"
    # a plain CommitResult: just the line, as before
    assert format_result(CommitResult(7, "DELETE", {"numDeletedRows": 2}), "table", None) == \
        ("", "version 7 · DELETE · 2 deleted")


def test_a_wide_commit_table_is_fitted_to_the_terminal():
    class Optimize(CommitResult):
        columns = ["path", "metrics"]
        rows = [("file:/warehouse/default/events", {"numFilesAdded": 1, "numFilesRemoved": 8,
                                                    "filesAdded": {"min": 1, "max": 1, "totalSize": 1234}})]

    r = Optimize(3, "OPTIMIZE", {"numRemovedFiles": 8, "numAddedFiles": 1})
    body, status = format_result(r, "table", None, width=80)
    lines = body.splitlines()
    assert max(len(line) for line in lines[:-1]) == 80
    assert "| file:/warehouse/default/events | {" in body  # the widest column is cut first
    assert lines[-1] == "(cut: metrics; \\x shows every column in full)"
    assert status == "version 3 · OPTIMIZE · 8 files removed, 1 file added"
    full, _ = format_result(r, "table", None)  # no width (scripts, -e): every character
    assert '"totalSize": 1234}}' in full


def test_a_result_row_that_fails_does_not_hide_the_commit():
    class Broken(CommitResult):
        columns = ["x"]

        @property
        def rows(self):
            raise RuntimeError("no pyspark")

    assert format_result(Broken(1, "UPDATE", {"numUpdatedRows": 1}), "table", None) == \
        ("", "version 1 · UPDATE · 1 updated")


# --------------------------------------------------------------------------- DESCRIBE HISTORY

HISTORY = ["version", "timestamp", "userName", "operation", "operationParameters", "readVersion",
           "isolationLevel", "isBlindAppend", "operationMetrics", "engineInfo", "userMetadata"]
ROWS = [
    (2, dt.datetime(2024, 1, 1, 12, 0, 0, 123000), None, "MERGE",
     {"predicate": '["(t.id = s.id)"]', "matchedPredicates": '[{"actionType":"update"}]'}, 1,
     "WriteSerializable", False, {"numTargetRowsUpdated": "3", "numTargetRowsInserted": "1"}, "isolde/0.1.0", None),
    (1, dt.datetime(2024, 1, 1, 11, 0, 0), None, "WRITE", {"mode": "Append"}, 0, "WriteSerializable", True,
     {"numFiles": "1", "numOutputRows": "2"}, "isolde/0.1.0", None),
]


@pytest.mark.parametrize("width", [80, 110, 140])
def test_history_fits_the_terminal(width):
    body, status = format_result(QueryResult(HISTORY, ROWS), "table", None, width=width)
    lines = body.splitlines()
    assert all(len(line) <= width for line in lines)  # the note too: no pager needed
    table = [line for line in lines if line.startswith(("+", "|"))]
    note = " ".join(line for line in lines if not line.startswith(("+", "|")))
    header = table[1]
    for kept in ("version", "timestamp", "operation", "operationParameters"):
        assert f" {kept} " in header  # the key columns stay, timestamps whole
    assert "2024-01-01 12:00:00.123000" in body
    assert note.startswith("(") and note.endswith("; \\x shows every column in full)")
    assert "empty: userName, userMetadata" in note
    assert status == "(2 rows)"


def test_history_at_110_columns_exactly():
    body, _ = format_result(QueryResult(HISTORY, ROWS), "table", None, width=110)
    assert body.splitlines() == [
        "+---------+----------------------------+-----------+---------------------+-------------+---------------------+",
        "| version | timestamp                  | operation | operationParameters | readVersion | operationMetrics    |",
        "+---------+----------------------------+-----------+---------------------+-------------+---------------------+",
        '|       2 | 2024-01-01 12:00:00.123000 | MERGE     | {"predicate": "[\\"… |           1 | {"numTargetRowsUpd… |',
        '|       1 | 2024-01-01 11:00:00        | WRITE     | {"mode": "Append"}  |           0 | {"numFiles": "1", … |',
        "+---------+----------------------------+-----------+---------------------+-------------+---------------------+",
        "(not shown: engineInfo, isBlindAppend, isolationLevel; cut: operationParameters, operationMetrics; empty:",
        "userName, userMetadata; \\x shows every column in full)",
    ]


def test_history_in_full_when_it_fits_vertical_or_no_width():
    wide, _ = format_result(QueryResult(HISTORY, ROWS), "table", None, width=1000)
    assert wide == format_rows(HISTORY, ROWS, "table")  # fits: untouched, empty columns too
    assert format_result(QueryResult(HISTORY, ROWS), "table", None)[0] == format_rows(HISTORY, ROWS, "table")
    vertical, _ = format_result(QueryResult(HISTORY, ROWS), "vertical", None, width=60)
    assert '"matchedPredicates": "[{\\"actionType\\":\\"update\\"}]"' in vertical
    assert "engineInfo          | isolde/0.1.0" in vertical


def test_other_query_results_are_never_cut():
    rows = [("x" * 200,)]
    assert format_result(QueryResult(["a"], rows), "table", None, width=40)[0] == format_rows(["a"], rows, "table")


def test_fit_table_rules():
    assert truncate("abcdef", 4) == "abc…" and truncate("abc", 4) == "abc"
    assert truncate("日本語テキスト", 6) == "日本…"
    cols, rows, note = fit_table(["n", "text"], [(1, "y" * 50)], 30)
    assert cols == ["n", "text"] and rows == [(1, "y" * 21 + "…")] and note == \
        "(cut: text; \\x shows every column in full)"
    assert len(format_rows(cols, rows).splitlines()[0]) == 30
    # columns that may not be cut are left out (drop order first), never cut
    cols, rows, note = fit_table(["a", "b", "c"], [("a" * 20, "b" * 20, "c" * 20)], 50, drop_order=("b",),
                                 foldable=())
    assert cols == ["a", "c"] and rows == [("a" * 20, "c" * 20)] and note.startswith("(not shown: b;")


def test_fit_width_setting_and_vertical_show_everything():
    assert Settings().fit_width is True
    settings = parse_config("[main]\nfit_width = false\n")
    assert settings.fit_width is False and not settings.warnings
    assert "fit_width = true" in __import__("isolde.repl.config", fromlist=["x"]).DEFAULT_CONFIG
    holder = SessionHolder({}, factory=FakeSession)
    assert Runner(holder, Settings(), interactive=False).width() is None  # scripts: never cut
    assert Runner(holder, Settings(fit_width=False), interactive=True).width() is None
    assert Runner(holder, Settings(), interactive=True).width() > 0


# --------------------------------------------------------------------------- \d and \dt


DESCRIBE = [
    ("id", "bigint", None),
    ("kind", "string", "what happened"),
    ("day", "date", None),
    ("# Partition Information", "", ""),
    ("# col_name", "data_type", "comment"),
    ("day", "date", None),
    ("# Identity Columns", "", ""),
    ("# col_name", "definition", "high_water_mark"),
    ("id", "GENERATED ALWAYS AS IDENTITY (START WITH 1 INCREMENT BY 1)", "3"),
    ("", "", ""),
    ("# Detailed Table Information", "", ""),
    ("Name", "default.events", ""),
]


def test_column_listing_lists_each_column_once_and_marks_keys():
    header, rows = column_listing(["col_name", "data_type", "comment"], DESCRIBE)
    assert header == ["col_name", "data_type", "comment", "notes"]
    assert rows == [
        ("id", "bigint", "", "GENERATED ALWAYS AS IDENTITY (START WITH 1 INCREMENT BY 1)"),
        ("kind", "string", "what happened", ""),
        ("day", "date", "", "partition key"),
    ]


def test_column_listing_of_a_plain_and_a_clustered_table():
    plain = [("a", "int", None), ("b", "string", None)]
    assert column_listing(["col_name", "data_type", "comment"], plain) == (
        ["col_name", "data_type"], [("a", "int"), ("b", "string")])
    clustered = plain + [("# Clustering Information", "", ""), ("# col_name", "data_type", "comment"),
                         ("b", "string", None)]
    assert column_listing(["col_name", "data_type", "comment"], clustered) == (
        ["col_name", "data_type", "notes"], [("a", "int", ""), ("b", "string", "clustering key")])
    # a column whose name starts with '# ' is still a column
    odd = [("# n", "int", None), ("a", "int", None)]
    assert column_listing(["col_name", "data_type", "comment"], odd)[1] == [("# n", "int"), ("a", "int")]


class DescribingSession(FakeSession):
    def execute(self, sql):
        text = sql.strip().rstrip(";")
        if text.upper().startswith("DESCRIBE TABLE"):
            return QueryResult(["col_name", "data_type", "comment"], DESCRIBE)
        if text.upper().startswith("DESCRIBE DETAIL"):
            return QueryResult(["format", "partitionColumns", "numFiles", "sizeInBytes", "properties"],
                               [("delta", ["day"], 3, 20480, {"delta.enableDeletionVectors": "true"})])
        return super().execute(sql)


class Ctx:
    def __init__(self, session):
        self.settings = Settings()
        self._session = session
        self.out = []

    def session(self):
        return self._session

    def echo(self, text=""):
        self.out.append(text)


def test_backslash_d_shows_each_column_once():
    ctx = Ctx(DescribingSession())
    run_meta(Meta("d", ("events",)), ctx)
    text = "\n".join(ctx.out)
    assert text.count("| day ") == 1 and "| partition key" in text
    assert "Partitioned by: day" in text and "Size: 20 kB (20480 bytes)" in text and "Files: 3" in text
    assert "delta.enableDeletionVectors = true" in text


def test_size_pretty_like_pg_size_pretty():
    assert [size_pretty(n) for n in (0, 8191, 10239, 10240, 1536000, 10 * 1024 ** 3, 5 * 1024 ** 5)] == \
        ["0 bytes", "8191 bytes", "10239 bytes", "10 kB", "1500 kB", "10 GB", "5120 TB"]
    assert size_pretty(None) == ""


def test_dt_without_a_catalog_lists_names_only():
    session = FakeSession()
    session.execute("CREATE TABLE orders (id INT)")
    assert table_listing(session, ["orders"]) == (["table"], [("orders",)], [])


class FakeSnapshot:
    def __init__(self, version, sizes):
        self.version = version
        self.all_files = [type("F", (), {"size": s})() for s in sizes]


class FakeLog:
    def __init__(self, snap=None, error=None):
        self.snap, self.error = snap, error

    def update(self):
        if self.error:
            raise self.error
        return self.snap


class FakeCatalog:
    def __init__(self, tables):
        self.tables = tables  # name -> (external, log)
        self.asked = []

    def resolve(self, ref, current_database):
        self.asked.append((ref.parts, current_database))
        external, log = self.tables[ref.parts[-1]]
        return type("H", (), {"external": external, "by_path": False, "log": log})()


def test_dt_lists_type_version_files_and_size_from_the_log():
    session = FakeSession()
    session.current_database = "sales"
    session.catalog = FakeCatalog({
        "orders": (False, FakeLog(FakeSnapshot(7, [4096, 8192]))),
        "raw": (True, FakeLog(FakeSnapshot(0, []))),
        "broken": (False, FakeLog(error=ValueError("checkpoint is corrupt\nmore"))),
    })
    columns, rows, problems = table_listing(session, ["broken", "orders", "raw"])
    assert columns == ["table", "type", "provider", "version", "files", "size"]
    assert rows == [("broken", "MANAGED", "delta", None, None, None),
                    ("orders", "MANAGED", "delta", 7, 2, "12 kB"),
                    ("raw", "EXTERNAL", "delta", 0, 0, "0 bytes")]
    assert problems == ["broken: checkpoint is corrupt"]
    assert session.catalog.asked[0] == (("sales", "broken"), "sales")


def test_backslash_dt_prints_the_listing():
    session = FakeSession()
    session.tables_ = {"orders": (["id"], [])}
    session.catalog = FakeCatalog({"orders": (False, FakeLog(FakeSnapshot(2, [100])))})
    ctx = Ctx(session)
    run_meta(Meta("dt"), ctx)
    assert ctx.out[0].splitlines()[1:4] == [
        "| table  | type    | provider | version | files | size      |",
        "+--------+---------+----------+---------+-------+-----------+",
        "| orders | MANAGED | delta    |       2 |     1 | 100 bytes |",
    ]
    assert ctx.out[0].endswith("(1 table)")


def test_history_through_the_runner_is_fitted_in_the_repl(monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")

    class HistorySession(FakeSession):
        def execute(self, sql):
            if "HISTORY" in sql.upper():
                return QueryResult(HISTORY, ROWS)
            return super().execute(sql)

    session = HistorySession()
    holder = SessionHolder({}, factory=lambda **kw: session)
    out = io.StringIO()
    Runner(holder, Settings(timing=False), out, out, interactive=True).run_text("DESCRIBE HISTORY t;")
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 90 for line in lines if line.startswith(("+", "|")))
    assert any("\\x shows every column in full" in line for line in lines) and lines[-1] == "(2 rows)"
    out = io.StringIO()
    Runner(holder, Settings(timing=False), out, out, interactive=False).run_text("DESCRIBE HISTORY t;")
    assert "isolde/0.1.0" in out.getvalue() and "\\x shows" not in out.getvalue()


def test_session_wait_is_seen_by_a_thread_started_before():
    # the holder's background start and a statement racing it: the wait is measured, not lost
    session = SlowStart(0.3)
    holder = SessionHolder({}, factory=lambda **kw: session)
    out = io.StringIO()
    runner = Runner(holder, Settings(timing=True), out, out)
    t = threading.Thread(target=holder.start_background)
    t.start()
    runner.run_text("SELECT 1;")
    t.join()
    assert "waiting for Spark to start)" in out.getvalue()


def test_a_syntax_error_does_not_wait_for_spark():
    session = SlowStart(5.0)
    holder = SessionHolder({}, factory=lambda **kw: session)
    out = io.StringIO()
    runner = Runner(holder, Settings(timing=True), out, out, interactive=False)
    holder.start_background()
    began = time.perf_counter()
    assert not runner.run_text("SELEC 1;")
    assert time.perf_counter() - began < 2.0  # reported before Spark (5 s here) is up
    assert "did you mean SELECT?" in out.getvalue() and "^^^^^" in out.getvalue()
