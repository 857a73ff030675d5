"""The mixed-engine races' moving parts: a client for the engine workers (delta_worker.py), the
bank workload in two dialects-of-one (the same SQL text runs on isolde and on Delta-Spark), and
its checker.

The bank: accounts 0..BASE-1 (branch = id, balance START, ``last`` = the tag of the last
transfer that touched it). A writer moves money between two random accounts, by

- ``UPDATE ... SET balance = balance + CASE ..., last = '<tag>' WHERE id IN (a, b) AND branch IN (a, b)``, or
- ``MERGE`` of the two legs plus a ledger row (id unique to the transfer, branch -1 - writer,
  balance = the amount, last = the tag): matched legs update, the ledger row is inserted.

The branch terms name the partitions a statement reads when the table is partitioned by branch:
each engine then reads only the two accounts' partitions and its own ledger partition, so the
writers conflict where their accounts overlap (file level, Delta) -- not on every commit.

Every statement's commit carries its tag in commitInfo.userMetadata, so the log says which
statement made each version. Invariants (check()): every statement committed or raised a named
conflict; the log after the set-up is exactly the committed tags, each once; the table equals
the serial replay of the committed statements in log order (balances, each account's ``last``
and one ledger row per committed MERGE -- a lost update or a duplicate shows here); the total of
the accounts is constant in every snapshot a reader saw.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import select
import subprocess
import sys
import time
from dataclasses import dataclass

from tests.helpers.reference import conflict_names
from tests.helpers.worker_output import commit_infos

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(REPO, "tests", "helpers", "delta_worker.py")

BASE = 30
START = 100
LEDGER = 1_000_000  # writer n's ledger ids: (n + 1) * LEDGER + its sequence number


_SERIAL = itertools.count()


class Worker:
    """One engine's worker process: ``call(cmd, **args)`` sends a command and waits for its reply;
    ``send`` / ``reply`` split the two when the test acts while the worker is busy."""

    def __init__(self, engine: str, warehouse: str, log_dir: str):
        env = dict(os.environ, PYTHONPATH=REPO, ISOLDE_SPARK_MASTER="local[1]", ISOLDE_JVM="startup",
                   ISOLDE_DRIVER_MEMORY=os.environ.get("ISOLDE_WORKER_MEMORY", "1g"), PYTHONUNBUFFERED="1",
                   SPARK_LOCAL_IP="127.0.0.1")
        self.engine = engine
        self.err_path = os.path.join(log_dir, f"{engine}-{next(_SERIAL)}.err")  # several per engine
        self.proc = subprocess.Popen([sys.executable, WORKER, engine, warehouse], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=open(self.err_path, "w"), text=True,
                                     bufsize=1, start_new_session=True)
        self.pending = 0

    def started(self, timeout: float = 300) -> "Worker":
        ready = self.reply(timeout)
        assert ready.get("ready") == self.engine, f"{self.engine} worker did not start: {ready}\n{self.stderr()}"
        return self

    def stderr(self) -> str:
        try:
            with open(self.err_path) as fh:
                return fh.read()[-4000:]
        except OSError:
            return ""

    def send(self, cmd: str, **args) -> None:
        self.proc.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.proc.stdin.flush()
        self.pending += 1

    def reply(self, timeout: float = 240) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise AssertionError(f"the {self.engine} worker did not answer in {timeout:.0f} s\n{self.stderr()}")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the {self.engine} worker died (exit {self.proc.poll()})\n{self.stderr()}")
        self.pending = max(0, self.pending - 1)
        return json.loads(line)

    def call(self, cmd: str, timeout: float = 240, **args) -> dict:
        self.send(cmd, **args)
        return self.reply(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(30)


# ---------------------------------------------------------------------------------------------
# the bank


@dataclass(frozen=True)
class BankConfig:
    partitioned: bool
    deletion_vectors: bool
    isolation: str  # Serializable | WriteSerializable

    @property
    def name(self) -> str:
        return (f"{'parted' if self.partitioned else 'flat'}-{'dv' if self.deletion_vectors else 'cow'}-"
                f"{self.isolation}")

    def ddl(self, table: str) -> str:
        parted = " PARTITIONED BY (branch)" if self.partitioned else ""
        return (f"CREATE TABLE {table} (id BIGINT, branch INT, balance BIGINT, last STRING){parted} TBLPROPERTIES "
                f"('delta.isolationLevel' = '{self.isolation}', "
                f"'delta.enableDeletionVectors' = '{str(self.deletion_vectors).lower()}')")

    def fill(self, table: str) -> str:
        return f"INSERT INTO {table} VALUES " + ", ".join(f"({i}, {i}, {START}, 'init')" for i in range(BASE))


def ledger_branch(ledger: int) -> int:
    return -(ledger // LEDGER)


def transfer_sql(table: str, kind: str, a: int, b: int, amount: int, ledger: int, tag: str) -> str:
    if kind == "update":
        return (f"UPDATE {table} SET balance = balance + CASE WHEN id = {a} THEN -{amount} ELSE {amount} END, "
                f"last = '{tag}' WHERE id IN ({a}, {b}) AND branch IN ({a}, {b})")
    lb = ledger_branch(ledger)
    return (f"MERGE INTO {table} t USING (SELECT * FROM VALUES ({a}, -{amount}, {a}), ({b}, {amount}, {b}), "
            f"({ledger}, {amount}, {lb}) AS v(id, d, br)) s ON t.id = s.id AND t.branch IN ({a}, {b}, {lb}) "
            f"WHEN MATCHED THEN UPDATE SET balance = t.balance + s.d, last = '{tag}' "
            f"WHEN NOT MATCHED THEN INSERT (id, branch, balance, last) VALUES (s.id, s.br, s.d, '{tag}')")


def bank_writer(engine, table: str, seconds: float, start_at: float, seed: int, out: str, writer: int,
                pause: float = 0.0, markers: tuple = (), cap: float = 0.0) -> dict:
    """Run in a worker: transfers for ``seconds`` from ``start_at``; one JSON line per event in
    ``out`` (``start`` before a statement runs, then its outcome). ``pause``: up to that many
    seconds between statements (isolde's run several times faster than Delta-Spark's here, and
    would otherwise conflict every Delta statement away). ``markers``: one file per writer, made
    at its first commit; past ``seconds`` the run goes on, up to ``cap`` seconds, until all exist
    (so each engine has committed something to race against)."""
    rng = random.Random(seed)
    counts = {"ok": 0, "conflict": 0, "error": 0}
    while time.time() < start_at:
        time.sleep(0.01)
    deadline, hard = start_at + seconds, start_at + max(cap, seconds)

    def going() -> bool:
        now = time.time()
        return now < deadline or (now < hard and not all(os.path.exists(m) for m in markers))

    seq = 0
    with open(out, "a", buffering=1) as fh:
        while going():
            seq += 1
            tag = f"{engine.name}{writer}-{seq}"
            a, b = rng.sample(range(BASE), 2)
            op = {"tag": tag, "kind": rng.choice(["update", "merge"]), "a": a, "b": b,
                  "amount": rng.randint(1, 20), "ledger": (writer + 1) * LEDGER + seq}
            fh.write(json.dumps({"event": "start", **op}) + "\n")
            engine.tag(tag)
            try:
                rows, version = engine.run(transfer_sql(table, op["kind"], op["a"], op["b"], op["amount"],
                                                        op["ledger"], tag))
            except Exception as exc:  # named below: a conflict, or an error that fails the run
                from tests.helpers.reference import error_class

                name = error_class(exc)
                outcome = "conflict" if name in conflict_names else "error"
                counts[outcome] += 1
                fh.write(json.dumps({"event": outcome, "tag": tag, "error": name,
                                     "message": message_of(exc)[:300]}) + "\n")
                if outcome == "error":
                    break
                continue
            counts["ok"] += 1
            if markers:
                open(markers[writer], "a").close()
            fh.write(json.dumps({"event": "ok", "tag": tag, "version": version, "rows": rows}) + "\n")
            time.sleep(rng.uniform(0, pause))
    engine.tag(None)
    return counts


def message_of(exc: BaseException) -> str:
    """The first line of an error's message (a JVM error's own, not py4j's "An error occurred")."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_java_exception", None)
    try:
        text = java.getMessage() if java is not None else str(exc)
    except Exception:
        text = str(exc)
    return (text or "").split("\n")[0]


