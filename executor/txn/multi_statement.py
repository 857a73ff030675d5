"""Multi-statement transactions: ``BEGIN ... COMMIT``, ``BEGIN ATOMIC ... END``, ``s.transaction()``.

Each table a transaction touches is pinned at its first touch (a ``StagedDeltaLog``,
executor/log/staged_log.py): every later read of it sees that snapshot plus the
transaction's own staged writes. Statements run unchanged; their commits go to memory.

At COMMIT the staged versions of the written table are squashed into one set of net
actions (``net_actions``) and committed as ONE real version by an ordinary
OptimisticTransaction reading the pinned snapshot, whose read set is the union of every
statement's reads (their predicates, files and app ids; a query, or a table read as a
source, counts as reading the whole table: a read that cannot be analysed matches
everything; a simple query is scoped by its WHERE as an INSERT ... SELECT's read of its
target is, planner/scope.py). The conflict checker then judges the transaction exactly as one statement
that read all of that: same named conflicts, same isolation levels, row level where every
statement was row level. Tables the transaction only read are validated against their
winners at COMMIT as a read-only transaction would be.

What is refused before it runs (``TransactionStateError``; the transaction stays open):
statements other than queries, DML and session settings; time travel and table_changes();
writing a second table unless both tables' commits go through one commit coordinator
(executor/log/coordinator.py), which commits them together; a
second write to a table with the change data feed on (its feed could not list each row's net
change once). A statement that fails while running aborts the transaction, as in
Databricks: nothing more runs in it until ROLLBACK, and COMMIT rolls it back.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from isolde.errors import TransactionStateError

from ..log.actions import AddCDCFile, AddFile, DomainMetadata, RemoveFile, SetTransaction, now_ms, serialize_commit
from ..log.features import writer_features
from ..log.staged_log import StagedDeltaLog
from . import row_tracking
from .statement_scope import record_scope

#: commitInfo.operation of a transaction of more than one statement (one statement keeps its own)
OPERATION = "MULTI-STATEMENT TRANSACTION"

#: statements a transaction runs, by class name; everything else is refused
ALLOWED = frozenset({
    "Select", "Insert", "Update", "Delete", "Merge", "CopyInto", "Explain",
    "DescribeHistory", "DescribeDetail", "DescribeTable", "ShowTblProperties", "ShowTables", "ShowDatabases",
    "ShowViews", "ShowColumns", "ShowCreateTable", "SetConfig", "ResetConfig", "Use",
})


#: statements that read a table's log, not its rows: no read of the table is recorded
METADATA_READS = frozenset({"DescribeHistory", "DescribeDetail", "DescribeTable", "ShowTblProperties", "ShowColumns",
                            "ShowCreateTable", "ShowTables", "ShowDatabases", "ShowViews", "SetConfig", "ResetConfig",
                            "Use"})


@dataclass
class TableInTransaction:
    """One table a transaction touched: its real log, its staged log, and what statements did."""

    name: str
    staged: StagedDeltaLog
    statements: list = field(default_factory=list)  # statement transactions that belong to it
    query_scopes: list = field(default_factory=list)  # planner ConflictScopes of the queries that read it
    read_whole_table: bool = False

    @property
    def path(self) -> str:
        return self.staged.table_path

    @property
    def written(self) -> bool:
        return bool(self.staged.staged_versions)


def change_data_feed(snapshot) -> bool:
    conf = snapshot.configuration if snapshot.version >= 0 else {}
    return str(conf.get("delta.enableChangeDataFeed", "false")).lower() == "true"


class MultiStatementTransaction:
    """One open transaction of a session. Not thread-safe, as a session is not."""

    def __init__(self, *, atomic: bool = False):
        self.id = str(uuid.uuid4())
        self.atomic = atomic
        self.tables: dict[str, TableInTransaction] = {}
        self.state = "open"  # open | aborted | committed | rolled back
        self.aborted_by: Optional[str] = None  # the error that aborted it (aborted state)
        self._statement: Optional[dict] = None  # the running statement: tables resolved, transactions started
        self.leases: list = []  # lease files keeping VACUUM off the staged files until the end
        self._leased: set = set()  # staged versions (table path, version) whose files are leased
        # {coordinator location: sequence number}: every coordinated table is pinned as of one
        # sequence number of its coordinator, fixed at the transaction's first coordinated read
        self.read_point: dict = {}

    # ------------------------------------------------------------------ while statements run
    def begin_statement(self, stmt) -> None:
        """A statement starts (an AST node, or its class name at the log level: "Update")."""
        name = stmt if isinstance(stmt, str) else type(stmt).__name__
        if self.state == "aborted":
            raise TransactionStateError(
                f"The transaction was aborted by an error in an earlier statement ({self.aborted_by}); nothing "
                "more runs in it and it cannot commit. ROLLBACK, then start again.",
                error_class="TRANSACTION_ABORTED")
        if name not in ALLOWED:
            raise TransactionStateError(
                f"{_statement_words(stmt)} cannot run inside a transaction: a transaction holds queries, INSERT, "
                "UPDATE, DELETE, MERGE and COPY INTO. COMMIT or ROLLBACK first, then run it. The transaction "
                "is still open.", error_class="STATEMENT_NOT_ALLOWED_IN_TRANSACTION")
        self._statement = {"kind": name, "tables": set(), "transactions": []}

    def abort(self, error: BaseException) -> None:
        """A statement failed while running (not refused before it ran): as in Databricks, the
        transaction is aborted; only ROLLBACK ends it."""
        if self.state == "open":
            self.state = "aborted"
            first = (str(error).splitlines() or [type(error).__name__])[0]
            self.aborted_by = f"{type(error).__name__}: {first[:200]}"

    def end_statement(self, ok: bool, query_scope: Optional[Callable] = None) -> None:
        """Keep what a finished statement read; forget a failed one's (it staged nothing).

        A table the statement read without writing it (a query, a DML source) counts as read
        whole, unless the statement is a query and ``query_scope(table)`` gives the planner's
        ConflictScope of that query's reads of it (None: not analysable)."""
        current, self._statement = self._statement, None
        if current is None:
            return
        for table, txn in current["transactions"]:
            if ok or txn.committed_version is not None:
                table.statements.append(txn)
            self._lease_staged_files(table)
        if ok and current["kind"] not in METADATA_READS:
            written = {t.path for t, _ in current["transactions"]}
            for path in current["tables"] - written:  # queried, or read as a source
                table = self.tables[path]
                scope = query_scope(table) if query_scope is not None and current["kind"] == "Select" else None
                if scope is None or scope.blind_append or scope.reads_whole_table:
                    table.read_whole_table = True
                else:
                    table.query_scopes.append(scope)

    def log_for(self, name: str, real_log) -> StagedDeltaLog:
        """The staged log of a table, pinned at the transaction's first touch of it."""
        table = self.tables.get(real_log.table_path)
        if table is None:
            from ..log.coordinator import READ_POINT

            token = READ_POINT.set(self.read_point)
            try:
                pinned = real_log.update()
            finally:
                READ_POINT.reset(token)
            table = self.tables[real_log.table_path] = TableInTransaction(
                name, StagedDeltaLog(real_log, pinned, self._statement_transaction))
        if self._statement is not None:
            self._statement["tables"].add(table.path)
        return table.staged

    def _statement_transaction(self, staged: StagedDeltaLog, txn) -> None:
        """A statement starts writing ``staged``'s table: refuse what one commit cannot hold."""
        table = self.tables[staged.table_path]
        others = [t for t in self.tables.values() if t.written and t.path != table.path]
        if others:
            self._check_coordinated(others[0], table)
        if table.written and change_data_feed(staged.pinned):
            raise TransactionStateError(
                f"{table.name} has the change data feed on, and this transaction already wrote it: one "
                "transaction writes such a table with one statement (the feed could not list each row's net "
                "change once). COMMIT, then run the next statement. The transaction is still open.",
                error_class="TRANSACTION_CHANGE_DATA_FEED", sqlstate="0A000")
        if self._statement is not None:
            self._statement["transactions"].append((table, txn))

    @staticmethod
    def _check_coordinated(first: TableInTransaction, second: TableInTransaction) -> None:
        """Several tables commit together only through one commit coordinator."""
        from ..log.coordinator import COORDINATED_PROPERTY, coordinator_location

        locations = {t.name: coordinator_location(t.staged.pinned.metadata if t.staged.pinned.version >= 0 else None)
                     for t in (first, second)}
        if None in locations.values():
            missing = [name for name, location in locations.items() if location is None]
            raise TransactionStateError(
                f"This transaction already writes {first.name}; it can also write {second.name} only when both "
                f"tables' commits go through a commit coordinator, and {' and '.join(missing)} "
                f"{'does' if len(missing) == 1 else 'do'} not. Opt in with ALTER TABLE ... SET TBLPROPERTIES "
                f"('{COORDINATED_PROPERTY}' = 'true') (other engines can still read the table but no longer "
                "write it), or COMMIT the writes to the first table before writing the next. The transaction is "
                "still open.", error_class="MULTI_TABLE_TRANSACTION_NOT_COORDINATED", sqlstate="0A000")
        if len(set(locations.values())) > 1:
            raise TransactionStateError(
                f"{first.name} and {second.name} have different commit coordinators "
                f"({' and '.join(sorted(set(locations.values())))}): one transaction commits through one. COMMIT "
                "the writes to the first table before writing the next. The transaction is still open.",
                error_class="MULTI_TABLE_TRANSACTION_NOT_COORDINATED", sqlstate="0A000")

    def _lease_staged_files(self, table: TableInTransaction) -> None:
        """Lease the files the table's new staged versions reference (data files, deletion
        vectors): no commit names them until COMMIT, and a VACUUM with a short retention must
        keep them meanwhile, as it keeps a prepared write's (executor/catalog/leases.py)."""
        from ..catalog import leases

        paths = []
        for version in table.staged.staged_versions:
            if (table.path, version) in self._leased:
                continue
            self._leased.add((table.path, version))
            paths += sorted(_written_paths(table.staged, [version]))
        if paths:
            lease = leases.take(paths)
            if lease is not None:
                self.leases.append(lease)

    @property
    def written_tables(self) -> list[str]:
        return [t.name for t in self.tables.values() if t.written]

    # ------------------------------------------------------------------ the end
    def prepare(self, start_transaction):
        """The real commit, ready: ``(table, txn, actions, operation, parameters, metrics)`` for
        one written table, a list of those for several (they commit together through their
        coordinator), or None when nothing was written. ``start_transaction(log, snapshot)``
        opens a real transaction (the session's, so commitInfo carries its user and message)."""
        written = [t for t in self.tables.values() if t.written]
        if not written:
            return None
        prepared = [self._prepare_table(table, start_transaction) for table in written]
        return prepared[0] if len(prepared) == 1 else prepared

    def _prepare_table(self, table: TableInTransaction, start_transaction) -> tuple:
        actions = net_actions(table.staged)
        committed = [s for s in table.statements if s.commit_info is not None]
        txn = start_transaction(table.staged.real, table.staged.pinned)
        for s in table.statements:
            txn.read_predicates.extend(s.read_predicates)
            txn.read_files.update({p: f for p, f in s.read_files.items() if p in _pinned_paths(table.staged)})
            txn.read_app_ids |= s.read_app_ids
            if s.reads_whole_table:
                txn.read_whole_table()
        for scope in table.query_scopes:
            record_scope(txn, scope)
        if table.read_whole_table:
            txn.read_whole_table()
        # per row when some statement was checked per row (so the table qualifies) and every one
        # that read anything was; a blind INSERT's rows are effects the row-level checker handles
        txn.row_level = any(s.row_level for s in table.statements) and all(
            s.row_level for s in table.statements if s.has_reads) and all(
            scope.row_level_eligible for scope in table.query_scopes)
        txn.verify_files = txn.verify_files or any(s.verify_files for s in table.statements)
        txn.read_elsewhere = any(_reads_anything(other) for other in self.tables.values() if other is not table)
        if len(committed) == 1:
            info = committed[0].commit_info
            operation, parameters = info.operation, info.operation_parameters
            metrics = summed_metrics([info.operation_metrics or {}])  # numbers again, as a statement's
        else:
            operation = OPERATION
            parameters = {"statements": json.dumps([s.commit_info.operation for s in committed])}
            metrics = summed_metrics([s.commit_info.operation_metrics or {} for s in committed])
        return table, txn, actions, operation, parameters, metrics

    def commit(self, prepared):
        """Commit what ``prepare`` built: the tables only read are validated, then the written
        tables' net commits are made. Returns the version (one table), ``{table name: version}``
        (several), or None when nothing was written. Raises the named conflict; either way the
        transaction is over (``finish``).

        Tables whose commits go through a coordinator are committed by one coordinator entry,
        decided just after the read-only tables were validated with every earlier entry
        published: nothing can commit to a coordinated table between the validation and the
        decision (executor/txn/coordinated_commit.py)."""
        from .coordinated_commit import commit_together, coordinator_of

        try:
            if prepared is None:
                if not self._read_at_one_point():
                    self.validate_reads(set())
                version = None
            else:
                several = isinstance(prepared, list)
                parts = prepared if several else [prepared]
                written = {part[0].path for part in parts}
                coordinator = coordinator_of([part[1] for part in parts])
                if coordinator is None:  # one table, committed directly (checked in _check_coordinated)
                    table, txn, actions, operation, parameters, metrics = prepared
                    self.validate_reads(written)
                    version = txn.commit(actions, operation, parameters, metrics=metrics)
                else:
                    versions = commit_together(coordinator, parts, lambda: self.validate_reads(written))
                    version = {part[0].name: versions[part[0].path] for part in parts} if several \
                        else versions[prepared[0].path]
        except BaseException:
            decided = prepared is not None and all(
                part[1].committed_version is not None for part in (prepared if isinstance(prepared, list) else [prepared]))
            self.finish("committed" if decided else "rolled back")  # a decided commit keeps its files
            raise
        self.finish("committed")
        return version

    def _read_at_one_point(self) -> bool:
        """Did this transaction read every table at one coordinator sequence number? Then, having
        written nothing, it is serializable at that point and has nothing to validate."""
        from ..log.coordinator import coordinator_location, normalize_location

        locations = set()
        for table in self.tables.values():
            pinned = table.staged.pinned
            location = coordinator_location(pinned.metadata) if pinned.version >= 0 else None
            if location is None:
                return False
            locations.add(normalize_location(location))
        return len(locations) == 1 and locations <= set(self.read_point)

    def validate_reads(self, written_paths: set) -> None:
        """Tables only read (or written by statements that changed nothing): every winner since
        the pin is checked, per file, against what the transaction read of them (a query that
        could not be scoped: the whole table) and no write; a blind append passes under
        WriteSerializable."""
        from ..log.actions import parse_commit
        from ..log.features import isolation_level
        from .conflicts import ConflictChecker, TransactionSummary, WinningCommitSummary
        from .predicates import Predicate

        for table in self.tables.values():
            if table.path in written_paths or table.staged.pinned.version < 0:
                continue
            pinned = table.staged.pinned
            real = table.staged.real
            # what its queries and its statements (which wrote nothing in the end) read
            predicates = [Predicate(scope.read_predicate, pinned.schema, pinned.partition_columns)
                          for scope in table.query_scopes]
            files = {f.path for p in predicates for f in p.filter(pinned.all_files)}
            pinned_paths = _pinned_paths(table.staged)
            for statement in table.statements:
                predicates += statement.read_predicates
                files |= {path for path in statement.read_files if path in pinned_paths}
            summary = TransactionSummary(
                table=table.path, read_version=pinned.version, isolation_level=isolation_level(pinned.metadata),
                partition_columns=pinned.partition_columns, read_predicates=predicates, read_file_paths=files,
                read_whole_table=table.read_whole_table or any(s.reads_whole_table for s in table.statements),
                read_app_ids={a for s in table.statements for a in s.read_app_ids}, actions=[],
                protocol=pinned.protocol, metadata=pinned.metadata)
            version = pinned.version + 1
            while True:
                data = real._read_commit_bytes(version)
                if data is None:
                    break
                ConflictChecker(summary, WinningCommitSummary.from_actions(version, parse_commit(data))).check()
                version += 1

    def finish(self, state: str) -> None:
        """Committed or rolled back: files only the staged versions referenced are deleted."""
        if self.state not in ("open", "aborted"):
            return
        self.state = state
        from ..catalog import leases

        for table in self.tables.values():
            if table.written:
                delete_unreferenced(table.staged, keep_net=(state == "committed"))
        for lease in self.leases:
            leases.release(lease)
        self.leases = []


