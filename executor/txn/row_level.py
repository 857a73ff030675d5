"""Row-level conflict detection (DESIGN.md section 4, "Row-level concurrency").

A transaction on a deletion-vector table whose read predicate can be evaluated on rows is
checked against each winning commit W row by row instead of file by file:

* the rows each side deleted or updated are the positions its deletion vectors added (a
  file removed outright: all its live rows); the rows each side added are the rows of its
  new files;
* both deleted or updated one row            -> ConcurrentDeleteDeleteException;
* W deleted/updated a row this transaction read (a row of its snapshot that satisfies its
  read predicate), or added a row that satisfies it: a read-write dependency from this
  transaction to W. Serializable refuses it (ConcurrentDeleteReadException /
  ConcurrentAppendException). WriteSerializable allows it when this transaction can be
  serialised before W: none of its written rows (deleted or updated, old and new values,
  and inserted) satisfies W's recorded read predicate. Once placed before one winner it must
  precede every later winner too, so the same test applies to all of them. W's read
  predicate is what W's commitInfo recorded (``readPredicates``); a blind append read
  nothing; a commit without a recorded predicate (delta-rs, Delta Spark) read everything;
* otherwise the transaction is rebased: where both changed one file's deletion vector the
  committed vector is W's plus the rows this transaction deleted itself (never the union of
  the two vectors: W may have brought rows back).

Everything runs on the driver with pyarrow, reading only W's new files and the rows at the
positions that matter, after pruning W's files by their statistics. A work budget bounds
the rows read; past it the file-level rules decide for that winner and the message says so.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from pyroaring import BitMap64

from isolde.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
)
from ..log import table_files
from ..log.actions import Action, AddFile, DeletionVectorDescriptor, RemoveFile
from ..log.deletion_vectors import read_deletion_vector, write_deletion_vectors

from .row_tracking import materialized_columns

from .conflicts import SERIALIZABLE, ConflictChecker, TransactionSummary, WinningCommitSummary, partition_hint
from .predicates import Predicate

#: rows the check may read per winning commit before the file-level rules decide instead
DEFAULT_BUDGET_ROWS = 2_000_000


class ColumnCache:
    """Decoded columns of data files, shared by the transactions of a process: a long-lived
    session checks the same large files against winner after winner. Delta never rewrites a
    data file in place; the key holds its size and mtime all the same. Least recently used
    columns go first past ``max_bytes``."""

    def __init__(self, max_bytes: int = 256 << 20):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._columns: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _identity(local: str) -> tuple:
        if table_files.is_remote(local):  # a data file's key is never rewritten: its name is its identity
            return (local,)
        st = os.stat(local)
        return local, st.st_size, st.st_mtime_ns

    def read(self, local: str, physical: list[str]):
        """A pyarrow Table of ``physical`` columns of the Parquet file at ``local``."""
        import pyarrow as pa

        ident = self._identity(local)
        with self._lock:
            found = {c: self._columns.get((ident, c)) for c in physical}
            for c, col in found.items():
                if col is not None:
                    self._columns.move_to_end((ident, c))
        missing = [c for c, col in found.items() if col is None]
        if missing:
            table = table_files.read_parquet(local, columns=missing)
            with self._lock:
                for c in missing:
                    col = found[c] = table.column(c)
                    if (ident, c) not in self._columns and col.nbytes <= self.max_bytes:
                        self._columns[(ident, c)] = col
                        self.bytes += col.nbytes
                while self.bytes > self.max_bytes and self._columns:
                    _, old = self._columns.popitem(last=False)
                    self.bytes -= old.nbytes
        return pa.table([found[c] for c in physical], names=physical)


COLUMN_CACHE = ColumnCache()


class OverBudget(Exception):
    """The row-level check would read more rows than its budget allows."""


# --------------------------------------------------------------------------- what a commit did to rows


@dataclass
class ChangedFile:
    """Rows deleted or updated in one data file: ``positions`` index the rows of ``base``
    (the file as it was before the change, with its deletion vector)."""

    base: AddFile | RemoveFile
    positions: BitMap64


@dataclass
class RowEffects:
    """What a commit's actions did to rows."""

    changed: dict[str, ChangedFile] = field(default_factory=dict)  # data file path -> deleted rows
    # rows that are new: a new data file (positions None: its live rows), or rows a smaller
    # deletion vector brings back (RESTORE to an older version)
    added: list[tuple[AddFile, Optional[BitMap64]]] = field(default_factory=list)
    rewritten: set[str] = field(default_factory=set)  # removed with dataChange=false (a compaction)
    dv_adds: dict[str, AddFile] = field(default_factory=dict)  # path -> the re-added file (new DV)

    @classmethod
    def of(cls, actions: Iterable[Action], files: "TableFiles") -> "RowEffects":
        removes: dict[str, RemoveFile] = {}
        adds: dict[str, AddFile] = {}
        for a in actions:
            if isinstance(a, RemoveFile):
                removes[a.path] = a
            elif isinstance(a, AddFile):
                adds[a.path] = a
        out = cls()
        for path, rm in removes.items():
            add = adds.get(path)
            if add is not None:  # a deletion-vector change: the new vector's extra rows
                out.dv_adds[path] = add
                before = files.deleted_rows(rm.deletion_vector)
                after = files.deleted_rows(add.deletion_vector)
                if after - before:
                    out.changed[path] = ChangedFile(rm, after - before)
                if before - after:
                    out.added.append((add, before - after))
            elif rm.data_change:  # removed outright: every live row deleted
                out.changed[path] = ChangedFile(rm, files.live_rows(rm))
            else:
                out.rewritten.add(path)
        out.added += [(a, None) for p, a in adds.items() if p not in removes and a.data_change]
        return out


