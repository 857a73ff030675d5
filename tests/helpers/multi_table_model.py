"""A model checker for multi-statement transactions over 1-3 coordinated tables
(executor/txn/multi_statement.py, executor/txn/coordinated_commit.py, executor/log/coordinator.py),
at the log level, built on ``row_model.py`` and ``transaction_model.py``. No Spark.

The tables ``a``, ``b``, ``c`` of a history are ``row_model``'s table (``(id INT, n BIGINT)``,
deletion vectors on, ids 0..K-1 with n = 0, one or two files), created at version 0 with
``isolde.coordinatedCommits = 'true'`` and one ``isolde.coordinator`` folder (version 0 is written
directly, every later commit is decided by the coordinator: one entry of
``<coordinator>/log/``, then published to the table's ``_delta_log``). A history is 2-4
concurrent *transactions* of 1-4 statements; each statement is on one of the tables:

* the DML of ``row_model`` (single-row UPDATE / DELETE / MERGE / INSERT; with ``extended`` > 0
  the two-key UPDATE, the MOVE and the SWEEP), run by ``row_model.start`` against the
  transaction's staged log of its table;
* queries, run as a session runs ``SELECT`` in a transaction (``mt.begin_statement("Select")``,
  ``mt.log_for`` of every table it reads, the rows read from the staged snapshot with pyarrow and
  deletion vectors, ``mt.end_statement(ok, query_scope(parsed))`` with the session's own
  ``query_scope``): QUERY ``SELECT id, n FROM x WHERE id = k`` (scoped by its WHERE), RANGE
  ``... WHERE id >= k``, and TOTAL ``SELECT sum(n) FROM x`` or, over several tables,
  ``SELECT (SELECT sum(n) FROM a) + (SELECT sum(n) FROM b)`` (the bank total: each table read
  whole). A query's recorded result is the rows it read of each table (a sum is a function of
  them);
* COPY, ``INSERT INTO x SELECT id, n + w FROM y WHERE id = k``: as executor/jobs/insert.py, a blind
  append to ``x`` (nothing committed when no row matched), ``y`` read as a source (whole).

Statement i of the history (numbered across transactions) adds ``w = 2**i``. Besides random
statements a share of the histories (``shapes``) is one of three shapes over two tables, with
random keys and random schedules: cross-table write skew (T0 reads y and writes x, T1 reads x
and writes y), the bank (each transaction reads the total of accounts and savings, then
withdraws from one, sometimes deposits to the other), and phantoms (each transaction finds a key
absent in one table and blindly inserts into the other the key the other transaction looks for).

A transaction runs as ``transaction_model`` runs one (``start`` pins: its first statement fixes
the transaction's read point, one coordinator sequence number, and every table it touches then
or later is pinned as of it; ``run``; ``commit``: ``mt.prepare`` then ``mt.commit``).

The judgement (``judge``):

* at every commit: a committed transaction that wrote is exactly ONE new coordinator entry (the
  next sequence number) holding one commit per table it wrote and nothing else, each at that
  table's next version, published byte for byte into each table's ``_delta_log`` (commitInfo:
  the statement's operation or ``MULTI-STATEMENT TRANSACTION``, the pinned version as
  readVersion, the entry's ``isoldeCoordinatorSeq``); ``commit`` returns the version, or {table:
  version} for several tables; no other table gets a version. A transaction with nothing to
  write makes no entry and no version; a refused one neither, anywhere, raised a named
  ``ConcurrentModificationException`` subclass, is rolled back and left none of its files;
* atomic visibility: a reader at each entry's sequence number (``READ_POINT``) reads every
  table as the model has it right after the corresponding committed transaction (so never one
  table's part without the other's), and the final tables (pyarrow with deletion vectors, and
  delta-rs) are the model's;
* the model replaying the schedule with the same accept / refuse decisions (row identities per
  table; a transaction copies every table at its start, its read point) has the same log, the
  same tables written per transaction, the same final tables and the same result for EVERY
  statement, refused transactions' included: every transaction read one consistent snapshot
  of all tables (the committed prefix at its start) plus its own writes;
* the same, independently of identities: each transaction's statements run serially on the
  state after the transactions committed before its start (in commit order) give its results;
* serial equivalence of whole transactions: the committed transactions run serially from the
  initial tables give every table's final rows and the statements' results. A transaction that
  wrote something takes part at its commit (its coordinator entry); one with nothing to write
  (``prepare`` returned None) at its READ POINT: it read every table at one coordinator
  sequence number and isolde does not validate it (``MultiStatementTransaction._read_at_one_point``;
  in ``transaction_model``, on tables not coordinated, it is validated and placed at its commit).

  Under Serializable: exactly that order (writers in sequence order, read-only transactions at
  their read points), every statement's result, queries included. With the snapshot check above,
  a refused transaction's reads are those of a prefix of that same order.

  Under WriteSerializable: SOME order of the committed transactions that wrote must give the
  final tables and the result of every one of their DML statements (the reads that decided
  their writes). This is ``transaction_model``'s rule (every order of whole transactions is
  tried and the DML results compared; it has no queries, and there a transaction with nothing
  to write is validated at its commit and ordered too) and Delta's definition of the
  level: the writes are serialisable, and a table's versions need not be states of the serial
  order ("the content may differ from what the sequence of operations in the history would
  give"). So what a query or a transaction with nothing to write reads must only be one
  consistent snapshot, which the snapshot check above enforces. Histories that the stricter rule
  (those transactions and the queries' results in the order too) rejects are counted apart
  (``Tally.read_anomalies``, not a failure). One pattern the model names when it fails
  (``blind_append_cycles``): a commit recorded as a blind append to a table its transaction did
  not read, although it read another table; a transaction that read that table before it and
  commits later would go through, as if ordered before the append, although the appending
  transaction read (in another table) what that later one wrote: no order has both. isolde
  records such a commit as no blind append (``OptimisticTransaction.read_elsewhere``), so the
  later transaction is refused;
* false conflicts, as ``transaction_model`` counts them, under the strict rule at both levels
  (every committed transaction, those with nothing to write at their read points, and every
  result, queries included: what the application saw): a refused history whose transactions,
  all forced through (net effects computed at their pins, applied in commit order), would still
  have been such a serial execution; and per refused transaction, forcing just that one.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

from isolde.errors import ConcurrentModificationException
from isolde.executor.log import DeltaLog
from isolde.executor.log import coordinator as C
from isolde.executor.log.actions import Metadata
from isolde.executor.txn import multi_statement
from isolde.executor.txn.multi_statement import MultiStatementTransaction

from tests.helpers import model_tally
from tests.helpers import row_model as R
from tests.helpers import transaction_model as T
from tests.helpers.model_tally import labels as _labels, outcome_lines
from tests.helpers.row_model import DELETE, EXTENDED_KINDS, INSERT, KINDS, MERGE, SERIALIZABLE, SWEEP, UPDATE, Stmt

TABLES = ("a", "b", "c")
QUERY, RANGE, TOTAL, COPY = "QUERY", "RANGE", "TOTAL", "COPY"
QUERY_KINDS = (QUERY, RANGE, TOTAL)
STATEMENT_CLASS = {**T.STATEMENT_CLASS, QUERY: "Select", RANGE: "Select", TOTAL: "Select", COPY: "Insert"}
WRITE_SKEW, BANK, PHANTOMS = "write-skew", "bank", "phantoms"
SHAPES = (WRITE_SKEW, BANK, PHANTOMS)


# --------------------------------------------------------------------------- statements, transactions, histories


@dataclass(frozen=True)
class TStmt:
    idx: int
    table: str  # the table it writes (DML, COPY) or reads (QUERY, RANGE)
    kind: str
    key: int
    w: int  # a distinct power of two per statement
    key2: int = -1  # UPDATE2's second key, MOVE's new id
    sweep: tuple = ()  # SWEEP: the statements whose rows it deletes
    reads: tuple = ()  # TOTAL: the tables it reads whole; COPY: (its source table,)

    @property
    def row(self) -> Stmt:
        """The ``row_model`` statement of a DML kind."""
        return Stmt(self.idx, self.kind, self.key, self.w, self.key2, self.sweep)

    @property
    def is_query(self) -> bool:
        return self.kind in QUERY_KINDS

    @property
    def touched(self) -> tuple:
        """The tables it opens, in order."""
        if self.kind == TOTAL:
            return self.reads
        if self.kind == COPY:
            return (self.reads[0], self.table)
        return (self.table,)

    @property
    def read_only_tables(self) -> tuple:
        """Tables it reads without writing them."""
        if self.kind == TOTAL:
            return self.reads
        if self.kind in (QUERY, RANGE):
            return (self.table,)
        if self.kind == COPY:
            return self.reads
        return ()

    @property
    def sql(self) -> str:
        x, k, w = self.table, self.key, self.w
        if self.kind == QUERY:
            return f"SELECT id, n FROM {x} WHERE id = {k}"
        if self.kind == RANGE:
            return f"SELECT id, n FROM {x} WHERE id >= {k}"
        if self.kind == TOTAL:
            if len(self.reads) == 1:
                return f"SELECT sum(n) FROM {self.reads[0]}"
            return "SELECT " + " + ".join(f"(SELECT sum(n) FROM {y})" for y in self.reads) + " AS total"
        if self.kind == COPY:
            return f"INSERT INTO {x} SELECT id, n + {w} FROM {self.reads[0]} WHERE id = {k}"
        return re.sub(r"\bt\b", x, self.row.sql)

    def label(self) -> str:
        return f"S{self.idx}"

    def query_matches(self, row) -> bool:
        if self.kind == QUERY:
            return row[0] == self.key
        if self.kind == RANGE:
            return row[0] >= self.key
        return True

    # serial semantics over {table: list of rows}
    def apply(self, state: dict) -> tuple[dict, object]:
        if self.kind in (QUERY, RANGE):
            return state, tuple(sorted(r for r in state[self.table] if self.query_matches(r)))
        if self.kind == TOTAL:
            return state, tuple((y, tuple(sorted(state[y]))) for y in self.reads)
        out = dict(state)
        if self.kind == COPY:
            added = [(r[0], r[1] + self.w) for r in state[self.reads[0]] if r[0] == self.key]
            out[self.table] = state[self.table] + added
            return out, (0, len(added))
        out[self.table], result = self.row.apply(state[self.table])
        return out, result

    # effects at a snapshot {table: {identity: row}}
    def effects(self, work: dict) -> tuple[Optional[str], frozenset, list, object]:
        """(table written or None, identities it deletes or updates there, rows it adds, result)."""
        if self.is_query:
            _, result = self.apply({y: list(rows.values()) for y, rows in work.items()})
            return None, frozenset(), [], result
        if self.kind == COPY:
            added = [(r[0], r[1] + self.w) for r in work[self.reads[0]].values() if r[0] == self.key]
            return self.table, frozenset(), sorted(added), (0, len(added))
        deleted, added = self.row.effects(work[self.table])
        return self.table, deleted, added, (len(deleted), len(added))


MTxn = T.Txn  # a transaction: its index and its statements (TStmt here)


@dataclass(frozen=True)
class MTHistory:
    seed: int
    tables: tuple  # (name, files): files are the ids of each initial data file, in row order
    txns: tuple  # MTxn
    schedule: tuple  # ("start" | "run" | "commit", transaction index)
    setup: tuple = ()  # (table, ids): a deletion-vector DELETE at version 1, through the coordinator
    shape: Optional[str] = None

    @property
    def names(self) -> tuple:
        return tuple(name for name, _ in self.tables)

    @property
    def stmts(self) -> tuple:
        return tuple(s for t in self.txns for s in t.stmts)

    @property
    def initial(self) -> dict:
        """{table: rows} every serial execution starts from (after the setup DELETE)."""
        out = {}
        for name, files in self.tables:
            gone = set(self.setup[1]) if self.setup and self.setup[0] == name else set()
            out[name] = sorted((i, 0) for ids in files for i in ids if i not in gone)
        return out

    def describe(self) -> str:
        lines = [f"history seed={self.seed}{f' ({self.shape})' if self.shape else ''}: tables "
                 + "; ".join(f"{name}: " + ", ".join(f"f{j}=ids {list(ids)}" for j, ids in enumerate(files))
                             for name, files in self.tables)]
        if self.setup:
            lines.append(f"  v1 of {self.setup[0]}: DELETE FROM {self.setup[0]} WHERE id IN {tuple(self.setup[1])}")
        return "\n".join(lines + T.describe_txns(self.txns, self.schedule))


def _shape(rng: random.Random, shape: str, names: tuple, universe: dict, ids: dict) -> list:
    """The transactions of a shape: per transaction a list of (kind, table, key, key2, sweep, reads)."""
    x, y = rng.sample(names, 2)
    if shape == WRITE_SKEW:
        k1, k2 = rng.choice(universe[y]), rng.choice(universe[x])
        k1b = k1 if rng.random() < 0.7 else rng.choice(universe[y])
        k2b = k2 if rng.random() < 0.7 else rng.choice(universe[x])

        def read(table, key):
            kind = rng.choice((QUERY, QUERY, RANGE, TOTAL))
            return (kind, table, key, -1, (), (table,) if kind == TOTAL else ())

        def write(table, key):
            return (rng.choice((UPDATE, UPDATE, MERGE, DELETE, INSERT)), table, key, -1, (), ())

        out = [[read(y, k1), write(x, k2)], [read(x, k2b), write(y, k1b)]]
        for txn in out:
            if rng.random() < 0.2:
                txn.reverse()  # the write first, then the read
        return out
    if shape == PHANTOMS:
        k1, k2 = rng.choice(universe[y][len(ids[y]):]), rng.choice(universe[x][len(ids[x]):])
        # the absent key is looked for by a query, or by an UPDATE / DELETE that finds no row
        look = rng.choice((QUERY, QUERY, UPDATE, DELETE))
        return [[(look, y, k1, -1, (), ()), (INSERT, x, k2, -1, (), ())],
                [(look, x, k2, -1, (), ()), (INSERT, y, k1, -1, (), ())]]
    # the bank: x holds the accounts, y the savings; the total is read, then money moves
    accounts = rng.sample(ids[x], min(len(ids[x]), 3))
    out = []
    for _ in range(rng.randint(2, 4)):
        txn = [(TOTAL, x, -1, -1, (), (x, y))]
        if rng.random() < 0.5:  # withdraw from one account
            table = rng.choice((x, y))
            txn.append((UPDATE, table, rng.choice(accounts if table == x else ids[y][:3]), -1, (), ()))
        else:  # transfer: withdraw from an account, deposit to savings
            txn.append((UPDATE, x, rng.choice(accounts), -1, (), ()))
            txn.append((rng.choice((UPDATE, MERGE)), y, rng.choice(ids[y][:3]), -1, (), ()))
        out.append(txn)
    return out


def generate_history(seed: int, *, max_tables: int = 3, reuse: float = 0.3, own: float = 0.3,
                     absent_keys: int = R.ABSENT_KEYS, extended: float = 0.0, setup: float = 0.0, query: float = 0.3,
                     cross: float = 0.6, copy: float = 0.08, shapes: float = 0.25, max_txns: int = 4,
                     max_stmts: int = 4, same_snapshot: float = 0.5) -> MTHistory:
    """A random history, a function of its arguments only (the same for every level and mode).

    1..``max_tables`` tables (``a``, ``b``, ``c``), 2..``max_txns`` transactions of
    1..``max_stmts`` statements. With probability ``shapes`` (two tables or more) the history is
    one of ``SHAPES`` (the bank may have 2-4 transactions). Otherwise each transaction has a
    home table; a statement is, with probability ``query``, a query (QUERY, RANGE or TOTAL; of a
    table other than its home with probability ``cross``; a TOTAL reads one table or all of
    them), with probability ``copy`` a COPY into one table from another, else DML (``row_model``'s
    kinds; with ``extended`` > 0, with that probability, one of ``EXTENDED_KINDS``) of its home
    table (or, half the time, any table; after its first statement, with probability 0.35 a table
    it has not written yet). Keys are drawn per table as ``transaction_model``
    draws them (``own``, ``reuse``, else uniform over the ids and ``absent_keys`` more). With
    ``setup`` > 0 one table gets, with that probability, a deletion-vector DELETE of 1-2 ids at
    version 1 (a coordinator entry). Schedule: as ``transaction_model``'s (``same_snapshot``)."""
    rng = random.Random(seed)
    names = TABLES[:rng.randint(1, max_tables)]
    tables, universe, ids = [], {}, {}
    for name in names:
        k = rng.randint(6, 10)
        ids[name] = list(range(k))
        if rng.random() < 0.5:
            files = (tuple(ids[name]),)
        else:
            cut = rng.randint(2, k - 2)
            files = (tuple(ids[name][:cut]), tuple(ids[name][cut:]))
        tables.append((name, files))
        universe[name] = list(range(k + absent_keys))
    shape = rng.choice(SHAPES) if len(names) >= 2 and rng.random() < shapes else None
    if shape is not None:
        specs = _shape(rng, shape, names, universe, ids)
    else:
        sizes = [rng.randint(1, max_stmts) for _ in range(rng.randint(2, max_txns))]
        total = sum(sizes)
        keys: dict = {name: [] for name in names}
        specs = []
        for size in sizes:
            home = rng.choice(names)
            own_keys: dict = {name: [] for name in names}

            def draw_key(table: str) -> int:
                if own_keys[table] and rng.random() < own:
                    key = rng.choice(own_keys[table])
                elif keys[table] and rng.random() < reuse:
                    key = rng.choice(keys[table])
                else:
                    key = rng.choice(universe[table])
                keys[table].append(key)
                own_keys[table].append(key)
                return key

            txn = []
            for _ in range(size):
                r = rng.random()
                others = [n for n in names if n != home]
                if r < query:
                    table = rng.choice(others) if others and rng.random() < cross else home
                    kind = rng.choice((QUERY, QUERY, RANGE, TOTAL))
                    if kind == TOTAL:
                        txn.append((TOTAL, table, -1, -1, (), names if rng.random() < 0.5 else (table,)))
                    else:
                        txn.append((kind, table, draw_key(table), -1, (), ()))
                    continue
                if r < query + copy and others:
                    source = rng.choice(others)
                    txn.append((COPY, home, draw_key(source), -1, (), (source,)))
                    continue
                fresh = [n for n in names if n not in {spec[1] for spec in txn if spec[0] not in QUERY_KINDS}]
                if fresh and txn and rng.random() < 0.35:  # spread the transaction over another table
                    table = rng.choice(fresh)
                else:
                    table = home if rng.random() < 0.5 else rng.choice(names)
                kind, key2, sweep = rng.choice(KINDS), -1, ()
                key = draw_key(table)
                if extended > 0 and rng.random() < extended:
                    kind = rng.choice(EXTENDED_KINDS)
                    if kind == SWEEP:
                        sweep = tuple(sorted(rng.sample(range(total), min(total, rng.randint(1, 2)))))
                    else:
                        key2 = draw_key(table)
                txn.append((kind, table, key, key2, sweep, ()))
            specs.append(txn)
    txns, i = [], 0
    for t, spec in enumerate(specs):
        stmts = []
        for kind, table, key, key2, sweep, reads in spec:
            stmts.append(TStmt(i, table, kind, key, 1 << i, key2, sweep, tuple(reads)))
            i += 1
        txns.append(MTxn(t, tuple(stmts)))
    pre: tuple = ()
    if setup > 0 and rng.random() < setup:
        name = rng.choice(names)
        pre = (name, tuple(sorted(rng.sample(ids[name], rng.randint(1, 2)))))
    schedule = T.random_schedule(rng, [len(t.stmts) for t in txns], same_snapshot)
    return MTHistory(seed, tuple(tables), tuple(txns), schedule, pre, shape)


