"""SQL tables on S3 (``s3a://``): Spark's S3A connector writes and reads the data files, isolde's
S3 log store commits with a conditional PUT, deletion vectors and staged files go through pyarrow's
S3 file system -- all against a real S3-compatible server (moto's server mode, on 127.0.0.1).

The connector's JARs are fetched once per machine (``make s3a``; ``make test`` does it first).
Without them the Spark tests skip, naming the missing JARs -- unless ``ISOLDE_S3A_REQUIRED=1``
(set by ``make test``), where a missing connector fails instead of hiding the suite.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from isolde.executor.catalog.warehouse import local_location
from isolde.executor.log import table_files
from isolde.executor.runtime import s3a

from tests.helpers.meta import isolde_rows, sorted_rows
from tests.helpers.s3_server import moto_s3

BUCKET = "isolde-tables"


# ------------------------------------------------------------------ no Spark: settings and paths
@pytest.mark.parametrize("given, expected", [
    ("s3a://b/wh/t", "s3a://b/wh/t"),
    ("s3://b/wh/t/", "s3a://b/wh/t"),       # s3:// is spelled s3a://, the file system Spark has
    ("S3A://b//x/./y", "s3a://b/x/y"),
])
def test_s3_locations_are_kept_as_uris(given, expected):
    assert local_location(given) == expected


@pytest.mark.parametrize("fn, args, expected", [
    (table_files.join, ("s3a://b/t", "p=1", "f.parquet"), "s3a://b/t/p=1/f.parquet"),
    (table_files.join, ("s3a://b/t/", "", "f"), "s3a://b/t/f"),
    (table_files.absolute, ("s3a://b//t/",), "s3a://b/t"),   # never <cwd>/s3a:/b/t
    (table_files.dirname, ("s3a://b/t/f.bin",), "s3a://b/t"),
    (table_files.join, ("/w/t", "p=1", "f"), "/w/t/p=1/f"),
])
def test_table_file_paths_keep_their_scheme(fn, args, expected):
    assert fn(*args) == expected


def test_endpoint_settings_for_an_s3_compatible_server():
    got = s3a.endpoint_settings("http://127.0.0.1:9000", access_key="a", secret_key="b", bucket="bk")
    assert got["fs.s3a.bucket.bk.endpoint"] == "http://127.0.0.1:9000"
    assert got["fs.s3a.bucket.bk.connection.ssl.enabled"] == "false"
    assert got["fs.s3a.bucket.bk.path.style.access"] == "true"
    assert got["fs.s3a.bucket.bk.aws.credentials.provider"].endswith("SimpleAWSCredentialsProvider")
    assert all(k.startswith("fs.s3a.bucket.bk.") for k in got)
    assert s3a.endpoint_settings("https://minio:9000")["fs.s3a.connection.ssl.enabled"] == "true"
    assert "fs.s3a.access.key" not in s3a.endpoint_settings("https://minio:9000")


def test_no_endpoint_in_the_environment_leaves_s3a_to_aws():
    assert s3a.environment_settings({"AWS_ACCESS_KEY_ID": "x"}) == {}
    got = s3a.environment_settings({"AWS_ENDPOINT_URL_S3": "http://h:1", "AWS_ENDPOINT_URL": "http://other:2",
                                    "AWS_REGION": "eu-west-1", "AWS_SECRET_ACCESS_KEY": "sekrit"})
    assert got["fs.s3a.endpoint"] == "http://h:1" and got["fs.s3a.endpoint.region"] == "eu-west-1"
    assert "sekrit" not in json.dumps(got)  # S3A's own chain reads keys from the environment


def test_the_resolution_pom_takes_sdk_modules_not_the_bundle():
    pom = s3a.resolution_pom("3.5.0", "2.35.4", "1.3.1")
    assert "<artifactId>hadoop-aws</artifactId><version>3.5.0</version><exclusions>" in pom
    assert "bundle" not in pom
    for module in s3a.SDK_MODULES:
        assert f"<artifactId>{module}</artifactId><version>2.35.4</version>" in pom


@pytest.mark.parametrize("jar, name", [
    ("/r/netty-codec-http-4.1.126.Final.jar", "netty-codec-http"),
    ("/r/s3-2.35.4.jar", "s3"),
    ("/r/hadoop-client-api-3.5.0.jar", "hadoop-client-api"),
    ("/r/analyticsaccelerator-s3-1.3.1.jar", "analyticsaccelerator-s3"),
])
def test_artifact_names_of_jars(jar, name):
    assert s3a._artifact_name(jar) == name


# ------------------------------------------------------------------ Spark on a moto S3 server
def _connector_or_skip():
    if s3a.spark_jars():
        return
    if os.environ.get("ISOLDE_S3A_REQUIRED") == "1":
        pytest.fail("The S3A connector's JARs are not fetched (make s3a) although ISOLDE_S3A_REQUIRED=1")
    pytest.skip("the S3A connector's JARs (hadoop-aws + AWS SDK v2) are not fetched: run `make s3a`")


@pytest.fixture(scope="module")
def s3_server():
    _connector_or_skip()
    with moto_s3(BUCKET) as env:
        yield env


@pytest.fixture
def s3_session(spark, s3_server, tmp_path):
    import isolde

    from tests.helpers.s3_server import require_s3a_spark

    require_s3a_spark(spark)
    # the server's endpoint scoped to the test bucket: S3A caches one client per bucket
    s3a.apply_hadoop_settings(spark, s3a.endpoint_settings(
        s3_server["AWS_ENDPOINT_URL"], access_key=s3_server["AWS_ACCESS_KEY_ID"],
        secret_key=s3_server["AWS_SECRET_ACCESS_KEY"], bucket=BUCKET))
    s = isolde.connect(warehouse=str(tmp_path / "warehouse"), spark=spark)
    yield s
    s.close()


def _storage_options(env: dict) -> dict:
    return {"AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"], "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"], "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


def _delta_rs_rows(uri: str, env: dict) -> list[tuple]:
    """delta-rs's rows (QueryBuilder applies deletion vectors), through its own S3 client."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(uri.replace("s3a://", "s3://"), storage_options=_storage_options(env))
    table = pa.table(QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all())
    return sorted_rows(tuple(r[n] for n in table.column_names) for r in table.to_pylist())


