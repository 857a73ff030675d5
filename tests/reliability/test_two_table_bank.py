"""The bank across two coordinated tables: ``acc`` (balances, deletion vectors) and ``audit`` (one
row per transfer), both committing through the warehouse's commit coordinator
(executor/log/coordinator.py). Writer processes (two_table_worker.py, each its own Spark JVM)
run transfers as multi-statement transactions -- debit, credit, audit row, COMMIT: one
coordinator entry holding one commit per table -- while a reader here checks, in ONE query
reading both tables at one coordinated point, what no snapshot may show:

1. the total is the initial total, and every account's balance is its start plus what the audit
   rows move into it minus what they move out of it (a transaction half visible -- its audit row
   without its balances, or the other way round -- breaks this), no audit id twice, and the
   audit count never goes back;
2. after the run, every transfer a writer reports committed has exactly one audit row with its
   accounts and amount, every transfer that raised a named conflict has none, no audit row
   belongs to a transfer never attempted, and a transfer whose writer was killed in COMMIT is
   all or nothing (check 1 on the final state); every coordinator entry after the set-up holds
   one commit of each table, carries one transfer, and is published in both logs byte for byte;
3. delta-rs reads both final tables as isolde does;
4. writers SIGKILLed at random moments (replaced by fresh ones) change none of that; a writer
   SIGKILLed between the coordinator's decision and the tables' publication (its AFTER_DECIDE
   hook reports and sleeps) leaves the entry without the table versions -- asserted before any
   isolde access -- and the next isolde access (a query, or VACUUM ... RETAIN 0 HOURS) rolls the
   whole transaction forward into both tables; VACUUM then keeps every file the live snapshots
   reference and removes the killed writers' orphans.

On 2 cores: 3 writers for ISOLDE_BANK_SECONDS (15) in ``make test``; ``make torture`` races 4
for ISOLDE_TORTURE_SECONDS (120), with and without kills.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field

import pytest

import isolde
from isolde.errors import CONFLICT_EXCEPTIONS

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WORKER = os.path.join(os.path.dirname(__file__), "two_table_worker.py")
CONFLICT_NAMES = {cls.__name__ for cls in CONFLICT_EXCEPTIONS}
ACCOUNTS, START = 20, 100
SHORT_SECONDS = float(os.environ.get("ISOLDE_BANK_SECONDS", "15"))
LONG_SECONDS = float(os.environ.get("ISOLDE_TORTURE_SECONDS", "120"))

#: one query, both tables at one coordinated point: per account its balance and the net of the
#: audit rows, beside the total and the audit rows' count (and distinct ids)
CHECK = (
    "SELECT a.id, a.bal, coalesce(m.net, 0) AS net, (SELECT sum(bal) FROM acc) AS total, "
    "(SELECT count(*) FROM audit) AS n, (SELECT count(DISTINCT transfer_id) FROM audit) AS ids "
    "FROM acc a LEFT JOIN (SELECT id, sum(d) AS net FROM (SELECT dst AS id, amount AS d FROM audit "
    "UNION ALL SELECT src AS id, -amount AS d FROM audit) moves GROUP BY id) m ON a.id = m.id")


def snapshot_violations(rows) -> tuple[list[str], int]:
    """What is wrong with one CHECK result (empty: nothing), and its audit count."""
    bad = []
    rows = [tuple(r) for r in rows]
    if sorted(r[0] for r in rows) != list(range(ACCOUNTS)):
        bad.append(f"accounts {sorted(r[0] for r in rows)}, not 0..{ACCOUNTS - 1}")
    n = rows[0][4] if rows else -1
    for id_, bal, net, total, count, ids in rows:
        if total != ACCOUNTS * START:
            bad.append(f"total {total}, not {ACCOUNTS * START} (audit rows: {count})")
        if bal != START + net:
            bad.append(f"account {id_} holds {bal}, the audit rows say {START + net} (audit rows: {count})")
        if count != ids:
            bad.append(f"{count} audit rows for {ids} transfer ids")
    return sorted(set(bad)), n


def _lines(path: str) -> list[str]:
    try:
        with open(path) as fh:
            return fh.read().split("\n")[:-1]  # a line cut by a kill has no newline yet
    except FileNotFoundError:
        return []


def _wait(predicate, timeout: float, what: str, poll: float = 0.05) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


@dataclass
class Writer:
    name: str
    proc: subprocess.Popen
    out: str
    err: str
    killed: bool = False


@dataclass
class Bank:
    """The warehouse, its two tables, the writer processes and their reports."""

    tmp_path: object
    session: object
    warehouse: str
    base_seq: int = 0
    writers: dict = field(default_factory=dict)  # name -> Writer, every one ever started
    arm_file: str = ""

    def stop_file(self, name: str) -> str:
        return str(self.tmp_path / f"{name}.stop")

    @property
    def coordinator_log(self) -> str:
        return os.path.join(self.warehouse, "_isolde_coordinator", "log")

    def table_path(self, name: str) -> str:
        return os.path.join(self.warehouse, "default", name)

    def start(self, name: str) -> Writer:
        env = dict(os.environ, ISOLDE_JVM="startup", ISOLDE_DRIVER_MEMORY="1g", PYTHONUNBUFFERED="1",
                   SPARK_LOCAL_IP="127.0.0.1")
        out, err = str(self.tmp_path / f"{name}.out"), str(self.tmp_path / f"{name}.err")
        args = [sys.executable, WORKER, self.warehouse, name, str(zlib.crc32(name.encode())), str(ACCOUNTS), out,
                self.stop_file(name), self.arm_file]
        proc = subprocess.Popen(args, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=open(err, "w"))
        writer = self.writers[name] = Writer(name, proc, out, err)
        return writer

    def lines(self, name: str) -> list[str]:
        return _lines(self.writers[name].out)

    def live(self) -> list[Writer]:
        return [w for w in self.writers.values() if not w.killed and w.proc.poll() is None]

    def kill(self, writer: Writer) -> None:
        writer.killed = True
        try:
            os.killpg(writer.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        writer.proc.wait(60)

    def wait_ready(self, writers) -> None:
        _wait(lambda: all("ready" in _lines(w.out) or w.proc.poll() is not None for w in writers), 300,
              "the writers' Spark sessions")
        self.check_alive()

    def check_alive(self) -> None:
        """A writer that ended on its own before the stop file: its error fails the run."""
        for w in self.writers.values():
            if not w.killed and w.proc.poll() is not None and not os.path.exists(self.stop_file(w.name)):
                raise AssertionError(f"writer {w.name} ended (exit {w.proc.returncode}):\n"
                                     + "\n".join(_lines(w.out)[-3:]) + "\n" + open(w.err).read()[-3000:])

    def stop(self, writers=None) -> None:
        """Stop ``writers`` (default: every live one) through the stop file; each must exit 0."""
        writers = self.live() if writers is None else writers
        for w in [w for w in writers if "ready" not in self.lines(w.name)]:
            self.kill(w)  # a fresh writer whose JVM is still starting: it did nothing yet
        writers = [w for w in writers if not w.killed]
        for w in writers:
            open(self.stop_file(w.name), "w").close()
        for w in writers:
            code = w.proc.wait(300)
            assert code == 0, f"writer {w.name} exit {code}:\n" + "\n".join(_lines(w.out)[-3:]) + "\n" + \
                open(w.err).read()[-3000:]

    def kill_all(self) -> None:
        for w in self.writers.values():
            if w.proc.poll() is None:
                self.kill(w)

    def entries(self) -> list[dict]:
        """The coordinator's entries after the set-up, in sequence order."""
        names = sorted(n for n in os.listdir(self.coordinator_log) if n.endswith(".json") and n[:20].isdigit())
        out = []
        for name in names:
            if int(name[:20]) > self.base_seq:
                with open(os.path.join(self.coordinator_log, name)) as fh:
                    out.append(json.load(fh))
        return out


