"""OptimisticTransaction: record what a statement read, then commit with rebase and retry.

The caller reads through the transaction (``filter_files``, ``read_whole_table``,
``txn_version``), does its data work, then calls ``commit``. The commit writes
``readVersion + 1`` with put-if-absent; when another writer won that version, every
winning commit is checked in order (conflicts.py) and the commit retries at the next
free version, up to ``max_attempts`` times.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Any, Iterable, Mapping

from isolde.errors import (
    AnalysisError,
    ConcurrentWriteException,
    ExecutionError,
    InternalError,
    StagedFileMissingError,
    UnsupportedFeatureError,
)
from ..log.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    now_ms,
    serialize_commit,
    parse_commit,
)
from ..log.features import (
    assert_readable,
    assert_writable,
    checkpoint_interval,
    isolation_level as table_isolation_level,
    required_protocol,
    validate_table_properties,
    writer_features,
)

from ..log.coordinator import with_location
from .conflicts import (
    SERIALIZABLE,
    SNAPSHOT_ISOLATION,
    ConflictChecker,
    TransactionSummary,
    WinningCommitSummary,
)
from .compaction import LAYOUT_TAG, carry_own_changes, carry_winner_deletes
from .row_id_layout import STABLE_IDS_TAG
from .statement_scope import scope_flags
from . import feature_enablement, row_tracking
from .predicates import Predicate
from .row_level import (
    DEFAULT_BUDGET_ROWS,
    OverBudget,
    RowEffects,
    RowLevelChecker,
    RowLevelState,
    TableFiles,
    fallback_to_file_level,
    rebase_deletion_vectors,
)

ENGINE_INFO = "isolde/0.1.0"
DEFAULT_MAX_ATTEMPTS = 1000
# the session setting (``SET isolde.userName = ...``, or ``isolde.connect(conf={...})``) that
# names the user in commitInfo.userName; without it, the operating-system user
USER_NAME_KEY = "isolde.userName"

# Delta operations that change data (DeltaOperations.Operation.changesData): an empty commit
# of one of these is still a data change under WriteSerializable (see ``recorded_isolation_level``)
DATA_CHANGING_OPERATIONS = frozenset({
    "WRITE", "STREAMING UPDATE", "DELETE", "TRUNCATE", "UPDATE", "MERGE", "RESTORE", "CONVERT", "CLONE",
    "SHALLOW CLONE", "DEEP CLONE", "CREATE TABLE AS SELECT", "REPLACE TABLE AS SELECT", "MULTI-STATEMENT TRANSACTION",
    "CREATE OR REPLACE TABLE AS SELECT", "COPY INTO",
})


def os_user_name() -> str | None:
    """The operating-system user running this process (getpass), or None when it has none."""
    import getpass

    try:
        return getpass.getuser() or None
    except Exception:  # no login name, no USER / LOGNAME variable (some containers)
        return None


def session_user_name(conf) -> str | None:
    """The user name a session's settings give commitInfo (``isolde.userName``), else None."""
    if conf is None or not hasattr(conf, "get"):
        return None
    value = conf.get(USER_NAME_KEY)
    if value is None:
        return None
    value = str(value).strip()
    return value or None

_log = logging.getLogger(__name__)


