"""executor/jobs/curves.py in Spark against its pure-Python references: range ids per Spark type
(nulls, NaN, -0.0, long common prefixes, non-ASCII), per group, Z-order and Hilbert keys, and
the plan shape (linear in tree levels, codegen'd, correct with whole-stage codegen off)."""

from __future__ import annotations

import datetime as dt
import random
import time
from decimal import Decimal

import pytest
from pyspark.sql import functions as F, types as T

from isolde.executor.jobs import curve_keys as K
from isolde.executor.jobs import curves as C

pytestmark = pytest.mark.spark

NAN = float("nan")


def _prefixed(rng):
    return "région-∑-00000000-" + "".join(rng.choice("abcé€𝄞z") for _ in range(rng.randrange(0, 4)))


# (Spark type, value generator); every column also gets nulls
KINDS = {
    "long": (T.LongType(), lambda r: r.randrange(-10**6, 10**6) * r.choice([1, 1, 10**9])),
    "int_skewed": (T.IntegerType(), lambda r: 42 if r.random() < 0.7 else r.randrange(-1000, 1000)),
    "double": (T.DoubleType(), lambda r: r.choice([NAN, 0.0, -0.0, float("inf"), float("-inf"), 1e-300,
                                                    r.uniform(-1, 1), r.uniform(-1e9, 1e9)])),
    "string": (T.StringType(), _prefixed),
    "date": (T.DateType(), lambda r: dt.date(1970, 1, 1) + dt.timedelta(days=r.randrange(-30000, 30000))),
    "timestamp": (T.TimestampType(), lambda r: dt.datetime(2024, 3, 1) + dt.timedelta(
        microseconds=r.randrange(-10**13, 10**13))),
    "timestamp_ntz": (T.TimestampNTZType(), lambda r: dt.datetime(2001, 1, 1) + dt.timedelta(
        microseconds=r.randrange(-10**12, 10**12))),
    "decimal": (T.DecimalType(18, 4), lambda r: Decimal(r.randrange(-10**12, 10**12)).scaleb(-4)),
    "binary": (T.BinaryType(), lambda r: bytes(r.randrange(256) for _ in range(r.randrange(0, 4)))),
    "boolean": (T.BooleanType(), lambda r: r.random() < 0.5),
}


def _frame(spark, kinds, rows, seed):
    rng = random.Random(seed)
    schema = T.StructType([T.StructField(k, KINDS[k][0]) for k in kinds])
    data = [tuple(None if rng.random() < 0.1 else KINDS[k][1](rng) for k in kinds) for _ in range(rows)]
    return spark.createDataFrame(data, schema)


def _sorted_sample(df, column, fraction, seed):
    """Non-null values in Spark's own order, as the driver samples them."""
    c = F.col(column)
    return [r[0] for r in df.select(c).where(c.isNotNull()).sample(fraction=fraction, seed=seed).orderBy(c).collect()]


def _assert_ids_match(out, columns, cuts, out_columns):
    bad = [(r[c], r[o], C.range_id(r[c], b)) for r in out.collect()
           for c, o, b in zip(columns, out_columns, cuts) if r[o] != C.range_id(r[c], b)]
    assert bad == []


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("num_ranges", [2, 9, 200])
def test_range_ids_match_bisect_in_sparks_order(spark, kind, num_ranges):
    df = _frame(spark, [kind], 600, seed=num_ranges).cache()
    cuts = C.quantile_boundaries(_sorted_sample(df, kind, 0.5, seed=1), num_ranges)
    out = C.with_range_ids(df, [kind], [[cuts]], ["rid"])
    assert out.schema["rid"].dataType == T.IntegerType()
    assert out.columns == df.columns + ["rid"]
    _assert_ids_match(out, [kind], [cuts], ["rid"])
    if kind != "boolean":
        assert len({r.rid for r in out.collect()}) >= min(3, len(cuts) + 1)


def test_several_columns_of_different_widths_in_one_pass(spark):
    kinds = ["string", "double", "decimal", "timestamp"]
    df = _frame(spark, kinds, 2000, seed=7).cache()
    cuts = [C.quantile_boundaries(_sorted_sample(df, k, 1.0, seed=2), n)
            for k, n in zip(kinds, [1000, 3, 1, 64])]
    assert cuts[2] == [] and len(cuts[0]) > 200
    outs = [f"id_{k}" for k in kinds]
    out = C.with_range_ids(df, kinds, [cuts], outs)
    _assert_ids_match(out, kinds, cuts, outs)


def test_cut_points_equal_to_values_and_extremes(spark):
    values = [None, -2**63, -5, 0, 3, 5, 7, 10, 11, 2**63 - 1]
    df = spark.createDataFrame([(v,) for v in values], "v long")
    for cuts in ([], [5], [0, 5, 10], [-2**63, 2**63 - 1], list(range(-7, 12, 2))):
        _assert_ids_match(C.with_range_ids(df, ["v"], [[cuts]], ["r"]), ["v"], [cuts], ["r"])


def test_names_with_dots_and_backticks_and_no_clash_with_private_columns(spark):
    df = spark.createDataFrame([(i, i % 3, -i) for i in range(50)], "`a.b` int, `we``ird` int, __isolde_curve_k0_0 int")
    out = C.with_range_ids(df, ["a.b", "we`ird"], [[[10, 20], [1]]], ["r1", "r2"])
    assert out.columns == df.columns + ["r1", "r2"]
    assert [(r["r1"], r["r2"], r["__isolde_curve_k0_0"]) for r in out.orderBy(F.col("`a.b`")).collect()] == \
        [(C.range_id(i, [10, 20]), C.range_id(i % 3, [1]), -i) for i in range(50)]


