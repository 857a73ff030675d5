"""A model checker for the conflict checkers (issue 19): small concurrent histories of
single-row UPDATE / DELETE / MERGE / INSERT statements, run at the log level against real
Delta logs, judged against serial executions.

Pure Python + pyarrow: no Spark. Each statement does at the log level what the Spark-side
statement does (executor/rows/dml.py ``run_update_delete``, executor/jobs/merge.py,
executor/jobs/insert.py):

* its conflict scope comes from the planner's own ``conflict_scope`` over the parsed SQL text
  (for MERGE with the source's key values, as ``_summarise_source`` computes them), and is
  recorded by the executor's own ``record_scope``: ``enable_row_level()`` when eligible, then
  ``filter_files(read_predicate)``; an INSERT ... VALUES calls ``set_blind_append()``;
* it reads the live rows of the files ``filter_files`` returned (pyarrow, deletion vectors
  honoured), and with deletion vectors writes what ``dml.apply_changes`` writes: per touched
  file a remove + add of the same path whose new vector is the old one plus the changed
  positions, and one new data file holding the updated (and, for MERGE, inserted) rows;
* a statement that changes nothing commits nothing (``dml.prepared`` with no actions).

The table is ``(id INT, n BIGINT)``, unpartitioned, deletion vectors on, 1-3 data files with
ids 0..K-1 and n = 0. Statement i adds ``w = 2**i`` to n, so the final rows say exactly which
statements' effects landed on which rows.

Beyond single-row DML (issue 52), histories may hold the moves that found non-serialisable
commits before: statements that read two keys (``UPDATE ... WHERE id = a OR id = b``), that move
a row into another statement's read (``UPDATE t SET id = b ... WHERE id = a``), that read the
rows other statements wrote (``DELETE ... WHERE id = a OR n IN (w, ...)``, their weights); a RESTORE to version 0
or 1 (the table's version 1 is a setup DELETE, so a file starts with a deletion vector that the
RESTORE shrinks away); compactions of three kinds (OPTIMIZE and REORG ... APPLY (PURGE), which
carry deletion vectors, and ZORDER, which without row tracking does not); and a row-level work
budget small enough that the checker falls back to the file-level rules.

A history is a schedule of ``start`` / ``commit`` events: a statement reads the table's
latest snapshot and stages its files at ``start``, and commits (or is refused with a named
conflict) at ``commit``. The judgement (``judge``):

* the committed table (read with pyarrow and, independently, with delta-rs) must equal the
  in-memory model replaying the same schedule with the same accept/refuse decisions (the log
  applied exactly the committed statements' effects, deletion-vector rebases included);
* it must equal a serial execution of the committed statements from the initial rows, in log
  order (Serializable) or in some order (WriteSerializable): the same final rows, and every
  statement with the result it reported (rows deleted or updated, rows added: what a DML
  statement returns). The results matter: two DELETEs of one row both report a deleted row,
  which no serial order does, though the final rows agree; and with n = 0 a MERGE that
  updated (k, 0) to (k, w) leaves the row a MERGE inserting (k, w) would. Statements that
  committed nothing (an UPDATE / DELETE that found no row) are left out: they never reach
  the checker, and placed at their snapshot they change nothing;
* when the checker refused something: had every statement been forced through (each
  statement's deleted row identities and added rows, as computed at its own snapshot, applied
  in commit order; the model world where nothing is refused), would the result still be such
  a serial execution? If so the refusal was a false conflict. Also per refused statement:
  forcing just that one through, the others as they were. The rows-only variant (results
  ignored) is counted too, for comparison.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Iterable, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from isolde.errors import CONFLICT_EXCEPTIONS
from isolde.executor.log import DeltaLog
from isolde.executor.log.actions import AddFile, Metadata
from isolde.executor.log.deletion_vectors import read_deleted_rows, write_deletion_vectors
from isolde.executor.txn.compaction import LAYOUT_TAG, layout_tag
from isolde.executor.txn.statement_scope import record_scope, scope_flags
from isolde.executor.log.stats import file_stats

from tests.helpers import model_tally
from tests.helpers.model_tally import Verdict, labels as _labels, outcome_lines, share

SERIALIZABLE = "Serializable"
WRITE_SERIALIZABLE = "WriteSerializable"
LEVELS = (SERIALIZABLE, WRITE_SERIALIZABLE)
MODES = ("auto", "off")  # isolde.rowLevelConcurrency: row level / file level

UPDATE, DELETE, MERGE, INSERT = "UPDATE", "DELETE", "MERGE", "INSERT"
KINDS = (UPDATE, DELETE, MERGE, INSERT)  # the DML kinds the generator draws from
UPDATE2, MOVE, SWEEP = "UPDATE2", "MOVE", "SWEEP"  # reads two keys / moves a row / reads another's rows
EXTENDED_KINDS = (UPDATE2, MOVE, SWEEP)
OPTIMIZE = "OPTIMIZE"  # bin-packing compaction: one bin of every live file (see ``start``)
PURGE = "PURGE"  # REORG ... APPLY (PURGE): the files with deletion vectors rewritten, layout carried
ZORDER = "ZORDER"  # OPTIMIZE ZORDER BY: every file rewritten, rows reordered, no layout (no row tracking)
COMPACTIONS = (OPTIMIZE, PURGE, ZORDER)
CARRYING = (OPTIMIZE, PURGE)  # compactions that carry deletion vectors both ways
RESTORE = "RESTORE"  # RESTORE TABLE t TO VERSION AS OF key (0: as created, 1: after the setup DELETE)

SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "integer", "nullable": True, "metadata": {}},
    {"name": "n", "type": "long", "nullable": True, "metadata": {}},
]})
COLUMN_TYPES = {"id": "int", "n": "bigint"}  # Target.column_types (Spark simpleString)
ARROW_SCHEMA = pa.schema([("id", pa.int32()), ("n", pa.int64())])
MERGE_SOURCE_COLUMNS = ["id", "w"]

Row = tuple  # (id, n)


# --------------------------------------------------------------------------- statements and histories


@dataclass(frozen=True)
class Stmt:
    idx: int
    kind: str
    key: int
    w: int  # a distinct power of two per statement
    key2: int = -1  # UPDATE2's second key, MOVE's new id
    sweep: tuple = ()  # SWEEP: the statements whose rows it deletes (rows whose n is one of their weights)

    @property
    def sql(self) -> str:
        k, w, k2 = self.key, self.w, self.key2
        if self.kind == UPDATE:
            return f"UPDATE t SET n = n + {w} WHERE id = {k}"
        if self.kind == UPDATE2:
            return f"UPDATE t SET n = n + {w} WHERE id = {k} OR id = {k2}"
        if self.kind == MOVE:
            return f"UPDATE t SET id = {k2}, n = n + {w} WHERE id = {k}"
        if self.kind == DELETE:
            return f"DELETE FROM t WHERE id = {k}"
        if self.kind == SWEEP:
            return f"DELETE FROM t WHERE id = {k} OR n IN ({', '.join(str(1 << j) for j in self.sweep)})"
        if self.kind == OPTIMIZE:
            return "OPTIMIZE t"
        if self.kind == PURGE:
            return "REORG TABLE t APPLY (PURGE)"
        if self.kind == ZORDER:
            return "OPTIMIZE t ZORDER BY (n)"
        if self.kind == RESTORE:
            return f"RESTORE TABLE t TO VERSION AS OF {k}"
        if self.kind == MERGE:
            return (f"MERGE INTO t USING (SELECT {k} AS id, {w} AS w) AS s ON t.id = s.id "
                    f"WHEN MATCHED THEN UPDATE SET n = t.n + s.w "
                    f"WHEN NOT MATCHED THEN INSERT (id, n) VALUES (s.id, s.w)")
        return f"INSERT INTO t VALUES ({k}, {w})"

    def label(self) -> str:
        return f"S{self.idx}"

    @property
    def changes_no_row(self) -> bool:
        return self.kind in COMPACTIONS

    def matches(self, row: Row) -> bool:
        """Does the statement's WHERE (MERGE's ON) select ``row``?"""
        if self.kind == UPDATE2:
            return row[0] in (self.key, self.key2)
        if self.kind == SWEEP:
            return row[0] == self.key or any(row[1] == 1 << j for j in self.sweep)
        return row[0] == self.key

    def change(self, row: Row) -> Optional[Row]:
        """A selected row's new value; None: deleted."""
        if self.kind in (DELETE, SWEEP):
            return None
        if self.kind == MOVE:
            return (self.key2, row[1] + self.w)
        return (row[0], row[1] + self.w)

    # serial semantics over a multiset of rows
    def apply(self, rows: list, versions: Optional[dict] = None) -> tuple[list, tuple]:
        """(rows after the statement, its result: (rows deleted or updated, rows added)).
        ``versions``: version -> rows, what a RESTORE brings back."""
        k, w = self.key, self.w
        if self.changes_no_row:  # rewrites files, changes no row
            return rows, (0, 0)
        if self.kind == RESTORE:
            return list(versions[k]), (0, 0)
        if self.kind == INSERT:
            return rows + [(k, w)], (0, 1)
        hits = [r for r in rows if self.matches(r)]
        if self.kind == MERGE and not hits:
            return rows + [(k, w)], (0, 1)
        out = [r for r in rows if not self.matches(r)]
        changed = [c for c in (self.change(r) for r in hits) if c is not None]
        return out + changed, (len(hits), len(changed))

    # effects at a snapshot (identity -> row): what the statement's commit would do
    def effects(self, state: dict) -> tuple[frozenset, list]:
        """(identities of the rows it deletes or updates, rows it adds)."""
        k, w = self.key, self.w
        if self.changes_no_row or self.kind == RESTORE:  # (row identities survive a compaction)
            return frozenset(), []
        if self.kind == INSERT:
            return frozenset(), [(k, w)]
        hits = sorted(i for i, r in state.items() if self.matches(r))
        if self.kind == MERGE and not hits:
            return frozenset(), [(k, w)]
        return frozenset(hits), [c for c in (self.change(state[i]) for i in hits) if c is not None]