# --------------------------------------------------------------------------- the in-memory model


def run_serial(initial: dict, txns: Iterable[MTxn]) -> tuple[dict, dict]:
    """({table: final rows sorted}, statement index -> its result) of a serial execution of whole
    transactions."""
    state = {name: list(rows) for name, rows in initial.items()}
    results = {}
    for t in txns:
        for s in t.stmts:
            state, results[s.idx] = s.apply(state)
    return {name: sorted(rows) for name, rows in state.items()}, results


@dataclass
class ModelRun:
    final: dict  # table -> sorted rows
    log: list  # transactions that committed something, in commit order
    noop: list  # transactions none of whose statements changed anything
    order: list  # transactions that committed, those with nothing to write too, in commit order
    results: dict  # statement index -> result at its transaction's state
    written: dict  # transaction -> tables its statements changed (sorted tuple)
    after: dict  # transaction that committed something -> {table: rows} right after its commit


def _created(history: MTHistory) -> dict:
    """{table: {identity: row}} of the initial tables (after the setup DELETE)."""
    out = {}
    for name, files in history.tables:
        gone = set(history.setup[1]) if history.setup and history.setup[0] == name else set()
        out[name] = {(name, j, pos): (i, 0) for j, f in enumerate(files) for pos, i in enumerate(f) if i not in gone}
    return out