def _reads_anything(table: TableInTransaction) -> bool:
    return table.read_whole_table or bool(table.query_scopes) or any(s.has_reads for s in table.statements)


def _pinned_paths(staged: StagedDeltaLog) -> set:
    if not hasattr(staged, "_pinned_paths"):
        staged._pinned_paths = {f.path for f in staged.pinned.all_files} if staged.pinned.version >= 0 else set()
    return staged._pinned_paths


def summed_metrics(all_metrics: list) -> dict:
    out: dict = {}
    for metrics in all_metrics:
        for key, value in metrics.items():
            try:
                out[key] = int(out.get(key, 0)) + int(value)
            except (TypeError, ValueError):
                out[key] = value
    return out


def _statement_words(stmt) -> str:
    text = " ".join((getattr(stmt, "text", "") or "").split()[:2]).upper()
    return text or type(stmt).__name__


def _same(a, b) -> bool:
    return serialize_commit([a]) == serialize_commit([b]) if a is not None and b is not None else a is b


def net_actions(staged: StagedDeltaLog) -> list:
    """The staged versions as one commit: the files that left the pinned snapshot, the files
    that are new in the final one (a file added and then removed again never appears), every
    change-data file, the last txn action per application, and metadata, protocol and domains
    where they differ from the pinned snapshot's. New files lose the row ids the staged
    versions gave them: the real commit numbers them from the real high-water mark."""
    pinned, final = staged.pinned, staged.update()
    before = {f.key: f for f in pinned.all_files} if pinned.version >= 0 else {}
    after = {f.key: f for f in final.all_files}
    removes: dict = {}
    cdc, apps = [], {}
    for version in staged.staged_versions:
        for a in staged.read_commit(version):
            if isinstance(a, RemoveFile):
                removes[a.key] = a
            elif isinstance(a, AddCDCFile):
                cdc.append(a)
            elif isinstance(a, SetTransaction):
                apps[a.app_id] = a
    pinned_paths = {k[0] for k in before}
    tracked = final.protocol is not None and row_tracking.supported(writer_features(final.protocol, final.metadata))
    if tracked:
        rewritten_own = [k[0] for k in staged_adds(staged) if k[0] not in pinned_paths
                         and k[0] not in {p for p, _ in after}]
        if rewritten_own:
            raise TransactionStateError(
                f"{staged.table_path} has row tracking, and this transaction rewrote rows it had inserted itself "
                f"({rewritten_own[0]}): their row ids cannot be kept across the commit. Commit the INSERT first. "
                "Nothing was committed.", error_class="TRANSACTION_ROW_TRACKING", sqlstate="0A000")
    out: list = []
    if not _same(final.protocol, pinned.protocol):
        out.append(final.protocol)
    if not _same(final.metadata, pinned.metadata):
        out.append(final.metadata)
    ts = now_ms()
    out += [removes.get(k) or f.remove(ts) for k, f in before.items() if k not in after]
    for k, f in after.items():
        if k in before:
            continue
        if f.path not in pinned_paths and (f.base_row_id is not None or f.default_row_commit_version is not None):
            f = replace(f, base_row_id=None, default_row_commit_version=None, extra=dict(f.extra))
        out.append(f)
    out += cdc
    out += list(apps.values())
    pinned_domains = pinned.domain_metadata if pinned.version >= 0 else {}
    for name, domain in final.domain_metadata.items():
        if name != row_tracking.DOMAIN and not _same(domain, pinned_domains.get(name)):
            out.append(domain)
    for name, domain in pinned_domains.items():
        if name not in final.domain_metadata and name != row_tracking.DOMAIN:
            out.append(DomainMetadata(name, domain.configuration, removed=True))
    return out


