"""executor/jobs/curves.py without Spark: quantile cut points, range ids, and the Z-order /
Hilbert references the Spark expressions are tested against (tests/executor/jobs/test_curves.py)."""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections import Counter
from decimal import Decimal

import pytest

from isolde.executor.jobs import curve_keys as K
from isolde.executor.jobs import curves as C

NAN = float("nan")


def _spark_sorted(values):
    """Spark's order for one type: NaN above every double."""
    return sorted(values, key=lambda v: (v != v, 0 if v != v else v))


def _range_sizes(sample, cuts):
    return Counter(C.range_id(v, cuts) for v in sample)


# ---------------------------------------------------------------- quantile_boundaries


def test_uniform_sample_gives_evenly_filled_ranges():
    sample = list(range(1000))
    cuts = C.quantile_boundaries(sample, 10)
    assert cuts == [100, 200, 300, 400, 500, 600, 700, 800, 900]
    assert set(_range_sizes(sample, cuts).values()) == {100}


@pytest.mark.parametrize("num_ranges", [2, 7, 64, 1000])
def test_cuts_are_strictly_increasing_sample_values_and_no_range_is_empty(num_ranges):
    rng = random.Random(num_ranges)
    sample = sorted(rng.choice([5] * 20 + list(range(100))) ** 2 for _ in range(500))
    cuts = C.quantile_boundaries(sample, num_ranges)
    assert all(a < b for a, b in zip(cuts, cuts[1:]))
    assert len(cuts) <= num_ranges - 1
    assert set(cuts) <= set(sample)
    # every id 1..len(cuts)+1 holds sampled values: skew gives fewer ranges, never empty ones
    assert set(_range_sizes(sample, cuts)) == set(range(1, len(cuts) + 2))


def test_heavy_skew_collapses_into_fewer_ranges():
    sample = sorted([7] * 900 + list(range(100, 200)))
    cuts = C.quantile_boundaries(sample, 16)
    # 14 of the 15 positions hold the hot minimum: one range for it (and the tail's start)
    assert cuts == [137]
    assert _range_sizes(sample, cuts) == {1: 937, 2: 63}


def test_hot_value_in_the_middle_is_one_cut_and_one_range():
    sample = sorted(list(range(50)) + [1000] * 500 + list(range(2000, 2450)))
    cuts = C.quantile_boundaries(sample, 10)
    assert cuts == [1000, 2050, 2150, 2250, 2350]
    # the hot value opens its own range (with the 50 tail values below the next cut)
    assert _range_sizes(sample, cuts) == {1: 50, 2: 550, 3: 100, 4: 100, 5: 100, 6: 100}


@pytest.mark.parametrize("sample, num_ranges, expected", [
    ([], 8, []),
    ([3], 8, []),
    ([3, 3, 3], 8, []),
    ([1, 2, 3], 8, [2, 3]),  # fewer values than ranges: every value but the minimum is a cut
    ([1, 2, 3, 4], 2, [3]),
    (list(range(100)), 1, []),
])
def test_small_samples(sample, num_ranges, expected):
    assert C.quantile_boundaries(sample, num_ranges) == expected


def test_num_ranges_must_be_positive():
    with pytest.raises(ValueError):
        C.quantile_boundaries([1, 2], 0)


def test_nan_sorts_last_and_counts_as_one_value():
    sample = _spark_sorted([0.5, -1.0, NAN, 2.0, NAN, NAN, 1.0, NAN, -0.0, 0.0])
    assert math.isnan(sample[-1]) and not math.isnan(sample[5])
    cuts = C.quantile_boundaries(sample, 10)
    assert sum(1 for c in cuts if c != c) == 1 and cuts[-1] != cuts[-1]  # one NaN cut, the last
    assert sum(1 for c in cuts if c == 0.0) <= 1  # -0.0 and 0.0 are one value
    assert C.range_id(NAN, cuts) == len(cuts) + 1
    assert C.range_id(float("inf"), cuts) == len(cuts)
    assert C.range_id(-0.0, cuts) == C.range_id(0.0, cuts)


def test_strings_with_a_long_common_prefix_still_split_evenly():
    prefix = "tenant-000-regio"  # 16 characters shared by every value
    sample = sorted(f"{prefix}{i:05d}é" for i in range(4096))
    cuts = C.quantile_boundaries(sample, 64)
    assert len(cuts) == 63
    assert set(_range_sizes(sample, cuts).values()) == {64}


def test_decimals_dates_and_bytes_are_plain_sortable_values():
    decimals = sorted(Decimal(i) / 8 for i in range(80))
    assert C.quantile_boundaries(decimals, 4) == [Decimal("2.5"), Decimal(5), Decimal("7.5")]
    blobs = sorted(bytes([i, 255 - i]) for i in range(40))
    assert C.quantile_boundaries(blobs, 2) == [bytes([20, 235])]


# ---------------------------------------------------------------- range_id