def _copy(tables: dict) -> dict:
    return {name: dict(rows) for name, rows in tables.items()}


def simulate(history: MTHistory, accepted: Optional[set] = None) -> ModelRun:
    """The schedule applied to row identities of every table, nothing refused (``accepted``
    None) or only the transactions in ``accepted`` committing. A transaction copies every table
    at its start (its read point); each statement changes that private copy; at its commit, per
    table, the identities of the pinned copy no longer in the working copy are deleted (already
    deleted ones stay deleted) and the working copy's new rows are added."""
    tables = _created(history)
    private: dict = {}
    cursor: Counter = Counter()
    written: dict = {t.idx: set() for t in history.txns}
    results: dict = {}
    log, noop, order, after = [], [], [], {}
    for ev, t in history.schedule:
        if ev == "start":
            private[t] = (_copy(tables), _copy(tables))
        if ev in ("start", "run"):
            s = history.txns[t].stmts[cursor[t]]
            cursor[t] += 1
            work = private[t][1]
            table, deleted, added, results[s.idx] = s.effects(work)
            if table is None or not (deleted or added):
                continue
            written[t].add(table)
            for ident in deleted:
                work[table].pop(ident)
            for j, row in enumerate(added):
                work[table][(f"S{s.idx}", j)] = row
            continue
        pinned, work = private.pop(t)
        if accepted is not None and t not in accepted:
            if not written[t]:
                noop.append(t)
            continue
        order.append(t)
        if not written[t]:
            noop.append(t)
            continue
        for name in written[t]:
            for ident in pinned[name]:
                if ident not in work[name]:
                    tables[name].pop(ident, None)
            for ident, row in work[name].items():
                if ident not in pinned[name]:
                    tables[name][ident] = row
        log.append(t)
        after[t] = {name: sorted(rows.values()) for name, rows in tables.items()}
    return ModelRun({name: sorted(rows.values()) for name, rows in tables.items()}, log, noop, order, results,
                    {t: tuple(sorted(w)) for t, w in written.items()}, after)


