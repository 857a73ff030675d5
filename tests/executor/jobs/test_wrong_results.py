"""The silent wrong results of issue 17, one statement path each, end to end on Spark.

Each case once deleted nothing, updated nothing, inserted a duplicate or let a write skew
commit. The class-wide proofs are the differential tests (test_skipping_differential.py,
test_scope_covers_reads.py); these pin the user-visible statements.
"""

from __future__ import annotations

import os

import pytest

from isolde import errors as E


def rows(session, sql):
    return sorted(tuple(r) for r in session.sql(sql).collect())


# --------------------------------------------------------------------------- non-integer numbers


@pytest.fixture
def numbers(session):
    session.execute("CREATE TABLE n (id INT, x DOUBLE, f FLOAT, d DECIMAL(10,2), big DECIMAL(38,0))")
    # one row per file: every literal below equals some file's min and max statistic
    for row in ["(1, 0.1, 0.1, 1.23, 0)", "(2, 0.3, 0.3, 2.50, 5)", "(3, -0.0, -0.0, -1.00, 7)",
                "(4, double('NaN'), float('NaN'), 0.01, 9)", "(5, double('Infinity'), 1.5, 99.99, 11)"]:
        session.execute(f"INSERT INTO n VALUES {row}")
    return session


@pytest.mark.parametrize("where, expected", [
    ("x = 0.1", [1]),
    ("x = 1e-1", [1]),
    ("x = 0.1D", [1]),
    ("x <= 0.1 AND x > 0.05", [1]),
    ("x = 0.0", [3]),             # -0.0 equals 0.0
    ("x = -0.0", [3]),
    ("x = double('NaN')", [4]),   # NaN equals NaN ...
    ("x > 1e300", [4, 5]),        # ... and is larger than every other value
    ("x = double('Infinity')", [5]),
    ("f = 0.1F", [1]),
    ("f = 0.1", []),              # 0.1f widened to double is not the double 0.1 (Spark's answer)
    ("f = CAST('NaN' AS FLOAT)", [4]),
    ("d = 1.23", [1]),
    ("d <= 1.23 AND d >= 1.23", [1]),
    ("d >= 2.5", [2, 5]),
    ("d = 1.229", []),
    ("d IN (2.50, 99.99)", [2, 5]),
    ("d BETWEEN 0.01 AND 0.01", [4]),
    ("big = 0.4", [1]),           # decimal(38,0) vs 0.1: Spark rounds the literal to scale 0
    ("id = 1.0", [1]),
    ("id IN (1, 2.5)", [1]),
    ("id = '2'", [2]),
])
def test_queries_and_deletes_see_rows_at_the_statistics_edges(numbers, where, expected):
    s = numbers
    assert [r[0] for r in rows(s, f"SELECT id FROM n WHERE {where}")] == expected
    # what Spark says on the same rows with no isolde skipping: the oracle
    oracle = sorted(r[0] for r in s.sql("SELECT * FROM n").where(where).select("id").collect())
    assert oracle == expected
    s.execute(f"DELETE FROM n WHERE {where}")
    left = [r[0] for r in rows(s, "SELECT id FROM n")]
    assert left == [i for i in [1, 2, 3, 4, 5] if i not in expected]


def test_update_on_a_decimal_edge_and_merge_on_a_double_key(numbers, delta_rows, table_path):
    s = numbers
    r = s.execute("UPDATE n SET id = id + 100 WHERE d <= 1.23 AND d >= 1.23")
    assert r.metrics["numUpdatedRows"] == 1
    r = s.execute("MERGE INTO n USING (SELECT 0.3D AS x, 'new' AS tag) src ON n.x = src.x "
                  "WHEN MATCHED THEN UPDATE SET id = 200 WHEN NOT MATCHED THEN INSERT (id, x) VALUES (-1, src.x)")
    assert r.metrics["numTargetRowsUpdated"] == 1 and r.metrics["numTargetRowsInserted"] == 0
    r = s.execute("MERGE INTO n USING (SELECT double('NaN') AS x) src ON n.x = src.x "
                  "WHEN MATCHED THEN UPDATE SET id = 400 WHEN NOT MATCHED THEN INSERT (id, x) VALUES (-1, src.x)")
    assert r.metrics["numTargetRowsUpdated"] == 1 and r.metrics["numTargetRowsInserted"] == 0
    assert [r[0] for r in rows(s, "SELECT id FROM n")] == [3, 5, 101, 200, 400]
    assert sorted(r[0] for r in delta_rows(table_path(s, "n"), ["id"])) == [3, 5, 101, 200, 400]


