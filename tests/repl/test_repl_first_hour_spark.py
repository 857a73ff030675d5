"""Issue 21's REPL fixes on a real Session (the suite's one SparkSession), with the REPL's
Runner and meta-commands driven in-process: RESTORE's result row and restored files, `\\d`
of a partitioned table, `\\dt` with type / files / size, DESCRIBE HISTORY fitted to the
terminal, OPTIMIZE's result table."""

from __future__ import annotations

import io

import pytest

from isolde.repl.config import Settings
from isolde.repl.metacommands import parse_meta, run_meta
from isolde.repl.runner import Runner, SessionHolder

pytestmark = pytest.mark.spark


class Repl:
    """The meta-command context of repl.app.Repl, on a Runner writing to a buffer."""

    def __init__(self, session, interactive=True, **settings):
        settings.setdefault("timing", False)
        self.settings = Settings(**settings)
        self.buffer = io.StringIO()
        holder = SessionHolder({}, factory=lambda **kw: session)
        self.runner = Runner(holder, self.settings, self.buffer, self.buffer, interactive=interactive)

    def session(self):
        return self.runner.session()

    def echo(self, text=""):
        self.runner.echo(text)

    def run_text(self, text, source=None):
        return self.runner.run_text(text, source=source)

    def request_exit(self):
        pass

    def run(self, text):
        start = len(self.buffer.getvalue())
        if text.startswith("\\"):
            run_meta(parse_meta(text), self)
        else:
            assert self.runner.run_text(text), self.buffer.getvalue()[start:]
        return self.buffer.getvalue()[start:]


def test_restore_reports_restored_files(session):
    s = session
    s.execute("CREATE TABLE t (id INT, day STRING) PARTITIONED BY (day)")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    s.execute("INSERT INTO t VALUES (3, 'c')")
    s.execute("DELETE FROM t WHERE day = 'a'")
    r = s.execute("RESTORE TABLE t TO VERSION AS OF 1")
    assert r.operation == "RESTORE" and r.version == 4
    assert r.columns == ["table_size_after_restore", "num_of_files_after_restore", "num_removed_files",
                         "num_restored_files", "removed_files_size", "restored_files_size"]
    row = r.first()
    assert row.num_of_files_after_restore == 2 and row.num_restored_files == 1 and row.num_removed_files == 1
    assert row.table_size_after_restore > 0 and row.restored_files_size > 0 and row.removed_files_size > 0
    history = s.execute("DESCRIBE HISTORY t LIMIT 1").first().operationMetrics
    assert int(history["numRestoredFiles"]) == row.num_restored_files
    assert int(history["tableSizeAfterRestore"]) == row.table_size_after_restore
    assert sorted(s.execute("SELECT id FROM t").rows) == [(1,), (2,)]

    out = Repl(s).run("RESTORE TABLE t TO VERSION AS OF 3;")
    lines = out.splitlines()
    assert lines[1].startswith("| table_size_after_restore | num_of_files_after_restore | num_removed_files |")
    assert lines[-1] == "version 5 · RESTORE · 1 file removed, 1 file restored"


def test_backslash_d_lists_partition_columns_once(session):
    s = session
    s.execute("CREATE TABLE events (id BIGINT COMMENT 'the key', kind STRING, day DATE) PARTITIONED BY (day)")
    out = Repl(s).run("\\d events")
    table = [line for line in out.splitlines() if line.startswith("| ")]
    assert table == [
        "| col_name | data_type | comment | notes         |",
        "| id       | bigint    | the key |               |",
        "| kind     | string    |         |               |",
        "| day      | date      |         | partition key |",
    ]
    assert "Partitioned by: day" in out and "delta.enableDeletionVectors" in out
    clustered = Repl(s)
    s.execute("CREATE TABLE c (id INT, k STRING) CLUSTER BY (k)")
    assert "| k        | string    | clustering key |" in clustered.run("\\d c")


def test_backslash_dt_shows_type_files_and_size(session, tmp_path):
    s = session
    s.execute("CREATE TABLE a (id INT)")
    s.execute("INSERT INTO a VALUES (1), (2)")
    s.execute("INSERT INTO a VALUES (3)")
    s.execute(f"CREATE TABLE ext (id INT) LOCATION '{tmp_path / 'ext'}'")
    before = len(s.spark.sparkContext.statusTracker().getJobIdsForGroup(None) or [])
    out = Repl(s).run("\\dt")
    lines = out.splitlines()
    assert lines[1].startswith("| table | type     | provider | version | files | size ")
    a_row = next(line for line in lines if line.startswith("| a "))
    cells = [c.strip() for c in a_row.strip("|").split("|")]
    detail = s.execute("DESCRIBE DETAIL a").first()
    assert cells == ["a", "MANAGED", "delta", "2", str(detail.numFiles), f"{detail.sizeInBytes} bytes"]
    assert "| ext   | EXTERNAL | delta    |       0 |     0 | 0 bytes" in out
    assert lines[-1] == "(2 tables)"
    after = len(s.spark.sparkContext.statusTracker().getJobIdsForGroup(None) or [])
    assert after == before  # read from the log: no Spark job


def test_describe_history_fits_the_terminal(session, monkeypatch):
    s = session
    s.execute("CREATE TABLE h (id INT, name STRING)")
    s.execute("INSERT INTO h VALUES (1, 'a'), (2, 'b')")
    s.execute("UPDATE h SET name = 'z' WHERE id = 1")
    monkeypatch.setenv("COLUMNS", "100")
    out = Repl(s).run("\\history h")
    table = [line for line in out.splitlines() if line.startswith(("+", "|"))]
    assert table and all(len(line) <= 100 for line in table)
    assert "| version | timestamp" in table[1] and "operationParameters" in table[1]
    assert "\\x shows every column in full" in out and out.rstrip().endswith("(3 rows)")
    # \x: every column in full
    full = Repl(s, expanded=True).run("\\history h")
    assert "engineInfo          | isolde/" in full and "numUpdatedRows" in full
    # scripts and -e are never cut
    script = Repl(s, interactive=False).run("DESCRIBE HISTORY h;")
    assert "isolde/" in script and "shows every column" not in script


def test_optimize_result_table_besides_the_commit_line(session, monkeypatch):
    s = session
    s.execute("CREATE TABLE o (id INT)")
    for i in range(3):
        s.execute(f"INSERT INTO o VALUES ({i})")
    monkeypatch.setenv("COLUMNS", "100")
    out = Repl(s).run("OPTIMIZE o;")
    lines = out.splitlines()
    assert lines[1].startswith("| path ") and "| metrics " in lines[1]
    assert all(len(line) <= 100 for line in lines if line.startswith(("+", "|")))
    assert lines[-1] == "version 4 · OPTIMIZE · 3 files removed, 1 file added"
