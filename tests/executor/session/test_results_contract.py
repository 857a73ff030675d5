"""The library contract of results (issue 17, point 7) and isolde errors from lazy DataFrames.

``Session.execute()`` answers queries, SHOW and DESCRIBE with a QueryResult that behaves like
a PySpark DataFrame for its actions (collect() -> Rows, toPandas(), show(), count(), first(),
head(), take(), tail(), isEmpty(), iteration by Row, columns, schema), the same way whether
Spark or isolde made the rows; ``Session.sql()`` returns a real pyspark DataFrame whose actions
raise isolde errors (Spark's error class, SQLSTATE and message), as do the DataFrames derived
from it.
"""

from __future__ import annotations

import datetime as dt
import decimal

import pandas as pd
import pytest
from pyspark.errors.exceptions.captured import ArithmeticException as SparkArithmeticException
from pyspark.errors import PySparkTypeError
from pyspark.sql import DataFrame, Row
from pyspark.sql import types as T

from isolde import errors as E
from isolde.executor.session.results import QueryResult, dataframe_class, show_string

pytestmark = pytest.mark.spark


@pytest.fixture
def people(session):
    session.execute("""
        CREATE TABLE people (id INT, name STRING, score DOUBLE, born DATE);
        INSERT INTO people VALUES (1, 'ann', 2.5, DATE'1990-01-02'), (2, 'bob', NULL, DATE'1985-12-31'),
                                  (3, 'cid', 10.0, NULL)
    """)
    return session


def shown(capsys, fn) -> str:
    capsys.readouterr()
    fn()
    return capsys.readouterr().out


# --------------------------------------------------------------------------- queries


def test_query_result_answers_like_a_dataframe(people, capsys):
    r = people.execute("SELECT id, name, score FROM people ORDER BY id")
    assert isinstance(r, QueryResult)
    assert r.columns == ["id", "name", "score"]
    assert r.schema == T.StructType([T.StructField("id", T.IntegerType()), T.StructField("name", T.StringType()),
                                     T.StructField("score", T.DoubleType())])
    assert r.dtypes == [("id", "int"), ("name", "string"), ("score", "double")]
    # before the rows are collected: Spark answers each action
    assert not r.collected
    assert r.count() == 3
    assert r.first() == Row(id=1, name="ann", score=2.5)
    assert r.head() == Row(id=1, name="ann", score=2.5)
    assert r.head(2) == [Row(id=1, name="ann", score=2.5), Row(id=2, name="bob", score=None)]
    assert r.take(1) == [Row(id=1, name="ann", score=2.5)]
    assert r.tail(1) == [Row(id=3, name="cid", score=10.0)]
    assert r.isEmpty() is False
    assert not r.collected
    rows = r.collect()
    assert r.collected
    assert rows == [Row(id=1, name="ann", score=2.5), Row(id=2, name="bob", score=None),
                    Row(id=3, name="cid", score=10.0)]
    assert all(type(x) is Row for x in rows)
    assert rows[1].asDict() == {"id": 2, "name": "bob", "score": None}
    assert rows[0].name == "ann" and rows[0]["score"] == 2.5
    assert rows == [(1, "ann", 2.5), (2, "bob", None), (3, "cid", 10.0)]  # Rows are tuples
    assert [row.id for row in r] == [1, 2, 3]  # iteration yields Rows
    assert len(r) == 3
    assert r.rows == rows
    assert r.as_dicts()[2] == {"id": 3, "name": "cid", "score": 10.0}
    # after collection: the same answers from the kept rows
    assert (r.count(), r.first(), r.head(2), r.take(5), r.tail(2), r.isEmpty()) == (
        3, rows[0], rows[:2], rows, rows[1:], False)
    frame = r.toPandas()
    assert list(frame.columns) == ["id", "name", "score"]
    assert frame["id"].tolist() == [1, 2, 3] and frame["name"].tolist() == ["ann", "bob", "cid"]
    assert frame["score"].iloc[0] == 2.5 and pd.isna(frame["score"].iloc[1])
    assert shown(capsys, r.show) == (
        "+---+----+-----+\n"
        "| id|name|score|\n"
        "+---+----+-----+\n"
        "|  1| ann|  2.5|\n"
        "|  2| bob| NULL|\n"
        "|  3| cid| 10.0|\n"
        "+---+----+-----+\n\n")
    assert shown(capsys, lambda: r.show(1, vertical=True)) == (
        "-RECORD 0----\n"
        " id    | 1   \n"
        " name  | ann \n"
        " score | 2.5 \n"
        "only showing top 1 row\n")
    assert isinstance(r.df, DataFrame) and type(r.df) is dataframe_class()


def test_rows_are_named_on_first_access(people):
    r = people.execute("SELECT id, name FROM people WHERE id = 3")
    assert [type(x) for x in r.rows] == [Row] and r.rows[0].asDict() == {"id": 3, "name": "cid"}
    built = QueryResult(["k", "v"], [("a", 1), ("b", 2)])
    assert built.rows == [Row(k="a", v=1), Row(k="b", v=2)] and built.rows[1].v == 2


