"""The embedded JVM's memory pages (executor/runtime/spark.py): 2 MB, not the 64 MB Spark derives
from the heap, which every sorting task took whole and which filled the old generation with
freed arrays (full collections every few statements at 10M rows)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_the_running_jvm_has_2_mb_pages(spark):
    """The setting reached the JVM's configuration (read by its memory manager at start)."""
    assert spark.sparkContext.getConf().get("spark.buffer.pageSize") == "2m"


def test_a_sort_of_rows_bigger_than_a_page_still_works(spark):
    """A record larger than a page gets a page of its own size."""
    rows = spark.range(0, 12, 1, 2).selectExpr("id", "repeat('x', 3 * 1024 * 1024 + CAST(id AS INT)) AS big")
    got = rows.orderBy("big").selectExpr("id", "length(big)").collect()
    assert [r[0] for r in got] == list(range(12))
    assert all(r[1] == 3 * 1024 * 1024 + r[0] for r in got)
