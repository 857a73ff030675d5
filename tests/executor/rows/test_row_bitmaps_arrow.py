"""The driver's half of the row bitmaps (``row_bitmaps.bitmaps_from_arrow``) without Spark.

Spark's ``bitmap_construct_agg`` buffers are built here in Python (4 KiB, bit ``i`` of a bucket
is bit ``i % 8`` of byte ``i // 8``), in random key order, sparse and dense, over bucket numbers
past 2^32 rows; the decoded ``BitMap64`` per key must hold exactly the positions that went in,
and the pair counts must add up. The decoder unpacks only non-zero bytes, a chunk of buckets at
a time: the chunk size is shrunk so several chunks split one key's buckets.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from isolde.executor.rows import row_bitmaps
from isolde.executor.rows.row_bitmaps import BUCKET_ROWS, bitmaps_from_arrow

KEYS = ["k", "f", "cl"]


def _buffer(bits: set) -> bytes:
    out = bytearray(BUCKET_ROWS // 8)
    for i in bits:
        out[i // 8] |= 1 << (i % 8)
    return bytes(out)


def _table(rng: random.Random, n_keys: int):
    """Arrow rows of (k, f, cl, bucket, bitmap, pairs), shuffled; and key -> (positions, pairs)."""
    want: dict = {}
    rows = []
    for j in range(n_keys):
        key = (rng.randint(0, 1), f"part-{j:05d}.parquet" if rng.random() < 0.9 else None, rng.randint(-1, 2))
        if key in want:
            continue
        positions: set = set()
        pairs = 0
        for bucket in rng.sample([1, 2, 3, 7, 31, 2**17 + 1, 2**27 + 5], rng.randint(1, 4)):
            density = rng.choice([0.0005, 0.01, 0.5, 1.0])
            bits = {i for i in range(BUCKET_ROWS) if rng.random() < density} if density < 1 else set(range(BUCKET_ROWS))
            bits = bits or {rng.randrange(BUCKET_ROWS)}
            n = len(bits) + rng.randint(0, 3)  # a position named by several pairs
            rows.append((*key, bucket, _buffer(bits), n))
            positions |= {(bucket - 1) * BUCKET_ROWS + i for i in bits}
            pairs += n
        want[key] = (positions, pairs)
    rng.shuffle(rows)
    columns = list(zip(*rows))
    table = pa.table({
        "k": pa.array(columns[0], pa.int32()), "f": pa.array(columns[1], pa.string()),
        "cl": pa.array(columns[2], pa.int32()), "__isolde_bucket": pa.array(columns[3], pa.int64()),
        "__isolde_bitmap": pa.array(columns[4], pa.binary()), "__isolde_pairs": pa.array(columns[5], pa.int64()),
    })
    return table, want


def _check(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, (positions, pairs) in want.items():
        assert list(got[key].rows) == sorted(positions), key
        assert got[key].pairs == pairs, key


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("chunk", [1, 3, 4096])
def test_bitmaps_from_arrow_hold_exactly_the_positions(monkeypatch, seed, chunk):
    monkeypatch.setattr(row_bitmaps, "UNPACK_BUCKETS", chunk)
    table, want = _table(random.Random(seed), random.Random(seed).randint(1, 12))
    _check(bitmaps_from_arrow(table, KEYS), want)


def test_bitmaps_from_arrow_reads_sliced_and_chunked_columns():
    """Arrow hands over several record batches; a column may be a slice of a larger buffer."""
    table, want = _table(random.Random(99), 10)
    assert table.num_rows > 4
    chunked = pa.concat_tables([table.slice(0, 3), table.slice(3, 1), table.slice(4)])
    assert chunked.column("__isolde_bitmap").num_chunks == 3
    _check(bitmaps_from_arrow(chunked, KEYS), want)
    large = table.set_column(table.schema.get_field_index("__isolde_bitmap"), "__isolde_bitmap",
                             table.column("__isolde_bitmap").cast(pa.large_binary()))
    _check(bitmaps_from_arrow(large, KEYS), want)


def test_bitmaps_from_arrow_refuses_buffers_of_unequal_length():
    table, _ = _table(random.Random(5), 3)
    short = pa.array([b"\x01" * 8] + [b"\x01" * (BUCKET_ROWS // 8)] * (table.num_rows - 1), pa.binary())
    bad = table.set_column(table.schema.get_field_index("__isolde_bitmap"), "__isolde_bitmap", short)
    with pytest.raises(ValueError, match="equally long"):
        bitmaps_from_arrow(bad, KEYS)


def test_no_rows_no_bitmaps():
    table, _ = _table(random.Random(1), 2)
    assert bitmaps_from_arrow(table.slice(0, 0), KEYS) == {}


@pytest.mark.parametrize("seed", range(4))
def test_bitmaps_of_table_agree_with_the_decoded_buffers(seed):
    """``bitmaps_of_table`` (pairs already on the driver: few_rows) gives what Spark's buffers
    decode to for the same pairs, NULL positions left out as ``bitmap_rows`` does."""
    rng = random.Random(seed)
    table, want = _table(rng, rng.randint(1, 6))
    keys, positions = [], []
    for key, (rows, pairs) in want.items():
        named = sorted(rows) + [rng.choice(sorted(rows)) for _ in range(pairs - len(rows))]
        keys += [key] * len(named) + [key]
        positions += named + [None]
    order = list(range(len(keys)))
    rng.shuffle(order)
    pairs = pa.table({"k": [keys[i][0] for i in order], "f": pa.array([keys[i][1] for i in order], pa.string()),
                      "cl": [keys[i][2] for i in order], "p": pa.array([positions[i] for i in order], pa.int64())})
    _check(row_bitmaps.bitmaps_of_table(pairs, KEYS, "p"), want)
    assert row_bitmaps.bitmaps_of_table(pairs.slice(0, 0), KEYS, "p") == {}
