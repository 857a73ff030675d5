"""The rows of OPTIMIZE ... ZORDER BY and of liquid clustering, in curve order.

Per group of input files (one partition for ZORDER; the chosen files of a clustered table):
one sampling job collects up to ``SAMPLE_ROWS`` values of the clustering columns; each
column's quantiles become its range boundaries (so skewed values, dates, decimals and
strings sharing a long prefix spread over the ranges like uniform integers); each row gets a
range id per column (curves.with_range_ids), the ids become one key -- Z-order bit
interleaving, or a Hilbert curve for clustering (curve_keys.py) -- and each row goes to the
file its key falls in, by key cut points taken from the same sample (``repartitionById``:
one shuffle, no second sampling pass), each file sorted by the key. All of it is Spark SQL
expressions; no Python touches a row.

On a table with row tracking enabled each output row keeps its stable row id and row commit
version in the materialised columns, so a concurrent deletion vector on an input can be
carried onto the outputs (txn/row_id_layout.py).
"""

from __future__ import annotations

import math
from typing import Sequence

from ..catalog import schema as S

#: sampled rows per group: about 30 per range of 1,023, and 375 per file of 80
SAMPLE_ROWS = 30_000
#: range ids per column are capped at 2**MAX_RANGE_BITS (Delta's default is 1,000 ranges)
MAX_RANGE_BITS = 10
ZORDER, HILBERT = "zorder", "hilbert"


def num_output_files(files: Sequence, target_bytes: int) -> int:
    """Files to cut a group into: its live bytes over the target size, rounded up."""
    live = 0.0
    for f in files:
        rows = f.num_records or 0
        deleted = f.deletion_vector.cardinality if f.deletion_vector is not None else 0
        live += (f.size or 0) * ((rows - deleted) / rows if rows else 1.0)
    return max(1, math.ceil(live / max(1, target_bytes)))


def _sorted_sample(values: list) -> list:
    """Non-null values in Spark's order (NaN above every number)."""
    present = [v for v in values if v is not None]
    return sorted(present, key=lambda v: (1, 0) if isinstance(v, float) and v != v else (0, v))


def with_stable_row_ids(df, files: Sequence, keys: Sequence[str], hidden: tuple[str, str]):
    """``df`` (a ``scan(..., with_file_keys=True, hidden=...)``) with its materialised row id and
    commit version filled in where null: the file's ``baseRowId`` + position, its
    ``defaultRowCommitVersion`` (PROTOCOL.md's stable values, now kept in the file)."""
    from pyspark.sql import functions as F

    from ..rows.scan import ROW_COL, file_value

    row_id, version = hidden
    bases = [int(f.base_row_id) if f.base_row_id is not None else -1 for f in files]
    versions = [int(f.default_row_commit_version) if f.default_row_commit_version is not None else -1 for f in files]
    base_of, version_of = file_value(keys, bases), file_value(keys, versions)
    base = F.when(base_of >= 0, base_of + F.col(ROW_COL))
    default_version = F.when(version_of >= 0, version_of)
    return df.withColumn(row_id, F.coalesce(S.column(row_id), base)) \
        .withColumn(version, F.coalesce(S.column(version), default_version))


def curve_ordered(df, columns: Sequence[str], out_columns: Sequence[str], *, curve: str, num_files: int,
                  live_rows: int, seed: int = 17):
    """``df``'s rows in ``num_files`` partitions of consecutive curve keys over ``columns``, each
    sorted by the key; only ``out_columns`` are kept. One sampling job, then one shuffle."""
    import numpy as np
    from pyspark.sql import functions as F

    from . import curve_keys, curves

    fraction = min(1.0, SAMPLE_ROWS / max(1, live_rows))
    sample = df.select(*[S.column(c) for c in columns])
    if fraction < 1.0:
        sample = sample.sample(withReplacement=False, fraction=fraction, seed=seed)
    rows = sample.collect()
    bits = min(curves.range_bits(len(columns)), MAX_RANGE_BITS)
    boundaries = [curves.quantile_boundaries(_sorted_sample([r[i] for r in rows]), curves.max_ranges(bits))
                  for i in range(len(columns))]
    sample_ids = np.array([[curves.range_id(r[i], boundaries[i]) for i in range(len(columns))] for r in rows],
                          dtype=np.int64).reshape(len(rows), len(columns))
    ids = [f"__isolde_rid{i}" for i in range(len(columns))]
    df = curves.with_range_ids(df, list(columns), [boundaries], ids)
    if curve == HILBERT and len(columns) > 1:
        df = curve_keys.with_hilbert_key(df, ids, bits, "__isolde_key")
        sample_keys = curve_keys.hilbert_keys(sample_ids, bits)
    else:
        df = df.withColumn("__isolde_key", curves.zorder_key(ids, bits))
        sample_keys = curve_keys.zorder_keys(sample_ids, bits)
    key = F.col("__isolde_key")
    cuts = curve_keys.file_cuts(sample_keys, num_files)
    if cuts:
        df = curves.with_range_ids(df, ["__isolde_key"], [[cuts]], ["__isolde_file"])
        df = df.repartitionById(len(cuts) + 1, F.col("__isolde_file") - 1)
    else:
        df = df.coalesce(1)
    return df.sortWithinPartitions(key).select(*[S.column(c) for c in out_columns])
