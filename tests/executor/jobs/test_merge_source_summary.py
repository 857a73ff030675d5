"""The source summary of a MERGE into a deletion-vector table comes from the job that
materialises its source (``merge._ObservedSummary``, Spark's ``observe``), not from an
aggregate job of its own. Differential against that aggregate (``merge._summarise_source``) on
generated sources: the same key sets where a key has few values, the same ranges where it has
many, NULLs and row counts seen alike, keys compared in the ON comparison's type.

And end to end: a MERGE from a non-local source into a deletion-vector table runs one job
fewer than before and upserts the right rows (read back by delta-rs too)."""

from __future__ import annotations

import datetime

import pytest
from pyspark.sql import functions as F

from isolde.executor.rows import dml
from isolde.executor.jobs import merge as M
from isolde.planner.scope import JoinKey, KeyRange

pytestmark = pytest.mark.spark


def _summaries(spark, df, keys, types):
    """(observed summary, aggregate summary) over one materialised copy of ``df``."""
    views = dml.TempViews(spark)
    try:
        observed = M._ObservedSummary.of(spark, views, df, "s", keys, types)
        assert observed is not None
        rows = observed.watched.select("*", F.lit(True).alias(M.SRC_FLAG),
                                       F.monotonically_increasing_id().alias(M.SID))
        materialised = views.checkpoint(rows)
        observed.ran(rows)
        assert observed.complete, "the checkpoint's job did not report the observed metrics"
        view = views.add(materialised, "source")
        return observed.summary(spark, view), M._summarise_source(spark, view, "s", keys, types)
    finally:
        views.close()


def _assert_same(got, want):
    assert got.rows == want.rows
    assert got.key_values.keys() == want.key_values.keys()
    for column, values in want.key_values.items():
        mine = got.key_values[column]
        if isinstance(values, KeyRange):
            assert isinstance(mine, KeyRange), (column, mine)
            assert (mine.min, mine.max, mine.has_null) == (values.min, values.max, values.has_null)
            assert mine.count > M.KEY_SET_LIMIT
        else:
            assert not isinstance(mine, KeyRange), (column, mine)
            assert sorted(mine, key=repr) == sorted(values, key=repr)


# (rows, distinct values of k, NULL fraction): around KEY_SET_LIMIT (1,000) on both sides, the
# approximate count's window (up to 2,000) and well past it, empty and one-row sources
CASES = [(0, 1, 0.0), (1, 1, 0.0), (5, 3, 0.4), (3_000, 10, 0.0), (3_000, 10, 0.05), (2_500, 999, 0.0),
         (2_500, 1_000, 0.0), (2_500, 1_001, 0.1), (4_000, 1_900, 0.0), (4_000, 2_100, 0.0), (30_000, 30_000, 0.01)]


@pytest.mark.parametrize("rows,distinct,nulls", CASES)
def test_bigint_key_matches_the_aggregate(spark, rows, distinct, nulls):
    df = spark.range(rows).selectExpr(
        f"CASE WHEN rand(7) < {nulls} THEN NULL ELSE (id * 7919) % {distinct} END AS k", "id AS payload")
    got, want = _summaries(spark, df, [JoinKey("id", "s.k")], {"id": "BIGINT"})
    _assert_same(got, want)
    assert got.unique_keys is False  # never claimed: the deletion-vector plans do not need it


@pytest.mark.parametrize("rows,distinct", [(2_000, 40), (6_000, 6_000)])
def test_string_source_key_against_an_int_column_is_summarised_as_numbers(spark, rows, distinct):
    # Spark compares STRING = INT as BIGINT: the set and range are numbers, not strings ordered
    # as text ('10' < '9')
    df = spark.range(rows).selectExpr(f"CAST(id % {distinct} AS STRING) AS k", "CAST(id AS STRING) AS d")
    got, want = _summaries(spark, df, [JoinKey("id", "s.k")], {"id": "INT"})
    _assert_same(got, want)
    values = got.key_values["id"]
    lo = values.min if isinstance(values, KeyRange) else min(values)
    assert isinstance(lo, int)


