"""Parse speed: isolde.parse vs sqlglot.parse(read="databricks"), per statement kind.

    .venv/bin/python benchmarks/parse.py [--seconds 0.1] [--rounds 5]

Each kind is parsed the same number of times by both (about ``--seconds`` of CPU for
the slower side per round; best of ``--rounds`` interleaved rounds, CPU time); the
table shows statements/second and isolde/sqlglot (>1 means isolde is faster). "n/a"
where sqlglot raises on the statement. Note that sqlglot's speed on OPTIMIZE, VACUUM,
UNSET/SHOW TBLPROPERTIES and DROP FEATURE is that of its opaque ``Command`` fallback
(it keeps the text and parses nothing), not of a real parse.
"""

from __future__ import annotations

import argparse
import logging
import time

import sqlglot

import isolde

MERGE_20 = """
MERGE INTO sales.orders AS t
USING (
  SELECT o.order_id, o.customer_id, o.status, o.amount, o.updated_at, c.region
  FROM staging.orders_delta o
  JOIN sales.customers c ON c.customer_id = o.customer_id
  WHERE o.batch_id = 42
) AS s
ON t.order_id = s.order_id AND t.region = s.region
WHEN MATCHED AND s.status = 'cancelled' THEN DELETE
WHEN MATCHED AND s.updated_at > t.updated_at THEN
  UPDATE SET t.status = s.status,
             t.amount = s.amount,
             t.updated_at = s.updated_at
WHEN MATCHED THEN UPDATE SET t.seen_count = t.seen_count + 1
WHEN NOT MATCHED AND s.status <> 'cancelled' THEN
  INSERT (order_id, customer_id, status, amount, updated_at, region)
  VALUES (s.order_id, s.customer_id, s.status, s.amount, s.updated_at, s.region)
WHEN NOT MATCHED BY SOURCE AND t.updated_at < '2020-01-01' THEN DELETE
WHEN NOT MATCHED BY SOURCE THEN UPDATE SET t.active = false
"""

CORPUS = {
    "select": "SELECT id, name, amount * 1.2 AS gross FROM sales.orders o JOIN sales.customers c "
    "ON o.customer_id = c.id WHERE o.status = 'open' AND o.amount > 100 ORDER BY gross DESC LIMIT 50",
    "select time travel": "SELECT * FROM delta.`/data/orders` VERSION AS OF 12 o JOIN customers "
    "TIMESTAMP AS OF '2024-01-01' c ON o.cid = c.id",
    "insert values": "INSERT INTO sales.orders VALUES (1, 'open', 10.5), (2, 'closed', 20.0), (3, 'open', 7.25)",
    "insert select": "INSERT OVERWRITE TABLE sales.daily PARTITION (dt = '2024-01-01') "
    "SELECT id, sum(amount) FROM sales.orders WHERE dt = '2024-01-01' GROUP BY id",
    "insert replace where": "INSERT INTO sales.orders REPLACE WHERE dt >= '2024-01-01' AND dt < '2024-02-01' "
    "SELECT * FROM staging.orders",
    "update": "UPDATE sales.orders AS o SET status = 'closed', closed_at = current_timestamp(), "
    "amount = o.amount * 0.9 WHERE o.status = 'open' AND o.created_at < '2024-01-01'",
    "delete": "DELETE FROM sales.orders WHERE status = 'cancelled' AND created_at < current_date() - INTERVAL 30 DAYS",
    "merge (20 lines)": MERGE_20,
    "create table": "CREATE TABLE IF NOT EXISTS sales.orders (id BIGINT GENERATED ALWAYS AS IDENTITY, "
    "status STRING NOT NULL, amount DECIMAL(10, 2), tags ARRAY<STRING>, dt DATE) USING DELTA "
    "PARTITIONED BY (dt) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
    "create table as": "CREATE OR REPLACE TABLE sales.top USING DELTA CLUSTER BY (id) AS SELECT id, amount FROM sales.orders",
    "clone": "CREATE TABLE sales.orders_copy SHALLOW CLONE sales.orders VERSION AS OF 3",
    "drop table": "DROP TABLE IF EXISTS sales.orders",
    "alter set tblproperties": "ALTER TABLE sales.orders SET TBLPROPERTIES ('delta.isolationLevel' = 'Serializable')",
    "alter unset tblproperties": "ALTER TABLE sales.orders UNSET TBLPROPERTIES IF EXISTS ('delta.appendOnly')",
    "alter add columns": "ALTER TABLE sales.orders ADD COLUMNS (note STRING COMMENT 'free text', score DOUBLE)",
    "alter drop feature": "ALTER TABLE sales.orders DROP FEATURE deletionVectors TRUNCATE HISTORY",
    "alter add constraint": "ALTER TABLE sales.orders ADD CONSTRAINT positive CHECK (amount > 0)",
    "optimize": "OPTIMIZE sales.orders WHERE dt >= '2024-01-01' ZORDER BY (customer_id, status)",
    "reorg": "REORG TABLE sales.orders WHERE dt = '2024-01-01' APPLY (PURGE)",
    "vacuum": "VACUUM sales.orders RETAIN 168 HOURS DRY RUN",
    "restore": "RESTORE TABLE sales.orders TO VERSION AS OF 5",
    "describe history": "DESCRIBE HISTORY sales.orders LIMIT 10",
    "describe detail": "DESCRIBE DETAIL '/data/orders'",
    "show tblproperties": "SHOW TBLPROPERTIES sales.orders ('delta.minReaderVersion')",
    "convert to delta": "CONVERT TO DELTA parquet.`/data/raw` PARTITIONED BY (dt DATE)",
    "set": "SET spark.databricks.delta.properties.defaults.enableDeletionVectors = false",
    "explain": "EXPLAIN DELETE FROM sales.orders WHERE id = 1",
}


