"""Row ids kept through a deletion-vector UPDATE / MERGE on a table with row tracking.

A row tracking table gives every row a stable id: ``baseRowId`` of its file plus its position,
unless the file's materialised row-id column holds one (PROTOCOL.md, Row Tracking). A
deletion-vector UPDATE leaves the old row in its file, deleted, and writes the new values to a
new file, where the position would give the row a fresh id. Delta keeps the id of an updated
row (its commit version becomes the commit's): the rows written here carry their old id in the
materialised column, and the commit declares ``delta.rowTracking.preserved = true``. Their
materialised commit version stays NULL, so it is the new file's ``defaultRowCommitVersion``.
"""

from __future__ import annotations

from typing import Optional, Sequence

from pyspark.sql import Column, functions as F

from ..catalog import schema as S
from .scan import FILE_COL, ROW_COL, _plain_text, _sql_string
from ..txn import row_tracking


def kept_row_id_column(metadata, files: Sequence) -> Optional[str]:
    """The materialised row-id column the changed rows of ``files`` are written with, or None:
    the table does not track row ids, or a file has no ``baseRowId`` yet (its rows' ids are not
    defined before the backfill, so there is nothing to keep)."""
    columns = row_tracking.materialized_columns(metadata)
    if columns is None or not files or any(f.base_row_id is None for f in files):
        return None  # (no file: no row to change, nothing to keep)
    return columns[0]


def stable_row_id(files: Sequence, column: str) -> Column:
    """Each row's stable id in a scan of ``files`` with ``FILE_COL`` / ``ROW_COL`` and the
    materialised ``column``: the materialised value, else its file's ``baseRowId`` plus its
    position. Computed on the changed rows only (a literal map from the AddFile path)."""
    if files and all(_plain_text(f.path) for f in files):
        pairs = ", ".join(f"{_sql_string(f.path)}, {int(f.base_row_id)}L" for f in files)
        base = F.expr(f"map({pairs})[{FILE_COL}]")
    elif files:
        base = F.create_map(*[x for f in files for x in (F.lit(f.path), F.lit(int(f.base_row_id)))])[F.col(FILE_COL)]
    else:
        base = F.lit(None).cast("long")
    return F.coalesce(S.column(column), base + F.col(ROW_COL)).alias(column)
