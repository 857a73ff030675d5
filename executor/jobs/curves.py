"""Space-filling-curve keys for ``OPTIMIZE t ZORDER BY (...)`` and liquid clustering.

Why range ids, not raw bytes: each column is first replaced by its quantile *range id* (cut
points from a sample), so skewed values, dates, decimals and strings that share a long prefix
spread over the id space like uniform ints. Interleaving raw bytes lets a hot value or a
16-character common prefix use up every leading bit of the key, and then each file spans the
whole range of the column (delta-rs issue #2844). Why Hilbert as well as Z-order: consecutive
Hilbert indices are grid neighbours, so a run of keys (one file) covers a compact box instead
of Z-order's jumps across the space, and file skipping on any clustered column prunes more.

Everything on rows is Spark SQL expressions (codegen'd, no Python UDF). A range id is a binary
search written as one projection per halving step, ``lo += IF(cuts[lo + step - 1] <= v, step,
0)``: each step reads ``lo`` twice, so Catalyst's CollapseProject keeps the steps apart and the
plan grows linearly with log2(#cuts) instead of exponentially. The cut points reach the plan as
one broadcast row of typed arrays (built by ``createDataFrame`` with the column's own type, so
strings, dates, timestamps, decimals and doubles compare in Spark's ordering), not as literal
expressions: 65k literals cost seconds of driver time and megabytes of plan text.

Range ids: NULL -> 0, a non-null value v -> 1 + (number of cut points <= v), i.e. 1 +
``bisect_right`` in Spark's ordering (NaN equal to itself and above every other double, -0.0 ==
0.0). With ``c`` cut points the ids are 0..c+1; cut points from ``quantile_boundaries(sample,
max_ranges(bits))`` keep them below ``2**bits``, as ``zorder_key`` and ``with_hilbert_key`` need.

The pure-Python ``zorder_index`` / ``hilbert_index`` / ``range_id`` are the references the
Spark expressions are tested against.
"""

from __future__ import annotations

import bisect
import functools

from pyspark.sql import Column, functions as F, types as T

#: at most 2**16 ranges per column: finer ranges cost sample size and buy no extra skipping
MAX_BITS = 16
#: the key is a BIGINT kept non-negative, so Spark's signed sort is the curve order
MAX_KEY_BITS = 63
_PRIVATE = "__isolde_curve"


# ---------------------------------------------------------------- pure Python (references)


def _spark_key(value):
    """Sort key in Spark's order within one type: NaN equals NaN and sorts above all doubles
    (Python's NaN compares false with everything); -0.0 == 0.0 holds in both."""
    return (False, value) if value == value else (True, 0)


