"""How a scan turns deletion vectors into what Spark tests per row (``scan.DeletedRows``),
without Spark: the bitmap words' layout and the choice between bitmaps and the key join."""

from __future__ import annotations

import numpy as np

from isolde.executor.rows import routes
from isolde.executor.rows import scan as scan_module


def test_words_put_row_r_at_bit_r_mod_64_of_word_r_div_64():
    rows = np.array([0, 1, 63, 64, 127, 200], dtype=np.int64)
    table = scan_module.DeletedRows({7: rows, 2: np.array([5], dtype=np.int64)}).words_table().to_pydict()
    by_ordinal = dict(zip(table[scan_module._ORD], table[scan_module._WORDS]))
    assert set(by_ordinal) == {7, 2}
    words = by_ordinal[7]
    assert len(words) == 200 // 64 + 1  # up to the last deleted row's word only
    # read back as Spark's getbit(word, r & 63) does, on the signed 64-bit value
    back = [64 * k + j for k, w in enumerate(words) for j in range(64) if (w >> j) & 1]
    assert back == rows.tolist()
    assert words[0] < 0  # row 63 is the sign bit: the words are signed longs, bit for bit
    assert by_ordinal[2] == [1 << 5]


def test_key_table_lists_every_deleted_row_with_its_ordinal():
    keys = scan_module.DeletedRows({0: np.array([4, 9], dtype=np.int64),
                                    3: np.array([1], dtype=np.int64)}).keys_table().to_pydict()
    assert sorted(zip(keys[scan_module._ORD], keys[scan_module.ROW_COL])) == [(0, 4), (0, 9), (3, 1)]


def test_bitmaps_unless_big_and_bigger_than_the_keys(monkeypatch):
    monkeypatch.setattr(routes, "DV_BITMAP_MAX_BYTES", 1024)
    within = scan_module.DeletedRows({0: np.array([5, 64 * 127], dtype=np.int64)})
    assert within.bitmap_bytes == 1024 and within.use_bitmaps()
    # two rows deleted far apart: 1,032 bytes of words against 32 bytes of keys
    sparse = scan_module.DeletedRows({0: np.array([5, 64 * 128], dtype=np.int64)})
    assert sparse.bitmap_bytes == 1032 and not sparse.use_bitmaps()
    # most rows deleted: the words are smaller than the keys whatever their size
    dense = scan_module.DeletedRows({0: np.arange(0, 64 * 200, 2, dtype=np.int64)})
    assert dense.bitmap_bytes < 16 * dense.cardinality and dense.use_bitmaps()
