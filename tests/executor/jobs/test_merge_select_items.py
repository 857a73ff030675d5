"""A deletion-vector MERGE's pass 1 gives each column its value after the acting clause as a SQL
select item (``acting_sql``) where every assignment sets a whole column of a type with a plain
CAST spelling, and as Columns built over py4j (``acting_value``) otherwise. Differential: the
same MERGEs over two copies of the same table (deletion vectors, rows deleted before), one with
the SQL items and one with the Columns forced, leave the same rows (isolde's read and
delta-rs's) and report the same counts. A MERGE assigning a nested field (the Column path) is
checked against values written out by hand."""

from __future__ import annotations

import pytest

from isolde.executor.jobs import merge as M

pytestmark = pytest.mark.spark

FLAT = ("id BIGINT, b BOOLEAN, ti TINYINT, sm SMALLINT, i INT, d DOUBLE, f FLOAT, dec DECIMAL(12,3), "
        "txt STRING, bin BINARY, dt DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ")
# NULL every seventh row of each column (not the key): assignments meet NULLs too
VALUES = ("id, IF(id % 7 = 1, NULL, id % 2 = 0), IF(id % 7 = 2, NULL, CAST(id % 100 AS TINYINT)), "
          "CAST(id * 3 AS SMALLINT), IF(id % 7 = 3, NULL, CAST(id * {m} AS INT)), id / 4.0D, CAST(id / 8.0 AS FLOAT), "
          "CAST(id * 1.125 AS DECIMAL(12,3)), IF(id % 7 = 4, NULL, concat('r', id, '{tag}')), "
          "CAST(concat('b', id) AS BINARY), date_add(DATE'2024-01-01', CAST(id AS INT)), "
          "TIMESTAMP'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, CAST(id AS INT), 0), "
          "TIMESTAMP_NTZ'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, CAST(id AS INT), 0, 0)")

MERGES = [
    # upsert with a conditional DELETE first
    "MERGE INTO t USING src s ON t.id = s.id WHEN MATCHED AND s.i % 3 = 0 THEN DELETE "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    # expressions over both sides, casts into narrower and wider types, two update clauses
    "MERGE INTO t USING src s ON t.id = s.id WHEN MATCHED AND t.b THEN UPDATE SET i = s.i + 1, "
    "txt = concat(t.txt, '+', s.txt), dec = t.dec * 2, d = s.i, sm = 5, ntz = s.ntz "
    "WHEN MATCHED THEN UPDATE SET b = NOT coalesce(t.b, false), f = s.d, bin = s.bin, dt = s.dt",
    # NOT MATCHED BY SOURCE clauses (a left join of the target) beside matched ones
    "MERGE INTO t USING src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET ts = s.ts, ti = s.ti "
    "WHEN NOT MATCHED BY SOURCE AND t.id % 4 = 0 THEN DELETE "
    "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET txt = 'gone', i = NULL",
]


def _table(session, name: str) -> None:
    session.execute(f"CREATE TABLE {name} ({FLAT}) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    session.execute(f"INSERT INTO {name} SELECT {VALUES.format(m=1, tag='')} FROM range(0, 400, 1, 2)")
    session.execute(f"DELETE FROM {name} WHERE id % 5 = 0")  # deleted rows: vectors in both files
    session.execute(f"UPDATE {name} SET txt = 'u' WHERE id % 11 = 0")


@pytest.mark.parametrize("statement", range(len(MERGES)))
def test_select_items_and_columns_give_the_same_merge(session, spark, delta_rows, table_path, monkeypatch, statement):
    names = ", ".join(c.split()[0] for c in FLAT.split(", "))
    spark.sql(f"SELECT * FROM (SELECT {VALUES.format(m=7, tag='s')} FROM range(200, 600, 1, 2)) AS x({names})"
              ).createOrReplaceTempView("src")
    results = {}
    real = M._plain_type_sql
    for mode in ("sql", "columns"):
        # the Columns path: no type has a plain spelling (the insert pass takes Columns too);
        # the spy records what the MERGE was told
        seen = []
        base = real if mode == "sql" else (lambda dt: None)

        def spy(dt, base=base, seen=seen):
            seen.append(base(dt))
            return seen[-1]

        monkeypatch.setattr(M, "_plain_type_sql", spy)
        name = f"t_{mode}"
        _table(session, name)
        sql = MERGES[statement].replace("MERGE INTO t ", f"MERGE INTO {name} AS t ")
        metrics = session.execute(sql).metrics
        rows = session.execute(f"SELECT * FROM {name} ORDER BY id").rows
        results[mode] = (metrics, [tuple(r) for r in rows], delta_rows(table_path(session, name)))
        # the mode did what it says: every column spelled in SQL, or none
        assert seen and (all(x is not None for x in seen) if mode == "sql" else all(x is None for x in seen))
    (m_sql, rows_sql, drs_sql), (m_col, rows_col, drs_col) = results["sql"], results["columns"]
    for key in ("numTargetRowsUpdated", "numTargetRowsDeleted", "numTargetRowsInserted"):
        assert m_sql[key] == m_col[key], key
    assert m_sql["numTargetRowsUpdated"] + m_sql["numTargetRowsDeleted"] > 0
    assert rows_sql == rows_col
    assert drs_sql == drs_col
    assert len(drs_sql) == len(rows_sql)


def test_a_nested_field_assignment_keeps_the_columns_path(session, spark, delta_rows, table_path):
    session.execute("CREATE TABLE n (id BIGINT, st STRUCT<a: INT, b: STRING>, arr ARRAY<INT>, v INT) "
                    "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    session.execute("INSERT INTO n SELECT id, named_struct('a', CAST(id AS INT), 'b', concat('o', id)), "
                    "array(CAST(id AS INT)), CAST(id AS INT) FROM range(0, 10)")
    session.execute("DELETE FROM n WHERE id = 4")
    spark.sql("SELECT id, CAST(id * 10 AS INT) AS v FROM range(3, 13)").createOrReplaceTempView("nsrc")
    m = session.execute("MERGE INTO n AS t USING nsrc s ON t.id = s.id "
                        "WHEN MATCHED THEN UPDATE SET t.st.a = s.v, v = s.v "
                        "WHEN NOT MATCHED THEN INSERT (id, st, arr, v) "
                        "VALUES (s.id, named_struct('a', s.v, 'b', 'new'), array(s.v), s.v)").metrics
    assert (m["numTargetRowsUpdated"], m["numTargetRowsInserted"]) == (6, 4)  # id 4 deleted: inserted
    want = []
    for i in range(13):
        if i < 3:
            want.append((i, (i, f"o{i}"), [i], i))
        elif i == 4 or i >= 10:
            want.append((i, (i * 10, "new"), [i * 10], i * 10))
        else:
            want.append((i, (i * 10, f"o{i}"), [i], i * 10))
    got = [(r[0], (r[1], r[2]), list(r[3]), r[4])
           for r in session.execute("SELECT id, st.a, st.b, arr, v FROM n ORDER BY id").rows]
    assert got == want
    assert [r[0] for r in delta_rows(table_path(session, "n"), ["id"])] == list(range(13))
