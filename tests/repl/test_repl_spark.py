"""End to end on a real Spark: the REPL in a pseudo-terminal (pexpect) and the command line
as a subprocess. Each test starts one JVM (4 in total): keep it that way."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

import pexpect

pytestmark = pytest.mark.spark
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]|\x1b[()][A-Z0-9]|\r")
TIMEOUT = 240  # a cold JVM on a busy 2-core machine


def _env(tmp_path):
    env = dict(os.environ)
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1", SPARK_LOCAL_IP="127.0.0.1")
    env.pop("NO_COLOR", None)
    return env


def _isolde(tmp_path, *args, stdin=None):
    return subprocess.run([sys.executable, "-m", "isolde", "--warehouse", str(tmp_path / "wh"), *args],
                          input=stdin, capture_output=True, text=True, env=_env(tmp_path), timeout=TIMEOUT,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def test_repl_in_a_terminal(tmp_path):
    began = time.perf_counter()
    env = dict(_env(tmp_path), ISOLDE_DEBUG="1")  # an unexpected error shows its traceback on the screen
    child = pexpect.spawn(sys.executable, ["-m", "isolde", "--warehouse", str(tmp_path / "wh")],
                          env=env, encoding="utf-8", timeout=TIMEOUT, dimensions=(40, 110))
    log = []

    class Sink:
        def write(self, s):
            log.append(s)

        def flush(self):
            pass

    child.logfile_read = Sink()

    def screen():
        return ANSI.sub("", "".join(log))

    try:
        child.expect_exact("isolde> ")
        assert time.perf_counter() - began < 15  # the prompt does not wait for Spark
        # a multi-line CREATE: the first Enter only adds a line
        child.send("CREATE TABLE orders (\r")
        child.send("  id INT, customer STRING);\r")
        child.expect_exact("version 0 · CREATE TABLE")
        child.send("INSERT INTO orders VALUES (1, 'ann;'),\r(2, 'bob');\r")
        child.expect_exact("version 1 · WRITE · 2 rows written")
        child.send("SELECT * FROM orders ORDER BY id;\r")
        child.expect_exact("(2 rows)")
        assert "|  1 | ann;     |" in screen() and "|  2 | bob      |" in screen()
        # a syntax error: caret under the token, and the loop goes on
        child.send("SELEC 1;\r")
        child.expect_exact("Syntax error at line 1, column 1")
        child.expect_exact("^^^^^")
        # Tab completion of a table name (the catalog refreshed after CREATE)
        child.send("SELECT customer FROM ord")
        time.sleep(0.5)
        child.send("\t")
        time.sleep(0.8)
        child.send(" WHERE id = 2;\r")
        child.expect_exact("(1 row)")
        assert "| bob      |" in screen()
        # an unknown column: "did you mean"
        child.send("SELECT custmer FROM orders;\r")
        child.expect("(?i)did you mean")
        # meta-commands
        child.send("\\dt\r")
        child.expect_exact("(1 table)")
        assert "| orders |" in screen()
        child.send("\\d orders\r")
        child.expect_exact("delta.enableDeletionVectors")
        # DESCRIBE HISTORY is fitted to the terminal's width (no pager needed)
        child.send("\\history orders 1\r")
        child.expect_exact("(1 row)")
        # DELETE without WHERE asks first; 'n' leaves the table alone
        child.send("DELETE FROM orders;\r")
        child.expect_exact("[y/N]")
        child.send("n\r")
        child.expect_exact("Not run.")
        # Ctrl-C clears a half-typed statement; Ctrl-D on the empty line exits
        child.send("SELECT 'half")
        child.sendcontrol("c")
        child.expect_exact("isolde> ")
        child.sendcontrol("d")
        child.expect_exact("Bye.")
        child.expect(pexpect.EOF)
    except pexpect.TIMEOUT:
        pytest.fail("the REPL did not print what was expected; its screen:\n" + screen()[-6000:])
    finally:
        child.close(force=True)
    history = tmp_path / "data" / "isolde" / "history"
    assert history.exists() and (os.stat(history).st_mode & 0o777) == 0o600
    assert "SELEC 1;" in history.read_text()
    assert (tmp_path / "config" / "isolde" / "config").exists()


def test_script_error_names_line_7(tmp_path):
    script = tmp_path / "etl.sql"
    script.write_text("-- 1\nCREATE TABLE t (id INT, name STRING);\n\nINSERT INTO t VALUES\n  (1, 'a'),\n  (2, 'b');\n"
                      "UPDATE t SET nme = 'x' WHERE id = 1;\nSELECT 1;\n")
    proc = _isolde(tmp_path, "-f", str(script))
    assert proc.returncode == 1, proc.stderr
    assert f"{script}, line 7:" in proc.stderr
    assert "version 1 · WRITE · 2 rows written" in proc.stdout
    assert "\x1b[" not in proc.stdout + proc.stderr  # plain output to a pipe


def test_stdin_statements_as_csv(tmp_path):
    sql = ("CREATE TABLE t (id INT, name STRING);\nINSERT INTO t VALUES (1, 'a,b'), (2, NULL);\n"
           "SELECT * FROM t ORDER BY id;\n")
    proc = _isolde(tmp_path, "--format", "csv", stdin=sql)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == 'id,name\n1,"a,b"\n2,\n'
    assert "version 1 · WRITE · 2 rows written" in proc.stderr


def test_e_json_and_default_script(tmp_path):
    demo = tmp_path / "quickstart.sql"
    demo.write_text("CREATE TABLE q (k INT);\nINSERT INTO q VALUES (42);\nSELECT * FROM q;\n")
    proc = _isolde(tmp_path, "--default-script", str(demo), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [{"k": 42}]