def open_bank(spark, tmp_path) -> Bank:
    warehouse = str(tmp_path / "warehouse")
    s = isolde.connect(warehouse=warehouse, spark=spark)
    s.execute("CREATE TABLE acc (id INT, bal INT) USING DELTA TBLPROPERTIES ("
              "'delta.enableDeletionVectors' = 'true', 'isolde.coordinatedCommits' = 'true')")
    s.execute("INSERT INTO acc VALUES " + ", ".join(f"({i}, {START})" for i in range(ACCOUNTS)))
    s.execute("CREATE TABLE audit (transfer_id STRING, src INT, dst INT, amount INT) USING DELTA "
              "TBLPROPERTIES ('isolde.coordinatedCommits' = 'true')")
    bank = Bank(tmp_path, s, warehouse, arm_file=str(tmp_path / "arm"))
    props = dict(s.execute("SHOW TBLPROPERTIES acc").rows)
    assert props.get("isolde.coordinator", "").rstrip("/").endswith("_isolde_coordinator"), props
    assert dict(s.execute("SHOW TBLPROPERTIES audit").rows).get("isolde.coordinator") == props["isolde.coordinator"]
    bank.base_seq = max(int(n[:20]) for n in os.listdir(bank.coordinator_log) if n.endswith(".json"))
    return bank


