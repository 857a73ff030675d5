"""Space-filling-curve keys for ``OPTIMIZE t ZORDER BY (...)`` and liquid clustering.

Why range ids, not raw bytes: each column is first replaced by its quantile *range id* (cut
points from a sample), so skewed values, dates, decimals and strings that share a long prefix
spread over the id space like uniform ints. Interleaving raw bytes lets a hot value or a
16-character common prefix use up every leading bit of the key, and then each file spans the
whole range of the column (delta-rs issue #2844). The Hilbert key over the same ids is in
curve_keys.py (a state table, one lookup per bit level, with its numpy twin for samples).

Range ids: NULL -> 0; a non-null v -> 1 + (number of cut points <= v), i.e. 1 + ``bisect_right``
in Spark's ordering (NaN equal to itself and above every other double, -0.0 == 0.0). With c cut
points the ids are 0..c+1; ``quantile_boundaries(sample, max_ranges(bits))`` gives at most
``2**bits - 2`` cut points, so the ids fit the ``bits`` that ``zorder_key`` and the Hilbert
key read (they use only the low ``bits`` bits of each id).

Rows are computed with Spark SQL expressions only (codegen'd, no Python UDF):

* A range id is a descent of the implicit binary search tree over the cut points, one
  projection per tree level: ``k = 2k | (level_l[k] <= v)``. Each step reads ``k`` twice, so
  CollapseProject keeps the steps apart and the plan grows linearly, never exponentially.
* Each level is a typed array (the column's own Spark type, so strings, dates, timestamps,
  decimals and doubles compare in Spark's order) delivered by a scalar subquery over a one-row
  local relation: plan text stays small, a task carries each cut point once, and rows never
  carry the arrays. (65k ``F.lit`` values took ~13 s to build; a broadcast-join column was
  copied into every row at every step once whole-stage codegen was off.)
* The Z-order key is one branch-free bitwise expression.

The pure-Python ``range_id`` / ``zorder_index`` are the references the Spark expressions are
tested against.
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
    """Level ``level`` (2**level nodes, left to right) of the perfect binary search tree over
    ``cuts`` padded with its last value to 2**height - 1 values."""
    span = 1 << (height - level)
    return [cuts[min(i, len(cuts) - 1)] for i in range(span // 2 - 1, (1 << height) - 1, span)]


def _local_relation(spark, schema: T.StructType, row: tuple):
    """A one-row DataFrame over a LocalRelation: a scalar subquery over it runs no Spark job."""
    from pyspark.sql.classic.dataframe import DataFrame

    staged = spark.createDataFrame([row], schema)
    return DataFrame(spark._jsparkSession.createDataFrame(staged._jdf.collectAsList(), staged._jdf.schema()), spark)


def _column_levels(i: int, dtype, per_group: list, grouped: bool):
    """The relation fields and values of column i: its tree levels (per group when grouped), then
    its number of cut points per group, which the search result is clamped to.

    Padding repeats the last cut point (+infinity is no value of most types): a descent that goes
    right over padding overshoots only when v >= the last cut point, and the clamp undoes it. A
    group without cut points borrows another group's, with a count of 0."""
    height = max(len(c) for c in per_group).bit_length()
    borrowed = next(c for c in per_group if c)[-1:]
    element = T.ArrayType(dtype, containsNull=False)
    fields, values = [], []
    for level in range(height):
        arrays = [_tree_level(cuts or borrowed, height, level) for cuts in per_group]
        fields.append(T.StructField(f"c{i}_l{level}", T.ArrayType(element, False) if grouped else element, False))
        values.append(arrays if grouped else arrays[0])
    counts = [len(c) for c in per_group]
    fields.append(T.StructField(f"c{i}_n", T.ArrayType(T.IntegerType(), False), False))
    values.append(counts)
    return fields, values, height