def serial_order(final: dict, results: Optional[dict], initial: dict, txns: Sequence[MTxn],
                 level: str) -> Optional[list]:
    """The serial order of whole transactions ``txns`` (given in commit order) allowed by
    ``level`` that ends with the tables ``final`` and in which every statement of ``results``
    has the result it had (None: compare the tables only); None when none does."""
    final = {name: sorted(rows) for name, rows in final.items()}

    def same(order) -> bool:
        rows, got = run_serial(initial, order)
        return rows == final and (results is None or all(got[s.idx] == results[s.idx] for t in order
                                                         for s in t.stmts if s.idx in results))

    if level == SERIALIZABLE:
        return list(txns) if same(txns) else None
    if len(txns) > 7:
        raise ValueError(f"{len(txns)} committed transactions: too many to try every serial order")
    for order in itertools.permutations(txns):
        if same(order):
            return list(order)
    return None


def placed(history: MTHistory, order: Sequence[int], noop: Iterable[int]) -> list:
    """The committed transactions ``order`` in their serial positions: one that wrote at its
    commit, one with nothing to write (``noop``) at its start, where its read point was fixed."""
    noop = set(noop)
    position = {event: n for n, event in enumerate(history.schedule)}
    return sorted(order, key=lambda t: position[("start", t)] if t in noop else position[("commit", t)])


def snapshot_results(history: MTHistory, order: Sequence[int]) -> dict:
    """Statement index -> the result each statement has when its transaction runs serially on
    the tables as the transactions of ``order`` (commit order) committed before its start left
    them: what a transaction reading one consistent snapshot plus its own writes reads."""
    position = {}
    for n, (ev, t) in enumerate(history.schedule):
        position[(ev, t)] = n
    out = {}
    for txn in history.txns:
        before = [history.txns[j] for j in order if position[("commit", j)] < position[("start", txn.idx)]]
        state, _ = run_serial(history.initial, before)
        _, got = run_serial(state, [txn])
        out.update(got)
    return out


# --------------------------------------------------------------------------- the real thing, at the log level