def test_composite_date_and_timestamp_keys(spark):
    # few dates (a set: the partition column of ON), many timestamps (a range, in micros)
    df = spark.range(5_000).selectExpr("date_add(DATE'2024-03-01', CAST(id % 4 AS INT) * 9) AS day",
                                       "timestamp_micros(1700000000000000 + id * 1000003) AS ts")
    keys = [JoinKey("day", "s.day"), JoinKey("ts", "s.ts")]
    got, want = _summaries(spark, df, keys, {"day": "DATE", "ts": "TIMESTAMP"})
    _assert_same(got, want)
    assert len(got.key_values["day"]) == 4
    assert isinstance(got.key_values["ts"], KeyRange)


def test_many_dates_make_a_range_of_dates(spark):
    df = spark.range(6_000).selectExpr("date_add(DATE'1960-01-01', CAST(id * 3 AS INT)) AS day")
    got, want = _summaries(spark, df, [JoinKey("day", "s.day")], {"day": "DATE"})
    _assert_same(got, want)
    assert isinstance(got.key_values["day"].min, datetime.date)


@pytest.mark.parametrize("target_type,source", [("DECIMAL(12,2)", "CAST(id AS DECIMAL(12, 2))"),
                                                 ("DOUBLE", "CAST(id AS DOUBLE) / 3"),
                                                 ("TIMESTAMP_NTZ", "CAST(timestamp_micros(id) AS TIMESTAMP_NTZ)")])
def test_keys_of_other_types_are_left_to_the_aggregate_job(spark, target_type, source):
    """py4j hands a DECIMAL or a LocalDateTime over as a Java object, and a double's NaN order
    is Spark's: no observed summary for these, the aggregate job runs (and gives the answer)."""
    views = dml.TempViews(spark)
    try:
        df = spark.range(100).selectExpr(f"{source} AS k")
        assert M._ObservedSummary.of(spark, views, df, "s", [JoinKey("c", "s.k")], {"c": target_type}) is None
    finally:
        views.close()


def test_null_safe_key_keeps_its_nulls(spark):
    df = spark.range(50).selectExpr("CASE WHEN id % 5 = 0 THEN NULL ELSE id % 3 END AS k")
    got, want = _summaries(spark, df, [JoinKey("id", "s.k", null_safe=True)], {"id": "BIGINT"})
    _assert_same(got, want)
    assert None in got.key_values["id"]


def _jobs(spark):
    return int(spark.sparkContext._jsc.sc().dagScheduler().nextJobId())