def _keys(env: dict, prefix: str) -> list[str]:
    import boto3

    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", ())]


def _uri() -> str:
    return f"s3a://{BUCKET}/{uuid.uuid4().hex[:10]}/t"


@pytest.mark.spark
@pytest.mark.parametrize("dvs", [True, False], ids=["deletion-vectors", "copy-on-write"])
def test_dml_on_an_s3a_table(s3_session, s3_server, dvs):
    uri = _uri()
    s = s3_session
    s.execute(f"CREATE TABLE t (id INT, v STRING) USING DELTA LOCATION '{uri}' "
              f"TBLPROPERTIES ('delta.enableDeletionVectors' = '{str(dvs).lower()}')")
    s.execute("INSERT INTO t SELECT id, concat('v', id) FROM range(1, 101)")
    assert s.execute("UPDATE t SET v = 'updated' WHERE id % 10 = 0").counts["num_affected_rows"] == 10
    assert s.execute("DELETE FROM t WHERE id > 90").counts["num_affected_rows"] == 10
    merged = s.execute("MERGE INTO t USING (SELECT id, 'merged' AS v FROM range(85, 96)) src ON t.id = src.id "
                       "WHEN MATCHED THEN UPDATE SET v = src.v WHEN NOT MATCHED THEN INSERT *")
    assert merged.counts == {"num_affected_rows": 11, "num_updated_rows": 6, "num_deleted_rows": 0,
                             "num_inserted_rows": 5}
    expected = sorted_rows(
        [(i, "merged" if 85 <= i <= 95 else "updated" if i % 10 == 0 else f"v{i}") for i in range(1, 96)])
    assert isolde_rows(s, "t") == expected
    assert _delta_rs_rows(uri, s3_server) == expected  # another engine, through its own S3 client
    keys = _keys(s3_server, uri.split(f"{BUCKET}/", 1)[1])
    assert any("/_delta_log/00000000000000000004.json" in k for k in keys)
    assert any("deletion_vector_" in k for k in keys) == dvs
    assert not any(".isolde-staging-" in k or "/_temporary/" in k for k in keys)  # nothing left behind
    # time travel reads the first insert's rows back from S3
    assert isolde_rows(s, "t VERSION AS OF 1") == sorted_rows([(i, f"v{i}") for i in range(1, 101)])


