"""Per-file statistics for the log, from the Parquet footer only (no data pages read).

Delta's ``stats`` JSON: numRecords, and per column minValues / maxValues / nullCount.
They drive data skipping and conflict pruning, so every value written here must be
a true bound: strings are cut to 32 characters (the max then gets a tie-breaker so it
stays an upper bound), timestamps are written with millisecond precision (the max is
rounded up), and a column whose bounds cannot be trusted is simply left out.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
import math
from typing import Mapping, Optional

import pyarrow as pa
import pyarrow.parquet as pq

STRING_PREFIX_LENGTH = 32
_TIE_BREAKER = "\U0010ffff"


def _format_timestamp(value: dt.datetime, utc: bool, round_up: bool) -> str | None:
    """Millisecond precision (a max rounded up; None when that passes year 9999); the year
    always four digits (strftime writes year 1 as "1")."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if round_up and value.microsecond % 1000:
        try:
            value = value + dt.timedelta(microseconds=1000 - value.microsecond % 1000)
        except OverflowError:
            return None
    text = f"{value.year:04d}-" + value.strftime("%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    return text + ("Z" if utc else "")


def _json_bound(arrow_type: pa.DataType, value, is_max: bool):
    """A statistics value in Delta's JSON form, or None when it cannot be a safe bound."""
    if value is None:
        return None
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        if isinstance(value, bytes):
            try:  # a replaced character would be no bound of the bytes Spark compares
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                return None
        if len(value) > STRING_PREFIX_LENGTH:
            value = value[:STRING_PREFIX_LENGTH] + (_TIE_BREAKER if is_max else "")
        return value
    if pa.types.is_boolean(arrow_type):
        return bool(value)
    if pa.types.is_integer(arrow_type):
        return int(value)
    if pa.types.is_floating(arrow_type):
        value = float(value)
        return value if math.isfinite(value) else None  # JSON has no NaN / Infinity (delta-rs refuses them)
    if pa.types.is_decimal(arrow_type):
        if not isinstance(value, decimal.Decimal):
            return None
        as_float = float(value)
        return as_float if decimal.Decimal(repr(as_float)) == value else None
    if pa.types.is_date(arrow_type):
        if isinstance(value, dt.datetime):
            value = value.date()
        return value.isoformat() if isinstance(value, dt.date) else None
    if pa.types.is_timestamp(arrow_type):
        if isinstance(value, int):
            unit = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": 0.001}[arrow_type.unit]
            value = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=value * unit)
        if not isinstance(value, dt.datetime):
            return None
        return _format_timestamp(value, utc=arrow_type.tz is not None, round_up=is_max)
    return None  # binary, nested, time, interval: no min/max in Delta


def _leaf_index_by_name(metadata: pq.FileMetaData) -> dict[str, int]:
    schema = metadata.schema
    return {schema.column(i).path: i for i in range(metadata.num_columns)}


def stats_from_metadata(metadata: pq.FileMetaData, hidden: frozenset = frozenset(),
                        nan_free: frozenset = frozenset()) -> dict:
    """Delta stats for a Parquet footer (top-level columns only; floats get a min, and a max
    only when listed in ``nan_free``: footers leave NaN out, Spark orders it above every number).
    ``hidden``: physical columns outside the table schema (materialised row ids), no stats."""
    arrow_schema = metadata.schema.to_arrow_schema()
    leaves = _leaf_index_by_name(metadata)
    num_rows = metadata.num_rows
    min_values: dict = {}
    max_values: dict = {}
    null_count: dict = {}
    for arrow_field in arrow_schema:
        name = arrow_field.name
        index = leaves.get(name)
        if index is None or name in hidden:  # nested column: several leaves; its bounds are not meaningful
            continue
        lo = hi = None
        nulls = 0
        bounds_ok = True
        nulls_ok = True
        for rg in range(metadata.num_row_groups):
            column = metadata.row_group(rg).column(index)
            st = column.statistics
            if st is None:
                bounds_ok = nulls_ok = False
                break
            if st.has_null_count:
                nulls += st.null_count
            else:
                nulls_ok = False
            rg_rows = metadata.row_group(rg).num_rows
            if st.has_min_max:
                try:  # bounds Python cannot hold (bytes that are not UTF-8, dates past year 9999): none
                    raw_lo, raw_hi = st.min, st.max
                except (UnicodeDecodeError, ValueError, OverflowError):
                    bounds_ok = False
                    continue
                rg_lo = _json_bound(arrow_field.type, raw_lo, is_max=False)
                rg_hi = _json_bound(arrow_field.type, raw_hi, is_max=True)
                if rg_lo is None or rg_hi is None:
                    bounds_ok = False
                    continue
                lo = rg_lo if lo is None or rg_lo < lo else lo
                hi = rg_hi if hi is None or rg_hi > hi else hi
            elif not (st.has_null_count and st.null_count == rg_rows):
                bounds_ok = False  # a row group with values but no bounds
        if nulls_ok:
            null_count[name] = nulls
        if bounds_ok and lo is not None:
            min_values[name] = lo
            if not pa.types.is_floating(arrow_field.type) or name in nan_free:
                # Parquet bounds skip NaN, which Spark orders above every number: no safe max
                # unless the file was read and holds no NaN
                max_values[name] = hi
    return {"numRecords": num_rows, "minValues": min_values, "maxValues": max_values, "nullCount": null_count}


