"""The real REPL (prompt-toolkit Application) driven in-process through a pipe input, on a
fake Session: multi-line input, Enter rules, paste, completion, meta-commands, errors,
confirmation, Ctrl-C. No Spark."""

import io
import os
import signal
import threading
import time

from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from isolde.repl.app import Repl
from isolde.repl.config import Settings
from isolde.repl.runner import SessionHolder
from tests.helpers.repl_fakes import FakeSession

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"


def catalog_has(table):
    return lambda repl: table in repl.catalog.snapshot.tables


def catalog_idle(repl):
    time.sleep(0.3)  # let the asynchronous completion land
    return True


def run_repl(keys, session=None, **settings):
    session = session or FakeSession()
    holder = SessionHolder({}, factory=lambda **kw: session)
    out = io.StringIO()
    settings.setdefault("timing", False)
    with create_pipe_input() as inp:
        repl = Repl(holder, Settings(**settings), input=inp, output=DummyOutput(), stdout=out,
                    history=InMemoryHistory(), color=False)

        def typist():  # like a person: one chunk at a time (completion runs asynchronously)
            for chunk in list(keys) + ["\x04"]:  # Ctrl-D on the empty line at the end
                if callable(chunk):  # wait for a condition (e.g. the catalog to be loaded)
                    deadline = time.time() + 20
                    while not chunk(repl) and time.time() < deadline:
                        time.sleep(0.02)
                    continue
                time.sleep(0.05)
                inp.send_text(chunk)

        thread = threading.Thread(target=typist, daemon=True)
        thread.start()
        rc = repl.run()
        thread.join(5)
    return rc, out.getvalue(), session, repl


def test_multiline_create_insert_select_error_and_dt():
    rc, out, session, _ = run_repl([
        "CREATE TABLE orders\r",          # Enter inside a statement: a newline, not a submit
        "  (id INT, name STRING);\r",
        "INSERT INTO orders VALUES (1, 'a;b'),\r",
        "(2, 'c');\r",
        "SELECT * FROM orders;\r",
        "SELEC 1;\r",
        "\\dt\r",
    ])
    assert rc == 0
    assert session.executed[:3] == ["CREATE TABLE orders\n  (id INT, name STRING)",
                                    "INSERT INTO orders VALUES (1, 'a;b'),\n(2, 'c')", "SELECT * FROM orders"]
    assert "version 0 · CREATE TABLE" in out
    assert "version 1 · WRITE · 2 rows written" in out
    assert "| id | name |" in out and "|  1 | a;b  |" in out and "(2 rows)" in out
    assert "Syntax error at line 1, column 1" in out and "1 | SELEC 1\n    ^^^^^" in out
    assert "| orders |" in out and "(1 table)" in out
    assert out.rstrip().endswith("Bye.")


def test_enter_keeps_editing_inside_strings_and_comments():
    rc, out, session, _ = run_repl([
        "SELECT 'x;\r",          # ';' inside a string: Enter adds a newline
        "y' -- ; still a comment\r",
        "/* ; */ ;\r",
    ])
    # one statement, submitted by the third Enter (the splitter may drop trailing comments)
    assert len(session.executed) == 1 and session.executed[0].startswith("SELECT 'x;\ny'")


def test_escape_enter_inserts_a_newline_in_a_complete_statement():
    rc, out, session, _ = run_repl(["SELECT 1;\x1b\r", "\r"])
    # Esc-Enter after the ';' only added a newline; the second Enter submitted
    assert session.executed == ["SELECT 1"]


def test_paste_runs_statement_by_statement():
    text = "CREATE TABLE t (a INT);\nINSERT INTO t VALUES (1);\nSELECT * FROM t;"
    rc, out, session, _ = run_repl([PASTE_START + text + PASTE_END, "\r"])
    assert session.executed == ["CREATE TABLE t (a INT)", "INSERT INTO t VALUES (1)", "SELECT * FROM t"]
    assert out.index("version 0") < out.index("version 1") < out.index("(1 row)")