class TableFiles:
    """Reads rows of a table's data files and deletion vectors with pyarrow, counting them
    against a budget. Column names are logical (lower-cased); column mapping is undone."""

    def __init__(self, table_path: str, metadata, budget_rows: int = DEFAULT_BUDGET_ROWS):
        self.table_path = table_path
        self.budget_rows = budget_rows
        self.rows_read = 0
        fields = (metadata.schema or {}).get("fields", []) if metadata is not None else []
        mapped = (metadata.configuration or {}).get("delta.columnMapping.mode", "none").lower() != "none" \
            if metadata is not None else False
        self.physical = {
            f["name"].lower(): (str(f.get("metadata", {}).get("delta.columnMapping.physicalName", f["name"]))
                                if mapped else f["name"])
            for f in fields
        }
        # the materialised stable row-id column (row tracking enabled), for row_id_layout.py
        self.row_id_column = (materialized_columns(metadata) or (None, None))[0]
        self._cache: dict = {}

    def spend(self, rows: int) -> None:
        self.rows_read += rows
        if self.rows_read > self.budget_rows:
            raise OverBudget(self.rows_read)

    def local(self, log_path: str) -> str:
        from ..catalog.properties import local_path

        return local_path(self.table_path, log_path)

    def deleted_rows(self, dv: Optional[DeletionVectorDescriptor]) -> BitMap64:
        if dv is None:
            return BitMap64()
        key = ("dv", dv.unique_id)
        got = self._cache.get(key)
        if got is None:
            got = self._cache[key] = read_deletion_vector(self.table_path, dv)
        return got

    def num_records(self, f: AddFile | RemoveFile) -> int:
        stats = f.parsed_stats if isinstance(f, AddFile) else None
        if stats is None and getattr(f, "stats", None):
            import json

            try:
                stats = json.loads(f.stats)
            except ValueError:
                stats = None
        if stats and isinstance(stats.get("numRecords"), int):
            return stats["numRecords"]
        return table_files.parquet_file(self.local(f.path)).metadata.num_rows

    def live_rows(self, f: AddFile | RemoveFile) -> BitMap64:
        rows = BitMap64(range(self.num_records(f)))
        return rows - self.deleted_rows(f.deletion_vector)

    def rows(self, f: AddFile | RemoveFile, columns: Iterable[str], positions: Optional[BitMap64] = None,
             live_only: bool = True) -> list[dict]:
        """Rows of data file ``f`` (at ``positions``, else its live rows) as dicts of the
        ``columns`` (lower-cased logical names present in the file)."""
        names = sorted(c for c in columns if c in self.physical)
        if positions is None:
            positions = self.live_rows(f) if live_only else BitMap64(range(self.num_records(f)))
        if not positions:
            return []
        self.spend(len(positions))
        if not names:
            return [{} for _ in range(len(positions))]
        key = ("rows", f.path, tuple(names))
        table = self._cache.get(key)
        if table is None:
            physical = [self.physical[n] for n in names]
            table = COLUMN_CACHE.read(self.local(f.path), physical).rename_columns(names)
            self._cache[key] = table
        import pyarrow as pa

        taken = table.take(pa.array(list(positions), pa.int64()))
        return taken.to_pylist()