@pytest.mark.spark
def test_a_multi_statement_transaction_on_s3a(s3_session, s3_server):
    """BEGIN ... COMMIT on an s3a table: one version through the conditional PUT, read back by
    delta-rs; a ROLLBACK leaves no version and deletes the files it staged on S3."""
    uri = _uri()
    s = s3_session
    s.execute(f"CREATE TABLE t (id INT, v STRING) USING DELTA LOCATION '{uri}'")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    prefix = uri.split(f"{BUCKET}/", 1)[1]
    objects_before = set(_keys(s3_server, prefix))
    s.execute("BEGIN")
    s.execute("UPDATE t SET v = 'x' WHERE id = 1")
    s.execute("INSERT INTO t VALUES (4, 'd')")
    s.execute("ROLLBACK")
    assert set(_keys(s3_server, prefix)) == objects_before
    s.execute("BEGIN")
    s.execute("UPDATE t SET v = 'x' WHERE id = 1")
    s.execute("DELETE FROM t WHERE id = 2")
    s.execute("INSERT INTO t VALUES (4, 'd')")
    assert s.execute("COMMIT").version == 2
    expected = [(1, "x"), (3, "c"), (4, "d")]
    assert isolde_rows(s, "t") == expected and _delta_rs_rows(uri, s3_server) == expected


@pytest.mark.spark
def test_awkward_partition_values_and_path_addressing_on_s3a(s3_session, s3_server):
    uri = _uri()
    s = s3_session
    s.execute(f"CREATE TABLE delta.`{uri}` (id INT, p STRING) USING DELTA PARTITIONED BY (p)")
    values = ["a b", "ü", "x=y", "日本", None]
    s.execute(f"INSERT INTO delta.`{uri}` VALUES " + ", ".join(
        f"({i}, {'NULL' if v is None else repr(v)})" for i, v in enumerate(values)))
    s.execute(f"UPDATE delta.`{uri}` SET id = id + 100 WHERE p = 'ü' OR p IS NULL")
    expected = sorted_rows([(i + 100 if v in ("ü", None) else i, v) for i, v in enumerate(values)])
    assert isolde_rows(s, f"delta.`{uri}`") == expected
    assert _delta_rs_rows(uri, s3_server) == expected


@pytest.mark.spark
def test_concurrent_writers_on_s3a_get_named_conflicts(s3_session, s3_server):
    """Two prepared UPDATEs of one row: the second to commit finds the first's version taken (the
    conditional PUT's 412), checks it and loses with Delta's named conflict (both rewrote the same
    row: ConcurrentDeleteDelete); the table holds exactly the winner's write."""
    from isolde.errors import ConcurrentDeleteDeleteException

    uri = _uri()
    s = s3_session
    s.execute(f"CREATE TABLE t (id INT, v STRING) USING DELTA LOCATION '{uri}' "
              "TBLPROPERTIES ('delta.isolationLevel' = 'Serializable')")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    first = s.prepare("UPDATE t SET v = 'first' WHERE id = 1")
    second = s.prepare("UPDATE t SET v = 'second' WHERE id = 1")
    first.commit()
    with pytest.raises(ConcurrentDeleteDeleteException) as caught:
        second.commit()
    assert type(caught.value) is ConcurrentDeleteDeleteException and caught.value.winning_version == 2
    assert isolde_rows(s, "t") == [(1, "first"), (2, "b")]
    assert _delta_rs_rows(uri, s3_server) == [(1, "first"), (2, "b")]


@pytest.mark.spark
def test_row_level_concurrency_on_s3a(s3_session, s3_server):
    """Two UPDATEs of different rows of one file, prepared together: both commit (the loser of the
    version race is checked row by row and rebased over the winner's deletion vector), and no
    update is lost."""
    uri = _uri()
    s = s3_session
    s.execute(f"CREATE TABLE t (id INT, v STRING) USING DELTA LOCATION '{uri}' "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'isolde.rowLevelConcurrency' = 'always')")
    s.execute("INSERT INTO t SELECT id, 'v' FROM range(100)")   # one file
    first = s.prepare("UPDATE t SET v = 'first' WHERE id = 7")
    second = s.prepare("UPDATE t SET v = 'second' WHERE id = 70")
    assert first.commit().version == 2
    assert second.commit().version == 3
    expected = sorted_rows([(i, "first" if i == 7 else "second" if i == 70 else "v") for i in range(100)])
    assert isolde_rows(s, "t") == expected
    assert _delta_rs_rows(uri, s3_server) == expected