@dataclass(frozen=True)
class History:
    seed: int
    files: tuple  # ids of each initial data file, in row order
    stmts: tuple  # Stmt
    schedule: tuple  # (("start" | "commit"), statement index)
    setup: tuple = ()  # ids a DELETE removes at version 1, before any statement (none: no version 1)
    budget: Optional[int] = None  # isolde.rowLevelConcurrency.budgetRows of every statement (None: default)

    @property
    def created_rows(self) -> list:
        """The rows of version 0."""
        return [(i, 0) for ids in self.files for i in ids]

    @property
    def initial_rows(self) -> list:
        """The rows every statement's serial execution starts from (after the setup DELETE)."""
        return [r for r in self.created_rows if r[0] not in self.setup]

    @property
    def versions(self) -> dict:
        """Version -> rows, for the versions before any statement (what a RESTORE can name)."""
        out = {0: self.created_rows}
        if self.setup:
            out[1] = self.initial_rows
        return out

    def describe(self) -> str:
        lines = [f"history seed={self.seed}: files " + ", ".join(f"f{j}=ids {list(ids)}" for j, ids in enumerate(self.files))]
        if self.setup:
            lines.append(f"  v1: DELETE FROM t WHERE id IN {tuple(self.setup)}")
        if self.budget is not None:
            lines.append(f"  row-level budget: {self.budget} rows")
        for s in self.stmts:
            lines.append(f"  {s.label()}: {s.sql}")
        lines.append("  schedule: " + ", ".join(f"{ev} {self.stmts[i].label()}" for ev, i in self.schedule))
        return "\n".join(lines)


