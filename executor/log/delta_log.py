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
import logging
import os
import re
import threading
from urllib.parse import unquote, urlparse

import pyarrow as pa

from isolde.errors import VersionNotFoundError

from .actions import CommitInfo, Metadata, now_ms, parse_commit
from .checkpoint import (
    CHECKPOINT_RE,
    EMPTY_SCHEMA_STRING,
    SIDECAR_DIR,
    V2_CHECKPOINT_SCHEMA,
    CheckpointReader,
    checkpoint_bytes,
    checkpoint_metadata_action,
    checkpoint_name,
    checkpoint_part_names,
    checkpoint_table,
    complete_checkpoints,
    is_v2_checkpoint_name,
    parse_last_checkpoint,
    referenced_sidecars,
    sidecar_action,
    sidecar_name,
    sidecar_tables,
    v2_checkpoint_name,
)
from .features import (
    ICT_ENABLEMENT_TIMESTAMP,
    ICT_ENABLEMENT_VERSION,
    assert_writable,
    expired_log_cleanup_enabled,
    has_v2_checkpoint_feature,
    in_commit_timestamp_enablement,
    in_commit_timestamps_enabled,
    log_retention_ms,
    retention_ms,
    uses_v2_checkpoints,
    writer_features,
)
from .snapshot import ReplayState, Snapshot
from .store import LogStore, is_object_store_path, store_for_path

_log = logging.getLogger(__name__)

COMMIT_RE = re.compile(r"^(\d{20})\.json$")
#: Version checksum files (``n.crc``) and log compactions (``x.y.compacted.json``).
CRC_RE = re.compile(r"^(\d{20})\.crc$")
COMPACTION_RE = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
LAST_CHECKPOINT = "_last_checkpoint"
DAY_MS = 86_400_000
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
    except (KeyError, TypeError, ValueError, AttributeError) as first:
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
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    from isolde.errors import ExecutionError

    detail = (f"an action lacks the field {error}" if isinstance(error, KeyError)
              else "a line is not a JSON object" if isinstance(error, AttributeError) else str(error))
    raise ExecutionError(
        f"Cannot read version {version} of table {table_path}: its commit file is not a valid Delta commit ({detail}).",
        error_class="DELTA_STATE_RECOVER_ERROR",
        sqlstate="XXKDS",
    ) from error


