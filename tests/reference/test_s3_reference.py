"""The reference engine on S3: Delta-Spark (through Spark's S3A) reads the s3a tables isolde writes
-- deletion vectors, OPTIMIZE, partition values with spaces -- with isolde's rows, writes to them,
and isolde reads Delta's result and writes again. On a moto S3 server (tests/helpers/s3_server.py);
one Spark 4.2 session holds both engines, as for the local-disk interop suite.

Delta-Spark's default log store for ``s3a://`` is single-driver (its multi-writer S3 store needs
DynamoDB): here the two engines take turns, never racing.
"""

from __future__ import annotations

import os
import uuid

import pytest

from isolde.executor.runtime import s3a
from tests.helpers.meta import isolde_rows, sorted_rows
from tests.helpers.reference import ref
from tests.helpers.s3_server import moto_s3

pytestmark = [pytest.mark.reference, pytest.mark.spark]

BUCKET = "isolde-reference"


@pytest.fixture(scope="module")
def s3_env(spark):
    if "hadoop-aws" not in spark.sparkContext.getConf().get("spark.jars", ""):
        reason = "the S3A connector's JARs are not on this session's class path (run `make s3a`)"
        if os.environ.get("ISOLDE_S3A_REQUIRED") == "1" or os.environ.get("ISOLDE_REFERENCE_REQUIRED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    with moto_s3(BUCKET) as env:
        s3a.apply_hadoop_settings(spark, s3a.endpoint_settings(
            env["AWS_ENDPOINT_URL"], access_key=env["AWS_ACCESS_KEY_ID"],
            secret_key=env["AWS_SECRET_ACCESS_KEY"], bucket=BUCKET))
        yield env


def test_delta_spark_reads_and_writes_isolde_s3a_tables(session, delta, s3_env):
    uri = f"s3a://{BUCKET}/{uuid.uuid4().hex[:8]}/t"
    s = session
    s.execute(f"CREATE TABLE {ref(uri)} (id BIGINT, p STRING, v STRING) USING DELTA PARTITIONED BY (p) "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    s.execute(f"INSERT INTO {ref(uri)} SELECT id, CASE WHEN id % 2 = 0 THEN 'a b' ELSE 'ü' END, 'v' "
              "FROM range(40)")
    s.execute(f"INSERT INTO {ref(uri)} SELECT id, 'a b', 'w' FROM range(40, 60)")
    s.execute(f"UPDATE {ref(uri)} SET v = 'u' WHERE id % 5 = 0")          # deletion vectors
    s.execute(f"DELETE FROM {ref(uri)} WHERE id > 55")
    s.execute(f"OPTIMIZE {ref(uri)}")
    s.execute(f"DELETE FROM {ref(uri)} WHERE id = 3")                      # a vector on an optimized file
    expected = isolde_rows(s, ref(uri))
    assert len(expected) == 55
    assert delta.rows(uri) == expected                                     # Delta-Spark, through S3A
    delta.sql(f"INSERT INTO {ref(uri)} VALUES (100, 'ü', 'delta')")
    delta.sql(f"UPDATE {ref(uri)} SET v = 'by delta' WHERE id = 10")
    delta.sql(f"DELETE FROM {ref(uri)} WHERE id = 11")
    after = sorted_rows([r for r in expected if r[0] != 11]
                        + [(100, "ü", "delta")])
    after = sorted_rows([(i, p, "by delta" if i == 10 else v) for i, p, v in after])
    assert isolde_rows(s, ref(uri)) == after                               # isolde reads Delta's commits
    s.execute(f"MERGE INTO {ref(uri)} t USING (SELECT 100 AS id, 'ü' AS p, 'merged' AS v) src "
              "ON t.id = src.id WHEN MATCHED THEN UPDATE SET v = src.v")
    final = sorted_rows([(i, p, "merged" if i == 100 else v) for i, p, v in after])
    assert isolde_rows(s, ref(uri)) == final and delta.rows(uri) == final
