"""Which files a streaming read of a Delta table delivers, batch by batch (no Spark here).

A stream is a sequence of *entries*, one per data file: first, unless a starting version or
timestamp is given, every live file of the snapshot the query starts from (its "initial
snapshot", sorted as Delta sorts it), then, commit by commit, the files each commit added with
``dataChange = true`` in log order. An ``Offset`` (version, index) says that every entry up to
and including ``index`` of ``version`` was delivered; index -1 means none of that version yet.
Offsets are normalised to (next version, -1) when a version is used up, so they stay valid as
the table grows.

Batch 0 is the one batch whose start Spark does not record: it asks ``initialOffset()`` again
each time it needs that start (to plan batch 0, to run it, and, after a restart that finds batch
0 planned but not committed, from a new reader). So the initial offset is decided once per query
run (the initial snapshot is the version the query reads with, as Delta's snapshot at source
init), and when that start moves with the table (initial snapshot, 'latest', a timestamp after
every commit) batch 0 stays inside its start's version so that its recorded end says where it
began (``first_batch_start``).

Commits are checked as Delta's DeltaSource checks them:
* files removed with dataChange = true (DELETE / UPDATE / MERGE) fail the stream, once
  every file before that commit is delivered
  (``DELTA_SOURCE_TABLE_IGNORE_CHANGES``, or ``DELTA_SOURCE_IGNORE_DELETE`` when the commit
  added nothing) unless ``skipChangeCommits`` (or, for deletes only, ``ignoreDeletes``) is set;
  then the whole commit is skipped;
* dataChange = false commits (OPTIMIZE) deliver nothing;
* a commit after the version the query started from whose metadata (schema, partitioning,
  properties) or protocol differs from the one the query reads with stops the stream: every
  file before it is delivered, then ``StreamMetadataChangedError`` names the version and asks
  for a restart, after which the query reads with the new metadata from that version on.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from isolde.errors import AnalysisError, ExecutionError
from ..log.actions import AddFile, Metadata, Protocol, RemoveFile

#: Delta's default admission limit when neither maxFilesPerTrigger nor maxBytesPerTrigger is set
DEFAULT_MAX_FILES = 1000
OFFSET_FORMAT = 1


class StreamSourceError(ExecutionError):
    """A streaming read refused a commit of its source table.

    Shown as ``[ERROR_CLASS] message``, as Delta shows it: the text crosses a process boundary
    (Spark's Python planner worker) inside a StreamingQueryException, and ``errors.from_stream``
    finds the class there again."""

    def __str__(self) -> str:
        return f"[{self.error_class}] {self.message}"


class StreamChangeCommitError(StreamSourceError):
    """A commit deleted or rewrote rows: an append-only stream cannot express that."""


class StreamMetadataChangedError(StreamSourceError):
    """The source table's metadata or protocol changed: the query must restart to read on."""

    error_class = "DELTA_SCHEMA_CHANGED_WITH_VERSION"
    sqlstate = "KD007"


@dataclass(frozen=True, order=True)
class Offset:
    version: int
    index: int = -1
    initial_snapshot: bool = False

    def to_dict(self) -> dict:
        return {"sourceVersion": OFFSET_FORMAT, "reservoirVersion": self.version, "index": self.index,
                "isStartingVersion": self.initial_snapshot}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Offset":
        return cls(int(d["reservoirVersion"]), int(d.get("index", -1)), bool(d.get("isStartingVersion", False)))

    @property
    def position(self) -> tuple[int, int]:
        return (self.version, self.index)


@dataclass(frozen=True)
class Entry:
    """One data file the stream delivers, at its place in the stream."""

    version: int
    index: int
    add: AddFile
    initial_snapshot: bool = False


def _truthy(value) -> bool:
    return str(value).strip().lower() == "true"


def _positive_int(options: Mapping[str, str], key: str) -> Optional[int]:
    raw = options.get(key.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise AnalysisError(f"Invalid value '{raw}' for option '{key}': it must be a positive integer.",
                            error_class="DELTA_INVALID_FORMAT_FROM_SOURCE_VERSION", sqlstate="22023")
    return value


_UNITS = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40}


def parse_bytes(text: str) -> int:
    """'10m', '1g', '2048' -> bytes (Spark's byte-string forms, no unit = bytes)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS | {"": 1}:
        raise AnalysisError(f"Invalid value '{text}' for option 'maxBytesPerTrigger': use a size such as "
                            "'10m' or '1g'.", error_class="INVALID_CONF_VALUE", sqlstate="22023")
    value = int(m.group(1)) * (_UNITS.get(m.group(2).lower(), 1))
    if value <= 0:
        raise AnalysisError(f"Invalid value '{text}' for option 'maxBytesPerTrigger': it must be positive.",
                            error_class="INVALID_CONF_VALUE", sqlstate="22023")
    return value


def _to_ms(text: str) -> int:
    """A startingTimestamp option ('2024-01-01', '2024-01-01 10:00:00', ISO with an offset, or
    epoch milliseconds) as epoch ms; a value without an offset is UTC."""
    raw = str(text).strip()
    if raw.isdigit():
        return int(raw)
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise AnalysisError(f"The provided timestamp ('{text}') cannot be converted to a valid timestamp.",
                            error_class="DELTA_TIMESTAMP_INVALID", sqlstate="42816") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return int(value.timestamp() * 1000)


@dataclass(frozen=True)
class StreamOptions:
    starting_version: Optional[str] = None  # an integer, or "latest"
    starting_timestamp: Optional[str] = None
    max_files: Optional[int] = None
    max_bytes: Optional[int] = None
    skip_change_commits: bool = False
    ignore_deletes: bool = False

    #: the options isolde's streaming source reads (Delta's names); any other is refused when the
    #: query is defined, never silently ignored
    KNOWN = ("startingVersion", "startingTimestamp", "maxFilesPerTrigger", "maxBytesPerTrigger",
             "skipChangeCommits", "ignoreDeletes")

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "StreamOptions":
        opts = {str(k).lower(): v for k, v in options.items()}
        known = {k.lower() for k in cls.KNOWN} | {"path"}
        for key in options:
            if str(key).lower() in known:
                continue
            if str(key).lower() == "readchangefeed":
                raise AnalysisError(
                    "readChangeFeed is not supported by isolde's streaming source yet: it would stream the "
                    "table's rows, not its changes. Read the change data feed in batches instead: "
                    "table_changes('t', start[, end]) or s.read.option('readChangeFeed', 'true').option('startingVersion', n).table('t').",
                    error_class="DELTA_UNSUPPORTED_STREAM_READ_OPTION", sqlstate="0AKDC")
            from isolde.errors import did_you_mean

            raise AnalysisError(f"Unknown streaming read option '{key}'.{did_you_mean(str(key), cls.KNOWN)} "
                                f"isolde's streaming source reads: {', '.join(cls.KNOWN)}.",
                                error_class="DELTA_UNKNOWN_READ_OPTION", sqlstate="42616")
        version = opts.get("startingversion")
        timestamp = opts.get("startingtimestamp")
        if version is not None and timestamp is not None:
            raise AnalysisError("Please either provide 'startingVersion' or 'startingTimestamp', not both.",
                                error_class="DELTA_STARTING_VERSION_AND_TIMESTAMP_BOTH_SET", sqlstate="42613")
        if version is not None:
            text = str(version).strip().lower()
            if text != "latest" and not (text.isdigit()):
                raise AnalysisError(f"Invalid value '{version}' for option 'startingVersion': use a version "
                                    "number (0 or more) or 'latest'.",
                                    error_class="DELTA_INVALID_FORMAT_FROM_SOURCE_VERSION", sqlstate="22023")
            version = text
        if timestamp is not None:
            _to_ms(timestamp)  # refuse a bad value when the query is defined, not at its first batch
        max_bytes = opts.get("maxbytespertrigger")
        return cls(starting_version=version, starting_timestamp=timestamp,
                   max_files=_positive_int(opts, "maxFilesPerTrigger"),
                   max_bytes=parse_bytes(max_bytes) if max_bytes is not None else None,
                   skip_change_commits=_truthy(opts.get("skipchangecommits", "false")),
                   ignore_deletes=_truthy(opts.get("ignoredeletes", "false")))

    def file_limit(self) -> Optional[int]:
        if self.max_files is None and self.max_bytes is None:
            return DEFAULT_MAX_FILES
        return self.max_files


def _plain_schema(schema_string: Optional[str]) -> Any:
    """The schema JSON without values that change on plain writes (identity high-water marks)."""
    def strip(node):
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "delta.identity.highWaterMark"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(json.loads(schema_string)) if schema_string else None


def metadata_key(metadata: Optional[Metadata], protocol: Optional[Protocol]) -> tuple:
    """What a stream reads with: schema, partition columns, properties and protocol."""
    meta = None if metadata is None else (
        json.dumps(_plain_schema(metadata.schema_string), sort_keys=True),
        tuple(metadata.partition_columns), tuple(sorted((metadata.configuration or {}).items())))
    proto = None if protocol is None else json.dumps(protocol.to_dict(), sort_keys=True)
    return (meta, proto)


def _changed_parts(old: tuple, new: tuple) -> list[str]:
    parts = []
    if old[0] is None or new[0] is None or old[0][0] != new[0][0]:
        parts.append("schema")
    if old[0] is not None and new[0] is not None:
        if old[0][1] != new[0][1]:
            parts.append("partition columns")
        if old[0][2] != new[0][2]:
            parts.append("table properties")
    if old[1] != new[1]:
        parts.append("protocol")
    return parts


def metadata_changed_error(table_path: str, version: int, parts: Iterable[str]) -> StreamMetadataChangedError:
    what = ", ".join(parts) or "metadata"
    return StreamMetadataChangedError(
        f"Detected a metadata change ({what}) in version {version} of the streaming source table at "
        f"path {table_path}. The stream has delivered every change before version {version} and stopped. "
        "Please restart the query from the same checkpoint to continue with the new metadata. If this "
        "issue repeats across query restarts without making progress, you have made an incompatible "
        "schema change and need to start your query from scratch using a new checkpoint directory.")


def change_commit_error(table_path: str, version: int, removed: RemoveFile, added_any: bool) -> StreamChangeCommitError:
    if added_any:
        return StreamChangeCommitError(
            f"Detected a data update (for example {removed.path}) in the source table at version {version}. "
            "This is currently not supported. If you'd like to ignore updates, set the option "
            "'skipChangeCommits' to 'true'. If you would like the data update to be reflected, please restart "
            f"this query with a fresh checkpoint directory. The source table can be found at path {table_path}.",
            error_class="DELTA_SOURCE_TABLE_IGNORE_CHANGES", sqlstate="0A000")
    return StreamChangeCommitError(
        f"Detected deleted data (for example {removed.path}) from streaming source at version {version}. "
        "This is currently not supported. If you'd like to ignore deletes, set the option 'ignoreDeletes' "
        f"to 'true'. The source table can be found at path {table_path}.",
        error_class="DELTA_SOURCE_IGNORE_DELETE", sqlstate="0A000")


class _MetadataChange(Exception):
    def __init__(self, version: int, parts: list[str]):
        super().__init__(version)
        self.version = version
        self.parts = parts


class StreamPlan:
    """The entries of one table's stream and the offsets that split it into batches.

    ``read_version`` / ``read_key``: the table version (and its ``metadata_key``) the query reads
    with; commits up to it never stop the stream (the query already reads their metadata).
    """

    def __init__(self, log, options: StreamOptions, read_version: int, read_key: tuple):
        self.log = log
        self.options = options
        self.read_version = read_version
        self.read_key = read_key
        self._cache: dict[tuple[int, bool], list[Entry]] = {}
        self._initial: Optional[Offset] = None
        self._initial_moves = False

    @classmethod
    def at_latest(cls, log, options: StreamOptions) -> "StreamPlan":
        snap = log.update()
        if snap.version < 0:
            raise AnalysisError(f"`{log.table_path}` is not a Delta table.", error_class="DELTA_TABLE_NOT_FOUND",
                                sqlstate="42P01")
        return cls(log, options, snap.version, metadata_key(snap.metadata, snap.protocol))

    @property
    def table_path(self) -> str:
        return self.log.table_path

    def latest_version(self) -> int:
        return self.log.update().version

    # ------------------------------------------------------------------ where a query starts
    def initial_offset(self) -> Offset:
        """Where a query without a checkpoint starts, decided once per plan (one plan per query run).

        Spark asks ``initialOffset()`` for the start of batch 0 more than once (for
        ``latestOffset`` and again for ``partitions``), with commits landing in between: an answer
        computed from the latest version each time would move, and batch 0 would be planned from
        one start and read from another (the initial snapshot was lost that way). The initial
        snapshot is the version the query reads with (Delta's snapshot at source init)."""
        if self._initial is None:
            self._initial, self._initial_moves = self._compute_initial_offset()
        return self._initial

    def _compute_initial_offset(self) -> tuple[Offset, bool]:
        """The initial offset, and whether another run of the query would start elsewhere (a start
        that follows the table: the initial snapshot, 'latest', a timestamp after every commit)."""
        opts = self.options
        if opts.starting_version is not None:
            latest = self.latest_version()
            if opts.starting_version == "latest":
                return Offset(latest + 1), True
            version = int(opts.starting_version)
            if version > latest:
                raise AnalysisError(
                    f"Cannot time travel Delta table to version {version}. Available versions: "
                    f"[{self.log.earliest_available_version()}, {latest}].",
                    error_class="DELTA_VERSION_NOT_FOUND", sqlstate="22003")
            return Offset(version), False
        if opts.starting_timestamp is not None:
            latest = self.latest_version()
            version = self._first_version_at_or_after(_to_ms(opts.starting_timestamp), latest)
            return Offset(version), version > latest
        return Offset(self.read_version, -1, True), True

    def _opens_the_stream(self, start: Offset) -> bool:
        """Is ``start`` the start of batch 0 from a start that moves with the table? Such a batch
        stays inside the start's version so that its end alone says where it began: after a
        restart Spark replays a planned-but-unfinished batch 0 from a *new* ``initialOffset()``."""
        if start.index != -1:
            return False
        return start.initial_snapshot or (self._initial_moves and start == self._initial)

    def first_batch_start(self, start: Offset, end: Offset) -> Offset:
        """The real start of a batch Spark reads from ``start`` (an ``initialOffset()`` answer
        when it is batch 0) to ``end`` (recorded in the checkpoint, maybe by an earlier run)."""
        if start.index != -1:
            return start  # recorded by Spark: exact
        if start.initial_snapshot:
            # batch 0 read the initial snapshot only: its end names that snapshot's version (an
            # end past it, (v + 1, -1), means the whole snapshot v; Delta's getBatch rule)
            return Offset(end.version if end.initial_snapshot else end.version - 1, -1, True)
        if start.position > end.position:
            # 'latest' / a timestamp moved on since batch 0 was planned: it read version end.version
            # only, and kept that version in its end (nothing at all when end is (v, -1))
            return Offset(end.version)
        return start

    def _first_version_at_or_after(self, ts: int, latest: int) -> int:
        earliest = self.log.earliest_available_version()
        if self.log.commit_timestamp(earliest) >= ts:
            return earliest
        if self.log.commit_timestamp(latest) < ts:
            return latest + 1
        version = self.log.version_at_timestamp(ts)  # the last version committed at or before ts
        return version if self.log.commit_timestamp(version) >= ts else version + 1

    # ------------------------------------------------------------------ the entries of one version
    def entries(self, version: int, initial_snapshot: bool) -> list[Entry]:
        key = (version, initial_snapshot)
        if key not in self._cache:
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = (self._snapshot_entries(version) if initial_snapshot
                                else self._commit_entries(version))
        return self._cache[key]

    def _snapshot_entries(self, version: int) -> list[Entry]:
        snap = self.log.snapshot(version)
        files = sorted(snap.all_files, key=lambda a: (a.modification_time or 0, a.path))
        return [Entry(version, i, a, True) for i, a in enumerate(files)]

    def _commit_entries(self, version: int) -> list[Entry]:
        actions = self.log.read_commit(version)
        if version > self.read_version:
            metadata = next((a for a in actions if isinstance(a, Metadata)), None)
            protocol = next((a for a in actions if isinstance(a, Protocol)), None)
            if metadata is not None or protocol is not None:
                read_meta, read_proto = self.read_key
                new = metadata_key(metadata, protocol)
                new = (new[0] if metadata is not None else read_meta, new[1] if protocol is not None else read_proto)
                if new != self.read_key:
                    raise _MetadataChange(version, _changed_parts(self.read_key, new))
        adds = [a for a in actions if isinstance(a, AddFile) and a.data_change]
        removes = [a for a in actions if isinstance(a, RemoveFile) and a.data_change]
        if removes:
            if self.options.skip_change_commits or (self.options.ignore_deletes and not adds):
                return []
            raise change_commit_error(self.table_path, version, removes[0], bool(adds))
        return [Entry(version, i, a) for i, a in enumerate(adds)]

    # ------------------------------------------------------------------ batches
    def next_offset(self, start: Offset, *, max_files: Optional[int] = None, max_bytes: Optional[int] = None,
                    until_version: Optional[int] = None) -> Offset:
        """The end of the next batch after ``start``: at most ``max_files`` files / about
        ``max_bytes`` bytes (a batch always takes at least one file, and whole files), never past
        ``until_version`` (default: the latest). ``start`` itself when there is nothing new.

        Batch 0 from a moving start (see ``_opens_the_stream``) ends within the start's version:
        the initial snapshot, or the first commit after 'latest'; that commit's end stays
        (version, last index) when it is used up, so the end still names the version."""
        last = self.latest_version() if until_version is None else until_version
        opening = self._opens_the_stream(start)
        if opening:
            last = min(last, start.version)
        version, index, initial = start.version, start.index, start.initial_snapshot
        if 0 <= index and version <= last and self._used_up(version, index, initial):
            version, index, initial = version + 1, -1, False  # go on from the next version
        origin = Offset(version, index, initial)
        taken = 0
        size = 0
        end = origin
        while version <= last:
            try:
                entries = self.entries(version, initial)
            except (_MetadataChange, StreamChangeCommitError) as refused:
                if (version, -1) > origin.position:
                    return Offset(version)  # deliver what comes before it first
                if isinstance(refused, StreamChangeCommitError):
                    raise
                raise metadata_changed_error(self.table_path, refused.version, refused.parts) from None
            for e in entries[index + 1:]:
                if taken and ((max_files is not None and taken >= max_files)
                              or (max_bytes is not None and size >= max_bytes)):
                    return end
                taken += 1
                size += e.add.size or 0
                end = Offset(version, e.index, initial)
            if opening and not initial and entries:
                return end  # batch 0 after 'latest': (version, last index), see above
            version, index, initial = version + 1, -1, False
            end = Offset(version)
        return end if end.position > origin.position else start

    def _used_up(self, version: int, index: int, initial: bool) -> bool:
        """Is (version, index) the last entry of its version (an end that names its version)?"""
        try:
            return index >= len(self.entries(version, initial)) - 1
        except (_MetadataChange, StreamChangeCommitError):
            return False

    def batch(self, start: Offset, end: Offset) -> list[Entry]:
        """The entries after ``start`` up to and including ``end``."""
        out: list[Entry] = []
        start = self.first_batch_start(start, end)
        version, index, initial = start.version, start.index, start.initial_snapshot
        while (version, -1) < end.position or (version == end.version and index < end.index):
            try:
                entries = self.entries(version, initial)
            except _MetadataChange as change:
                raise metadata_changed_error(self.table_path, change.version, change.parts) from None
            stop = end.index if version == end.version else len(entries) - 1
            out.extend(e for e in entries[index + 1:stop + 1])
            version, index, initial = version + 1, -1, False
        return out