def _json_string(value: Any) -> str:
    """Delta stores operationParameters / operationMetrics values as strings (JSON for non-strings)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), default=str)


def _uniform_iceberg(configuration: Mapping | None) -> bool:
    """``delta.universalFormat.enabledFormats`` lists ``iceberg`` (the converter, and pyiceberg,
    are imported only for such tables)."""
    for key, value in (configuration or {}).items():
        if str(key).lower() == "delta.universalformat.enabledformats":
            return "iceberg" in [x.strip().lower() for x in str(value).split(",")]
    return False


class OptimisticTransaction:
    """One write to one table, reading one snapshot. Not thread-safe; commit at most once."""

    def __init__(self, log, snapshot, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS):
        self.log = log
        self.snapshot = snapshot
        self.max_attempts = max_attempts
        self.read_predicates: list[Predicate] = []
        self.read_files: dict[str, AddFile] = {}
        self.read_app_ids: set[str] = set()
        self.write_identity = None  # an idempotent write's (app_id, version): its txn action at commit
        self._read_whole_table = False
        self._declared_blind_append = False
        # the write's multi-statement transaction read other tables: its commit is no blind
        # append whatever it read of this one (a blind append may be ordered after any
        # concurrent reader of this table, which a read of another table can contradict)
        self.read_elsewhere = False
        self.txn_id = str(uuid.uuid4())
        self.commit_info: CommitInfo | None = None
        self.committed_version: int | None = None
        self.attempts = 0
        self.winning_versions: list[int] = []
        # commitInfo.userMetadata for this commit (Delta's session setting
        # spark.databricks.delta.commitInfo.userMetadata); commit(user_metadata=...) overrides it
        self.user_metadata: str | None = None
        # commitInfo.userName (DESCRIBE HISTORY's userName): the OS user unless a session setting
        # (USER_NAME_KEY) or commit(user_name=...) names another; "" records none
        self.user_name: str | None = None
        # conflicts checked per row (row_level.py) instead of per file; set by the planner's scope
        self.row_level = False
        # check before committing that every file the actions reference exists (statements that
        # staged real files set it; log-level callers may commit files written elsewhere)
        self.verify_files = False
        self.row_level_budget_rows = DEFAULT_BUDGET_ROWS
        self.rebased_files: list[str] = []  # deletion-vector files the rebase wrote (removed if the commit fails)
        self.row_check_rows = 0  # rows the row-level checks read (all winners)
        self._row_state: RowLevelState | None = None
        self._files: TableFiles | None = None
        self._row_ids: row_tracking.RowIdAssigner | None = None
        # commitInfo tag delta.rowTracking.preserved, for writers that materialise row ids
        self.row_ids_preserved: bool | None = None

    # ------------------------------------------------------------------ what was read
    @property
    def table(self) -> str:
        return self.log.table_path

    @property
    def read_version(self) -> int:
        return self.snapshot.version

    @property
    def metadata(self) -> Metadata | None:
        return self.snapshot.metadata

    @property
    def isolation_level(self) -> str:
        """The table's isolation level (delta.isolationLevel, default WriteSerializable)."""
        return table_isolation_level(self.snapshot.metadata)

    def _predicate(self, predicate_sql, partition_predicate_sql) -> Predicate:
        return Predicate(
            predicate_sql,
            self.snapshot.schema,
            self.snapshot.partition_columns,
            partition_sql=partition_predicate_sql,
        )

    def filter_files(self, predicate_sql=None, partition_predicate_sql=None) -> list[AddFile]:
        """Record a read and return the live files that may hold matching rows.

        ``None`` for both means every file (a full scan). The partition part of the
        predicate scopes append conflicts; the rest prunes by file stats.
        """
        predicate = self._predicate(predicate_sql, partition_predicate_sql)
        files = predicate.filter(self.snapshot.all_files)
        self.read_predicates.append(predicate)
        for f in files:
            self.read_files[f.path] = f
        return files

    def record_read(self, predicate_sql=None, partition_predicate_sql=None, files: Iterable[AddFile] | None = None) -> list[AddFile]:
        """Record a read done elsewhere: its predicate and the files it actually read.

        When ``files`` is None they are derived from the predicate as in ``filter_files``.
        """
        if files is None:
            return self.filter_files(predicate_sql, partition_predicate_sql)
        predicate = self._predicate(predicate_sql, partition_predicate_sql)
        files = list(files)
        self.read_predicates.append(predicate)
        for f in files:
            self.read_files[f.path] = f
        return files

    def read_whole_table(self) -> None:
        """Mark the whole table as read: any concurrent data change conflicts."""
        self._read_whole_table = True

    @property
    def reads_whole_table(self) -> bool:
        return self._read_whole_table

    def txn_version(self, app_id: str) -> int:
        """The last committed version of an application id (-1 when unknown); recorded as read."""
        self.read_app_ids.add(app_id)
        return self.snapshot.transaction_version(app_id)

    def enable_row_level(self) -> None:
        """Check this transaction's conflicts row by row (deletion vectors, a read predicate that
        can be evaluated on rows). The table must have deletion vectors; it is the planner's call."""
        self.row_level = True

    def set_blind_append(self) -> None:
        """Declare that this write reads nothing; commit refuses if reads were recorded."""
        self._declared_blind_append = True

    @property
    def has_reads(self) -> bool:
        return bool(self._read_whole_table or self.read_predicates or self.read_files)

    # ------------------------------------------------------------------ commit
    def commit(
        self,
        actions: Iterable[Action],
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        *,
        metrics: Mapping[str, Any] | None = None,
        user_metadata: str | None = None,
        user_name: str | None = None,
    ) -> int:
        """Commit ``actions``; returns the version, or raises a named conflict."""
        self.begin_commit(actions, operation, operation_parameters, metrics=metrics, user_metadata=user_metadata,
                          user_name=user_name)
        version = None
        try:
            while True:
                version, body = self.next_attempt()
                try:
                    self._write_commit(version, body)
                    break
                except FileExistsError:
                    self.catch_up()
        except BaseException:
            if self.coordinator is not None and self.landed(version):
                self.finish_commit(version)  # decided before the error: the commit stands
            else:
                self.discard_rebased_files()
            raise
        self.finish_commit(version)
        return version

    def begin_commit(
        self,
        actions: Iterable[Action],
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        *,
        metrics: Mapping[str, Any] | None = None,
        user_metadata: str | None = None,
        user_name: str | None = None,
    ) -> None:
        """Build the commit (validated actions, commitInfo, what was read); ``next_attempt`` /
        ``catch_up`` then make it (``commit`` does all three; the coordinator's joint commit of
        several tables drives them itself)."""
        if self.committed_version is not None:
            raise InternalError("This transaction has already committed.")
        actions = [a for a in actions if not isinstance(a, CommitInfo)]
        if self.write_identity is not None and not any(isinstance(a, SetTransaction) for a in actions):
            actions.append(SetTransaction(self.write_identity.app_id, self.write_identity.version, now_ms()))
        actions = self._prepare(actions)
        isolation = self._effective_isolation_level(actions)  # what the conflict checker applies
        blind = self._is_blind_append(actions)
        info = CommitInfo(
            timestamp=now_ms(),
            operation=operation,
            operation_parameters={k: _json_string(v) for k, v in (operation_parameters or {}).items()},
            read_version=self.read_version if self.read_version >= 0 else None,
            isolation_level=self.recorded_isolation_level(actions, operation),
            is_blind_append=blind,
            operation_metrics={k: _json_string(v) for k, v in (metrics or {}).items()} or None,
            engine_info=ENGINE_INFO,
            txn_id=self.txn_id,
        )
        user_name = user_name if user_name is not None else self.user_name
        if user_name is None:
            user_name = os_user_name()
        if user_name:
            info.extra["userName"] = user_name
        if self.read_predicates:
            info.extra["readPredicates"] = [p.sql if p.sql is not None else "true" for p in self.read_predicates]
        if self._read_whole_table:
            info.extra["readWholeTable"] = True
        if self.row_level:
            info.extra["rowLevel"] = True
        self._row_ids = self._row_id_assigner(actions)
        if self._row_ids is not None and row_tracking.enabled(self._metadata_after(actions)):
            preserved = row_tracking.preserved(actions, self.row_ids_preserved)
            info.extra["tags"] = {**info.extra.get("tags", {}), row_tracking.PRESERVED_TAG: str(preserved).lower()}
        new_metadata = next((a for a in actions if isinstance(a, Metadata)), None)
        if new_metadata is not None and feature_enablement.identity_only_update(self.snapshot.metadata, new_metadata):
            # Delta's checker lets a writer that changes no metadata commit over such a commit
            info.extra["tags"] = {**info.extra.get("tags", {}), feature_enablement.IDENTITY_TAG: "true"}
        user_metadata = user_metadata if user_metadata is not None else self.user_metadata
        if user_metadata is not None:
            info.extra["userMetadata"] = user_metadata
        summary = TransactionSummary(
            table=self.table,
            read_version=self.read_version,
            isolation_level=isolation,
            partition_columns=self.snapshot.partition_columns,
            read_predicates=list(self.read_predicates),
            read_file_paths=set(self.read_files),
            read_whole_table=self._read_whole_table,
            read_app_ids=set(self.read_app_ids),
            actions=actions,
            protocol=self.snapshot.protocol if self.read_version >= 0 else None,
            metadata=self.snapshot.metadata if self.read_version >= 0 else None,
        )
        if self.verify_files:
            self._verify_files_exist(actions)
        self._attempt = {"info": info, "actions": actions, "summary": summary, "checked_up_to": self.read_version,
                         "version": self.read_version + 1,
                         "last_timestamp": self.snapshot.timestamp if self.read_version >= 0 else None}

    def landed(self, version: int | None) -> bool:
        """Did this transaction's attempt at ``version`` become the table's commit? Asked after an
        error in a coordinated commit, which may have been decided before the error (the decided
        entry is published first, so the answer is in the table's log)."""
        if version is None:
            return False
        try:
            coordinator = self.coordinator
            if coordinator is not None:
                coordinator.roll_forward()
            data = self.log._read_commit_bytes(version)
        except Exception:  # cannot tell: keep the files (VACUUM removes them if nothing references them)
            return True
        if data is None:
            return False
        info = next((a for a in parse_commit(data) if isinstance(a, CommitInfo)), None)
        return info is not None and info.txn_id == self.txn_id

    def discard_rebased_files(self) -> None:
        """The commit failed: the deletion-vector files its rebase wrote are referenced by nothing."""
        for path in self.rebased_files:
            try:
                os.remove(path)
            except OSError:
                pass

    def finish_commit(self, version: int) -> None:
        self.committed_version = version
        self.commit_info = self._attempt["info"]
        self._post_commit(version, self._attempt["actions"])

    @property
    def coordinator(self):
        """The table's commit coordinator when its commits go through one (executor/log/coordinator.py):
        the snapshot read, or a winner since, opted in. The commit that opts in is written directly;
        a writer that read the table before it then fails on the metadata change."""
        if getattr(self.log, "staged", False):
            return None
        from ..log.coordinator import Coordinator, coordinator_location

        attempt = getattr(self, "_attempt", None)
        metadata = attempt["summary"].metadata if attempt is not None else None
        location = coordinator_location(self.snapshot.metadata if self.read_version >= 0 else None) \
            or coordinator_location(metadata)
        return Coordinator.at(location) if location else None

    def _write_commit(self, version: int, body: bytes) -> None:
        """Write ``body`` as ``version``: put-if-absent, or through the table's coordinator.
        FileExistsError: another commit has the version."""
        coordinator = self.coordinator
        if coordinator is None:
            self.log.store.put_if_absent(self.log.commit_path(version), body)
            return
        from ..log.coordinator import CoordinatedCommit

        coordinator.decide([CoordinatedCommit(self.log.log_path, version, body)])

    def next_attempt(self) -> tuple[int, bytes]:
        """The version to try and the commit body for it."""
        state = self._attempt
        self.attempts += 1
        if self.attempts == 1:
            self.log.store.mkdirs(self.log.log_path)
        info, version = state["info"], state["version"]
        info.timestamp = max(now_ms(), (state["last_timestamp"] or 0) + 1)
        actions = state["actions"]
        numbered = self._row_ids.assign(actions, version) if self._row_ids is not None else actions
        # in-commit timestamps (when the table has them): commitInfo first, monotonic times
        previous = self.snapshot if version - 1 == self.snapshot.version else None
        numbered = self.log.stamp_in_commit_timestamp(info, numbered, version, previous)
        return version, serialize_commit([info, *numbered])

    def catch_up(self) -> None:
        """The attempted version was taken: check this commit against every winner since the
        last check (raising the named conflict) and move the attempt past them."""
        state = self._attempt
        info, summary, actions = state["info"], state["summary"], state["actions"]
        checked_up_to = state["checked_up_to"]
        version = checked_up_to + 1
        winner = None
        while True:
            data = self.log._read_commit_bytes(version)
            if data is None:
                break
            winner = WinningCommitSummary.from_actions(version, parse_commit(data))
            if self._row_ids is not None:
                self._row_ids.saw_winner(winner.actions)
            elif winner.protocol is not None and row_tracking.supported(writer_features(winner.protocol)):
                # the winner added row tracking (and numbered every live file): from here on
                # this commit numbers its files too, starting from the table as the winner left it
                self._row_ids = self._row_id_assigner_at(version)
            if self.row_level:
                actions = self._check_rows(summary, winner, actions)
            else:
                actions = self._check_files(summary, winner, actions)
            summary.follow_rewrites(winner)
            if winner.metadata is not None and row_tracking.enabled(winner.metadata) \
                    and not row_tracking.enabled(summary.metadata):
                # row tracking turned on under this commit: its rows are numbered, but the
                # ids of the rows it rewrote are not carried over (Delta tags it the same)
                info.extra["tags"] = {**info.extra.get("tags", {}), row_tracking.PRESERVED_TAG: "false"}
            summary.follow_enablement(winner)
            self.winning_versions.append(version)
            if winner.commit_info is not None and winner.commit_info.timestamp is not None:
                state["last_timestamp"] = max(state["last_timestamp"] or 0, int(winner.commit_info.timestamp))
            checked_up_to = version
            version += 1
        state["actions"], state["checked_up_to"], state["version"] = actions, checked_up_to, checked_up_to + 1
        if self.attempts >= self.max_attempts:  # only after the winners had their say
            raise ConcurrentWriteException(
                table=self.table,
                winning_version=checked_up_to,
                winning_operation=winner.operation if self.winning_versions and winner is not None else None,
                detail=f"Gave up after {self.attempts} attempts.",
            )

    def _metadata_after(self, actions: list[Action]) -> Metadata | None:
        return next((a for a in actions if isinstance(a, Metadata)), None) or self.snapshot.metadata

    def _row_id_assigner(self, actions: list[Action]) -> "row_tracking.RowIdAssigner | None":
        """Numbers the commit's adds when the table (as this commit leaves it) supports row tracking."""
        protocol = next((a for a in actions if isinstance(a, Protocol)), None) or self.snapshot.protocol
        if protocol is None or not row_tracking.supported(writer_features(protocol, self._metadata_after(actions))):
            return None
        live = {a.path: a for a in self.snapshot.all_files} if self.read_version >= 0 else {}
        return row_tracking.RowIdAssigner(live, row_tracking.high_water_mark(self.snapshot.domain_metadata))

    def _row_id_assigner_at(self, version: int) -> "row_tracking.RowIdAssigner":
        snap = self.log.snapshot(version)
        return row_tracking.RowIdAssigner({a.path: a for a in snap.all_files},
                                          row_tracking.high_water_mark(snap.domain_metadata))

    def _table_files(self) -> TableFiles:
        if self._files is None:
            self._files = TableFiles(self.table, self.snapshot.metadata, self.row_level_budget_rows)
        return self._files

    def _carry_through_compaction(self, winner: WinningCommitSummary, actions: list[Action]) -> tuple[list, set]:
        """Deletion vectors carried across a compaction (executor/txn/compaction.py), in
        whichever direction applies: this compaction lost to a delete, or this write lost to a
        compaction. Returns the actions to go on with and the input paths carried."""
        if not any(not r.data_change for r in winner.removed_files) and \
                not any(isinstance(a, AddFile) and a.tags and (LAYOUT_TAG in a.tags or STABLE_IDS_TAG in a.tags)
                        for a in actions):
            return actions, set()
        if not scope_flags(self.snapshot)["deletion_vectors"]:
            return actions, set()  # carrying writes deletion vectors: only where the table takes them
        files = self._table_files()
        carried: set = set()
        for carry in (carry_winner_deletes, carry_own_changes):
            actions, paths, written = carry(actions, winner, files)
            self.rebased_files.extend(written)
            carried |= paths
        return actions, carried

    def _check_files(self, summary: TransactionSummary, winner: WinningCommitSummary, actions: list[Action]) -> list:
        """The file-level check against one winner, after carrying deletion vectors across a
        compaction; the carried inputs are no longer this transaction's to conflict on."""
        actions, carried = self._carry_through_compaction(winner, actions)
        summary.actions = actions
        ConflictChecker(summary.without_files(carried) if carried else summary, winner).check()
        return actions

    def _check_rows(self, summary: TransactionSummary, winner: WinningCommitSummary, actions: list[Action]) -> list:
        """The row-level check against one winner, then the rebase of this transaction's
        deletion vectors over the winner's; returns the actions to commit next."""
        state = self._row_state
        if state is None:
            files = self._table_files()
            state = self._row_state = RowLevelState(summary, files, self.snapshot.schema,
                                                    tuple(self.snapshot.partition_columns),
                                                    RowEffects.of(actions, files))
        actions, carried = self._carry_through_compaction(winner, actions)
        if carried:  # this write now changes the compacted files' rows instead
            summary.actions = actions
            state.effects = RowEffects.of(actions, state.files)
        state.files.rows_read = 0
        try:
            RowLevelChecker(state, winner).check()
        except OverBudget:
            fallback_to_file_level(state, winner, self.row_level_budget_rows)
        self.row_check_rows += state.files.rows_read
        actions, written = rebase_deletion_vectors(actions, winner, state.files)
        self.rebased_files.extend(written)
        summary.actions = actions
        return actions

    def _verify_files_exist(self, actions: list[Action]) -> None:
        """Every data file and deletion-vector file the commit will reference exists (on a local
        disk or S3): a version never points at files a VACUUM took while the write was prepared."""
        from ..log.deletion_vectors import dv_file_path
        from ..log.table_files import files_for
        from ..catalog.properties import local_path

        missing = []
        for a in actions:
            if not isinstance(a, AddFile):
                continue
            path = local_path(self.table, a.path)
            if "://" not in path or path.startswith("s3a://"):
                if not files_for(path).exists(path):
                    missing.append(a.path)
            dv = a.deletion_vector
            if dv is not None and dv.storage_type in ("u", "p"):
                try:
                    dv_path = dv_file_path(self.table, dv)
                except Exception:  # an unreadable DV descriptor is the reader's error, not a missing file
                    continue
                if ("://" not in dv_path or dv_path.startswith("s3a://")) and not files_for(dv_path).exists(dv_path):
                    missing.append(dv_path)
        if missing:
            raise StagedFileMissingError(
                f"Cannot commit to {self.table}: {len(missing)} file(s) this write staged no longer exist "
                f"({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}). A VACUUM with a shortened "
                "retention (RETAIN ... HOURS with the retention check off) may have deleted them while the "
                "write was prepared. Nothing was committed; run the statement again.")

    def _post_commit(self, version: int, actions: list[Action]) -> None:
        if getattr(self.log, "staged", False):
            return  # a statement of a multi-statement transaction: the real commit comes later
        metadata = next((a for a in actions if isinstance(a, Metadata)), None) or self.snapshot.metadata
        interval = checkpoint_interval(metadata)
        if version > 0 and version % interval == 0:
            try:
                self.log.checkpoint(version)
            except Exception:  # the commit stands; a missing checkpoint only costs replay time
                _log.warning("checkpoint at version %d of %s failed", version, self.table, exc_info=True)
        if _uniform_iceberg(metadata.configuration):
            # UniForm: Iceberg metadata beside the log. Never fails the Delta commit: the next
            # commit's conversion catches up from the Delta version the Iceberg side records.
            try:
                from ..log import uniform

                uniform.convert_after_commit(self.log.table_path, version)
            except Exception:
                _log.warning("UniForm (Iceberg) conversion of version %d of %s failed; the next commit "
                             "catches up", version, self.table, exc_info=True)

    # ------------------------------------------------------------------ validation
    def _prepare(self, actions: list[Action]) -> list[Action]:
        """Validate the actions and add the protocol a new table or new properties need."""
        metadatas = [a for a in actions if isinstance(a, Metadata)]
        protocols = [a for a in actions if isinstance(a, Protocol)]
        if len(metadatas) > 1 or len(protocols) > 1:
            raise InternalError("A commit can carry at most one metaData and one protocol action.")
        metadata = metadatas[0] if metadatas else self.snapshot.metadata
        protocol = protocols[0] if protocols else self.snapshot.protocol
        if metadata is None:
            raise InternalError(f"Cannot write to {self.table}: the table does not exist and no metaData was given.")
        if metadatas:
            # validate what this commit changes; properties other engines set are kept as they are
            before = self.snapshot.configuration
            changed = {k: v for k, v in metadata.configuration.items() if before.get(k) != v}
            canonical = with_location(validate_table_properties(changed))
            kept = {k: v for k, v in metadata.configuration.items() if k not in changed}
            metadata.configuration = row_tracking.with_materialized_column_names({**kept, **canonical})
            table_isolation_level(metadata)  # an inherited bad value is refused too
            columns = {f["name"].lower() for f in metadata.schema.get("fields", [])}
            unknown = [c for c in metadata.partition_columns if c.lower() not in columns]
            if unknown:
                raise AnalysisError(f"Partition column(s) {', '.join(unknown)} are not in the schema of {self.table}.")
            needed = required_protocol(metadata, protocol)
            if protocol is None or needed != protocol:
                if protocols:
                    actions = [a for a in actions if not isinstance(a, Protocol)]
                protocol = needed
                actions = [protocol, *actions]
        assert protocol is not None
        if row_tracking.supported(writer_features(protocol, metadata)) and self.read_version >= 0:
            touched = {a.path for a in actions if isinstance(a, (AddFile, RemoveFile))}
            filled = row_tracking.backfill(f for f in self.snapshot.all_files if f.path not in touched)
            if filled:  # re-adding files: any concurrent change to them must conflict, never be undone
                self._read_whole_table = True
                actions = actions + filled
        if protocols or metadatas:
            assert_readable(protocol, metadata, self.table)  # never write a table isolde cannot read
        assert_writable(protocol, metadata, self.table)
        partition_columns = {c.lower() for c in metadata.partition_columns}
        # with column mapping, partitionValues are keyed by physical names (PROTOCOL.md)
        physical_partition_columns = _physical_partition_columns(metadata)
        append_only = metadata.configuration.get("delta.appendOnly", "false").lower() == "true"
        dv_allowed = "deletionVectors" in writer_features(protocol, metadata)
        for a in actions:
            if isinstance(a, (AddFile, AddCDCFile)):
                keys = {k.lower() for k in a.partition_values}
                if keys != partition_columns and keys != physical_partition_columns:
                    raise InternalError(
                        f"File {a.path} has partition values for {sorted(a.partition_values)}, "
                        f"but the table is partitioned by {sorted(metadata.partition_columns)}."
                    )
            if isinstance(a, AddFile) and a.deletion_vector is not None and not dv_allowed:
                raise UnsupportedFeatureError(
                    f"Cannot add a deletion vector to {a.path}: deletion vectors are not enabled on {self.table}.",
                    error_class="DELTA_UNSUPPORTED_FEATURES_FOR_WRITE",
                )
            if append_only and isinstance(a, RemoveFile) and a.data_change:
                raise ExecutionError(
                    f"Cannot remove data from {self.table}: it is append-only (delta.appendOnly = true).",
                    error_class="DELTA_CANNOT_MODIFY_APPEND_ONLY",
                    sqlstate="42809",
                )
        if self._declared_blind_append and (self.has_reads or any(isinstance(a, RemoveFile) for a in actions)):
            raise InternalError("set_blind_append() was called, but this transaction read the table or removes files.")
        return actions

    def recorded_isolation_level(self, actions: list[Action], operation: str | None = None) -> str:
        """commitInfo.isolationLevel, by Delta's rule (OptimisticTransaction's
        ``getIsolationLevelToUse`` / ``canDowngradeToSnapshotIsolation``), the same for every
        operation:

        * ``SnapshotIsolation`` when the commit changes no data: every action is a file action
          (add / remove / cdc) with dataChange=false (OPTIMIZE, REORG PURGE), or there is no
          action at all (VACUUM START / END). Under ``WriteSerializable`` an empty commit of an
          operation that changes data (an INSERT of no rows: ``DATA_CHANGING_OPERATIONS``) stays
          at the table's level, as Delta's ``!op.changesData`` test keeps it (Delta applies that
          test to dataChange=false-only commits too; isolde writes those only for compactions,
          whose operations change no data, so the outcome is the same);
        * otherwise the table's level, ``delta.isolationLevel`` of the metadata this commit
          leaves (``WriteSerializable`` unless set to ``Serializable``) -- also for commits that
          carry a metaData or protocol action (CREATE TABLE, ALTER, an identity high-water mark
          an INSERT or MERGE advances, schema evolution): those are recorded at the table's
          level, not as ``Serializable``.

        What is recorded is not what the conflict checker applies to this commit
        (``_effective_isolation_level``): isolde checks a metadata change as Serializable (a
        stricter check than the recorded level, DESIGN.md section 4), which the record does not
        reflect, as Delta's does not either."""
        table_level = table_isolation_level(self._metadata_after(actions))
        data_changed = False
        for a in actions:
            if isinstance(a, (AddFile, RemoveFile, AddCDCFile)):
                data_changed = data_changed or bool(getattr(a, "data_change", True))
            elif isinstance(a, DomainMetadata) and a.domain == row_tracking.DOMAIN:
                continue  # row tracking's high-water mark resolves its own conflicts (as in Delta)
            else:  # metaData, protocol, txn, other domainMetadata: never downgraded
                return table_level
        if data_changed:
            return table_level
        if actions or table_level == SERIALIZABLE or (operation or "").upper() not in DATA_CHANGING_OPERATIONS:
            return SNAPSHOT_ISOLATION
        return table_level

    def _effective_isolation_level(self, actions: list[Action]) -> str:
        """The level the conflict checker applies to this commit (DESIGN.md): metadata changes
        are checked as Serializable, dataChange=false-only commits with snapshot isolation,
        everything else at the table's level. commitInfo records ``recorded_isolation_level``."""
        if any(isinstance(a, (Metadata, Protocol)) for a in actions):
            return SERIALIZABLE
        file_actions = [a for a in actions if isinstance(a, (AddFile, RemoveFile, AddCDCFile))]
        if file_actions and not any(getattr(a, "data_change", True) for a in file_actions):
            return SNAPSHOT_ISOLATION
        return self.isolation_level

    def _is_blind_append(self, actions: list[Action]) -> bool:
        """Delta's rule: read nothing and only add files."""
        if self.has_reads or self.read_elsewhere:
            return False
        return not any(isinstance(a, RemoveFile) for a in actions)


def _physical_partition_columns(metadata: Metadata) -> set[str]:
    """Partition column names as a column-mapped table's partitionValues key them."""
    if metadata.configuration.get("delta.columnMapping.mode", "none").lower() == "none":
        return {c.lower() for c in metadata.partition_columns}
    by_name = {f["name"].lower(): f for f in metadata.schema.get("fields", [])}
    names = set()
    for column in metadata.partition_columns:
        field = by_name.get(column.lower(), {})
        names.add(str(field.get("metadata", {}).get("delta.columnMapping.physicalName", column)).lower())
    return names