# --------------------------------------------------------------------------- matching rows to predicates


def _describe_row(row: Mapping[str, Any], limit: int = 4) -> str:
    items = list(row.items())[:limit]
    return "{" + ", ".join(f"{k}={v!r}" for k, v in items) + ("" if len(row) <= limit else ", ...") + "}"


@dataclass
class ReadScope:
    """A transaction's read: its predicates (OR'ed), or everything, or nothing (blind)."""

    predicates: list[Predicate]
    whole_table: bool
    blind: bool = False

    @property
    def reads_nothing(self) -> bool:
        return self.blind or (not self.whole_table and not self.predicates)

    @property
    def columns(self) -> set[str]:
        out: set[str] = set()
        for p in self.predicates:
            out |= p.row_columns
        return out

    def describe(self) -> str:
        if self.whole_table:
            return "the whole table"
        return " OR ".join(f"({p.sql})" for p in self.predicates if p.sql) or "nothing"

    def file_may_match(self, f: AddFile) -> bool:
        """Could the read have seen a row of ``f`` (its partition values and statistics)?"""
        if self.reads_nothing:
            return False
        return self.whole_table or any(p.file_may_match(f) for p in self.predicates)

    def file_may_hold(self, f: AddFile | RemoveFile) -> bool:
        """``file_may_match`` for an added file; a removed one by its partition values only (a
        remove's statistics are not to be relied on)."""
        if isinstance(f, AddFile):
            return self.file_may_match(f)
        if self.reads_nothing:
            return False
        return self.whole_table or any(p.partition_may_match(f.partition_values or {}) for p in self.predicates)

    def first_match(self, files: TableFiles, f, positions: Optional[BitMap64] = None) -> Optional[dict]:
        """The first row of ``f`` (at ``positions``, else its live rows) the read may have seen."""
        if self.reads_nothing:
            return None
        if isinstance(f, AddFile) and not self.file_may_match(f):
            return None
        rows = files.rows(f, self.columns, positions)
        if self.whole_table:
            return rows[0] if rows else None
        pv = getattr(f, "partition_values", None) or {}
        hits = [False] * len(rows)
        for p in self.predicates:
            for i, ok in enumerate(p.rows_may_match(rows, pv)):
                hits[i] = hits[i] or ok
        for row, hit in zip(rows, hits):
            if hit:
                return {**{k: v for k, v in pv.items()}, **row}
        return None


def winner_read_scope(winner: WinningCommitSummary, schema, partition_columns) -> ReadScope:
    """What W read, from its commitInfo; without a recorded predicate, everything."""
    info = winner.commit_info
    if winner.is_blind_append:
        return ReadScope([], False, blind=True)
    if info is None:
        return ReadScope([], True)
    extra = info.extra or {}
    if extra.get("readWholeTable"):
        return ReadScope([], True)
    texts = extra.get("readPredicates")
    if not texts:
        return ReadScope([], True)
    predicates = [Predicate(t, schema, partition_columns) for t in texts]
    if any(not p.analysable for p in predicates):
        return ReadScope([], True)
    return ReadScope(predicates, False)


# --------------------------------------------------------------------------- the checker


@dataclass
class RowLevelState:
    """What a row-level transaction carries across the winning commits it is checked against."""

    summary: TransactionSummary
    files: TableFiles
    schema: Mapping
    partition_columns: tuple
    effects: RowEffects
    placed_before: Optional[str] = None  # why this transaction is serialised before earlier winners

    @property
    def read(self) -> ReadScope:
        s = self.summary
        return ReadScope(list(s.read_predicates), s.read_whole_table)


