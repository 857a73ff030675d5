"""Row positions -> per-file bitmaps, built in Spark.

A DML statement's deletion vectors need, per data file, the set of row positions it updates
or deletes. Bringing those positions to the driver as (file, row) rows costs ~100 bytes a row
(the file's path repeats) and Python memory in proportion: 5M rows for a DELETE of half a
10M-row table. Here Spark groups the positions by file and 32,768-row bucket and ORs them
into its native bitmaps (``bitmap_construct_agg``: 4 KiB a bucket, no Python worker), so what
reaches the driver is at most ``rows / 32768`` bitmaps per file, whatever the fraction changed
(a 10M-row table: ~1.2 MB, for one row or for all of them). The driver turns each file's
buckets into a ``pyroaring.BitMap64`` with numpy, ready to be OR-ed with the file's old vector
and serialised in Delta's format.

Spark's bitmap functions are 1-based (``bitmap_bucket_number(v)`` is ``(v - 1) // 32768 + 1``
and ``bitmap_bit_position(v)`` is ``(v - 1) % 32768`` for ``v > 0``); a row position ``p`` is
passed as ``p + 1``, so bucket ``b`` bit ``i`` is row ``(b - 1) * 32768 + i``. Bit ``i`` of a
bucket is bit ``i % 8`` of its byte ``i // 8`` (little-endian bit order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

BUCKET_ROWS = 32768  # rows one Spark bitmap covers (its 4 KiB buffer)

_BUCKET = "__isolde_bucket"
_BITMAP = "__isolde_bitmap"
_PAIRS = "__isolde_pairs"
UNPACK_BUCKETS = 4096  # buckets unpacked per numpy pass (16 MiB of Spark's buffers)


@dataclass
class RowBitmap:
    """One key's rows: ``rows`` (distinct positions) and ``pairs`` (input rows that named them:
    more than ``len(rows)`` when some position came twice, e.g. a target row two source rows
    matched)."""

    rows: "object"  # pyroaring.BitMap64
    pairs: int

    def __len__(self) -> int:
        return len(self.rows)


def bitmap_rows(df, keys: list, position: str):
    """``df`` grouped by ``keys`` and 32,768-row bucket of ``position``: one row per
    (keys, bucket) with the bucket's bitmap and how many input rows fell in it. Lazy."""
    from pyspark.sql import functions as F

    v = F.col(position) + F.lit(1)
    return df.where(F.col(position).isNotNull()).groupBy(
        *[F.col(k) for k in keys], F.bitmap_bucket_number(v).alias(_BUCKET)).agg(
        F.bitmap_construct_agg(F.bitmap_bit_position(v)).alias(_BITMAP), F.count(F.lit(1)).alias(_PAIRS))


def collect_bitmaps(df, keys: list, position: str) -> dict:
    """key tuple (one value per column of ``keys``) -> ``RowBitmap`` of the ``position`` values
    of ``df``'s rows with that key. One Spark job; positions must be >= 0 (row indexes, ids)."""
    from ..runtime.spark import without_adaptive

    return bitmaps_from_arrow(without_adaptive(bitmap_rows(df, keys, position)).toArrow(), keys)


