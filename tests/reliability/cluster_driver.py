"""A driver process for test_cluster.py: an isolde session on a Spark standalone master.

    python cluster_driver.py scenarios WAREHOUSE MASTER OUT_JSON
        DML and conflicts on the cluster; writes what happened as JSON.
    python cluster_driver.py churn WAREHOUSE MASTER OUT_LINES SEED
        increments counters and inserts rows until killed; every commit is tagged through
        commitInfo.userMetadata (so the log says which statement made it even when the driver
        dies before it can report) and reported as ``ok <tag> <version>`` once committed.
"""

from __future__ import annotations

import json
import random
import sys


def _connect(warehouse: str, master: str):
    import isolde

    return isolde.connect(warehouse=warehouse, master=master,
                          conf={"spark.executor.memory": "512m", "spark.cores.max": "2"})


def _executors(s) -> int:
    """Executors registered with the driver, the driver itself not counted."""
    return s.spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1


def scenarios(warehouse: str, master: str, out_path: str) -> None:
    from isolde import errors as E

    s = _connect(warehouse, master)
    out: dict = {"master": s.spark.sparkContext.master}
    s.execute("CREATE TABLE t (id BIGINT, v STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    s.execute("INSERT INTO t SELECT id, 'x' FROM range(0, 2000, 1, 4)")  # four files, written by executors
    out["executors"] = _executors(s)
    out["update"] = s.execute("UPDATE t SET v = 'u' WHERE id % 100 = 0").first().num_affected_rows
    out["delete"] = s.execute("DELETE FROM t WHERE id >= 1990").first().num_affected_rows
    merge = s.execute("MERGE INTO t USING (SELECT id, 'm' AS v FROM range(1985, 1995)) s ON t.id = s.id "
                      "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *").first()
    out["merge"] = [merge.num_updated_rows, merge.num_inserted_rows]
    # conflicts decided on the driver while the data work ran on the executors
    def race(loser: str, winner: str) -> str:
        """``loser`` prepared, ``winner`` committed, then ``loser`` commits: what happens."""
        prepared = s.prepare(loser)
        s.execute(winner)
        try:
            prepared.commit()
            return "committed"
        except E.ConcurrentModificationException as e:
            return type(e).__name__

    out["conflicts"] = {
        "same row": race("DELETE FROM t WHERE id = 5", "UPDATE t SET v = 'w' WHERE id = 5"),
        "different rows": race("UPDATE t SET v = 'b' WHERE id = 7", "UPDATE t SET v = 'c' WHERE id = 8"),
        "metadata change": race("INSERT INTO t VALUES (5000, 'i')", "ALTER TABLE t SET TBLPROPERTIES ('team' = 'x')"),
    }
    out["rows"] = [list(r) for r in s.sql("SELECT v, count(*) FROM t GROUP BY v ORDER BY v").collect()]
    out["version"] = s.execute("DESCRIBE HISTORY t").first().version
    with open(out_path, "w") as fh:
        json.dump(out, fh)
    s.close()


def churn(warehouse: str, master: str, out_path: str, seed: int) -> None:
    from isolde.errors import ConcurrentModificationException, TableAlreadyExistsError

    s = _connect(warehouse, master)
    try:
        s.execute("CREATE TABLE c (id INT, n INT)")
        s.execute("INSERT INTO c SELECT CAST(id AS INT), 0 FROM range(10)")
    except TableAlreadyExistsError:
        pass
    rng = random.Random(seed)
    with open(out_path, "a", buffering=1) as out:
        out.write("ready\n")
        seq = 0
        while True:
            seq += 1
            if rng.random() < 0.8:
                k = rng.randrange(10)
                tag, sql = f"inc:{k}:{seed}-{seq}", f"UPDATE c SET n = n + 1 WHERE id = {k}"
            else:
                k = 1000 * seed + seq
                tag, sql = f"add:{k}:{seed}-{seq}", f"INSERT INTO c VALUES ({k}, 0)"
            s.execute(f"SET spark.databricks.delta.commitInfo.userMetadata = '{tag}'")
            out.write(f"start {tag}\n")
            try:
                r = s.execute(sql)
            except ConcurrentModificationException as e:
                out.write(f"conflict {tag} {type(e).__name__}\n")
                continue
            out.write(f"ok {tag} {r.version}\n")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "scenarios":
        scenarios(*sys.argv[2:5])
    else:
        churn(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
