"""One writer process of the bank workload in processes (test_bank_processes.py): its own Spark
JVM on the shared warehouse, running writer ``n``'s statements -- the very sequence a thread
writer ``n`` of bank.run draws -- until the stop file appears.

It reports one flushed line per event: ``ready``, ``start <tag> <sql>``, ``ok <tag> <version>
<rows affected>``, ``conflict <tag> <exception class>``, ``error <tag> <repr>`` (and stops on an
error). Every commit carries its tag (``b<n>-<seq>``) in commitInfo.userMetadata, so the log
names the statement behind each version.

    python bank_process.py WAREHOUSE CONFIG_NAME WORKER OUT_FILE STOP_FILE
"""

from __future__ import annotations

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bank as B  # noqa: E402


def config_named(name: str) -> B.BankConfig:
    for parted in (False, True):
        for dv in (True, False):
            for iso in ("WriteSerializable", "Serializable"):
                for rl in ("auto", "always", "off"):
                    config = B.BankConfig(parted, dv, iso, rl)
                    if config.name == name:
                        return config
    raise ValueError(f"no bank config named {name!r}")


def main(warehouse: str, config_name: str, worker: int, out_path: str, stop_path: str) -> int:
    import isolde
    from isolde.errors import ConcurrentModificationException

    session = isolde.connect(warehouse=warehouse, master="local[1]")
    B.read_balances(session)  # Spark is up before the race starts
    rng = random.Random(B.writer_seed(config_named(config_name), worker))
    with open(out_path, "a", buffering=1) as out:
        out.write("ready\n")
        seq = 0
        while not os.path.exists(stop_path):
            seq += 1
            op = B.random_op(rng, "bank")
            tag = f"b{worker}-{seq}"
            session.execute(f"SET spark.databricks.delta.commitInfo.userMetadata = '{tag}'")
            out.write(f"start {tag} {op.sql}\n")
            try:
                result = session.execute(op.sql)
            except ConcurrentModificationException as e:
                out.write(f"conflict {tag} {type(e).__name__}\n")
                continue
            except Exception as e:  # reported; the parent fails the run
                out.write(f"error {tag} {repr(e).replace(chr(10), ' ')[:2000]}\n")
                return 1
            out.write(f"ok {tag} {result.version} {B.affected(result)}\n")
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]))
