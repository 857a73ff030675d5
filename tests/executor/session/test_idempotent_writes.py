"""Idempotent batch writes (executor/session/idempotency.py, executor/session/df_writer.py): Delta's txnAppId /
txnVersion as session settings for SQL and as DataFrame-writer options. A write whose version
is not above the table's recorded one is skipped; the commit carries the txn action (delta-rs
reads it back); two writers with one application id conflict."""

from __future__ import annotations

import json
import os

import pytest
from deltalake import DeltaTable

from isolde.errors import AnalysisError, ConcurrentTransactionException

pytestmark = pytest.mark.spark

APP, VER, RESET = ("spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion",
                   "spark.databricks.delta.write.txnVersion.autoReset.enabled")


def _ids(session, table="t"):
    return sorted(r[0] for r in session.sql(f"SELECT id FROM {table}").collect())


def _version(session, table_path, table="t"):
    return DeltaTable(table_path(session, table)).version()


def _txn_actions(path, version):
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        return [json.loads(line)["txn"] for line in fh if '"txn"' in line]


@pytest.fixture
def t(session):
    session.execute("CREATE TABLE t (id INT, v STRING)")
    session.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    return session


# statement, ids afterwards when it runs once
STATEMENTS = [
    ("INSERT INTO t VALUES (10, 'x')", [1, 2, 3, 10]),
    ("UPDATE t SET id = id + 100 WHERE id = 1", [2, 3, 101]),
    ("DELETE FROM t WHERE id = 2", [1, 3]),
    ("MERGE INTO t USING (SELECT 3 AS id, 'z' AS v UNION ALL SELECT 20, 'n') s ON t.id = s.id "
     "WHEN MATCHED THEN UPDATE SET id = t.id + 1000 WHEN NOT MATCHED THEN INSERT *", [1, 2, 20, 1003]),
]


@pytest.mark.parametrize("sql,after", STATEMENTS, ids=[s.split()[0] for s, _ in STATEMENTS])
def test_a_sql_write_with_a_recorded_version_is_skipped(t, table_path, sql, after):
    path = table_path(t, "t")
    t.execute(f"SET {APP} = nightly")
    t.execute(f"SET {VER} = 5")
    first = t.execute(sql)
    assert _ids(t) == after
    assert _txn_actions(path, first.version)[0]["appId"] == "nightly"
    assert _txn_actions(path, first.version)[0]["version"] == 5
    assert DeltaTable(path).transaction_version("nightly") == 5  # delta-rs reads the txn action
    again = t.execute(sql)  # the retry of a write that already committed
    assert again.version == first.version and again.first().num_affected_rows == 0
    assert _ids(t) == after and _version(t, table_path) == first.version
    t.execute(f"SET {VER} = 4")  # an older version of the same application: skipped as well
    assert t.execute(sql).version == first.version
    t.execute(f"SET {VER} = 6")
    assert t.execute("INSERT INTO t VALUES (99, 'y')").version == first.version + 1
    assert 99 in _ids(t)
    t.execute(f"SET {APP} = other")  # another application id writes at any version
    t.execute(f"SET {VER} = 1")
    assert t.execute("INSERT INTO t VALUES (98, 'y')").version == first.version + 2


def test_half_an_identity_or_a_bad_version_is_refused_and_writes_nothing(t, table_path):
    before = _version(t, table_path)
    t.execute(f"SET {APP} = job")
    with pytest.raises(AnalysisError) as err:
        t.execute("INSERT INTO t VALUES (7, 'q')")
    assert err.value.error_class == "DELTA_INVALID_IDEMPOTENT_WRITES_OPTIONS"
    t.execute(f"SET {VER} = -3")
    with pytest.raises(AnalysisError, match="non-negative"):
        t.execute("DELETE FROM t WHERE id = 1")
    t.execute(f"SET {VER} = seven")
    with pytest.raises(AnalysisError, match="whole number"):
        t.execute("UPDATE t SET v = 'w'")
    assert _version(t, table_path) == before and _ids(t) == [1, 2, 3]


def test_auto_reset_unsets_the_version_after_each_write(t):
    t.execute(f"SET {APP} = job")
    t.execute(f"SET {VER} = 1")
    t.execute(f"SET {RESET} = true")
    t.execute("INSERT INTO t VALUES (4, 'd')")
    assert t.conf.get(VER) is None and t.conf.get(APP) == "job"
    with pytest.raises(AnalysisError) as err:  # Delta's behaviour: the app id alone is refused
        t.execute("INSERT INTO t VALUES (5, 'e')")
    assert err.value.error_class == "DELTA_INVALID_IDEMPOTENT_WRITES_OPTIONS"
    t.execute(f"RESET {APP}")
    t.execute("INSERT INTO t VALUES (5, 'e')")  # no identity at all: a plain write
    assert _ids(t) == [1, 2, 3, 4, 5]