REUSE = 0.0  # chance that a statement picks a key an earlier statement of the history picked
ABSENT_KEYS = 2  # keys K..K+1 are not in the table: MERGE inserts, INSERT adds a new id
OPTIMIZING = 0.0  # chance that a history holds an OPTIMIZE (0: the histories of old, seed for seed)


def generate_history(seed: int, *, reuse: float = REUSE, absent_keys: int = ABSENT_KEYS,
                     optimize: float = OPTIMIZING, extended: float = 0.0, restore: float = 0.0,
                     compactions: tuple = (OPTIMIZE,), budget=None, placement: float = 0.0) -> History:
    """A random small history, a function of its arguments only (the same for every level
    and mode). Keys are uniform over the table's ids and ``absent_keys`` more, except that
    with probability ``reuse`` a statement picks an earlier statement's key (the collisions
    where conflicts are).

    With ``optimize`` > 0 the table starts with 2 or 3 files (something to compact) and with
    probability ``optimize`` one compaction (drawn from ``compactions``) joins the 2-4 DML
    statements, at a random place. With ``extended`` > 0 each DML statement is, with that
    probability, one of ``EXTENDED_KINDS`` instead. With ``restore`` > 0 the table gets a setup
    DELETE of 1-2 ids at version 1 and, with that probability, a RESTORE to version 0 or 1 joins.
    ``budget``: every statement's row-level budget (rows), or a range to draw it from. With
    ``placement`` > 0, that share of histories is a placement chain: statement 0 reads two keys,
    statement 1 moves a row into that read (so 0 can only be ordered before 1), the others
    read, insert or sweep what 0 writes, and 0 commits last. The defaults draw exactly what was
    drawn before these moves existed, seed for seed."""
    rng = random.Random(seed)
    k = rng.randint(6, 10)
    ids = list(range(k))
    if optimize > 0:
        cuts = sorted(rng.sample(range(2, k - 1), rng.randint(1, 2)))
        files = tuple(tuple(ids[a:b]) for a, b in zip([0, *cuts], [*cuts, k]))
    elif rng.random() < 0.5:
        files = (tuple(ids),)
    else:
        cut = rng.randint(2, k - 2)
        files = (tuple(ids[:cut]), tuple(ids[cut:]))
    universe = list(range(k + absent_keys))
    n = rng.randint(2, 4)
    stmts_drawn = []  # (kind, key, key2, sweep)
    keys: list[int] = []

    def draw_key() -> int:
        return rng.choice(keys) if keys and rng.random() < reuse else rng.choice(universe)

    for i in range(n):
        key = draw_key()
        keys.append(key)
        kind, key2, sweep = rng.choice(KINDS), -1, ()
        if extended > 0 and rng.random() < extended:
            kind = rng.choice(EXTENDED_KINDS)
            if kind == SWEEP:  # the statements whose rows it deletes (itself included: none)
                sweep = tuple(sorted(rng.sample(range(4), rng.randint(1, 2))))
            else:
                key2 = draw_key()
                keys.append(key2)
        stmts_drawn.append((kind, key, key2, sweep))
    if optimize > 0 and rng.random() < optimize:
        kind = compactions[0] if len(compactions) == 1 else rng.choice(compactions)
        stmts_drawn.insert(rng.randint(0, n), (kind, -1, -1, ()))
        n += 1
    setup: tuple = ()
    if restore > 0:
        setup = tuple(sorted(rng.sample(ids, rng.randint(1, 2))))
        if rng.random() < restore:
            stmts_drawn.insert(rng.randint(0, n), (RESTORE, rng.choice((0, 1)), -1, ()))
            n += 1
    chain = placement > 0 and rng.random() < placement
    if chain:
        a, b = rng.sample(ids, 2)
        mover = rng.choice([i for i in ids if i not in (a, b)])
        stmts_drawn = [(UPDATE2, a, b, ()), (MOVE, mover, a, ())]
        if rng.random() < 0.5:
            # rows inserted in files 0 never reads, then a sweep of them, of 0's rows and of the
            # moved row's old id (so it must follow the move, which 0 must precede): its check
            # reads more rows than the move's, so a budget can fall between the two
            inserts = rng.randint(2, 4)
            stmts_drawn += [(INSERT, rng.choice(universe[k:] or universe), -1, ()) for _ in range(inserts)]
            stmts_drawn.append((SWEEP, mover, -1, (0, *range(2, inserts + 2))))
        else:
            for _ in range(rng.randint(1, 3)):
                kind = rng.choice((SWEEP, UPDATE, DELETE, MERGE, INSERT, SWEEP))
                key = rng.choice((a, b, rng.choice(universe))) if kind != SWEEP else rng.choice(universe)
                stmts_drawn.append((kind, key, -1, tuple(sorted(rng.sample((0, 1), rng.randint(1, 2))))
                                    if kind == SWEEP else ()))
        if optimize > 0 and rng.random() < optimize:  # a compaction, the last winner before 0 commits
            stmts_drawn.append((compactions[0] if len(compactions) == 1 else rng.choice(compactions), -1, -1, ()))
        n = len(stmts_drawn)
    if isinstance(budget, tuple):
        budget = rng.randint(*budget)
    stmts = [Stmt(i, kind, key, 1 << i, key2, sweep) for i, (kind, key, key2, sweep) in enumerate(stmts_drawn)]
    if chain:
        # 0 reads first and commits last; the others run one after another or overlap
        schedule = [("start", 0)]
        for i in range(1, n):
            schedule.append(("start", i))
            if rng.random() < 0.7:
                schedule.append(("commit", i))
        schedule += [("commit", i) for i in range(1, n) if ("commit", i) not in schedule]
        schedule.append(("commit", 0))
    elif rng.random() < 0.7:
        # all read the same snapshot, then commit in a random order
        order = list(range(n))
        rng.shuffle(order)
        schedule = [("start", i) for i in range(n)] + [("commit", i) for i in order]
    else:
        # a random interleaving: some statements start after others committed
        schedule = []
        started: list[int] = []
        pending = list(range(n))
        while pending or started:
            choices = [("start", i) for i in pending[:1]] + [("commit", i) for i in started]
            ev = rng.choice(choices)
            schedule.append(ev)
            if ev[0] == "start":
                pending.remove(ev[1])
                started.append(ev[1])
            else:
                started.remove(ev[1])
    return History(seed, files, tuple(stmts), tuple(schedule), setup, budget)


