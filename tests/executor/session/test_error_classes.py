"""Spark errors raised inside subqueries and joins reach the user as isolde errors with Spark's
own error class, SQLSTATE and message -- never "Exception thrown in awaitResult", a stage
materialisation wrapper or a Py4J text -- and the class is not repeated in the message
(issue 21). Through execute(), sql() and DML."""

from __future__ import annotations

import pytest

from isolde import errors as E
from isolde.repl.formatting import format_error

pytestmark = pytest.mark.spark

DIVIDE = ("DIVIDE_BY_ZERO", "22012", "Division by zero.")
CAST = ("CAST_INVALID_INPUT", "22018", "The value 'x' of the type \"STRING\" cannot be cast to \"INT\"")
CAST_ANY = ("CAST_INVALID_INPUT", "22018", "The value '")
TOO_MANY = ("SCALAR_SUBQUERY_TOO_MANY_ROWS", "21000", "More than one row returned by a subquery used as an "
            "expression.")

QUERIES = [
    ("SELECT (SELECT max(id) / min(d) FROM t) AS x", DIVIDE),
    ("SELECT u.id, (SELECT max(id) / min(d) FROM t) FROM u", DIVIDE),
    ("SELECT * FROM u JOIN t ON u.id = t.id / t.d", DIVIDE),
    ("SELECT * FROM u JOIN (SELECT id / d AS k FROM t) x ON u.id = x.k", DIVIDE),
    ("SELECT * FROM u JOIN t ON u.id = CAST(t.v AS INT)", CAST_ANY),
    ("SELECT * FROM u WHERE id IN (SELECT CAST(v AS INT) FROM t)", CAST_ANY),
    ("SELECT (SELECT id FROM t) AS x", TOO_MANY),
    ("SELECT u.id, (SELECT id FROM t) FROM u", TOO_MANY),
]
DML = [
    ("UPDATE u SET id = (SELECT max(id) / min(d) FROM t)", DIVIDE),
    ("UPDATE u SET v = (SELECT v FROM t)", TOO_MANY),
    ("UPDATE u SET v = 'z' WHERE id IN (SELECT CAST(v AS INT) FROM t)", CAST_ANY),
    ("UPDATE u SET v = 'z' WHERE id IN (SELECT u2.id FROM u u2 JOIN t ON u2.id = CAST(t.v AS INT))", CAST_ANY),
    ("DELETE FROM u WHERE id = (SELECT id FROM t)", TOO_MANY),
    ("MERGE INTO u USING (SELECT id / d AS id, v FROM t) s ON u.id = s.id WHEN MATCHED THEN DELETE", DIVIDE),
    ("INSERT INTO u SELECT id / d, v FROM t", DIVIDE),
]
PLANS = {
    "adaptive": {"spark.sql.adaptive.enabled": "true", "spark.sql.autoBroadcastJoinThreshold": "10485760"},
    "no-aqe": {"spark.sql.adaptive.enabled": "false"},
    "shuffle-joins": {"spark.sql.adaptive.enabled": "true", "spark.sql.autoBroadcastJoinThreshold": "-1"},
}


@pytest.fixture
def tables(session):
    s = session
    s.execute("SET spark.sql.ansi.enabled = true")
    s.execute("CREATE TABLE t (id INT, v STRING, d INT)")
    s.execute("INSERT INTO t VALUES (1, 'x', 0), (2, 'y', 1)")
    s.execute("CREATE TABLE u (id INT, v STRING)")
    s.execute("INSERT INTO u VALUES (1, 'a'), (2, 'b')")
    yield s
    for key in ("spark.sql.ansi.enabled", "spark.sql.adaptive.enabled", "spark.sql.autoBroadcastJoinThreshold"):
        try:
            s.spark.conf.unset(key)
        except Exception:
            pass


def _check(err: BaseException, expected, sql: str) -> None:
    error_class, sqlstate, start = expected
    assert isinstance(err, E.ExecutionError), (sql, type(err), err)
    assert (err.error_class, err.sqlstate) == (error_class, sqlstate), (sql, err.error_class, str(err))
    text = str(err)
    assert text.startswith(start), (sql, text)
    assert f"[{error_class}]" not in text and "SQLSTATE" not in text, (sql, text)
    for noise in ("awaitResult", "Py4J", "py4j", "JVM stacktrace", "STAGE_MATERIALIZATION", "__isolde_",
                  "org.apache.spark", "== SQL"):
        assert noise not in text, (sql, noise, text)
    # the REPL shows the class once, then Spark's message
    assert format_error(err) == f"ERROR [{error_class}]: {text}"


def _set(session, conf: dict) -> None:
    for key, value in conf.items():
        session.execute(f"SET {key} = {value}")


@pytest.mark.parametrize("plan", list(PLANS))
def test_queries_keep_sparks_error_class(tables, plan):
    s = tables
    _set(s, PLANS[plan])
    for sql, expected in QUERIES:
        with pytest.raises(E.IsoldeError) as info:
            s.execute(sql).rows
        _check(info.value, expected, sql)
        with pytest.raises(E.IsoldeError) as info:
            s.sql(sql).collect()
        _check(info.value, expected, sql)


@pytest.mark.parametrize("plan", ["adaptive", "no-aqe"])
def test_dml_keeps_sparks_error_class_and_changes_nothing(tables, plan):
    s = tables
    _set(s, PLANS[plan])
    before = sorted(s.execute("SELECT * FROM u").rows)
    version = s.execute("DESCRIBE HISTORY u LIMIT 1").first().version
    for sql, expected in DML:
        with pytest.raises(E.IsoldeError) as info:
            s.execute(sql)
        _check(info.value, expected, sql)
        assert sorted(s.execute("SELECT * FROM u").rows) == before, sql
        assert s.execute("DESCRIBE HISTORY u LIMIT 1").first().version == version, sql


def test_error_class_kept_through_prepare_and_derived_dataframes(tables):
    s = tables
    with pytest.raises(E.IsoldeError) as info:
        s.prepare("UPDATE u SET id = (SELECT max(id) / min(d) FROM t)")
    _check(info.value, DIVIDE, "prepare")
    df = s.sql("SELECT u.id, (SELECT id FROM t) AS x FROM u")
    with pytest.raises(E.IsoldeError) as info:
        df.where("id > 0").collect()  # (count() would prune the subquery column away)
    _check(info.value, TOO_MANY, "derived collect")


def test_analysis_errors_do_not_repeat_their_class(tables):
    s = tables
    with pytest.raises(E.AnalysisError) as info:
        s.execute("SELECT no_such_function(1)").rows
    err = info.value
    assert err.error_class.startswith("UNRESOLVED_ROUTINE")
    assert not str(err).startswith("[")