def test_statements_that_are_not_data_writes_ignore_the_settings(t, table_path):
    t.execute(f"SET {APP} = job")
    t.execute(f"SET {VER} = 1")
    t.execute("ALTER TABLE t SET TBLPROPERTIES ('a.b' = 'c')")
    t.execute("OPTIMIZE t")
    path = table_path(t, "t")
    assert all(not _txn_actions(path, v) for v in range(_version(t, table_path) + 1))


def test_two_writers_with_one_application_id_conflict(t, table_path):
    t.execute(f"SET {APP} = job")
    t.execute(f"SET {VER} = 1")
    first = t.prepare("INSERT INTO t VALUES (11, 'p')")
    t.execute(f"SET {VER} = 2")
    second = t.prepare("INSERT INTO t VALUES (12, 'q')")
    first.commit()
    with pytest.raises(ConcurrentTransactionException):
        second.commit()
    assert _ids(t) == [1, 2, 3, 11]
    assert DeltaTable(table_path(t, "t")).transaction_version("job") == 1
    # the retry of the loser, as a new statement, now commits on top
    assert t.execute("INSERT INTO t VALUES (12, 'q')").first().num_inserted_rows == 1
    assert _ids(t) == [1, 2, 3, 11, 12]


def test_prepare_of_a_recorded_write_commits_nothing(t, table_path):
    t.execute(f"SET {APP} = job")
    t.execute(f"SET {VER} = 1")
    t.execute("INSERT INTO t VALUES (11, 'p')")
    before = _version(t, table_path)
    prepared = t.prepare("INSERT INTO t VALUES (11, 'p')")
    assert prepared.staged_paths == []
    assert prepared.commit().version == before
    assert _version(t, table_path) == before and _ids(t) == [1, 2, 3, 11]


def test_dataframe_writer_options_are_idempotent_and_win_over_the_session(session, spark, table_path):
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id INT, v STRING")
    session.execute(f"SET {APP} = session-app")
    session.execute(f"SET {VER} = 100")
    w = session.write(df).format("delta").mode("append").option("txnAppId", "loader").option("txnVersion", 1)
    created = w.saveAsTable("t")  # a missing table: created by the write, with the txn action
    assert _ids(session) == [1, 2]
    path = table_path(session, "t")
    assert _txn_actions(path, created.version) == [{"appId": "loader", "version": 1,
                                                    "lastUpdated": _txn_actions(path, created.version)[0]["lastUpdated"]}]
    assert w.saveAsTable("t").version == created.version  # the retry: nothing written
    assert _ids(session) == [1, 2]
    session.write(df).mode("append").options(txnAppId="loader", txnVersion=2, userMetadata="batch 2").saveAsTable("t")
    assert _ids(session) == [1, 1, 2, 2]
    assert DeltaTable(path).history(1)[0]["userMetadata"] == "batch 2"
    assert DeltaTable(path).transaction_version("loader") == 2
    assert DeltaTable(path).transaction_version("session-app") is None  # the options won
    session.write(df.where("id = 1")).mode("overwrite").option("replaceWhere", "id = 1") \
        .option("txnAppId", "loader").option("txnVersion", 3).saveAsTable("t")
    assert _ids(session) == [1, 2, 2]
    session.write(df).mode("overwrite").option("txnAppId", "loader").option("txnVersion", 3).saveAsTable("t")
    assert _ids(session) == [1, 2, 2]  # version 3 again: skipped, so not overwritten
    with pytest.raises(AnalysisError, match="already exists"):
        session.write(df).saveAsTable("t")
    assert session.write(df).mode("ignore").saveAsTable("t") is None
    with pytest.raises(AnalysisError, match="Unknown option"):
        session.write(df).option("txnAppID2", "x")


def test_dataframe_writer_by_path(session, spark, tmp_path, delta_rows):
    df = spark.createDataFrame([(1, "a")], "id INT, v STRING")
    path = str(tmp_path / "by_path")
    session.write(df).mode("append").option("txnAppId", "p").option("txnVersion", 0).save(path)
    session.write(df).mode("append").option("txnAppId", "p").option("txnVersion", 0).save(path)
    assert delta_rows(path) == [(1, "a")]
    assert DeltaTable(path).transaction_version("p") == 0


def test_dataframe_writer_merge_schema_adds_the_new_columns(t, spark, table_path):
    """``option("mergeSchema", "true")``: the DataFrame's new column joins the table (older rows
    read NULL); without it the write is refused and nothing changes."""
    df = spark.createDataFrame([(4, "d", 1.5)], "id INT, v STRING, score DOUBLE")
    with pytest.raises(AnalysisError):
        t.write(df).mode("append").saveAsTable("t")
    t.write(df).mode("append").option("mergeSchema", "true").saveAsTable("t")
    assert sorted(map(tuple, t.sql("SELECT * FROM t").collect())) == \
        [(1, "a", None), (2, "b", None), (3, "c", None), (4, "d", 1.5)]
    assert DeltaTable(table_path(t, "t")).schema().fields[-1].name == "score"  # delta-rs reads the new schema
