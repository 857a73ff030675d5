"""Two engines writing one table at the same time: an isolde process and a Delta-Spark process
(each its own JVM, ``local[1]``; tests/helpers/delta_worker.py) race on the same table folders --
the real case of a Delta pipeline that keeps running while isolde is introduced beside it.

Deterministic races: the loser reads its snapshot, the winner (the other engine) commits, then
the loser commits. isolde's loser is a prepared write (``session.prepare`` / ``commit``);
Delta's loser is held inside its statement, after its snapshot, by the worker's ``gate`` UDF.
Each race asserts the loser's exact outcome (commit, or the named conflict) and the table read
identically by isolde, Delta-Spark and delta-rs afterwards. The bank race then runs both
engines' writers freely (tests/helpers/mixed_workload.py) and checks its invariants.

Both workers start once per module (~20 s of JVM start-up on this machine) and serve every race.
"""

from __future__ import annotations

import os
import threading
import time
import zlib
from dataclasses import dataclass, field

import pytest

from tests.helpers import mixed_workload as M
from tests.helpers.oracle import read_delta_rows, sorted_rows
from tests.helpers.reference import ref
from tests.helpers.worker_output import commit_infos

ROWS = [(1, 0, "a"), (2, 0, "b"), (3, 0, "c"), (4, 1, "d"), (5, 1, "e"), (6, 1, "f")]
VALUES = ", ".join(f"({i}, {p}, '{v}')" for i, p, v in ROWS)


def _missing_reference():
    from tests.reference.conftest import _missing_reference as missing

    return missing()


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    missing = _missing_reference()
    if missing:
        if os.environ.get("ISOLDE_REFERENCE_REQUIRED") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    root = tmp_path_factory.mktemp("mixed")
    warehouse = str(root / "warehouse")
    os.makedirs(warehouse)
    started = [M.Worker("isolde", warehouse, str(root)), M.Worker("delta", warehouse, str(root))]
    try:
        iso, dl = (w.started() for w in started)
        yield Engines(iso, dl, warehouse, str(root))
    finally:
        for w in started:
            w.close()


@dataclass
class Engines:
    iso: M.Worker
    dl: M.Worker
    warehouse: str
    root: str
    gates: int = 0

    def path(self, table: str) -> str:
        return os.path.join(self.warehouse, "default", table)

    def text(self, engine: str, sql: str, table: str, gate: str = "") -> str:
        name = table if engine == "isolde" else ref(self.path(table))
        return sql.format(t=name, gate=gate)

    def ok(self, engine: str, sql: str, table: str, tag: str | None = None) -> dict:
        worker = self.iso if engine == "isolde" else self.dl
        reply = worker.call("sql", sql=self.text(engine, sql, table), tag=tag)
        assert reply["ok"], f"{engine}: {sql}: {reply}"
        return reply

    def rows(self, table: str, columns: str = "id, p, v", delta_spark: bool = True) -> dict:
        """The table as each engine reads it: isolde, Delta-Spark (their workers) and delta-rs."""
        sql = f"SELECT {columns} FROM {{t}}"
        out = {"isolde": sorted_rows(self.ok("isolde", sql, table)["rows"]),
               "delta-rs": read_delta_rows(self.path(table), [c.strip() for c in columns.split(",")])}
        if delta_spark:
            out["delta-spark"] = sorted_rows(self.ok("delta", sql, table)["rows"])
        return out

    def race(self, table: str, loser: str, loser_sql: str, winner_sql: str) -> dict:
        """The loser reads, the other engine commits ``winner_sql``, the loser commits: its reply."""
        if loser == "isolde":
            prepared = self.iso.call("prepare", sql=self.text("isolde", loser_sql, table), tag="loser")
            if not prepared["ok"]:
                return prepared
            self.ok("delta", winner_sql, table, tag="winner")
            return self.iso.call("commit")
        self.gates += 1
        gate = os.path.join(self.root, f"gate{self.gates}")
        self.dl.send("sql", sql=self.text("delta", loser_sql, table, gate), tag="loser")
        deadline = time.time() + 120
        while not os.path.exists(os.path.join(gate, "entered")):
            ready = M.select.select([self.dl.proc.stdout], [], [], 0.05)[0]
            if ready:  # the statement ended without reaching its gate
                return {"never gated": self.dl.reply()}
            assert time.time() < deadline, "Delta's statement never reached its gate"
        try:
            self.ok("isolde", winner_sql, table, tag="winner")
        finally:
            open(os.path.join(gate, "open"), "w").close()
        return self.dl.reply()