@dataclass
class Outcome:
    committed: list = field(default_factory=list)  # transactions that wrote, in commit (sequence) order
    order: list = field(default_factory=list)  # transactions that committed, with nothing to write too
    versions: dict = field(default_factory=dict)  # transaction -> {table: version}
    seqs: dict = field(default_factory=dict)  # transaction -> its coordinator entry
    refused: dict = field(default_factory=dict)  # transaction -> "ExceptionClass: message"
    refusals: dict = field(default_factory=dict)  # transaction -> (ExceptionClass, winning transaction or None)
    noop: list = field(default_factory=list)  # transactions whose prepare() returned None
    read_points: dict = field(default_factory=dict)  # transaction -> its read point (sequence number)
    pins: dict = field(default_factory=dict)  # transaction -> {table: pinned version}
    written: dict = field(default_factory=dict)  # transaction -> tables prepare() returned commits for
    row_level: dict = field(default_factory=dict)  # transaction -> {table: checked per row?}
    staged: dict = field(default_factory=dict)  # transaction -> {table: staged versions}
    results: dict = field(default_factory=dict)  # statement index -> result
    stmt_row_level: dict = field(default_factory=dict)  # DML statement index -> its own scope row level?
    problems: list = field(default_factory=list)
    final: dict = field(default_factory=dict)  # table -> live rows (pyarrow)
    delta_rs: Optional[dict] = None  # table -> live rows (delta-rs)
    first_seq: int = 0  # the coordinator's head before the first transaction (after the setup)
    points: dict = field(default_factory=dict)  # every later entry's seq -> {table: rows} a reader there reads
    blind: dict = field(default_factory=dict)  # transaction -> tables whose commit says isBlindAppend

    def describe(self, history: MTHistory) -> str:
        label = lambda t: history.txns[t].label()  # noqa: E731

        def where(t):
            if t not in self.versions:
                return f"{label(t)} (read only)"
            versions = ", ".join(f"{x} v{v}" for x, v in sorted(self.versions[t].items()))
            return f"{label(t)}@seq{self.seqs.get(t)} ({versions})"

        lines = ["  outcome: commit order " + (", ".join(where(t) for t in self.order) or "-")]
        for t in sorted(self.read_points):
            pins = ", ".join(f"{x} v{v}" for x, v in sorted(self.pins.get(t, {}).items()))
            levels = ", ".join(f"{x} {'row' if r else 'file'} level"
                               for x, r in sorted(self.row_level.get(t, {}).items()))
            stmts = ", ".join(f"{s.label()} {self.results[s.idx]}"
                              for s in history.txns[t].stmts if s.idx in self.results)
            lines.append(f"    {label(t)} read point seq {self.read_points[t]} (pinned {pins}); writes "
                         f"{list(self.written.get(t, ())) or '-'} ({levels or '-'}): {stmts}")
        lines += outcome_lines(self.refused, self.noop, label)
        for x, rows in sorted(self.final.items()):
            lines.append(f"    final {x}: {rows}")
            if self.delta_rs is not None and self.delta_rs.get(x) != rows:
                lines.append(f"    delta-rs reads {x}: {self.delta_rs.get(x)}")
        return "\n".join(lines)


def create_tables(root: str, history: MTHistory, level: str, mode: str) -> tuple[dict, str]:
    """({table: path}, coordinator location): each table created at version 0 opting in to the
    coordinator (written directly); the setup DELETE (if any) is version 1 of its table, decided
    by the coordinator (entry 1)."""
    location = os.path.abspath(os.path.join(root, C.FOLDER))
    paths = {}
    for name, files in history.tables:
        path = paths[name] = os.path.abspath(os.path.join(root, name))
        os.makedirs(path)
        adds = [R._write_parquet(path, f"part-0000{j}-initial-c000.snappy.parquet", [(i, 0) for i in ids])
                for j, ids in enumerate(files)]
        config = {"delta.enableDeletionVectors": "true", "delta.isolationLevel": level,
                  "isolde.rowLevelConcurrency": mode, C.COORDINATED_PROPERTY: "true", C.LOCATION_PROPERTY: location}
        DeltaLog.for_table(path).start_transaction().commit([Metadata(R.SCHEMA, (), config), *adds], "CREATE TABLE")
    if history.setup:
        name, gone = history.setup
        path = paths[name]
        txn = DeltaLog.for_table(path).start_transaction()
        touched = {}
        for f in txn.snapshot.all_files:
            hits = [pos for pos, row in R.live_rows(path, f) if row[0] in gone]
            if hits:
                touched[f.path] = (f, hits)
        txn.read_whole_table()
        txn.commit(R._deletion_vector_actions(path, touched), "DELETE",
                   {"predicate": json.dumps([f"id IN {tuple(gone)}"])})
    return paths, location


def forget_coordinator(location: str) -> None:
    """Drop the process's coordinator instance of a finished history (one per folder)."""
    C.Coordinator._instances.pop(C.normalize_location(location), None)


def entries(location: str) -> list:
    folder = os.path.join(location, "log")
    if not os.path.isdir(folder):
        return []
    return sorted(int(n[:20]) for n in os.listdir(folder) if len(n) == 25 and n.endswith(".json"))


def read_entry(location: str, seq: int) -> dict:
    with open(os.path.join(location, "log", f"{seq:020d}.json")) as f:
        return json.load(f)


def _versions(paths: dict) -> dict:
    """{table: latest published version}, listing ``_delta_log`` (no roll-forward)."""
    out = {}
    for name, path in paths.items():
        names = os.listdir(os.path.join(path, "_delta_log"))
        out[name] = max(int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json"))
    return out


def _commit_bytes(path: str, version: int) -> bytes:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), "rb") as f:
        return f.read()


def _rows(path: str, snap) -> list:
    return sorted(r for f in snap.all_files for _, r in R.live_rows(path, f))


def read_at(paths: dict, location: str, seq: Optional[int]) -> dict:
    """{table: rows} as an isolde reader with read point ``seq`` (None: the latest) reads them."""
    token = C.READ_POINT.set({C.normalize_location(location): seq} if seq is not None else None)
    try:
        return {name: _rows(path, DeltaLog.for_table(path).update()) for name, path in paths.items()}
    finally:
        C.READ_POINT.reset(token)


_PARSED: dict = {}


def _query_scope(stmt: TStmt):
    """The session's own ``query_scope`` of the parsed query (executor/session/transactions.py)."""
    from isolde.executor.session.transactions import query_scope
    from isolde.grammar.parser import parse

    parsed = _PARSED.get(stmt.sql)
    if parsed is None:
        (parsed,) = parse(stmt.sql)
        _PARSED[stmt.sql] = parsed
    return query_scope(parsed)


def _run_statement(mt: MultiStatementTransaction, s: TStmt, paths: dict, out: Outcome, operations: dict) -> None:
    """One statement inside ``mt``, as the session runs it (begin_statement / end_statement)."""
    mt.begin_statement(STATEMENT_CLASS[s.kind])
    ok = False
    scope = None
    try:
        if s.is_query:
            scope = _query_scope(s)
            read = []
            for y in s.touched:
                staged = mt.log_for(y, DeltaLog.for_table(paths[y]))
                rows = _rows(paths[y], staged.update())
                read.append((y, tuple(r for r in rows if s.query_matches(r))))
            out.results[s.idx] = read[0][1] if s.kind != TOTAL else tuple(read)
        elif s.kind == COPY:
            source = s.reads[0]
            staged_src = mt.log_for(source, DeltaLog.for_table(paths[source]))
            hits = [r for r in _rows(paths[source], staged_src.update()) if r[0] == s.key]
            staged = mt.log_for(s.table, DeltaLog.for_table(paths[s.table]))
            txn = staged.start_transaction()
            txn.verify_files = True
            txn.set_blind_append()  # the source does not read the target (executor/jobs/insert.py)
            added = sorted((r[0], r[1] + s.w) for r in hits)
            if added:
                add = R._write_parquet(paths[s.table], R._new_file_name(), added)
                txn.commit([add], operation="WRITE", operation_parameters={"mode": "Append", "partitionBy": "[]"})
                operations.setdefault(s.table, []).append("WRITE")
            out.results[s.idx] = (0, len(added))
        else:
            staged = mt.log_for(s.table, DeltaLog.for_table(paths[s.table]))
            p = R.start(paths[s.table], s.row, log=staged)
            out.results[s.idx] = p.result
            out.stmt_row_level[s.idx] = p.row_level
            if p.actions:
                p.txn.commit(p.actions, operation=p.operation, operation_parameters=p.parameters)
                operations.setdefault(s.table, []).append(p.operation)
        ok = True
    finally:
        mt.end_statement(ok, scope)


