"""Curve keys without Spark (executor/jobs/curve_keys.py, curves.py's references): the Hilbert
table walks a true Hilbert curve (a bijection whose consecutive keys are grid neighbours),
Z-order interleaves as the Spark expression does, quantile cut points and file cuts."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from isolde.executor.jobs import curve_keys as K
from isolde.executor.jobs import curves as C


@pytest.mark.parametrize("n, bits", [(2, 1), (2, 3), (2, 5), (3, 2), (3, 3), (4, 2), (5, 2)])
def test_hilbert_keys_are_a_bijection_with_unit_steps(n, bits):
    points = np.array(list(itertools.product(range(1 << bits), repeat=n)), dtype=np.int64)
    keys = K.hilbert_keys(points, bits)
    assert sorted(keys.tolist()) == list(range(len(points)))  # every cell once
    walk = points[np.argsort(keys)]
    steps = np.abs(np.diff(walk, axis=0)).sum(axis=1)
    assert (steps == 1).all()  # each next cell is a neighbour: files cover compact boxes


def test_hilbert_table_is_small_and_fits_the_key():
    for n in range(2, K.MAX_HILBERT_DIMS + 1):
        table, state_bits = K.hilbert_table(n)
        assert len(table) % (1 << n) == 0 and (len(table) >> n) <= n * (1 << n)
        assert max(e & ((1 << state_bits) - 1) for e in table) < (len(table) >> n)
    with pytest.raises(ValueError):
        K.hilbert_table(1)


@pytest.mark.parametrize("n, bits", [(1, 4), (2, 10), (3, 6), (4, 15)])
def test_zorder_keys_match_the_reference(n, bits):
    rng = random.Random(n * 100 + bits)
    rows = [[rng.randrange(1 << bits) for _ in range(n)] for _ in range(300)]
    got = K.zorder_keys(np.array(rows, dtype=np.int64), bits).tolist()
    assert got == [C.zorder_index(r, bits) for r in rows]


def test_zorder_interleaves_most_significant_bits_first():
    assert C.zorder_index([0b10, 0b01], 2) == 0b1001
    assert C.zorder_index([1, 0, 0], 1) == 0b100


@pytest.mark.parametrize("values, ranges, expected", [
    (list(range(100)), 4, [25, 50, 75]),
    ([1] * 90 + list(range(2, 12)), 4, []),  # heavy skew: one value fills every cut position
    ([0.5, float("nan"), float("nan")], 3, [float("nan")]),  # NaN sorts last, as in Spark
    ([], 8, []),
    ([f"customer-region-{i:08d}" for i in range(0, 1000, 10)], 5,
     [f"customer-region-{i:08d}" for i in (200, 400, 600, 800)]),  # a long common prefix
])
def test_quantile_boundaries(values, ranges, expected):
    got = C.quantile_boundaries(values, ranges)
    assert [("nan" if isinstance(v, float) and v != v else v) for v in got] == \
        [("nan" if isinstance(v, float) and v != v else v) for v in expected]


def test_range_ids_follow_bisect_right_with_nulls_first():
    cuts = [10, 20, 30]
    assert [C.range_id(v, cuts) for v in (None, 5, 10, 19, 20, 35)] == [0, 1, 2, 2, 3, 4]
    assert C.range_id(float("nan"), [1.0, 2.0]) == 3 and C.range_id(-0.0, [0.0]) == 2


@pytest.mark.parametrize("keys, files, expected", [
    (list(range(100)), 4, [25, 50, 75]),
    ([7] * 50, 4, []),  # one key: one file
    ([1, 1, 1, 2, 2, 3], 3, [2]),  # the cut at a repeated first key would open an empty file
    ([], 3, []),
])
def test_file_cuts_split_the_sample_evenly(keys, files, expected):
    assert K.file_cuts(np.array(keys, dtype=np.int64), files) == expected