# --- the deterministic races ------------------------------------------------------------------

FLAT_DV = "CREATE TABLE {t} (id INT, p INT, v STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
FLAT_DV_SERIAL = ("CREATE TABLE {t} (id INT, p INT, v STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
                  "'delta.isolationLevel' = 'Serializable')")
FLAT_COW = "CREATE TABLE {t} (id INT, p INT, v STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')"
PARTED = ("CREATE TABLE {t} (id INT, p INT, v STRING) PARTITIONED BY (p) "
          "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
ROW_TRACKING = ("CREATE TABLE {t} (id INT, p INT, v STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
                "'delta.enableRowTracking' = 'true')")
ONE_FILE = (f"INSERT INTO {{t}} VALUES {VALUES}",)
THREE_FILES = tuple(f"INSERT INTO {{t}} VALUES {', '.join(f'({i}, {p}, {chr(39)}{v}{chr(39)})' for i, p, v in ROWS[k:k + 2])}"
                    for k in (0, 2, 4))


def changed(*edits, drop=(), add=()) -> list:
    """ROWS with ``(id, v)`` edits, ids dropped and rows added."""
    new = dict(edits)
    out = [(i, p, new.get(i, v)) for i, p, v in ROWS if i not in drop]
    return sorted(out + list(add))


@dataclass(frozen=True)
class Race:
    id: str
    ddl: str
    loser: str  # the engine whose statement reads first and commits last
    loser_sql: str
    winner_sql: str  # the other engine's, committed in between
    outcome: str | None  # the loser's conflict class; None: both commit
    rows: list
    fill: tuple = ONE_FILE
    why: str = ""
    marks: tuple = field(default=())


def delta_update(v: str, where: str) -> str:
    """A Delta UPDATE held at its gate after its snapshot (the SET expression runs the gate)."""
    return f"UPDATE {{t}} SET v = gate_s('{v}', '{{gate}}', v) WHERE {where}"


RACES = [
    # appends by both: all rows present
    Race("append/append isolde loses", FLAT_DV, "isolde", "INSERT INTO {t} VALUES (7, 1, 'g')",
         "INSERT INTO {t} VALUES (8, 0, 'h')", None, changed(add=[(7, 1, "g"), (8, 0, "h")])),
    Race("append/append delta loses", FLAT_DV, "delta",
         "INSERT INTO {t} SELECT id, 1, gate_s('g', '{gate}', id) FROM VALUES (7) AS s(id)",
         "INSERT INTO {t} VALUES (8, 0, 'h')", None, changed(add=[(7, 1, "g"), (8, 0, "h")])),
    # DML on disjoint partitions: both commit
    Race("partitions update/delete isolde loses", PARTED, "isolde", "UPDATE {t} SET v = 'x' WHERE p = 0",
         "DELETE FROM {t} WHERE p = 1 AND id = 5", None, changed((1, "x"), (2, "x"), (3, "x"), drop=[5])),
    Race("partitions merge/delete delta loses", PARTED, "delta",
         "MERGE INTO {t} t USING (SELECT gate(id, '{gate}', id) AS id, v FROM VALUES (4, 'm'), (7, 'n') AS s(id, v)) s "
         "ON t.id = s.id AND t.p = 1 WHEN MATCHED THEN UPDATE SET v = s.v "
         "WHEN NOT MATCHED THEN INSERT (id, p, v) VALUES (s.id, 1, s.v)",
         "DELETE FROM {t} WHERE p = 0 AND id = 2", None, changed((4, "m"), drop=[2], add=[(7, 1, "n")])),
    Race("partitions merge/update isolde loses", PARTED, "isolde",
         "MERGE INTO {t} t USING (SELECT 5 AS id, 'm' AS v) s ON t.id = s.id AND t.p = 1 "
         "WHEN MATCHED THEN UPDATE SET v = s.v", "UPDATE {t} SET v = 'y' WHERE p = 0 AND id = 1", None,
         changed((5, "m"), (1, "y"))),
    Race("partitions update/update delta loses", PARTED, "delta", delta_update("x", "p = 1 AND id = 4"),
         "UPDATE {t} SET v = 'y' WHERE p = 0 AND id = 1", None, changed((4, "x"), (1, "y"))),
    # one file, different rows: isolde's row-level rules let it commit after Delta's commit
    Race("one file update/update isolde loses", FLAT_DV, "isolde", "UPDATE {t} SET v = 'x' WHERE id = 1",
         "UPDATE {t} SET v = 'y' WHERE id = 2", None, changed((1, "x"), (2, "y")),
         why="isolde proves the rows disjoint (row level); Delta would raise ConcurrentDeleteReadException"),
    Race("one file delete/merge isolde loses", FLAT_DV, "isolde", "DELETE FROM {t} WHERE id = 1",
         "MERGE INTO {t} t USING (SELECT 2 AS id, 'm' AS v) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v",
         None, changed((2, "m"), drop=[1])),
    # ... Delta has no row-level rules: it conflicts on the file
    Race("one file update/update delta loses", FLAT_DV, "delta", delta_update("y", "id = 2"),
         "UPDATE {t} SET v = 'x' WHERE id = 1", "ConcurrentAppendException", changed((1, "x")),
         why="Delta checks the winner's adds first: the file it read was rewritten by an UPDATE"),
    Race("one file delete/delete delta loses", FLAT_DV, "delta", "DELETE FROM {t} WHERE id = 2 AND gate(id, '{gate}', id) = 2",
         "DELETE FROM {t} WHERE id = 1", "ConcurrentAppendException", changed(drop=[1])),
    # the same rows: one conflicts
    Race("same row update/delete isolde loses", FLAT_DV, "isolde", "UPDATE {t} SET v = 'x' WHERE id = 2",
         "DELETE FROM {t} WHERE id = 2", "ConcurrentDeleteDeleteException", changed(drop=[2])),
    Race("same new key merge/merge isolde loses", FLAT_DV, "isolde",
         "MERGE INTO {t} t USING (SELECT 7 AS id, 'i' AS v) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v "
         "WHEN NOT MATCHED THEN INSERT (id, p, v) VALUES (s.id, 1, s.v)",
         "MERGE INTO {t} t USING (SELECT 7 AS id, 'd' AS v) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v "
         "WHEN NOT MATCHED THEN INSERT (id, p, v) VALUES (s.id, 1, s.v)",
         "ConcurrentAppendException", changed(add=[(7, 1, "d")]),
         why="Delta's MERGE records no read predicate isolde can evaluate: it read everything, and "
             "isolde's inserted key would be a duplicate"),
    # copy-on-write: file level on both sides
    Race("copy-on-write update/update isolde loses", FLAT_COW, "isolde", "UPDATE {t} SET v = 'x' WHERE id = 1",
         "UPDATE {t} SET v = 'y' WHERE id = 2", "ConcurrentAppendException", changed((2, "y")),
         why="file level, Delta's order: the winner's adds are checked before its removes"),
    # Serializable: a blind append by the other engine
    Race("serializable update/append isolde loses", FLAT_DV_SERIAL, "isolde", "UPDATE {t} SET v = 'x' WHERE id = 1",
         "INSERT INTO {t} VALUES (7, 1, 'g')", None, changed((1, "x"), add=[(7, 1, "g")]),
         why="row level: the added row does not match id = 1 (Delta, file level, conflicts)"),
    Race("serializable update/append delta loses", FLAT_DV_SERIAL, "delta", delta_update("x", "id = 1"),
         "INSERT INTO {t} VALUES (7, 1, 'g')", "ConcurrentAppendException", changed(add=[(7, 1, "g")])),
    # OPTIMIZE by either engine against DML by the other
    Race("optimize by delta, update isolde loses", FLAT_DV, "isolde", "UPDATE {t} SET v = 'x' WHERE id = 1",
         "OPTIMIZE {t}", "ConcurrentDeleteDeleteException", ROWS, fill=THREE_FILES,
         why="isolde ignores dataChange=false adds (documented departure: Delta raises "
             "ConcurrentAppendException here), then both removed the same file"),
    Race("optimize by delta, update isolde loses, row tracking", ROW_TRACKING, "isolde",
         "UPDATE {t} SET v = 'x' WHERE id = 1", "OPTIMIZE {t}", "ConcurrentDeleteDeleteException", ROWS,
         fill=THREE_FILES, why="row ids survive Delta's OPTIMIZE, yet the DML loser still conflicts"),
    Race("optimize by isolde, update delta loses", FLAT_DV, "delta", delta_update("x", "id = 1"),
         "OPTIMIZE {t}", "ConcurrentAppendException", ROWS, fill=THREE_FILES,
         why="Delta counts the compaction's adds (dataChange=false) as data its UPDATE should have read"),
    Race("optimize by isolde, update delta loses, row tracking", ROW_TRACKING, "delta", delta_update("x", "id = 1"),
         "OPTIMIZE {t}", "ConcurrentAppendException", ROWS, fill=THREE_FILES),
    Race("optimize by isolde loses to a delta update", FLAT_DV, "isolde", "OPTIMIZE {t}",
         "UPDATE {t} SET v = 'y' WHERE id = 1", None, changed((1, "y")), fill=THREE_FILES,
         why="isolde's compaction carries the winner's deletion vector over to its output file"),
    Race("optimize by isolde loses to a delta delete, row tracking", ROW_TRACKING, "isolde", "OPTIMIZE {t}",
         "DELETE FROM {t} WHERE id = 3", None, changed(drop=[3]), fill=THREE_FILES),
    # a metadata or protocol change by either fails the other
    Race("delta sets a property, isolde update loses", FLAT_DV, "isolde", "UPDATE {t} SET v = 'x' WHERE id = 1",
         "ALTER TABLE {t} SET TBLPROPERTIES ('team' = 'payments')", "MetadataChangedException", ROWS),
    Race("delta adds a column, isolde insert loses", FLAT_DV, "isolde", "INSERT INTO {t} VALUES (7, 1, 'g')",
         "ALTER TABLE {t} ADD COLUMNS (w INT)", "MetadataChangedException", ROWS),
    Race("isolde sets a property, delta update loses", FLAT_DV, "delta", delta_update("x", "id = 1"),
         "ALTER TABLE {t} SET TBLPROPERTIES ('team' = 'payments')", "MetadataChangedException", ROWS),
    Race("isolde adds a column, delta insert loses", FLAT_DV, "delta",
         "INSERT INTO {t} SELECT id, 1, gate_s('g', '{gate}', id) FROM VALUES (7) AS s(id)",
         "ALTER TABLE {t} ADD COLUMNS (w INT)", "MetadataChangedException", ROWS),
    Race("delta upgrades the protocol, isolde update commits", FLAT_DV, "isolde", "UPDATE {t} SET v = 'x' WHERE id = 1",
         "ALTER TABLE {t} SET TBLPROPERTIES ('delta.feature.checkConstraints' = 'supported')",
         None, changed((1, "x")),
         why="a protocol that only gained a writer feature fails no writer (Delta 4.4's rule, measured "
             "Delta against Delta; isolde's executor/txn/feature_enablement.py)"),
    Race("isolde upgrades the protocol, delta update commits", FLAT_DV, "delta", delta_update("x", "id = 1"),
         "ALTER TABLE {t} SET TBLPROPERTIES ('delta.feature.checkConstraints' = 'supported')",
         None, changed((1, "x")), why="Delta's own rule, as against its own ALTER (measured)"),
]


#: one race of each kind in make test (the budget: 10-30 s a race on this loaded machine); all under torture
QUICK = {"append/append delta loses", "partitions merge/delete delta loses", "one file update/update isolde loses",
         "same new key merge/merge isolde loses", "optimize by delta, update isolde loses, row tracking",
         "isolde adds a column, delta insert loses"}
assert QUICK <= {r.id for r in RACES}


def _table_name(race_id: str) -> str:
    return "t_" + "".join(c if c.isalnum() else "_" for c in race_id)


@pytest.mark.parametrize("race", [pytest.param(r, id=r.id, marks=r.marks + (() if r.id in QUICK else (pytest.mark.torture,)))
                                  for r in RACES])
def test_race_between_engines(workers, race):
    """The loser's exact outcome, and every engine reading the same, expected table after it
    (Delta-Spark reads it when isolde made the last commit: otherwise its own statement did)."""
    table = _table_name(race.id)
    workers.ok("isolde", race.ddl, table)
    for sql in race.fill:
        workers.ok("isolde", sql, table)
    reply = workers.race(table, race.loser, race.loser_sql, race.winner_sql)
    outcome = None if reply.get("ok") else reply.get("error", reply)
    assert outcome == race.outcome, f"{race.loser} loser: {reply}"
    last = commit_infos(workers.path(table), 0)[-1]
    reads = workers.rows(table, delta_spark=last.get("engineInfo", "").startswith("isolde"))
    assert reads == {k: race.rows for k in reads}


# --- the bank race ------------------------------------------------------------------------------

#: partitioned by branch (an account a partition): Delta's file-level rules conflict only where the
#: transfers' accounts overlap, so both engines commit within a short run. Unpartitioned, every
#: Delta statement (5-10 s here) meets an isolde commit and conflicts: the long runs cover it.
SHORT = M.BankConfig(partitioned=True, deletion_vectors=True, isolation="WriteSerializable")
LONG = [M.BankConfig(False, True, "Serializable"), M.BankConfig(True, True, "Serializable"),
        M.BankConfig(False, True, "WriteSerializable"), M.BankConfig(True, False, "WriteSerializable"),
        M.BankConfig(False, False, "Serializable")]


def run_bank(workers: Engines, config: M.BankConfig, seconds: float, per_engine: int = 1) -> tuple[list, dict]:
    """The bank race; ``per_engine`` writer processes of each engine (more than one: extra worker
    processes, each its own JVM, started here and closed after)."""
    table = "bank_" + config.name.replace("-", "_").lower() + (f"_x{per_engine}" if per_engine > 1 else "")
    path = workers.path(table)
    workers.ok("isolde", config.ddl("{t}"), table)
    workers.ok("isolde", config.fill("{t}"), table)
    base = 1
    extra = [M.Worker(e, workers.warehouse, workers.root) for _ in range(per_engine - 1) for e in ("isolde", "delta")]
    try:
        writers = [("isolde", workers.iso), ("delta", workers.dl)] + [(w.engine, w.started()) for w in extra]
        return _bank_race(workers, config, seconds, table, path, base, writers)
    finally:
        for w in extra:
            w.close()


def _bank_race(workers: Engines, config: M.BankConfig, seconds: float, table: str, path: str, base: int,
               writers: list) -> tuple[list, dict]:
    outs = [os.path.join(workers.root, f"{table}.{engine}{n}.jsonl") for n, (engine, _) in enumerate(writers)]
    start_at = time.time() + 1.0
    for n, (engine, worker) in enumerate(writers):
        name = table if engine == "isolde" else ref(path)
        worker.send("bank", args={"table": name, "seconds": seconds, "start_at": start_at, "writer": n,
                                  "pause": 2.0 if engine == "isolde" else 0.0, "cap": 3 * seconds,
                                  "markers": [f"{out}.committed" for out in outs],
                                  "seed": zlib.crc32(f"{config.name}/{n}".encode()), "out": outs[n]})
    sums: list = []
    done = threading.Event()

    def reader():  # delta-rs reads snapshots all along: the accounts' total never moves
        while not done.is_set():
            rows = read_delta_rows(path, ["id", "balance"])
            sums.append(sum(b for i, b in rows if i < M.BASE))
            time.sleep(0.3)

    watcher = threading.Thread(target=reader)
    watcher.start()
    try:
        replies = [worker.reply(3 * seconds + 240) for _, worker in writers]
    finally:
        done.set()
        watcher.join()
    assert all(r["ok"] for r in replies), replies
    cols = "id, branch, balance, last"
    sql = f"SELECT {cols} FROM {{t}}"
    readers = {"isolde": sorted_rows(workers.ok("isolde", sql, table)["rows"]),
               "delta-spark": sorted_rows(workers.ok("delta", sql, table)["rows"]),
               "delta-rs": read_delta_rows(path, ["id", "branch", "balance", "last"]), "sums": sums}
    bad, summary = M.check(path, base, outs, readers)
    summary["reads"] = len(sums)
    return bad, summary


def _assert_bank(bad: list, summary: dict, config: M.BankConfig) -> None:
    assert not bad, "\n".join(bad[:20]) + f"\n{summary}"
    # it was a race: both engines committed transfers (unpartitioned, Delta may be starved), and
    # the reader read throughout
    assert summary["committed"]["isolde"] >= 1, summary
    if config.partitioned:
        assert summary["committed"]["delta"] >= 1, summary
    assert summary["reads"] >= 2, summary


@pytest.mark.slow
def test_bank_race_between_engines(workers):
    """isolde and Delta-Spark move money on one table: the invariants of mixed_workload.check."""
    bad, summary = run_bank(workers, SHORT, float(os.environ.get("ISOLDE_MIXED_BANK_SECONDS", "20")))
    print("mixed bank", SHORT.name, summary)
    _assert_bank(bad, summary, SHORT)


@pytest.mark.torture
@pytest.mark.parametrize("config", LONG, ids=lambda c: c.name)
def test_bank_race_between_engines_long(workers, config):
    bad, summary = run_bank(workers, config, float(os.environ.get("ISOLDE_TORTURE_SECONDS", "120")))
    print("mixed bank", config.name, summary)
    _assert_bank(bad, summary, config)


@pytest.mark.torture
def test_bank_race_two_writer_processes_per_engine(workers):
    """Four processes, two of each engine, each its own JVM, moving money on one table."""
    bad, summary = run_bank(workers, SHORT, float(os.environ.get("ISOLDE_TORTURE_SECONDS", "120")), per_engine=2)
    print("mixed bank, 2 writers per engine", SHORT.name, summary)
    _assert_bank(bad, summary, SHORT)
