"""Space-filling-curve keys for ``OPTIMIZE t ZORDER BY (...)`` and liquid clustering.

Why range ids, not raw bytes: each column is first replaced by its quantile *range id* (cut
points from a sample), so skewed values, dates, decimals and strings that share a long prefix
spread over the id space like uniform ints. Interleaving raw bytes lets a hot value or a
16-character common prefix use up every leading bit of the key, and then each file spans the
whole range of the column (delta-rs issue #2844). Why Hilbert as well as Z-order: consecutive
Hilbert indices are grid neighbours, so a run of keys (one file) covers a compact box instead
of following Z-order's jumps across the space, and skipping on any clustered column prunes more.

Range ids: NULL -> 0; a non-null v -> 1 + (number of cut points <= v), i.e. 1 + ``bisect_right``
in Spark's ordering (NaN equal to itself and above every other double, -0.0 == 0.0). With c cut
points the ids are 0..c+1; ``quantile_boundaries(sample, max_ranges(bits))`` gives at most
``2**bits - 2`` cut points, so the ids fit the ``bits`` that ``zorder_key`` and
``with_hilbert_key`` read (they use only the low ``bits`` bits of each id).

How the rows are computed (Spark SQL expressions only, codegen'd, no Python UDF):

* A range id is a search down the implicit binary search tree of the padded cut points: one
  projection per tree level, ``k = 2*k + IF(level_l[k] <= v, 1, 0)``, ending with k = the
  number of cut points <= v (padding slots lie past the end of a level array: ``get`` gives
  NULL, the step goes left, as for +infinity). Each step reads ``k`` twice, so Catalyst's
  CollapseProject keeps the steps apart: the plan grows by one projection per level, never
  exponentially.
* Level l holds 2**l cut points, all levels together each cut point once. Each level reaches
  the plan as a scalar subquery over a one-row local relation of typed arrays (built by
  ``createDataFrame`` with the column's own type, so strings, dates, timestamps, decimals and
  doubles compare in Spark's ordering): the plan text stays small, the task carries every cut
  point once, and rows never carry the arrays (a broadcast join column would be copied into
  every row at every step wherever whole-stage codegen is off, e.g. tables with more than
  ``spark.sql.codegen.maxFields`` columns). Building 65k ``F.lit`` values instead took ~13 s.
* The Hilbert and Z-order steps are branch-free bitwise projections, kept small: HotSpot does
  not JIT-compile a method above 8000 bytes of bytecode (``-XX:-DontCompileHugeMethods``
  lifts that), and one whole-stage method holds every projection of a stage.

The pure-Python ``range_id`` / ``zorder_index`` / ``hilbert_index`` are the references the
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
    """The low ``bits`` bits of ``coords`` interleaved, most significant bit of coordinate 0 first."""
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
                x[0] ^= p  # invert
            else:
                t = (x[0] ^ x[i]) & p  # exchange
                x[0] ^= t
                x[i] ^= t
        q >>= 1
    for i in range(1, n):  # Gray encode
        x[i] ^= x[i - 1]
    t = 0
    for j in range(1, bits):
        if x[n - 1] >> j & 1:
            t ^= (1 << j) - 1
    return [v ^ t for v in x]


def hilbert_index(coords: list[int], bits: int) -> int:
    """Index of ``coords`` (each in [0, 2**bits)) on the n-dimensional Hilbert curve; n == 1 -> the
    coordinate itself."""
    if len(coords) == 1:
        return coords[0]
    return zorder_index(_axes_to_transpose([c & ((1 << bits) - 1) for c in coords], bits), bits)


# ---------------------------------------------------------------- range ids in Spark


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


def _tree_level(cuts: list, height: int, level: int) -> list:
    """Level ``level`` of the perfect binary search tree over ``cuts`` padded to 2**height - 1,
    left to right, without the padding (always a suffix of the level)."""
    span = 1 << (height - level)
    return cuts[span // 2 - 1::span]


def _local_relation(spark, schema: T.StructType, row: tuple):
    """A one-row DataFrame over a LocalRelation: a scalar subquery over it runs no Spark job."""
    from pyspark.sql.classic.dataframe import DataFrame

    staged = spark.createDataFrame([row], schema)
    return DataFrame(spark._jsparkSession.createDataFrame(staged._jdf.collectAsList(), staged._jdf.schema()), spark)


def _level_lookups(spark, types: list, cuts: list, heights: list, grouped: bool) -> list[list[Column]]:
    """Per column, per tree level, a scalar subquery yielding that level's cut points: an
    array of the column's type, or one such array per group (indexed by group) when grouped."""
    fields, values = [], []
    for i, (dtype, per_group, height) in enumerate(zip(types, cuts, heights)):
        element = T.ArrayType(dtype, containsNull=False)
        for level in range(height):
            arrays = [_tree_level(group_cuts, height, level) for group_cuts in per_group]
            fields.append(T.StructField(f"c{i}_l{level}", T.ArrayType(element, False) if grouped else element, False))
            values.append(arrays if grouped else arrays[0])
    if not fields:
        return [[] for _ in types]
    relation = _local_relation(spark, T.StructType(fields), tuple(values))
    return [[relation.select(f"c{i}_l{level}").scalar() for level in range(height)]
            for i, height in enumerate(heights)]