def bitmaps_from_arrow(table, keys: list) -> dict:
    """The driver's half of ``collect_bitmaps``: Arrow rows of (keys, bucket, bitmap, pairs)."""
    import numpy as np
    from pyroaring import BitMap64

    out: dict = {}
    if table.num_rows == 0:
        return out
    key_values = list(zip(*[table.column(k).to_pylist() for k in keys]))
    buckets = table.column(_BUCKET).to_numpy(zero_copy_only=False).astype(np.int64)
    pairs = table.column(_PAIRS).to_numpy(zero_copy_only=False).astype(np.int64)
    bitmaps = table.column(_BITMAP).combine_chunks()
    ids: dict = {}  # key -> its number, in order of first appearance
    key_id = np.fromiter((ids.setdefault(k, len(ids)) for k in key_values), dtype=np.int64, count=len(key_values))
    # Spark's buffers (4 KiB each) as one byte matrix, a row per bucket, read in key order
    # 4,096 buckets (16 MiB) at a time. Only the non-zero bytes are unpacked: a MERGE's 50k
    # rows over 342 buckets of 10M rows unpack 51k bytes, not 11M bits (0.032 -> 0.010 s);
    # one numpy pass over many files' buckets, not one per file.
    all_bytes = _buffers(bitmaps)
    by_key = np.argsort(key_id, kind="stable")
    rows = [BitMap64() for _ in ids]
    for start in range(0, len(by_key), UNPACK_BUCKETS):
        part = by_key[start:start + UNPACK_BUCKETS]
        raw = all_bytes[part]
        bucket_of, byte = np.nonzero(raw)  # row-major: grouped by bucket, so by key
        if not len(byte):
            continue
        bits = np.unpackbits(raw[bucket_of, byte][:, None], axis=1, bitorder="little")
        which, bit = np.nonzero(bits)
        positions = ((buckets[part][bucket_of[which]] - 1) * BUCKET_ROWS + byte[which] * 8 + bit).astype(np.uint64)
        owners = key_id[part][bucket_of[which]]  # ascending: the buckets are grouped by key
        cuts = np.flatnonzero(np.diff(owners)) + 1
        for lo, hi in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(owners)]))):
            rows[int(owners[lo])].update(positions[lo:hi])
    pair_counts = np.zeros(len(ids), dtype=np.int64)
    np.add.at(pair_counts, key_id, pairs)
    for key, k in ids.items():
        out[key] = RowBitmap(rows[k], int(pair_counts[k]))
    return out


def bitmaps_of_table(table, keys: list, position: str) -> dict:
    """``collect_bitmaps``' answer for rows already on the driver (``few_rows``), an Arrow
    table: key tuple -> ``RowBitmap`` of the non-NULL ``position`` values of the rows with that
    key, grouped by Arrow, not row by row (a bounded collection brings tens of thousands)."""
    import pyarrow.compute as pc
    from pyroaring import BitMap64

    pairs = table.select(list(keys) + [position])
    pairs = pairs.filter(pc.is_valid(pairs.column(position)))
    if pairs.num_rows == 0:
        return {}
    grouped = pairs.group_by(list(keys), use_threads=False).aggregate([(position, "list")])
    lists = grouped.column(f"{position}_list").combine_chunks()
    key_columns = [grouped.column(k).to_pylist() for k in keys]
    out: dict = {}
    for i in range(grouped.num_rows):
        values = lists[i].values.to_numpy(zero_copy_only=False).astype("uint64")
        rows = BitMap64()
        rows.update(values)
        out[tuple(c[i] for c in key_columns)] = RowBitmap(rows, len(values))
    return out


def _buffers(bitmaps):
    """Spark's bitmap buffers (an Arrow binary array of equally long buffers) as a byte
    matrix, one row per buffer, read in place from the array's data buffer."""
    import numpy as np
    import pyarrow as pa

    offset_type = np.int64 if pa.types.is_large_binary(bitmaps.type) else np.int32
    _, offsets_buffer, data_buffer = bitmaps.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[bitmaps.offset:bitmaps.offset + len(bitmaps) + 1]
    width = int(offsets[1] - offsets[0])
    if bitmaps.null_count or not np.all(np.diff(offsets) == width):
        raise ValueError("isolde expects Spark's row bitmaps as equally long, non-null buffers")
    data = np.frombuffer(data_buffer, dtype=np.uint8)[int(offsets[0]):int(offsets[-1])]
    return data.reshape(len(bitmaps), width)


def positions_by_file(df, file_col: str, row_col: str, paths: Optional[list] = None) -> dict:
    """AddFile.path -> ``BitMap64`` of the ``row_col`` positions ``df`` holds for that file
    (only the files ``paths``, when given)."""
    from pyspark.sql import functions as F

    if paths is not None:
        df = df.where(F.col(file_col).isin(paths))
    return {key[0]: bm.rows for key, bm in collect_bitmaps(df, [file_col], row_col).items()}