# --------------------------------------------------------------------------- the in-memory model


def run_serial(initial: Sequence[Row], stmts: Iterable[Stmt], versions: Optional[dict] = None) -> tuple[list, dict]:
    """(final rows sorted, statement index -> its result) of a serial execution."""
    rows = list(initial)
    results = {}
    for s in stmts:
        rows, results[s.idx] = s.apply(rows, versions)
    return sorted(rows), results


@dataclass
class ModelRun:
    final: list  # sorted rows
    log: list  # statement indices in commit order (those that committed something)
    noop: list  # statements that found nothing to change
    results: dict  # statement index -> (rows deleted or updated, rows added) at its snapshot


@dataclass
class _Table:
    """The model's table at one moment: live row identities and the data files holding them."""

    state: dict  # row identity -> row, the live rows
    files: dict  # live data file -> the identities it holds, in row order (deleted ones included)

    def copy(self) -> "_Table":
        return _Table(dict(self.state), {f: list(ids) for f, ids in self.files.items()})

    def deleted(self, name: str) -> frozenset:
        """The identities a file's deletion vector holds."""
        return frozenset(i for i in self.files[name] if i not in self.state)

    def layout(self) -> dict:
        """Live file -> its deletion vector (what RESTORE compares)."""
        return {f: self.deleted(f) for f in self.files}


def _created(history: History) -> tuple[_Table, dict]:
    """The table as created and after the setup DELETE, and version -> table for both."""
    names = [f"f{j}" for j in range(len(history.files))]
    state = {(name, pos): (i, 0) for name, ids in zip(names, history.files) for pos, i in enumerate(ids)}
    table = _Table(state, {name: [(name, pos) for pos in range(len(ids))] for name, ids in zip(names, history.files)})
    versions = {0: table.copy()}
    if history.setup:
        for ident in [i for i, r in table.state.items() if r[0] in history.setup]:
            table.state.pop(ident)
        versions[1] = table.copy()
    return table, versions


def _compaction_inputs(kind: str, table: _Table) -> list:
    """The files a compaction rewrites at a snapshot (``start_compaction``'s rule), in path order."""
    live = sorted(table.files)
    if kind == PURGE:
        return [f for f in live if table.deleted(f)]
    if kind == ZORDER:
        return live
    return live if len(live) >= 2 or any(table.deleted(f) for f in live) else []


def simulate(history: History, accepted: Optional[set] = None) -> ModelRun:
    """The schedule applied to row identities, nothing refused (``accepted`` None) or only the
    statements in ``accepted`` committing. A commit deletes the row identities the statement
    saw at its snapshot (already deleted ones stay deleted) and adds its new rows.

    A compaction changes no row identity (deletion vectors are carried through it both ways);
    the data files are tracked beside the rows to know whether it finds something to compact at
    its snapshot, and so commits something. A RESTORE makes the table what it was at its
    version: the same files with the same deletion vectors, so the rows deleted since come back
    under their old identities, beside the files appended after its snapshot; it commits
    nothing when the table already is that."""
    table, versions = _created(history)
    effects: dict = {}
    compacting: dict = {}  # compaction index -> (its input files, the live identities in them), at its snapshot
    restoring: dict = {}  # RESTORE index -> (does it change anything, the files it saw), at its snapshot
    log, noop = [], []
    for ev, i in history.schedule:
        s = history.stmts[i]
        if ev == "start":
            effects[i] = s.effects(table.state)
            if s.changes_no_row:
                inputs = _compaction_inputs(s.kind, table)
                compacting[i] = (inputs, [ident for f in inputs for ident in table.files[f] if ident in table.state])
            elif s.kind == RESTORE:
                restoring[i] = (table.layout() != versions[s.key].layout(), set(table.files))
            continue
        deleted, added = effects[i]
        if s.changes_no_row:
            inputs, rows = compacting[i]
            if not inputs:
                noop.append(i)
                continue
            if accepted is not None and i not in accepted:
                continue
            for name in inputs:
                table.files.pop(name, None)
            if rows:  # one output file; rows deleted since the snapshot carried over as its vector
                table.files[f"opt{i}"] = list(rows)
            log.append(i)
            continue
        if s.kind == RESTORE:
            changes, seen = restoring[i]
            if not changes:
                noop.append(i)
                continue
            if accepted is not None and i not in accepted:
                continue
            # its actions were computed at its snapshot: files added since (a blind append it was
            # allowed to commit over) stay as they are
            restored = versions[s.key].copy()
            for name, idents in table.files.items():
                if name not in seen:
                    restored.files[name] = idents
                    restored.state.update({ident: table.state[ident] for ident in idents if ident in table.state})
            table = restored
            log.append(i)
            continue
        if not deleted and not added:
            noop.append(i)
            continue
        if accepted is not None and i not in accepted:
            continue
        for ident in deleted:
            table.state.pop(ident, None)
        if added:
            table.files[f"new{i}"] = [(f"new{i}", j) for j in range(len(added))]
            for j, row in enumerate(added):
                table.state[(f"new{i}", j)] = row
        log.append(i)
    results = {i: (len(d), len(a)) for i, (d, a) in effects.items()}
    return ModelRun(sorted(table.state.values()), log, noop, results)


