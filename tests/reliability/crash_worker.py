"""Writers the crash-kill torture (test_crash_kills.py) SIGKILLs at random moments.

Each worker reports to its own file, one flushed line per event, so the parent knows what the
worker was told before it died:

    ready
    start <tag> [<sql>]
    ok <tag> <version> <sha256 of that version's JSON> <rows affected>
    conflict <tag> <exception class>
    error <tag> <repr>

Every commit carries its statement's tag in commitInfo.userMetadata and every row a statement
writes carries it in column ``tag``: the log and the rows name the statement that made them
even when the worker died before it could report.

* ``log_writer``: log-level commits through the transaction API, no Spark (appends, rewrites,
  deletes of small Parquet files written with pyarrow). The parent forks it: it starts in
  milliseconds, so hundreds of kills fit in a minute. A file it wrote is in its name's tag.
* ``python crash_worker.py WAREHOUSE WORKER OUT_FILE``: an isolde statement worker with its own
  Spark JVM running INSERT / UPDATE / DELETE / MERGE / OPTIMIZE on table ``t`` until killed.
  ``Statement`` generates its statements and is the model the parent replays.
* ``python crash_worker.py --prepare-and-die WAREHOUSE SQL``: stages a statement's files, then
  SIGKILLs itself (and its JVM) before the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import uuid

LOG_SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "tag", "type": "string", "nullable": True, "metadata": {}}]})
JVM_DDL = "CREATE TABLE t (id BIGINT, grp INT, tag STRING, v BIGINT){parted} TBLPROPERTIES ({props})"
POOL = 60  # MERGE keys: 0..POOL-1 (the first 40 exist at the start; the rest may be opened)
GROUPS = 4


def version_digest(table_path: str, version: int) -> str:
    with open(os.path.join(table_path, "_delta_log", f"{version:020d}.json"), "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


# ---------------------------------------------------------------- log-level writer (forked)
#: what a log writer imports on its first commit: a forkserver preloads them, so a forked writer
#: commits within milliseconds of starting (otherwise ~1 s of imports would take most kills)
PRELOAD = ["crash_worker", "isolde.executor.log", "isolde.executor.txn", "isolde.planner", "isolde.grammar",
           "sqlglot", "pyarrow.parquet", "pandas", "pyarrow.pandas_compat", "dateutil.parser", "zoneinfo"]


def _write_parquet(table_path: str, tag: str, ids: list[int]):
    """A Parquet file of ``ids`` tagged ``tag``, and its AddFile (with stats, as writers do)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from isolde.executor.log.actions import AddFile, now_ms

    name = f"{tag}-{uuid.uuid4().hex}.parquet"
    full = os.path.join(table_path, name)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "tag": pa.array([tag] * len(ids), pa.string())}), full)
    stats = json.dumps({"numRecords": len(ids), "minValues": {"id": min(ids), "tag": tag},
                        "maxValues": {"id": max(ids), "tag": tag}, "nullCount": {"id": 0, "tag": 0}})
    return full, AddFile(name, {}, os.path.getsize(full), now_ms(), stats=stats)


def log_writer(table_path: str, worker: int, seed: int, out_path: str, ready=None) -> None:
    """Commit forever: blind appends (45%), rewrites of one file with the rows re-tagged (30%),
    deletes of one file (25%). A refused commit deletes the file it wrote, as a writer does: the
    only orphans are a killed writer's."""
    import pyarrow.parquet as pq

    from isolde.errors import CONFLICT_EXCEPTIONS
    from isolde.executor.log import DeltaLog

    import importlib

    for module in PRELOAD:  # already loaded when the forkserver preloaded them
        importlib.import_module(module)
    rng = random.Random(seed)
    log = DeltaLog.for_table(table_path)
    log.update()
    with open(out_path, "a", buffering=1) as out:
        out.write("ready\n")
        if ready is not None:
            ready.set()
        seq = 0
        while True:
            seq += 1
            tag = f"p{worker}-{seq}"
            out.write(f"start {tag}\n")
            txn = log.start_transaction()
            r = rng.random()
            live = txn.filter_files(None) if r >= 0.45 else []
            written = None
            if not live:
                ids = [worker * 1_000_000 + seq * 10 + i for i in range(rng.randint(1, 4))]
                written, add = _write_parquet(table_path, tag, ids)
                actions, op = [add], "WRITE"
            else:
                victim = rng.choice(live)
                if r < 0.75:
                    ids = pq.read_table(os.path.join(table_path, victim.path)).column("id").to_pylist()
                    written, add = _write_parquet(table_path, tag, ids)
                    actions, op = [victim.remove(), add], "UPDATE"
                else:
                    actions, op = [victim.remove()], "DELETE"
            try:
                version = txn.commit(actions, op, user_metadata=tag)
            except CONFLICT_EXCEPTIONS as e:
                if written:
                    os.remove(written)
                out.write(f"conflict {tag} {type(e).__name__}\n")
                continue
            out.write(f"ok {tag} {version} {version_digest(table_path, version)} {len(actions)}\n")