def test_tab_completes_a_table_name():
    session = FakeSession()
    session.execute("CREATE TABLE orders (id INT)")
    session.executed.clear()
    holder_keys = [catalog_has("orders"), "SELECT * FROM ord", "\t", catalog_idle, ";\r"]
    rc, out, session, repl = run_repl(holder_keys, session=session)
    assert session.executed == ["SELECT * FROM orders"]


def test_meta_commands():
    session = FakeSession()
    session.execute("CREATE TABLE t (a INT)")
    session.execute("INSERT INTO t VALUES (1), (2)")
    rc, out, _, repl = run_repl(["\\format csv\r", "SELECT * FROM t;\r", "\\x\r", "SELECT * FROM t;\r",
                                 "\\timing\r", "\\?\r", "\\nope\r", "\\d\r"], session=session)
    assert "Output format is csv." in out and "a\n1\n2\n" in out
    assert "-[ RECORD 2 ]" in out
    assert "Timing is on." in out
    assert "Meta-commands:" in out
    assert "unknown meta-command \\nope" in out
    assert "usage: \\d TABLE" in out
    assert repl.settings.format == "csv" and repl.settings.expanded and repl.settings.timing


def test_i_runs_a_file(tmp_path):
    script = tmp_path / "load.sql"
    script.write_text("CREATE TABLE t (a INT);\n\n-- comment\nINSERT INTO t VALUES (7);\nSELECT 1;\n")
    rc, out, session, _ = run_repl([f"\\i {script}\r"])
    assert session.executed == ["CREATE TABLE t (a INT)", "INSERT INTO t VALUES (7)", "SELECT 1"]


def test_i_with_a_syntax_error_runs_nothing_of_the_file(tmp_path):
    script = tmp_path / "load.sql"
    script.write_text("CREATE TABLE t (a INT);\n\n-- comment\nINSERT INTO t VALUES (7);\nSELEC;\nSELECT 1;\n")
    rc, out, session, _ = run_repl([f"\\i {script}\r"])
    assert session.executed == []
    assert f"{script}: Syntax error at line 5, column 1" in out and "5 | SELEC;\n    ^^^^^" in out
    assert "Nothing was run: a syntax error in 4 statements." in out


def test_loop_survives_bugs_and_conflicts():
    rc, out, session, _ = run_repl(["boom;\r", "conflict;\r", "SELECT 1;\r"])
    assert "INTERNAL ERROR (a bug in isolde): RuntimeError: a bug" in out
    assert "Winning commit: MERGE at version 12." in out and "What to do:" in out
    assert "| 1 |" in out and rc == 0


def test_destructive_statement_asks_first():
    session = FakeSession()
    session.execute("CREATE TABLE t (a INT)")
    session.execute("INSERT INTO t VALUES (1), (2)")
    rc, out, session, _ = run_repl(["DELETE FROM t;\r", "n\r", "DELETE FROM t;\r", "y\r"], session=session)
    assert out.count("Not run.") == 1
    assert "version 2 · DELETE · 2 deleted" in out
    assert session.executed.count("DELETE FROM t") == 1


def test_confirmation_can_be_turned_off():
    session = FakeSession()
    session.execute("CREATE TABLE t (a INT)")
    rc, out, session, _ = run_repl(["DELETE FROM t;\r"], session=session, confirm_destructive=False)
    assert "version 1 · DELETE · 0 rows affected" in out


def test_ctrl_c_clears_the_input():
    rc, out, session, _ = run_repl(["SELECT 'half\x03", "SELECT 2;\r"])
    assert session.executed == ["SELECT 2"]