class DeltaLog:
    """One table's ``_delta_log``. Creating a DeltaLog touches nothing on disk."""

    def __init__(self, table_path: str | os.PathLike, store: LogStore | None = None):
        if is_object_store_path(table_path):  # s3://bucket/prefix/table: the URI is the path
            from .s3_store import normalize_s3_uri

            self.table_path = normalize_s3_uri(table_path)
        else:
            self.table_path = local_table_path(table_path)
        self.log_path = os.path.join(self.table_path, "_delta_log")
        self.store = store or store_for_path(self.table_path)
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
            if snap.version >= 0 and not getattr(self, "staged", False):
                return self._coordinated_read(snap)
            return snap

    def _coordinated_read(self, snap: Snapshot) -> Snapshot:
        """A table whose commits go through a coordinator: publish what it decided, then read
        as of the statement's read point when one is set (every coordinated table of the
        statement or transaction at one sequence number), else the latest."""
        from .coordinator import READ_POINT, Coordinator, coordinator_location

        location = coordinator_location(snap.metadata)
        if location is None:
            return snap
        coordinator = Coordinator.at(location)
        point = READ_POINT.get()
        if point is not None and coordinator.location in point:
            seq = point[coordinator.location]  # every entry up to it was published when it was fixed
        else:
            seq = coordinator.roll_forward()
            if point is not None:
                point[coordinator.location] = seq
        snap = self._latest = self._extend(snap)
        if point is not None:
            version = coordinator.version_at(self, snap.version, seq)
            if version != snap.version:
                return self._load(version)
        return snap

    def invalidate(self) -> None:
        """Forget the cached snapshot (e.g. after the table directory was replaced)."""
        self._latest = None

    def _later_commits(self, version: int) -> list[int]:
        """Commit versions above ``version`` present in the log (one listing from version + 1)."""
        statuses = self.store.list_from(self.commit_path(version + 1))
        return sorted(int(m.group(1)) for m in (COMMIT_RE.match(os.path.basename(st.path)) for st in statuses) if m)

    def _next_commit(self, version: int) -> bytes | None:
        """Commit ``version + 1``, or None when ``version`` is the latest. A later commit with this
        one missing is a hole in the log (deleted by hand, a broken copy): an error naming the
        missing version, never a silently older table that a writer would then fork."""
        data = self._read_commit_bytes(version + 1)
        if data is not None:
            return data
        later = self._later_commits(version)
        if not later:
            return None
        data = self._read_commit_bytes(version + 1)  # committed between the read and the listing
        if data is not None:
            return data
        from isolde.errors import ExecutionError

        raise ExecutionError(
            f"Cannot read table {self.table_path}: its log has commits up to version {later[-1]} but version "
            f"{version + 1} is missing ({self.commit_path(version + 1)}). The log's versions must be contiguous; "
            "restore the missing commit file, or the table cannot be read or written.",
            error_class="DELTA_VERSIONS_NOT_CONTIGUOUS", sqlstate="KD00C")

    def _extend(self, base: Snapshot) -> Snapshot:
        version = base.version
        pending: list[tuple[int, bytes]] = []
        while True:
            data = self._next_commit(version)
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
                earliest = self._earliest_of(commits, checkpoints)
                if version is not None:
                    raise self._cleaned_up_error(version, earliest)
                raise VersionNotFoundError(
                    f"Cannot load version {commits[-1]} of {self.table_path}: the log starts at version "
                    f"{commits[0]} and has no checkpoint before it (log cleaned up)."
                )
        if checkpoint_names is not None:
            try:
                state.load_checkpoint(self._checkpoint_reader(checkpoint_names))
            except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as e:
                # an unreadable checkpoint: replay the commits instead when every one is still
                # there, else say which file and version cannot be read
                if not self._all_commits_up_to(checkpoint_version):
                    from isolde.errors import ExecutionError

                    raise ExecutionError(
                        f"Cannot read version {checkpoint_version} of table {self.table_path}: its checkpoint "
                        f"{', '.join(checkpoint_names)} is unreadable ({str(e).strip()[:200]}) and the commits "
                        "before it are no longer in the log to replay instead.",
                        error_class="DELTA_STATE_RECOVER_ERROR", sqlstate="XXKDS") from e
                state, checkpoint_version = ReplayState(), -1

        current = checkpoint_version
        while version is None or current < version:
            data = self._read_commit_bytes(current + 1) if version is not None else self._next_commit(current)
            if data is None:
                if version is None:
                    break
                latest = current
                commits, checkpoints = self._list_log()
                if commits and commits[-1] > current:  # a hole below the wanted version: cleaned up
                    raise self._cleaned_up_error(version, self._earliest_of(commits, checkpoints))
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

    def _all_commits_up_to(self, version: int) -> bool:
        commits, _ = self._list_log()
        return set(range(0, version + 1)) <= set(commits)

    # ------------------------------------------------------------------ time
    def _first_commit_info(self, data: bytes) -> dict | None:
        """The commitInfo of a commit file (the first one; in-commit timestamps put it first)."""
        for line in data.splitlines():
            if b'"commitInfo"' in line:
                try:
                    body = json.loads(line).get("commitInfo")
                except ValueError:
                    return None
                return body if isinstance(body, dict) else None
        return None

    def in_commit_timestamp_enablement(self) -> tuple[int, int | None] | None:
        """(first version stamped with inCommitTimestamp, its timestamp or None when on from the
        start) for a table whose latest metadata has ``delta.enableInCommitTimestamps``; else None."""
        latest = self.update()
        return in_commit_timestamp_enablement(latest.metadata) if latest.version >= 0 else None

    def commit_timestamp(self, version: int) -> int:
        """When ``version`` was committed (ms).

        Tables with in-commit timestamps (PROTOCOL.md): ``commitInfo.inCommitTimestamp`` from
        ``delta.inCommitTimestampEnablementVersion`` on, the commit file's modification time before
        it. Other tables: ``inCommitTimestamp`` or ``commitInfo.timestamp`` when the commit has one,
        else the file's modification time.
        """
        return self._commit_timestamp(version, self.in_commit_timestamp_enablement())

    def _commit_timestamp(self, version: int, ict: tuple[int, int | None] | None) -> int:
        path = self.commit_path(version)
        data = self._read_commit_bytes(version)
        if data is not None:
            if ict is not None and version < ict[0]:
                return self.store.status(path).modification_time
            body = self._first_commit_info(data) or {}
            ts = body.get("inCommitTimestamp") or body.get("timestamp")
            if ts is not None:
                return int(ts)
            return self.store.status(path).modification_time
        for name in complete_checkpoints(
            os.path.basename(s.path) for s in self.store.list_from(os.path.join(self.log_path, f"{version:020d}"))
        ).get(version, []):
            return self.store.status(os.path.join(self.log_path, name)).modification_time
        raise VersionNotFoundError(f"Version {version} of {self.table_path} does not exist.")

    @staticmethod
    def _earliest_of(commits: list[int], checkpoints: dict[int, list[str]]) -> int | None:
        """The earliest version that can be rebuilt: 0 when the contiguous run of commits that ends
        at the latest version starts at 0, else the oldest complete checkpoint from which the
        commits after it are all present. None when nothing can be rebuilt."""
        if not commits:
            return min(checkpoints) if checkpoints else None
        lo_index = len(commits) - 1
        while lo_index > 0 and commits[lo_index - 1] == commits[lo_index] - 1:
            lo_index -= 1
        start = commits[lo_index]
        if start == 0:
            return 0
        usable = [v for v in checkpoints if start - 1 <= v <= commits[-1]]
        return min(usable) if usable else None

    def earliest_available_version(self) -> int:
        """The oldest version time travel can reach (older commits were cleaned up or never kept)."""
        commits, checkpoints = self._list_log()
        earliest = self._earliest_of(commits, checkpoints)
        if earliest is None:
            raise VersionNotFoundError(f"The table {self.table_path} does not exist.")
        return earliest

    def _cleaned_up_error(self, version: int, earliest: int | None) -> VersionNotFoundError:
        where = (f"the earliest available version is {earliest}" if earliest is not None
                 else "no version of it can be rebuilt")
        return VersionNotFoundError(
            f"Cannot time travel {self.table_path} to version {version}: {where}; the log before it was "
            "cleaned up (delta.logRetentionDuration) or is missing.")

    def version_at_timestamp(self, timestamp) -> int:
        """The latest version committed at or before ``timestamp`` (ms, datetime or ISO text).

        With in-commit timestamps turned on at version E (timestamp T), a timestamp >= T is looked
        for among versions >= E only, an earlier one among versions < E (PROTOCOL.md)."""
        ts = _to_ms(timestamp)
        commits, checkpoints = self._list_log()
        if not commits:
            raise VersionNotFoundError(f"The table {self.table_path} does not exist.")
        ict = self.in_commit_timestamp_enablement()
        earliest = self._earliest_of(commits, checkpoints)
        if earliest is None:  # no checkpoint to start from: the contiguous run of commits that ends at the latest
            lo_index = len(commits) - 1
            while lo_index > 0 and commits[lo_index - 1] == commits[lo_index] - 1:
                lo_index -= 1
            earliest = commits[lo_index]
        lo, hi = earliest, commits[-1]
        if ict is not None and ict[1] is not None and ict[0] > 0:
            if ts >= ict[1]:
                lo = max(lo, ict[0])
            else:
                hi = min(hi, ict[0] - 1)
        iso = dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc).isoformat()
        if hi < lo or ts < self._commit_timestamp(lo, ict):
            raise VersionNotFoundError(
                f"The timestamp {iso} is before the earliest available version {earliest} of {self.table_path}."
            )
        latest = self._commit_timestamp(hi, ict)
        if ts >= latest:
            if ts > latest and hi == commits[-1]:
                raise VersionNotFoundError(
                    f"The timestamp {iso} is after the latest commit (version {hi}) of {self.table_path}."
                )
            return hi
        while lo < hi:  # invariant: ts(lo) <= ts < ts(hi)
            mid = (lo + hi + 1) // 2
            if mid == hi:
                break
            if self._commit_timestamp(mid, ict) <= ts:
                lo = mid
            else:
                hi = mid
        return lo

    # ------------------------------------------------------------------ history
    def history(self, limit: int | None = None, up_to: int | None = None) -> list[dict]:
        """commitInfo of each version, newest first, each with its ``version`` (DESCRIBE HISTORY).

        ``timestamp`` is the commit timestamp as ``commit_timestamp`` defines it: the in-commit
        timestamp on tables that have them (the file time before they were turned on)."""
        latest = self.update().version if up_to is None else up_to
        ict = self.in_commit_timestamp_enablement()
        out: list[dict] = []
        version = latest
        while version >= 0 and (limit is None or len(out) < limit):
            data = self._read_commit_bytes(version)
            if data is None:
                break
            info = next((a for a in _parse_commit(data, version, self.table_path) if isinstance(a, CommitInfo)), None)
            entry = {"version": version}
            entry.update(info.to_dict() if info is not None else {})
            if ict is not None and version < ict[0]:
                entry["timestamp"] = self.store.status(self.commit_path(version)).modification_time
            elif ict is not None and entry.get("inCommitTimestamp") is not None:
                entry["timestamp"] = int(entry["inCommitTimestamp"])
            if entry.get("timestamp") is None:
                entry["timestamp"] = self.store.status(self.commit_path(version)).modification_time
            out.append(entry)
            version -= 1
        return out

    # ------------------------------------------------------------------ in-commit timestamps (write side)
    def stamp_in_commit_timestamp(self, info: CommitInfo, actions: list, version: int,
                                  read_snapshot: Snapshot | None = None) -> list:
        """Give the commit about to be written as ``version`` its in-commit timestamp.

        A no-op (returns ``actions``) unless the table, as this commit leaves it, has the
        ``inCommitTimestamp`` writer feature and ``delta.enableInCommitTimestamps = true``.
        Otherwise sets ``info.timestamp`` and ``info.extra["inCommitTimestamp"]`` to
        max(``info.timestamp`` (or now), the previous commit's inCommitTimestamp / timestamp + 1);
        when this commit turns the timestamps on for a table that has earlier commits, also
        later than the previous commit file's modification time, and the returned actions carry a
        copy of its metaData with ``delta.inCommitTimestampEnablementVersion`` = ``version`` and
        ``delta.inCommitTimestampEnablementTimestamp`` = the timestamp (PROTOCOL.md "In-Commit
        Timestamps"). Call once per commit attempt (the version and the previous commit change
        between attempts), after ``info.timestamp`` is set and before serializing
        ``[info, *actions]`` (commitInfo first, as the feature requires).
        """
        from .actions import Protocol

        metadata_action = next((a for a in actions if isinstance(a, Metadata)), None)
        protocol_action = next((a for a in actions if isinstance(a, Protocol)), None)
        before = read_snapshot if read_snapshot is not None else (self.snapshot(version - 1) if version > 0 else None)
        before_metadata = before.metadata if before is not None and before.version >= 0 else None
        metadata = metadata_action or before_metadata
        protocol = protocol_action or (before.protocol if before is not None and before.version >= 0 else None)
        if metadata is None or protocol is None or not in_commit_timestamps_enabled(metadata) \
                or "inCommitTimestamp" not in writer_features(protocol, metadata):
            return actions
        floor = None
        enabling = version > 0 and not in_commit_timestamps_enabled(before_metadata)
        if version > 0:
            data = self._read_commit_bytes(version - 1)
            if data is not None:
                body = self._first_commit_info(data) or {}
                previous = body.get("inCommitTimestamp") or body.get("timestamp")
                if previous is not None:
                    floor = int(previous) + 1
                if enabling:
                    mtime = self.store.status(self.commit_path(version - 1)).modification_time
                    floor = max(floor or 0, mtime + 1)
        stamp = max(int(info.timestamp or now_ms()), floor or 0)
        info.timestamp = stamp
        info.extra["inCommitTimestamp"] = stamp
        if not enabling:
            return actions
        conf = dict(metadata.configuration)
        conf[ICT_ENABLEMENT_VERSION] = str(version)
        conf[ICT_ENABLEMENT_TIMESTAMP] = str(stamp)
        stamped = Metadata(
            schema_string=metadata.schema_string, partition_columns=tuple(metadata.partition_columns),
            configuration=conf, id=metadata.id, name=metadata.name, description=metadata.description,
            format_provider=metadata.format_provider, format_options=dict(metadata.format_options),
            created_time=metadata.created_time, extra=dict(metadata.extra),
        )
        if metadata_action is None:
            return [*actions, stamped]
        return [stamped if a is metadata_action else a for a in actions]

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, version: int | None = None, *, cleanup: bool = True) -> str:
        """Write a checkpoint at ``version`` (latest by default); returns its path.

        A V2 checkpoint (UUID-named top-level Parquet file + sidecars) when the table has the
        v2Checkpoint feature and ``delta.checkpointPolicy = v2``, a classic single-file one
        otherwise. ``_last_checkpoint`` then names it (unless it already names a newer one), and
        with ``cleanup`` expired log files are removed (``cleanup_expired_logs``; a failure there
        is logged, never raised: the checkpoint stands)."""
        snap = self.snapshot(version)
        if snap.version < 0:
            raise VersionNotFoundError(f"Cannot checkpoint {self.table_path}: the table does not exist.")
        horizon = now_ms() - retention_ms(snap.metadata, "delta.deletedFileRetentionDuration", "interval 1 week")
        tombstones = [r for r in snap.tombstones if r.deletion_timestamp is None or r.deletion_timestamp > horizon]
        if uses_v2_checkpoints(snap.protocol, snap.metadata):
            path, last = self._write_v2_checkpoint(snap, tombstones)
        else:
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
            last = {"version": snap.version, "size": table.num_rows, "sizeInBytes": len(body),
                    "numOfAddFiles": snap.num_files}
        info = self._last_checkpoint_info()
        if info is None or info["version"] <= snap.version:
            self.store.write(os.path.join(self.log_path, LAST_CHECKPOINT), json.dumps(last).encode())
        if cleanup:
            try:
                self.cleanup_expired_logs(snap)
            except Exception:  # a failed cleanup costs disk space only
                _log.warning("log cleanup of %s failed", self.table_path, exc_info=True)
        return path

    def _write_v2_checkpoint(self, snap: Snapshot, tombstones: list) -> tuple[str, dict]:
        """Sidecars first, then the UUID-named top-level file that references them (a reader that
        finds the top-level file finds complete sidecars). Returns (path, _last_checkpoint body)."""
        sidecar_dir = os.path.join(self.log_path, SIDECAR_DIR)
        parts = sidecar_tables(snap.all_files, tombstones)
        sidecars = []
        written: list[str] = []
        try:
            for i, part in enumerate(parts, start=1):
                name = sidecar_name(snap.version, i, len(parts))
                body = checkpoint_bytes(part)
                if i == 1:
                    self.store.mkdirs(sidecar_dir)
                full = os.path.join(sidecar_dir, name)
                self.store.put_if_absent(full, body)
                written.append(full)
                sidecars.append(sidecar_action(name, len(body), self.store.status(full).modification_time))
        except OSError:  # a full disk midway: no top-level file will reference these
            for full in written:
                self.store.delete(full)
            raise
        sidecar_actions = sum(p.num_rows for p in parts)
        sidecar_bytes = sum(s["sizeInBytes"] for s in sidecars)
        cp_meta = checkpoint_metadata_action(snap.version, sidecar_actions=sidecar_actions,
                                             sidecar_bytes=sidecar_bytes, num_add_files=snap.num_files)
        top = checkpoint_table(
            snap.protocol, snap.metadata, snap.set_transactions.values(), snap.domain_metadata.values(), (), (),
            schema=V2_CHECKPOINT_SCHEMA,
            leading=[("checkpointMetadata", cp_meta), *(("sidecar", s) for s in sidecars)],
        )
        body = checkpoint_bytes(top)
        name = v2_checkpoint_name(snap.version)
        path = os.path.join(self.log_path, name)
        try:
            self.store.put_if_absent(path, body)
        except OSError:  # the top-level file did not fit: its sidecars are nobody's
            for full in written:
                self.store.delete(full)
            raise
        non_file = [{"protocol": snap.protocol.to_dict()}, {"metaData": snap.metadata.to_dict()}]
        non_file += [{"txn": t.to_dict()} for t in snap.set_transactions.values()]
        non_file += [{"domainMetadata": d.to_dict()} for d in snap.domain_metadata.values() if not d.removed]
        non_file.append({"checkpointMetadata": {"version": snap.version, "tags": dict(cp_meta["tags"])}})
        last = {
            "version": snap.version,
            "size": top.num_rows + sidecar_actions,
            "sizeInBytes": len(body) + sidecar_bytes,
            "numOfAddFiles": snap.num_files,
            "v2Checkpoint": {
                "path": name,
                "sizeInBytes": len(body),
                "modificationTime": self.store.status(path).modification_time,
                "nonFileActions": non_file,
                "sidecarFiles": [{k: v for k, v in s.items() if v is not None} for s in sidecars],
            },
        }
        return path, last

    def _compatibility_checkpoint(self, version: int, names: list[str]) -> str | None:
        """A classic-named copy of a UUID-named V2 checkpoint (same actions, same sidecars), so a
        reader that knows only classic names still finds the protocol once the commits before it are
        gone, and fails cleanly on the v2Checkpoint feature (Delta's compatibility checkpoint)."""
        if not names or not all(is_v2_checkpoint_name(n) for n in names):
            return None
        classic = os.path.join(self.log_path, checkpoint_name(version))
        if self.store.exists(classic):
            return None
        source = os.path.join(self.log_path, names[0])
        data = self.store.read(source)
        if source.endswith(".json"):
            from .checkpoint import json_checkpoint_table

            data = checkpoint_bytes(json_checkpoint_table(data))
        self.store.write(classic, data)
        return classic

    # ------------------------------------------------------------------ log cleanup
    def cleanup_expired_logs(self, snapshot: Snapshot | None = None, *, now: int | None = None) -> list[str]:
        """Delete the log files no version within ``delta.logRetentionDuration`` (30 days) needs,
        as PROTOCOL.md "Metadata Cleanup" and Delta's MetadataCleanup do; returns the deleted paths.

        Nothing happens when ``delta.enableExpiredLogCleanup`` is false. The cutoff is midnight UTC
        of (now - retention). A commit is expired when its file is older than the cutoff -- file
        times made monotonic by version, as Delta does, and for commits that carry an in-commit
        timestamp that timestamp too. The newest complete checkpoint at or below the newest
        expired commit is the cutoff checkpoint: it, its commit and everything after it are kept;
        every commit, checkpoint (any kind) and ``n.crc`` checksum below it goes, and every log
        compaction (``x.y.compacted.json``) with x at or below it, with their hidden ``.name.crc``
        siblings. When a
        checkpoint was deleted, sidecar files no remaining checkpoint references and older than
        the cutoff go too. Before anything is deleted, a UUID-named newest checkpoint gets a
        classic-named compatibility copy.
        """
        snap = snapshot if snapshot is not None else self.update()
        if snap.version < 0 or not expired_log_cleanup_enabled(snap.metadata):
            return []
        now = now_ms() if now is None else now
        cutoff_dt = dt.datetime.fromtimestamp((now - log_retention_ms(snap.metadata)) / 1000, dt.timezone.utc)
        cutoff = int(dt.datetime(cutoff_dt.year, cutoff_dt.month, cutoff_dt.day,
                                 tzinfo=dt.timezone.utc).timestamp() * 1000)
        listing = self._log_listing()
        if not listing[1] or not listing[2]:
            return []
        cutoff_commit = self._newest_expired_commit(listing[1], cutoff, snap)
        if cutoff_commit is None:
            return []
        return self._delete_before_checkpoint(listing, cutoff_commit, cutoff, snap)

    def _log_listing(self):
        """(files by name, [(version, status)] of commits in order, complete checkpoints by version)."""
        statuses = self.store.list_from(os.path.join(self.log_path, "0" * 20))
        by_name = {os.path.basename(s.path): s for s in statuses}
        commits = sorted((int(m.group(1)), by_name[m.group(0)]) for m in map(COMMIT_RE.match, by_name) if m)
        return by_name, commits, complete_checkpoints(by_name)

    def _newest_expired_commit(self, commits, cutoff: int, snap: Snapshot) -> int | None:
        """The newest commit older than ``cutoff`` (ms): file times made monotonic by version, as
        Delta does, and the in-commit timestamp where the table has them; None when none is."""
        ict = in_commit_timestamp_enablement(snap.metadata)
        # the newest expired commit: the expired ones are a prefix once file times are monotonic
        cutoff_commit = None
        last_time = None
        for version, status in commits:
            if cutoff_commit is not None and version != cutoff_commit + 1:
                break  # a gap: never reason across it
            mtime = status.modification_time
            last_time = mtime if last_time is None else max(mtime, last_time + 1)
            if last_time > cutoff:
                break
            if ict is not None and version >= ict[0]:
                body = self._first_commit_info(self.store.read(status.path)) or {}
                stamp = body.get("inCommitTimestamp")
                if stamp is not None and int(stamp) > cutoff:
                    break
            cutoff_commit = version
        return cutoff_commit

    def _delete_before_checkpoint(self, listing, cutoff_commit: int, cutoff: int, snap: Snapshot) -> list[str]:
        """Delete every log file below the newest complete checkpoint at or below ``cutoff_commit``."""
        by_name, commits, checkpoints = listing
        candidates = [v for v in checkpoints if v <= cutoff_commit]
        if not candidates:
            return []
        keep_from = max(candidates)
        latest_commit = commits[-1][0]
        present = {v for v, _ in commits}
        if any(v not in present for v in range(keep_from + 1, latest_commit + 1)):
            return []  # the commits after the cutoff checkpoint must all be there to rebuild every kept version
        doomed: list[str] = []
        deleted_checkpoint = False
        for name in sorted(by_name):
            version = None
            m = COMMIT_RE.match(name) or CRC_RE.match(name)
            if m:
                version = int(m.group(1))
            elif CHECKPOINT_RE.match(name):
                version = int(name[:20])
                if version < keep_from:
                    deleted_checkpoint = True
            else:
                c = COMPACTION_RE.match(name)
                if c and int(c.group(1)) <= keep_from:  # no reader can start it from a kept version
                    doomed.append(name)
                continue
            if version is not None and version < keep_from:
                doomed.append(name)
        if not doomed:
            return []
        newest = max(checkpoints)
        self._compatibility_checkpoint(newest, checkpoints[newest])
        deleted = []
        for name in doomed:  # oldest first: a crash midway leaves a log that still starts at a checkpoint
            path = os.path.join(self.log_path, name)
            if self.store.delete(path):
                deleted.append(path)
            self.store.delete(os.path.join(self.log_path, f".{name}.crc"))
        if deleted_checkpoint and (has_v2_checkpoint_feature(snap.protocol)
                                   or os.path.isdir(os.path.join(self.log_path, SIDECAR_DIR))):
            deleted += self._delete_unreferenced_sidecars(cutoff)
        return deleted

    def versions_within(self, retention_ms: int, *, now: int | None = None, snapshot: Snapshot | None = None) -> int:
        """The first version younger than ``retention_ms`` (commit file times, monotonic by version,
        as log cleanup reads them): every version from it on must stay; ``latest + 1`` when all are
        older."""
        snap = snapshot if snapshot is not None else self.update()
        cutoff = (now_ms() if now is None else now) - retention_ms
        _, commits, _ = self._log_listing()
        newest = self._newest_expired_commit(commits, cutoff, snap)
        return 0 if newest is None else newest + 1

    def commit_file_time(self, version: int) -> int:
        """The modification time (ms) of ``version``'s commit file (what log cleanup reads)."""
        name = f"{version:020d}.json"
        for status in self.store.list_from(os.path.join(self.log_path, name)):
            if os.path.basename(status.path) == name:
                return status.modification_time
        return now_ms()

    def truncate_history(self, first_kept: int, snapshot: Snapshot | None = None) -> list[str]:
        """DROP FEATURE ... TRUNCATE HISTORY: make the log start at version ``first_kept - 1`` (a
        checkpoint is written there when it has none) and delete every log file below it; returns
        the deleted paths. ``first_kept`` 0 truncates nothing."""
        snap = snapshot if snapshot is not None else self.update()
        if first_kept <= 0:
            return []
        boundary = min(first_kept - 1, snap.version)
        listing = self._log_listing()
        if boundary not in listing[2]:
            self.checkpoint(boundary, cleanup=False)
            listing = self._log_listing()
        return self._delete_before_checkpoint(listing, boundary, now_ms(), snap)

    def _delete_unreferenced_sidecars(self, cutoff: int) -> list[str]:
        """Sidecar files that no checkpoint in the log references and that are older than ``cutoff``
        (a younger one may belong to a checkpoint being written)."""
        sidecar_dir = os.path.join(self.log_path, SIDECAR_DIR)
        statuses = self.store.list_from(os.path.join(sidecar_dir, "0" * 20))
        if not statuses:
            return []
        referenced: set[str] = set()
        for status in self.store.list_from(os.path.join(self.log_path, "0" * 20)):
            name = os.path.basename(status.path)
            if CHECKPOINT_RE.match(name) and not re.match(r"^\d{20}\.checkpoint\.\d{10}\.\d{10}\.parquet$", name):
                try:
                    referenced |= referenced_sidecars(status.path, self.store.read)
                except FileNotFoundError:
                    continue
                except Exception:
                    return []  # a checkpoint that cannot be read might reference anything: keep them all
        deleted = []
        for status in statuses:
            name = os.path.basename(status.path)
            if name in referenced or status.modification_time >= cutoff or not name.endswith(".parquet"):
                continue
            if self.store.delete(status.path):
                deleted.append(status.path)
            self.store.delete(os.path.join(sidecar_dir, f".{name}.crc"))
        return deleted

    # ------------------------------------------------------------------ transactions
    def start_transaction(self, snapshot: Snapshot | None = None, *, max_attempts: int | None = None):
        """An optimistic transaction reading ``snapshot`` (the latest by default).

        ``max_attempts`` bounds how many versions the commit tries before giving up
        with ConcurrentWriteException (default DEFAULT_MAX_ATTEMPTS).
        """
        from ..txn.transaction import DEFAULT_MAX_ATTEMPTS, OptimisticTransaction

        snap = snapshot if snapshot is not None else self.update()
        if snap.protocol is not None:
            assert_writable(snap.protocol, snap.metadata, self.table_path, snap.version)
        snap.assert_readable()  # every write reads the table (its schema at least)
        return OptimisticTransaction(self, snap, max_attempts=max_attempts or DEFAULT_MAX_ATTEMPTS)