def rates(sql: str, seconds: float, rounds: int = 5) -> tuple[float, float | None]:
    """Statements per CPU second of isolde and sqlglot (None if it cannot parse ``sql``).

    Both parse the same text the same number of times per round (calibrated so that the
    slower one takes about ``seconds`` of CPU), in ``rounds`` interleaved rounds whose
    order alternates (isolde first, then sqlglot first, ...); each side's best round
    counts. Times are this process's CPU time (``time.process_time``), so that load
    from other processes distorts neither."""
    try:
        sqlglot_parse(sql)
        fns = [isolde.parse, sqlglot_parse]
    except Exception:
        fns = [isolde.parse]
    isolde.parse(sql)
    n = 1
    while (slowest := max(_cpu(fn, sql, n) for fn in fns)) < 0.02:
        n *= 2
    n = max(1, round(n * seconds / slowest))
    best = [float("inf")] * len(fns)
    for r in range(rounds):
        for i in range(len(fns)) if r % 2 == 0 else reversed(range(len(fns))):
            best[i] = min(best[i], _cpu(fns[i], sql, n))
    return n / best[0], (n / best[1] if len(best) > 1 else None)


def _cpu(fn, sql: str, n: int) -> float:
    """CPU seconds for ``n`` calls of ``fn(sql)``."""
    start = time.process_time()
    for _ in range(n):
        fn(sql)
    return time.process_time() - start


def sqlglot_parse(sql: str):
    return sqlglot.parse(sql, read="databricks")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its Command-fallback warnings
    print(f"{'kind':<26} {'isolde/s':>10} {'sqlglot/s':>10} {'ratio':>7}")
    ratios = []
    for kind, sql in CORPUS.items():
        ours, theirs = rates(sql, args.seconds, args.rounds)
        if theirs is None:
            print(f"{kind:<26} {ours:>10.0f} {'n/a':>10} {'n/a':>7}")
            continue
        ratios.append(ours / theirs)
        print(f"{kind:<26} {ours:>10.0f} {theirs:>10.0f} {ours / theirs:>7.2f}")
    print(f"\nmin ratio {min(ratios):.2f}, median {sorted(ratios)[len(ratios) // 2]:.2f} over {len(ratios)} kinds")


if __name__ == "__main__":
    main()
