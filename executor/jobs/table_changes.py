"""Reading Delta's change data feed: ``table_changes('t', start [, end])``.

Per PROTOCOL.md ("Reader Requirements for AddCDCFile"), for each version in the range:

* a version with ``cdc`` actions is read from those files only (their ``_change_type`` column
  says what each row is);
* any other version is derived from its ``add`` / ``remove`` actions with dataChange=true:
  a file removed with no re-add -> its live rows (old deletion vector applied) are 'delete';
  a file added with no remove -> its live rows are 'insert'; a file removed and re-added with
  another deletion vector (Delta's DELETE with deletion vectors) -> the rows the new vector
  covers and the old did not are 'delete' (and the reverse 'insert');
* OPTIMIZE-like commits (dataChange=false) contribute nothing.

Every row gets ``_commit_version`` and ``_commit_timestamp`` (``commit_timestamps``). Columns
are those of the end version's schema.
"""

from __future__ import annotations

import datetime as dt
from typing import Callable, Optional, Union

from pyspark.sql import DataFrame, functions as F
from pyspark.sql import types as T

from isolde.errors import AnalysisError
from ..rows import cdf
from ..catalog import schema as S
from ..log.actions import AddCDCFile, AddFile, Metadata, RemoveFile
from ..rows.scan import FILE_COL, ROW_COL, scan

Bound = Union[int, str, None]


def _is_version(value) -> bool:
    return isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit())


def _invalid_timestamp(value) -> AnalysisError:
    return AnalysisError(f"The provided timestamp ('{value}') cannot be converted to a valid timestamp.",
                         error_class="DELTA_TIMESTAMP_INVALID", sqlstate="42816")


def iso_timestamp_ms(value: str) -> int:
    """An ISO timestamp string in epoch milliseconds; no offset means UTC."""
    from ..log.delta_log import _to_ms

    text = value.strip()
    try:
        parsed = dt.datetime.fromisoformat(text.replace(" ", "T", 1) if " " in text else text)
    except ValueError:
        raise _invalid_timestamp(value) from None
    return _to_ms(parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.timezone.utc))


def session_timestamp_ms(ctx) -> Callable[[str], int]:
    """Timestamp strings read as Spark reads a TIMESTAMP literal (no offset: the session time
    zone), through the session's evaluator when it has one."""
    from ..log.delta_log import _to_ms

    evaluate = getattr(ctx, "eval_timestamp", None)
    if not callable(evaluate):
        return iso_timestamp_ms

    def to_ms(value: str) -> int:
        try:
            return _to_ms(evaluate("'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"))
        except Exception:
            raise _invalid_timestamp(value) from None

    return to_ms


def commit_timestamps(log, versions: list[int]) -> dict[int, int]:
    """version -> _commit_timestamp in ms: the log's commit time (inCommitTimestamp from its
    enablement on, else commitInfo.timestamp, else the commit file's time) -- the same instant
    DESCRIBE HISTORY shows and timestamp ranges are resolved with, and what delta-rs's
    load_cdf returns (Delta Spark takes the file's time when there is no inCommitTimestamp)."""
    ict = log.in_commit_timestamp_enablement()
    return {v: log._commit_timestamp(v, ict) for v in versions}


def resolve_range(log, start: Bound, end: Bound, timestamp_ms: Callable[[str], int] = iso_timestamp_ms
                  ) -> tuple[int, int]:
    """(first version, last version) of a table_changes range, checked as Delta checks it."""
    latest = log.update().version
    if start is None:
        raise AnalysisError("table_changes needs a starting version or timestamp.",
                            error_class="DELTA_NO_START_FOR_CDC_READ", sqlstate="42601")
    if _is_version(start):
        first = int(start)
    else:
        ts = timestamp_ms(str(start))
        if ts > log.commit_timestamp(latest):
            raise AnalysisError(
                f"Timestamp {start} is after the table's latest version ({latest}). Use a timestamp at or before "
                f"the latest commit.", error_class="DELTA_TIMESTAMP_GREATER_THAN_COMMIT", sqlstate="42816")
        first = _first_version_at_or_after(log, ts, latest)
    if first < 0:
        raise AnalysisError(f"CDC range from start {first} to end {end} was invalid. Start must be at least 0.",
                            error_class="DELTA_INVALID_CDC_RANGE", sqlstate="22003")
    if first > latest:
        raise AnalysisError(f"Start version {first} for change data feed exceeds the latest table version {latest}.",
                            error_class="DELTA_CDC_START_VERSION_AFTER_LATEST", sqlstate="22003")
    if end is None:
        last = latest
    elif _is_version(end):
        last = min(int(end), latest)
        if int(end) < first:
            raise AnalysisError(f"CDC range from start {first} to end {int(end)} was invalid. End cannot be before "
                                "start.", error_class="DELTA_INVALID_CDC_RANGE", sqlstate="22003")
    else:
        ts = timestamp_ms(str(end))
        last = latest if ts >= log.commit_timestamp(latest) else log.version_at_timestamp(ts)
        if last < first:
            raise AnalysisError(f"CDC range from start {first} to end {last} was invalid. End cannot be before start.",
                                error_class="DELTA_INVALID_CDC_RANGE", sqlstate="22003")
    return first, last


def _first_version_at_or_after(log, ts: int, latest: int) -> int:
    try:
        v = log.version_at_timestamp(ts)
    except Exception:  # before the earliest commit: the range starts at the earliest version
        return log.earliest_available_version()
    return v if log.commit_timestamp(v) >= ts else v + 1


