"""An UPDATE's changed rows brought to the driver in one job, up to a bound (few_rows.collect_bounded).

The number of changed rows is known only after the scan that finds them. Each task of that
scan stops the job once it yields more than its share of the bound, so a big UPDATE loses a
fraction of one scan and takes the Spark route. The share comes from ``scan_tasks``, which
predicts Spark's own split of the files into tasks: checked here against Spark's plan.
"""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from isolde.executor.rows import few_rows

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("seed", range(6))
def test_scan_tasks_is_sparks_own_split(spark, tmp_path, seed):
    rng = random.Random(seed)
    paths = []
    for i in range(rng.randrange(1, 25)):
        n = rng.choice([10, 1000, 20_000, 60_000])
        path = str(tmp_path / f"f{i}.parquet")
        pq.write_table(pa.table({"x": [rng.random() for _ in range(n)]}), path, compression="none")
        paths.append(path)
    sizes = [os.path.getsize(p) for p in paths]
    settings = {"spark.sql.files.maxPartitionBytes": str(rng.choice([16 << 10, 100 << 10, 1 << 20, 128 << 20])),
                "spark.sql.files.openCostInBytes": str(rng.choice([1 << 10, 64 << 10, 4 << 20]))}
    old = {k: spark.conf.get(k, None) for k in settings}
    try:
        for k, v in settings.items():
            spark.conf.set(k, v)
        planned = spark.read.parquet(*paths)._jdf.queryExecution().executedPlan().execute().getNumPartitions()
        assert few_rows.scan_tasks(spark, sizes) == planned, (sizes, settings)
    finally:
        for k, v in old.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)


def test_rows_within_the_bound_come_in_one_job(spark):
    df = spark.range(0, 100_000, numPartitions=4).selectExpr("id", "id * 2 AS twice").where("id % 10 = 3")
    table = few_rows.collect_bounded(df, limit=10_000, tasks=4)
    assert table is not None and table.num_rows == 10_000
    assert sorted(zip(table.column("id").to_pylist(), table.column("twice").to_pylist())) == \
        [(i, 2 * i) for i in range(3, 100_000, 10)]


def test_a_task_past_its_share_stops_the_job(spark):
    df = spark.range(0, 100_000, numPartitions=4).where("id % 10 = 3")
    assert few_rows.collect_bounded(df, limit=9_999, tasks=4) is None  # 2,500 a task, share 2,499
    assert few_rows.collect_bounded(df, limit=20_000, tasks=4) is not None
    # skew: every row in one task of four, within the bound but past that task's share
    skewed = spark.range(0, 100_000, numPartitions=4).where("id < 3000")
    assert few_rows.collect_bounded(skewed, limit=10_000, tasks=4) is None
    assert few_rows.collect_bounded(skewed, limit=20_000, tasks=4) is not None


def test_other_errors_in_the_job_are_raised(spark):
    df = spark.range(0, 100, numPartitions=2).selectExpr("IF(id < 50, id, raise_error('id past 50')) AS id")
    with pytest.raises(Exception, match="id past 50"):
        few_rows.collect_bounded(df, limit=1000, tasks=2)


def _plan(df) -> str:
    from isolde.executor.runtime.spark import without_adaptive

    return without_adaptive(df)._jdf.queryExecution().executedPlan().toString()


def test_rows_out_of_a_shuffle_are_shared_over_its_tasks(spark):
    """A plan whose rows come out of a shuffle (a subquery's join) yields them in the shuffle's
    tasks, not the scan's: the share is the bound over those."""
    from pyspark.sql import functions as F

    shuffled = spark.range(0, 8000, numPartitions=1).repartition(8, "id")
    assert few_rows.shuffle_tasks(_plan(shuffled)) == 8
    assert few_rows.shuffle_tasks(_plan(spark.range(0, 10, numPartitions=3))) == 0
    small = spark.range(0, 10).withColumnRenamed("id", "k")
    joined = spark.range(0, 1000).join(F.broadcast(small), F.col("id") == F.col("k"))
    assert few_rows.shuffle_tasks(_plan(joined)) == 0  # a broadcast is no shuffle
    # 8,000 rows in 8 tasks, though the caller predicted 1: a share of 1,000 each stops the job
    # (hash partitioning spreads them unevenly); a bound past every task's rows collects them
    assert few_rows.collect_bounded(shuffled, limit=8000, tasks=1) is None
    table = few_rows.collect_bounded(shuffled, limit=80_000, tasks=1)
    assert sorted(table.column("id").to_pylist()) == list(range(8000))
