"""The rows of OPTIMIZE ... ZORDER BY and of liquid clustering, in curve order.

Per group of input files (one partition for ZORDER; the chosen files of a clustered table):
one sampling job collects up to ``SAMPLE_ROWS`` values of the clustering columns; each
column's quantiles become its range boundaries (so skewed values, dates, decimals and
strings sharing a long prefix spread over the ranges like uniform integers); each row gets a
range id per column (curves.with_range_ids), the ids become one key -- Z-order bit
interleaving, or a Hilbert curve for clustering -- and the rows are range-partitioned by the
key into the planned number of files, each file sorted by it. All of it is Spark SQL
expressions; no Python touches a row.

On a table with row tracking enabled each output row keeps its stable row id and row commit
version in the materialised columns, so a concurrent deletion vector on an input can be
carried onto the outputs (txn/row_id_layout.py).
"""

from __future__ import annotations

import math
from typing import Sequence

#: sampled rows per group: enough for 1,024 ranges per column with ~100 rows each
SAMPLE_ROWS = 100_000
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

    from isolde.executor.scan import ROW_COL, file_value

    row_id, version = hidden
    bases = [int(f.base_row_id) if f.base_row_id is not None else -1 for f in files]
    versions = [int(f.default_row_commit_version) if f.default_row_commit_version is not None else -1 for f in files]
    base_of, version_of = file_value(keys, bases), file_value(keys, versions)
    base = F.when(base_of >= 0, base_of + F.col(ROW_COL))
    default_version = F.when(version_of >= 0, version_of)
    return df.withColumn(row_id, F.coalesce(F.col(f"`{row_id}`"), base)) \
        .withColumn(version, F.coalesce(F.col(f"`{version}`"), default_version))


def curve_ordered(df, columns: Sequence[str], out_columns: Sequence[str], *, curve: str, num_files: int,
                  live_rows: int, seed: int = 17):
    """``df``'s rows range-partitioned into ``num_files`` partitions by the curve key over
    ``columns``, each sorted by it; only ``out_columns`` are kept."""
    from pyspark.sql import functions as F

    from isolde.executor.jobs import curves

    fraction = min(1.0, SAMPLE_ROWS / max(1, live_rows))
    sample = df.select(*[F.col(f"`{c}`") for c in columns])
    if fraction < 1.0:
        sample = sample.sample(withReplacement=False, fraction=fraction, seed=seed)
    rows = sample.collect()
    bits = min(curves.range_bits(len(columns)), MAX_RANGE_BITS)
    boundaries = [curves.quantile_boundaries(_sorted_sample([r[i] for r in rows]), curves.max_ranges(bits))
                  for i in range(len(columns))]
    ids = [f"__isolde_rid{i}" for i in range(len(columns))]
    df = curves.with_range_ids(df, list(columns), [boundaries], ids)
    if curve == HILBERT and len(columns) > 1:
        df = curves.with_hilbert_key(df, ids, bits, "__isolde_key")
    else:
        df = df.withColumn("__isolde_key", curves.zorder_key(ids, bits))
    key = F.col("__isolde_key")
    df = df.repartitionByRange(num_files, key) if num_files > 1 else df.coalesce(1)
    return df.sortWithinPartitions(key).select(*[F.col(f"`{c}`") for c in out_columns])
