"""A Snapshot: the table state at one version, replayed from a checkpoint and JSON commits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from .actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from .features import assert_readable, checkpoint_interval, isolation_level

if TYPE_CHECKING:
    from .checkpoint import CheckpointFiles, CheckpointReader
    from .delta_log import DeltaLog

FileKey = tuple[str, "str | None"]


class ReplayState:
    """Mutable replay accumulator. Logical files are keyed by (path, DV unique id).

    The checkpoint's files stay in Arrow (CheckpointFiles) until someone asks for
    them; the JSON commits after it are kept as an overlay: files they added and keys
    they removed. Checkpoint tombstones are likewise only read when asked for.
    """

    __slots__ = ("protocol", "metadata", "checkpoint_files", "added", "removed", "txns", "domains",
                 "json_tombstones", "checkpoint", "last_commit_info")

    def __init__(self) -> None:
        self.protocol: Protocol | None = None
        self.metadata: Metadata | None = None
        self.checkpoint_files: "CheckpointFiles | None" = None
        self.added: dict[FileKey, AddFile] = {}
        self.removed: set[FileKey] = set()
        self.txns: dict[str, SetTransaction] = {}
        self.domains: dict[str, DomainMetadata] = {}
        self.json_tombstones: dict[FileKey, RemoveFile] = {}
        self.checkpoint: "CheckpointReader | None" = None
        self.last_commit_info: CommitInfo | None = None

    def copy(self) -> "ReplayState":
        other = ReplayState()
        other.protocol = self.protocol
        other.metadata = self.metadata
        other.checkpoint_files = self.checkpoint_files
        other.added = dict(self.added)
        other.removed = set(self.removed)
        other.txns = dict(self.txns)
        other.domains = dict(self.domains)
        other.json_tombstones = dict(self.json_tombstones)
        other.checkpoint = self.checkpoint
        return other

    def load_checkpoint(self, reader: "CheckpointReader") -> None:
        state = reader.state()
        self.protocol = state["protocol"]
        self.metadata = state["metadata"]
        self.txns = {t.app_id: t for t in state["txns"]}
        self.domains = {d.domain: d for d in state["domains"]}
        self.checkpoint_files = state["files"]
        self.checkpoint = reader

    def apply(self, actions: Iterable[Action]) -> None:
        """Apply one commit's actions in order."""
        self.last_commit_info = None
        added = self.added
        for action in actions:
            cls = type(action)
            if cls is AddFile:
                key = action.key
                added[key] = action
                self.removed.discard(key)
                self.json_tombstones.pop(key, None)
            elif cls is RemoveFile:
                key = action.key
                added.pop(key, None)
                if self.checkpoint_files is not None:
                    self.removed.add(key)
                self.json_tombstones[key] = action
            elif cls is Metadata:
                self.metadata = action
            elif cls is Protocol:
                self.protocol = action
            elif cls is SetTransaction:
                self.txns[action.app_id] = action
            elif cls is DomainMetadata:
                if action.removed:
                    self.domains.pop(action.domain, None)
                else:
                    self.domains[action.domain] = action
            elif cls is CommitInfo:
                self.last_commit_info = action

    def live_files(self) -> list[AddFile]:
        checkpoint_files = self.checkpoint_files
        if checkpoint_files is None or len(checkpoint_files) == 0:
            return list(self.added.values())
        hidden = self.removed
        added = self.added
        files = checkpoint_files.materialize()
        if not hidden and not added:
            return list(files)
        index = checkpoint_files.key_index()
        if index is None:  # repeated keys in the checkpoint: filter file by file
            base = [f for f in files if f.key not in hidden and f.key not in added]
        else:
            # look the (few) JSON-tail keys up in the checkpoint, not every checkpoint file in the tail
            drop = {index[k] for k in hidden if k in index}
            drop.update(index[k] for k in added if k in index)
            if not drop:
                base = list(files)
            elif len(drop) <= 64:
                base = list(files)
                for i in sorted(drop, reverse=True):
                    del base[i]
            else:
                base = [f for i, f in enumerate(files) if i not in drop]
        base.extend(added.values())
        return base