def quantile_boundaries(sorted_values: list, num_ranges: int) -> list:
    """Cut points for at most ``num_ranges`` ranges from a sample of one column's non-null values,
    SORTED in Spark's order (as ``ORDER BY`` then ``collect()`` return them; NaN last).

    The values at positions ``k * len // num_ranges`` (k = 1 .. num_ranges-1), duplicates removed,
    and a cut equal to the sample's minimum dropped too: it would open a range no sampled value
    falls in. So heavy skew yields fewer ranges, never empty ones; the result is strictly
    increasing with at most ``num_ranges - 1`` values.
    """
    if num_ranges < 1:
        raise ValueError(f"num_ranges must be at least 1, not {num_ranges}")
    n = len(sorted_values)
    if n == 0:
        return []
    cuts, last = [], _spark_key(sorted_values[0])
    for k in range(1, num_ranges):
        value = sorted_values[k * n // num_ranges]
        key = _spark_key(value)
        if key != last:
            cuts.append(value)
            last = key
    return cuts


def range_id(value, boundaries: list) -> int:
    """NULL -> 0, else 1 + the number of cut points <= value (``with_range_ids`` for one group)."""
    if value is None:
        return 0
    return 1 + bisect.bisect_right(boundaries, _spark_key(value), key=_spark_key)


def max_ranges(bits: int) -> int:
    """The ``num_ranges`` for ``quantile_boundaries`` whose ids (0 = NULL, 1..num_ranges) fit ``bits``."""
    return (1 << bits) - 1


def range_bits(num_columns: int, max_total_bits: int = 62) -> int:
    """Bits per column so ``num_columns * bits <= max_total_bits``: at most 16, at least 1."""
    if not 1 <= num_columns <= max_total_bits:
        raise ValueError(f"cannot cluster {num_columns} columns into a {max_total_bits}-bit key "
                         f"(1 to {max_total_bits} columns)")
    return min(MAX_BITS, max_total_bits // num_columns)


def zorder_index(coords: list[int], bits: int) -> int:
    """The bits of ``coords`` interleaved, most significant bit of coordinate 0 first."""
    key = 0
    for j in range(bits - 1, -1, -1):
        for c in coords:
            key = (key << 1) | ((c >> j) & 1)
    return key


def _axes_to_transpose(x: list[int], bits: int) -> list[int]:
    """Skilling's AxesToTranspose (AIP Conf. Proc. 707, 2004): the Hilbert index in 'transposed'
    form, whose interleaved bits are the index. ``with_hilbert_key`` unrolls the same steps."""
    n = len(x)
    q = 1 << (bits - 1)
    while q > 1:  # inverse undo
        p = q - 1
        for i in range(n):
            if x[i] & q:
                x[0] ^= p
            else:
                t = (x[0] ^ x[i]) & p
                x[0] ^= t
                x[i] ^= t
        q >>= 1
    for i in range(1, n):  # Gray encode
        x[i] ^= x[i - 1]
    t = _gray_fix(x[n - 1], bits)
    return [v ^ t for v in x]


def _gray_fix(last: int, bits: int) -> int:
    t = 0
    for j in range(1, bits):
        if last >> j & 1:
            t ^= (1 << j) - 1
    return t


def hilbert_index(coords: list[int], bits: int) -> int:
    """Index of ``coords`` (each in [0, 2**bits)) on the n-dimensional Hilbert curve; n == 1 -> the
    coordinate itself."""
    if len(coords) == 1:
        return coords[0]
    return zorder_index(_axes_to_transpose(list(coords), bits), bits)


# ---------------------------------------------------------------- Spark expressions


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _ref(df, name: str) -> Column:
    """A top-level column by its exact name (dots allowed); anything else as Spark parses it
    (``a.b`` into a struct)."""
    return F.col(_quote(name)) if name in df.columns else F.col(name)


def _private_names(df, role: str, count: int) -> list[str]:
    taken = set(df.columns)
    serial = 0
    while any(f"{_PRIVATE}_{role}{serial}_{i}" in taken for i in range(count)):
        serial += 1
    return [f"{_PRIVATE}_{role}{serial}_{i}" for i in range(count)]


def _cut_rows(df, names: list[str], types: list, cuts: list, grouped: bool):
    """One row holding each column's cut points as an array of the column's own type (an array
    of such arrays, indexed by group, when grouped), ready to broadcast."""
    def array_type(t):
        return T.ArrayType(T.ArrayType(t)) if grouped else T.ArrayType(t)

    schema = T.StructType([T.StructField(n, array_type(t)) for n, t in zip(names, types)])
    row = tuple(per_group if grouped else per_group[0] for per_group in cuts)
    return df.sparkSession.createDataFrame([row], schema)


def _highest_power_of_two(n: int) -> int:
    return 1 << (n.bit_length() - 1) if n else 0


def with_range_ids(df, columns: list[str], boundaries: list[list[list]], out_columns: list[str],
                   group_column: str | None = None):
    """``df`` plus one INT range id per column in ``out_columns``: NULL -> 0, a value v -> 1 + the
    number of cut points <= v in Spark's ordering (``range_id``), so ids lie in [0, #cuts + 1].

    ``boundaries[g][i]`` are column i's cut points (sorted, non-null, from ``quantile_boundaries``)
    for group g, the 0-based INT value of ``group_column``; without a group column there is one
    group. A row whose group is NULL or has no entry sees no cut points (a non-null value -> 1).
    Cost: ceil(log2(#cuts + 1)) projections, one comparison per column each.
    """
    if len(out_columns) != len(columns):
        raise ValueError(f"{len(columns)} columns but {len(out_columns)} output columns")
    grouped = group_column is not None
    if not grouped and len(boundaries) != 1:
        raise ValueError(f"without a group column boundaries holds one group, not {len(boundaries)}")
    if any(len(group) != len(columns) for group in boundaries):
        raise ValueError(f"every group needs cut points for each of the {len(columns)} columns")
    values = [_ref(df, c) for c in columns]
    types = [df.select(v).schema[0].dataType for v in values]
    cuts = [[group[i] for group in boundaries] for i in range(len(columns))]
    arrays, los = _private_names(df, "cuts", len(columns)), _private_names(df, "lo", len(columns))
    out = df.crossJoin(F.broadcast(_cut_rows(df, arrays, types, cuts, grouped)))
    group = _ref(df, group_column).cast("int") if grouped else None
    cut_arrays = [F.get(F.col(a), group) if grouped else F.col(a) for a in arrays]
    widths = [max(len(per_group) for per_group in per_column) for per_column in cuts]
    out = out.withColumns({lo: F.lit(0) for lo in los})
    step = _highest_power_of_two(max(widths, default=0))
    while step:
        out = out.withColumns({
            lo: F.col(lo) + F.when(F.get(arr, F.col(lo) + (step - 1)) <= v, step).otherwise(0)
            for lo, arr, v, width in zip(los, cut_arrays, values, widths) if width >= step
        })
        step >>= 1
    out = out.withColumns({
        name: F.when(v.isNull(), 0).otherwise(F.col(lo) + 1).cast("int")
        for name, lo, v in zip(out_columns, los, values)
    })
    return out.drop(*arrays, *los)


def _bits_of(column: Column, bit: int) -> Column:
    return column.bitwiseAND(F.lit(1 << bit))


def zorder_key(range_id_columns: list[str], bits: int) -> Column:
    """One BIGINT with the ids' low ``bits`` bits interleaved, most significant bit of column 0
    first (``zorder_index``): a single OR of shifted bit masks."""
    n = len(range_id_columns)
    if n * bits > MAX_KEY_BITS:
        raise ValueError(f"{n} columns x {bits} bits do not fit a {MAX_KEY_BITS}-bit key")
    ids = [F.col(_quote(c)).cast("long") for c in range_id_columns]
    # bit j of column i lands at j*n + (n-1-i), i.e. it moves left by j*(n-1) + (n-1-i)
    terms = [F.shiftleft(_bits_of(c, j), j * (n - 1) + (n - 1 - i))
             for j in range(bits) for i, c in enumerate(ids)]
    return functools.reduce(Column.bitwiseOR, terms, F.lit(0).cast("long"))


def _inverse_undo_step(x: list[str], i: int, q: int) -> dict:
    """One (q, i) step of AxesToTranspose's first loop as column updates."""
    x0, xi, p = F.col(x[0]), F.col(x[i]), q - 1
    hit = xi.bitwiseAND(q) != 0
    if i == 0:
        return {x[0]: F.when(hit, x0.bitwiseXOR(p)).otherwise(x0)}
    t = x0.bitwiseXOR(xi).bitwiseAND(p)
    return {x[0]: F.when(hit, x0.bitwiseXOR(p)).otherwise(x0.bitwiseXOR(t)),
            x[i]: F.when(hit, xi).otherwise(xi.bitwiseXOR(t))}


def with_hilbert_key(df, range_id_columns: list[str], bits: int, out_column: str):
    """``df`` plus a BIGINT Hilbert index over the ids' low ``bits`` bits (``hilbert_index``):
    Skilling's AxesToTranspose unrolled into (bits-1)*n + n + 1 projections, then interleaved."""
    n = len(range_id_columns)
    if n * bits > MAX_KEY_BITS:
        raise ValueError(f"{n} columns x {bits} bits do not fit a {MAX_KEY_BITS}-bit key")
    mask = (1 << bits) - 1
    if n == 1:
        return df.withColumn(out_column, F.col(_quote(range_id_columns[0])).cast("long").bitwiseAND(mask))
    x = _private_names(df, "x", n)
    (fix,) = _private_names(df, "t", 1)
    out = df.withColumns({xi: F.col(_quote(c)).cast("long").bitwiseAND(mask) for xi, c in zip(x, range_id_columns)})
    q = 1 << (bits - 1)
    while q > 1:
        for i in range(n):
            out = out.withColumns(_inverse_undo_step(x, i, q))
        q >>= 1
    for i in range(1, n):  # Gray encode
        out = out.withColumn(x[i], F.col(x[i]).bitwiseXOR(F.col(x[i - 1])))
    last = F.col(x[n - 1])
    out = out.withColumn(fix, functools.reduce(
        Column.bitwiseXOR,
        [F.when(_bits_of(last, j) != 0, (1 << j) - 1).otherwise(0) for j in range(1, bits)],
        F.lit(0).cast("long")))
    out = out.withColumns({xi: F.col(xi).bitwiseXOR(F.col(fix)) for xi in x})
    return out.withColumn(out_column, zorder_key(x, bits)).drop(*x, fix)