def test_range_id_is_one_plus_bisect_right_and_null_is_zero():
    rng = random.Random(3)
    cuts = sorted(set(rng.randrange(-500, 500) for _ in range(40)))
    for v in list(range(-600, 600)) + cuts:
        assert C.range_id(v, cuts) == 1 + bisect.bisect_right(cuts, v)
    assert C.range_id(None, cuts) == 0
    assert C.range_id(None, []) == 0 and C.range_id(5, []) == 1


def test_ids_fit_the_bits_of_max_ranges():
    for bits in (1, 2, 5, 16):
        sample = list(range(3 * (1 << bits)))
        cuts = C.quantile_boundaries(sample, C.max_ranges(bits))
        assert len(cuts) == C.max_ranges(bits) - 1
        assert max(C.range_id(v, cuts) for v in sample) == (1 << bits) - 1


def _descend_like_spark(levels, count, value):
    """with_range_ids' row computation in Python: one tree level per step, then the clamp."""
    k = 0
    for level in levels:
        k = 2 * k + (1 if level[k] <= value else 0)
    return 1 + min(k, count)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 8, 9, 100, 255, 256, 1000])
def test_tree_levels_with_padding_and_clamp_reproduce_bisect(size):
    cuts = sorted(random.Random(size).sample(range(10 * size), size))
    height = size.bit_length()
    levels = [C._tree_level(cuts, height, level) for level in range(height)]
    assert [len(level) for level in levels] == [1 << level for level in range(height)]
    assert sorted(itertools.chain(*levels))[:size] == cuts  # every cut point once, then padding
    for v in range(-1, 10 * size + 1):
        assert _descend_like_spark(levels, size, v) == C.range_id(v, cuts)


def test_a_group_tree_taller_than_its_cut_points_still_searches_right():
    cuts = [10, 20, 30]
    levels = [C._tree_level(cuts, 6, level) for level in range(6)]  # another group needs 6 levels
    for v in range(0, 40):
        assert _descend_like_spark(levels, len(cuts), v) == C.range_id(v, cuts)


# ---------------------------------------------------------------- range_bits


@pytest.mark.parametrize("columns, bits", [(1, 16), (2, 16), (3, 16), (4, 15), (5, 12), (31, 2), (62, 1)])
def test_range_bits(columns, bits):
    assert C.range_bits(columns) == bits
    assert columns * bits <= 62


@pytest.mark.parametrize("columns", [0, 63])
def test_range_bits_rejects_impossible_column_counts(columns):
    with pytest.raises(ValueError):
        C.range_bits(columns)


# ---------------------------------------------------------------- Z-order and Hilbert references

GRIDS = [(n, bits) for n in (2, 3, 4) for bits in (1, 2, 3, 4)]


def _grid(n, bits):
    return itertools.product(range(1 << bits), repeat=n)


def test_zorder_interleaves_most_significant_bit_of_column_0_first():
    assert C.zorder_index([0b10, 0b01], 2) == 0b1001
    assert C.zorder_index([1, 0, 0], 3) == 0b000000100
    assert C.zorder_index([0b100, 0, 0], 3) == 0b100000000


@pytest.mark.parametrize("n, bits", GRIDS)
def test_zorder_is_a_bijection_on_the_grid(n, bits):
    assert sorted(C.zorder_index(list(p), bits) for p in _grid(n, bits)) == list(range(1 << (n * bits)))


@pytest.mark.parametrize("n, bits", GRIDS)
def test_hilbert_is_a_bijection_whose_steps_are_unit_moves(n, bits):
    by_index = {K.hilbert_index(list(p), bits): p for p in _grid(n, bits)}
    assert sorted(by_index) == list(range(1 << (n * bits)))
    assert by_index[0] == (0,) * n
    for i in range(1, len(by_index)):
        a, b = by_index[i - 1], by_index[i]
        moves = [abs(x - y) for x, y in zip(a, b)]
        assert sorted(moves) == [0] * (n - 1) + [1], (i, a, b)


def test_hilbert_in_one_dimension_is_the_id():
    assert [K.hilbert_index([v], 5) for v in range(32)] == list(range(32))


def test_hilbert_keeps_files_compact_where_zorder_jumps():
    """A run of 1/16 of the keys spans a box: on Hilbert its bounding box is never larger than
    Z-order's worst run (the reason liquid clustering uses it)."""
    bits, n = 4, 2
    points = list(_grid(n, bits))

    def worst_box(index):
        order = sorted(points, key=lambda p: index(list(p), bits))
        run = len(order) // 16
        return max(math.prod(max(p[d] for p in order[i:i + run]) - min(p[d] for p in order[i:i + run]) + 1
                             for d in range(n)) for i in range(0, len(order) - run + 1))

    assert worst_box(K.hilbert_index) <= worst_box(C.zorder_index)


def test_spread_rounds_move_every_bit_to_n_times_its_position():
    """zorder_key's bit spreading constants, for every column count and width a key allows."""
    for n in range(2, 64):
        for bits in range(1, C.MAX_BITS + 1):
            if n * bits > C.MAX_KEY_BITS:
                continue
            for j in range(bits):
                x = 1 << j
                for shift, mask in C._spread_rounds(n, bits):
                    x = (x | (x << shift)) & mask
                assert x == 1 << (n * j), (n, bits, j)
