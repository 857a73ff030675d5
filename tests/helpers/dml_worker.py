"""One worker process of test_processes_dml: its own Spark, the shared warehouse, statements
from the dml_workload generator until the stop file appears (or it is killed).

Every statement's commit is tagged ``w<worker>-<seq>`` through commitInfo.userMetadata, so
the log says which statement made each commit even when the worker dies before it can report.
It reports, one line each, flushed: ``ready``, ``start <tag> <sql>``, ``ok <tag> <version>``,
``conflict <tag> <exception class>``, ``error <tag> <repr>`` (and stops on an error).

    python dml_worker.py WAREHOUSE WORKER OUT_FILE STOP_FILE
"""

from __future__ import annotations

import os
import random
import sys

# run by path: the repository root on sys.path, so the helpers import as a package
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.helpers.dml_workload import Stmt  # noqa: E402


def main(warehouse: str, worker: int, out_path: str, stop_path: str) -> int:
    import isolde
    from isolde.errors import ConcurrentModificationException

    session = isolde.connect(warehouse=warehouse, master="local[1]")
    session.execute("SELECT count(*) FROM t")  # Spark is up before the race starts
    rng = random.Random(1000 + worker)
    with open(out_path, "a", buffering=1) as out:
        out.write("ready\n")
        seq = 0
        while not os.path.exists(stop_path):
            seq += 1
            stmt = Stmt(rng, worker, seq)
            tag = f"w{worker}-{seq}"
            session.execute(f"SET spark.databricks.delta.commitInfo.userMetadata = '{tag}'")
            out.write(f"start {tag} {stmt.sql()}\n")
            try:
                result = session.execute(stmt.sql())
            except ConcurrentModificationException as e:
                out.write(f"conflict {tag} {type(e).__name__}\n")
                continue
            except Exception as e:  # anything else: reported, and the parent fails the test
                message = repr(e).replace("\n", " ")
                out.write(f"error {tag} {message}\n")
                return 1
            out.write(f"ok {tag} {result.version}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]))
