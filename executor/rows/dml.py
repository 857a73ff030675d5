"""The shared physical step of UPDATE / DELETE / MERGE: turn "these target rows change" into
data files and log actions.

    open_target(ctx, ref) -> Target            (transaction, snapshot, schema, DV / clustering flags)
    read_scope(target, scope) -> [AddFile]      (records the planner's ConflictScope via the txn)
    apply_changes(ctx, target, changes, touched, inserted=None, *, changed_rows, metadata) -> ChangeSet
    prepared(target, operation, parameters, change, metrics, started) -> PreparedWrite
    run_update_delete(ctx, stmt, is_update)     (the UPDATE / DELETE runners)

A statement describes its effect as one DataFrame ``changes`` over the rows of the
*touched* target files, with the table's columns (new values for updated rows) plus
``_isolde_file`` / ``_isolde_row`` (where the row lives now) and ``_isolde_action``
('keep' | 'update' | 'delete' | 'insert'; insert rows have no file), and optionally a
separate DataFrame of ``inserted`` rows. One place, ``routes.MODE``, decides per touched file:

* ``rewrite`` (copy-on-write): the file's surviving rows ('keep' + 'update') go to new files
  and the file is removed (dataChange=true);
* ``dv``: the changed rows' positions go into the file's deletion vector (union with its old
  one), the file is removed with its old DV and re-added with the new one, and only the
  'update' / 'insert' rows go to new files. A file the change leaves with no live row is
  only removed (as Delta does: no vector covering every row; its row count comes from the
  stats, else the Parquet footer). Metrics as Delta's: numDeletionVectorsAdded (files that
  had none), numDeletionVectorsUpdated (a vector replaced by a larger one),
  numDeletionVectorsRemoved (files with a vector removed outright), numRemovedFiles (files
  removed outright).

Today ``routes.choose_mode`` picks ``dv`` whenever the table has ``delta.enableDeletionVectors`` =
true and the deletionVectors feature, else ``rewrite``. How the changed rows are found (on the
driver or in Spark) is ``routes.FIND``'s.

UPDATE / DELETE run two passes over the snapshot: (1) the candidate files (pruned by the
conflict scope) -> rows matching per file = the touched files; (2) the touched files only ->
new rows. Non-deterministic conditions are materialised once (localCheckpoint) so both passes
agree. With deletion vectors there is one pass: the changed rows (positions, new values) are
materialised as they are found, and are all the write needs. DELETE without WHERE removes
every file without reading data, and so does a DELETE for the files whose partition values
alone make its condition TRUE (``whole_file_deletes``: a condition on partition columns only,
or an OR with such an operand); the reads the transaction records are the same either way.

Each statement answers with Databricks' result row (``results.DmlResult``).
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Optional

import sqlglot.expressions as exp
from pyspark.sql import DataFrame, functions as F
from pyspark.sql import types as T

from isolde.errors import AnalysisError
from . import cdf, few_rows, routes
from ..catalog import schema as S
from . import store_assignment as SA
from ..runtime.phases import phase
from .scan import FILE_COL, ORD_COL, ROW_COL, scan
from .stable_row_ids import kept_row_id_column, stable_row_id
from .target_reads import statement_reads_target
from ..txn.statement_scope import record_scope, scope_flags
from isolde.grammar.dialect import sql as render_sql

ACTION_COL = "_isolde_action"
KEEP, UPDATE, DELETE, INSERT = "keep", "update", "delete", "insert"
# A partitioned copy-on-write rewrite writes each touched partition in its own Spark job (no
# partitionBy sort, which spills on big rewrites) when ``routes.jobs_per_partition`` says so
# (few partitions holding enough bytes each) ...
# ... unless ONE job can write them all, a folder per partition (``write_partition_slices``): no
# job per partition, no partitionBy. Measured on that table (medians of 5 interleaved pairs): UPDATE
# 5.5 -> 5.1 s, DELETE 5.3 -> 5.0 s, MERGE 100k upsert 11.5 -> 9.8 s. False forces the plans above (tests).
SLICE_WRITES = True
# ... with a MERGE's inserted rows written by their own job at the same time (``BackgroundWrite``):
# MERGE 100k upsert 7.0-7.3 -> 6.6-6.9 s (medians of 5 interleaved rounds, two runs)
INSERTS_BESIDE = True


def _truthy(v) -> bool:
    return str(v).strip().lower() == "true"


@dataclass
class Target:
    ctx: Any
    handle: Any
    log: Any
    txn: Any
    snapshot: Any
    metadata: Any
    struct: Any  # pyspark StructType
    partition_columns: list
    path: str
    name: str
    # scans drop the rows deletion vectors delete first, and materialise them (live_rows_first)
    live_rows_first: bool = False

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.struct.fields]

    @property
    def column_types(self) -> dict:
        return {f.name: f.dataType.simpleString() for f in self.struct.fields}

    @property
    def configuration(self) -> dict:
        return S.configuration(self.metadata)

    @property
    def deletion_vectors(self) -> bool:
        return scope_flags(self.snapshot)["deletion_vectors"]

    @property
    def clustered(self) -> bool:
        return scope_flags(self.snapshot)["clustered"]

    def scope_flags(self) -> dict:
        return scope_flags(self.snapshot)


BUDGET_KEY = "isolde.rowLevelConcurrency.budgetRows"


def start_transaction(ctx, log):
    """The statement's transaction, with the session's row-level check budget and user name."""
    from ..txn.transaction import session_user_name

    txn = ctx.start_transaction(log)
    conf = getattr(ctx, "conf", None)
    user = session_user_name(conf)  # SET isolde.userName = ... (commitInfo.userName; else the OS user)
    if user is not None and getattr(txn, "user_name", None) is None:
        txn.user_name = user
    budget = conf.get(BUDGET_KEY) if conf is not None and hasattr(conf, "get") else None
    if budget is not None:
        try:
            txn.row_level_budget_rows = max(0, int(str(budget).strip()))
        except ValueError:
            raise AnalysisError(f"{BUDGET_KEY} must be a number of rows, not {budget!r}.",
                                error_class="INVALID_CONF_VALUE", sqlstate="22022") from None
    return txn


def current_database(ctx) -> str:
    for attr in ("current_database", "database"):
        value = getattr(ctx, attr, None)
        if isinstance(value, str) and value:
            return value
    return "default"


def open_target(ctx, ref) -> Target:
    if ref.version is not None or ref.timestamp is not None:
        raise AnalysisError(f"Cannot write to `{ref.name}` with time travel (VERSION/TIMESTAMP AS OF).",
                            error_class="DELTA_UNSUPPORTED_TIME_TRAVEL_MULTIPLE_FORMATS", sqlstate="42613")
    handle = ctx.catalog.resolve(ref, current_database(ctx))
    log = handle.log
    txn = start_transaction(ctx, log)
    snap = txn.snapshot
    metadata = snap.metadata
    return Target(ctx, handle, log, txn, snap, metadata, S.metadata_schema(metadata),
                  S.partition_columns(metadata), handle.path, handle.name)


@dataclass
class ChangeSet:
    actions: list = field(default_factory=list)
    staged_paths: list = field(default_factory=list)
    num_added_files: int = 0
    num_removed_files: int = 0
    num_added_bytes: int = 0
    num_removed_bytes: int = 0
    num_written_rows: int = 0
    num_copied_rows: int = 0
    num_dv_files: int = 0  # deletion vectors added (to files that had none)
    num_dv_updated: int = 0  # files whose deletion vector grew (old vector replaced)
    num_dv_removed: int = 0  # files removed outright that carried a deletion vector
    num_rewritten_files: int = 0
    metadata_update: Any = None  # new identity high-water marks, when rows were inserted
    row_ids_kept: bool = False  # the changed rows were written with their stable row ids

    def remove_whole(self, add, now: int) -> None:
        """Remove ``add`` outright (every live row of it deleted): no data file, no vector."""
        self.actions.append(add.remove(deletion_timestamp=now, data_change=True))
        self.num_removed_files += 1
        self.num_removed_bytes += add.size or 0
        if add.deletion_vector is not None:
            self.num_dv_removed += 1

    def absorb(self, other: "ChangeSet") -> "ChangeSet":
        """Add ``other``'s actions, staged files and counts to this one (returns self)."""
        self.actions.extend(other.actions)
        self.staged_paths.extend(other.staged_paths)
        for name in ("num_added_files", "num_removed_files", "num_added_bytes", "num_removed_bytes",
                     "num_written_rows", "num_copied_rows", "num_dv_files", "num_dv_updated", "num_dv_removed",
                     "num_rewritten_files"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.metadata_update is not None:
            self.metadata_update = other.metadata_update
        self.row_ids_kept = self.row_ids_kept or other.row_ids_kept
        return self

    def add_written(self, written) -> None:
        """Record the AddFiles (and staged paths) of a ``WrittenFiles``."""
        self.actions.extend(written.adds)
        self.staged_paths.extend(written.staged_paths)
        self.num_added_files += len(written.adds)
        self.num_added_bytes += written.num_bytes
        self.num_written_rows += written.num_rows

    def metrics(self) -> dict:
        return {
            "numAddedFiles": self.num_added_files,
            "numRemovedFiles": self.num_removed_files,
            "numAddedBytes": self.num_added_bytes,
            "numRemovedBytes": self.num_removed_bytes,
            "numDeletionVectorsAdded": self.num_dv_files,
            "numDeletionVectorsRemoved": self.num_dv_removed,
            "numDeletionVectorsUpdated": self.num_dv_updated,
            "numCopiedRows": self.num_copied_rows,
        }


def partition_key(add) -> tuple:
    """The group a touched file's rows are written with in a per-partition rewrite."""
    return tuple(sorted(add.partition_values.items()))


# partition column types whose typed equality is exactly "same partition value in the log":
# inserted rows are matched to a touched partition by it (floats are not: -0.0 = 0.0)
_FOLDABLE_PARTITION_TYPES = ("string", "tinyint", "smallint", "int", "bigint", "date", "boolean", "timestamp",
                             "timestamp_ntz")


def _in_partition(struct, partition_columns, metadata, values: dict):
    """A condition true exactly for rows whose partition columns hold ``values`` (the log's
    partitionValues, keyed by physical name)."""
    from .scan import _cast_partition, _partition_value

    physical = S.logical_to_physical(metadata)
    cond = None
    for p in partition_columns:
        f = S.field_named(struct, p)
        raw = _partition_value(values, physical.get(p, p))
        value = _cast_partition(F.lit(raw).cast("string"), f.dataType) if raw is not None else F.lit(None)
        test = F.col(q(f.name)).eqNullSafe(value)
        cond = test if cond is None else cond & test
    return cond


def _bytes_conf(text: str) -> int:
    """A Spark byte-size setting ('134217728', '128m', '1g') in bytes."""
    text = str(text).strip().lower().rstrip("b")
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def _scan_splits(ctx, target: Target, adds) -> Optional[int]:
    """How many tasks Spark reads ``adds`` with (plans a bare scan: lists, reads no data);
    None when a deletion vector makes the scan a join (planning it would run the broadcast)."""
    if any(a.deletion_vector is not None for a in adds):
        return None
    df = scan(ctx, target.snapshot, target.path, files=list(adds))
    return int(df._jdf.queryExecution().executedPlan().execute().getNumPartitions())


def file_num_records(target: Target, add) -> Optional[int]:
    """The number of rows physically in ``add``'s data file: its stats' numRecords, else the
    Parquet footer's row count (read with pyarrow: no data, no Spark job); None when neither
    can be had (no stats and a file this process cannot open)."""
    n = add.num_records
    if n is not None:
        return n
    cached = add.__dict__.get("_isolde_footer_rows")
    if cached is not None:
        return cached
    from .scan import file_local_path

    try:
        from ..log import table_files

        n = int(table_files.parquet_file(file_local_path(target.path, add.path)).metadata.num_rows)
    except Exception:
        return None
    add.__dict__["_isolde_footer_rows"] = n
    return n


def live_rows(target: Target, add) -> Optional[int]:
    """Rows of ``add`` a reader sees (its rows minus its deletion vector); None when unknown."""
    n = file_num_records(target, add)
    if n is None:
        return None
    dv = add.deletion_vector
    return n - (dv.cardinality if dv is not None else 0)


def _live_rows(target: Target, add) -> int:
    n = live_rows(target, add)
    return n if n is not None else 0


def apply_changes(ctx, target: Target, changes: Optional[DataFrame], touched: dict,
                  inserted: Optional[DataFrame] = None, *, changed_rows: Optional[dict] = None,
                  metadata=None, changes_for: Optional[Callable] = None,
                  views: Optional["TempViews"] = None, changes_by_partition: Optional[Callable] = None,
                  deleted_rows: Optional[dict] = None, changed_only: bool = False,
                  positions: Optional[dict] = None, row_ids: Optional[str] = None,
                  inserted_at_most: Optional[int] = None, rows_on_driver=None) -> ChangeSet:
    """Write the files and build the actions for one DML statement.

    ``touched``: AddFile.path -> AddFile of every file with changed rows; ``changed_rows``:
    path -> number of updated + deleted rows in it (for the per-file decision and metrics).
    ``changes`` holds (at least) every row of the touched files that must survive or change;
    ``inserted`` new rows (table columns only).

    ``changes`` may be a function returning the DataFrame: it is then built only if used (not
    when the changed rows are on the driver and the positions known: a Dataset step less).
    ``changes_for(files) -> DataFrame``, when given, builds ``changes`` over just some of the
    touched files, and promises that no surviving row leaves its file's partition. Then a
    partitioned copy-on-write rewrite writes each partition's rows in its own job into a
    literal partition folder: no partitionBy sort, no per-row file-path lookup. Given ``views``
    (to materialise them once), the ``inserted`` rows that fall into a rewritten partition join
    that partition's job (one file, not a rewritten file plus a file of new rows); only the
    others take a partitionBy write.

    ``changes_by_partition() -> writer.SliceWrite`` (see ``plan_slice_write``), when given with
    ``deleted_rows`` (path -> rows deleted from that file), plans ``changes`` over a
    ``scan_by_partition`` union of the touched files (same promise as ``changes_for``); when
    ``can_write_slices``, the rewrite is then first tried as ONE job writing each task's file
    into its partition's folder (``write_partition_slices``), which checks every partition's
    row count against the log's numRecords minus ``deleted_rows`` and else leaves the table
    untouched for the job per partition.

    ``changed_only``: ``changes`` is exactly the changed rows, materialised (what the
    deletion-vector plans of UPDATE / DELETE / MERGE hand over): the vectors' positions and
    the written rows both come from it, and a write that only deletes writes no file.
    ``positions``: the changed rows' positions per file (``changed_positions``), when the
    statement already collected them: no second job for the vectors.
    ``row_ids``: with ``changed_only``, the materialised row-id column ``changes`` carries
    (``stable_row_ids``): the changed rows are written with it, so they keep their row ids, and
    the ChangeSet says so (``row_ids_kept``) unless a file had to be rewritten.
    ``inserted_at_most``: an upper bound of the ``inserted`` rows (a MERGE's source rows). With
    it (or no inserted rows), ``changed_rows`` and ``deleted_rows``, a statement that rewrites
    no file knows how many rows it writes, and few of them are written by the driver
    (``driver_write.write_counted_rows``).
    ``rows_on_driver``: with ``changed_only``, the updated rows as they are written
    (``conform_changed``, row ids last when ``row_ids``), already an Arrow table on the driver
    (``bounded_rows``): written by pyarrow when no file is rewritten (with the ``inserted``
    rows when they are counted and few, else those by Spark's writer), else ignored.
    """
    from .writer import BackgroundWrite, remove_written, conform, write_files

    metadata = metadata or target.metadata
    struct = S.metadata_schema(metadata)
    cols = [f.name for f in struct.fields]
    changed_rows = changed_rows or {}
    mode = routes.choose_mode(target.deletion_vectors)  # (the same for every touched file today)
    rewrite = sorted(touched) if mode == routes.REWRITE else []
    dv_files = sorted(touched) if mode == routes.DV else []
    out = ChangeSet()
    now = int(time.time() * 1000)

    # identity columns keep their values on changed rows and are generated for inserted rows;
    # generated columns are recomputed from the new values (as Delta does)
    ident = [f.name for f in struct.fields if S.is_identity(f)]
    generated = [f.name for f in struct.fields if S.is_generated(f)]
    observed = None  # the conformed inserted rows, whose generated identity values are observed
    plain = _plain_struct(struct)
    config = S.configuration(metadata)
    parts: list[DataFrame] = []
    driver_rows = None  # rows_on_driver, when they are what this write writes
    grouped: list = []  # (partition values, conformed rows) written without a partitionBy sort
    groups: dict = {}
    if changes_for is not None and changes is not None and rewrite and not dv_files and target.partition_columns \
            and not any(S.is_generated(f) and f.name.lower() in {c.lower() for c in target.partition_columns}
                        for f in struct.fields):
        for p in rewrite:
            groups.setdefault(partition_key(touched[p]), []).append(touched[p])
        size = sum(touched[p].size or 0 for p in rewrite)
        if changes_by_partition is not None and deleted_rows is not None \
                and can_write_slices(target, [touched[p] for p in rewrite], metadata):
            beside: list = []  # the inserted rows' write, started beside the rewrite's job
            new_rows = None
            if inserted is not None and not ident and INSERTS_BESIDE:
                new_rows = conform(inserted.select(*[S.column(c) for c in cols if c not in generated]), plain,
                                   by_name=True, table_name=target.name, configuration=config, identity=False)

            def start_inserts():  # once the rewrite's job is planned: it is submitted first
                beside.append(BackgroundWrite(ctx, new_rows, target.path, metadata))

            try:
                flat = _write_by_partition(ctx, target, changes_by_partition, deleted_rows,
                                           on_submit=start_inserts if new_rows is not None else None)
            except BaseException:
                for write in beside:
                    write.discard()
                raise
            if beside:
                inserted = None
                try:
                    out.add_written(beside[0].result())
                except BaseException:
                    if flat is not None:
                        remove_written(flat)
                    raise
            if flat is not None:
                out.add_written(flat)
                groups = {}
                changes = None
        if not routes.jobs_per_partition(len(groups), size):
            groups = {}
    if groups:
        sel = [S.column(c) for c in cols if c not in generated]
        new_rows = None  # inserted rows, conformed and materialised, when they join the groups' jobs
        if inserted is not None and views is not None and not ident and all(
                S.field_named(struct, c).dataType.simpleString() in _FOLDABLE_PARTITION_TYPES
                for c in target.partition_columns):
            ins = inserted.select(*[S.column(c) for c in cols if c not in generated])
            new_rows = views.checkpoint(conform(ins, plain, by_name=True, table_name=target.name,
                                                configuration=config, identity=False))
            inserted = None
            spark = ctx.spark
            cores = max(1, spark.sparkContext.defaultParallelism)
            split_bytes = _bytes_conf(spark.conf.get("spark.sql.files.maxPartitionBytes", "128m"))

        def group_rows(adds):
            rows = changes_for(adds).filter(F.col(ACTION_COL) != DELETE)
            rows = conform(rows.select(*sel), plain, by_name=True, table_name=target.name,
                           configuration=config, identity=False)
            if new_rows is None:
                return rows
            mine = new_rows.filter(_in_partition(struct, target.partition_columns, metadata,
                                                 adds[0].partition_values)).coalesce(1)
            rows = rows.unionByName(mine)
            # the new rows ride along in a rewrite task, not in a small file of their own. With a
            # job per core or more, a partition of at most one read split's size is one task (Spark
            # would halve a lone 50 MB file to keep both cores busy, one half often empty: a file
            # is read by row group); else as many tasks as the rewrite alone.
            if len(groups) >= cores and sum(a.size or 0 for a in adds) <= split_bytes:
                return rows.coalesce(1)
            splits = _scan_splits(ctx, target, adds)
            return rows.coalesce(splits) if splits else rows

        for key, adds in groups.items():
            grouped.append((dict(key), lambda adds=adds: group_rows(adds)))
        if new_rows is not None:
            # new rows of partitions no touched file is in
            matches = [_in_partition(struct, target.partition_columns, metadata, adds[0].partition_values)
                       for adds in groups.values()]
            elsewhere = new_rows.filter(~functools.reduce(lambda a, b: a | b, matches))
            if not elsewhere.isEmpty():
                parts.append(elsewhere)
    elif changes is not None and (touched or inserted is None) and not (
            changed_only and deleted_rows is not None and sum(deleted_rows.values()) == sum(changed_rows.values())):
        # (the changed rows of a deletion-vector write that only deletes: no row to write)
        kept_ids = row_ids if row_ids is not None and changed_only and not rewrite else None
        out.row_ids_kept = kept_ids is not None
        if rows_on_driver is not None and changed_only and dv_files and not rewrite:
            driver_rows = rows_on_driver
        else:
            changes = changes() if callable(changes) else changes  # built only when a write reads it
            if not dv_files:
                keep = changes.filter(F.col(ACTION_COL) != DELETE)
            elif dv_files and not rewrite:
                keep = changes.filter(F.col(ACTION_COL).isin(UPDATE, INSERT))
            else:
                in_rewrite = F.col(FILE_COL).isin(rewrite)
                keep = changes.filter(F.col(ACTION_COL).isin(UPDATE, INSERT) | (in_rewrite & (F.col(ACTION_COL) == KEEP)))
            parts.append(conform_changed(target, metadata, keep, kept_ids))
    if inserted is not None:
        # an ALWAYS identity column is generated; a BY DEFAULT one keeps a value the insert gave it
        always = {f.name for f in struct.fields
                  if S.is_identity(f) and not f.metadata.get(S.IDENTITY_ALLOW_EXPLICIT, False)}
        wanted = [c for c in cols if c not in generated and c not in always]
        ins = inserted if inserted.columns == wanted else inserted.select(*[S.column(c) for c in wanted])
        ins = conform(ins, struct, by_name=True, table_name=target.name, configuration=config, identity=bool(ident))
        observed = ins  # (the identity values it generates: writer.identity_metadata_update)
        if out.row_ids_kept:  # new rows take fresh ids: their file's baseRowId + position
            ins = ins.withColumn(row_ids, F.lit(None).cast("long"))
        parts.append(ins)

    if dv_files:
        if positions is None:
            changes = changes() if callable(changes) else changes
            with phase("find"):
                positions = changed_positions(changes, dv_files)
        with phase("dv"):
            _build_vectors(target, touched, dv_files, positions, out, now)

    if driver_rows is not None:
        from .driver_write import write_arrow_rows, write_counted_rows

        hidden = (row_ids,) if out.row_ids_kept else ()
        written = None
        if parts and inserted_at_most is not None:  # the inserted rows: in the same files when few
            written = write_counted_rows(ctx, _union(parts), target.path, metadata, True, hidden,
                                         rows_at_most=inserted_at_most, with_rows=driver_rows)
            if written is not None:
                parts = []
                if ident:
                    from .writer import identity_metadata_update

                    out.metadata_update = identity_metadata_update(metadata, written, observed)
        if written is None:
            written = write_arrow_rows(ctx, driver_rows, target.path, metadata, True, hidden)
        out.add_written(written)
    if grouped:
        from .writer import write_partition_groups

        out.add_written(write_partition_groups(ctx, grouped, target.path, metadata, data_change=True))
    if parts:
        df = _union(parts)
        hidden = (row_ids,) if out.row_ids_kept else ()
        written = None
        counted = _rows_to_write(dv_files, rewrite, changed_rows, deleted_rows, inserted_at_most
                                 if inserted is not None else 0)
        if counted is not None:  # few enough, counted: computed by Spark, written on the driver
            from .driver_write import write_counted_rows

            written = write_counted_rows(ctx, df, target.path, metadata, True, hidden, rows_at_most=counted)
        if written is None:
            if dv_files and not rewrite and target.partition_columns:
                # the updated rows come in the target's splits: each partition's new rows in one
                # task, one new file per partition (not one per partition and split)
                df = df.repartition(*[F.col(q(c)) for c in target.partition_columns])
            written = write_files(ctx, df, target.path, metadata, data_change=True, hidden=hidden)
        if ident and inserted is not None:
            from .writer import identity_metadata_update

            out.metadata_update = identity_metadata_update(metadata, written, observed)
        out.add_written(written)

    for p in rewrite:
        add = touched[p]
        out.actions.append(add.remove(deletion_timestamp=now, data_change=True))
        out.num_removed_files += 1
        out.num_removed_bytes += add.size or 0
        out.num_rewritten_files += 1
        out.num_copied_rows += max(_live_rows(target, add) - changed_rows.get(p, 0), 0)
    return out


def _union(parts: list) -> DataFrame:
    df = parts[0]
    for other in parts[1:]:
        df = df.unionByName(other)
    return df


def _rows_to_write(dv_files: list, rewrite: list, changed_rows: dict, deleted_rows: Optional[dict],
                   inserted: Optional[int]) -> Optional[int]:
    """How many rows at most a write that rewrites no file writes: the updated rows of the files
    that take a deletion vector (changed less deleted) and ``inserted``; None when not known."""
    if rewrite or deleted_rows is None or inserted is None:
        return None
    return sum(max(changed_rows.get(p, 0) - deleted_rows.get(p, 0), 0) for p in dv_files) + inserted


def conform_changed(target: Target, metadata, rows: DataFrame, row_ids: Optional[str] = None,
                    passthrough: tuple = (), only_where=None) -> DataFrame:
    """Changed rows (the table's columns and more) as they are written: the table's columns in
    order, cast, generated columns recomputed, constraints checked, identity values kept; then
    ``row_ids`` (their stable row ids) and the ``passthrough`` columns, unchanged.
    ``only_where``: see ``writer.conform``."""
    from .writer import conform

    struct = S.metadata_schema(metadata)
    names = [f.name for f in struct.fields if not S.is_generated(f)]
    extra = [T.StructField(row_ids, T.LongType(), True)] if row_ids is not None else []
    extra += [T.StructField(c, rows.schema[c].dataType, True) for c in passthrough]
    names += [f.name for f in extra]
    return conform(rows.select(*[S.column(c) for c in names]), T.StructType(_plain_struct(struct).fields + extra),
                   by_name=True, table_name=target.name, configuration=S.configuration(metadata), identity=False,
                   only_where=only_where)


def _build_vectors(target: Target, touched: dict, dv_files: list, positions: dict, out: ChangeSet, now: int) -> None:
    """Each file's new deletion vector: its changed positions (``positions``: path -> BitMap64)
    OR its old vector, written beside the table; a file left with no live row is removed."""
    from pyroaring import BitMap64

    from ..log.deletion_vectors import dv_file_path, read_deletion_vector, write_deletion_vectors

    rows = {p: BitMap64(positions[p]) if p in positions else BitMap64() for p in dv_files}
    for p in dv_files:
        old = touched[p].deletion_vector
        if old is not None:
            rows[p] |= read_deletion_vector(target.path, old)
    # a file left with no live row is removed outright, as Delta does: no vector that
    # covers every row (its row count must be known exactly, else it keeps a vector)
    emptied = set()
    for p in dv_files:
        n = file_num_records(target, touched[p]) if len(rows[p]) else None
        if n is not None and len(rows[p]) >= n:
            emptied.add(p)
    vectors = {p: rows[p] for p in dv_files if len(rows[p]) and p not in emptied}
    descriptors = write_deletion_vectors(target.path, vectors) if vectors else {}
    out.staged_paths.extend(sorted({dv_file_path(target.path, d) for d in descriptors.values()}))
    for p in dv_files:
        add = touched[p]
        if p in emptied:
            out.remove_whole(add, now)
            continue
        if p not in descriptors:
            continue
        dv = descriptors[p]
        out.actions.append(add.remove(deletion_timestamp=now, data_change=True))
        new_add = _with_dv(add, dv)
        out.actions.append(new_add)
        if add.deletion_vector is not None:
            out.num_dv_updated += 1
        else:
            out.num_dv_files += 1


def changed_positions(changes: DataFrame, paths: Optional[list] = None) -> dict:
    """AddFile.path -> ``BitMap64`` of the row positions in it that ``changes`` updates or
    deletes, for the files ``paths`` (default: all): one Spark job, the bitmaps built in Spark
    (``row_bitmaps``), never a row list on the driver."""
    from . import row_bitmaps

    return row_bitmaps.positions_by_file(changes.filter(F.col(ACTION_COL) != KEEP), FILE_COL, ROW_COL, paths)


def changed_positions_of(table) -> dict:
    """``changed_positions`` of changed rows already on the driver (an Arrow table, ``few_rows``)."""
    import pyarrow.compute as pc

    from . import row_bitmaps

    changed = table.filter(pc.not_equal(table.column(ACTION_COL), KEEP))
    return {key[0]: bm.rows for key, bm in row_bitmaps.bitmaps_of_table(changed, [FILE_COL], ROW_COL).items()}


def _plain_struct(struct):
    """The table's columns without identity metadata (identity values are kept, not generated)."""

    return T.StructType([T.StructField(f.name, f.dataType, f.nullable,
                                       {k: v for k, v in f.metadata.items() if not k.startswith("delta.identity.")})
                         for f in struct.fields])


def can_write_slices(target: Target, adds, metadata=None) -> bool:
    """May the rewrite of ``adds`` be tried as ONE job with a folder per partition
    (``write_partition_slices``)? Copy-on-write of a partitioned table whose partition values
    are not generated, at most ``routes.MAX_GROUP_JOBS`` partitions, and every file's live row count known
    exactly (numRecords, no deletion vector): the row-count check after the job needs it."""
    metadata = metadata or target.metadata
    parts = {p.lower() for p in target.partition_columns}
    return (SLICE_WRITES and bool(adds) and bool(parts) and not target.deletion_vectors
            and not any(S.is_generated(f) and f.name.lower() in parts for f in S.metadata_schema(metadata).fields)
            and all(a.num_records is not None and a.deletion_vector is None for a in adds)
            and len({partition_key(a) for a in adds}) <= routes.MAX_GROUP_JOBS)


def plan_slice_write(ctx, target: Target, changes: DataFrame, slices, metadata=None):
    """The surviving rows of ``changes`` (a ``scan_by_partition`` union's rows with their
    ``_isolde_action``), conformed, as a planned ``writer.SliceWrite``."""
    from .writer import conform, plan_partition_slices

    metadata = metadata or target.metadata
    plain = _plain_struct(S.metadata_schema(metadata))
    rows = changes.filter(F.col(ACTION_COL) != DELETE).select(
        *[F.col(q(f.name)) for f in plain.fields if not S.is_generated(f)])
    rows = conform(rows, plain, by_name=True, table_name=target.name, configuration=S.configuration(metadata),
                   identity=False)
    return plan_partition_slices(ctx, rows, slices, metadata)


def _write_by_partition(ctx, target: Target, changes_by_partition, deleted_rows: dict, on_submit=None):
    """The surviving rows of the touched files in one job, a folder per partition (see
    ``write_partition_slices``); None when that could not be done safely (nothing written)."""
    from .scan import file_local_path
    from .writer import write_partition_slices

    plan = changes_by_partition()
    rows = {a.path: _live_rows(target, a) - deleted_rows.get(a.path, 0) for sl in plan.slices for a in sl.files}
    expected = [sum(rows[a.path] for a in sl.files) for sl in plan.slices]
    per_file = {os.path.normpath(file_local_path(target.path, path)): n for path, n in rows.items()}
    return write_partition_slices(ctx, plan, expected, target.path, data_change=True, on_submit=on_submit,
                                  expected_file_rows=per_file)


def _with_dv(add, dv):
    return replace(add, deletion_vector=dv, data_change=True, extra=dict(add.extra))


# --------------------------------------------------------------------------- helpers for the jobs


class TempViews:
    """Unique temp view names for DataFrames, dropped on close; and DataFrames materialised
    for the statement (``checkpoint``), whose blocks are released on close instead of
    lingering in executor memory until the JVM's garbage collector finds them."""

    def __init__(self, spark):
        self.spark = spark
        self.names: list[str] = []
        self.materialised: list = []

    def checkpoint(self, df: DataFrame, eager: bool = True) -> DataFrame:
        """``df`` materialised for the statement; ``eager=False`` leaves the filling to the first
        job that reads it (a job less when that job is needed anyway)."""
        df = df.localCheckpoint(eager=eager)
        self.materialised.append(df)
        return df

    def add(self, df: DataFrame, hint: str = "v") -> str:
        name = f"__isolde_{hint}_{uuid.uuid4().hex[:12]}"
        df.createOrReplaceTempView(name)
        self.names.append(name)
        return name

    def close(self) -> None:
        for n in self.names:
            try:
                self.spark.catalog.dropTempView(n)
            except Exception:
                pass
        self.names.clear()
        for df in self.materialised:
            try:  # a checkpointed DataFrame is a LogicalRDD over the persisted blocks
                df._jdf.queryExecution().analyzed().rdd().unpersist(False)
            except Exception:
                pass  # best effort: Spark's cleaner frees them once unreferenced anyway
        self.materialised.clear()


def bind_tables(ctx, tree, views: TempViews, *, target: Optional[Target] = None):
    """A copy of a sqlglot tree whose table references read the snapshots they name (the
    target at the transaction's snapshot unless time travel names another version:
    executor/catalog/table_binding.py), each registered as one of ``views``."""
    from ..catalog.table_binding import bind_tables as bind, pin

    pinned = pin(target.path, target.snapshot) if target is not None else None
    bound, _reads = bind(ctx, tree, lambda df: views.add(df, "t"), pinned=pinned)
    return bound


def strip_qualifier(struct, path, qualifiers) -> tuple:
    """An assignment path without a leading table alias / name (``t.v`` -> ``v``)."""
    path = tuple(path)
    if len(path) > 1 and S.field_named(struct, path[0]) is None and path[0].lower() in qualifiers:
        return path[1:]
    return path


def bound_sql(ctx, node, views, target) -> str:
    """SQL text of an expression slot: the user's own text unless a table in it must be bound
    to its snapshot (then sqlglot regenerates it)."""

    if node is None:
        return "TRUE"
    if any(True for _ in node.tree.find_all(exp.Table)):
        return sql_of(bind_tables(ctx, node.tree, views, target=target))
    return node.sql


def sql_of(tree) -> str:
    return render_sql(tree)


def predicates_json(items: Iterable[str]) -> str:
    return json.dumps(list(items))


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def commit(target: Target, actions: list, operation: str, parameters: dict, metrics: dict, started: float):
    """Commit through the transaction; returns the new version."""
    metrics = dict(metrics)
    metrics["executionTimeMs"] = int((time.time() - started) * 1000)
    result = target.txn.commit(actions, operation=operation, operation_parameters=parameters, metrics=metrics)
    version = getattr(result, "version", result)
    return version, metrics


# --------------------------------------------------------------------------- reading through the transaction

TGT_FLAG = "__isolde_tgt"


def scan_rows_by_partition(ctx, target: Target, files) -> tuple:
    """``scan_rows`` without row ids as a ``scan_by_partition`` union: (DataFrame, slices)."""
    from .scan import scan_by_partition

    df, slices = scan_by_partition(ctx, target.snapshot, target.path, files)
    df = df.select("*", F.lit(None).cast("string").alias(FILE_COL), F.lit(None).cast("long").alias(ROW_COL))
    return df.withColumn(TGT_FLAG, F.lit(True)), slices


def scan_rows(ctx, target: Target, files, with_ids: bool = True, hidden: tuple = (),
              with_ordinal: bool = False) -> DataFrame:
    """The target's rows of ``files`` with ``_isolde_file`` / ``_isolde_row`` (NULL when
    ``with_ids`` is false: copy-on-write needs no row positions, and skipping them saves the
    file-path join) and a TRUE ``__isolde_tgt`` flag (tells target rows from outer-join gaps);
    ``with_ordinal`` (with ``with_ids``): also ``_isolde_ord``, the row's file's index in ``files``."""
    flag = f"true AS {TGT_FLAG}"
    if with_ids:
        df = scan(ctx, target.snapshot, target.path, files=files, with_row_ids=True, hidden=hidden, extra=[flag],
                  with_ordinal=with_ordinal)
    else:
        df = scan(ctx, target.snapshot, target.path, files=files,
                  extra=[f"CAST(NULL AS STRING) AS {FILE_COL}", f"CAST(NULL AS BIGINT) AS {ROW_COL}", flag])
    if target.live_rows_first and any(a.deletion_vector is not None
                                      for a in (target.snapshot.all_files if files is None else files)):
        df = df.localCheckpoint(eager=True)  # (live_rows_first)
    return df



def scan_rows_for_join(ctx, target: Target, files, hidden: tuple = ()) -> tuple:
    """``scan_rows`` whose deletion vectors and ``_isolde_file`` wait for a selective join:
    (DataFrame with ``_isolde_ord``, ``scan.RowIdsAfterJoin``); see ``scan.scan_for_join``."""
    from .scan import scan_for_join

    df, after = scan_for_join(ctx, target.snapshot, target.path, files, hidden=hidden, extra=[f"true AS {TGT_FLAG}"])
    if target.live_rows_first and after.deleted is not None:
        # (live_rows_first) the deleted rows dropped before any join, the ordinals kept
        df = after.deleted.drop_from(ctx.spark, df, keep_ordinal=True).localCheckpoint(eager=True)
        after = replace(after, deleted=None)
    return df, after


def read_scope(target: Target, scope) -> list:
    """Record the statement's conflict scope through its transaction; returns the candidate files."""
    return record_scope(target.txn, scope)


def has_nondeterminism(*trees) -> bool:

    from isolde.planner.predicates import NON_DETERMINISTIC, NON_DETERMINISTIC_NAMES

    for tree in trees:
        if tree is None:
            continue
        for node in tree.walk():
            if isinstance(node, NON_DETERMINISTIC):
                return True
            if isinstance(node, exp.Anonymous) and str(node.name).lower() in NON_DETERMINISTIC_NAMES:
                return True
    return False


def resolve_column_path(struct, path: tuple, table: str):
    """(top-level field name, nested path tuple with canonical names, leaf DataType) of an assignment."""

    from isolde.errors import ColumnNotFoundError

    names = []
    dtype = None
    current = struct
    for i, part in enumerate(path):
        if not isinstance(current, T.StructType):
            raise AnalysisError(f"Cannot assign to `{'.'.join(path)}`: `{'.'.join(path[:i])}` is not a struct.",
                                error_class="DELTA_ASSIGNMENT_NOT_STRUCT", sqlstate="42000")
        f = S.field_named(current, part)
        if f is None:
            raise ColumnNotFoundError(".".join(path), table, [x.name for x in current.fields])
        names.append(f.name)
        dtype = f.dataType
        current = f.dataType
    return names[0], tuple(names[1:]), dtype


def resolve_field(struct, path) -> T.StructField:
    """The field an assignment path names (a nested one for ``s.a``)."""
    current, field_ = struct, None
    for part in path:
        field_ = S.field_named(current, part)
        current = field_.dataType if field_ is not None else None
    return field_


def _holds_struct(dt) -> bool:
    return any(isinstance(t, T.StructType) for t in S.nested_types(dt))


def bare_column_type(tree, struct, qualifiers) -> Optional[T.DataType]:
    """The type of a value that is a plain column of the target (``v``, ``t.v``), else None."""
    if not isinstance(tree, exp.Column) or (tree.table and tree.table.lower() not in qualifiers) \
            or tree.args.get("db") is not None:
        return None
    f = S.field_named(struct, tree.name)
    return f.dataType if f is not None else None


def value_types(ctx, views, target: Target, alias: str, struct, values, qualifiers) -> list:
    """The type of each assigned value (``values``: (sqlglot tree, bound SQL, target type)), as
    far as storing it needs: a plain column's from the schema, a value stored in a column
    holding structs (resolved by name, so its fields must be known) from one analysis over no
    rows; None elsewhere (the store checks it as the job runs)."""
    out = [bare_column_type(tree, struct, qualifiers) for tree, _, _ in values]
    need = [i for i, (t, (_, _, dst)) in enumerate(zip(out, values)) if t is None and _holds_struct(dst)]
    if need:
        view = views.add(scan(ctx, target.snapshot, target.path, files=[]), "types")
        items = ", ".join(f"({values[i][1]}) AS __isolde_t{i}" for i in need)
        schema = ctx.spark.sql(f"SELECT {items} FROM {view} AS {q(alias)}").schema
        for i in need:
            out[i] = schema[f"__isolde_t{i}"].dataType
    return out


def assignment_columns(struct, assignments, table: str, value_name, value_types=None) -> dict:
    """Column expressions for UPDATE-style assignments: top-level column name -> Column, given
    ``value_name(i)``, the column holding assignment i's value, and ``value_types[i]`` its type
    (None: not known). Values are stored by Delta's rules (store_assignment.py: overflow and
    malformed strings fail, structs by name), a generated column's given value must match its
    expression, an identity column cannot be assigned; an assignment to a nested field rebuilds
    its struct (as Delta does, a NULL parent struct becomes a struct whose other fields are NULL)."""
    flat = assignment_sql(struct, assignments, table, value_name, value_types)
    tree: dict = {}
    for i, a in enumerate(assignments):
        name, nested, dtype = resolve_column_path(struct, tuple(a.column), table)
        if not nested:
            tree[name] = F.expr(flat[name])
            continue
        node = tree
        for part in (name,) + nested[:-1]:
            node = node.setdefault(part, {})
        vt = value_types[i] if value_types is not None else None
        node[nested[-1]] = F.expr(SA.stored_sql(q(value_name(i)), vt, dtype, column=".".join((name,) + nested),
                                                write=SA.UPDATE))

    def build(node, base, dtype):
        fields = []
        for f in dtype.fields:
            sub = base.getField(f.name)
            if f.name in node:
                v = node[f.name]
                fields.append((v if not isinstance(v, dict) else build(v, sub, f.dataType)).alias(f.name))
            else:
                fields.append(sub.alias(f.name))
        return F.struct(*fields)

    out = {}
    for name, v in tree.items():
        if isinstance(v, dict):
            out[name] = build(v, F.col(q(name)), S.field_named(struct, name).dataType)
        else:
            out[name] = v
    return out


def assignment_sql(struct, assignments, table: str, value_name, value_types=None) -> dict:
    """The SQL of each whole top-level column an UPDATE-style clause assigns (nested field
    assignments are left to ``assignment_columns``): its value stored by Delta's rules, checked
    against its generation expression for a generated column. Validates every assignment
    (unknown columns, a column assigned twice, identity columns)."""
    leaves: list = []
    flat: dict = {}
    for i, a in enumerate(assignments):
        name, nested, dtype = resolve_column_path(struct, tuple(a.column), table)
        SA.refuse_identity_update(S.field_named(struct, name))
        key = (name,) + nested
        for other in leaves:
            if other[: len(key)] == key or key[: len(other)] == other:
                raise AnalysisError(f"Column `{'.'.join(key)}` is assigned more than once.",
                                    error_class="DELTA_CONFLICT_SET_COLUMN", sqlstate="42701")
        leaves.append(key)
        if not nested:
            vt = value_types[i] if value_types is not None else None
            flat[name] = SA.stored_sql(q(value_name(i)), vt, dtype, column=name, write=SA.UPDATE)
    return flat


def generated_guard(struct, assignments, table: str, value_name, value_types=None, when: str = "true"):
    """The filter (SQL, TRUE or failing) that checks each generated column an UPDATE-style
    clause assigns against its expression over the new row (``store_assignment.generated_guard``),
    on the rows where ``when`` holds; None when the clause assigns none. Beside a nested field
    assignment (``SET g = 1, st.x = id``) the check still runs: a generated column's given value
    is never dropped silently. A generated column whose expression reads a struct a field of
    which the same clause assigns is refused (the new struct is built as a Column, not SQL)."""
    resolved = [resolve_column_path(struct, tuple(a.column), table) for a in assignments]
    given = {name for name, nested, _ in resolved if not nested and S.is_generated(S.field_named(struct, name))}
    if not given:
        return None
    nested_tops = {name.lower() for name, nested, _ in resolved if nested}
    for name in sorted(given):
        read = SA.generation_reads(S.field_named(struct, name))
        if read & nested_tops:
            raise AnalysisError(
                f"The generated column `{name}` is given a value while the same clause assigns a field of "
                f"`{sorted(read & nested_tops)[0]}`, which its expression reads: not supported; assign them in "
                "two statements.", error_class="UNSUPPORTED_FEATURE", sqlstate="0A000")
    flat = assignment_sql(struct, assignments, table, value_name, value_types)
    guard = SA.generated_guard(struct, {n.lower(): v for n, v in flat.items()}, given)
    return None if guard is None else f"CASE WHEN {when} THEN {guard} ELSE true END"


# --------------------------------------------------------------------------- UPDATE / DELETE


def prepared(target: Target, operation: str, parameters: dict, change: Optional[ChangeSet], metrics: dict,
             started: float, *, updated: int = 0, deleted: int = 0, inserted: int = 0):
    """A PreparedWrite whose commit goes through the statement's transaction and answers with a
    ``DmlResult``: Databricks' result row of ``operation`` (UPDATE / DELETE / MERGE) from these
    row counts. A statement with no action commits nothing and answers with zeros at the
    version it read."""
    from ..session.results import DmlResult, PreparedWrite

    actions = list(change.actions) if change is not None else []
    staged = list(change.staged_paths) if change is not None else []
    all_metrics = dict(metrics)
    if change is not None:
        all_metrics.update({k: v for k, v in change.metrics().items() if k not in all_metrics})

    def commit_fn():
        if not actions:
            # nothing changed: the statement is a read of its snapshot; no commit is needed
            m = dict(all_metrics)
            m["executionTimeMs"] = int((time.time() - started) * 1000)
            return DmlResult.of(operation, target.snapshot.version, operation, m, target.name, time.time() - started)
        if change.row_ids_kept:  # (else the transaction infers it from the actions)
            target.txn.row_ids_preserved = True
        version, m = commit(target, actions, operation, parameters, all_metrics, started)
        return DmlResult.of(operation, version, operation, m, target.name, time.time() - started,
                            updated=updated, deleted=deleted, inserted=inserted)

    return PreparedWrite(operation=operation, table=target.name, commit_fn=commit_fn, staged_paths=staged,
                         metrics=all_metrics)


# --------------------------------------------------------------------------- whole files deleted from the log


def _or_operands(tree) -> list:
    while isinstance(tree, exp.Paren):
        tree = tree.this
    if isinstance(tree, exp.Or):
        return _or_operands(tree.this) + _or_operands(tree.expression)
    return [tree]


def _decided_by_partition_values(node, partition_columns, qualifiers) -> bool:
    """Does ``node`` (a condition) read nothing but partition columns and constants, with no
    subquery, aggregate, window or non-deterministic call? Then its value is the same on every
    row of a file, and the file's partition values decide it."""
    if node.find(exp.Subquery, exp.Exists, exp.Select, exp.Table, exp.AggFunc, exp.Window, exp.Star,
                 exp.Placeholder, exp.Parameter, exp.Anonymous, exp.Lambda) is not None:
        return False
    if has_nondeterminism(node):
        return False
    parts = {p.lower() for p in partition_columns}
    for c in node.find_all(exp.Column):
        if not isinstance(c.this, exp.Identifier) or c.name.lower() not in parts:
            return False
        if c.args.get("db") is not None or c.args.get("catalog") is not None:
            return False
        if c.table and c.table.lower() not in qualifiers:
            return False
    return True


def whole_file_deletes(ctx, target: Target, stmt, files: list) -> Optional[tuple[list, list]]:
    """The files a DELETE removes whole, known from their partition values alone (Delta's
    "DELETE with partition-only predicate"): ``(removed whole, still to scan)``, or None when
    no part of the condition is decided by partition values (every file is scanned).

    The condition's top-level OR operands that read only partition columns and constants are
    evaluated by Spark once per distinct partition of ``files`` (a one-row-per-partition
    DataFrame built from the log; no data file is read). A file where they are TRUE has every
    row deleted whatever its other columns hold (TRUE OR anything is TRUE). When the whole
    condition is such an operand, no other file has a matching row either: nothing is scanned.
    Without WHERE every file is removed. Spark evaluates the same expression on the same typed
    partition values the scan would produce (``scan._cast_partition``), so the rows deleted are
    the rows the scan would have deleted.
    """
    if stmt.where is None:
        return list(files), []
    tree = stmt.where.tree
    if tree is None:
        return None
    alias = stmt.alias or (stmt.table.parts[-1] if stmt.table.parts else None)
    qualifiers = {x.lower() for x in (stmt.alias, stmt.table.parts[-1] if stmt.table.parts else None) if x}
    operands = _or_operands(tree)
    decided = [n for n in operands if _decided_by_partition_values(n, target.partition_columns, qualifiers)]
    if not decided:
        return None
    exact = len(decided) == len(operands)
    if not files:
        return ([], []) if exact else None
    cond = stmt.where.sql if exact else " OR ".join(f"({render_sql(n)})" for n in decided)
    try:
        holds = _partitions_where(ctx, target, files, cond, alias or "t")
    except Exception:
        return None  # let the scan evaluate (and report) the condition
    covered = [f for f in files if partition_key(f) in holds]
    if exact:
        return covered, []
    covered_paths = {f.path for f in covered}
    return covered, [f for f in files if f.path not in covered_paths]


def _partitions_where(ctx, target: Target, files: list, condition: str, alias: str) -> set:
    """The ``partition_key``s of ``files`` whose partition values make ``condition`` TRUE."""

    from .scan import _cast_partition, _partition_value

    keys = sorted({partition_key(f) for f in files}, key=repr)
    physical = S.logical_to_physical(target.metadata)
    struct = target.struct
    parts = [S.field_named(struct, p) for p in target.partition_columns]
    raw_schema = T.StructType([T.StructField("__isolde_i", T.IntegerType(), False)]
                              + [T.StructField(f"__isolde_p{i}", T.StringType(), True) for i in range(len(parts))])
    data = [(i, *[_partition_value(dict(k), physical.get(f.name, f.name)) for f in parts]) for i, k in enumerate(keys)]
    raw = ctx.spark.createDataFrame(data, raw_schema)
    typed = raw.select("__isolde_i", *[_cast_partition(F.col(f"__isolde_p{i}"), f.dataType).alias(f.name)
                                       for i, f in enumerate(parts)])
    views = TempViews(ctx.spark)
    try:
        view = views.add(typed, "partitions")
        got = ctx.spark.sql(f"SELECT __isolde_i FROM {view} AS {q(alias)} WHERE coalesce(({condition}), false)")
        return {keys[r[0]] for r in got.collect()}
    finally:
        views.close()


def run_update_delete(ctx, stmt, is_update: bool):
    from .live_rows_first import retried

    started = time.time()
    return retried(open_target(ctx, stmt.table), lambda target: _run_update_delete(ctx, stmt, is_update, target,
                                                                                   started))


def _run_update_delete(ctx, stmt, is_update: bool, target: Target, started: float):
    from isolde.planner.scope import conflict_scope

    spark = ctx.spark
    operation = "UPDATE" if is_update else "DELETE"
    where_sql = stmt.where.sql if stmt.where is not None else None
    parameters = {"predicate": predicates_json([where_sql] if where_sql else [])}
    scope = conflict_scope(stmt, target.column_types, target.partition_columns, **target.scope_flags(),
                           target_read=statement_reads_target(ctx, target.path, stmt))
    files = read_scope(target, scope)
    alias = stmt.alias or (stmt.table.parts[-1] if stmt.table.parts else "t")
    struct = target.struct

    # DELETE: the files whose partition values alone make the condition TRUE (every file without
    # WHERE) are removed from the log, their data never read; their rows are counted from the
    # stats (the footer when a file has none). The reads recorded above are unchanged.
    whole = ChangeSet()
    whole_deleted = 0
    covered: list = []
    cover = whole_file_deletes(ctx, target, stmt, files) if not is_update else None
    if cover is not None:
        covered, files = cover
        now = int(time.time() * 1000)
        unknown = []
        for add in covered:
            whole.remove_whole(add, now)
            n = live_rows(target, add)
            if n is None:
                unknown.append(add)
            else:
                whole_deleted += n
        if unknown:  # no stats and no readable footer: Spark counts those files' live rows
            whole_deleted += scan(ctx, target.snapshot, target.path, files=unknown).count()
        if not files:
            metrics = {"numDeletedRows": whole_deleted, "scanTimeMs": int((time.time() - started) * 1000),
                       "rewriteTimeMs": 0}
            return prepared(target, operation, parameters, whole, metrics, started, deleted=whole_deleted)

    assignments = []
    quals = {x.lower() for x in (stmt.alias, stmt.table.parts[-1] if stmt.table.parts else None) if x}
    if is_update:
        # strip the alias / table qualifier, validate targets before any Spark work
        for a in stmt.assignments:
            assignments.append(replace(a, column=strip_qualifier(struct, a.column, quals)))
            resolve_column_path(struct, tuple(assignments[-1].column), target.name)

    views = TempViews(spark)
    try:
        by_path = {a.path: a for a in files}
        nondet = has_nondeterminism(stmt.where.tree if stmt.where is not None else None,
                                    *[a.value.tree for a in assignments])
        # every touched file takes a deletion vector, or none does (routes.MODE)
        dv_only = routes.choose_mode(target.deletion_vectors) == routes.DV
        # the changed rows found on the driver (point, bounded) or in Spark (routes.FIND)
        find_route = routes.choose(routes.FIND, routes.Statement(
            kind=routes.UPDATE if is_update else routes.DELETE, deletion_vectors=dv_only, deterministic=not nondet,
            file_rows=routes.file_rows(files)))
        cond = bound_sql(ctx, stmt.where, views, target)
        set_sql = []
        set_types = None
        if is_update:
            set_sql = [SA.default_sql(resolve_field(struct, a.column)) if SA.is_default_keyword(a.value.tree)
                       else bound_sql(ctx, a.value, views, target) for a in assignments]
            set_types = value_types(ctx, views, target, alias, struct,
                                    [(a.value.tree, sql, resolve_column_path(struct, tuple(a.column), target.name)[2])
                                     for a, sql in zip(assignments, set_sql)], quals)

        # a deletion-vector UPDATE writes its rows with their stable row ids (row tracking)
        kept_ids = kept_row_id_column(target.metadata, files) if is_update and target.deletion_vectors else None

        # an UPDATE may bring its changed rows to the driver (bounded_rows): they carry their
        # file's ordinal, not its path (a string per row costs its Arrow transfer)
        ordinal = is_update and find_route != routes.SPARK

        def flagged_over(file_list, ids=True, df=None, only_true=False):
            """The rows with the condition's truth (``__isolde_c``) and the new values. With
            ``only_true``, only the rows it is TRUE for, selected by the condition itself in
            WHERE: Spark pushes a plain predicate into the Parquet reader (row groups whose
            statistics rule it out are not read; ``coalesce(cond, false)`` is never pushed) and
            plans an IN / EXISTS subquery as a semi join."""
            hidden = (kept_ids,) if kept_ids is not None and ids else ()
            df = scan_rows(ctx, target, file_list, ids, hidden, with_ordinal=ordinal and ids) if df is None else df
            view = views.add(df, "target")
            if only_true:
                extra = "".join(f", ({s}) AS __isolde_set_{i}" for i, s in enumerate(set_sql))
                return spark.sql(f"SELECT {q(alias)}.*, true AS __isolde_c{extra} "
                                 f"FROM {view} AS {q(alias)} WHERE ({cond})")
            # a new value only where the condition holds (Spark's lateral alias: the condition
            # once per row): SET b = b + 1 must not overflow on a row it does not update
            extra = "".join(f", CASE WHEN __isolde_c THEN ({s}) END AS __isolde_set_{i}" for i, s in enumerate(set_sql))
            return spark.sql(f"SELECT {q(alias)}.*, coalesce(({cond}), false) AS __isolde_c{extra} "
                             f"FROM {view} AS {q(alias)}")

        c = F.col("__isolde_c")
        if is_update:
            new_cols = assignment_columns(struct, assignments, target.name, lambda i: f"__isolde_set_{i}",
                                          set_types)
            guard = generated_guard(struct, assignments, target.name, lambda i: f"__isolde_set_{i}", set_types,
                                    when="__isolde_c")
            sel = []
            for f in struct.fields:
                if f.name in new_cols:
                    sel.append(F.when(c, new_cols[f.name]).otherwise(F.col(q(f.name))).alias(f.name))
                else:
                    sel.append(F.col(q(f.name)))
            action = F.when(c, F.lit(UPDATE)).otherwise(F.lit(KEEP))
        else:
            sel = [F.col(q(f.name)) for f in struct.fields]
            action = F.when(c, F.lit(DELETE)).otherwise(F.lit(KEEP))

        def changes_over(rows, extra=()):
            if is_update and guard is not None:  # a generated column given a value must match it
                rows = rows.filter(F.expr(guard))
            return rows.select(*sel, F.col(FILE_COL), F.col(ROW_COL), action.alias(ACTION_COL), *extra)

        # rows stay in their file's partition unless a partition column is assigned
        part_lower = {p.lower() for p in target.partition_columns}
        moves = any(a.column[0].lower() in part_lower for a in assignments)
        # a deletion-vector DML needs only the rows the condition is TRUE for (a non-deterministic
        # condition is evaluated once, over every row, and checkpointed)
        only_true = dv_only and not nondet
        # a deletion-vector DELETE finds its rows with the files' deletion vectors not applied
        # (no broadcast join of their bitmaps before the condition): the rows deleted already
        # are taken out of the positions found, on the driver (``bounded_rows``)
        deferred = None
        if find_route == routes.BOUNDED and not is_update and not cdf.enabled(target.metadata) \
                and not target.live_rows_first:
            unfiltered, deferred = scan_rows_for_join(ctx, target, files)
            flagged = flagged_over(files, only_true=True, df=unfiltered)
        else:
            flagged = flagged_over(files, only_true=only_true)
        if nondet:
            flagged = views.checkpoint(flagged)
        positions = None
        rows_on_driver = None  # an UPDATE's changed rows, as written, in Arrow (bounded_rows)
        if dv_only:
            # the changed rows (positions and new values) are all the write needs. ONE job finds
            # them: few enough, they (a DELETE: their positions) come to the driver, which groups
            # the positions by file; more, their positions come as per-file bitmaps built in
            # Spark, which also count them (no count job), and an UPDATE's rows are kept (a lazy
            # checkpoint, filled by that job) for its write. A DELETE writes no row (its change
            # feed re-reads ``flagged``)
            if deferred is not None:  # built only if the positions are not found on the driver
                def changed_rows():
                    return changes_over(deferred.finish(flagged))
            else:
                changed_base = flagged if only_true else flagged.filter(c)  # (no plan for TRUE)
                row_id_items = [stable_row_id(files, kept_ids)] if kept_ids is not None else []

                def changed_rows_of():
                    return changes_over(changed_base, row_id_items)

                # an UPDATE builds them only for the route that needs them (each is an analysis)
                changed_rows = changed_rows_of if is_update and find_route != routes.SPARK else changed_rows_of()
            few = None
            if find_route == routes.POINT:
                # a point UPDATE: its rows come to the driver in one job, no checkpoint (few_rows)
                with phase("find"):
                    few = few_rows.collect_few(changed_rows(), files=files)
            if is_update and find_route != routes.SPARK:
                from . import bounded_rows

                if few is None:
                    # up to the rows the driver writes (a point attempt over small files that
                    # found more too: a second scan of at most routes.SMALL_SCAN_ROWS rows):
                    # computed as written, with their positions, in one job (bounded_rows)
                    with phase("find"):
                        found = bounded_rows.collect_changed(
                            ctx, target, target.metadata, changes_over(changed_base, [ORD_COL] + row_id_items),
                            kept_ids, files, passthrough=(ORD_COL,), paths=[a.path for a in files])
                    if found is not None:
                        positions = bounded_rows.positions_of(found)
                        rows_on_driver = bounded_rows.written_part(found, kept_ids, target.metadata)
            elif find_route == routes.BOUNDED:
                # a DELETE's positions, grouped on the driver when they are few enough (one
                # job, no shuffle: bounded_rows), else by Spark's bitmap aggregate below
                from . import bounded_rows

                with phase("find"):
                    positions = bounded_rows.collect_live_positions(ctx, flagged, files, deferred) \
                        if deferred is not None else bounded_rows.collect_positions(ctx, changed_rows, files)
            if few is not None:
                table, changed_rows = few
                positions = changed_positions_of(table)
            elif positions is None:
                changed_rows = changed_rows() if callable(changed_rows) else changed_rows
                if is_update:
                    changed_rows = views.checkpoint(changed_rows, eager=False)
                with phase("find"):
                    positions = changed_positions(changed_rows)
            changed = {p: len(rows) for p, rows in positions.items()}
        else:
            with phase("find"):
                counts = flagged.filter("__isolde_c").groupBy(FILE_COL).count().collect()
            changed = {r[0]: int(r[1]) for r in counts}
        touched = {p: by_path[p] for p in changed}
        n_changed = sum(changed.values())
        scanned = time.time()
        n_deleted = 0 if is_update else n_changed + whole_deleted
        metrics = {"numUpdatedRows" if is_update else "numDeletedRows": n_changed if is_update else n_deleted,
                   "scanTimeMs": int((scanned - started) * 1000)}
        if not touched:
            if whole.actions:
                metrics["rewriteTimeMs"] = 0
                return prepared(target, operation, parameters, whole, metrics, started, deleted=n_deleted)
            return prepared(target, operation, parameters, None, {**metrics, "numAddedFiles": 0, "numRemovedFiles": 0,
                                                                  "numAddedBytes": 0, "numRemovedBytes": 0,
                                                                  "numCopiedRows": 0}, started)
        if dv_only:
            changes = changed_rows
        elif nondet:
            changes = changes_over(flagged.filter(F.col(FILE_COL).isin(list(touched))))
        else:
            def changes():  # not built when each partition's job builds its own
                return changes_over(flagged_over(list(touched.values()), ids=target.deletion_vectors))

        def changes_in(adds):
            return changes_over(flagged_over(list(adds), ids=False))

        def changes_by_partition():
            union, slices = scan_rows_by_partition(ctx, target, list(touched.values()))
            return plan_slice_write(ctx, target, changes_over(flagged_over(None, df=union)), slices)

        # a subquery over the union of per-partition scans (a correlated one becomes a join)
        # broke the one-job rewrite's planning ("key not found: k#93"): per-partition jobs instead
        subquery = any(t is not None and t.find(exp.Subquery, exp.Exists, exp.Select) is not None
                       for t in [stmt.where.tree if stmt.where is not None else None]
                       + [a.value.tree for a in assignments])
        change = apply_changes(ctx, target, changes, touched, changed_rows=changed,
                               changes_for=None if nondet or moves else changes_in,
                               changes_by_partition=None if nondet or moves or subquery else changes_by_partition,
                               deleted_rows={} if is_update else changed, changed_only=dv_only,
                               positions=positions, row_ids=kept_ids,
                               rows_on_driver=rows_on_driver)
        change.absorb(whole)
        if cdf.enabled(target.metadata):  # the changed rows (and those of files removed whole)
            rows = cdf.update_delete_rows(flagged.filter(c), struct, sel, is_update)
            if covered:
                rows = rows.unionByName(cdf.tagged(scan(ctx, target.snapshot, target.path, files=covered), struct,
                                                   cdf.DELETE))
            cdf.record(ctx, target, change, rows)
        metrics["rewriteTimeMs"] = int((time.time() - scanned) * 1000)
        return prepared(target, operation, parameters, change, metrics, started,
                        updated=n_changed if is_update else 0, deleted=n_deleted)
    finally:
        views.close()