class Reader(threading.Thread):
    """Runs CHECK with its own session until stopped; every snapshot is checked."""

    def __init__(self, bank: Bank, spark):
        super().__init__(daemon=True)
        self.session = isolde.connect(warehouse=bank.warehouse, spark=spark)
        self.halt = threading.Event()
        self.snapshots = 0
        self.counts: list[int] = []  # audit rows per snapshot, in order
        self.violations: list[str] = []
        self.check()  # the first query plans slowly: before the race

    def check(self) -> None:
        bad, n = snapshot_violations(self.session.execute(CHECK).rows)
        if self.counts and n < self.counts[-1]:
            bad.append(f"the audit count went back from {self.counts[-1]} to {n}")
        self.violations += bad
        self.counts.append(n)
        self.snapshots += 1

    @property
    def with_transfers(self) -> int:
        """Snapshots checked that held at least one transfer."""
        return sum(1 for n in self.counts if n > 0)

    def run(self):
        try:
            while not self.halt.is_set():
                self.check()
        except BaseException as e:  # noqa: BLE001 - a failed read is a violation of the run
            self.violations.append(f"reader: {e!r}")

    def finish(self) -> None:
        self.halt.set()
        self.join(300)
        assert not self.is_alive(), "the reader did not stop"
        self.session.close()


# ------------------------------------------------------------------ the checks after a run
@dataclass
class Outcome:
    committed: set = field(default_factory=set)
    conflicts: Counter = field(default_factory=Counter)
    in_flight: dict = field(default_factory=dict)  # killed in COMMIT: id -> present afterwards
    killed_before_commit: int = 0
    violations: list = field(default_factory=list)


def read_final(bank: Bank, delta_rows) -> tuple:
    """(acc rows, audit rows) as isolde reads them; delta-rs must read the same."""
    s = bank.session
    acc = sorted(tuple(r) for r in s.execute("SELECT id, bal FROM acc").rows)
    audit = sorted(tuple(r) for r in s.execute("SELECT transfer_id, src, dst, amount FROM audit").rows)
    assert delta_rows(bank.table_path("acc")) == acc, "delta-rs reads another acc than isolde"
    assert delta_rows(bank.table_path("audit")) == audit, "delta-rs reads another audit than isolde"
    return acc, audit


def check_run(bank: Bank, delta_rows) -> Outcome:
    """Invariants 1 (on the final state), 2 and 3, and the coordinator entries."""
    out = Outcome()
    bad, _ = snapshot_violations(bank.session.execute(CHECK).rows)
    out.violations += [f"final state: {b}" for b in bad]
    acc, audit = read_final(bank, delta_rows)
    rows = {}
    for tid, src, dst, amount in audit:
        if tid in rows:
            out.violations.append(f"audit row {tid} twice")
        rows[tid] = (src, dst, amount)
    begun, attempted, conflicted = {}, set(), set()
    for w in bank.writers.values():
        open_ids = []  # begun, no outcome
        for line in bank.lines(w.name):
            kind, _, rest = line.partition(" ")
            words = rest.split(" ")
            if kind == "begin":
                begun[words[0]] = tuple(int(x) for x in words[1:4])
                open_ids.append(words[0])
            elif kind == "attempt":
                attempted.add(words[0])
            elif kind == "committed":
                out.committed.add(words[0])
                open_ids.remove(words[0])
            elif kind == "conflict":
                conflicted.add(words[0])
                open_ids.remove(words[0])
                if words[1] not in CONFLICT_NAMES:
                    out.violations.append(f"{words[0]} raised {words[1]}, not a named conflict")
                out.conflicts[words[1]] += 1
            elif kind == "error":
                out.violations.append(f"writer {w.name}: {rest}")
        if open_ids and not w.killed:
            out.violations.append(f"writer {w.name} ended cleanly with transfers {open_ids} unresolved")
        if len(open_ids) > 1:
            out.violations.append(f"writer {w.name} left several transfers unresolved: {open_ids}")
        for tid in open_ids:  # the killed writer's last transfer: all or nothing, whichever
            if tid in attempted:
                out.in_flight[tid] = tid in rows
            else:
                out.killed_before_commit += 1
    for tid in out.committed - set(rows):
        out.violations.append(f"{tid} reported committed, yet has no audit row")
    for tid in conflicted & set(rows):
        out.violations.append(f"{tid} raised a conflict, yet its audit row is there")
    for tid in set(rows) - attempted:
        out.violations.append(f"audit row {tid} of a transfer never attempted")
    for tid, moves in rows.items():
        if tid in begun and begun[tid] != moves:
            out.violations.append(f"audit row {tid} says {moves}, its writer {begun[tid]}")
    balances = {i: START for i in range(ACCOUNTS)}
    for src, dst, amount in rows.values():
        balances[src] -= amount
        balances[dst] += amount
    if acc != sorted(balances.items()):
        out.violations.append(f"balances {acc} are not the audit rows replayed {sorted(balances.items())}")
    out.violations += check_entries(bank, set(rows))
    return out