def run_history(history: MTHistory, level: str, mode: str, root: str, *, delta_rs: bool = True,
                points: bool = True) -> Outcome:
    """Create the tables under ``root``, run the schedule, check every commit as it happens
    (``Outcome.problems``), read the final tables and (``points``) every table at every
    committed transaction's sequence number."""
    paths, location = create_tables(root, history, level, mode)
    out = Outcome()
    try:
        return _run(history, paths, location, delta_rs, points, out)
    except Exception as e:  # what was found before it raised goes with it (check_histories shows it)
        e.problems = list(out.problems)
        raise
    finally:
        forget_coordinator(location)


def _run(history: MTHistory, paths: dict, location: str, delta_rs: bool, points: bool, out: Outcome) -> Outcome:
    by_path = {path: name for name, path in paths.items()}
    latest = _versions(paths)  # what each table's log should be at: moves only at commits
    head = out.first_seq = entries(location)[-1] if entries(location) else 0
    open_: dict = {}
    operations: dict = {}  # transaction -> {table: operations of its statements that staged a commit}
    cursor: Counter = Counter()
    owner: dict = {}  # (table, version) -> transaction
    at_seq = {head: dict(latest)}  # sequence number -> every table's version as of it
    for ev, t in history.schedule:
        txn = history.txns[t]
        if ev in ("start", "run"):
            if ev == "start":
                open_[t] = MultiStatementTransaction()
                operations[t] = {}
            mt = open_[t]
            s = txn.stmts[cursor[t]]
            cursor[t] += 1
            _run_statement(mt, s, paths, out, operations[t])
            if ev == "start":
                out.read_points[t] = mt.read_point.get(C.normalize_location(location))
                if out.read_points[t] != head:
                    out.problems.append(f"{txn.label()}'s read point is seq {out.read_points[t]}, the coordinator's "
                                        f"head was {head}")
            continue
        mt = open_.pop(t)
        label = txn.label()
        out.pins[t] = {by_path[table.path]: table.staged.pinned.version for table in mt.tables.values()}
        as_of = at_seq.get(out.read_points.get(t), {})
        if any(as_of.get(x) != v for x, v in out.pins[t].items()):
            out.problems.append(f"{label} pinned {out.pins[t]}; as of its read point seq {out.read_points.get(t)} the "
                                f"tables were at {as_of}")
        before, before_entries = _versions(paths), entries(location)
        if before != latest or (before_entries[-1] if before_entries else 0) != head:
            out.problems.append(f"before {label} commits the tables are at {before} and the coordinator at "
                                f"{before_entries[-1:]}, not {latest} and seq {head}: something reached a log "
                                "outside a transaction's commit")
            latest, head = before, before_entries[-1] if before_entries else 0
        prepared = mt.prepare(T.start_transaction)
        parts = [] if prepared is None else prepared if isinstance(prepared, list) else [prepared]
        written = tuple(sorted(by_path[part[0].path] for part in parts))
        out.written[t] = written
        out.row_level[t] = {by_path[part[0].path]: part[1].row_level for part in parts}
        out.staged[t] = {by_path[table.path]: len(table.staged.staged_versions) for table in mt.tables.values()}
        own_files = set()
        for table in mt.tables.values():
            own_files |= T._staged_files(table.staged)
        if prepared is None:
            out.noop.append(t)
        if isinstance(prepared, list) != (len(parts) > 1):
            out.problems.append(f"{label}: prepare() returned {type(prepared).__name__} for {len(parts)} tables")
        try:
            returned = mt.commit(prepared)
        except ConcurrentModificationException as e:
            out.refused[t] = f"{type(e).__name__}: {e}"
            winner = None
            table_name = by_path.get(os.path.abspath(e.table)) if isinstance(e.table, str) else None
            if table_name is not None and e.winning_version is not None:
                winner = owner.get((table_name, e.winning_version))
            out.refusals[t] = (type(e).__name__, winner)
            if type(e) is ConcurrentModificationException:
                out.problems.append(f"{label} was refused with the unnamed ConcurrentModificationException")
            after, after_entries = _versions(paths), entries(location)
            if after != before or after_entries != before_entries:
                out.problems.append(f"{label} was refused ({type(e).__name__}) but the tables moved from {before} to "
                                    f"{after}, the coordinator from {before_entries[-1:]} to {after_entries[-1:]}")
                latest, head = after, after_entries[-1] if after_entries else 0
            out.problems += T.refusal_problems(label, mt, own_files)
            continue
        after, after_entries = _versions(paths), entries(location)
        if mt.state != "committed":
            out.problems.append(f"{label} committed but its state is {mt.state!r}")
        if prepared is None:
            if returned is not None or after != before or after_entries != before_entries:
                out.problems.append(f"{label} had nothing to commit, yet commit returned {returned}, the tables moved "
                                    f"from {before} to {after}, the coordinator from {before_entries[-1:]} to "
                                    f"{after_entries[-1:]}")
                latest, head = after, after_entries[-1] if after_entries else 0
            out.order.append(t)
            continue
        versions = {x: before[x] + 1 for x in written}
        new = after_entries[len(before_entries):]
        problems = []
        if after_entries[:len(before_entries)] != before_entries or len(new) != 1 or new[0] != head + 1:
            problems.append(f"{label} is not exactly one new coordinator entry: the coordinator was at seq {head}, "
                            f"it now has {new} after it")
        want_returned = versions[written[0]] if len(written) == 1 else versions
        if returned != want_returned:
            problems.append(f"{label}: commit returned {returned!r}, expected {want_returned!r}")
        moved = {x: (before[x], after[x]) for x in paths if after[x] != before[x] + (x in written)}
        if moved:
            problems.append(f"{label} wrote {list(written)}; versions (before, after) that are not one new version "
                            f"per written table and none elsewhere: {moved}")
        if len(new) == 1 and not problems:
            seq = new[0]
            entry = read_entry(location, seq)
            logged = sorted((by_path.get(os.path.dirname(c["log"]), c["log"]), int(c["version"]))
                            for c in entry["commits"])
            if logged != sorted(versions.items()):
                problems.append(f"{label}'s entry seq {seq} holds {logged}, expected {sorted(versions.items())}")
            for c in entry["commits"]:
                x = by_path.get(os.path.dirname(c["log"]))
                if x is None or x not in versions:
                    continue
                body = _commit_bytes(paths[x], versions[x])
                if body != c["body"].encode("utf-8"):
                    problems.append(f"{label}: {x} v{versions[x]} is not the body entry seq {seq} decided")
                    continue
                info = json.loads(body.partition(b"\n")[0])["commitInfo"]
                if info.get("isBlindAppend"):
                    out.blind.setdefault(t, set()).add(x)
                ops = operations[t].get(x, [])
                want = ops[0] if len(ops) == 1 else multi_statement.OPERATION
                if info.get("operation") != want or info.get("readVersion") != out.pins[t].get(x) \
                        or info.get(C.SEQ_FIELD) != seq:
                    problems.append(f"{label}: {x} v{versions[x]} commitInfo operation {info.get('operation')!r}, "
                                    f"readVersion {info.get('readVersion')}, seq {info.get(C.SEQ_FIELD)}; expected "
                                    f"{want!r}, the pinned v{out.pins[t].get(x)}, seq {seq}")
            out.seqs[t] = seq
        out.problems += problems
        latest, head = after, after_entries[-1] if after_entries else head
        out.committed.append(t)
        out.order.append(t)
        out.versions[t] = versions
        for x, v in versions.items():
            owner[(x, v)] = t
        at_seq[head] = dict(latest)
    try:  # a broken commit can leave a table whose files are gone: a problem, not a crash of the checker
        out.final = {name: R.table_rows(path) for name, path in paths.items()}
        if delta_rs:
            out.delta_rs = {name: R.delta_rs_rows(path) for name, path in paths.items()}
        if points:
            for seq in entries(location):
                if seq > out.first_seq:
                    out.points[seq] = read_at(paths, location, seq)
    except Exception as e:
        out.problems.append(f"reading the tables raised {type(e).__name__}: {e}")
    return out