def test_groups_use_their_own_cut_points(spark):
    rng = random.Random(11)
    bounds = [  # group -> [cuts of x, cuts of s]
        [[10, 20, 30], ["m"]],
        [list(range(-100, 100, 7)), []],
        [[], ["b", "c", "d", "é"]],
    ]
    rows = [(rng.choice([0, 1, 2, 2, None, 3, -1]), rng.choice([None, rng.randrange(-120, 120)]),
             rng.choice([None, "a", "b", "bb", "c", "m", "n", "é", "z"])) for _ in range(3000)]
    df = spark.createDataFrame(rows, "g int, x int, s string")
    out = C.with_range_ids(df, ["x", "s"], bounds, ["rx", "rs"], group_column="g")

    def expected(g, v, i):
        if v is None:
            return 0
        if g is None or not 0 <= g < len(bounds):
            return 1  # a row whose group has no entry sees no cut points
        return C.range_id(v, bounds[g][i])

    bad = [r for r in out.collect() if (r.rx, r.rs) != (expected(r.g, r.x, 0), expected(r.g, r.s, 1))]
    assert bad == []


def test_argument_errors(spark):
    df = spark.range(3)
    with pytest.raises(ValueError):
        C.with_range_ids(df, ["id"], [[[1]]], ["a", "b"])
    with pytest.raises(ValueError):
        C.with_range_ids(df, ["id"], [[[1]], [[2]]], ["a"])
    with pytest.raises(ValueError):
        C.with_range_ids(df, ["id"], [[[1], [2]]], ["a"], group_column="id")
    with pytest.raises(ValueError):
        C.zorder_key(["id"] * 5, 13)


@pytest.mark.parametrize("n, bits", [(1, 7), (2, 1), (2, 3), (2, 16), (3, 5), (3, 16), (4, 2), (4, 13), (5, 10)])
def test_zorder_and_hilbert_keys_match_the_references(spark, n, bits):
    rng = random.Random(n * 100 + bits)
    top = (1 << bits) - 1
    rows = [tuple(rng.choice([0, top, rng.randrange(top + 1)]) for _ in range(n)) for _ in range(400)]
    names = [f"id{i}" for i in range(n)]
    df = spark.createDataFrame(rows, ", ".join(f"{c} int" for c in names))
    out = K.with_hilbert_key(df.withColumn("z", C.zorder_key(names, bits)), names, bits, "h")
    assert out.columns == names + ["z", "h"]
    assert out.schema["z"].dataType == out.schema["h"].dataType == T.LongType()
    got = {(tuple(r[c] for c in names), r.z, r.h) for r in out.collect()}
    assert got == {(p, C.zorder_index(list(p), bits), K.hilbert_index(list(p), bits)) for p in rows}


def test_hilbert_key_is_a_bijection_on_a_small_grid(spark):
    df = spark.range(1 << 9).select(*[(F.col("id").bitwiseAND(7 << (3 * i)) / (1 << (3 * i))).cast("int")
                                      .alias(f"c{i}") for i in range(3)])
    keys = sorted(r.h for r in K.with_hilbert_key(df, ["c0", "c1", "c2"], 3, "h").collect())
    assert keys == list(range(1 << 9))


def _plan_length(df):
    return len(df._jdf.queryExecution().optimizedPlan().toString())


def test_plan_grows_with_tree_levels_not_exponentially_and_stays_codegend(spark):
    rows = 200_000
    df = spark.range(rows).select((F.col("id") * 7919 % 1_000_003).alias("v"), F.col("id"))
    lengths = {}
    for exponent in (6, 12):
        cuts = list(range(0, 1_000_003, 1_000_003 // (1 << exponent)))[1:1 << exponent]
        out = C.with_range_ids(df, ["v"], [[cuts]], ["r"])
        lengths[exponent] = _plan_length(out)
    # 6 more levels add 6 small projections; the cut points are not in the plan text
    assert lengths[12] - lengths[6] < 6 * 400 and lengths[12] < 10_000, lengths
    assert str(cuts[len(cuts) // 2]) not in out._jdf.queryExecution().optimizedPlan().toString()

    summed = out.agg(F.sum("r"))
    started = time.time()
    total = summed.collect()[0][0]
    elapsed = time.time() - started
    assert total == sum(C.range_id(i * 7919 % 1_000_003, cuts) for i in range(rows))
    assert elapsed < 60, elapsed
    # the final (adaptive) plan runs the search steps inside whole-stage codegen
    plan = summed._jdf.queryExecution().executedPlan().toString()
    assert any(line.lstrip(" +-:").startswith("*(") and "Project" in line for line in plan.splitlines()), plan


def test_correct_with_whole_stage_codegen_off(spark):
    """Wide tables (> spark.sql.codegen.maxFields) run without whole-stage codegen: the cut
    points must stay out of the rows then, and the ids stay the same."""
    df = _frame(spark, ["string", "long"], 300, seed=5).cache()
    cuts = [C.quantile_boundaries(_sorted_sample(df, k, 1.0, seed=3), 4000) for k in ("string", "long")]
    previous = spark.conf.get("spark.sql.codegen.wholeStage")
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    try:
        out = C.with_range_ids(df, ["string", "long"], [cuts], ["rs", "rl"])
        out = K.with_hilbert_key(out, ["rs", "rl"], 12, "h")
        rows = out.collect()
    finally:
        spark.conf.set("spark.sql.codegen.wholeStage", previous)
    for r in rows:
        ids = [C.range_id(r.string, cuts[0]), C.range_id(r.long, cuts[1])]
        assert (r.rs, r.rl, r.h) == (ids[0], ids[1], K.hilbert_index(ids, 12))