def _commits(log, first: int, last: int) -> list[tuple[int, list]]:
    """(version, actions) of every commit in the range, refusing versions whose metadata had
    the change data feed off (DELTA_MISSING_CHANGE_DATA)."""
    metadata = log.snapshot(first).metadata
    out = []
    for v in range(first, last + 1):
        actions = log.read_commit(v)
        metadata = next((a for a in actions if isinstance(a, Metadata)), None) or metadata
        if not cdf.enabled(metadata):
            raise AnalysisError(
                f"Error getting change data for range [{first} , {last}] as change data was not recorded for "
                f"version [{v}]. If you've enabled change data feed on this table, use `DESCRIBE HISTORY` to see "
                "when it was first enabled. Otherwise, to start recording change data, use `ALTER TABLE "
                f"table_name SET TBLPROPERTIES ({cdf.PROPERTY}=true)`.",
                error_class="DELTA_MISSING_CHANGE_DATA", sqlstate="KD002")
        out.append((v, actions))
    return out


def _as_add(f, deletion_vector="keep") -> AddFile:
    dv = f.deletion_vector if deletion_vector == "keep" else deletion_vector
    return AddFile(path=f.path, partition_values=dict(f.partition_values or {}), size=int(f.size or 0),
                   modification_time=0, data_change=True, stats=getattr(f, "stats", None), deletion_vector=dv)


def _positions(table_path: str, dv):
    from pyroaring import BitMap64

    if dv is None:
        return BitMap64()
    from ..log.deletion_vectors import read_deletion_vector

    return BitMap64(read_deletion_vector(table_path, dv))


def _version_changes(ctx, snap, table_path: str, struct, actions: list) -> Optional[DataFrame]:
    """The change rows (table columns + _change_type) of one commit; None when it has none."""
    spark = ctx.spark
    cols = [S.column(f.name) for f in struct.fields]
    cdcs = [a for a in actions if isinstance(a, AddCDCFile)]
    if cdcs:
        with_type = cdf.Viewed(snap, cdf.with_change_type(snap.metadata))
        return scan(ctx, with_type, table_path, files=[_as_add(a, None) for a in cdcs])
    adds = {a.path: a for a in actions if isinstance(a, AddFile) and a.data_change}
    removes = {a.path: a for a in actions if isinstance(a, RemoveFile) and a.data_change}
    parts = []
    only_removed = [r for p, r in removes.items() if p not in adds]
    only_added = [a for p, a in adds.items() if p not in removes]
    if only_removed:
        parts.append(scan(ctx, snap, table_path, files=[_as_add(r) for r in only_removed])
                     .select(*cols, F.lit(cdf.DELETE).alias(cdf.CHANGE_TYPE)))
    if only_added:
        parts.append(scan(ctx, snap, table_path, files=[_as_add(a) for a in only_added])
                     .select(*cols, F.lit(cdf.INSERT).alias(cdf.CHANGE_TYPE)))
    # a file re-added with another deletion vector: the rows whose deletion state changed
    changed = []  # (path, row, change type)
    files = []
    for path in sorted(set(adds) & set(removes)):
        old, new = _positions(table_path, removes[path].deletion_vector), _positions(table_path,
                                                                                   adds[path].deletion_vector)
        rows = [(path, int(r), cdf.DELETE) for r in (new - old)] + [(path, int(r), cdf.INSERT) for r in (old - new)]
        if rows:
            changed.extend(rows)
            files.append(_as_add(adds[path], None))
    if changed:
        schema = T.StructType([T.StructField(FILE_COL, T.StringType()), T.StructField(ROW_COL, T.LongType()),
                               T.StructField(cdf.CHANGE_TYPE, T.StringType())])
        keys = spark.createDataFrame(changed, schema)
        rows = scan(ctx, snap, table_path, files=files, with_row_ids=True)
        parts.append(rows.join(F.broadcast(keys), [FILE_COL, ROW_COL]).select(*cols, F.col(cdf.CHANGE_TYPE)))
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def table_changes(ctx, handle, start: Bound, end: Bound = None) -> DataFrame:
    """The change rows of ``handle``'s table from ``start`` to ``end`` (versions, or timestamp
    strings), with ``_change_type``, ``_commit_version`` and ``_commit_timestamp``."""
    log = handle.log
    first, last = resolve_range(log, start, end, session_timestamp_ms(ctx))
    commits = _commits(log, first, last)
    snap = log.snapshot(last)
    struct = S.metadata_schema(snap.metadata)
    stamps = commit_timestamps(log, [v for v, _ in commits])
    parts = []
    for version, actions in commits:
        rows = _version_changes(ctx, snap, handle.path, struct, actions)
        if rows is None:
            continue
        parts.append(rows.select(*[S.column(f.name) for f in struct.fields], F.col(cdf.CHANGE_TYPE),
                                 F.lit(version).cast("long").alias(cdf.COMMIT_VERSION),
                                 F.expr(f"timestamp_millis({int(stamps[version])})").alias(cdf.COMMIT_TIMESTAMP)))
    if not parts:
        schema = T.StructType(list(struct.fields) + [
            T.StructField(cdf.CHANGE_TYPE, T.StringType()), T.StructField(cdf.COMMIT_VERSION, T.LongType()),
            T.StructField(cdf.COMMIT_TIMESTAMP, T.TimestampType())])
        return ctx.spark.createDataFrame([], schema)
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out