def _level_lookups(spark, types: list, cuts: list, grouped: bool) -> dict[int, tuple[list[Column], Column]]:
    """For each column with cut points, by position: a scalar subquery per tree level yielding
    that level (an array of the column's type, or one per group, indexed by group), and one
    yielding the number of cut points per group. One local relation holds them all."""
    fields, values, heights = [], [], {}
    for i, (dtype, per_group) in enumerate(zip(types, cuts)):
        if any(per_group):
            f, v, heights[i] = _column_levels(i, dtype, per_group, grouped)
            fields += f
            values += v
    if not fields:
        return {}
    relation = _local_relation(spark, T.StructType(fields), tuple(values))
    return {i: ([relation.select(f"c{i}_l{level}").scalar() for level in range(height)],
                relation.select(f"c{i}_n").scalar())
            for i, height in heights.items()}


def with_range_ids(df, columns: list[str], boundaries: list[list[list]], out_columns: list[str],
                   group_column: str | None = None):
    """``df`` plus one INT range id per column in ``out_columns``: NULL -> 0, a value v -> 1 + the
    number of cut points <= v in Spark's ordering (``range_id``), so ids lie in [0, #cuts + 1].

    ``boundaries[g][i]`` are column i's cut points (sorted, non-null, from ``quantile_boundaries``)
    for group g, the 0-based INT value of ``group_column``; without a group column there is one
    group. A row whose group is NULL or has no entry sees no cut points (a non-null value -> 1).
    Cost: bit_length(#cuts) projections with one comparison per column each.
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
    lookups = _level_lookups(df.sparkSession, types, cuts, grouped)
    group = _ref(df, group_column).cast("int") if grouped else F.lit(0)
    nodes = _private_names(df, "k", len(columns))
    out = df.withColumns({k: F.lit(0) for k in nodes})
    for level in range(max((len(levels) for levels, _ in lookups.values()), default=0)):
        out = out.withColumns({
            nodes[i]: _descend(F.col(nodes[i]), F.get(levels[level], group) if grouped else levels[level], values[i])
            for i, (levels, _) in lookups.items() if level < len(levels)
        })
    out = out.withColumns({
        name: F.when(v.isNull(), 0).otherwise(_searched(F.col(k), lookups.get(i), group) + 1).cast("int")
        for i, (name, k, v) in enumerate(zip(out_columns, nodes, values))
    })
    return out.drop(*nodes)


def _descend(node: Column, level: Column, value: Column) -> Column:
    """One level down the search tree: k -> 2k | (cut point <= value). Bitwise, so free of ANSI
    overflow checks (a step is small bytecode); a NULL value gives NULL, replaced at the end."""
    return F.shiftleft(node, 1).bitwiseOR((F.get(level, node) <= value).cast("int"))


def _searched(node: Column, lookup, group: Column) -> Column:
    """The number of cut points <= v: the descent clamped to the group's count (padding repeats
    the last cut point); 0 for a column without cut points or a row whose group is NULL or has
    no entry."""
    if lookup is None:
        return F.lit(0)
    return F.coalesce(F.least(node, F.get(lookup[1], group)), F.lit(0))


# ---------------------------------------------------------------- curve keys in Spark


def _check_key_bits(num_columns: int, bits: int) -> None:
    if num_columns < 1 or not 1 <= bits <= MAX_BITS or num_columns * bits > MAX_KEY_BITS:
        raise ValueError(f"{num_columns} columns x {bits} bits do not fit a {MAX_KEY_BITS}-bit key "
                         f"(1 to {MAX_BITS} bits per column)")


def _spread_rounds(n: int, bits: int) -> list[tuple[int, int]]:
    """(shift, mask) rounds ``x = (x | x << shift) & mask`` that move bit j of x to bit n*j: the
    generalised 'magic numbers' bit spread, log2(bits) rounds instead of one term per bit."""
    rounds = []
    chunk = 1 << ((bits - 1).bit_length() - 1) if bits > 1 and n > 1 else 0
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
