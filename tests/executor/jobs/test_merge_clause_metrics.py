"""MERGE's per-clause metrics, as Delta 4.4 records them in operationMetrics:
numTargetRowsMatchedUpdated / MatchedDeleted / NotMatchedBySourceUpdated / NotMatchedBySourceDeleted
(the reference's own values for one MERGE are asserted in tests/reference/test_interop_to_delta.py).

Table-driven over MERGE's routes: deletion vectors or copy-on-write, a point MERGE (few rows on
the driver), a partitioned table, conditions that send rows to different clauses, a source row
matching nothing, an insert-only MERGE. Expected values are counted by hand from the data:
ids 0..19, v = id, partition p = id % 2."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark

KEYS = ("numTargetRowsMatchedUpdated", "numTargetRowsMatchedDeleted", "numTargetRowsNotMatchedBySourceUpdated",
        "numTargetRowsNotMatchedBySourceDeleted")

CASES = [
    # (name, MERGE, matched updated, matched deleted, by-source updated, by-source deleted)
    ("upsert", "MERGE INTO t USING (SELECT id, 100 AS v FROM range(15, 25) AS r(id)) s ON t.id = s.id "
               "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT (id, v, p) VALUES (s.id, s.v, 0)",
     5, 0, 0, 0),
    ("point", "MERGE INTO t USING (SELECT 7 AS id) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = -1",
     1, 0, 0, 0),
    ("first true clause wins", "MERGE INTO t USING (SELECT id FROM range(0, 10) AS r(id)) s ON t.id = s.id "
                               "WHEN MATCHED AND t.id < 3 THEN DELETE WHEN MATCHED AND t.id < 8 THEN UPDATE SET v = 0",
     5, 3, 0, 0),   # ids 0-2 deleted, 3-7 updated, 8-9 under no clause
    ("by source", "MERGE INTO t USING (SELECT id FROM range(0, 5) AS r(id)) s ON t.id = s.id "
                  "WHEN MATCHED THEN DELETE "
                  "WHEN NOT MATCHED BY SOURCE AND t.id >= 15 THEN DELETE "
                  "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET v = -v",
     0, 5, 10, 5),  # 0-4 matched; 15-19 deleted by source; 5-14 updated by source
    ("insert only", "MERGE INTO t USING (SELECT id FROM range(100, 103) AS r(id)) s ON t.id = s.id "
                    "WHEN NOT MATCHED THEN INSERT (id, v, p) VALUES (s.id, 0, 1)",
     0, 0, 0, 0),
]


@pytest.mark.parametrize("layout", ["dv", "cow", "partitioned-dv"])
@pytest.mark.parametrize("name, sql, mu, md, su, sd", CASES, ids=[c[0] for c in CASES])
def test_per_clause_metrics(session, layout, name, sql, mu, md, su, sd):
    s = session
    dv = "false" if layout == "cow" else "true"
    parts = "PARTITIONED BY (p)" if layout.startswith("partitioned") else ""
    s.execute(f"CREATE TABLE t (id BIGINT, v BIGINT, p INT) {parts} "
              f"TBLPROPERTIES ('delta.enableDeletionVectors' = '{dv}')")
    s.execute("INSERT INTO t SELECT id, id, CAST(id % 2 AS INT) FROM range(20)")
    r = s.execute(sql)
    got = {k: int(r.metrics[k]) for k in KEYS}
    assert got == dict(zip(KEYS, (mu, md, su, sd)))
    # the totals are their sums, and the history records the same strings
    assert int(r.metrics["numTargetRowsUpdated"]) == mu + su
    assert int(r.metrics["numTargetRowsDeleted"]) == md + sd
    history = s.execute("DESCRIBE HISTORY t LIMIT 1").collect()[0].asDict()
    assert {k: history["operationMetrics"][k] for k in KEYS} == {k: str(v) for k, v in got.items()}