@pytest.mark.spark
def test_credentials_stay_out_of_the_log_and_history(s3_session, s3_server):
    uri = _uri()
    s = s3_session
    s.execute(f"CREATE TABLE t (id INT) USING DELTA LOCATION '{uri}'")
    s.execute("INSERT INTO t VALUES (1)")
    secret = s3_server["AWS_SECRET_ACCESS_KEY"]
    history = s.execute("DESCRIBE HISTORY t").rows
    detail = s.execute("DESCRIBE DETAIL t").rows
    text = json.dumps([list(r) for r in history + detail], default=str)
    assert uri in text, text[:600]
    assert s3_server["AWS_ENDPOINT_URL"] not in text
    from isolde.executor.log.s3_store import default_s3_store

    for key in _keys(s3_server, uri.split(f"{BUCKET}/", 1)[1] + "/_delta_log/"):
        body = default_s3_store().read(f"s3a://{BUCKET}/{key}").decode()
        assert secret not in body and s3_server["AWS_ACCESS_KEY_ID"] not in body



@pytest.mark.spark
def test_maintenance_time_travel_and_change_feed_on_s3a(s3_session, s3_server):
    """OPTIMIZE / ZORDER / REORG PURGE rewrite through S3; checkpoints land beside the log; the
    change feed and time travel read old versions; RESTORE checks the files it needs exist on S3;
    CLONE copies (deep) or points at (shallow) objects; VACUUM lists the prefix and deletes only
    what no retained version needs."""
    uri, deep, shallow = _uri(), _uri(), _uri()
    s = s3_session
    s.execute(f"CREATE TABLE t (id INT, v STRING) USING DELTA LOCATION '{uri}' TBLPROPERTIES "
              "('delta.enableDeletionVectors' = 'true', 'delta.checkpointInterval' = '3', "
              "'delta.enableChangeDataFeed' = 'true')")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")      # v1
    s.execute("INSERT INTO t VALUES (4, 'd')")                          # v2
    s.execute("DELETE FROM t WHERE id = 3")                             # v3: a deletion vector; checkpoint
    assert s.execute("OPTIMIZE t").metrics["numRemovedFiles"] >= 2      # v4
    s.execute("UPDATE t SET v = 'x' WHERE id = 1")                      # v5
    s.execute("OPTIMIZE t ZORDER BY (v)")                               # v6: checkpoint
    s.execute("UPDATE t SET v = 'y' WHERE id = 2")                      # v7
    s.execute("REORG TABLE t APPLY (PURGE)")                            # v8
    now = [(1, "x"), (2, "y"), (4, "d")]
    assert isolde_rows(s, "t") == now
    keys = _keys(s3_server, uri.split(f"{BUCKET}/", 1)[1] + "/_delta_log/")
    assert {k.rsplit("/", 1)[1] for k in keys} >= {"00000000000000000003.checkpoint.parquet",
                                                    "00000000000000000006.checkpoint.parquet", "_last_checkpoint"}
    changes = s.execute("SELECT id, v, _change_type FROM table_changes('t', 3, 5)").rows
    assert sorted_rows(changes) == sorted_rows([(3, "c", "delete"), (1, "a", "update_preimage"),
                                                (1, "x", "update_postimage")])
    assert isolde_rows(s, "t VERSION AS OF 2") == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    s.execute(f"CREATE TABLE d DEEP CLONE t LOCATION '{deep}'")
    s.execute(f"CREATE TABLE c SHALLOW CLONE t LOCATION '{shallow}'")
    s.execute("RESTORE TABLE t TO VERSION AS OF 4")
    assert isolde_rows(s, "t") == [(1, "a"), (2, "b"), (4, "d")]
    s.execute("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    doomed = {r[0] for r in s.execute("VACUUM t RETAIN 0 HOURS DRY RUN").rows}
    assert doomed and all(p.startswith(uri + "/") for p in doomed)
    s.execute("VACUUM t RETAIN 0 HOURS")
    left = {f"s3a://{BUCKET}/{k}" for k in _keys(s3_server, uri.split(f"{BUCKET}/", 1)[1] + "/")}
    assert not doomed & left                                  # deleted through S3 ...
    assert isolde_rows(s, "t") == [(1, "a"), (2, "b"), (4, "d")]   # ... and never a live file
    assert _delta_rs_rows(uri, s3_server) == [(1, "a"), (2, "b"), (4, "d")]
    assert isolde_rows(s, "d") == now and _delta_rs_rows(deep, s3_server) == now
    assert not _keys(s3_server, shallow.split(f"{BUCKET}/", 1)[1] + "/part-")  # a shallow clone copies nothing
    # the shallow clone points at t's version-8 files, which VACUUM of t (retaining only v9's) took:
    # Delta's documented hazard of shallow clones; reading it fails naming the missing file
    with pytest.raises(Exception, match="(?i)not exist|not found|missing"):
        isolde_rows(s, "c")


@pytest.mark.spark
def test_a_non_empty_s3_prefix_is_refused_as_a_new_table(s3_session, s3_server):
    from isolde.errors import AnalysisError
    from isolde.executor.log.table_files import files_for

    uri = _uri()
    files_for(uri).write_bytes(f"{uri}/notes.txt", b"someone else's file")
    with pytest.raises(AnalysisError, match="not empty|notes.txt"):
        s3_session.execute(f"CREATE TABLE t USING DELTA LOCATION '{uri}' AS SELECT 1 AS id")
    assert _keys(s3_server, uri.split(f"{BUCKET}/", 1)[1] + "/") == [uri.split(f"{BUCKET}/", 1)[1] + "/notes.txt"]


@pytest.mark.spark
def test_a_warehouse_in_a_bucket(spark, s3_server):
    """``isolde.connect(warehouse="s3a://...")``: databases, managed tables, CTAS, views and DROP
    keep the catalog as objects in the bucket; nothing is written to the local disk."""
    import isolde

    s3a.apply_hadoop_settings(spark, s3a.endpoint_settings(
        s3_server["AWS_ENDPOINT_URL"], access_key=s3_server["AWS_ACCESS_KEY_ID"],
        secret_key=s3_server["AWS_SECRET_ACCESS_KEY"], bucket=BUCKET))
    warehouse = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/wh"
    before = set(os.listdir("."))
    s = isolde.connect(warehouse=warehouse, spark=spark)
    try:
        assert s.warehouse == warehouse.replace("s3://", "s3a://")
        s.execute("CREATE TABLE t (id INT, p STRING) PARTITIONED BY (p)")
        s.execute("CREATE TABLE `order lines é` (id INT, k STRING) CLUSTER BY (k)")   # a name with a space
        s.execute("INSERT INTO `order lines é` VALUES (1, 'x'), (2, 'y')")
        s.execute("INSERT INTO `order lines é` VALUES (3, 'x')")
        s.execute("OPTIMIZE `order lines é`")                                       # clustering on S3
        assert isolde_rows(s, "`order lines é`") == [(1, "x"), (2, "y"), (3, "x")]
        s.execute("INSERT INTO t VALUES (1, 'a b'), (2, 'ü'), (3, 'ü')")
        s.execute("UPDATE t SET id = 10 WHERE id = 1")
        s.execute("CREATE DATABASE sales")
        s.execute("CREATE TABLE sales.o AS SELECT * FROM t WHERE p = 'ü'")
        s.execute("CREATE VIEW big AS SELECT id FROM t WHERE id > 5")
        assert [r[0] for r in s.execute("SHOW DATABASES").rows] == ["default", "sales"]
        assert sorted(r[1] for r in s.execute("SHOW TABLES").rows) == ["big", "order lines é", "t"]
        assert s.execute("SELECT * FROM big").rows == [(10,)]
        assert isolde_rows(s, "sales.o") == [(2, "ü"), (3, "ü")]
        location = s.execute("DESCRIBE DETAIL t").rows[0][4]
        assert location == f"{s.warehouse}/default/t"
        assert _delta_rs_rows(location, s3_server) == [(2, "ü"), (3, "ü"), (10, "a b")]
        # a second session on the same bucket sees the same catalog
        other = isolde.connect(warehouse=warehouse, spark=spark)
        assert isolde_rows(other, "sales.o") == [(2, "ü"), (3, "ü")]
        other.close()
        s.execute("DROP TABLE sales.o")
        s.execute("DROP DATABASE sales")
        assert [r[0] for r in s.execute("SHOW DATABASES").rows] == ["default"]
        prefix = s.warehouse.split(f"{BUCKET}/", 1)[1]
        assert not [k for k in _keys(s3_server, prefix + "/sales")]   # the database's objects are gone
    finally:
        s.close()
    assert set(os.listdir(".")) == before   # no local folder named after the URI (s3a:/...)


@pytest.mark.spark
def test_a_transaction_over_two_coordinated_tables_in_a_bucket(spark, s3_server):
    """The commit coordinator on S3: its entries are objects written by conditional PUT in the
    warehouse's bucket; a transfer over two coordinated tables is one entry and one version per
    table, which delta-rs reads through its own client; two sessions' prepared INSERTs race for
    the next entry and both land, one after the other."""
    import isolde

    s3a.apply_hadoop_settings(spark, s3a.endpoint_settings(
        s3_server["AWS_ENDPOINT_URL"], access_key=s3_server["AWS_ACCESS_KEY_ID"],
        secret_key=s3_server["AWS_SECRET_ACCESS_KEY"], bucket=BUCKET))
    s = isolde.connect(warehouse=f"s3a://{BUCKET}/{uuid.uuid4().hex[:8]}/wh", spark=spark)
    other = isolde.connect(warehouse=s.warehouse, spark=spark)
    try:
        props = "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'isolde.coordinatedCommits' = 'true')"
        s.execute(f"CREATE TABLE acc (id INT, bal INT) {props}")
        s.execute(f"CREATE TABLE audit (transfer STRING, amount INT) {props}")
        s.execute("INSERT INTO acc VALUES (1, 100), (2, 100)")  # entry 1 (the CREATEs are direct)
        result = s.execute("BEGIN ATOMIC UPDATE acc SET bal = bal - 10 WHERE id = 1; "
                           "UPDATE acc SET bal = bal + 10 WHERE id = 2; INSERT INTO audit VALUES ('t1', 10); END")
        assert result.versions == {"acc": 2, "audit": 1}
        prefix = s.warehouse.split(f"{BUCKET}/", 1)[1] + "/_isolde_coordinator/log/"
        assert [k.rsplit("/", 1)[1] for k in _keys(s3_server, prefix)] == [f"{n:020d}.json" for n in (1, 2)]
        p1 = s.prepare("INSERT INTO audit VALUES ('a', 1)")
        p2 = other.prepare("INSERT INTO audit VALUES ('b', 2)")
        assert sorted([p1.commit().version, p2.commit().version]) == [2, 3]
        assert len(_keys(s3_server, prefix)) == 4
        location = s.execute("DESCRIBE DETAIL audit").rows[0][4]
        assert _delta_rs_rows(location, s3_server) == [("a", 1), ("b", 2), ("t1", 10)]
        assert _delta_rs_rows(s.execute("DESCRIBE DETAIL acc").rows[0][4], s3_server) == [(1, 90), (2, 110)]
        assert isolde_rows(other, "acc") == [(1, 90), (2, 110)]
    finally:
        other.close()
        s.close()


@pytest.mark.spark
def test_streaming_from_and_into_s3a_tables(s3_session, s3_server, tmp_path):
    """The streaming source reads an s3a table's snapshot and its later commits (a deletion
    vector's rows left out); the exactly-once sink writes into another s3a table and skips a
    replayed batch."""
    from isolde.executor import streaming

    src, dst = _uri(), _uri()
    s = s3_session
    s.execute(f"CREATE TABLE src (id BIGINT) USING DELTA LOCATION '{src}' "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    s.execute(f"CREATE TABLE dst (id BIGINT) USING DELTA LOCATION '{dst}'")
    s.execute("INSERT INTO src SELECT id FROM range(10)")
    s.execute("DELETE FROM src WHERE id < 3")   # a deletion vector: the snapshot has 7 rows
    ckpt = str(tmp_path / "ckpt")

    def run_once():
        df = streaming.read_stream(s, "src")
        writer = streaming.write_batches(s, "dst", checkpoint=ckpt)
        query = df.writeStream.foreachBatch(writer).option("checkpointLocation", ckpt) \
            .trigger(availableNow=True).start()
        query.awaitTermination(120)
        assert query.exception() is None
        return writer

    run_once()
    s.execute("INSERT INTO src VALUES (100), (101)")
    run_once()
    assert isolde_rows(s, "dst") == [(i,) for i in [*range(3, 10), 100, 101]]
    replay = streaming.write_batches(s, "dst", app_id="replayed")
    batch = s.spark.createDataFrame([(7,)], "id BIGINT")
    replay(batch, 0)
    replay(batch, 0)
    assert replay.committed == [0] and replay.skipped == [0]
    assert _delta_rs_rows(dst, s3_server) == sorted_rows([(i,) for i in [*range(3, 10), 100, 101, 7]])


@pytest.mark.spark
def test_a_log_of_more_than_a_thousand_versions_on_s3(s3_session, s3_server):
    """Past the first ListObjectsV2 page: 1,100 commits and no checkpoint make a load list the
    whole log (two pages); after a checkpoint a load lists from ``_last_checkpoint`` on (one short
    listing), reads the same table, and time travel below the checkpoint still works."""
    import time as _time
    from concurrent.futures import ThreadPoolExecutor

    from isolde.executor.catalog.warehouse import forget_log
    from isolde.executor.log import DeltaLog
    from isolde.executor.log.s3_store import default_s3_store

    uri = _uri()
    s = s3_session
    s.execute(f"CREATE TABLE t (id INT) USING DELTA LOCATION '{uri}' "
              "TBLPROPERTIES ('delta.checkpointInterval' = '100000')")
    s.execute("INSERT INTO t VALUES (1), (2), (3)")
    store = default_s3_store()

    def commit(version: int) -> None:  # a commit holding only its commitInfo, as Delta allows
        info = {"timestamp": int(_time.time() * 1000), "operation": "SET TBLPROPERTIES",
                "operationParameters": {"properties": "{}"}, "readVersion": version - 1, "isBlindAppend": True}
        store.put_if_absent(f"{uri}/_delta_log/{version:020d}.json", json.dumps({"commitInfo": info}).encode())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(commit, range(2, 1102)))

    lists = []
    store.client.meta.events.register("before-call.s3.ListObjectsV2", lambda **kw: lists.append(kw))
    forget_log(uri)
    assert DeltaLog.for_table(uri).update().version == 1101
    assert len(lists) >= 2  # no _last_checkpoint: the whole log, page after page
    assert isolde_rows(s, "t") == [(1,), (2,), (3,)]
    assert isolde_rows(s, "t VERSION AS OF 1050") == [(1,), (2,), (3,)]
    s.execute("ALTER TABLE t SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")   # v1102, checkpointed
    assert s.execute("UPDATE t SET id = id * 10 WHERE id = 2").version == 1103
    forget_log(uri)
    lists.clear()
    snap = DeltaLog.for_table(uri).update()
    assert snap.version == 1103 and len(lists) <= 1   # from _last_checkpoint on: one listing at most
    assert isolde_rows(s, "t") == [(1,), (3,), (20,)]
    assert isolde_rows(s, "t VERSION AS OF 1101") == [(1,), (2,), (3,)]
    assert _delta_rs_rows(uri, s3_server) == [(1,), (3,), (20,)]


_KILLED_WRITER = """
import sys, threading, time, isolde
from isolde.executor.txn import transaction as T

uri, warehouse, moment = sys.argv[1:4]
real_write = T.OptimisticTransaction._write_commit

def write(self, version, body):
    real_write(self, version, body)
    if moment == "after-commit":
        print("committed", flush=True); time.sleep(600)

T.OptimisticTransaction._write_commit = write
s = isolde.connect(warehouse=warehouse, master="local[1]")
s.execute("SELECT 1").collect()   # Spark is up before the clock starts
if moment == "while-writing":   # killed part-way through Spark's write of the data files
    threading.Timer(1.5, lambda: print("writing", flush=True)).start()
    s.execute(f"INSERT INTO delta.`{uri}` SELECT id, repeat('x', 200) AS pad FROM range(1000, 3000000)")
elif moment == "after-writing":
    s.prepare(f"INSERT INTO delta.`{uri}` SELECT id, 'p' AS pad FROM range(1000, 1100)")
    print("prepared", flush=True)   # its data files are in the table's prefix, its commit not yet made
else:
    s.execute(f"INSERT INTO delta.`{uri}` SELECT id, 'c' AS pad FROM range(1000, 1100)")
time.sleep(600)
"""


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("moment, signal_word", [("while-writing", "writing"), ("after-writing", "prepared"),
                                                 ("after-commit", "committed")])
def test_a_killed_writer_leaves_the_table_intact_and_vacuum_takes_its_files(
        s3_session, s3_server, tmp_path, moment, signal_word):
    """A writer process (its own JVM) SIGKILLed while Spark writes its data files to S3, between
    writing and committing, or just after its commit landed: the table loads at its last version
    (with the killed write's rows only when its commit landed); the files it left are orphans
    that no version references, and VACUUM deletes exactly those."""
    import signal
    import subprocess
    import sys

    uri = _uri()
    s = s3_session
    s.execute(f"CREATE TABLE delta.`{uri}` (id BIGINT, pad STRING) USING DELTA")
    s.execute(f"INSERT INTO delta.`{uri}` SELECT id, 'a' AS pad FROM range(10)")
    prefix = uri.split(f"{BUCKET}/", 1)[1] + "/"
    live = set(_keys(s3_server, prefix))
    env = dict(os.environ, ISOLDE_JVM="startup", ISOLDE_DRIVER_MEMORY="1g", SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, uri, str(tmp_path / "wh"), moment], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == signal_word
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
    committed = moment == "after-commit"
    expected = sorted([(i, "a") for i in range(10)] + ([(i, "c") for i in range(1000, 1100)] if committed else []))
    assert sorted(tuple(r) for r in s.execute(f"SELECT id, pad FROM delta.`{uri}`").rows) == expected
    assert s.execute(f"DESCRIBE HISTORY delta.`{uri}`").rows[0][0] == (2 if committed else 1)
    assert sorted(_delta_rs_rows(uri, s3_server)) == expected
    left = set(_keys(s3_server, prefix)) - live
    if moment == "after-writing":
        assert any(k.endswith(".parquet") for k in left)   # the killed write's files are there
    s.execute("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    s.execute(f"VACUUM delta.`{uri}` RETAIN 0 HOURS")
    after = set(_keys(s3_server, prefix))
    from isolde.executor.log import DeltaLog

    referenced = {f.path for f in DeltaLog.for_table(uri).update().all_files}
    data_after = {k.rsplit("/", 1)[1] for k in after if k.endswith(".parquet")}
    assert data_after == {p.rsplit("/", 1)[-1] for p in referenced}   # orphans gone, every live file kept
    assert sorted(tuple(r) for r in s.execute(f"SELECT id, pad FROM delta.`{uri}`").rows) == expected


@pytest.mark.spark
def test_throttling_and_a_lost_commit_answer_on_s3a(spark, s3_server, tmp_path, monkeypatch):
    """Through a proxy that answers every 7th request of isolde's own S3 client with 503 SlowDown
    (Spark's S3A passes untouched) and drops the answer of the first commit PUT after S3 applied
    it: every statement still succeeds exactly once (the lost
    commit is read back and recognised as this writer's own, never committed twice nor reported
    failed), versions have no gap or duplicate, and the rows are right."""
    import boto3

    import isolde
    from tests.helpers.s3_server import FaultProxy

    bucket = "isolde-faults"
    boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL"], region_name="us-east-1").create_bucket(
        Bucket=bucket)
    proxy = FaultProxy(s3_server["AWS_ENDPOINT_URL"], throttle_every=7, lose_commit=True).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)   # isolde's log store and file access
        s3a.apply_hadoop_settings(spark, s3a.endpoint_settings(    # Spark's S3A, for this bucket
            proxy.endpoint, access_key=s3_server["AWS_ACCESS_KEY_ID"],
            secret_key=s3_server["AWS_SECRET_ACCESS_KEY"], bucket=bucket))
        s = isolde.connect(warehouse=str(tmp_path / "wh"), spark=spark)
        uri = f"s3a://{bucket}/{uuid.uuid4().hex[:8]}/t"
        statements = [
            f"CREATE TABLE t (id BIGINT, v STRING) USING DELTA LOCATION '{uri}' "
            "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
            "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
            "INSERT INTO t SELECT id, 'r' FROM range(10, 60)",
            "UPDATE t SET v = 'u' WHERE id % 10 = 0",
            "DELETE FROM t WHERE id > 50",
            "MERGE INTO t USING (SELECT 2 AS id, 'm' AS v) src ON t.id = src.id WHEN MATCHED THEN UPDATE SET *",
        ]
        for sql in statements:
            s.execute(sql)
        history = s.execute("DESCRIBE HISTORY t").rows
        assert sorted(r[0] for r in history) == list(range(len(statements)))   # one version each
        expected = sorted_rows([(1, "a"), (2, "m")] + [(i, "u" if i % 10 == 0 else "r") for i in range(10, 51)])
        assert isolde_rows(s, "t") == expected
        s.close()
    finally:
        proxy.stop()
    assert proxy.counts["lost"] == 1 and proxy.counts["throttled"] > 0, proxy.counts