def test_lazy_actions_run_in_a_job_group_the_session_can_cancel(people):
    df = people.sql("SELECT id FROM people")
    sc = people.spark.sparkContext
    for action in (lambda: df.count(), lambda: df.filter("id > 1").collect(),
                   lambda: people.execute("SELECT id FROM people").collect()):
        before = list(people._job_groups)
        action()
        group = sc.getLocalProperty("spark.jobGroup.id")
        assert group not in before and group == people._job_groups[-1]


def test_empty_query_result(people):
    r = people.execute("SELECT id FROM people WHERE id > 100")
    assert (r.count(), r.first(), r.head(), r.head(3), r.take(3), r.tail(3), r.isEmpty()) == (
        0, None, None, [], [], [], True)
    assert r.collect() == [] and list(r) == [] and len(r) == 0
    assert r.toPandas().columns.tolist() == ["id"] and len(r.toPandas()) == 0


def test_struct_and_duplicate_column_names(people):
    r = people.execute("SELECT id, named_struct('n', name, 'b', born) AS s, id FROM people WHERE id = 1")
    row = r.first()
    assert row.s == Row(n="ann", b=dt.date(1990, 1, 2)) and row.s.n == "ann"
    assert row.asDict(recursive=True) == {"id": 1, "s": {"n": "ann", "b": dt.date(1990, 1, 2)}}
    assert r.collect() == [(1, Row(n="ann", b=dt.date(1990, 1, 2)), 1)]
    assert r.columns == ["id", "s", "id"]


# --------------------------------------------------------------------------- rows isolde builds


def test_describe_and_show_results_answer_the_same_way(people, capsys):
    h = people.execute("DESCRIBE HISTORY people")
    assert h.df is None and h.schema is None and h.dtypes is None and h.collected
    rows = h.collect()
    assert [type(x) for x in rows] == [Row, Row]
    assert [x.version for x in rows] == [1, 0] and [x["operation"] for x in h] == ["WRITE", "CREATE TABLE"]
    assert rows[0].asDict()["operationMetrics"]["numOutputRows"] == "3"
    assert h.first() == rows[0] and h.head(5) == rows and h.take(1) == rows[:1] and h.tail(1) == rows[1:]
    assert h.count() == 2 == len(h) and not h.isEmpty()
    frame = h.toPandas()
    assert frame.columns.tolist() == h.columns and frame["version"].tolist() == [1, 0]

    props = people.execute("SHOW TBLPROPERTIES people")
    assert props.columns == ["key", "value"]
    assert props.first().asDict().keys() == {"key", "value"}
    assert dict((x.key, x.value) for x in props)["delta.enableDeletionVectors"] == "true"

    settings = people.execute("SET spark.sql.shuffle.partitions")
    assert settings.collect() == [Row(key="spark.sql.shuffle.partitions", value=settings.first().value)]

    tables = people.execute("SHOW TABLES")
    assert [x.tableName for x in tables] == ["people"] and tables.first().asDict() == {
        "namespace": "default", "tableName": "people", "isTemporary": False}
    # show() prints what Spark prints for the same rows
    spark_df = people.spark.createDataFrame([tuple(x) for x in tables], "namespace STRING, tableName STRING, "
                                                                            "isTemporary BOOLEAN")
    assert shown(capsys, tables.show) == shown(capsys, spark_df.show)


def test_message_results(session):
    r = session.execute("CREATE DATABASE IF NOT EXISTS sales")
    assert r.message and r.columns == [] and r.collect() == [] and r.first() is None and r.count() == 0
    assert r.toPandas().empty


SHOW_SCHEMA = T.StructType([
    T.StructField("i", T.LongType()), T.StructField("s", T.StringType()), T.StructField("b", T.BooleanType()),
    T.StructField("d", T.DoubleType()), T.StructField("dec", T.DecimalType(10, 2)),
    T.StructField("ts", T.TimestampNTZType()), T.StructField("day", T.DateType()),
    T.StructField("m", T.MapType(T.StringType(), T.StringType())), T.StructField("a", T.ArrayType(T.LongType())),
    T.StructField("st", T.StructType([T.StructField("x", T.LongType()), T.StructField("y", T.StringType())])),
    T.StructField("bin", T.BinaryType()),
])
SHOW_ROWS = [
    (1, "short", True, 2.5, decimal.Decimal("1.50"), dt.datetime(2024, 1, 1, 10, 0, 0, 120000),
     dt.date(2024, 2, 3), {"k": "v"}, [1, None, 3], Row(x=1, y="a"), b"\x01\xff"),
    (None, "a string longer than twenty characters", False, 1e20, decimal.Decimal("-3.00"),
     dt.datetime(1999, 12, 31, 23, 59, 59), None, {"n": None}, [], Row(x=None, y=None), None),
    (-7, "line\nbreak\ttab", None, -1.5e-5, None, None, dt.date(1, 1, 1), {}, None, None, b""),
    (2 ** 40, "日本語の文字列", True, float("nan"), decimal.Decimal("0.00"), dt.datetime(2000, 2, 29, 0, 0, 0, 1),
     dt.date(2000, 2, 29), {"a": "b"}, [10], Row(x=2, y="日本"), b"\x00"),
]