# ---------------------------------------------------------------- isolde statement worker (JVM)
def initial_rows() -> dict:
    """id -> (grp, tag, v) of the table before the workers start."""
    return {i: (i % GROUPS, "init", i % 10) for i in range(40)}


class Statement:
    """The ``seq``-th statement of worker ``worker`` (drawn from ``rng``): its SQL and what it
    does to the rows (``apply``), so the parent can replay the log's commits on a model."""

    def __init__(self, rng: random.Random, worker: int, seq: int):
        self.tag = f"j{worker}-{seq}"
        r = rng.random()
        self.group = rng.randrange(GROUPS)
        if r < 0.25:
            self.kind = "insert"
            self.rows = [(worker * 1_000_000 + seq * 10 + i, rng.randrange(100)) for i in range(rng.randint(1, 4))]
        elif r < 0.5:
            self.kind, self.limit = "update", rng.randrange(3, 12)
        elif r < 0.65:
            self.kind, self.mod = "delete", rng.randrange(5)
        elif r < 0.9:
            self.kind = "merge"
            self.rows = [(k, rng.randrange(100)) for k in rng.sample(range(POOL), 3)]
        else:
            self.kind = "optimize"

    def sql(self) -> str:
        tag = self.tag
        if self.kind == "insert":
            values = ", ".join(f"({i}, {i % GROUPS}, '{tag}', {v})" for i, v in self.rows)
            return f"INSERT INTO t VALUES {values}"
        if self.kind == "update":
            return f"UPDATE t SET v = v + 1, tag = '{tag}' WHERE grp = {self.group} AND v < {self.limit}"
        if self.kind == "delete":
            return f"DELETE FROM t WHERE grp = {self.group} AND v % 5 = {self.mod}"
        if self.kind == "merge":
            values = ", ".join(f"({i}, {v})" for i, v in self.rows)
            return (f"MERGE INTO t USING (SELECT * FROM VALUES {values} AS s(id, v)) s ON t.id = s.id "
                    f"WHEN MATCHED THEN UPDATE SET v = s.v, tag = '{tag}' "
                    f"WHEN NOT MATCHED THEN INSERT (id, grp, tag, v) VALUES (s.id, CAST(s.id % {GROUPS} AS INT), "
                    f"'{tag}', s.v)")
        return "OPTIMIZE t"

    def effect(self, rows: dict) -> tuple[dict, set]:
        """(rows written: id -> row, ids deleted) when the statement runs on ``rows``."""
        after = dict(rows)
        self.apply(after)
        return {i: r for i, r in after.items() if rows.get(i) != r}, set(rows) - set(after)

    def apply(self, rows: dict) -> None:
        if self.kind in ("insert", "merge"):
            for i, v in self.rows:
                rows[i] = (i % GROUPS, self.tag, v)
        elif self.kind == "update":
            for i, (g, t, v) in list(rows.items()):
                if g == self.group and v < self.limit:
                    rows[i] = (g, self.tag, v + 1)
        elif self.kind == "delete":
            for i, (g, _, v) in list(rows.items()):
                if g == self.group and v % 5 == self.mod:
                    del rows[i]


def statement_worker(warehouse: str, worker: int, out_path: str) -> int:
    import isolde
    from isolde.errors import ConcurrentModificationException

    session = isolde.connect(warehouse=warehouse, master="local[1]")
    table_path = os.path.join(warehouse, "default", "t")
    session.execute("SELECT count(*) FROM t").collect()  # Spark is up before the first statement
    rng = random.Random(7919 * worker + 1)
    with open(out_path, "a", buffering=1) as out:
        out.write("ready\n")
        seq = 0
        while True:
            seq += 1
            st = Statement(rng, worker, seq)
            session.execute(f"SET spark.databricks.delta.commitInfo.userMetadata = '{st.tag}'")
            out.write(f"start {st.tag} {st.sql()}\n")
            try:
                result = session.execute(st.sql())
            except ConcurrentModificationException as e:
                out.write(f"conflict {st.tag} {type(e).__name__}\n")
                continue
            except Exception as e:  # reported; the parent fails the run unless it killed the JVM
                out.write(f"error {st.tag} {repr(e).replace(chr(10), ' ')[:2000]}\n")
                return 1
            affected = -1 if st.kind == "optimize" else result.first().num_affected_rows
            out.write(f"ok {st.tag} {result.version} {version_digest(table_path, result.version)} {affected}\n")


def prepare_and_die(warehouse: str, sql: str) -> None:
    """Do a statement's data work (files staged and leased), then die by SIGKILL -- Python and
    JVM -- before it commits: the moment random kills hit least often."""
    import signal

    import isolde

    session = isolde.connect(warehouse=warehouse, master="local[1]")
    session.prepare(sql)
    os.killpg(os.getpgid(0), signal.SIGKILL)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if sys.argv[1] == "--prepare-and-die":
        prepare_and_die(sys.argv[2], sys.argv[3])
    sys.exit(statement_worker(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
