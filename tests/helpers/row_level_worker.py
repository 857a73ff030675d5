"""One worker process of the row-level process stress test: its own Spark, the shared
warehouse, counter increments and upserts on table ``c`` until the stop file appears.

Every commit is tagged ``w<worker>-<seq>`` through commitInfo.userMetadata, so the parent
can replay the log in order. Reports, one line each, flushed: ``ready``,
``start <tag> <inc|upsert> <key>``, ``ok <tag> <version>``, ``conflict <tag> <class>``,
``error <tag> <repr>`` (and stops on an error).

    python row_level_worker.py WAREHOUSE WORKER KEYS OUT_FILE STOP_FILE
"""

from __future__ import annotations

import os
import random
import sys


def statement(rng: random.Random, keys: int) -> tuple[str, int, str]:
    """(kind, key, sql): 70% increments of an existing counter, 30% upserts of new keys."""
    if rng.random() < 0.7:
        k = rng.randrange(keys)
        return "inc", k, f"UPDATE c SET n = n + 1 WHERE id = {k}"
    k = rng.randrange(keys, keys + 6)
    return "upsert", k, (f"MERGE INTO c USING (SELECT {k} AS id) s ON c.id = s.id "
                         "WHEN MATCHED THEN UPDATE SET n = c.n + 1 "
                         "WHEN NOT MATCHED THEN INSERT (id, n) VALUES (s.id, 1)")


def main(warehouse: str, worker: int, keys: int, out_path: str, stop_path: str) -> int:
    import isolde
    from isolde.errors import ConcurrentModificationException

    session = isolde.connect(warehouse=warehouse, master="local[1]")
    session.execute("SELECT count(*) FROM c")  # Spark is up before the race starts
    rng = random.Random(2000 + worker)
    with open(out_path, "a", buffering=1) as out:
        out.write("ready\n")
        seq = 0
        while not os.path.exists(stop_path):
            seq += 1
            kind, key, sql = statement(rng, keys)
            tag = f"w{worker}-{seq}"
            session.execute(f"SET spark.databricks.delta.commitInfo.userMetadata = '{tag}'")
            out.write(f"start {tag} {kind} {key}\n")
            try:
                result = session.execute(sql)
            except ConcurrentModificationException as e:
                out.write(f"conflict {tag} {type(e).__name__}\n")
                continue
            except Exception as e:  # reported; the parent fails the test
                out.write(f"error {tag} {repr(e)}\n".replace("\n", " ") + "\n")
                return 1
            out.write(f"ok {tag} {result.version}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]))