def test_38_digit_bd_literals_keep_their_value_and_type(session):
    """``-99999999999999999999.999999999999999999BD`` once reached Spark as CAST('...' AS DECIMAL(38, 18)),
    which Spark negates with an overflow: INSERT VALUES failed and a SELECT ... NOT IN errored."""
    s = session
    big = "99999999999999999999.999999999999999999"
    s.execute("CREATE TABLE m (id INT, m38 DECIMAL(38,18))")
    s.execute(f"INSERT INTO m VALUES (1, -{big}BD)")
    s.execute(f"INSERT INTO m VALUES (2, {big}BD), (3, 1.50BD)")
    assert rows(s, f"SELECT id FROM m WHERE m38 NOT IN (-{big}BD, -{big}BD, CAST('0' AS DECIMAL(1,0)))") == [(2,), (3,)]
    assert rows(s, f"SELECT id FROM m WHERE m38 = -{big}BD") == [(1,)]
    # Spark's type for 1.50BD is DECIMAL(3, 2): trailing zeros count
    assert rows(s, "SELECT typeof(1.50BD), CAST(1.50BD AS STRING)") == [("decimal(3,2)", "1.50")]
    s.execute(f"DELETE FROM m WHERE m38 < -{big[:-1]}8BD")
    assert rows(s, "SELECT id FROM m") == [(2,), (3,)]


# --------------------------------------------------------------------------- MERGE keys in the comparison type


def test_merge_string_keys_into_int_target_computes_keys_as_spark_compares(session, table_path):
    s = session
    s.execute("CREATE TABLE t (k INT, v STRING)")
    for lo in (1, 601, 1201, 1801):  # four files; lexicographically '1'..'999' would skip most
        s.execute(f"INSERT INTO t SELECT id, 'old' FROM range({lo}, {lo + 600})")
    s.execute("CREATE TABLE src (k STRING, v STRING)")
    s.execute("INSERT INTO src SELECT CAST(id AS STRING), 'new' FROM range(1, 1700)")  # > 1,000 keys: a range
    r = s.execute("MERGE INTO t USING src ON src.k = t.k WHEN MATCHED THEN UPDATE SET v = src.v "
                  "WHEN NOT MATCHED THEN INSERT *")
    assert r.metrics["numTargetRowsUpdated"] == 1699 and r.metrics["numTargetRowsInserted"] == 0
    assert rows(s, "SELECT count(*), count(DISTINCT k), count_if(v = 'new') FROM t") == [(2400, 2400, 1699)]
    # the recorded read predicate covers every target row the MERGE matched
    commit = _last_commit_info(table_path(s, "t"))
    assert commit["operation"] == "MERGE"
    [predicate] = commit["readPredicates"]
    assert rows(s, f"SELECT count_if(NOT coalesce({predicate}, false)) FROM t WHERE v = 'new'") == [(0,)]


def _last_commit_info(path):
    import glob
    import json

    last = sorted(glob.glob(os.path.join(path, "_delta_log", "*.json")))[-1]
    with open(last) as fh:
        return next(json.loads(line)["commitInfo"] for line in fh if '"commitInfo"' in line)


def test_merge_double_source_keys_into_decimal_target(session):
    s = session
    s.execute("CREATE TABLE t (k DECIMAL(10,2), v STRING)")
    s.execute("INSERT INTO t VALUES (0.10, 'a')")
    s.execute("INSERT INTO t VALUES (0.30, 'b')")
    s.execute("MERGE INTO t USING (SELECT 0.1D AS k UNION ALL SELECT 0.3D) src ON src.k = t.k "
              "WHEN MATCHED THEN UPDATE SET v = 'hit' WHEN NOT MATCHED THEN INSERT (k, v) VALUES (src.k, 'dup')")
    assert rows(s, "SELECT CAST(k AS STRING), v FROM t") == [("0.10", "hit"), ("0.30", "hit")]


# --------------------------------------------------------------------------- self-reads under another name


@pytest.fixture
def skew(session, table_path):
    """Two files: id 1 in one, id 2 in the other; deletion vectors on (row-level eligible)."""
    s = session
    s.execute("CREATE TABLE t (id INT, v STRING)")
    s.execute("INSERT INTO t VALUES (1, 'x')")
    s.execute("INSERT INTO t VALUES (2, 'x')")
    return s, table_path(s, "t")


def _race(s, statement, winner="UPDATE t SET v = 'y' WHERE id = 2"):
    prepared = s.prepare(statement)
    s.execute(winner)
    return prepared


@pytest.mark.parametrize("spelling", ["path", "view", "dataframe_view", "name_in_other_case"])
def test_delete_reading_the_target_elsewhere_conflicts(skew, spelling):
    s, path = skew
    if spelling == "path":
        other = f"delta.`{path}`"
    elif spelling == "view":
        s.sql("SELECT * FROM t").createOrReplaceTempView("tv")
        other = "tv"
    elif spelling == "dataframe_view":
        s.spark.sql(f"SELECT * FROM parquet.`{path}`").createOrReplaceTempView("raw")
        other = "raw"
    else:
        other = "T"
    # a write skew: delete id 1 if id 2 is still 'x'; a concurrent UPDATE makes id 2 'y'
    statement = f"DELETE FROM t WHERE id = 1 AND EXISTS (SELECT 1 FROM {other} o WHERE o.id = 2 AND o.v = 'x')"
    assert "whole table" in s.explain(statement) or spelling != "path"
    prepared = _race(s, statement)
    with pytest.raises(E.ConcurrentAppendException):
        prepared.commit()
    assert rows(s, "SELECT id, v FROM t") == [(1, "x"), (2, "y")]