def check_entries(bank: Bank, audit_ids: set) -> list[str]:
    """Every coordinator entry after the set-up holds one commit of acc and one of audit (whose
    one row is a transfer's), each published in its table's log exactly as decided."""
    bad, carried = [], []
    logs = {bank.table_path(t) + "/_delta_log": t for t in ("acc", "audit")}
    for entry in bank.entries():
        tables = sorted(logs.get(c["log"], c["log"]) for c in entry["commits"])
        operations = {json.loads(c["body"].partition("\n")[0])["commitInfo"]["operation"] for c in entry["commits"]}
        if len(tables) == 1 and tables[0] in logs.values() and operations <= {"VACUUM START", "VACUUM END"}:
            continue  # VACUUM's own commits (delta.vacuum.logging) go through the coordinator too
        if tables != ["acc", "audit"]:
            bad.append(f"entry {entry['seq']} commits {tables}")
            continue
        for c in entry["commits"]:
            path = os.path.join(c["log"], f"{c['version']:020d}.json")
            if not os.path.exists(path):
                bad.append(f"entry {entry['seq']}: {path} was never published")
            elif open(path, encoding="utf-8").read() != c["body"]:
                bad.append(f"entry {entry['seq']}: {path} is not the commit it decided")
            if logs[c["log"]] == "audit":
                adds = [json.loads(line)["add"] for line in c["body"].splitlines() if line.startswith('{"add"')]
                stats = [json.loads(a["stats"]) for a in adds]
                if len(stats) != 1 or stats[0]["numRecords"] != 1:
                    bad.append(f"entry {entry['seq']} adds {stats} to audit, not one row")
                else:
                    carried.append(stats[0]["minValues"]["transfer_id"])
    if sorted(carried) != sorted(audit_ids):
        bad.append(f"the entries carry transfers {sorted(carried)}, audit holds {sorted(audit_ids)}")
    return bad


def data_files(path: str) -> set:
    """The table's data files and deletion vectors on disk (not the log, not the leases)."""
    out = set()
    for root, dirs, names in os.walk(path):
        if os.path.relpath(root, path).split(os.sep)[0] in ("_delta_log", ".isolde-leases"):
            continue
        out |= {os.path.join(root, n) for n in names
                if n.endswith(".parquet") or (n.startswith("deletion_vector") and n.endswith(".bin"))}
    return out


def files_of(path: str, actions) -> set:
    """The data files and deletion-vector files ``actions`` (AddFiles) reference."""
    from isolde.executor.catalog.properties import local_path
    from isolde.executor.log.deletion_vectors import dv_file_path

    out = set()
    for f in actions:
        out.add(os.path.normpath(local_path(path, f.path)))
        if f.deletion_vector is not None and f.deletion_vector.storage_type in ("u", "p"):
            out.add(os.path.normpath(dv_file_path(path, f.deletion_vector)))
    return out


def live_files(path: str) -> set:
    from isolde.executor.log import DeltaLog

    return files_of(path, DeltaLog.for_table(path).update().all_files)


