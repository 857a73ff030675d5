"""``RowIdsAfterJoin.live_positions``: a DELETE's found positions, read with the files' deletion
vectors not applied, less the rows those vectors delete already, computed on the driver (no
Spark). Table-driven cases and a random differential against plain Python sets."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from isolde.executor.rows.scan import ORD_COL, ROW_COL, DeletedRows, RowIdsAfterJoin


def _found(pairs) -> pa.Table:
    return pa.table({ORD_COL: pa.array([o for o, _ in pairs], pa.int32()),
                     ROW_COL: pa.array([r for _, r in pairs], pa.int64())})


def _after(paths, deleted: dict) -> RowIdsAfterJoin:
    rows = {o: np.array(sorted(r), dtype=np.int64) for o, r in deleted.items() if r}
    return RowIdsAfterJoin(None, tuple(paths), DeletedRows(rows) if rows else None)


CASES = [
    # (found (ordinal, row) pairs, deleted rows by ordinal, expected path -> rows)
    ([], {}, {}),
    ([(0, 1), (0, 2), (1, 7)], {}, {"a": [1, 2], "b": [7]}),
    ([(0, 1), (0, 2), (1, 7)], {0: {2, 9}}, {"a": [1], "b": [7]}),
    # every found row of a file deleted already: the file is not touched at all
    ([(0, 1), (1, 7), (1, 8)], {1: {7, 8}}, {"a": [1]}),
    ([(2, 0), (2, 1 << 40)], {2: {0}}, {"c": [1 << 40]}),
    # a NULL position (no row) is not a position
    ([(0, None), (0, 3)], {}, {"a": [3]}),
]


@pytest.mark.parametrize("found,deleted,want", CASES)
def test_live_positions(found, deleted, want):
    got = _after(["a", "b", "c"], deleted).live_positions(_found(found))
    assert {p: list(b) for p, b in got.items()} == want


@pytest.mark.parametrize("seed", range(5))
def test_live_positions_match_sets(seed):
    rnd = random.Random(seed)
    paths = [f"part-{i}.parquet" for i in range(rnd.randint(1, 6))]
    deleted = {o: {rnd.randrange(2000) for _ in range(rnd.randint(0, 300))} for o in range(len(paths))}
    found = {(rnd.randrange(len(paths)), rnd.randrange(2000)) for _ in range(rnd.randint(0, 1500))}
    want = {}
    for o, r in found:
        if r not in deleted[o]:
            want.setdefault(paths[o], set()).add(r)
    got = _after(paths, deleted).live_positions(_found(sorted(found)))
    assert {p: set(b) for p, b in got.items()} == want