def test_merge_source_is_the_target_by_path(skew):
    s, path = skew
    statement = (f"MERGE INTO t USING (SELECT * FROM delta.`{path}` WHERE id = 2 AND v = 'x') src "
                 "ON t.id = src.id - 1 WHEN MATCHED THEN DELETE")
    plan = s.explain(statement)
    assert "whole table" in plan
    prepared = _race(s, statement)
    with pytest.raises(E.ConcurrentAppendException):
        prepared.commit()
    assert rows(s, "SELECT id, v FROM t") == [(1, "x"), (2, "y")]


def test_insert_select_from_a_view_over_the_target_is_not_blind(skew):
    s, _ = skew
    s.sql("SELECT * FROM t WHERE v = 'x'").createOrReplaceTempView("xs")
    prepared = _race(s, "INSERT INTO t SELECT id + 10, v FROM xs")
    with pytest.raises(E.ConcurrentAppendException):
        prepared.commit()
    assert rows(s, "SELECT id, v FROM t") == [(1, "x"), (2, "y")]


def test_a_view_over_another_table_does_not_widen_the_scope(skew):
    s, _ = skew
    s.execute("CREATE TABLE other (id INT)")
    s.execute("INSERT INTO other VALUES (2)")
    s.sql("SELECT * FROM other").createOrReplaceTempView("ov")
    s.spark.createDataFrame([(2,)], "id int").createOrReplaceTempView("local_rows")
    for source in ("ov", "local_rows"):
        plan = s.explain(f"DELETE FROM t WHERE id = 1 AND EXISTS (SELECT 1 FROM {source} o WHERE o.id = 2)")
        assert "reads: rows where id = 1" in plan, plan


# --------------------------------------------------------------------------- names that are keywords somewhere


KEYWORD_COLUMNS = ["minus", "xor", "qualify", "except", "rlike", "tablesample", "optimize", "zorder", "full",
                   "reorg", "apply", "purge", "values", "like", "ilike", "limit", "window", "date", "select", "from"]


def test_keyword_named_columns_through_update_delete_merge(session, delta_rows, table_path):
    s = session
    cols = ", ".join(f"`{c}` INT" for c in KEYWORD_COLUMNS)
    s.execute(f"CREATE TABLE kw ({cols})")
    for i in (1, 2, 3):
        s.execute(f"INSERT INTO kw VALUES ({', '.join(str(i) for _ in KEYWORD_COLUMNS)})")
    for c in KEYWORD_COLUMNS:
        q = f"`{c}`"
        s.execute(f"UPDATE kw SET {q} = {q} + 10 WHERE {q} = 1 AND `minus` < 5")
        s.execute(f"UPDATE kw SET {q} = {q} - 10 WHERE {q} = 11")
    s.execute("DELETE FROM kw WHERE `except` = 2 AND `values` IN (2, 4)")
    s.execute("MERGE INTO kw USING (SELECT 3 AS `qualify`) src ON kw.`qualify` = src.`qualify` "
              "WHEN MATCHED THEN UPDATE SET `rlike` = 30")
    # words Spark reads as names unquoted, so must isolde (the ANSI-reserved SELECT / FROM excepted)
    s.execute("UPDATE kw SET xor = 7 WHERE minus = 1 AND qualify = 1 AND rlike = 1 AND optimize = 1 "
              "AND values = 1 AND like = 1 AND tablesample = 1 AND except = 1 AND full = 1")
    got = rows(s, "SELECT `minus`, xor, `rlike` FROM kw")
    assert got == [(1, 7, 1), (3, 3, 30)]
    assert sorted(r for r in delta_rows(table_path(s, "kw"), ["minus", "xor", "rlike"])) == got
    with pytest.raises(E.ParseError) as err:
        s.execute("UPDATE kw SET xor = 1 WHERE select = 1")  # reserved in Spark's ANSI list: quote it
    assert err.value.line == 1 and err.value.column == 29


def test_insert_into_a_partition_column_named_with_an_underscore(session, delta_rows, table_path):
    # its folders are `_p=...`: not hidden files, rows (an INSERT once committed none of them)
    s = session
    s.execute("CREATE TABLE u (id INT, _p STRING) PARTITIONED BY (_p)")
    r = s.execute("INSERT INTO u VALUES (1, 'a'), (2, 'b'), (3, NULL)")
    assert r.metrics["numOutputRows"] == 3
    assert rows(s, "SELECT id, _p FROM u") == [(1, "a"), (2, "b"), (3, None)]
    assert sorted(delta_rows(table_path(s, "u"), ["id"])) == [(1,), (2,), (3,)]