#: AddFile tag of files isolde wrote: the floating-point columns (as the stats name them) that
#: hold no NaN, so their maxValues are true upper bounds (other engines' float maxima may not be)
NAN_FREE_TAG = "isolde.nanFree"


def nan_free_columns(tags: Optional[Mapping[str, str]]) -> frozenset:
    """The column names an AddFile's NAN_FREE_TAG lists (empty when absent or unreadable)."""
    text = (tags or {}).get(NAN_FREE_TAG)
    return _listed_names(text) if text else frozenset()


@functools.lru_cache(maxsize=1024)
def _listed_names(text: str) -> frozenset:
    """A tag's names, parsed once per distinct text (every scan asks for every file's)."""
    try:
        names = json.loads(text)
    except ValueError:
        return frozenset()
    return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) else frozenset()


def _nan_free_columns(local_path: str, metadata: pq.FileMetaData, hidden: frozenset,
                      table: Optional[pa.Table] = None) -> frozenset:
    """Top-level float / double columns of a file without a NaN (their data read: footers cannot
    tell). ``table``: the Arrow table the file was written from, looked at in place of the file."""
    import pyarrow.compute as pc

    floats = [f.name for f in metadata.schema.to_arrow_schema()
              if pa.types.is_floating(f.type) and f.name not in hidden]
    if not floats or metadata.num_rows == 0:
        return frozenset()
    if table is None:
        table = pq.read_table(local_path, columns=floats)
    return frozenset(name for name in floats if not pc.any(pc.is_nan(table.column(name))).as_py())


def file_stats_and_tags(local_path: str, hidden: frozenset = frozenset(), *,
                        written: Optional[tuple] = None) -> tuple[int, str, dict]:
    """(numRecords, stats JSON, AddFile tags) of a Parquet file isolde wrote: the footer, plus
    its floating-point columns read once to find those without NaN (a true max, NAN_FREE_TAG).
    ``written``: (footer, Arrow table) of a file pyarrow has just written, used instead of
    reading the file back (its writer's footer is the file's)."""
    metadata, table = written if written is not None else (pq.read_metadata(local_path), None)
    nan_free = _nan_free_columns(local_path, metadata, hidden, table)
    stats = stats_from_metadata(metadata, hidden, nan_free)
    listed = sorted(n for n in nan_free if n in stats["maxValues"])
    tags = {NAN_FREE_TAG: json.dumps(listed, separators=(",", ":"))} if listed else {}
    return stats["numRecords"], json.dumps(stats, separators=(",", ":"), ensure_ascii=False, allow_nan=False), tags


def file_stats(local_path: str, hidden: frozenset = frozenset()) -> tuple[int, str]:
    """(numRecords, stats JSON) of a Parquet file, reading only its footer."""
    metadata = pq.read_metadata(local_path)
    stats = stats_from_metadata(metadata, hidden)
    return stats["numRecords"], json.dumps(stats, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