class RowLevelChecker:
    """One transaction against one winning commit, row by row; ``check()`` raises or returns."""

    def __init__(self, state: RowLevelState, winner: WinningCommitSummary):
        self.state = state
        self.winner = winner
        self.files = state.files
        self.file_level = ConflictChecker(state.summary, winner)
        self.theirs: Optional[RowEffects] = None

    def check(self) -> None:
        fl = self.file_level
        fl.check_protocol_compatibility()
        fl.check_no_metadata_updates()
        fl.check_for_updated_application_transaction_ids()
        fl.check_for_updated_domain_metadata()
        self.theirs = RowEffects.of(self.winner.actions, self.files)
        self.check_for_rows_changed_by_both()
        self.check_for_files_this_txn_changes_rewritten_by_winner()
        dependency = self.check_for_winner_changes_to_rows_this_txn_read()
        self.check_this_txn_can_precede_the_winner(dependency)

    def _raise(self, cls, partition=None, detail=None):
        self.file_level._raise(cls, partition=partition, detail=detail)

    # -- write / write
    def check_for_rows_changed_by_both(self) -> None:
        """The same row deleted or updated by both: ConcurrentDeleteDeleteException."""
        for path, mine in self.state.effects.changed.items():
            theirs = self.theirs.changed.get(path)
            if theirs is None:
                continue
            both = mine.positions & theirs.positions
            if both:
                row = next(iter(both))
                self._raise(ConcurrentDeleteDeleteException, partition=partition_hint(mine.base.partition_values),
                            detail=f"Both deleted or updated row {row} of {path}"
                                   f"{f' and {len(both) - 1} more' if len(both) > 1 else ''}.")

    def check_for_files_this_txn_changes_rewritten_by_winner(self) -> None:
        """A compaction (dataChange=false) rewrote a file whose rows this transaction changes:
        the positions no longer point anywhere (the carry-over through the rewrite comes with
        OPTIMIZE support)."""
        for path in self.state.effects.changed:
            if path in self.theirs.rewritten:
                self._raise(ConcurrentDeleteDeleteException,
                            detail=f"The winner rewrote {path}, whose rows this transaction changes.")

    # -- read / write dependencies from this transaction to W
    def check_for_winner_changes_to_rows_this_txn_read(self) -> Optional[tuple]:
        """W deleted/updated a row this transaction read, or added one it should have read.
        Serializable refuses; WriteSerializable returns the dependency (exception class and
        detail) for the ordering test, or None."""
        read = self.state.read
        if read.reads_nothing:
            return None
        serializable = self.state.summary.isolation_level == SERIALIZABLE
        for path, theirs in self.theirs.changed.items():
            base = theirs.base
            mine = self.state.effects.changed.get(path)
            positions = theirs.positions - mine.positions if mine is not None else theirs.positions
            if not positions or (isinstance(base, RemoveFile) and not read.whole_table
                                 and not any(p.partition_may_match(base.partition_values or {})
                                             for p in read.predicates)):
                continue
            row = read.first_match(self.files, base, positions)
            if row is not None:
                detail = (f"The winner deleted or updated a row this transaction read: {_describe_row(row)} "
                          f"of {path}, which satisfies {read.describe()}.")
                if serializable:
                    self._raise(ConcurrentDeleteReadException, partition=partition_hint(base.partition_values),
                                detail=detail)
                return (ConcurrentDeleteReadException, detail, base.partition_values)
        if not serializable and self.winner.is_blind_append:
            blind = True
        else:
            blind = False
        for add, positions in self.theirs.added:
            row = read.first_match(self.files, add, positions)
            if row is not None:
                detail = (f"The winner added a row this transaction should have read: {_describe_row(row)} "
                          f"in {add.path}, which satisfies {read.describe()}.")
                if serializable:
                    self._raise(ConcurrentAppendException, partition=partition_hint(add.partition_values),
                                detail=detail)
                if not blind:
                    return (ConcurrentAppendException, detail, add.partition_values)
        return None

    # -- WriteSerializable: can this transaction be ordered before W?
    def check_this_txn_can_precede_the_winner(self, dependency: Optional[tuple]) -> None:
        state = self.state
        if dependency is None and state.placed_before is None:
            return  # no dependency: this transaction simply follows W
        if not self.winner.changes_data:
            return  # a compaction (or a commit of no rows) changed nothing that could depend on this one
        why = dependency[1] if dependency is not None else state.placed_before
        cls = dependency[0] if dependency is not None else None
        their_read = winner_read_scope(self.winner, state.schema, state.partition_columns)
        hit = self._written_row_matching(their_read)
        if hit is not None:
            kind, row, path, pv = hit
            if cls is None:
                cls = ConcurrentAppendException if kind == "added" else ConcurrentDeleteReadException
            self._raise(cls, partition=partition_hint(pv),
                        detail=f"{why} This transaction cannot be ordered before the winner either: the row "
                               f"{_describe_row(row)} it {kind} (in {path}) satisfies what the winner read, "
                               f"{their_read.describe()}.")
        if dependency is not None and state.placed_before is None:
            state.placed_before = (f"(Earlier, this transaction was ordered before version {self.winner.version}: "
                                   f"{dependency[1]})")

    def _written_row_matching(self, scope: ReadScope):
        """A row this transaction deleted, updated (old or new value) or inserted that ``scope``
        may have read: (kind, row, path, partition values), or None."""
        if scope.reads_nothing:
            return None
        for path, mine in self.state.effects.changed.items():
            row = scope.first_match(self.files, mine.base, mine.positions)
            if row is not None:
                return ("deleted or updated", row, path, mine.base.partition_values)
        for add, positions in self.state.effects.added:
            row = scope.first_match(self.files, add, positions)
            if row is not None:
                return ("added", row, add.path, add.partition_values)
        return None