def with_range_ids(df, columns: list[str], boundaries: list[list[list]], out_columns: list[str],
                   group_column: str | None = None):
    """``df`` plus one INT range id per column in ``out_columns``: NULL -> 0, a value v -> 1 + the
    number of cut points <= v in Spark's ordering (``range_id``), so ids lie in [0, #cuts + 1].

    ``boundaries[g][i]`` are column i's cut points (sorted, non-null, from ``quantile_boundaries``)
    for group g, the 0-based INT value of ``group_column``; without a group column there is one
    group. A row whose group is NULL or has no entry sees no cut points (a non-null value -> 1).
    Cost: bit_length(#cuts) projections, one comparison per column each.
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
    cuts = [[list(group[i]) for group in boundaries] for i in range(len(columns))]
    heights = [max(len(c) for c in per_group).bit_length() for per_group in cuts]
    lookups = _level_lookups(df.sparkSession, types, cuts, heights, grouped)
    group = _ref(df, group_column).cast("int") if grouped else None
    nodes = _private_names(df, "k", len(columns))
    out = df.withColumns({k: F.lit(0) for k in nodes})
    for level in range(max(heights, default=0)):
        out = out.withColumns({
            k: F.col(k) * 2 + _go_right(F.get(levels[level], group) if grouped else levels[level], F.col(k), v)
            for k, levels, v in zip(nodes, lookups, values) if level < len(levels)
        })
    out = out.withColumns({
        name: F.when(v.isNull(), 0).otherwise(F.col(k) + 1).cast("int")
        for name, k, v in zip(out_columns, nodes, values)
    })
    return out.drop(*nodes)


def _go_right(level: Column, node: Column, value: Column) -> Column:
    """1 when the node's cut point is <= value; 0 for NULL (padding past the level's end, or a
    NULL value)."""
    return F.when(F.get(level, node) <= value, 1).otherwise(0)


# ---------------------------------------------------------------- curve keys in Spark


def _check_key_bits(num_columns: int, bits: int) -> None:
    if num_columns < 1 or not 1 <= bits <= MAX_BITS or num_columns * bits > MAX_KEY_BITS:
        raise ValueError(f"{num_columns} columns x {bits} bits do not fit a {MAX_KEY_BITS}-bit key "
                         f"(1 to {MAX_BITS} bits per column)")


def _spread_rounds(n: int, bits: int) -> list[tuple[int, int]]:
    """(shift, mask) rounds ``x = (x | x << shift) & mask`` that move bit j of x to bit n*j: the
    generalised 'magic numbers' bit spread, log2(bits) rounds instead of one term per bit."""
    rounds = []
    chunk = 1 << ((bits - 1).bit_length() - 1) if bits > 1 else 0
    while chunk:
        mask = functools.reduce(int.__or__, (1 << (j + (n - 1) * (j & ~(chunk - 1))) for j in range(bits)))
        rounds.append((chunk * (n - 1), mask))
        chunk >>= 1
    return rounds


def _spread(x: Column, n: int, bits: int) -> Column:
    for shift, mask in _spread_rounds(n, bits):
        x = x.bitwiseOR(F.shiftleft(x, shift)).bitwiseAND(F.lit(mask))
    return x


def zorder_key(range_id_columns: list[str], bits: int) -> Column:
    """One BIGINT with the ids' low ``bits`` bits interleaved, most significant bit of column 0
    first (``zorder_index``): each id's bits spread n apart, shifted into place, OR-ed."""
    n = len(range_id_columns)
    _check_key_bits(n, bits)
    low = F.lit((1 << bits) - 1)
    spread = [F.shiftleft(_spread(F.col(_quote(c)).cast("long").bitwiseAND(low), n, bits), n - 1 - i)
              for i, c in enumerate(range_id_columns)]
    return functools.reduce(Column.bitwiseOR, spread)