@pytest.mark.parametrize("n,truncate,vertical", [(20, True, False), (2, True, False), (20, False, False),
                                                 (20, 5, False), (20, 2, False), (20, True, True),
                                                 (1, 10, True), (0, True, False)])
def test_show_of_built_rows_prints_what_spark_prints(spark, capsys, n, truncate, vertical):
    mine = show_string([f.name for f in SHOW_SCHEMA.fields], SHOW_ROWS, n, truncate, vertical) + "\n"
    spark_df = spark.createDataFrame(SHOW_ROWS, SHOW_SCHEMA)
    assert mine == shown(capsys, lambda: spark_df.show(n, truncate, vertical))


def test_show_of_no_built_rows(spark, capsys):
    schema = "a INT, b STRING"
    for vertical in (False, True):
        mine = shown(capsys, lambda: QueryResult(["a", "b"], []).show(vertical=vertical))
        assert mine == shown(capsys, lambda: spark.createDataFrame([], schema).show(vertical=vertical))


# --------------------------------------------------------------------------- lazy errors

BAD = "SELECT id, name FROM people WHERE 10 / (id - 2) > 0"  # divides by zero at run time, for id = 2


def assert_divide_by_zero(info) -> None:
    err = info.value
    assert type(err) is E.ExecutionError
    assert err.error_class == "DIVIDE_BY_ZERO" and err.sqlstate == "22012"
    assert err.message.startswith("Division by zero.")  # the class is carried once, not repeated
    assert "Py4J" not in str(err) and "JVM stacktrace" not in str(err) and "__isolde_" not in str(err)
    assert "== SQL" not in str(err)
    cause = err.__cause__
    assert cause is not None
    assert isinstance(cause, SparkArithmeticException) or type(cause).__name__ == "Py4JJavaError"


def test_sql_returns_a_pyspark_dataframe_whose_actions_raise_isolde_errors(people, tmp_path):
    df = people.sql(BAD)  # analysis succeeds: the error only happens when rows are computed
    assert isinstance(df, DataFrame) and type(df) is dataframe_class()
    actions = {
        "collect": lambda d: d.collect(),
        "count": lambda d: d.count(),
        "show": lambda d: d.show(),
        "toPandas": lambda d: d.toPandas(),
        "toArrow": lambda d: d.toArrow(),
        "take": lambda d: d.take(5),
        "first": lambda d: d.first(),
        "head": lambda d: d.head(3),
        "tail": lambda d: d.tail(1),
        "isEmpty": lambda d: d.orderBy("id", ascending=False).isEmpty(),
        "toLocalIterator": lambda d: list(d.toLocalIterator()),
        "foreach": lambda d: d.foreach(lambda row: None),
        "foreachPartition": lambda d: d.foreachPartition(lambda rows: None),
        "write.parquet": lambda d: d.write.mode("overwrite").parquet(str(tmp_path / "out")),
    }
    for name, action in actions.items():
        with pytest.raises(E.ExecutionError) as info:
            action(df)
        assert_divide_by_zero(info)


def test_derived_dataframes_translate_too(people):
    df = people.sql(BAD)
    derived = {
        "filter": df.filter("id > 0"),
        "select": df.select("id"),
        "withColumn": df.withColumn("x", df.id + 1),
        "distinct": df.distinct(),
        "groupBy.count": df.groupBy("name").count(),
        "groupBy.agg": df.groupBy("name").agg({"id": "max"}),
        "na.fill": df.na.fill("?"),
        "union": df.union(df),
        "join": df.alias("l").join(people.sql("SELECT id AS k FROM people"), on=df.id == 2, how="inner"),
        "orderBy.limit": df.orderBy("id").limit(10),
    }
    for name, d in derived.items():
        assert type(d) is dataframe_class(), name
        with pytest.raises(E.ExecutionError) as info:
            d.collect()
        assert_divide_by_zero(info)


def test_execute_result_raises_isolde_errors_on_every_action(people, capsys):
    for action in (lambda r: r.collect(), lambda r: r.rows, lambda r: len(r), lambda r: list(r),
                   lambda r: r.count(), lambda r: r.first(), lambda r: r.take(2), lambda r: r.toPandas(),
                   lambda r: r.show(), lambda r: r.isEmpty()):
        r = people.execute(BAD)
        with pytest.raises(E.ExecutionError) as info:
            action(r)
        assert_divide_by_zero(info)


def test_eager_analysis_errors_of_transformations_are_isolde_errors(people):
    df = people.sql("SELECT id, name FROM people")
    with pytest.raises(E.ColumnNotFoundError) as info:
        df.select("nmae")
    assert isinstance(info.value, E.AnalysisError) and "nmae" in info.value.message
    assert "name" in info.value.message  # Spark's own suggestion, carried over


def test_python_argument_errors_are_left_alone(people):
    df = people.sql("SELECT id FROM people")
    with pytest.raises(PySparkTypeError):
        df.show(n="three")
    assert df.count() == 3  # and the DataFrame still works