def test_ctrl_c_cancels_a_running_statement():
    session = FakeSession()

    def interrupt_once_running():  # Ctrl-C while the statement runs, however slow the machine
        if session.sleeping.wait(30):
            os.kill(os.getpid(), signal.SIGINT)

    interrupter = threading.Thread(target=interrupt_once_running, daemon=True)
    interrupter.start()
    rc, out, session, _ = run_repl(["SELECT sleep(20);\r", "SELECT 3;\r"], session=session)
    interrupter.join(1)
    assert session.sleeping.is_set() and session.cancelled.is_set()
    assert "Cancelling" in out and "Cancelled." in out
    assert "| 3 |" in out  # and the REPL went on


def test_spark_start_failure_is_reported_per_statement():
    def broken(**kwargs):
        raise RuntimeError("JAVA_HOME is not set")

    holder = SessionHolder({}, factory=broken)
    out = io.StringIO()
    with create_pipe_input() as inp:
        inp.send_text("SELECT 1;\r\\?\r\x04")
        repl = Repl(holder, Settings(), input=inp, output=DummyOutput(), stdout=out, history=InMemoryHistory(),
                    color=False)
        assert repl.run() == 0
    assert "JAVA_HOME is not set" in out.getvalue() and "Meta-commands:" in out.getvalue()


def test_ctrl_r_searches_the_history():
    session = FakeSession()
    rc, out, session, _ = run_repl(["SELECT 41;\r", "SELECT 2;\r", "\x12", "41", "\r", "\r"], session=session)
    assert session.executed == ["SELECT 41", "SELECT 2", "SELECT 41"]


def test_catalog_refreshes_after_ddl():
    rc, out, session, repl = run_repl(["CREATE TABLE fresh (a INT, b INT);\r", catalog_has("fresh"),
                                       "SELECT * FROM fre", "\t", catalog_idle, ";\r"])
    assert session.executed == ["CREATE TABLE fresh (a INT, b INT)", "SELECT * FROM fresh"]
    assert repl.catalog.snapshot.tables == {"fresh": ["a", "b"]}


def test_vi_key_bindings():
    rc, out, session, _ = run_repl(["SELECT 7;", "\x1b", "0", "w", "r8", "\r"], key_bindings="vi")
    assert session.executed == ["SELECT 8"]


class _FakeDF:
    def __init__(self, rows):
        self._rows = rows
        self.columns = ["n"]
        self.limits = []

    def limit(self, n):
        self.limits.append(n)
        return _FakeDF(self._rows[:n])

    def collect(self):
        return list(self._rows)


def test_long_results_are_cut_to_max_rows():
    from isolde.executor.session.results import QueryResult

    session = FakeSession()
    df = _FakeDF([(i,) for i in range(50)])
    session.execute = lambda sql: QueryResult(df=df)
    rc, out, _, _ = run_repl(["SELECT n FROM big;\r"], session=session, max_rows=10)
    assert df.limits == [11]
    assert "| 9 |" in out and "| 10 |" not in out
    assert "(only the first 10 rows are shown" in out and "(10 rows)" in out


def test_errors_are_coloured_on_a_terminal():
    session = FakeSession()
    holder = SessionHolder({}, factory=lambda **kw: session)
    out = io.StringIO()
    with create_pipe_input() as inp:
        inp.send_text("SELEC 1;\r\x04")
        repl = Repl(holder, Settings(timing=False), input=inp, output=DummyOutput(), stdout=out,
                    history=InMemoryHistory(), color=True)
        repl.run()
    assert "\x1b[1;31mSyntax error at line 1, column 1" in out.getvalue()
    assert "\x1b[31m    ^^^^^\x1b[0m" in out.getvalue()


def test_a_bug_in_the_editor_does_not_end_the_repl(monkeypatch):
    from isolde.repl import completion

    def broken(*args, **kwargs):
        raise RuntimeError("completer bug")

    monkeypatch.setattr(completion, "suggest", broken)
    rc, out, session, _ = run_repl(["SELECT 1 FROM x", "\t", ";\r", "SELECT 2;\r"])
    assert session.executed == ["SELECT 1 FROM x", "SELECT 2"]