def _all_ones_if_bit(x: Column, bit: int) -> Column:
    """-1 (all ones) when bit ``bit`` of x is set, else 0: shift it to the sign, shift back."""
    return F.shiftright(F.shiftleft(x, 63 - bit), 63)


def _inverse_undo(x: list[str], i: int, bit: int) -> dict:
    """AxesToTranspose's step for q = 2**bit and axis i, branch-free: if bit q of x_i is set,
    invert x_0's low bits, else exchange the low bits of x_0 and x_i."""
    x0, xi, low = F.col(x[0]), F.col(x[i]), F.lit((1 << bit) - 1)
    hit = _all_ones_if_bit(xi, bit)
    if i == 0:
        return {x[0]: x0.bitwiseXOR(hit.bitwiseAND(low))}
    diff = x0.bitwiseXOR(xi)
    return {x[0]: x0.bitwiseXOR(diff.bitwiseOR(hit).bitwiseAND(low)),
            x[i]: xi.bitwiseXOR(diff.bitwiseAND(low).bitwiseAND(F.bitwise_not(hit)))}


def with_hilbert_key(df, range_id_columns: list[str], bits: int, out_column: str):
    """``df`` plus a BIGINT Hilbert index over the ids' low ``bits`` bits (``hilbert_index``):
    Skilling's AxesToTranspose unrolled into about (bits-1)*n small projections, then the
    transposed coordinates interleaved as by ``zorder_key``."""
    n = len(range_id_columns)
    _check_key_bits(n, bits)
    low = F.lit((1 << bits) - 1)
    if n == 1:
        return df.withColumn(out_column, F.col(_quote(range_id_columns[0])).cast("long").bitwiseAND(low))
    x = _private_names(df, "x", n)
    (fix,) = _private_names(df, "t", 1)
    out = df.withColumns({xi: F.col(_quote(c)).cast("long").bitwiseAND(low) for xi, c in zip(x, range_id_columns)})
    for bit in range(bits - 1, 0, -1):
        for i in range(n):
            out = out.withColumns(_inverse_undo(x, i, bit))
    for i in range(1, n):  # Gray encode
        out = out.withColumn(x[i], F.col(x[i]).bitwiseXOR(F.col(x[i - 1])))
    # t = XOR of (2**j - 1) over the set bits j >= 1 of x[n-1]: bit m of t is the parity of
    # x[n-1]'s bits above m, a suffix parity taken in log2(bits) shift-xor rounds
    out = out.withColumn(fix, F.col(x[n - 1]))
    shift = 1
    while shift < bits:
        out = out.withColumn(fix, F.col(fix).bitwiseXOR(F.shiftright(F.col(fix), shift)))
        shift <<= 1
    out = out.withColumns({xi: F.col(xi).bitwiseXOR(F.shiftright(F.col(fix), 1)) for xi in x})
    return out.withColumn(out_column, zorder_key(x, bits)).drop(*x, fix)
