"""A short, wide result never opens the pager (issue 55): DESCRIBE DETAIL on a 200-column
terminal, with the default config (pager = less), shows its one row vertically and the next
statement typed runs (tests/repl/test_paging.py has the rule's cases). In a pseudo-terminal
(pexpect), one JVM."""

from __future__ import annotations

import re
import sys

import pexpect
import pytest

from .test_repl_first_hour import TIMEOUT, Screen, _env

pytestmark = pytest.mark.spark


def test_a_short_wide_result_is_not_paged(tmp_path):
    child = pexpect.spawn(sys.executable, ["-m", "isolde", "--warehouse", str(tmp_path / "wh")],
                          cwd=str(tmp_path), env=_env(tmp_path), encoding="utf-8", timeout=TIMEOUT,
                          dimensions=(40, 200))
    screen = Screen()
    child.logfile_read = screen
    try:
        child.expect_exact("isolde> ")
        child.send("CREATE TABLE t (id BIGINT, name STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true');\r")
        child.expect_exact("CREATE TABLE")
        child.expect_exact("isolde> ")
        mark = len(screen.log)
        child.send("DESCRIBE DETAIL t;\r")
        child.expect_exact("-[ RECORD 1 ]")
        child.expect_exact("isolde> ", timeout=60)  # with less open, this prompt never comes
        detail = screen.since(mark)
        assert "(END)" not in detail and "format" in detail and "| delta" in detail
        child.send("SELECT 40 + 2 AS answer;\r")
        child.expect_exact("(1 row)")
        child.expect_exact("isolde> ")
        assert re.search(r"\|\s*42\s*\|", screen.since(mark))
        child.send("\\q\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