class Snapshot:
    """The state of a table at ``version`` (-1: no table yet). Immutable once built."""

    def __init__(self, log: "DeltaLog", version: int, state: ReplayState, timestamp: int | None = None):
        self.log = log
        self.version = version
        self._state = state
        self._timestamp = timestamp
        self._all_files: list[AddFile] | None = None
        self._tombstones: list[RemoveFile] | None = None
        self._by_path: dict[str, AddFile] | None = None

    # -- identity / schema
    @property
    def table_path(self) -> str:
        return self.log.table_path

    @property
    def exists(self) -> bool:
        return self.version >= 0

    @property
    def protocol(self) -> Protocol | None:
        return self._state.protocol

    @property
    def metadata(self) -> Metadata | None:
        return self._state.metadata

    @property
    def schema(self) -> dict | None:
        return None if self.metadata is None else self.metadata.schema

    @property
    def schema_string(self) -> str | None:
        return None if self.metadata is None else self.metadata.schema_string

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return () if self.metadata is None else tuple(self.metadata.partition_columns)

    @property
    def configuration(self) -> dict[str, str]:
        return {} if self.metadata is None else dict(self.metadata.configuration)

    @property
    def isolation_level(self) -> str:
        return isolation_level(self.metadata)

    @property
    def checkpoint_interval(self) -> int:
        return checkpoint_interval(self.metadata)

    @property
    def timestamp(self) -> int | None:
        """Commit timestamp of this version in ms (commitInfo.timestamp, else file mtime)."""
        if self._timestamp is None and self.version >= 0:
            self._timestamp = self.log.commit_timestamp(self.version)
        return self._timestamp

    # -- readability
    def assert_readable(self) -> None:
        """Refuse to read this version's data when its protocol needs a feature isolde lacks, or
        when the log up to it has no protocol or metaData (UnsupportedFeatureError / ExecutionError).

        Loading a snapshot never refuses: its version, protocol, metadata and history stay
        available (time travel needs the latest version number; DESCRIBE HISTORY works), but
        its files are only handed out once this check passes. Only the protocol of the version
        being read counts, so an older version from before the table took on a feature isolde
        does not support can still be read.
        """
        if self.version < 0:
            return
        state = self._state
        if state.protocol is None or state.metadata is None:
            from isolde.errors import ExecutionError

            missing = "protocol" if state.protocol is None else "metaData"
            raise ExecutionError(
                f"Cannot read version {self.version} of table {self.table_path}: the log up to that version has "
                f"no {missing} action (was a file in _delta_log deleted or truncated?).",
                error_class="DELTA_STATE_RECOVER_ERROR",
                sqlstate="XXKDS",
            )
        assert_readable(state.protocol, state.metadata, self.table_path, self.version)

    @property
    def readable(self) -> bool:
        try:
            self.assert_readable()
        except Exception:
            return False
        return True

    # -- files
    @property
    def all_files(self) -> list[AddFile]:
        """The live AddFiles (refused, see ``assert_readable``, for a version isolde cannot read)."""
        if self._all_files is None:
            self.assert_readable()
            self._all_files = self._state.live_files()
        return self._all_files

    @property
    def num_files(self) -> int:
        return len(self.all_files)

    def file(self, path: str) -> AddFile | None:
        """The live AddFile for a data file path (whatever its DV), or None."""
        if self._by_path is None:
            self._by_path = {a.path: a for a in self.all_files}
        return self._by_path.get(path)

    def files_matching(self, predicate_sql=None, partition_predicate_sql=None) -> list[AddFile]:
        """Live files that may hold rows matching the predicate (data skipping; records nothing).

        Writers read through ``OptimisticTransaction.filter_files`` instead, which records the read.
        """
        if predicate_sql is None and partition_predicate_sql is None:
            return list(self.all_files)
        from ..txn.predicates import Predicate

        predicate = Predicate(predicate_sql, self.schema, self.partition_columns, partition_sql=partition_predicate_sql)
        return predicate.filter(self.all_files)

    @property
    def tombstones(self) -> list[RemoveFile]:
        """Removed logical files still in the log (checkpoint tombstones + later removes)."""
        if self._tombstones is None:
            self.assert_readable()
            state = self._state
            merged: dict = {}
            if state.checkpoint is not None:
                for r in state.checkpoint.tombstones():
                    if r.key not in state.added:
                        merged[r.key] = r
            merged.update(state.json_tombstones)
            self._tombstones = list(merged.values())
        return self._tombstones

    # -- app transactions / domains
    @property
    def set_transactions(self) -> dict[str, SetTransaction]:
        return dict(self._state.txns)

    @property
    def app_transaction_versions(self) -> dict[str, int]:
        return {app: t.version for app, t in self._state.txns.items()}

    def transaction_version(self, app_id: str) -> int:
        """Latest committed version for an application id; -1 when unknown."""
        t = self._state.txns.get(app_id)
        return -1 if t is None else t.version

    @property
    def domain_metadata(self) -> dict[str, DomainMetadata]:
        return dict(self._state.domains)

    def history(self, limit: int | None = None) -> list[dict]:
        """commitInfos up to this version, newest first (see DeltaLog.history)."""
        return self.log.history(limit=limit, up_to=self.version)

    def __repr__(self) -> str:
        return f"Snapshot({self.table_path!r}, version={self.version}, files={self.num_files})"