# --------------------------------------------------------------------------- judging


@dataclass
class Verdict(T.Verdict):
    read_anomaly: Optional[str] = None  # WriteSerializable: the queries of committed writers fit no serial order


def serial_txns(history: MTHistory, order: Sequence[int], noop: Iterable[int], level: str,
                strict: bool = False) -> list:
    """The transactions the serial order is of, in their positions (``placed``): every committed
    one (those with nothing to write at their read points) under Serializable or ``strict``;
    under WriteSerializable those that wrote (see the module docstring)."""
    noop = set(noop)
    keep = placed(history, order, noop)
    if level != SERIALIZABLE and not strict:
        keep = [t for t in keep if t not in noop]
    return [history.txns[t] for t in keep]


def judged_results(txns: Sequence[MTxn], results: dict, level: str, strict: bool = False) -> dict:
    """The statement results a serial order must reproduce: every one under Serializable or
    ``strict``; under WriteSerializable those of DML statements (what decided the writes)."""
    return {s.idx: results[s.idx] for t in txns for s in t.stmts
            if level == SERIALIZABLE or strict or not s.is_query}


def _serial_order(history: MTHistory, run: ModelRun, level: str, results: bool = True,
                  strict: bool = True) -> Optional[list]:
    """The serial order (``serial_order``) of the model's ``run``, by its final tables and
    (``results``) the judged results; the strict rule unless not ``strict``."""
    txns = serial_txns(history, run.order, run.noop, level, strict)
    want = judged_results(txns, run.results, level, strict) if results else None
    return serial_order(run.final, want, history.initial, txns, level)


def _serialisable(history: MTHistory, run: ModelRun, level: str, results: bool = True, strict: bool = True) -> bool:
    return _serial_order(history, run, level, results, strict) is not None


def reads_of(txn: MTxn) -> set:
    """The tables a transaction's statements read (an INSERT ... VALUES reads nothing)."""
    out = set()
    for s in txn.stmts:
        out |= set(s.read_only_tables)
        if not s.is_query and s.kind not in (INSERT, COPY):
            out.add(s.table)
    return out


def blind_append_cycles(history: MTHistory, out: Outcome) -> list:
    """The blind-append pattern (see ``judge``): (X, Y, table) where X
    committed a blind append to the table (its commitInfo says isBlindAppend) while it read
    another table, and Y, whose read point is before X's entry, read the table and committed
    after X."""
    position = {event: n for n, event in enumerate(history.schedule)}
    found = []
    for x, tables in out.blind.items():
        for table in sorted(tables):
            if not reads_of(history.txns[x]) - {table}:
                continue
            for y in out.order:
                if y == x or position[("commit", y)] < position[("commit", x)]:
                    continue
                if out.read_points.get(y, 0) < out.seqs[x] and table in reads_of(history.txns[y]):
                    found.append((history.txns[x].label(), history.txns[y].label(), table))
    return found


NOT_SERIAL = "the checker let through a history that is not"
MODEL_DIFFERS = ("the logs do not hold the committed transactions' net effects: the model with the same decisions "
                 "commits {log} and ends with {final}",
                 "the statements read other rows than the model's (one snapshot of every table at the transaction's "
                 "read point, plus its own writes): model results {results}, nothing to commit: {noop}")


def judge(history: MTHistory, level: str, out: Outcome) -> Verdict:
    """See the module docstring. A history no serial order explains is a violation; under
    WriteSerializable its message names the blind-append pattern when it shows it."""
    v = Verdict(list(out.problems))
    initial = history.initial
    txns = history.txns
    v.compare_readers(out)
    model = simulate(history, accepted=set(out.order))
    T.compare_with_model(v, out, model, txns, MODEL_DIFFERS)
    wrong = {txns[t].label(): (tables, model.written[t]) for t, tables in out.written.items()
             if tables != model.written[t]}
    if wrong:
        v.violations.append(f"transactions prepared commits for other tables than the model's (real, model): {wrong}")
    snapshot = snapshot_results(history, out.order)
    off = {s.label(): (out.results.get(s.idx), snapshot[s.idx]) for s in history.stmts
           if out.results.get(s.idx) != snapshot[s.idx]}
    if off:
        v.violations.append(f"statements whose results are not those of their transaction run serially on the "
                            f"committed prefix at its start (real, serial): {off}")
    if out.points:  # a reader at each entry reads the tables as each committed transaction left them, in order
        seen = [out.points[seq] for seq in sorted(out.points)]
        want = [model.after[t] for t in model.log]
        if seen != want:
            v.violations.append(f"readers at the coordinator's entries {sorted(out.points)} read {seen}; the model has "
                                f"{want} after each of {_labels(txns[t] for t in model.log)} (a transaction visible "
                                "in part, or not where it committed)")
    committed = serial_txns(history, out.order, out.noop, level)
    results = judged_results(committed, out.results, level)
    if serial_order(out.final, results, initial, committed, level) is None:
        rows, got = run_serial(initial, committed)
        text = (f"{NOT_SERIAL} {level}: no allowed serial order of the transactions {_labels(committed)} ends with "
                f"tables {out.final} and statement results {results} (this order gives {rows}, results {got})")
        cycles = blind_append_cycles(history, out) if level != SERIALIZABLE else []
        if cycles:
            text += (f"; X's blind append to the table (X read another table) let Y, which read the table before it "
                     f"and committed after it, through (X, Y, table): {cycles}")
        v.violations.append(text)
    elif level != SERIALIZABLE:
        every = serial_txns(history, out.order, out.noop, level, strict=True)
        if serial_order(out.final, judged_results(every, out.results, level, True), initial, every, level) is None:
            v.read_anomaly = (f"no serial order of {_labels(every)} (those with nothing to write too) also gives "
                              f"the queries' results "
                              f"{ {s.label(): out.results[s.idx] for t in every for s in t.stmts if s.is_query} }"
                              f"; blind-append pattern (X, Y, table): {blind_append_cycles(history, out)}")
    v.refused_readonly = sum(t in out.noop for t in out.refused)
    v.weigh_refusals(out.refused, functools.partial(simulate, history), set(out.order),
                     lambda run, results: _serial_order(history, run, level, results))
    return v


