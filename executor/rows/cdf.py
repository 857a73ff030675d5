"""Writing Delta's change data feed: the ``cdc`` files of one commit.

With ``delta.enableChangeDataFeed = true`` a commit that changes existing rows (UPDATE, DELETE
and MERGE that touch files, REPLACE WHERE that copies rows) records what changed as Parquet
files under ``_change_data/`` (a partition folder each, as the data files), holding the
table's columns (physical names under column mapping) and ``_change_type`` = 'insert' |
'delete' | 'update_preimage' | 'update_postimage'. They are added by ``cdc`` actions in the
same commit as the data, so a failed or losing attempt leaves no change data behind (their
paths are staged with the data files and removed with them).

Commits that only add rows (INSERT, COPY INTO, a MERGE that only inserts) or only remove
whole files (TRUNCATE, a DELETE decided by partition values) write no cdc file: PROTOCOL.md
lets readers take their add / remove actions as inserted / deleted rows. Once a commit has
one cdc action readers use nothing else of it, so ``record`` is handed every changed row.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Optional

from pyspark.sql import DataFrame, functions as F

from ..catalog import schema as S
from ..catalog import schema_evolution as evolution

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
CDC_DIR = "_change_data"
INSERT, DELETE = "insert", "delete"
PREIMAGE, POSTIMAGE = "update_preimage", "update_postimage"
PROPERTY = "delta.enableChangeDataFeed"


def enabled(metadata) -> bool:
    """Does this table's metadata turn the change data feed on?"""
    if metadata is None:
        return False
    conf = metadata.configuration or {}
    value = next((v for k, v in conf.items() if k.lower() == PROPERTY.lower()), "false")
    return str(value).strip().lower() == "true"


def with_change_type(metadata):
    """``metadata`` whose schema also has a STRING ``_change_type`` column (no column-mapping
    id: its physical name is its name), for writing cdc files with the data writer."""
    schema = json.loads(metadata.schema_string)
    schema["fields"] = list(schema.get("fields", [])) + [
        {"name": CHANGE_TYPE, "type": "string", "nullable": True, "metadata": {}}]
    return replace(metadata, schema_string=json.dumps(schema), extra=dict(metadata.extra))


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def tagged(df: DataFrame, struct, change_type: str) -> DataFrame:
    """``df``'s table columns (in the table's order) with a literal ``_change_type``."""
    return df.select(*[F.col(_q(f.name)) for f in struct.fields], F.lit(change_type).alias(CHANGE_TYPE))


def update_delete_rows(changed: DataFrame, struct, new_values: list, is_update: bool) -> DataFrame:
    """The change rows of an UPDATE / DELETE from ``changed`` (the matching rows, old values in
    the table's columns): a pre- and a post-image per updated row, a 'delete' per deleted one.
    ``new_values``: the table's columns after the update, as Columns over ``changed``."""
    if not is_update:
        return tagged(changed, struct, DELETE)
    pre = tagged(changed, struct, PREIMAGE)
    post = changed.select(*new_values, F.lit(POSTIMAGE).alias(CHANGE_TYPE))
    return pre.unionByName(post)