def initial_state() -> dict:
    """id -> (branch, balance, last)."""
    return {i: (i, START, "init") for i in range(BASE)}


def apply(state: dict, op: dict) -> None:
    a, b, amount, tag = op["a"], op["b"], op["amount"], op["tag"]
    state[a] = (state[a][0], state[a][1] - amount, tag)
    state[b] = (state[b][0], state[b][1] + amount, tag)
    if op["kind"] == "merge":
        assert op["ledger"] not in state, f"ledger id {op['ledger']} reused"
        state[op["ledger"]] = (ledger_branch(op["ledger"]), amount, tag)


def read_reports(paths: list[str]) -> tuple[dict, dict, list]:
    """(ops by tag, outcome event by tag, problems) from the writers' reports."""
    ops, outcomes, bad = {}, {}, []
    for path in paths:
        with open(path) as fh:
            for line in fh.read().split("\n")[:-1]:
                event = json.loads(line)
                if event["event"] == "start":
                    ops[event["tag"]] = event
                else:
                    outcomes[event["tag"]] = event
    for tag in ops:
        if tag not in outcomes:
            bad.append(f"{tag} started and never reported an outcome")
        elif outcomes[tag]["event"] == "error":
            bad.append(f"{tag} ({ops[tag]['kind']}) failed with {outcomes[tag]['error']}: "
                       f"{outcomes[tag]['message']}")
    return ops, outcomes, bad