def serial_order(final: Sequence[Row], results: Optional[dict], initial: Sequence[Row], stmts: Sequence[Stmt],
                 level: str, versions: Optional[dict] = None) -> Optional[list]:
    """The serial order of ``stmts`` (given in log order) allowed by ``level`` that ends with
    the rows ``final`` and in which every statement has the result it had (``results``: index
    -> (rows deleted or updated, rows added); None: compare the rows only); None when there
    is none."""
    final = sorted(final)

    def same(order) -> bool:
        rows, got = run_serial(initial, order, versions)
        return rows == final and (results is None or all(got[s.idx] == results[s.idx] for s in order))

    if level == SERIALIZABLE:
        return list(stmts) if same(stmts) else None
    for order in itertools.permutations(stmts):
        if same(order):
            return list(order)
    return None


# --------------------------------------------------------------------------- the real thing, at the log level


@functools.lru_cache(maxsize=4096)
def _parsed(sql: str):
    from isolde.grammar.parser import parse

    (stmt,) = parse(sql)
    return stmt


def _write_parquet(table_path: str, name: str, rows: Sequence[Row], *, data_change: bool = True) -> AddFile:
    local = os.path.join(table_path, name)
    pq.write_table(pa.table({"id": pa.array([r[0] for r in rows], pa.int32()),
                             "n": pa.array([r[1] for r in rows], pa.int64())}, schema=ARROW_SCHEMA), local)
    _, stats = file_stats(local)
    return AddFile(name, {}, os.path.getsize(local), int(time.time() * 1000), data_change=data_change, stats=stats)


def _new_file_name() -> str:
    return f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"


def create_table(table_path: str, history: History, level: str, mode: str) -> None:
    """Version 0: the table with its files; version 1 (when the history has a setup): a
    deletion-vector DELETE of the setup ids."""
    os.makedirs(table_path)  # a fresh directory: never a table left by another run
    adds = [_write_parquet(table_path, f"part-0000{j}-initial-c000.snappy.parquet", [(i, 0) for i in ids])
            for j, ids in enumerate(history.files)]
    config = {"delta.enableDeletionVectors": "true", "delta.isolationLevel": level,
              "isolde.rowLevelConcurrency": mode}
    DeltaLog.for_table(table_path).start_transaction().commit([Metadata(SCHEMA, (), config), *adds], "CREATE TABLE")
    if history.setup:
        txn = DeltaLog.for_table(table_path).start_transaction()
        touched = {}
        for f in txn.snapshot.all_files:
            hits = [pos for pos, row in live_rows(table_path, f) if row[0] in history.setup]
            if hits:
                touched[f.path] = (f, hits)
        txn.read_whole_table()
        txn.commit(_deletion_vector_actions(table_path, touched), "DELETE",
                   {"predicate": json.dumps([f"id IN {tuple(history.setup)}"])})


def _deletion_vector_actions(table_path: str, touched: dict) -> list:
    """dml.apply_changes, deletion-vector mode: per touched file (path -> (AddFile, positions))
    a remove and a re-add whose vector is the old one plus the positions, one vector file."""
    if not touched:
        return []
    vectors = {p: read_deleted_rows(table_path, f.deletion_vector) | set(pos) for p, (f, pos) in touched.items()}
    descriptors = write_deletion_vectors(table_path, vectors)
    now = int(time.time() * 1000)
    actions = []
    for p, (f, _) in sorted(touched.items()):
        actions.append(f.remove(deletion_timestamp=now, data_change=True))
        actions.append(replace(f, deletion_vector=descriptors[p], data_change=True, extra=dict(f.extra)))
    return actions


def live_rows(table_path: str, add: AddFile) -> list:
    """(position, (id, n)) of the live rows of one data file."""
    t = pq.read_table(os.path.join(table_path, add.path))
    deleted = read_deleted_rows(table_path, add.deletion_vector)
    return [(pos, (i, n)) for pos, (i, n) in enumerate(zip(t.column("id").to_pylist(), t.column("n").to_pylist()))
            if pos not in deleted]


def table_rows(table_path: str) -> list:
    snap = DeltaLog.for_table(table_path).update()
    return sorted(r for f in snap.all_files for _, r in live_rows(table_path, f))


def delta_rs_rows(table_path: str) -> list:
    """The table as delta-rs reads it (DataFusion; ``to_pyarrow_table`` refuses deletion vectors)."""
    import deltalake

    out = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(table_path)).execute("SELECT id, n FROM t").read_all()
    t = pa.table(out)
    return sorted(zip(t.column("id").to_pylist(), t.column("n").to_pylist()))


