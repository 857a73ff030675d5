"""isolde inside a user's existing Delta session: ``isolde.connect(spark=<Delta's session>)``,
and isolde statements and Delta's own ``spark.sql`` DML interleaved on one table."""

from __future__ import annotations

import pytest

from tests.helpers.reference import ref


def test_session_is_deltas_and_isoldes(spark, session):
    assert "DeltaSparkSessionExtension" in spark.conf.get("spark.sql.extensions")
    assert spark.version.startswith("4.2"), "the reference suite runs isolde on Spark 4.2"
    assert session.sql("SELECT 40 + 2 AS x").collect()[0]["x"] == 42


@pytest.mark.parametrize("dv", ["true", "false"])
def test_statements_of_both_engines_interleave_on_one_table(session, delta, table_path, dv):
    session.execute(f"CREATE TABLE t (id INT, v STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = '{dv}')")
    path = table_path(session, "t")
    session.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    delta.sql(f"UPDATE {ref(path)} SET v = 'y' WHERE id = 3")
    session.execute("UPDATE t SET v = 'z' WHERE id = 2")
    delta.sql(f"DELETE FROM {ref(path)} WHERE id = 1")
    session.execute("MERGE INTO t USING (SELECT 3 AS id, 'm' AS v UNION ALL SELECT 4, 'n') s ON t.id = s.id "
                    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    delta.sql(f"INSERT INTO {ref(path)} VALUES (5, 'e')")
    expected = [(2, "z"), (3, "m"), (4, "n"), (5, "e")]
    assert delta.rows(path) == expected
    assert sorted(tuple(r) for r in session.sql("SELECT * FROM t").collect()) == expected
    ops = [h["operation"] for h in delta.history(path)]
    assert ops == ["CREATE TABLE", "WRITE", "UPDATE", "UPDATE", "DELETE", "MERGE", "WRITE"]