@dataclass
class Tally(T.TransactionTally):
    """``transaction_model.TransactionTally`` of multi-table histories (a commit there: one
    table's part of a coordinator entry)."""
    generator: str = ""  # the generator's name, in the summary
    queries: int = 0
    multi_table_commits: int = 0  # committed transactions writing 2+ tables (one entry each)
    three_table_commits: int = 0
    cross_read_commits: int = 0  # committed writers that read a table they did not write
    refused_multi_table: int = 0
    shapes: Counter = field(default_factory=Counter)  # shape -> histories
    shape_refused: Counter = field(default_factory=Counter)  # shape -> histories with a refusal
    read_anomalies: list = field(default_factory=list)  # (seed, text): WriteSerializable, queries fit no order
    read_anomalies_blind: int = 0  # ... of which show ``blind_append_cycles``

    def summary(self) -> str:
        shapes = ", ".join(f"{k} {n} ({self.shape_refused[k]} refused)" for k, n in sorted(self.shapes.items()))
        reads = "" if self.level == SERIALIZABLE else (
            f"; committed writers whose queries fit no serial order (allowed): {len(self.read_anomalies)} histories "
            f"({self.read_anomalies_blind} with the blind-append pattern)")
        return (f"{self.level:17s} {self.mode:4s}{f' [{self.generator}]' if self.generator else ''}: {self.histories} "
                f"histories ({self.transactions} transactions, {self.statements} statements, {self.queries} "
                f"queries), {self.accepted} accepted, {self.refused} refused, {self.false_conflicts} false "
                f"conflicts = {self.ratio:.1%} of refused (rows only: {self.false_conflicts_rows_only} = "
                f"{self.ratio_rows_only:.1%}); transactions: {self.committed_transactions} committed "
                f"({self.multi_table_commits} over 2+ tables, {self.three_table_commits} over 3, "
                f"{self.cross_read_commits} reading a table they did not write), {self.refused_transactions} refused "
                f"({self.refused_multi_table} over 2+ tables), {self.false_refusals} needlessly = "
                f"{self.transaction_ratio:.1%} (rows only: {self.false_refusals_rows_only}; {self.refused_readonly} "
                f"refused with nothing to write), {self.noop_transactions} with nothing to commit; table commits "
                f"checked per row {self.row_level_commits}, per file {self.file_level_commits}; {self.seconds:.1f} s"
                f"\n    shapes: {shapes or 'none'}{reads}" + self.refusals_line())


def seeds(count: int, base: int = 71) -> list:
    return [base * 1_000_000 + i for i in range(count)]


def check_histories(level: str, mode: str, history_seeds: Iterable[int], workdir: str, *, delta_rs: bool = True,
                    points: bool = True, keep_examples: int = 5, name: str = "", **generator) -> Tally:
    """Run and judge every history; never raises for a bad history (it lands in ``violations``
    with its seed and description), so one run reports all of them."""
    with Tally(level, mode, generator=name).timed() as tally:
        for seed in history_seeds:
            history = generate_history(seed, **generator)
            root = tempfile.mkdtemp(prefix=f"mt-{level}-{mode}-{seed}-", dir=workdir)
            tally.histories += 1
            tally.transactions += len(history.txns)
            tally.statements += len(history.stmts)
            tally.queries += sum(s.is_query for s in history.stmts)
            if history.shape:
                tally.shapes[history.shape] += 1
            try:
                out = run_history(history, level, mode, root, delta_rs=delta_rs, points=points)
            except Exception as e:  # anything but a named conflict at commit: report it with the history
                before = "".join(f"\n  VIOLATION: {p}" for p in getattr(e, "problems", []))
                tally.violations.append((seed, f"{history.describe()}\n  tables: {root}{before}\n  raised "
                                         f"{type(e).__name__}: {e}"))
                continue
            verdict = judge(history, level, out)
            tally.count(len(out.order), out, verdict)
            for t in out.committed:
                tally.multi_table_commits += len(out.written[t]) >= 2
                tally.three_table_commits += len(out.written[t]) >= 3
                read = {y for s in history.txns[t].stmts for y in s.read_only_tables}
                tally.cross_read_commits += bool(read - set(out.written[t]))
            tally.refused_multi_table += sum(len(out.written.get(t, ())) >= 2 for t in out.refused)
            for levels in out.row_level.values():
                for row_level in levels.values():
                    if row_level:
                        tally.row_level_commits += 1
                    else:
                        tally.file_level_commits += 1
            if out.refused and history.shape:
                tally.shape_refused[history.shape] += 1
            text = f"{history.describe()}\n{out.describe(history)}"
            if verdict.read_anomaly:
                tally.read_anomalies.append((seed, text + "\n  QUERIES FIT NO SERIAL ORDER: " + verdict.read_anomaly))
                tally.read_anomalies_blind += bool(blind_append_cycles(history, out))
            tally.add(seed, text, verdict, out.refused, f"tables: {root}", root, keep_examples)
    return tally


def replay(seed: int, level: str, mode: str, workdir: str, **generator) -> str:
    """One history, run and judged, as text (for a failure's seed)."""
    where = tempfile.mkdtemp(prefix=f"replay-mt-{seed}-", dir=workdir)
    return model_tally.replay(generate_history, run_history, judge, seed, level, mode, where, **generator)