def staged_adds(staged: StagedDeltaLog) -> set:
    return {a.key for v in staged.staged_versions for a in staged.read_commit(v) if isinstance(a, AddFile)}


def _written_paths(staged: StagedDeltaLog, versions) -> set:
    """The files (data, change data, deletion vectors) the staged ``versions`` add."""
    from ..catalog.properties import local_path
    from ..log.deletion_vectors import dv_file_path

    written: set = set()
    for version in versions:
        for a in staged.read_commit(version):
            if isinstance(a, (AddFile, AddCDCFile)):
                written.add(local_path(staged.table_path, a.path))
            if isinstance(a, AddFile) and a.deletion_vector is not None and a.deletion_vector.storage_type == "u":
                written.add(dv_file_path(staged.table_path, a.deletion_vector))
    return written


def delete_unreferenced(staged: StagedDeltaLog, *, keep_net: bool) -> None:
    """Delete the data and deletion-vector files the staged versions wrote that no commit
    references (all of them after a rollback). Best effort: VACUUM removes what is left."""
    from ..catalog.properties import local_path
    from ..log.deletion_vectors import dv_file_path
    from ..log.table_files import delete

    pinned = staged.pinned
    keep: set = set()
    if pinned.version >= 0:
        for f in pinned.all_files:
            keep.add(local_path(staged.table_path, f.path))
            if f.deletion_vector is not None and f.deletion_vector.storage_type in ("u", "p"):
                keep.add(dv_file_path(staged.table_path, f.deletion_vector))
    if keep_net:
        for f in staged.update().all_files:
            keep.add(local_path(staged.table_path, f.path))
            if f.deletion_vector is not None and f.deletion_vector.storage_type in ("u", "p"):
                keep.add(dv_file_path(staged.table_path, f.deletion_vector))
    written = _written_paths(staged, staged.staged_versions)
    for path in written - keep:
        if keep_net and path.endswith(".parquet") and "_change_data" in path:
            continue  # change-data files are referenced by the commit
        try:
            delete(path)  # a missing file is no error (one request per file on S3, no HEAD first)
        except OSError:
            pass