def test_merge_from_a_table_source_into_deletion_vectors(session, spark, table_path, delta_rows):
    """A non-local source: the upsert's rows are right, and no aggregate job ran over the
    source (jobs: materialise the source, collect the few-valued key's set -- none here --,
    broadcast it, pass 1, the matched ids' broadcast, the write)."""
    session.execute("CREATE TABLE tgt (id BIGINT, v STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.range(0, 4_000, 1, 2).selectExpr("id", "concat('old', CAST(id AS STRING)) AS v") \
        .createOrReplaceTempView("tgt_rows")
    session.execute("INSERT INTO tgt SELECT * FROM tgt_rows")
    # 3,000 source rows: 2,000 existing ids (every other one), 1,000 new; not a local relation
    spark.range(0, 3_000, 1, 2).selectExpr("IF(id < 2000, id * 2, id + 2000) AS id",
                                           "concat('new', CAST(id AS STRING)) AS v") \
        .createOrReplaceTempView("src_rows")
    before = _jobs(spark)
    result = session.execute("MERGE INTO tgt t USING src_rows s ON t.id = s.id "
                             "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *")
    jobs = _jobs(spark) - before
    assert (result.counts["num_updated_rows"], result.counts["num_inserted_rows"]) == (2_000, 1_000)
    assert jobs <= 5, jobs  # with the aggregate over the source it was 6
    expected = {i: f"old{i}" for i in range(4_000)}
    for n in range(3_000):
        expected[n * 2 if n < 2_000 else n + 2_000] = f"new{n}"
    rows = dict(session.execute("SELECT id, v FROM tgt").rows)
    assert rows == expected
    assert dict(delta_rows(table_path(session, "tgt"), ["id", "v"])) == expected


def test_point_merge_from_a_query_source_collects_no_key_set(session, spark, delta_rows, table_path):
    """`USING (SELECT 42 AS id, ...)` is not a local relation to Spark (a projection of one
    row): the source is materialised, and its one key value is known from min = max, with no
    job to collect it (jobs: materialise, broadcast, pass 1, write)."""
    session.execute("CREATE TABLE pt (id BIGINT, v STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    session.execute("INSERT INTO pt SELECT id, 'old' FROM range(100)")
    expected = {i: "old" for i in range(100)}
    for key in (42, 420, 42):
        before = _jobs(spark)
        result = session.execute(f"MERGE INTO pt t USING (SELECT {key} AS id, 'new{key}' AS v) s ON t.id = s.id "
                                 "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *")
        jobs = _jobs(spark) - before
        expected[key] = f"new{key}"
        assert result.counts["num_affected_rows"] == 1
        assert jobs <= 4, jobs  # with a job collecting the key's one value it was 5
    assert dict(session.execute("SELECT id, v FROM pt").rows) == expected
    assert dict(delta_rows(table_path(session, "pt"), ["id", "v"])) == expected


def test_comparison_types_read_from_the_schemas_are_sparks(spark):
    """A key that is a source column of the target column's own type (``_SAME_TYPE_KEYS``) takes
    its comparison type from the two schemas, with no query analysed; it is the type Spark's own
    analysis of the comparison gives. Other pairs (a coercion, a collation, an expression) are
    still asked of Spark, and agree with it by construction."""
    values = {"TINYINT": "CAST(1 AS TINYINT)", "SMALLINT": "CAST(1 AS SMALLINT)", "INT": "1", "BIGINT": "1L",
              "STRING": "'1'", "BOOLEAN": "true", "DATE": "DATE'2024-01-01'",
              "TIMESTAMP": "TIMESTAMP'2024-01-01 00:00:00'", "TIMESTAMP_NTZ": "TIMESTAMP_NTZ'2024-01-01 00:00:00'",
              "LCASE": "'a' COLLATE UTF8_LCASE", "DOUBLE": "1D"}
    src = spark.sql("SELECT " + ", ".join(f"{v} AS c_{k.lower()}" for k, v in values.items()))
    struct = src.schema
    same = {k: k for k in M._SAME_TYPE_KEYS}
    other = {"INT": "BIGINT", "STRING": "INT", "LCASE": "STRING", "DOUBLE": "DOUBLE", "BIGINT": "DECIMAL(20,0)"}
    views = dml.TempViews(spark)
    try:
        view = views.add(src, "source")
        for pairs in (same, other):
            keys = [JoinKey(f"x_{i}", f"s.c_{s.lower()}", source_column=f"c_{s.lower()}")
                    for i, s in enumerate(pairs)]
            types = {f"x_{i}": t.lower() for i, t in enumerate(pairs.values())}
            asked = M._comparison_types(spark, view, "s", keys, types)  # every key analysed by Spark
            calls = []

            def lazy_view():
                calls.append(1)
                return view

            read = M._comparison_types(spark, lazy_view, "s", keys, types, struct)
            assert read == asked, pairs
            assert None not in asked
            # the same-type keys needed no view (no analysis); the others did
            assert (calls == []) == (pairs is same), pairs
    finally:
        views.close()
