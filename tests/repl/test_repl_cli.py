"""The command line in-process on a fake Session: -e, -f, stdin, formats, exit codes.
(Real-Spark runs of the same paths are in test_repl_spark.py.)"""

import io
import json
import subprocess
import sys
import time

import pytest

import isolde
from isolde.repl import cli
from tests.helpers.repl_fakes import FakeSession

SCRIPT = """\
-- line 1: a comment
CREATE TABLE t (id INT, name STRING);

INSERT INTO t VALUES (1, 'a'),
                     (2, 'b');
SELECT * FROM t;
SELECT * FROM tt;
SELECT 1;
"""


@pytest.fixture
def fake(monkeypatch):
    sessions = []

    def connect(**kwargs):
        s = FakeSession(**kwargs)
        sessions.append(s)
        return s

    monkeypatch.setattr(isolde, "connect", connect)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    return sessions


def test_e_runs_statements(fake, capsys):
    rc = cli.main(["--warehouse", "/tmp/wh", "-e", "CREATE TABLE t (a INT); INSERT INTO t VALUES (1); SELECT * FROM t"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    assert out == ("version 0 · CREATE TABLE\nversion 1 · WRITE · 1 row written\n"
                   "+---+\n| a |\n+---+\n| 1 |\n+---+\n(1 row)\n")
    assert fake[0].kwargs == {"warehouse": "/tmp/wh", "master": None, "conf": None}


def test_f_reports_the_script_line_and_exit_1(fake, capsys, tmp_path):
    script = tmp_path / "etl.sql"
    script.write_text(SCRIPT)
    rc = cli.main(["-f", str(script)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert f"{script}, line 7: ERROR [TABLE_OR_VIEW_NOT_FOUND]" in err and "Did you mean `t`?" in err
    assert "(2 rows)" in out and "SELECT 1" not in " ".join(fake[0].executed)  # stopped


def test_f_syntax_error_line_and_caret(fake, capsys, tmp_path):
    script = tmp_path / "bad.sql"
    script.write_text("SELECT 1;\n\n\n\n\n\nSELEC 2;\n")
    assert cli.main(["-f", str(script)]) == 1
    err = capsys.readouterr().err
    assert f"{script}: Syntax error at line 7, column 1" in err and "7 | SELEC 2;\n    ^^^^^" in err


@pytest.mark.parametrize("on_error", ["stop", "continue"])
def test_f_with_syntax_errors_runs_nothing_and_lists_every_error(fake, capsys, tmp_path, on_error):
    """A typo in the third statement must not leave the first two committed (issue 55): the
    whole script is parsed first, every syntax error is shown by its line, nothing runs."""
    script = tmp_path / "etl.sql"
    script.write_text("CREATE TABLE t (a INT);\nINSERT INTO t VALUES (1);\nUPDATE t SET WHERE a = 1;\n"
                      "SELECT 1;\nSELEC 2;\n")
    assert cli.main(["-f", str(script), "--on-error", on_error]) == 1
    out, err = capsys.readouterr()
    assert all(not s.executed for s in fake)
    assert f"{script}: Syntax error at line 3, column 14" in err and "3 | UPDATE t SET WHERE a = 1;" in err
    assert f"{script}: Syntax error at line 5, column 1" in err and "5 | SELEC 2;" in err
    assert "Nothing was run: 2 syntax errors in 5 statements." in err


def test_on_error_continue(fake, capsys, tmp_path):
    script = tmp_path / "etl.sql"
    script.write_text(SCRIPT)
    rc = cli.main(["-f", str(script), "--on-error", "continue"])
    out, err = capsys.readouterr()
    assert rc == 1 and fake[0].executed[-1] == "SELECT 1" and "| 1 |" in out


def test_sources_run_in_order(fake, capsys, tmp_path):
    a = tmp_path / "a.sql"
    a.write_text("CREATE TABLE t (a INT);")
    b = tmp_path / "b.sql"
    b.write_text("SELECT * FROM t;")
    assert cli.main(["-f", str(a), "-e", "INSERT INTO t VALUES (5)", "-f", str(b)]) == 0
    assert fake[0].executed == ["CREATE TABLE t (a INT)", "INSERT INTO t VALUES (5)", "SELECT * FROM t"]


def test_stdin_when_not_a_terminal(fake, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("CREATE TABLE t (a INT);\nINSERT INTO t VALUES (3);\n"
                                                  "SELECT * FROM t;\n"))
    assert cli.main(["--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert out == "a\n3\n"  # csv stays clean: status lines go to stderr
    assert "version 1 · WRITE · 1 row written" in err


@pytest.mark.parametrize("fmt,expected", [
    ("table", "+---+\n| a |\n+---+\n| 3 |\n+---+\n(1 row)\n"),
    ("csv", "a\n3\n"),
    ("json", '[{"a": 3}]\n'),
    ("vertical", "-[ RECORD 1 ]--\na | 3\n(1 row)\n"),
    ("markdown", "| a   |\n|----:|\n|   3 |\n(1 row)\n"),
])
def test_formats(fake, capsys, fmt, expected):
    assert cli.main(["--format", fmt, "-e", "CREATE TABLE t (a INT); INSERT INTO t VALUES (3)"]) == 0
    capsys.readouterr()
    fake[0].tables_["t"] = (["a"], [(3,)])

    # a second run on the same fake session state
    def connect(**kwargs):
        return fake[0]

    isolde.connect = connect
    assert cli.main(["--format", fmt, "-e", "SELECT * FROM t"]) == 0
    out = capsys.readouterr().out
    assert out == expected
    if fmt == "json":
        assert json.loads(out) == [{"a": 3}]


def test_default_script_runs_when_stdin_is_not_a_terminal(fake, capsys, tmp_path):
    demo = tmp_path / "quickstart.sql"
    demo.write_text("SELECT 1;")
    assert cli.main(["--default-script", str(demo)]) == 0
    assert fake[0].executed == ["SELECT 1"]


def test_conf_and_master_are_passed(fake, capsys):
    assert cli.main(["--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=3", "--conf",
                     "spark.databricks.delta.properties.defaults.enableDeletionVectors=false", "-e", "SELECT 1"]) == 0
    assert fake[0].kwargs["master"] == "local[1]"
    assert fake[0].kwargs["conf"] == {"spark.sql.shuffle.partitions": "3",
                                      "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false"}


@pytest.mark.parametrize("argv", [["--bogus"], ["--format", "xml"], ["--on-error", "maybe"], ["--conf", "novalue"],
                                  ["-f", "/nonexistent/script.sql"], ["-e"]])
def test_usage_errors_exit_2_without_spark(fake, capsys, argv):
    assert cli.main(argv) == 2
    assert fake == []  # no session was opened
    assert "isolde: error:" in capsys.readouterr().err


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith(f"isolde {isolde.__version__} (pyspark ")


def test_usage_error_as_a_process_is_fast_and_never_imports_pyspark(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "isolde", "--format", "xml"], capture_output=True, text=True,
                          env=env, timeout=30)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    assert time.perf_counter() - began < 5
    probe = subprocess.run([sys.executable, "-c", "import sys, isolde.repl.cli, isolde.repl.app, "
                            "isolde.repl.runner, isolde.repl.completion; "
                            "print(any(m.split('.')[0] in ('pyspark', 'py4j') for m in sys.modules))"],
                           capture_output=True, text=True, env=env, timeout=30)
    assert probe.stdout.strip() == "False", probe.stderr


def test_echo_prints_each_statement(fake, capsys):
    assert cli.main(["--echo", "-e", "SELECT 1;\nSELECT\n 2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("\nisolde> SELECT 1;\n+---+")
    assert "\nisolde> SELECT\n      ->  2;\n" in out or "\nisolde> SELECT\n     ->  2;\n" in out
