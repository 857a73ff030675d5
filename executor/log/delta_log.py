"""DeltaLog: the entry point to one table's transaction log (snapshots, history, checkpoints).

Loading the latest version reads ``_last_checkpoint``, the checkpoint it names and
then probes ``v+1.json, v+2.json, ...`` until one is missing; it never lists the
log directory, so its cost depends on the checkpoint interval, not on how many
versions the table has. A DeltaLog keeps its latest snapshot and brings it up to
date incrementally (committed versions never change).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import threading
from urllib.parse import unquote, urlparse

from isolde.errors import VersionNotFoundError

from .actions import CommitInfo, now_ms, parse_commit
from .checkpoint import (
    EMPTY_SCHEMA_STRING,
    CheckpointReader,
    checkpoint_bytes,
    checkpoint_name,
    checkpoint_part_names,
    checkpoint_table,
    complete_checkpoints,
    parse_last_checkpoint,
)
from .features import assert_writable, retention_ms
from .snapshot import ReplayState, Snapshot
from .store import LocalLogStore, LogStore

COMMIT_RE = re.compile(r"^(\d{20})\.json$")
LAST_CHECKPOINT = "_last_checkpoint"
#: Beyond this many new commits, reloading from the newest checkpoint beats replaying JSON.
INCREMENTAL_UPDATE_LIMIT = 100
#: How far below a wanted version to look for a checkpoint by name before listing the log.
CHECKPOINT_PROBE_WINDOW = 100


def local_table_path(path: str | os.PathLike) -> str:
    """A table location as an absolute local path (accepts file: URIs)."""
    text = os.fspath(path)
    if text.startswith("file:"):
        text = unquote(urlparse(text).path)
    return os.path.abspath(text)


def _to_ms(timestamp) -> int:
    if isinstance(timestamp, (int, float)):
        return int(timestamp)
    if isinstance(timestamp, str):
        timestamp = dt.datetime.fromisoformat(timestamp.strip().replace("Z", "+00:00"))
    if isinstance(timestamp, dt.datetime):
        if timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=dt.timezone.utc)
        return int(timestamp.timestamp() * 1000)
    if isinstance(timestamp, dt.date):
        return _to_ms(dt.datetime(timestamp.year, timestamp.month, timestamp.day))
    raise TypeError(f"cannot use {timestamp!r} as a timestamp")


def _parse_commit(data: bytes, version: int, table_path: str) -> list:
    """The actions of one commit file; an isolde error naming the version when it is malformed.

    A ``metaData`` without ``schemaString`` (Databricks' Delta Live Tables create a table so,
    before it has columns) is read as a table with no columns, as delta-rs does.
    """
    try:
        return parse_commit(data)
    except (KeyError, TypeError, ValueError) as first:
        error = first
    try:
        lines = []
        for line in (data.decode("utf-8") if isinstance(data, bytes) else data).splitlines():
            if line.strip():
                obj = json.loads(line)
                meta = obj.get("metaData")
                if isinstance(meta, dict) and meta.get("schemaString") is None:
                    obj["metaData"] = {**meta, "schemaString": EMPTY_SCHEMA_STRING}
                lines.append(json.dumps(obj))
        return parse_commit("\n".join(lines))
    except (KeyError, TypeError, ValueError):
        pass
    from isolde.errors import ExecutionError

    detail = f"an action lacks the field {error}" if isinstance(error, KeyError) else str(error)
    raise ExecutionError(
        f"Cannot read version {version} of table {table_path}: its commit file is not a valid Delta commit ({detail}).",
        error_class="DELTA_STATE_RECOVER_ERROR",
        sqlstate="XXKDS",
    ) from error


class DeltaLog:
    """One table's ``_delta_log``. Creating a DeltaLog touches nothing on disk."""

    def __init__(self, table_path: str | os.PathLike, store: LogStore | None = None):
        self.table_path = local_table_path(table_path)
        self.log_path = os.path.join(self.table_path, "_delta_log")
        self.store = store or LocalLogStore()
        self._latest: Snapshot | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_table(cls, path: str | os.PathLike, store: LogStore | None = None) -> "DeltaLog":
        return cls(path, store)

    def __repr__(self) -> str:
        return f"DeltaLog({self.table_path!r})"

    # ------------------------------------------------------------------ files
    def commit_path(self, version: int) -> str:
        return os.path.join(self.log_path, f"{version:020d}.json")

    def _read_commit_bytes(self, version: int) -> bytes | None:
        try:
            return self.store.read(self.commit_path(version))
        except FileNotFoundError:
            return None

    def read_commit(self, version: int) -> list:
        """The actions of one commit; VersionNotFoundError when its file does not exist."""
        data = self._read_commit_bytes(version)
        if data is None:
            raise VersionNotFoundError(f"Commit file for version {version} of {self.table_path} does not exist.")
        return _parse_commit(data, version, self.table_path)

    def _last_checkpoint_info(self) -> dict | None:
        try:
            return parse_last_checkpoint(self.store.read(os.path.join(self.log_path, LAST_CHECKPOINT)))
        except FileNotFoundError:
            return None

    def _list_log(self) -> tuple[list[int], dict[int, list[str]]]:
        """(commit versions, complete checkpoints) found by listing the log directory."""
        statuses = self.store.list_from(os.path.join(self.log_path, "0" * 20))
        names = [os.path.basename(s.path) for s in statuses]
        commits = sorted(int(m.group(1)) for m in map(COMMIT_RE.match, names) if m)
        return commits, complete_checkpoints(names)

    def _checkpoint_reader(self, names: list[str]) -> CheckpointReader:
        paths = [os.path.join(self.log_path, n) for n in names]
        try:
            identity = tuple(self.store.identity(p) for p in paths)
        except OSError:
            identity = None
        return CheckpointReader(paths, self.store.read, identity)

    def table_exists(self) -> bool:
        return self.update().version >= 0

    # ------------------------------------------------------------------ snapshots
    def snapshot(self, version: int | None = None, timestamp=None) -> Snapshot:
        """The latest snapshot, or the one at ``version`` / as of ``timestamp`` (time travel)."""
        if timestamp is not None:
            version = self.version_at_timestamp(timestamp)
        if version is None:
            return self.update()
        if version < 0:
            raise VersionNotFoundError(f"Version {version} of {self.table_path} does not exist.")
        cached = self._latest
        if cached is not None and cached.version < version:
            cached = self.update()  # cheap when the wanted version is just ahead of the cache
        if cached is not None and cached.version == version:
            return cached
        return self._load(version)

    def update(self) -> Snapshot:
        """The latest snapshot, read incrementally from the cached one when possible."""
        with self._lock:
            cached = self._latest
            if cached is None or cached.version < 0:
                snap = self._load(None)
            else:
                snap = self._extend(cached)
            self._latest = snap
            return snap

    def invalidate(self) -> None:
        """Forget the cached snapshot (e.g. after the table directory was replaced)."""
        self._latest = None

    def _extend(self, base: Snapshot) -> Snapshot:
        version = base.version
        pending: list[tuple[int, bytes]] = []
        while True:
            data = self._read_commit_bytes(version + 1)
            if data is None:
                break
            version += 1
            pending.append((version, data))
            if len(pending) > INCREMENTAL_UPDATE_LIMIT:
                return self._load(None)
        if not pending:
            return base
        state = base._state.copy()
        for number, data in pending:
            state.apply(_parse_commit(data, number, self.table_path))
        return self._finish(version, state)

    def _finish(self, version: int, state: ReplayState) -> Snapshot:
        # no protocol check here: a snapshot isolde cannot read still has a version, a protocol
        # and a history; Snapshot.all_files refuses its data (Snapshot.assert_readable)
        ts = None
        if state.last_commit_info is not None:
            ci = state.last_commit_info
            ts = ci.get("inCommitTimestamp") or ci.timestamp
        return Snapshot(self, version, state, ts)

    def _load(self, version: int | None) -> Snapshot:
        """Replay from the newest usable checkpoint (<= version) and the JSON commits after it."""
        state = ReplayState()
        checkpoint_names: list[str] | None = None
        checkpoint_version = -1
        info = self._last_checkpoint_info()
        if info is not None and (version is None or info["version"] <= version):
            v2 = info.get("v2Checkpoint")
            if isinstance(v2, dict) and isinstance(v2.get("path"), str):
                names = [os.path.basename(v2["path"])]  # a V2 checkpoint (UUID-named)
            else:
                names = checkpoint_part_names(info["version"], info.get("parts"))
            if all(self.store.exists(os.path.join(self.log_path, n)) for n in names):
                checkpoint_names, checkpoint_version = names, info["version"]
        if checkpoint_names is None and version is not None:
            # time travel below the newest checkpoint: a few stats beat listing a long log
            for candidate in range(version, max(version - CHECKPOINT_PROBE_WINDOW, 0), -1):
                name = checkpoint_name(candidate)
                if self.store.exists(os.path.join(self.log_path, name)):
                    checkpoint_names, checkpoint_version = [name], candidate
                    break
        if checkpoint_names is None:
            commits, checkpoints = self._list_log()
            usable = [v for v in checkpoints if version is None or v <= version]
            if usable:
                checkpoint_version = max(usable)
                checkpoint_names = checkpoints[checkpoint_version]
            elif commits and commits[0] != 0:
                raise VersionNotFoundError(
                    f"Cannot load version {version if version is not None else commits[-1]} of {self.table_path}: "
                    f"the log starts at version {commits[0]} and has no checkpoint before it (log cleaned up)."
                )
        if checkpoint_names is not None:
            state.load_checkpoint(self._checkpoint_reader(checkpoint_names))

        current = checkpoint_version
        while version is None or current < version:
            data = self._read_commit_bytes(current + 1)
            if data is None:
                if version is None:
                    break
                latest = current
                raise VersionNotFoundError(
                    f"Cannot time travel {self.table_path} to version {version}: "
                    + (
                        f"the latest version is {latest}."
                        if latest >= 0
                        else "the table does not exist."
                    )
                )
            current += 1
            state.apply(_parse_commit(data, current, self.table_path))
        if current < 0:
            return Snapshot(self, -1, state, None)
        return self._finish(current, state)

    # ------------------------------------------------------------------ time
    def commit_timestamp(self, version: int) -> int:
        """When ``version`` was committed (ms): inCommitTimestamp, commitInfo.timestamp or mtime."""
        path = self.commit_path(version)
        data = self._read_commit_bytes(version)
        if data is not None:
            for line in data.splitlines():
                if b'"commitInfo"' in line:
                    body = json.loads(line).get("commitInfo") or {}
                    ts = body.get("inCommitTimestamp") or body.get("timestamp")
                    if ts is not None:
                        return int(ts)
                    break
            return self.store.status(path).modification_time
        for name in complete_checkpoints(
            os.path.basename(s.path) for s in self.store.list_from(os.path.join(self.log_path, f"{version:020d}"))
        ).get(version, []):
            return self.store.status(os.path.join(self.log_path, name)).modification_time
        raise VersionNotFoundError(f"Version {version} of {self.table_path} does not exist.")

    def version_at_timestamp(self, timestamp) -> int:
        """The latest version committed at or before ``timestamp`` (ms, datetime or ISO text)."""
        ts = _to_ms(timestamp)
        commits, _ = self._list_log()
        if not commits:
            raise VersionNotFoundError(f"The table {self.table_path} does not exist.")
        # the contiguous run of commit files that ends at the latest version
        lo_index = len(commits) - 1
        while lo_index > 0 and commits[lo_index - 1] == commits[lo_index] - 1:
            lo_index -= 1
        lo, hi = commits[lo_index], commits[-1]
        earliest = self.commit_timestamp(lo)
        if ts < earliest:
            raise VersionNotFoundError(
                f"The timestamp {dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc).isoformat()} is before the "
                f"earliest available version {lo} of {self.table_path}."
            )
        latest = self.commit_timestamp(hi)
        if ts >= latest:
            if ts > latest:
                raise VersionNotFoundError(
                    f"The timestamp {dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc).isoformat()} is after the "
                    f"latest commit (version {hi}) of {self.table_path}."
                )
            return hi
        while lo < hi:  # invariant: ts(lo) <= ts < ts(hi)
            mid = (lo + hi + 1) // 2
            if mid == hi:
                break
            if self.commit_timestamp(mid) <= ts:
                lo = mid
            else:
                hi = mid
        return lo

    # ------------------------------------------------------------------ history
    def history(self, limit: int | None = None, up_to: int | None = None) -> list[dict]:
        """commitInfo of each version, newest first, each with its ``version`` (DESCRIBE HISTORY)."""
        latest = self.update().version if up_to is None else up_to
        out: list[dict] = []
        version = latest
        while version >= 0 and (limit is None or len(out) < limit):
            data = self._read_commit_bytes(version)
            if data is None:
                break
            info = next((a for a in _parse_commit(data, version, self.table_path) if isinstance(a, CommitInfo)), None)
            entry = {"version": version}
            entry.update(info.to_dict() if info is not None else {})
            if entry.get("timestamp") is None:
                entry["timestamp"] = self.store.status(self.commit_path(version)).modification_time
            out.append(entry)
            version -= 1
        return out

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, version: int | None = None) -> str:
        """Write a classic Parquet checkpoint at ``version`` (latest by default); returns its path."""
        snap = self.snapshot(version)
        if snap.version < 0:
            raise VersionNotFoundError(f"Cannot checkpoint {self.table_path}: the table does not exist.")
        horizon = now_ms() - retention_ms(snap.metadata, "delta.deletedFileRetentionDuration", "interval 1 week")
        tombstones = [r for r in snap.tombstones if r.deletion_timestamp is None or r.deletion_timestamp > horizon]
        table = checkpoint_table(
            snap.protocol,
            snap.metadata,
            snap.set_transactions.values(),
            snap.domain_metadata.values(),
            snap.all_files,
            tombstones,
        )
        body = checkpoint_bytes(table)
        path = os.path.join(self.log_path, checkpoint_name(snap.version))
        self.store.write(path, body)
        info = self._last_checkpoint_info()
        if info is None or info["version"] <= snap.version:
            last = {"version": snap.version, "size": table.num_rows, "sizeInBytes": len(body), "numOfAddFiles": snap.num_files}
            self.store.write(os.path.join(self.log_path, LAST_CHECKPOINT), json.dumps(last).encode())
        return path

    # ------------------------------------------------------------------ transactions
    def start_transaction(self, snapshot: Snapshot | None = None, *, max_attempts: int | None = None):
        """An optimistic transaction reading ``snapshot`` (the latest by default).

        ``max_attempts`` bounds how many versions the commit tries before giving up
        with ConcurrentWriteException (default DEFAULT_MAX_ATTEMPTS).
        """
        from isolde.executor.txn.transaction import DEFAULT_MAX_ATTEMPTS, OptimisticTransaction

        snap = snapshot if snapshot is not None else self.update()
        if snap.protocol is not None:
            assert_writable(snap.protocol, snap.metadata, self.table_path, snap.version)
        snap.assert_readable()  # every write reads the table (its schema at least)
        return OptimisticTransaction(self, snap, max_attempts=max_attempts or DEFAULT_MAX_ATTEMPTS)
