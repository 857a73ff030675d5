"""A Databricks user's first hour, typed into the REPL in a pseudo-terminal (pexpect): tables,
a view, MERGE from the view with ``AS s(cols)``, COPY INTO from a CSV folder twice (the second
run loads nothing), TRUNCATE, SHOW CREATE TABLE and re-creating the table from its output.
The screen is checked after each step. One JVM."""

from __future__ import annotations

import json
import re
import sys
import time

import pytest

import pexpect

pytestmark = pytest.mark.spark
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]|\x1b[()][A-Z0-9]|\r")
TIMEOUT = 240


def _env(tmp_path):
    import os

    env = dict(os.environ)
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1", SPARK_LOCAL_IP="127.0.0.1")
    env.pop("NO_COLOR", None)
    return env


class Screen:
    def __init__(self):
        self.log: list[str] = []

    def write(self, s):
        self.log.append(s)

    def flush(self):
        pass

    def text(self) -> str:
        return ANSI.sub("", "".join(self.log))

    def since(self, mark: int) -> str:
        return ANSI.sub("", "".join(self.log[mark:]))


def test_first_hour_in_the_repl(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "day1.csv").write_text("id,cust_id,amount\n1,10,5.5\n2,11,7.0\n3,10,1.5\n")
    (landing / "day2.csv").write_text("id,cust_id,amount\n4,12,100.0\n")
    config = tmp_path / "config" / "isolde"
    config.mkdir(parents=True)
    (config / "config").write_text("[main]\npager =\n")  # SHOW CREATE TABLE's JSON line is read off the screen
    child = pexpect.spawn(sys.executable, ["-m", "isolde", "--warehouse", str(tmp_path / "wh")],
                          cwd=str(tmp_path), env=_env(tmp_path), encoding="utf-8", timeout=TIMEOUT,
                          dimensions=(50, 160))
    screen = Screen()
    child.logfile_read = screen

    def run(sql: str, *expect: str) -> str:
        mark = len(screen.log)
        child.send(sql + "\r")
        for e in expect:
            child.expect_exact(e)
        child.expect_exact("isolde> ")
        return screen.since(mark)

    try:
        child.expect_exact("isolde> ")
        run("CREATE TABLE customers (id INT, name STRING, tier STRING);", "CREATE TABLE")
        run("INSERT INTO customers VALUES (10, 'ann', 'gold'), (11, 'bob', 'silver'), (12, 'cy', 'gold');",
            "3 rows written")
        run("CREATE TABLE sales (id INT, cust_id INT, amount DOUBLE);", "CREATE TABLE")

        # COPY INTO twice: the second run finds nothing new
        copy = (f"COPY INTO sales FROM '{landing}' FILEFORMAT = CSV "
                "FORMAT_OPTIONS ('header' = 'true', 'inferSchema' = 'true');")
        first = run(copy, "num_inserted_rows")
        assert re.search(r"\|\s*4\s*\|\s*4\s*\|", first), first  # num_affected_rows, num_inserted_rows
        second = run(copy, "num_inserted_rows")
        assert re.search(r"\|\s*0\s*\|\s*0\s*\|", second), second
        out = run("SELECT count(*) AS n, sum(amount) AS total FROM sales;", "(1 row)")
        assert re.search(r"\|\s*4\s*\|\s*114\.0\s*\|", out), out

        # a view, and a MERGE from it with column aliases
        run("CREATE VIEW gold_spend AS SELECT c.id, sum(s.amount) AS spent FROM sales s "
            "JOIN customers c ON s.cust_id = c.id WHERE c.tier = 'gold' GROUP BY c.id;", "gold_spend created")
        run("CREATE TABLE rewards (cust INT, points DOUBLE);", "CREATE TABLE")
        merged = run("MERGE INTO rewards r USING (SELECT * FROM gold_spend) AS g(cust, points) ON r.cust = g.cust "
                     "WHEN MATCHED THEN UPDATE SET points = g.points WHEN NOT MATCHED THEN INSERT *;",
                     "num_inserted_rows")
        assert re.search(r"\|\s*2\s*\|\s*0\s*\|\s*0\s*\|\s*2\s*\|", merged), merged
        out = run("SELECT * FROM rewards ORDER BY cust;", "(2 rows)")
        assert re.search(r"\|\s*10\s*\|\s*7\.0\s*\|", out) and re.search(r"\|\s*12\s*\|\s*100\.0\s*\|", out), out
        out = run("SHOW VIEWS;", "(1 row)")
        assert "gold_spend" in out

        # TRUNCATE keeps the table, drops the rows
        run("TRUNCATE TABLE sales;", "TRUNCATE")
        out = run("SELECT count(*) AS n FROM sales;", "(1 row)")
        assert re.search(r"\|\s*0\s*\|", out), out

        # SHOW CREATE TABLE, then re-create the table from what it printed
        run("ALTER TABLE rewards SET TBLPROPERTIES ('team' = 'loyalty');", "SET TBLPROPERTIES")
        run("\\format json", "json")
        out = run("SHOW CREATE TABLE rewards;", "createtab_stmt")
        line = next((l for l in out.splitlines() if l.startswith("[{") and "createtab_stmt" in l), out[-3000:])
        statement = json.loads(line)[0]["createtab_stmt"]
        assert statement.startswith("CREATE TABLE") and "'team' = 'loyalty'" in statement, statement
        run("\\format table", "table")
        run("DROP TABLE rewards;", "dropped")
        run(" ".join(statement.split()) + ";", "CREATE TABLE")
        out = run("SHOW TBLPROPERTIES rewards ('team');", "(1 row)")
        assert "loyalty" in out
        out = run("SHOW COLUMNS IN rewards;", "(2 rows)")
        assert "cust" in out and "points" in out
        out = run("SHOW TABLES;", "rows)")
        assert "rewards" in out and "gold_spend" in out and "namespace" in out
        child.sendcontrol("d")
        child.expect_exact("Bye.")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert not (tmp_path / "spark-warehouse").exists()
