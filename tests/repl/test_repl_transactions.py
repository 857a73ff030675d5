"""Transactions in the REPL: the prompt says one is open and which table it wrote; leaving with
one open rolls it back and says so (pexpect, one JVM). The prompt's words are a pure function,
tested table-driven."""

from __future__ import annotations

import sys

import pytest

from isolde.repl.prompt import prompt_text


@pytest.mark.parametrize("database, tables, expected", [
    ("", None, "isolde> "),
    ("sales", None, "isolde:sales> "),
    ("", [], "isolde*> "),
    ("", ["acc"], "isolde*[acc]> "),
    ("sales", ["acc"], "isolde:sales*[acc]> "),
])
def test_prompt_text(database, tables, expected):
    assert prompt_text(database, tables) == expected


@pytest.mark.spark
def test_the_prompt_shows_the_transaction_and_leaving_rolls_it_back(tmp_path):
    import pexpect

    from tests.repl.test_repl_first_hour import TIMEOUT, Screen, _env

    config = tmp_path / "config" / "isolde"
    config.mkdir(parents=True)
    (config / "config").write_text("[main]\npager =\n")
    child = pexpect.spawn(sys.executable, ["-m", "isolde", "--warehouse", str(tmp_path / "wh")],
                          cwd=str(tmp_path), env=_env(tmp_path), encoding="utf-8", timeout=TIMEOUT,
                          dimensions=(50, 160))
    screen = Screen()
    child.logfile_read = screen

    def run(sql: str, prompt: str, *expect: str) -> str:
        mark = len(screen.log)
        child.send(sql + "\r")
        for e in expect:
            child.expect_exact(e)
        child.expect_exact(prompt)
        return screen.since(mark)

    try:
        child.expect_exact("isolde> ")
        run("CREATE TABLE acc (id INT, bal INT);", "isolde> ", "CREATE TABLE")
        run("INSERT INTO acc VALUES (1, 100), (2, 100);", "isolde> ", "2 rows written")
        run("BEGIN;", "isolde*> ", "Transaction started")
        out = run("UPDATE acc SET bal = 0 WHERE id = 1;", "isolde*[acc]> ", "staged (commits at COMMIT)")
        assert "num_affected_rows" in out
        run("COMMIT;", "isolde> ", "UPDATE")  # a one-statement transaction keeps its operation
        run("BEGIN;", "isolde*> ")
        run("UPDATE acc SET bal = 5 WHERE id = 2;", "isolde*[acc]> ")
        child.sendcontrol("d")
        child.expect_exact("it was rolled back; nothing it wrote to acc was committed.")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    # the first transaction committed, the second did not
    import isolde

    s = isolde.connect(warehouse=str(tmp_path / "wh"))
    assert [tuple(r) for r in s.execute("SELECT * FROM acc ORDER BY id").rows] == [(1, 0), (2, 100)]