# --------------------------------------------------------------------------- rebase


def rebase_deletion_vectors(actions: list[Action], winner: WinningCommitSummary, files: TableFiles) -> tuple[list, list]:
    """This transaction's actions rebased over W: where both changed one file's deletion vector,
    this transaction now removes W's version and adds W's vector plus the rows this transaction
    itself deleted (its new vector minus the vector it removed) -- never the union of the two
    vectors: W may have shrunk its vector (a RESTORE, a CLONE, any rewrite that brought rows
    back), and rows deleted before this transaction read the file are W's to decide. Returns the
    new actions and the paths of new deletion-vector files written for them."""
    theirs = {a.path: a for a in winner.added_files if a.deletion_vector is not None or a.path in
              {r.path for r in winner.removed_files}}
    if not theirs:
        return actions, []
    mine_adds = {a.path: a for a in actions if isinstance(a, AddFile)}
    mine_removes = {a.path: a for a in actions if isinstance(a, RemoveFile)}
    to_union = {}
    for path, my_add in mine_adds.items():
        if path in mine_removes and path in theirs:
            own = files.deleted_rows(my_add.deletion_vector) - files.deleted_rows(mine_removes[path].deletion_vector)
            to_union[path] = files.deleted_rows(theirs[path].deletion_vector) | own
    if not to_union:
        return actions, []
    descriptors = write_deletion_vectors(files.table_path, to_union)
    new_actions = []
    for a in actions:
        if isinstance(a, RemoveFile) and a.path in to_union:
            new_actions.append(theirs[a.path].remove(deletion_timestamp=a.deletion_timestamp, data_change=True))
        elif isinstance(a, AddFile) and a.path in to_union:
            base = theirs[a.path]
            new_actions.append(AddFile(
                path=base.path, partition_values=dict(base.partition_values), size=base.size,
                modification_time=base.modification_time, data_change=True, stats=base.stats,
                deletion_vector=descriptors[a.path], tags=base.tags, base_row_id=base.base_row_id,
                default_row_commit_version=base.default_row_commit_version,
                clustering_provider=base.clustering_provider))
        else:
            new_actions.append(a)
    from ..log.deletion_vectors import dv_file_path

    written = sorted({dv_file_path(files.table_path, d) for d in descriptors.values()})
    return new_actions, written


def fallback_to_file_level(state: RowLevelState, winner: WinningCommitSummary, budget: int) -> None:
    """Past the budget: the file-level rules decide, and a conflict says why it was per file.

    A fallback may only be more conservative than the row-level check, never less: once this
    transaction was ordered before an earlier winner (``state.placed_before``) it must precede W
    too, and per file that means no file it changed or added may hold a row W's read could have
    seen (partition values and statistics; a W without a recorded read saw everything)."""
    note = (f"(Decided per file: checking rows would have read more than the row-level budget of "
            f"{budget:,} rows; raise it with SET isolde.rowLevelConcurrency.budgetRows.)")
    checker = ConflictChecker(state.summary, winner)
    try:
        checker.check()
    except ConcurrentModificationException as e:
        raise type(e)(table=e.table, winning_version=e.winning_version, winning_operation=e.winning_operation,
                      partition=e.partition, detail=" ".join(x for x in (e.detail, note) if x),
                      facts=getattr(e, "facts", None)) from None
    if state.placed_before is None or not winner.changes_data:
        return
    their_read = winner_read_scope(winner, state.schema, state.partition_columns)
    written = [("deleted or updated", mine.base) for mine in state.effects.changed.values()] + \
              [("added", add) for add, _ in state.effects.added]
    for kind, f in written:
        if their_read.file_may_hold(f):
            cls = ConcurrentAppendException if kind == "added" else ConcurrentDeleteReadException
            checker._raise(cls, partition=partition_hint(f.partition_values),
                           detail=f"{state.placed_before} This transaction cannot be shown to precede the winner "
                                  f"as well: rows it {kind} in {f.path} may satisfy what the winner read, "
                                  f"{their_read.describe()}. {note}")