@dataclass
class Prepared:
    stmt: Stmt
    txn: object
    actions: list
    operation: str
    parameters: dict
    read_version: int
    row_level: bool
    result: tuple  # (rows deleted or updated, rows added): what the statement reports


def start_compaction(table_path: str, stmt: Stmt) -> Prepared:
    """A compaction as executor/jobs/optimize.py does it, at the log level, with one bin of
    ``_compaction_inputs`` (OPTIMIZE: every live file, when there are 2+ of them or one has a
    deletion vector; REORG PURGE: the files with deletion vectors; ZORDER: every file): the read
    recorded as exactly the input files, one output file of the inputs' live rows, the inputs
    removed and the output added with dataChange=false. OPTIMIZE and PURGE write the output input
    by input in path order, each by position, and tag it with that layout; ZORDER sorts the rows
    by n (then id) and, without row tracking, records no layout. Never row-level."""
    txn = DeltaLog.for_table(table_path).start_transaction()
    txn.verify_files = True
    snap = txn.snapshot
    live = sorted(snap.all_files, key=lambda f: f.path)
    if stmt.kind == PURGE:
        inputs = [f for f in live if f.deletion_vector is not None]
    elif stmt.kind == ZORDER:
        inputs = live
    else:
        inputs = live if len(live) >= 2 or any(f.deletion_vector is not None for f in live) else []
    txn.record_read(None, None, files=inputs)  # exactly the files it rewrites
    actions: list = []
    if inputs:
        rows = [row for f in inputs for _, row in live_rows(table_path, f)]
        if stmt.kind == ZORDER:
            rows.sort(key=lambda r: (r[1], r[0]))
        now = int(time.time() * 1000)
        actions = [f.remove(deletion_timestamp=now, data_change=False) for f in inputs]
        if rows:
            add = _write_parquet(table_path, _new_file_name(), rows, data_change=False)
            if stmt.kind != ZORDER and (add.parsed_stats or {}).get("numRecords") == len(rows):
                add = replace(add, tags={**(add.tags or {}), LAYOUT_TAG: layout_tag(inputs)})
            actions.append(add)
    if stmt.kind == PURGE:
        operation, parameters = "REORG", {"predicate": "[]", "applyPurge": "true"}
    else:
        operation = "OPTIMIZE"
        parameters = {"predicate": "[]", "auto": "false", "clusterBy": "[]",
                      "zOrderBy": '["n"]' if stmt.kind == ZORDER else "[]"}
    return Prepared(stmt, txn, actions, operation, parameters, snap.version, txn.row_level, (0, 0))


def start_restore(table_path: str, stmt: Stmt) -> Prepared:
    """RESTORE as executor/jobs/restore.py does it: the actions that make the latest version
    look like version ``stmt.key`` (``restore_actions``), the whole table read."""
    from isolde.executor.jobs.restore import restore_actions

    log = DeltaLog.for_table(table_path)
    txn = log.start_transaction()
    txn.verify_files = True
    snap = txn.snapshot
    actions, _ = restore_actions(table_path, snap, log.snapshot(stmt.key))
    txn.read_whole_table()
    return Prepared(stmt, txn, actions, "RESTORE", {"version": stmt.key}, snap.version, txn.row_level, (0, 0))


def start(table_path: str, stmt: Stmt, log=None) -> Prepared:
    """Open the statement's transaction on the latest snapshot, record its read as the real
    statement does, read the rows and stage its files and deletion vectors. ``log``: the log
    to run against (a multi-statement transaction's StagedDeltaLog; default the table's own)."""
    from isolde.planner.scope import conflict_scope

    if stmt.changes_no_row:
        if log is not None:
            raise ValueError("compactions run against the table's own log only")
        return start_compaction(table_path, stmt)
    if stmt.kind == RESTORE:
        if log is not None:
            raise ValueError("RESTORE runs against the table's own log only")
        return start_restore(table_path, stmt)
    txn = (log if log is not None else DeltaLog.for_table(table_path)).start_transaction()
    txn.verify_files = True  # as the session's transactions (executor/session/context.py)
    snap = txn.snapshot
    k, w = stmt.key, stmt.w
    if stmt.kind == INSERT:  # executor/jobs/insert.py: VALUES reads nothing
        add = _write_parquet(table_path, _new_file_name(), [(k, w)])
        txn.set_blind_append()
        return Prepared(stmt, txn, [add], "WRITE", {"mode": "Append", "partitionBy": "[]"}, snap.version, False,
                        (0, 1))
    ast_stmt = _parsed(stmt.sql)
    key_values = {"id": [k]} if stmt.kind == MERGE else None
    scope = conflict_scope(ast_stmt, COLUMN_TYPES, [], None, key_values,
                           source_columns=MERGE_SOURCE_COLUMNS if stmt.kind == MERGE else None, **scope_flags(snap))
    files = record_scope(txn, scope)
    touched: dict = {}  # path -> (AddFile, positions)
    new_rows: list = []
    for f in files:
        hits = [(pos, row) for pos, row in live_rows(table_path, f) if stmt.matches(row)]
        if hits:
            touched[f.path] = (f, [pos for pos, _ in hits])
            new_rows += [c for c in (stmt.change(row) for _, row in hits) if c is not None]
    if stmt.kind == MERGE and not touched:
        new_rows = [(k, w)]
    actions = _deletion_vector_actions(table_path, touched)
    if new_rows:
        actions.append(_write_parquet(table_path, _new_file_name(), new_rows))
    if stmt.kind == MERGE:
        operation = "MERGE"
        parameters = {"predicate": json.dumps(["t.id = s.id"])}
    else:
        operation = "DELETE" if stmt.kind in (DELETE, SWEEP) else "UPDATE"
        parameters = {"predicate": json.dumps([stmt.sql.split(" WHERE ", 1)[1]])}
    result = (sum(len(pos) for _, pos in touched.values()), len(new_rows))
    return Prepared(stmt, txn, actions, operation, parameters, snap.version, txn.row_level, result)