def check(table_path: str, base: int, reports: list[str], readers: dict) -> tuple[list, dict]:
    """Every violation of the run, and a summary. ``readers``: engine -> sorted rows (id, branch,
    balance, last) it reads at the end; the sums a reader saw during the race under "sums"."""
    ops, outcomes, bad = read_reports(reports)
    infos = commit_infos(table_path, base + 1)
    committed = {t for t, e in outcomes.items() if e["event"] == "ok"}
    log_tags = [i.get("userMetadata") for i in infos]
    for info in infos:
        tag = info.get("userMetadata")
        if tag not in committed:
            bad.append(f"version {info['version']} ({info.get('operation')}) is tagged {tag!r}, "
                       "which no writer reported as committed")
    for tag in committed:
        n = log_tags.count(tag)
        if n != 1:
            bad.append(f"{tag} reported a commit, and the log has it {n} times")
        reported = outcomes[tag].get("version")
        if reported is not None and n == 1 and infos[log_tags.index(tag)]["version"] != reported:
            bad.append(f"{tag} reported version {reported}, the log has it at "
                       f"{infos[log_tags.index(tag)]['version']}")
    for tag, event in outcomes.items():
        if event["event"] == "conflict" and tag in log_tags:
            bad.append(f"{tag} raised {event['error']} yet its commit is in the log")
    state = initial_state()
    for tag in log_tags:
        if tag in ops:
            apply(state, ops[tag])
    model = sorted((i, br, bal, last) for i, (br, bal, last) in state.items())
    for engine, rows in readers.items():
        if engine == "sums":
            continue
        if rows != model:
            missing = sorted(set(model) - set(rows))[:10]
            extra = sorted(set(rows) - set(model))[:10]
            bad.append(f"{engine} reads a table that differs from the serial replay in log order: "
                       f"missing {missing}, unexpected {extra}")
    for total in readers.get("sums", []):
        if total != BASE * START:
            bad.append(f"a reader saw the accounts total {total}, not {BASE * START}")
    conflicts: dict = {}
    for event in outcomes.values():
        if event["event"] == "conflict":
            key = f"{event['tag'].split('-')[0]}:{event['error']}"
            conflicts[key] = conflicts.get(key, 0) + 1
    summary = {"committed": {e: sum(1 for t in committed if t.startswith(e)) for e in ("isolde", "delta")},
               "conflicts": conflicts, "versions": len(infos)}
    return bad, summary