def acted_rows(ctx, target, acted: DataFrame, touched: dict, struct, inserted: Optional[DataFrame]) -> DataFrame:
    """The change rows of a write from the rows it wrote, never recomputed: ``acted`` holds, per
    updated or deleted target row, its new values in the table's columns, ``_isolde_file``,
    ``_isolde_row`` and ``_isolde_action`` (what the write itself used, materialised or on the
    driver); its old values are read back from the ``touched`` files by position. A MERGE's
    SET values and clause conditions may be non-deterministic (``current_timestamp()``,
    ``rand()``): evaluated a second time they would name other values, or other rows, than the
    table holds. ``inserted``: the inserted rows as written (materialised, or read back)."""
    from .dml import ACTION_COL, DELETE as DELETED, UPDATE as UPDATED, scan_rows
    from .scan import FILE_COL, ROW_COL

    names = [f.name for f in struct.fields]
    new = acted.filter(F.col(ACTION_COL).isin(UPDATED, DELETED)).select(
        F.col(FILE_COL), F.col(ROW_COL), F.col(ACTION_COL),
        *[F.col(_q(n)).alias(f"__isolde_new_{i}") for i, n in enumerate(names)])
    old_types = {f.name: f.dataType for f in target.struct.fields}

    def old_value(n):  # as the (maybe evolved) column: new columns and new struct fields NULL
        if n not in old_types:
            return F.lit(None).cast(struct[n].dataType).alias(n)
        sql = evolution.filled_sql(_q(n), old_types[n], struct[n].dataType)
        return F.col(_q(n)) if sql == _q(n) else F.expr(sql).alias(n)

    old = scan_rows(ctx, target, list(touched.values()), True).select(
        F.col(FILE_COL), F.col(ROW_COL), *[old_value(n) for n in names])
    pairs = new.join(old, [FILE_COL, ROW_COL])
    updated = pairs.filter(F.col(ACTION_COL) == UPDATED)
    deleted = pairs.filter(F.col(ACTION_COL) == DELETED)
    parts = [updated.select(*[F.col(_q(n)) for n in names], F.lit(PREIMAGE).alias(CHANGE_TYPE)),
             updated.select(*[F.col(f"__isolde_new_{i}").alias(n) for i, n in enumerate(names)],
                            F.lit(POSTIMAGE).alias(CHANGE_TYPE)),
             deleted.select(*[F.col(_q(n)) for n in names], F.lit(DELETE).alias(CHANGE_TYPE))]
    if inserted is not None:
        parts.append(tagged(inserted, struct, INSERT))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def written_inserts(ctx, target, metadata, change, touched: dict) -> Optional[DataFrame]:
    """The rows a MERGE inserted into a table with an identity column, read back from the files
    it wrote: their identity values are generated only as the rows are written, past the
    column's high-water mark (updated and copied rows keep theirs). None without an identity
    column (the inserted rows' own values are then exact)."""
    from ..log.actions import AddFile
    from .scan import scan

    struct = S.metadata_schema(metadata)
    ident = next((f for f in struct.fields if S.is_identity(f)), None)
    if ident is None:
        return None
    old = next((f for f in target.struct.fields if f.name == ident.name), None)
    mark = (old.metadata or {}).get(S.IDENTITY_HWM) if old is not None else None
    step = int((ident.metadata or {}).get(S.IDENTITY_STEP, 1))
    new_files = [a for a in change.actions if isinstance(a, AddFile) and a.path not in touched]
    if not new_files:
        return None
    rows = scan(ctx, Viewed(target.snapshot, metadata), target.path, files=new_files)
    if mark is None:
        return rows
    col = F.col(_q(ident.name))
    return rows.filter(col > F.lit(int(mark)) if step > 0 else col < F.lit(int(mark)))


class Viewed:
    """A snapshot read with another metadata (a statement's evolved schema, or ``_change_type``)."""

    def __init__(self, snapshot, metadata):
        self._snapshot = snapshot
        self.metadata = metadata

    def __getattr__(self, name):
        return getattr(self._snapshot, name)


def replaced_rows(ctx, table_path: str, snapshot, replaced_files: list, condition_sql: str, new_files: list):
    """The change rows of an INSERT ... REPLACE WHERE that copied rows: the rows of
    ``replaced_files`` where the condition holds are deleted, the rows of ``new_files`` (the
    new data as written) inserted."""
    from .scan import scan

    struct = S.metadata_schema(snapshot.metadata)
    deleted = scan(ctx, snapshot, table_path, files=replaced_files).filter(
        F.coalesce(F.expr(condition_sql), F.lit(False)))
    rows = tagged(deleted, struct, DELETE)
    if new_files:
        rows = rows.unionByName(tagged(scan(ctx, snapshot, table_path, files=new_files), struct, INSERT))
    return rows


def record(ctx, target, change, rows: Optional[DataFrame], metadata=None) -> None:
    """Write ``rows`` (the table's columns + ``_change_type``) as cdc files and add their
    ``cdc`` actions and staged paths to ``change`` (a ``dml.ChangeSet``). Nothing is written
    when ``rows`` is None or empty."""
    from .writer import WrittenFiles, remove_written

    if rows is None:
        return
    try:
        _write(ctx, target, change, rows, metadata or target.metadata)
    except BaseException:
        # the statement's data files are already staged: none of them may outlive it
        remove_written(WrittenFiles(staged_paths=list(change.staged_paths)))
        raise


def _write(ctx, target, change, rows: DataFrame, metadata) -> None:
    from ..log.actions import AddCDCFile
    from .writer import conform, write_files

    # the values as the data files hold them (cast to the column types, generated columns
    # computed), _change_type carried as one more column of the schema
    with_type = with_change_type(metadata)
    struct = S.metadata_schema(with_type)
    generated = {f.name for f in struct.fields if S.is_generated(f)}
    typed = conform(rows.select(*[F.col(_q(f.name)) for f in struct.fields if f.name not in generated]),
                    _plain(struct), by_name=True, table_name=target.name,
                    configuration=S.configuration(metadata), identity=False)
    written = write_files(ctx, typed, os.path.join(target.path, CDC_DIR), with_type, data_change=False)
    for add in written.adds:
        change.actions.append(AddCDCFile(path=f"{CDC_DIR}/{add.path}", partition_values=dict(add.partition_values),
                                         size=add.size, data_change=False))
    change.staged_paths.extend(written.staged_paths)


def _plain(struct):
    from .dml import _plain_struct

    return _plain_struct(struct)
