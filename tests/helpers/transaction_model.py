"""A model checker for multi-statement transactions on one table (executor/txn/multi_statement.py,
executor/log/staged_log.py), at the log level, built on ``row_model.py``.

A history is 2-4 concurrent *transactions* on the table of ``row_model`` (``(id INT, n BIGINT)``,
deletion vectors on, ids 0..K-1 with n = 0), each of 1-4 statements of ``row_model``'s kinds
(single-row UPDATE / DELETE / MERGE / INSERT, and with ``extended`` > 0 also the two-key UPDATE,
the MOVE and the SWEEP). Statement i of the history (numbered across transactions) adds
``w = 2**i``, so the final rows say which statements' effects landed where.

A transaction runs as a session runs ``BEGIN; ...; COMMIT`` (executor/session/transactions.py),
at the log level:

* ``start``: a ``MultiStatementTransaction`` is opened and its first statement runs; the
  statement's ``mt.log_for("t", real_log)`` pins the table's latest snapshot (the first touch);
* ``run``: the transaction's next statement runs, against the same ``StagedDeltaLog``, between
  ``mt.begin_statement(<class name>)`` and ``mt.end_statement(ok)``; each statement is
  ``row_model.start`` (the planner's conflict scope recorded by ``record_scope``, the rows read
  with pyarrow and deletion vectors, the files and vectors staged) against the staged log, and
  its commit goes to memory: it reads its own transaction's earlier writes and nothing any
  other transaction committed after the pin;
* ``commit``: ``mt.prepare(lambda log, snapshot: log.start_transaction(snapshot))`` then
  ``mt.commit(prepared)``: one real version, or a named conflict (and no version).

The judgement (``judge``), as ``row_model.judge`` judges single statements:

* at every commit: a committed transaction is exactly ONE new version of the real log (the
  next one), whose commitInfo names the statement's operation (one statement wrote) or
  ``MULTI-STATEMENT TRANSACTION`` (several did) and the pinned version as its readVersion; a
  transaction with nothing to commit (``prepare`` returned None) makes no version; a refused
  transaction leaves no version, raised a ``ConcurrentModificationException`` subclass and is
  rolled back; statements never reach the real log before their transaction's commit;
* the committed table (pyarrow with deletion vectors, and delta-rs) must equal the in-memory
  model replaying the schedule with the same accept / refuse decisions, and every statement's
  result (rows deleted or updated, rows added) must be what the model's statement computes at
  the transaction's private state (its pinned snapshot plus its own earlier statements);
* it must equal a serial execution of whole transactions (each transaction's statements
  consecutive, in their order) from the initial rows: in commit order under Serializable, in
  some order under WriteSerializable; the final rows and every committed transaction's statement
  results. A transaction with nothing to write (``prepare`` returned None) that committed takes
  part at its commit point: ``validate_reads`` checks its reads against every winner since its
  pin, so what it read must still hold there (under Serializable; under WriteSerializable it
  may be ordered before blind appends, as any order is tried);
* when something was refused: had every transaction been forced through (its net effect on row
  identities, computed at its pinned snapshot, applied in commit order; one with nothing to
  write at its commit point), would the result still be such a serial execution? If so the
  refusal was a false conflict. Also per refused transaction: forcing just that one through.
  Refused transactions with nothing to write are counted apart too: placed at their pin they
  would always be serial, but isolde validates them at COMMIT, where this model places them.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

from isolde.errors import ConcurrentModificationException
from isolde.executor.log import DeltaLog
from isolde.executor.txn import multi_statement
from isolde.executor.txn.multi_statement import MultiStatementTransaction

from tests.helpers import model_tally
from tests.helpers import row_model as M
from tests.helpers.model_tally import labels as _labels, outcome_lines, share
from tests.helpers.row_model import (DELETE, EXTENDED_KINDS, INSERT, KINDS, MERGE, MOVE, SERIALIZABLE, SWEEP, UPDATE,
                                     UPDATE2, Row, Stmt)

#: the class name ``mt.begin_statement`` gets for each statement kind (the AST node's)
STATEMENT_CLASS = {UPDATE: "Update", UPDATE2: "Update", MOVE: "Update", DELETE: "Delete", SWEEP: "Delete",
                   MERGE: "Merge", INSERT: "Insert"}


# --------------------------------------------------------------------------- transactions and histories


@dataclass(frozen=True)
class Txn:
    idx: int
    stmts: tuple  # Stmt, numbered across the history (their weights distinct)

    def label(self) -> str:
        return f"T{self.idx}"


@dataclass(frozen=True)
class TxnHistory:
    seed: int
    files: tuple  # ids of each initial data file, in row order
    txns: tuple  # Txn
    schedule: tuple  # ("start" | "run" | "commit", transaction index); start runs the first statement
    setup: tuple = ()  # ids a DELETE removes at version 1, before any transaction

    @property
    def stmts(self) -> tuple:
        return tuple(s for t in self.txns for s in t.stmts)

    @property
    def created_rows(self) -> list:
        return [(i, 0) for ids in self.files for i in ids]

    @property
    def initial_rows(self) -> list:
        return [r for r in self.created_rows if r[0] not in self.setup]

    def describe(self) -> str:
        lines = [f"history seed={self.seed}: files " + ", ".join(f"f{j}=ids {list(ids)}" for j, ids in enumerate(self.files))]
        if self.setup:
            lines.append(f"  v1: DELETE FROM t WHERE id IN {tuple(self.setup)}")
        return "\n".join(lines + describe_txns(self.txns, self.schedule))


def describe_txns(txns: Sequence, schedule: Sequence) -> list:
    """A history's lines for its transactions (``label()``, ``stmts`` with ``label()`` and
    ``sql``) and its schedule."""
    lines = [f"  {t.label()}: BEGIN; " + "; ".join(f"{s.label()}: {s.sql}" for s in t.stmts) + "; COMMIT"
             for t in txns]
    cursor: Counter = Counter()
    events = []
    for ev, t in schedule:
        if ev == "commit":
            events.append(f"commit {txns[t].label()}")
        else:
            events.append(f"{ev} {txns[t].label()} ({txns[t].stmts[cursor[t]].label()})")
            cursor[t] += 1
    lines.append("  schedule: " + ", ".join(events))
    return lines


def generate_history(seed: int, *, reuse: float = 0.3, own: float = 0.3, absent_keys: int = M.ABSENT_KEYS,
                     extended: float = 0.0, setup: float = 0.0, max_txns: int = 4, max_stmts: int = 4,
                     same_snapshot: float = 0.5) -> TxnHistory:
    """A random history, a function of its arguments only (the same for every level and mode).

    2..``max_txns`` transactions of 1..``max_stmts`` statements each. A statement's key is,
    with probability ``own``, one its own transaction picked before (read your own writes: an
    INSERT then an UPDATE of the row it inserted), else with probability ``reuse`` one any
    earlier statement picked (the collisions where conflicts are), else uniform over the
    table's ids and ``absent_keys`` more. With ``extended`` > 0 a statement is, with that
    probability, one of ``EXTENDED_KINDS``. With ``setup`` > 0 the table gets, with that
    probability, a deletion-vector DELETE of 1-2 ids at version 1 (a vector the transactions'
    vectors must be merged with).

    Schedule: with probability ``same_snapshot`` every transaction pins the initial snapshot
    (its first statement runs) before anything commits; the later statements and the commits
    then interleave at random. Otherwise the events of all transactions interleave at random
    (transactions start in index order), so some pin after others committed."""
    rng = random.Random(seed)
    k = rng.randint(6, 10)
    ids = list(range(k))
    if rng.random() < 0.5:
        files = (tuple(ids),)
    else:
        cut = rng.randint(2, k - 2)
        files = (tuple(ids[:cut]), tuple(ids[cut:]))
    universe = list(range(k + absent_keys))
    sizes = [rng.randint(1, max_stmts) for _ in range(rng.randint(2, max_txns))]
    total = sum(sizes)
    keys: list[int] = []
    txns, i = [], 0
    for t, size in enumerate(sizes):
        own_keys: list[int] = []

        def draw_key() -> int:
            if own_keys and rng.random() < own:
                return rng.choice(own_keys)
            if keys and rng.random() < reuse:
                return rng.choice(keys)
            return rng.choice(universe)

        stmts = []
        for _ in range(size):
            key = draw_key()
            kind, key2, sweep = rng.choice(KINDS), -1, ()
            picked = [key]
            if extended > 0 and rng.random() < extended:
                kind = rng.choice(EXTENDED_KINDS)
                if kind == SWEEP:  # the statements whose rows it deletes (rows whose n is their weight)
                    sweep = tuple(sorted(rng.sample(range(total), min(total, rng.randint(1, 2)))))
                else:
                    key2 = draw_key()
                    picked.append(key2)
            keys += picked
            own_keys += picked
            stmts.append(Stmt(i, kind, key, 1 << i, key2, sweep))
            i += 1
        txns.append(Txn(t, tuple(stmts)))
    pre: tuple = ()
    if setup > 0 and rng.random() < setup:
        pre = tuple(sorted(rng.sample(ids, rng.randint(1, 2))))
    return TxnHistory(seed, files, tuple(txns), random_schedule(rng, sizes, same_snapshot), pre)


def random_schedule(rng: random.Random, sizes: Sequence[int], same_snapshot: float) -> tuple:
    """The events of transactions of ``sizes`` statements (see ``generate_history``): with
    probability ``same_snapshot`` all start first, else any interleaving with transactions
    starting in index order."""
    remaining = {t: events(size) for t, size in enumerate(sizes)}
    out = []
    if rng.random() < same_snapshot:
        for t in remaining:
            out.append((remaining[t].pop(0), t))
    while any(remaining.values()):
        unstarted = [t for t, evs in remaining.items() if evs and evs[0] == "start"]
        choices = [t for t, evs in remaining.items() if evs and (evs[0] != "start" or t == min(unstarted))]
        t = rng.choice(choices)
        out.append((remaining[t].pop(0), t))
    return tuple(out)


def events(statements: int) -> list:
    """A transaction's events, in order: its first statement (it pins then), each later one, its
    commit."""
    return ["start"] + ["run"] * (statements - 1) + ["commit"]


def events_by_transaction(history) -> dict:
    """{transaction: its events in ``history``'s schedule, in order}."""
    out: dict = {t.idx: [] for t in history.txns}
    for ev, t in history.schedule:
        out[t].append(ev)
    return out


# --------------------------------------------------------------------------- the in-memory model


def run_serial(initial: Sequence[Row], txns: Iterable[Txn]) -> tuple[list, dict]:
    """(final rows sorted, statement index -> its result) of a serial execution of whole transactions."""
    return M.run_serial(initial, [s for t in txns for s in t.stmts])


@dataclass
class ModelRun:
    final: list  # sorted rows
    log: list  # transaction indices in commit order (those that committed something)
    noop: list  # transactions none of whose statements changed anything
    order: list  # transactions that committed, those with nothing to write too, in commit order
    results: dict  # statement index -> (rows deleted or updated, rows added) at its transaction's state


def simulate(history: TxnHistory, accepted: Optional[set] = None) -> ModelRun:
    """The schedule applied to row identities, nothing refused (``accepted`` None) or only the
    transactions in ``accepted`` committing. A transaction copies the table's live identities
    at its start (its pin); each statement changes that private copy (its own earlier
    statements' rows are visible to it, under new identities); at its commit the identities of
    the pinned snapshot no longer in the copy are deleted from the table (already deleted ones
    stay deleted) and the copy's new rows are added."""
    table, _ = M._created(history)
    private: dict = {}  # transaction -> (pinned identities -> rows, its working copy)
    cursor: Counter = Counter()
    wrote: set = set()
    results: dict = {}
    log, noop, order = [], [], []
    for ev, t in history.schedule:
        if ev == "start":
            private[t] = (dict(table.state), dict(table.state))
        if ev in ("start", "run"):
            s = history.txns[t].stmts[cursor[t]]
            cursor[t] += 1
            work = private[t][1]
            deleted, added = s.effects(work)
            results[s.idx] = (len(deleted), len(added))
            if deleted or added:
                wrote.add(t)
            for ident in deleted:
                work.pop(ident)
            for j, row in enumerate(added):
                work[(f"S{s.idx}", j)] = row
            continue
        pinned, work = private.pop(t)
        if accepted is not None and t not in accepted:
            if t not in wrote:
                noop.append(t)
            continue
        order.append(t)
        if t not in wrote:
            noop.append(t)
            continue
        for ident in pinned:
            if ident not in work:
                table.state.pop(ident, None)
        for ident, row in work.items():
            if ident not in pinned:
                table.state[ident] = row
        log.append(t)
    return ModelRun(sorted(table.state.values()), log, noop, order, results)


def serial_order(final: Sequence[Row], results: Optional[dict], initial: Sequence[Row], txns: Sequence[Txn],
                 level: str) -> Optional[list]:
    """The serial order of whole transactions ``txns`` (given in log order) allowed by ``level``
    that ends with the rows ``final`` and in which every statement has the result it had
    (``results``: statement index -> result; None: compare the rows only); None when none does."""
    final = sorted(final)

    def same(order) -> bool:
        rows, got = run_serial(initial, order)
        return rows == final and (results is None or all(got[s.idx] == results[s.idx] for t in order for s in t.stmts))

    if level == SERIALIZABLE:
        return list(txns) if same(txns) else None
    if len(txns) > 7:  # every order is tried: 8! runs is already slow
        raise ValueError(f"{len(txns)} committed transactions: too many to try every serial order")
    for order in itertools.permutations(txns):
        if same(order):
            return list(order)
    return None


# --------------------------------------------------------------------------- the real thing, at the log level


@dataclass
class Outcome:
    committed: list = field(default_factory=list)  # transaction indices in log order
    order: list = field(default_factory=list)  # transactions that committed, with nothing to write too, in order
    versions: dict = field(default_factory=dict)  # transaction -> version
    refused: dict = field(default_factory=dict)  # transaction -> "ExceptionClass: message"
    refusals: dict = field(default_factory=dict)  # transaction -> (ExceptionClass, winning transaction or None)
    noop: list = field(default_factory=list)  # transactions whose prepare() returned None
    read_versions: dict = field(default_factory=dict)  # transaction -> pinned version
    row_level: dict = field(default_factory=dict)  # transaction -> its real commit checked per row?
    staged: dict = field(default_factory=dict)  # transaction -> staged versions at its commit
    results: dict = field(default_factory=dict)  # statement index -> (rows deleted or updated, rows added)
    stmt_row_level: dict = field(default_factory=dict)  # statement index -> its own scope row level?
    problems: list = field(default_factory=list)  # the commit-time checks that failed (text)
    final: list = field(default_factory=list)  # live rows read with pyarrow
    delta_rs: Optional[list] = None  # live rows read with delta-rs

    def describe(self, history: TxnHistory) -> str:
        label = lambda t: history.txns[t].label()  # noqa: E731
        lines = ["  outcome: commit order " + (", ".join(f"{label(t)}@v{self.versions[t]}" if t in self.versions
                                                    else f"{label(t)} (read only)" for t in self.order) or "-")]
        for t in sorted(self.read_versions):
            level = {True: "row level", False: "file level", None: "nothing to commit"}[self.row_level.get(t)]
            stmts = ", ".join(f"{s.label()} {self.results[s.idx]}" for s in history.txns[t].stmts if s.idx in self.results)
            lines.append(f"    {label(t)} pinned v{self.read_versions[t]}, {level}, staged {self.staged.get(t, '-')}: "
                         f"(deleted or updated, added) {stmts}")
        lines += outcome_lines(self.refused, self.noop, label)
        lines.append(f"    final rows: {self.final}")
        if self.delta_rs is not None and self.delta_rs != self.final:
            lines.append(f"    delta-rs reads: {self.delta_rs}")
        return "\n".join(lines)


def _latest_version(table_path: str) -> int:
    return DeltaLog.for_table(table_path).update().version


def _commit_info(table_path: str, version: int) -> dict:
    with open(os.path.join(table_path, "_delta_log", f"{version:020d}.json")) as f:
        for line in f:
            action = json.loads(line)
            if "commitInfo" in action:
                return action["commitInfo"]
    return {}


def _staged_files(staged) -> set:
    """The data and deletion-vector files a transaction's statements wrote (absolute paths)."""
    from isolde.executor.log.actions import AddFile
    from isolde.executor.log.deletion_vectors import dv_file_path

    pinned = {f.path for f in staged.pinned.all_files}
    out = set()
    for version in staged.staged_versions:
        for a in staged.read_commit(version):
            if not isinstance(a, AddFile):
                continue
            if a.path not in pinned:
                out.add(os.path.join(staged.table_path, a.path))
            if a.deletion_vector is not None and a.deletion_vector.storage_type == "u":
                out.add(dv_file_path(staged.table_path, a.deletion_vector))
    return out


def refusal_problems(label: str, mt: MultiStatementTransaction, own_files: set) -> list:
    """What is wrong with the refused transaction ``label``: not rolled back, or its statements'
    files (``own_files``) left behind."""
    problems = []
    if mt.state != "rolled back":
        problems.append(f"{label} was refused but its state is {mt.state!r}")
    left = sorted(os.path.basename(f) for f in own_files if os.path.exists(f))
    if left:
        problems.append(f"{label} was refused but left the files its statements wrote: {left}")
    return problems


def start_transaction(log, snapshot):
    """What the session's ``ExecutionContext.start_transaction`` does at the log level."""
    txn = log.start_transaction(snapshot)
    txn.verify_files = True
    return txn


def run_history(history: TxnHistory, level: str, mode: str, table_path: str, *, delta_rs: bool = True) -> Outcome:
    M.create_table(table_path, history, level, mode)
    out = Outcome()
    latest = _latest_version(table_path)  # what the real log should be at: moves only at commits
    open_: dict = {}  # transaction -> MultiStatementTransaction
    operations: dict = {}  # transaction -> the operations of its statements that staged a commit
    cursor: Counter = Counter()
    for ev, t in history.schedule:
        txn = history.txns[t]
        if ev in ("start", "run"):
            if ev == "start":
                open_[t] = MultiStatementTransaction()
                operations[t] = []
            mt = open_[t]
            s = txn.stmts[cursor[t]]
            cursor[t] += 1
            mt.begin_statement(STATEMENT_CLASS[s.kind])
            ok = False
            try:
                staged = mt.log_for("t", DeltaLog.for_table(table_path))
                if ev == "start":
                    out.read_versions[t] = staged.pinned.version
                p = M.start(table_path, s, log=staged)
                out.results[s.idx] = p.result
                out.stmt_row_level[s.idx] = p.row_level
                if p.actions:
                    p.txn.commit(p.actions, operation=p.operation, operation_parameters=p.parameters)
                    operations[t].append(p.operation)
                ok = True
            finally:
                mt.end_statement(ok)
            continue
        mt = open_.pop(t)
        before = _latest_version(table_path)
        if before != latest:
            out.problems.append(f"before {txn.label()} commits the log is at v{before}, not v{latest}: something "
                                "reached the log outside a transaction's commit")
            latest = before
        prepared = mt.prepare(start_transaction)
        table = next(iter(mt.tables.values()))
        out.staged[t] = len(table.staged.staged_versions)
        own_files = _staged_files(table.staged)
        if prepared is None:
            out.noop.append(t)
        else:
            out.row_level[t] = prepared[1].row_level
        try:
            version = mt.commit(prepared)
        except ConcurrentModificationException as e:
            out.refused[t] = f"{type(e).__name__}: {e}"
            by_version = {v: j for j, v in out.versions.items()}
            out.refusals[t] = (type(e).__name__, by_version.get(getattr(e, "winning_version", None)))
            after = _latest_version(table_path)
            if after != before:
                out.problems.append(f"{txn.label()} was refused ({type(e).__name__}) but the log moved from v{before} "
                                    f"to v{after}")
                latest = after
            out.problems += refusal_problems(txn.label(), mt, own_files)
            continue
        after = _latest_version(table_path)
        if mt.state != "committed":
            out.problems.append(f"{txn.label()} committed but its state is {mt.state!r}")
        if prepared is None:
            if version is not None or after != before:
                out.problems.append(f"{txn.label()} had nothing to commit, yet commit returned {version} and the log "
                                    f"moved from v{before} to v{after}")
                latest = after
            out.order.append(t)
            continue
        if version != before + 1 or after != version:
            out.problems.append(f"{txn.label()} is not exactly one new version: the log was at v{before}, commit "
                                f"returned {version}, the log is at v{after}")
        else:
            info = _commit_info(table_path, version)
            ops = operations[t]
            want = ops[0] if len(ops) == 1 else multi_statement.OPERATION
            if info.get("operation") != want or info.get("readVersion") != out.read_versions[t]:
                out.problems.append(f"{txn.label()}@v{version}: commitInfo operation {info.get('operation')!r}, "
                                    f"readVersion {info.get('readVersion')}; expected {want!r} and the pinned "
                                    f"v{out.read_versions[t]}")
        latest = after
        out.committed.append(t)
        out.order.append(t)
        out.versions[t] = version
    out.final = M.table_rows(table_path)
    if delta_rs:
        out.delta_rs = M.delta_rs_rows(table_path)
    return out


# --------------------------------------------------------------------------- judging


@dataclass
class Verdict(model_tally.Verdict):
    """``model_tally.Verdict`` on transactions: ``refused`` counts transactions."""
    refused_readonly: int = 0  # refused transactions that had nothing to write


# the violations ``compare_with_model`` words: the log, the statements' reads
MODEL_DIFFERS = ("the log does not hold the committed transactions' net effects: the model with the same decisions has "
                 "log {log} and rows {final}",
                 "the statements read other rows than the model's (its own writes, at its pin): model results "
                 "{results}, nothing to commit: {noop}")


def compare_with_model(v: Verdict, out, model, txns: Sequence, differs: tuple = MODEL_DIFFERS) -> None:
    """The outcome ``out`` against the ``model`` run with the same decisions: the same
    transactions committed in the same order, the same final rows, the same with nothing to
    commit and every statement's result; ``differs`` words the violations (``MODEL_DIFFERS``)."""
    log, reads = differs
    if model.log != out.committed or model.order != out.order or model.final != out.final:
        v.violations.append(log.format(log=_labels(txns[t] for t in model.log), final=model.final))
    if sorted(model.noop) != sorted(out.noop) or model.results != out.results:
        v.violations.append(reads.format(results=model.results, noop=_labels(txns[t] for t in model.noop)))


def judge(history: TxnHistory, level: str, out: Outcome) -> Verdict:
    v = Verdict(list(out.problems))
    initial = history.initial_rows
    txns = history.txns
    v.compare_readers(out)
    compare_with_model(v, out, simulate(history, accepted=set(out.order)), txns)
    committed = [txns[t] for t in out.order]  # those with nothing to write at their commit point
    results = {s.idx: out.results[s.idx] for t in committed for s in t.stmts}
    if serial_order(out.final, results, initial, committed, level) is None:
        rows, got = run_serial(initial, committed)
        v.violations.append(
            f"the checker let through a history that is not {level}: no allowed serial order of the transactions "
            f"{_labels(committed)} ends with rows {out.final} and statement results {results} (log order gives rows "
            f"{rows}, results {got})")
    v.refused_readonly = sum(t in out.noop for t in out.refused)

    def order_of(run: ModelRun, results: bool) -> Optional[list]:
        ran = [txns[t] for t in run.order]
        want = {s.idx: run.results[s.idx] for t in ran for s in t.stmts} if results else None
        return serial_order(run.final, want, initial, ran, level)

    v.weigh_refusals(out.refused, functools.partial(simulate, history), set(out.order), order_of)
    return v


@dataclass
class TransactionTally(model_tally.Tally):
    """``model_tally.Tally`` of transactions: ``false_refusals`` counts refused transactions."""
    transactions: int = 0
    statements: int = 0
    committed_transactions: int = 0
    refused_transactions: int = 0
    refused_readonly: int = 0  # refused transactions that had nothing to write
    noop_transactions: int = 0
    row_level_commits: int = 0  # commits checked per row
    file_level_commits: int = 0  # ... per file

    @property
    def transaction_ratio(self) -> float:
        return share(self.false_refusals, self.refused_transactions)

    def count(self, committed: int, out, verdict: Verdict) -> None:
        """One judged history's ``committed`` transactions, those with nothing to commit and the refused ones."""
        self.committed_transactions += committed
        self.noop_transactions += len(out.noop)
        self.refused_transactions += verdict.refused
        self.refused_readonly += verdict.refused_readonly


@dataclass
class Tally(TransactionTally):
    multi_statement_commits: int = 0  # committed transactions of 2+ statements that wrote
    file_level_by_insert: int = 0  # real commits checked per file only because an INSERT (no reads) is not row level
    refused_file_level_by_insert: int = 0  # refused transactions among those

    def summary(self) -> str:
        return (f"{self.level:17s} {self.mode:4s}: {self.histories} histories ({self.transactions} transactions, "
                f"{self.statements} statements), {self.accepted} accepted, {self.refused} refused, "
                f"{self.false_conflicts} false conflicts = {self.ratio:.1%} of refused (rows only: "
                f"{self.false_conflicts_rows_only} = {self.ratio_rows_only:.1%}); transactions: "
                f"{self.committed_transactions} committed ({self.multi_statement_commits} of 2+ writing statements), "
                f"{self.refused_transactions} refused, {self.false_refusals} needlessly = {self.transaction_ratio:.1%} "
                f"(rows only: {self.false_refusals_rows_only}; {self.refused_readonly} refused with nothing to "
                f"write), {self.noop_transactions} with nothing to commit; real commits checked per row "
                f"{self.row_level_commits}, per file {self.file_level_commits} ({self.file_level_by_insert} only "
                f"because of an INSERT, {self.refused_file_level_by_insert} of them refused); {self.seconds:.1f} s"
                + self.refusals_line())


def seeds(count: int, base: int = 61) -> list:
    return [base * 1_000_000 + i for i in range(count)]


def _file_level_by_insert(history: TxnHistory, out: Outcome, t: int) -> bool:
    """Checked per file only because of INSERT statements: every statement that read something
    had a row-level scope."""
    stmts = history.txns[t].stmts
    return (out.row_level.get(t) is False and any(s.kind == INSERT for s in stmts)
            and all(out.stmt_row_level[s.idx] for s in stmts if s.kind != INSERT)
            and any(s.kind != INSERT for s in stmts))


def check_histories(level: str, mode: str, history_seeds: Iterable[int], workdir: str, *, delta_rs: bool = True,
                    keep_examples: int = 5, **generator) -> Tally:
    """Run and judge every history; never raises for a bad history (it lands in ``violations``
    with its seed and description), so one run reports all of them."""
    with Tally(level, mode).timed() as tally:
        for seed in history_seeds:
            history = generate_history(seed, **generator)
            path = os.path.join(tempfile.mkdtemp(prefix=f"txn-{level}-{mode}-{seed}-", dir=workdir), "t")
            tally.histories += 1
            tally.transactions += len(history.txns)
            tally.statements += len(history.stmts)
            try:
                out = run_history(history, level, mode, path, delta_rs=delta_rs)
            except Exception as e:  # anything but a named conflict at commit: report it with the history
                tally.violations.append((seed, f"{history.describe()}\n  table: {path}\n  raised "
                                         f"{type(e).__name__}: {e}"))
                continue
            verdict = judge(history, level, out)
            tally.count(len(out.committed), out, verdict)
            tally.multi_statement_commits += sum(out.staged[t] >= 2 for t in out.committed)
            for t, row_level in out.row_level.items():
                if row_level:
                    tally.row_level_commits += 1
                else:
                    tally.file_level_commits += 1
                    if mode != "off" and _file_level_by_insert(history, out, t):
                        tally.file_level_by_insert += 1
                        tally.refused_file_level_by_insert += t in out.refused
            text = f"{history.describe()}\n{out.describe(history)}"
            tally.add(seed, text, verdict, out.refused, f"table: {path}", os.path.dirname(path), keep_examples)
    return tally


def replay(seed: int, level: str, mode: str, workdir: str, **generator) -> str:
    """One history, run and judged, as text (for a failure's seed)."""
    where = os.path.join(tempfile.mkdtemp(prefix=f"replay-txn-{seed}-", dir=workdir), "t")
    return model_tally.replay(generate_history, run_history, judge, seed, level, mode, where, **generator)