def vacuum_and_check(bank: Bank, delta_rows, expected: tuple) -> dict:
    """VACUUM both tables RETAIN 0 HOURS: every live file stays, every other data file (the
    killed writers' orphans: their leases died with them) goes, and both readers still read
    ``expected`` (acc rows, audit rows)."""
    s = bank.session
    s.execute("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    figures = {"orphans removed": 0}
    for table in ("acc", "audit"):
        path = bank.table_path(table)
        before = data_files(path)
        s.execute(f"VACUUM {table} RETAIN 0 HOURS")
        after, live = data_files(path), live_files(path)
        assert live <= after, f"VACUUM deleted live files of {table}: {sorted(live - after)[:5]}"
        assert after == live, f"VACUUM left files of {table} no version references: {sorted(after - live)[:5]}"
        figures["orphans removed"] += len(before - after)
    assert read_final(bank, delta_rows) == expected
    return figures


# ------------------------------------------------------------------ the runs
#: the race goes on after its time until the reader checked this many snapshots holding transfers
READS_WANTED = 5
#: ... and, in the kill variants, until this many writers were SIGKILLed
KILLS_WANTED = 2


def race(bank: Bank, seconds: float, reader: Reader, kill_rng: random.Random | None, counts) -> int:
    """Let the writers run ``seconds`` (and on until the reader checked READS_WANTED snapshots
    holding transfers). With ``kill_rng`` (and on until KILLS_WANTED kills): 1-4 s after every
    writer is ready, SIGKILL a random one that began a transfer -- at a random moment, or, one
    kill in two, 0-150 ms after its next ``attempt`` report (in COMMIT: checking conflicts,
    deciding, publishing) -- and start a fresh writer in its place. Returns the kills."""
    deadline = time.time() + seconds
    next_kill = time.time() + kill_rng.uniform(1, 4) if kill_rng else float("inf")
    kills, generation = 0, Counter()
    while time.time() < deadline or reader.with_transfers < READS_WANTED or (kill_rng and kills < KILLS_WANTED):
        if time.time() > deadline + 300:
            raise AssertionError(f"after {seconds + 300:.0f} s the reader checked {reader.with_transfers} "
                                 f"snapshots with transfers, and {kills} writers were killed")
        bank.check_alive()
        if not reader.is_alive():
            raise AssertionError(f"the reader stopped: {reader.violations[-3:]}")
        live = bank.live()
        if not all("ready" in bank.lines(w.name) for w in live):
            next_kill = time.time() + kill_rng.uniform(1, 4)  # a fresh writer's JVM is starting
        elif time.time() >= next_kill:
            victims = [w for w in live if any(line.startswith("begin ") for line in bank.lines(w.name))]
            if victims:
                victim = kill_rng.choice(victims)
                if kill_rng.random() < 0.5:  # in COMMIT (some 10-200 ms on 2 busy cores)
                    attempts = sum(line.startswith("attempt ") for line in bank.lines(victim.name))
                    _wait(lambda: sum(line.startswith("attempt ") for line in bank.lines(victim.name)) > attempts
                          or victim.proc.poll() is not None, 120, f"{victim.name}'s next commit", poll=0.001)
                    time.sleep(kill_rng.uniform(0, 0.15))
                bank.kill(victim)
                kills += 1
                slot = victim.name.split("g")[0]
                generation[slot] += 1
                bank.start(f"{slot}g{generation[slot]}")
        time.sleep(0.05)
    if kill_rng is not None:
        counts["two-table bank: writers SIGKILLed"] += kills
    return kills


def run_bank(spark, tmp_path, delta_rows, summary, counts, *, writers: int, seconds: float, kills: bool) -> None:
    started = time.time()
    bank = open_bank(spark, tmp_path)
    reader = None
    try:
        first = [bank.start(f"w{n}") for n in range(writers)]
        reader = Reader(bank, spark)  # its first query while the writers' JVMs start
        bank.wait_ready(first)
        reader.start()
        killed = race(bank, seconds, reader, random.Random(seconds) if kills else None, counts)
        bank.stop()
        reader.finish()
    finally:
        if reader is not None and reader.is_alive():
            reader.halt.set()
        bank.kill_all()
    outcome = check_run(bank, delta_rows)
    violations = reader.violations + outcome.violations
    name = f"two-table bank x{writers}{' kills' if kills else ''}"
    summary.append({"name": name, "seconds": time.time() - started, "committed": len(outcome.committed),
                    "conflicts": outcome.conflicts, "reads": reader.snapshots, "violations": violations})
    counts["two-table bank: transfers killed in COMMIT, rolled forward"] += sum(outcome.in_flight.values())
    counts["two-table bank: transfers killed in COMMIT, absent"] += sum(not v for v in outcome.in_flight.values())
    assert not violations, "\n".join(violations[:20])
    assert reader.with_transfers >= READS_WANTED, "the reader checked too few snapshots with transfers"
    assert len(outcome.committed) >= writers, f"only {len(outcome.committed)} transfers committed"
    if kills:
        assert killed > 0, "no writer was killed"
    acc_audit = read_final(bank, delta_rows)
    vacuum_and_check(bank, delta_rows, acc_audit)
    bank.session.close()


def test_two_table_bank_transfers_are_all_or_nothing(spark, tmp_path, delta_rows, summary, counts):
    run_bank(spark, tmp_path, delta_rows, summary, counts, writers=3, seconds=SHORT_SECONDS, kills=False)


def test_two_table_bank_survives_writers_killed_at_random(spark, tmp_path, delta_rows, summary, counts):
    run_bank(spark, tmp_path, delta_rows, summary, counts, writers=3, seconds=SHORT_SECONDS, kills=True)


@pytest.mark.torture
@pytest.mark.parametrize("kills", [False, True], ids=["race", "kills"])
def test_two_table_bank_long(spark, tmp_path, delta_rows, summary, counts, kills):
    run_bank(spark, tmp_path, delta_rows, summary, counts, writers=4, seconds=LONG_SECONDS, kills=kills)


# ------------------------------------------------------------------ killed between decision and publication
def hang_after_decision(bank: Bank, writer: Writer, delta_rows) -> tuple[str, dict]:
    """Arm ``writer`` (its next commit hangs right after the decision), wait for its report,
    SIGKILL it; then, before any isolde access, check the window was hit: the entry is decided,
    neither table has the version it decided. Returns (transfer id, entry)."""
    open(bank.arm_file, "w").close()
    _wait(lambda: any(line.startswith("decided ") for line in bank.lines(writer.name))
          or writer.proc.poll() is not None, 300, f"{writer.name}'s decision")
    bank.kill(writer)
    decided = [line.split(" ") for line in bank.lines(writer.name) if line.startswith("decided ")]
    assert len(decided) == 1, bank.lines(writer.name)[-3:] + [open(writer.err).read()[-3000:]]
    _, tid, seq = decided[0]
    lines = bank.lines(writer.name)
    assert lines[-2:] == [f"attempt {tid}", f"decided {tid} {seq}"], lines[-3:]
    entry_path = os.path.join(bank.coordinator_log, f"{int(seq):020d}.json")
    assert os.path.exists(entry_path), f"the decided entry {entry_path} is missing"
    with open(entry_path) as fh:
        entry = json.load(fh)
    assert entry["seq"] == int(seq)
    tables = {c["log"]: os.path.join(c["log"], f"{c['version']:020d}.json") for c in entry["commits"]}
    assert set(tables) == {bank.table_path(t) + "/_delta_log" for t in ("acc", "audit")}
    unpublished = [p for p in tables.values() if not os.path.exists(p)]
    assert unpublished, "the window was not hit: both tables already have the decided versions"
    assert len(unpublished) == 2, f"half published before any isolde access ran: {unpublished}"
    # the newest entry: nothing was decided after it
    assert max(int(n[:20]) for n in os.listdir(bank.coordinator_log) if n.endswith(".json")) == int(seq)
    # an engine that does not know the coordinator reads the published logs: the transfer in
    # neither table, and the published state is itself consistent
    their_audit = delta_rows(bank.table_path("audit"))
    assert tid not in {r[0] for r in their_audit}
    balances = {i: START for i in range(ACCOUNTS)}
    for _, src, dst, amount in their_audit:
        balances[src] -= amount
        balances[dst] += amount
    assert delta_rows(bank.table_path("acc")) == sorted(balances.items())
    return tid, entry


def decided_files(bank: Bank, entry: dict) -> dict:
    """table -> the data and deletion-vector files the entry's commit adds (read from the entry)."""
    from isolde.executor.log.actions import AddFile, parse_commit

    out = {}
    for c in entry["commits"]:
        path = os.path.dirname(c["log"])
        out[os.path.basename(path)] = files_of(path, [a for a in parse_commit(c["body"]) if isinstance(a, AddFile)])
    return out


def assert_rolled_forward(bank: Bank, tid: str, entry: dict) -> None:
    """The whole transaction is in both tables, at the versions the entry decided."""
    rows = bank.session.execute(CHECK).rows
    bad, n = snapshot_violations(rows)
    assert not bad, bad
    audit = {r[0]: r[1:] for r in bank.session.execute("SELECT * FROM audit").rows}
    assert tid in audit, f"the decided transfer {tid} is not in audit"
    assert n == len(audit)
    for c in entry["commits"]:
        path = os.path.join(c["log"], f"{c['version']:020d}.json")
        assert open(path, encoding="utf-8").read() == c["body"], f"{path} is not the decided commit"
        table = os.path.basename(os.path.dirname(c["log"]))
        later = [(r.version, r.operation) for r in bank.session.execute(f"DESCRIBE HISTORY {table}").rows
                 if r.version >= c["version"]]
        assert later and later[-1][0] == c["version"], f"{table} lacks version {c['version']}: {later}"
        assert all(op.startswith("VACUUM") for _, op in later[:-1]), f"{table} changed after the entry: {later}"


def test_a_writer_killed_between_decision_and_publication_is_rolled_forward(spark, tmp_path, delta_rows, summary,
                                                                             counts):
    """Two writers race with the reader; then, with the others stopped, w0 is armed and killed
    between decision and publication, and the first isolde access is a query; then a fresh
    writer, armed from the start, is killed the same way and the first isolde access is VACUUM
    (it must roll forward before it decides what is live). Both transactions are whole in both
    tables, every file they reference survives VACUUM, the runs' invariants hold."""
    started = time.time()
    bank = open_bank(spark, tmp_path)
    reader = None
    try:
        w0, w1 = bank.start("w0"), bank.start("w1")
        reader = Reader(bank, spark)  # its first query while the writers' JVMs start
        bank.wait_ready([w0, w1])
        reader.start()
        race(bank, SHORT_SECONDS * 2 / 3, reader, None, counts)
        bank.stop([w1])
        reader.finish()
        # 1. killed in the window; the first isolde access is a query
        tid, entry = hang_after_decision(bank, w0, delta_rows)
        assert_rolled_forward(bank, tid, entry)
        files = decided_files(bank, entry)
        acc_audit = read_final(bank, delta_rows)
        vacuum_and_check(bank, delta_rows, acc_audit)
        for table, paths in files.items():
            assert paths <= data_files(bank.table_path(table)), f"VACUUM deleted files of {tid} from {table}"
        # 2. killed in the window; the first isolde access is VACUUM
        w2 = bank.start("w2")  # the arm file is there: its first transfer hangs after its decision
        tid2, entry2 = hang_after_decision(bank, w2, delta_rows)
        files2 = decided_files(bank, entry2)
        for table, paths in files2.items():
            assert paths <= data_files(bank.table_path(table)), f"files of {tid2} missing before VACUUM"
        bank.session.execute("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
        bank.session.execute("VACUUM acc RETAIN 0 HOURS")
        for c in entry2["commits"]:  # VACUUM published the whole entry (both tables) first
            path = os.path.join(c["log"], f"{c['version']:020d}.json")
            assert os.path.exists(path), f"VACUUM acc ran without publishing the decided {path}"
        for table, paths in files2.items():
            assert paths <= data_files(bank.table_path(table)), f"VACUUM deleted files of {tid2} from {table}"
        assert_rolled_forward(bank, tid2, entry2)
    finally:
        if reader is not None and reader.is_alive():
            reader.halt.set()
        bank.kill_all()
    counts["two-table bank: killed between decision and publication, rolled forward"] += 2
    outcome = check_run(bank, delta_rows)
    violations = reader.violations + outcome.violations
    summary.append({"name": "two-table bank: killed after decision", "seconds": time.time() - started,
                    "committed": len(outcome.committed), "conflicts": outcome.conflicts, "reads": reader.snapshots,
                    "violations": violations})
    assert not violations, "\n".join(violations[:20])
    assert outcome.in_flight == {tid: True, tid2: True}
    assert reader.with_transfers >= READS_WANTED, "the reader checked too few snapshots with transfers"
    assert outcome.committed, "no transfer committed before the kill"
    vacuum_and_check(bank, delta_rows, read_final(bank, delta_rows))
    bank.session.close()