@dataclass
class Outcome:
    committed: list = field(default_factory=list)  # statement indices in log order
    versions: dict = field(default_factory=dict)  # statement index -> version
    refused: dict = field(default_factory=dict)  # statement index -> "ExceptionClass: message"
    refusals: dict = field(default_factory=dict)  # statement index -> (ExceptionClass, winning statement or None)
    noop: list = field(default_factory=list)  # statements with nothing to commit
    read_versions: dict = field(default_factory=dict)
    row_level: dict = field(default_factory=dict)  # statement index -> checked per row?
    results: dict = field(default_factory=dict)  # statement index -> (rows deleted or updated, rows added)
    final: list = field(default_factory=list)  # live rows read with pyarrow
    delta_rs: Optional[list] = None  # live rows read with delta-rs

    def describe(self, history: History) -> str:
        label = lambda i: history.stmts[i].label()  # noqa: E731
        lines = ["  outcome: log order " + (", ".join(f"{label(i)}@v{self.versions[i]}" for i in self.committed) or "-")]
        for i in sorted(self.read_versions):
            deleted, added = self.results[i]
            lines.append(f"    {label(i)} read v{self.read_versions[i]}, "
                         f"{'row level' if self.row_level.get(i) else 'file level'}: "
                         f"{deleted} row(s) deleted or updated, {added} added")
        lines += outcome_lines(self.refused, self.noop, label)
        lines.append(f"    final rows: {self.final}")
        if self.delta_rs is not None and self.delta_rs != self.final:
            lines.append(f"    delta-rs reads: {self.delta_rs}")
        return "\n".join(lines)


def run_history(history: History, level: str, mode: str, table_path: str, *, delta_rs: bool = True) -> Outcome:
    create_table(table_path, history, level, mode)
    out = Outcome()
    prepared: dict = {}
    for ev, i in history.schedule:
        if ev == "start":
            p = prepared[i] = start(table_path, history.stmts[i])
            out.read_versions[i] = p.read_version
            out.row_level[i] = p.row_level
            out.results[i] = p.result
            continue
        p = prepared.pop(i)
        if not p.actions:
            out.noop.append(i)
            continue
        if history.budget is not None:
            p.txn.row_level_budget_rows = history.budget
        try:
            version = p.txn.commit(p.actions, operation=p.operation, operation_parameters=p.parameters)
        except CONFLICT_EXCEPTIONS as e:
            out.refused[i] = f"{type(e).__name__}: {e}"
            by_version = {v: j for j, v in out.versions.items()}
            out.refusals[i] = (type(e).__name__, by_version.get(getattr(e, "winning_version", None)))
            continue
        out.committed.append(i)
        out.versions[i] = version
    out.final = table_rows(table_path)
    if delta_rs:
        out.delta_rs = delta_rs_rows(table_path)
    return out


# --------------------------------------------------------------------------- judging


def judge(history: History, level: str, out: Outcome) -> Verdict:
    """A ``Verdict`` (``model_tally``) on the statements; ``refused`` counts statements."""
    v = Verdict()
    initial = history.initial_rows
    versions = history.versions
    stmts = history.stmts
    v.compare_readers(out)
    model = simulate(history, accepted=set(out.committed))
    if model.log != out.committed or model.final != out.final:
        v.violations.append(f"the log does not hold the committed statements' effects: the model with the same "
                            f"decisions has log {_labels(stmts[i] for i in model.log)} and rows {model.final}")
    if sorted(model.noop) != sorted(out.noop) or model.results != out.results:
        v.violations.append(f"the model's statements read other rows than the real ones: model results "
                            f"{model.results}, nothing to do: {_labels(stmts[i] for i in model.noop)}")
    committed = [stmts[i] for i in out.committed]
    if serial_order(out.final, out.results, initial, committed, level, versions) is None:
        rows, results = run_serial(initial, committed, versions)
        v.violations.append(
            f"the checker let through a history that is not {level}: no allowed serial order of "
            f"{_labels(committed)} ends with rows {out.final} and results "
            f"{ {s.label(): out.results[s.idx] for s in committed} } (log order gives rows {rows}, results "
            f"{ {stmts[i].label(): r for i, r in results.items()} })")

    def order_of(run: ModelRun, results: bool) -> Optional[list]:
        ran = [stmts[i] for i in run.log]
        return serial_order(run.final, run.results if results else None, initial, ran, level, versions)

    v.weigh_refusals(out.refused, functools.partial(simulate, history), set(out.committed), order_of)
    return v


