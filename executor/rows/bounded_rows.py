"""An UPDATE's or MERGE's changed rows, as they are written, on the driver in one Spark job
(a DELETE's positions alone: ``collect_positions``).

A deletion-vector UPDATE of 1% of a 10M-row table took three passes over its changed rows: a
lazy checkpoint, filled by the job that built the deletion vectors in Spark (a bitmap
aggregate behind a shuffle), then a second job reading the checkpoint into Arrow for the
driver's writer (``driver_write.write_counted_rows``), plus the checkpoint's own planning; a
MERGE's pass 1 (its target rows paired with source rows) the same. When the rows are few
enough for the driver to write them (``routes.COUNTED_ROWS`` rows and ``COUNTED_BYTES``
by their types' sizes), ``collect_changed`` instead runs one job that computes them exactly
as they are written (``dml.conform_changed``: casts, NOT NULL and CHECK constraints,
generated columns, stable row ids), each with its file and position (a MERGE's pairs also
with their source row and clause), into Arrow. ``few_rows.collect_bounded`` stops that job as
soon as one task yields more than its share of the bound; the statement then takes the Spark
route (checkpoint, bitmaps built in Spark, Spark's writer), having lost part of one scan.

The deletion vectors' positions are grouped into per-file bitmaps by Arrow on the driver, from
rows that are there to be written anyway: the driver never holds more positions than the
bound. A statement that changes more rows builds its bitmaps in Spark (``row_bitmaps``),
whatever the fraction changed.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from . import routes
from .scan import FILE_COL, ORD_COL, ROW_COL


def collect_changed(ctx, target, metadata, rows: DataFrame, row_ids: Optional[str], files, passthrough=(),
                    only_where=None, paths: Optional[Sequence[str]] = None):
    """An Arrow table of ``rows`` (changed rows over the candidate ``files``) as they are
    written (the table's columns, then ``row_ids`` when given), then ``_isolde_file``,
    ``_isolde_row`` and the ``passthrough`` columns; ``only_where`` as in ``conform`` (the rows
    that are written). None when pyarrow does not write this table's columns, or the rows are
    more than the driver writes.

    ``paths``: when ``rows`` carry their file ordinal (``_isolde_ord`` among ``passthrough``,
    ``scan(with_ordinal=True)``), the AddFile path of each ordinal: the job then brings the
    ordinal and not the path, and ``_isolde_file`` is looked up here. A path string per row was
    a tenth of a 10M-row UPDATE 1%'s find (100k changed rows, 10 files: 0.64 -> 0.59 s; the
    statement's median 0.77 -> 0.71 s)."""
    from . import few_rows
    from .dml import conform_changed
    from .driver_write import arrow_bytes, writable_schema

    carried = (FILE_COL, ROW_COL, *passthrough)
    rows = conform_changed(target, metadata, rows, row_ids, passthrough=carried, only_where=only_where)
    written = [f for f in rows.schema.fields if f.name not in carried]
    if not writable_schema(T.StructType(written), metadata, target.partition_columns):
        return None
    # each row carries its file's path: counted at the longest path's length, not a guess
    path_bytes = 4 + max((len(a.path.encode()) for a in files), default=0)
    row_bytes = path_bytes + sum(arrow_bytes(f.dataType) for f in rows.schema.fields if f.name != FILE_COL)
    limit = routes.counted_limit(row_bytes)
    by_ordinal = paths is not None and ORD_COL in passthrough
    if by_ordinal:
        rows = rows.drop(FILE_COL)  # (Spark then never builds it)
    table = few_rows.collect_bounded(rows, limit, few_rows.scan_tasks(ctx.spark, [a.size or 0 for a in files]))
    if table is None or not by_ordinal:
        return table
    return table.append_column(FILE_COL, pc.take(pa.array(list(paths), pa.string()), table.column(ORD_COL)))


def collect_positions(ctx, rows: DataFrame, files) -> Optional[dict]:
    """A DELETE's positions (``rows``: its deleted rows over the candidate ``files``, with
    ``_isolde_file`` and ``_isolde_row``) as AddFile path -> ``BitMap64``, from at most
    ``routes.POSITION_ROWS`` (file, row) pairs brought to the driver by one job with no shuffle; None
    when there are more (the caller builds its bitmaps in Spark, ``row_bitmaps``). Spark's
    bitmap aggregate needs a second stage behind a shuffle: a DELETE of 0.1% of a 10M-row
    table took 0.88 s that way, 0.70 s this way (medians of six interleaved pairs)."""
    from . import few_rows

    pairs = rows.select(FILE_COL, ROW_COL)
    tasks = few_rows.scan_tasks(ctx.spark, [a.size or 0 for a in files])
    table = few_rows.collect_bounded(pairs, routes.POSITION_ROWS, tasks)
    return None if table is None else positions_of(table)


def collect_live_positions(ctx, rows: DataFrame, files, after) -> Optional[dict]:
    """``collect_positions`` of rows read with their files' deletion vectors not applied
    (``scan.scan_for_join``: ``_isolde_ord`` in place of ``_isolde_file``): the positions the
    vectors delete already are taken out on the driver (``after``: its ``RowIdsAfterJoin``).
    A DELETE's scan then plans no broadcast join of the vectors' bitmaps before its condition
    (four Dataset steps, ~40 ms of planning, and a bit test per row)."""
    from . import few_rows
    from .scan import ORD_COL

    pairs = rows.select(ORD_COL, ROW_COL)
    tasks = few_rows.scan_tasks(ctx.spark, [a.size or 0 for a in files])
    table = few_rows.collect_bounded(pairs, routes.POSITION_ROWS, tasks)
    return None if table is None else after.live_positions(table)


def positions_of(table) -> dict:
    """AddFile path -> ``BitMap64`` of the positions of ``collect_changed``'s rows in it."""
    from . import row_bitmaps

    return {key[0]: bm.rows for key, bm in row_bitmaps.bitmaps_of_table(table, [FILE_COL], ROW_COL).items()}


def written_part(table, row_ids: Optional[str], metadata):
    """The columns of ``collect_changed``'s rows that are written: the table's, then ``row_ids``."""
    from ..catalog import schema as S

    names = [f.name for f in S.metadata_schema(metadata).fields] + ([row_ids] if row_ids is not None else [])
    return table.select(names)
