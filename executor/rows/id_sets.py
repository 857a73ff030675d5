"""A set of row ids known on the driver, as a SQL test Spark evaluates per row without a join.

A MERGE knows, after its pass over the target, which source rows matched (their ids, from
``monotonically_increasing_id``: the source partition in the upper 31 bits, the row's place
in it in the lower 33). The rows to insert are the others. A broadcast anti join against a
DataFrame of the matched ids costs a Spark job of its own (~45 ms for 50k ids from pass 1's
11 partitions) plus its planning. Here the ids become a literal instead:

- up to ``routes.IN_LIST_IDS`` ids, ``id IN (...)`` (Spark turns it into a hash set past 10 values);
- beyond, a bitmap per source partition, one bit per row up to the partition's last matched
  row, all partitions in one binary literal; a row's bit is found by its partition's offset
  and length (a CASE over the few partitions) and read with ``substr`` on the binary;
- past ``routes.BITMAP_MAX_BYTES`` of bitmap (4M source rows), None: the caller joins.
"""

from __future__ import annotations

from typing import Optional

from . import routes

_ROW_BITS = 33  # monotonically_increasing_id: the row's place in its partition
_ROW_MASK = (1 << _ROW_BITS) - 1


def membership_sql(ids, column: str) -> Optional[str]:
    """A SQL expression true when ``column`` (a BIGINT, never NULL) is one of ``ids`` (sorted
    distinct non-negative ints: a list, or a pyroaring bitmap) and false otherwise; None when
    the set is too big for a literal."""
    import numpy as np

    n = len(ids)
    if n == 0:
        return "false"
    if routes.choose(routes.MATCHED_IDS, n) == routes.IN_LIST:
        return f"{column} IN ({', '.join(str(int(x)) for x in ids)})"
    values = np.fromiter(ids, dtype=np.uint64, count=n)
    partitions = values >> np.uint64(_ROW_BITS)
    rows = values & np.uint64(_ROW_MASK)
    segments, cases_offset, cases_length = [], [], []
    offset = 0
    for p in np.unique(partitions):
        mine = rows[partitions == p]
        length = int(mine.max()) // 8 + 1
        if offset + length > routes.BITMAP_MAX_BYTES:
            return None
        bits = np.zeros(length * 8, dtype=np.uint8)
        bits[mine.astype(np.int64)] = 1
        segments.append(np.packbits(bits, bitorder="little").tobytes())
        cases_offset.append(f"WHEN {int(p)} THEN {offset}")
        cases_length.append(f"WHEN {int(p)} THEN {length}")
        offset += length
    part = f"shiftright({column}, {_ROW_BITS})"
    byte = f"shiftright({column} & {_ROW_MASK}, 3)"
    at = f"CASE {part} {' '.join(cases_offset)} END + {byte} + 1"
    value = f"CAST(conv(hex(substr(X'{b''.join(segments).hex()}', {at}, 1)), 16, 10) AS INT)"
    bit = f"CAST({column} & 7 AS INT)"
    return (f"coalesce({byte} < CASE {part} {' '.join(cases_length)} END "
            f"AND (shiftright({value}, {bit}) & 1) = 1, false)")