@dataclass
class Tally(model_tally.Tally):
    """``model_tally.Tally`` of statements: ``false_refusals`` counts refused statements."""
    refused_statements: int = 0
    noop_statements: int = 0
    committed_statements: int = 0
    # OPTIMIZE (generate_history(optimize=...)): with deletion vectors carried through the
    # compaction neither side should lose to the other
    optimize_histories: int = 0  # histories holding an OPTIMIZE
    optimize_committed: int = 0
    optimize_refused: int = 0  # OPTIMIZE refused, whatever won
    optimize_refused_by_dml: int = 0  # ... by an UPDATE / DELETE / MERGE
    dml_refused_by_optimize: int = 0  # a DML statement refused, an OPTIMIZE the winner
    dml_over_optimize: int = 0  # DML that changed rows committed over a concurrent OPTIMIZE (carried onto its output)
    optimize_over_dml: int = 0  # OPTIMIZE committed over a concurrent DML that changed rows (carried onto the output)
    optimize_examples: list = field(default_factory=list)  # (seed, text): the refusals above

    @property
    def statement_ratio(self) -> float:
        return share(self.false_refusals, self.refused_statements)

    def summary(self) -> str:
        return (f"{self.level:17s} {self.mode:4s}: {self.histories} histories, {self.accepted} accepted, "
                f"{self.refused} refused, {self.false_conflicts} false conflicts = {self.ratio:.1%} of refused "
                f"(rows only: {self.false_conflicts_rows_only} = {self.ratio_rows_only:.1%}); statements: "
                f"{self.committed_statements} committed, {self.refused_statements} refused, "
                f"{self.false_refusals} needlessly = {self.statement_ratio:.1%} (rows only: "
                f"{self.false_refusals_rows_only}), {self.noop_statements} with nothing to do; "
                f"{self.seconds:.1f} s{self.refusals_line()}"
                + (f"\n    OPTIMIZE in {self.optimize_histories} histories: {self.optimize_committed} committed, "
                   f"{self.optimize_refused} refused ({self.optimize_refused_by_dml} by a DML winner); "
                   f"{self.dml_refused_by_optimize} DML statements refused by an OPTIMIZE winner; concurrent and "
                   f"both committed: DML over OPTIMIZE {self.dml_over_optimize}, OPTIMIZE over DML "
                   f"{self.optimize_over_dml}" if self.optimize_histories else ""))


ROW_CHANGING = (UPDATE, DELETE, MERGE, UPDATE2, MOVE, SWEEP)  # DML kinds that delete or update rows


def _count_optimize(tally: Tally, seed: int, history: History, out: Outcome, text: str) -> None:
    """The carrying compactions (OPTIMIZE, REORG PURGE) against the DML statements of one
    history: refusals either way, and the concurrent pairs that both committed (a deletion
    vector carried across the compaction)."""
    opt = [s.idx for s in history.stmts if s.kind in CARRYING]
    if not opt:
        return
    tally.optimize_histories += 1
    bad = []
    for i, (cls, winner) in out.refusals.items():
        mine = history.stmts[i]
        theirs = history.stmts[winner] if winner is not None else None
        if mine.kind in CARRYING:
            tally.optimize_refused += 1
            if theirs is not None and theirs.kind in ROW_CHANGING:
                tally.optimize_refused_by_dml += 1
                bad.append(f"{mine.kind} {mine.label()} refused by the {theirs.kind} winner {theirs.label()}: {cls}")
        elif theirs is not None and theirs.kind in CARRYING:
            tally.dml_refused_by_optimize += 1
            bad.append(f"{mine.label()} ({mine.kind}) refused by the {theirs.kind} winner {theirs.label()}: {cls}")
    if bad and len(tally.optimize_examples) < 5:
        tally.optimize_examples.append((seed, text + "\n  " + "\n  ".join(bad)))
    for o in opt:
        if o not in out.versions:
            continue
        tally.optimize_committed += 1
        ov, orv = out.versions[o], out.read_versions[o]
        for i, v in out.versions.items():
            if history.stmts[i].kind not in ROW_CHANGING or not out.results[i][0]:
                continue  # only statements that deleted or updated rows carry a deletion vector
            if v > ov and out.read_versions[i] < ov:
                tally.dml_over_optimize += 1
            elif orv < v < ov:
                tally.optimize_over_dml += 1


def seeds(count: int, base: int = 19) -> list:
    return [base * 1_000_000 + i for i in range(count)]


def check_histories(level: str, mode: str, history_seeds: Iterable[int], workdir: str, *,
                    delta_rs: bool = True, keep_examples: int = 5, **generator) -> Tally:
    """Run and judge every history; never raises for a bad history (it lands in ``violations``
    with its seed and description), so one run reports all of them."""
    with Tally(level, mode).timed() as tally:
        for seed in history_seeds:
            history = generate_history(seed, **generator)
            path = os.path.join(tempfile.mkdtemp(prefix=f"{level}-{mode}-{seed}-", dir=workdir), "t")
            tally.histories += 1
            try:
                out = run_history(history, level, mode, path, delta_rs=delta_rs)
            except Exception as e:  # anything but a named conflict: report it with the history
                tally.violations.append((seed, f"{history.describe()}\n  raised {type(e).__name__}: {e}"))
                continue
            verdict = judge(history, level, out)
            tally.committed_statements += len(out.committed)
            tally.noop_statements += len(out.noop)
            tally.refused_statements += verdict.refused
            text = f"{history.describe()}\n{out.describe(history)}"
            _count_optimize(tally, seed, history, out, text)
            tally.add(seed, text, verdict, out.refused, f"table: {path}", os.path.dirname(path), keep_examples)
    return tally


def replay(seed: int, level: str, mode: str, workdir: str, **generator) -> str:
    """One history, run and judged, as text (for a failure's seed)."""
    where = os.path.join(tempfile.mkdtemp(prefix=f"replay-{seed}-", dir=workdir), "t")
    return model_tally.replay(generate_history, run_history, judge, seed, level, mode, where, **generator)
