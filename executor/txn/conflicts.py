"""The file-level conflict checker (DESIGN.md section 4, rules 1-6).

Modelled on Delta's ConflictChecker and delta-rs's conflict_checker.rs: a
transaction that lost the race for a version is compared with every winning commit
in order, by an ordered list of ``check_*`` steps; each step raises one named
exception or lets the transaction rebase over the winner.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

from isolde.errors import (
    ConcurrentAppendException,
    ConflictFacts,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    MetadataChangedException,
    ProtocolChangedException,
)
from ..log.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)

from .feature_enablement import metadata_change_conflicts, protocol_change_conflicts
from .predicates import Predicate

SERIALIZABLE = "Serializable"
WRITE_SERIALIZABLE = "WriteSerializable"
SNAPSHOT_ISOLATION = "SnapshotIsolation"

_APPEND_OPERATIONS = {"WRITE", "STREAMING UPDATE", "INSERT", "APPEND"}


def _revives_rows(table_path: str | None, removed: RemoveFile, added: AddFile) -> bool:
    """Does re-adding ``added`` (same path as ``removed``) make deleted rows live again?"""
    if removed.deletion_vector is None:
        return False
    if added.deletion_vector is None:
        return True
    if table_path is None:
        return True  # cannot tell: assume it does
    from ..log.deletion_vectors import read_deletion_vector

    before = read_deletion_vector(table_path, removed.deletion_vector)
    after = read_deletion_vector(table_path, added.deletion_vector)
    return not before <= after


def partition_hint(partition_values: dict | None) -> str | None:
    """'a=1/b=x' for a partitioned file, None for an unpartitioned one."""
    if not partition_values:
        return None
    return "/".join(f"{k}={'__HIVE_DEFAULT_PARTITION__' if v is None else v}" for k, v in partition_values.items())


def _table_flags(table_path: str | None, version: int) -> dict | None:
    """scope_flags() of the table at ``version``, read from its log (on a conflict only); None
    when it cannot be read."""
    if not table_path or version < 0:
        return None
    try:
        from ..log import DeltaLog

        from .statement_scope import scope_flags

        return scope_flags(DeltaLog.for_table(table_path).snapshot(version))
    except Exception:
        return None


@dataclass
class WinningCommitSummary:
    """What a concurrent, already committed version did."""

    version: int
    actions: list[Action]
    commit_info: CommitInfo | None = None
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    app_ids: set[str] = field(default_factory=set)
    domains: set[str] = field(default_factory=set)
    added_files: list[AddFile] = field(default_factory=list)
    removed_files: list[RemoveFile] = field(default_factory=list)

    @classmethod
    def from_actions(cls, version: int, actions: Iterable[Action]) -> "WinningCommitSummary":
        summary = cls(version, list(actions))
        for a in summary.actions:
            if isinstance(a, AddFile):
                summary.added_files.append(a)
            elif isinstance(a, RemoveFile):
                summary.removed_files.append(a)
            elif isinstance(a, SetTransaction):
                summary.app_ids.add(a.app_id)
            elif isinstance(a, DomainMetadata):
                summary.domains.add(a.domain)
            elif isinstance(a, Metadata):
                summary.metadata = a
            elif isinstance(a, Protocol):
                summary.protocol = a
            elif isinstance(a, CommitInfo):
                summary.commit_info = a
        return summary

    @property
    def operation(self) -> str | None:
        return None if self.commit_info is None else self.commit_info.operation

    def data_change_added_files(self, table_path: str | None = None) -> list[AddFile]:
        """Files with new rows. A file removed and re-added in the same commit with a larger
        deletion vector only lost rows: a deletion, never an append; one whose vector lost rows
        (RESTORE to an older version) brings rows back: an append."""
        removed = {r.path: r for r in self.removed_files}
        return [a for a in self.added_files
                if a.data_change and (a.path not in removed or _revives_rows(table_path, removed[a.path], a))]

    @property
    def data_change_removed_files(self) -> list[RemoveFile]:
        return [r for r in self.removed_files if r.data_change]

    @property
    def changes_data(self) -> bool:
        """Did the winner change any row? A commit whose file actions all say dataChange=false (a
        compaction, REORG PURGE) or that has none (VACUUM's markers, a bare txn) changed none:
        whatever it read, no serial order depends on what it saw."""
        return any(a.data_change for a in (*self.added_files, *self.removed_files)) or \
            self.metadata is not None or self.protocol is not None

    @property
    def is_blind_append(self) -> bool:
        """commitInfo.isBlindAppend; for engines that omit it, only a plain append-mode WRITE counts."""
        info = self.commit_info
        if info is not None and info.is_blind_append is not None:
            return bool(info.is_blind_append)
        if info is None or self.removed_files or self.metadata is not None or self.protocol is not None:
            return False
        mode = str((info.operation_parameters or {}).get("mode", "")).strip('"').lower()
        return (info.operation or "").upper() in _APPEND_OPERATIONS and mode == "append"


def _partition_key(values) -> tuple:
    return tuple(sorted((values or {}).items()))


@dataclass
class TransactionSummary:
    """What the committing transaction read and wants to write (Delta's CurrentTransactionInfo)."""

    table: str
    read_version: int
    isolation_level: str
    partition_columns: tuple[str, ...]
    read_predicates: list[Predicate]
    read_file_paths: set[str]
    read_whole_table: bool
    read_app_ids: set[str]
    actions: list[Action]
    # scope_flags() of the read snapshot (deletion vectors, clustered, row-level mode), for the
    # advice of a conflict; None: read from the log when a conflict needs it
    table_flags: dict | None = None
    # the table's protocol and metadata as of the last winner checked (the read snapshot's,
    # then each tolerated feature enablement's): what the next winner's changes are measured by
    protocol: Protocol | None = None
    metadata: Metadata | None = None

    @property
    def removed_paths(self) -> set[str]:
        return {a.path for a in self.actions if isinstance(a, RemoveFile)}

    def without_files(self, paths: set[str]) -> "TransactionSummary":
        """This summary as if it had neither read nor removed ``paths`` (carried elsewhere)."""
        return replace(self, read_file_paths=self.read_file_paths - paths,
                       actions=[a for a in self.actions if not (isinstance(a, RemoveFile) and a.path in paths)])

    def follow_rewrites(self, winner: "WinningCommitSummary") -> None:
        """A compaction (dataChange=false) that rewrote files this transaction read moved those
        rows into its new files: they are read too, so a later winner that deletes such a row
        from the new file still conflicts (rule 5). Without knowing which output holds which
        input, every output in the rewritten files' partitions counts."""
        moved = [r for r in winner.removed_files if not r.data_change and r.path in self.read_file_paths]
        if not moved:
            return
        partitions = {_partition_key(r.partition_values) for r in moved}
        self.read_file_paths |= {a.path for a in winner.added_files
                                 if not a.data_change and _partition_key(a.partition_values) in partitions}

    def follow_enablement(self, winner: "WinningCommitSummary") -> None:
        """The winner's protocol and metadata (feature enablements this transaction commits over)
        are the table's from now on (Delta folds them into its CurrentTransactionInfo)."""
        self.protocol = winner.protocol or self.protocol
        self.metadata = winner.metadata or self.metadata

    @property
    def changes_metadata(self) -> bool:
        return any(isinstance(a, Metadata) for a in self.actions)

    @property
    def written_app_ids(self) -> set[str]:
        return {a.app_id for a in self.actions if isinstance(a, SetTransaction)}

    @property
    def written_domains(self) -> set[str]:
        return {a.domain for a in self.actions if isinstance(a, DomainMetadata)}


# conflicts a row-level check could have let through (rows of one file changed by both sides are
# told apart per row there): their message names the isolde.rowLevelConcurrency value that would
# check this table per row, when the table's setting keeps it per file
_ROW_LEVEL_WOULD_CHECK = (ConcurrentAppendException, ConcurrentDeleteReadException, ConcurrentDeleteDeleteException)


class ConflictChecker:
    """Checks one transaction against one winning commit; ``check()`` raises or returns."""

    def __init__(self, txn: TransactionSummary, winner: WinningCommitSummary):
        self.txn = txn
        self.winner = winner

    def check(self) -> None:
        self.check_protocol_compatibility()
        self.check_no_metadata_updates()
        self.check_for_updated_application_transaction_ids()
        self.check_for_updated_domain_metadata()
        self.check_for_added_files_that_should_have_been_read()
        self.check_for_deleted_files_against_read_files()
        self.check_for_deleted_files_against_this_txn_deletes()

    def _raise(self, cls, partition: str | None = None, detail: str | None = None):
        raise cls(
            table=self.txn.table,
            winning_version=self.winner.version,
            winning_operation=self.winner.operation,
            partition=partition,
            detail=detail,
            facts=self.facts(cls),
        )

    def facts(self, cls=None) -> ConflictFacts:
        """What the advice of a conflict of class ``cls`` may rely on (isolde.errors.ConflictFacts)."""
        txn = self.txn
        forced = txn.isolation_level == SNAPSHOT_ISOLATION or any(
            isinstance(a, (Metadata, Protocol)) for a in txn.actions)  # not the table's level
        return ConflictFacts(
            partition_columns=tuple(txn.partition_columns or ()),
            winner_blind_append=self.winner.is_blind_append,
            isolation_level=None if forced else txn.isolation_level,
            row_level_setting=self._row_level_setting() if cls in _ROW_LEVEL_WOULD_CHECK else None,
        )

    def _row_level_setting(self) -> str | None:
        """The isolde.rowLevelConcurrency value that would check this table's conflicts per row,
        when it has deletion vectors and its mode keeps them per file; else None."""
        flags = self.txn.table_flags
        if flags is None:
            flags = _table_flags(self.txn.table, self.txn.read_version)
        if not flags or not flags.get("deletion_vectors"):
            return None
        partitioned = bool(self.txn.partition_columns) and not flags.get("clustered")
        mode = flags.get("row_level_mode", "auto")
        if mode == "off":
            return "always" if partitioned else "auto"
        if mode == "auto" and partitioned:
            return "always"
        return None

    def check_protocol_compatibility(self) -> None:
        """Rule 1: a protocol change, or the winner created the table this transaction saw empty.
        A winner that only added features a prepared commit honours passes when this transaction
        changes no protocol itself (feature_enablement.py, as Delta 4.1+)."""
        if self.txn.read_version < 0:
            self._raise(ProtocolChangedException, detail="Another writer created the table first.")
        if self.winner.protocol is None:
            return
        if any(isinstance(a, Protocol) for a in self.txn.actions):
            self._raise(ProtocolChangedException, detail="The winning commit changed the table protocol.")
        reason = protocol_change_conflicts(self.txn.protocol, self.winner.protocol)
        if reason is None:
            from ..log.features import assert_writable

            try:
                assert_writable(self.winner.protocol, self.winner.metadata or self.txn.metadata)
            except Exception as exc:  # isolde cannot write the table any more
                reason = str(exc)
        if reason is not None:
            self._raise(ProtocolChangedException, detail=reason)

    def check_no_metadata_updates(self) -> None:
        """Rule 2: schema, properties or partitioning changed under this transaction; a winner
        that only enabled a feature passes when this transaction changes no metadata itself."""
        if self.winner.metadata is None:
            return
        if self.txn.changes_metadata:
            self._raise(MetadataChangedException)
        reason = metadata_change_conflicts(self.txn.metadata, self.winner.metadata,
                                           self.winner.protocol or self.txn.protocol)
        if reason is not None:
            self._raise(MetadataChangedException, detail=reason)

    def check_for_updated_application_transaction_ids(self) -> None:
        """Rule 3: the winner advanced an application id this transaction read or writes."""
        overlap = self.winner.app_ids & (self.txn.read_app_ids | self.txn.written_app_ids)
        if overlap:
            self._raise(ConcurrentTransactionException, detail=f"Application id(s): {', '.join(sorted(overlap))}.")

    def check_for_updated_domain_metadata(self) -> None:
        """Both wrote the same metadata domain (clustering columns, ...): as Delta, a concurrent transaction."""
        # delta.rowTracking's high-water mark is re-derived per attempt (row_tracking.py), not a conflict
        overlap = (self.winner.domains & self.txn.written_domains) - {"delta.rowTracking"}
        if overlap:
            self._raise(ConcurrentTransactionException, detail=f"Metadata domain(s): {', '.join(sorted(overlap))}.")

    def check_for_added_files_that_should_have_been_read(self) -> None:
        """Rule 4: data files the winner added inside what this transaction read."""
        txn = self.txn
        if txn.isolation_level == SNAPSHOT_ISOLATION:
            return
        if not txn.read_whole_table and not txn.read_predicates:
            return  # read nothing: a blind append
        if txn.isolation_level == WRITE_SERIALIZABLE and self.winner.is_blind_append:
            return
        for add in self.winner.data_change_added_files(self.txn.table):
            if self._add_was_in_read_scope(add):
                self._raise(
                    ConcurrentAppendException,
                    partition=partition_hint(add.partition_values),
                    detail=f"Conflicting file: {add.path}.",
                )

    def _add_was_in_read_scope(self, add: AddFile) -> bool:
        txn = self.txn
        if txn.read_whole_table:
            return True
        # partition values, then the added file's statistics: a file that cannot hold a row
        # satisfying the read predicate is not in scope (as delta-rs prunes)
        return any(p.file_may_match(add) for p in txn.read_predicates)

    def check_for_deleted_files_against_read_files(self) -> None:
        """Rule 5: the winner removed (with dataChange) a file this transaction read."""
        removed = self.winner.data_change_removed_files
        if not removed:
            return
        for r in removed:
            if r.path in self.txn.read_file_paths:
                self._raise(
                    ConcurrentDeleteReadException,
                    partition=partition_hint(r.partition_values),
                    detail=f"Conflicting file: {r.path}.",
                )
        if self.txn.read_whole_table:
            r = removed[0]
            self._raise(
                ConcurrentDeleteReadException,
                partition=partition_hint(r.partition_values),
                detail=f"This transaction read the whole table; the winner removed {r.path}.",
            )

    def check_for_deleted_files_against_this_txn_deletes(self) -> None:
        """Rule 6: both removed the same file (whatever dataChange says)."""
        mine = self.txn.removed_paths
        if not mine:
            return
        for r in self.winner.removed_files:
            if r.path in mine:
                self._raise(
                    ConcurrentDeleteDeleteException,
                    partition=partition_hint(r.partition_values),
                    detail=f"Conflicting file: {r.path}.",
                )
