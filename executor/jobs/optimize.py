"""OPTIMIZE t [WHERE partition-predicate] [ZORDER BY (cols)] / OPTIMIZE t [FULL] of a clustered
table, and REORG TABLE t [WHERE ...] APPLY (PURGE).

Bin-packing (OPTIMIZE, REORG PURGE):
Per partition, the candidate files -- smaller than the target size, or carrying a deletion
vector that hides more than ``MAX_DELETED_ROWS_RATIO`` of their rows (REORG PURGE: every file
with a deletion vector) -- are packed, smallest first, into bins of at most the target size
(``delta.targetFileSize``, else the session's ``spark.databricks.delta.optimize.maxFileSize``,
else 1 GiB). A bin of one file is rewritten only when it has a deletion vector to purge, so a
second run finds nothing to do and commits nothing. Each bin's live rows (deletion vectors
applied) become one new file; the commit removes the inputs and adds the outputs, all with
dataChange=false.

Conflicts (DESIGN.md section 4): the transaction reads exactly its input files and is checked
with snapshot isolation, so concurrent INSERTs never conflict with it in either order. Each
output is written input by input, each input's rows by position, and its AddFile records that
layout (``tags["isolde.compactedFrom"]``); on a deletion-vector table a concurrent
UPDATE/DELETE/MERGE on an input is carried across the rewrite in either commit order
(executor/txn/compaction.py). Without deletion vectors Delta's conflicts stand: the
compaction losing to such a write gets ConcurrentDeleteReadException, a write losing to it
ConcurrentDeleteDeleteException; two compactions of one file always conflict.

ZORDER BY rewrites every file of each chosen partition (one left alone when all its files are
already Z-ordered by the same columns); on a clustered table OPTIMIZE clusters the files not
yet clustered by its columns (FULL: all of them) on a Hilbert curve. The rows' order comes
from jobs/clustered_rewrite.py. With row tracking enabled the outputs keep every row's stable
id, and a concurrent deletion vector is carried through the rewrite by id
(txn/row_id_layout.py); without it Delta's conflicts stand. On tables with row tracking
enabled, bin-packing materialises the ids too.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import warnings

import sqlglot.expressions as exp

from isolde.errors import AnalysisError, UnsupportedFeatureError, did_you_mean
from ..catalog import properties as P
from ..catalog import schema as S
from . import executes
from ..log.actions import now_ms
from ..session.results import CommitResult, OptimizeResult, PreparedWrite
from .clustered_rewrite import HILBERT, ZORDER
from ..txn import row_tracking
from ..txn.compaction import LAYOUT_TAG, layout_tag
from ..txn.predicates import Predicate
from ..txn.row_id_layout import STABLE_IDS_TAG
from ..txn.row_level import TableFiles
from isolde.grammar import ast

DEFAULT_TARGET_BYTES = 1 << 30
#: tags on the outputs: the columns a file was Z-ordered / clustered by
ZORDER_TAG = "isolde.zOrderBy"
CLUSTERED_BY_TAG = "isolde.clusteredBy"
#: AddFile.clusteringProvider of liquid-clustered files (as Delta writes it)
CLUSTERING_PROVIDER = "liquid"
MAX_FILE_SIZE_CONF = "spark.databricks.delta.optimize.maxFileSize"
#: a file whose deletion vector hides more than this share of its rows is rewritten by OPTIMIZE
MAX_DELETED_ROWS_RATIO = 0.05
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40}


def parse_size(text, what: str) -> int:
    """``134217728``, ``128mb``, ``1g`` ... as bytes (Spark's byte-size strings)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS or int(m.group(1)) <= 0:
        raise AnalysisError(f"{what} must be a positive size in bytes (such as 134217728 or 128mb), not {text!r}.",
                            error_class="INVALID_CONF_VALUE", sqlstate="22022")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def target_file_size(ctx, metadata) -> int:
    configured = S.configuration(metadata).get("delta.targetFileSize")
    if configured is not None:
        return parse_size(configured, "delta.targetFileSize")
    conf = getattr(ctx, "conf", None)
    value = conf.get(MAX_FILE_SIZE_CONF) if conf is not None and hasattr(conf, "get") else None
    return parse_size(value, MAX_FILE_SIZE_CONF) if value is not None else DEFAULT_TARGET_BYTES


def partition_filter_sql(stmt, metadata, verb: str):
    """The WHERE clause's SQL after checking it names only partition columns."""
    if stmt.where is None:
        return None
    parts = {p.lower(): p for p in S.partition_columns(metadata)}
    columns = {f.name.lower(): f.name for f in S.metadata_schema(metadata).fields}
    for col in stmt.where.tree.find_all(exp.Column):
        name = col.name.lower()
        if name in parts:
            continue
        if name in columns:
            raise AnalysisError(
                f"{verb} WHERE may only reference partition columns: `{columns[name]}` is not one "
                f"(partition columns: {', '.join(parts.values()) or 'none, the table is not partitioned'}).",
                error_class="DELTA_UNSUPPORTED_PREDICATE_ON_NON_PARTITION_COLUMNS", sqlstate="0AKDC")
        raise AnalysisError(f"{verb} WHERE: column `{col.name}` does not exist.{did_you_mean(col.name, columns.values())}",
                            error_class="UNRESOLVED_COLUMN", sqlstate="42703")
    return stmt.where.sql


def _deleted_ratio(f) -> float:
    dv = f.deletion_vector
    if dv is None:
        return 0.0
    stats = f.parsed_stats or {}
    rows = stats.get("numRecords")
    return 1.0 if not rows else dv.cardinality / rows


def pack_by_partition(files, target: int) -> list[list]:
    """``files`` bin-packed per partition (partitions in order, smallest files first), each bin
    up to ``target`` bytes."""
    by_partition: dict = {}
    for f in files:
        key = tuple(sorted((f.partition_values or {}).items(), key=lambda kv: kv[0]))
        by_partition.setdefault(key, []).append(f)
    bins: list[list] = []
    for key in sorted(by_partition, key=lambda k: [(c, v is None, v or "") for c, v in k]):
        current: list = []
        size = 0
        for f in sorted(by_partition[key], key=lambda f: (f.size or 0, f.path)):
            if current and size + (f.size or 0) > target:
                bins.append(current)
                current, size = [], 0
            current.append(f)
            size += f.size or 0
        if current:
            bins.append(current)
    return bins


def plan_bins(files, target: int, *, purge: bool) -> list[list]:
    """Bins of files to rewrite together, per partition, smallest files first."""
    if purge:
        wanted = [f for f in files if f.deletion_vector is not None]
    else:
        wanted = [f for f in files if (f.size or 0) < target or _deleted_ratio(f) > MAX_DELETED_ROWS_RATIO]
    bins = pack_by_partition(wanted, target)
    # one file alone is rewritten only to drop its deletion vector
    return [b for b in bins if len(b) > 1 or b[0].deletion_vector is not None]


def _percentile(sorted_sizes: list[int], p: float) -> int:
    return sorted_sizes[min(len(sorted_sizes) - 1, int(p * len(sorted_sizes)))]


def operation_metrics(inputs, adds) -> dict:
    """Delta's OPTIMIZE operationMetrics (the size figures describe the added files)."""
    sizes = sorted(int(a.size or 0) for a in adds)
    out = {
        "numAddedFiles": len(sizes),
        "numRemovedFiles": len(inputs),
        "numAddedBytes": sum(sizes),
        "numRemovedBytes": sum(int(f.size or 0) for f in inputs),
        "numDeletionVectorsRemoved": sum(1 for f in inputs if f.deletion_vector is not None),
    }
    if sizes:
        out.update(minFileSize=sizes[0], p25FileSize=_percentile(sizes, 0.25), p50FileSize=_percentile(sizes, 0.5),
                   p75FileSize=_percentile(sizes, 0.75), maxFileSize=sizes[-1])
    return out


def _tagged(add, inputs, files):
    """The output AddFile with its layout tag, when its row count is the inputs' live rows (else
    no tag: a concurrent deletion vector on an input then conflicts instead of being carried)."""
    live = sum(len(files.live_rows(f)) for f in inputs)
    if (add.parsed_stats or {}).get("numRecords") != live:
        return add
    return dataclasses.replace(add, tags={**(add.tags or {}), LAYOUT_TAG: layout_tag(inputs)})


def _start(ctx, stmt, verb: str):
    """(handle, transaction, snapshot) of the table a maintenance statement rewrites."""
    handle = P.resolve(ctx, stmt.table)
    if stmt.table.version is not None or stmt.table.timestamp is not None:
        raise AnalysisError(f"{verb} cannot rewrite an old version (VERSION/TIMESTAMP AS OF).",
                            error_class="DELTA_UNSUPPORTED_TIME_TRAVEL_MULTIPLE_FORMATS", sqlstate="42613")
    txn = ctx.start_transaction(handle.log)
    return handle, txn, txn.snapshot


def _considered(snap, where_sql) -> list:
    files = list(snap.all_files)
    if where_sql:
        files = Predicate(None, snap.schema, snap.partition_columns, partition_sql=where_sql).filter(files)
    return files


def _bin_pack_groups(ctx, handle, snap, bins, hidden):
    """One group per bin: its rows input by input and by position (the layout the tag records,
    which carries concurrent deletion vectors across the rewrite). Inputs go in the order of
    the paths Spark sees (it compares strings as UTF-8 bytes, Python as code points: the same
    order), so the sort needs no per-row lookup."""
    from pyspark.sql import functions as F

    from .clustered_rewrite import with_stable_row_ids
    from ..rows.scan import FILE_KEY_COL, ROW_COL, file_keys, scan

    columns = [f.name for f in S.metadata_schema(snap.metadata).fields] + list(hidden)
    keys = dict(zip((f.path for b in bins for f in b), file_keys(ctx, handle.path, [f for b in bins for f in b])))
    bins = [sorted(b, key=lambda f: keys[f.path]) for b in bins]

    def rows_of(files):
        def build():
            df = scan(ctx, snap, handle.path, files=files, with_file_keys=True, hidden=hidden)
            if hidden:
                df = with_stable_row_ids(df, files, [keys[f.path] for f in files], hidden)
            return df.coalesce(1).sortWithinPartitions(F.col(FILE_KEY_COL), F.col(ROW_COL)).select(
                *[S.column(c) for c in columns])
        return build

    return bins, [(dict(b[0].partition_values or {}), rows_of(b)) for b in bins]


def _curve_groups(ctx, handle, snap, groups, columns, target, hidden, curve):
    """One group per list of input files: their rows in curve order (clustered_rewrite.py)."""
    from .clustered_rewrite import curve_ordered, num_output_files, with_stable_row_ids
    from ..rows.scan import file_keys, scan

    out_columns = [f.name for f in S.metadata_schema(snap.metadata).fields] + list(hidden)
    files_obj = TableFiles(handle.path, snap.metadata)

    def rows_of(files):
        def build():
            df = scan(ctx, snap, handle.path, files=files, with_file_keys=bool(hidden), hidden=hidden)
            if hidden:
                df = with_stable_row_ids(df, files, file_keys(ctx, handle.path, files), hidden)
            live = sum(len(files_obj.live_rows(f)) for f in files)
            return curve_ordered(df, columns, out_columns, curve=curve, num_files=num_output_files(files, target),
                                 live_rows=live)
        return build

    return [(dict(g[0].partition_values or {}), rows_of(g)) for g in groups]


def _size_stats(files) -> dict:
    sizes = [int(f.size or 0) for f in files]
    return {"min": min(sizes) if sizes else None, "max": max(sizes) if sizes else None,
            "avg": sum(sizes) / len(sizes) if sizes else 0.0, "totalFiles": len(sizes), "totalSize": sum(sizes)}


def result_metrics(snap, inputs, adds, *, considered: int, groups: int, layout: str, columns, started_ms: int,
                   parallelism: int) -> dict:
    """Delta's OPTIMIZE result ``metrics`` struct (OptimizeMetrics), for the result row."""
    removed_dv = [f for f in inputs if f.deletion_vector is not None]
    moved = {"num": len(inputs), "size": sum(int(f.size or 0) for f in inputs)}
    merged = {"num": len(adds), "size": sum(int(a.size or 0) for a in adds)}
    fields = S.metadata_schema(snap.metadata).fields
    return {
        "numFilesAdded": len(adds),
        "numFilesRemoved": len(inputs),
        "filesAdded": _size_stats(adds),
        "filesRemoved": _size_stats(inputs),
        "partitionsOptimized": len({json.dumps(sorted((f.partition_values or {}).items())) for f in inputs}),
        "zOrderStats": {"strategyName": "all", "inputCubeFiles": {"num": 0, "size": 0}, "inputOtherFiles": moved,
                        "inputNumCubes": 0, "mergedFiles": merged, "numOutputCubes": len(adds),
                        "zOrderBy": list(columns)} if layout == ZORDER and inputs else None,
        "clusteringStats": {"inputZCubeFiles": {"numFiles": 0, "size": 0},
                            "inputOtherFiles": {"numFiles": moved["num"], "size": moved["size"]},
                            "inputNumZCubes": 0, "mergedFiles": {"numFiles": merged["num"], "size": merged["size"]},
                            "numOutputZCubes": 1 if adds else 0, "clusterBy": list(columns)}
        if layout == HILBERT and inputs else None,
        "numBatches": groups,
        "totalConsideredFiles": considered,
        "totalFilesSkipped": considered - len(inputs),
        "preserveInsertionOrder": layout == "bin-pack",
        "numFilesSkippedToReduceWriteAmplification": 0,
        "numBytesSkippedToReduceWriteAmplification": 0,
        "startTimeMs": started_ms,
        "endTimeMs": now_ms(),
        "totalClusterParallelism": parallelism,
        "totalScheduledTasks": groups,
        "deletionVectorStats": {"numDeletionVectorsRemoved": len(removed_dv),
                                "numDeletionVectorRowsRemoved": sum(f.deletion_vector.cardinality for f in removed_dv)},
        "numTableColumns": len(fields),
        "numTableColumnsWithStats": len(stats_columns(snap.metadata)),
    }


def _rewrite(ctx, handle, txn, snap, *, where_sql, bins, groups, tag, operation, params, hidden, add_fields=None,
             considered: int = 0, layout: str = "bin-pack", columns=()):
    """Write the groups, tag the outputs, and return the PreparedWrite that commits
    inputs-removed / outputs-added, all dataChange=false."""
    from ..rows.writer import write_partition_groups

    inputs = [f for b in bins for f in b]
    txn.record_read(None, where_sql, files=inputs)  # exactly the files it rewrites
    started = time.perf_counter()
    started_ms = now_ms()
    written = None
    if groups:
        written = write_partition_groups(ctx, groups, handle.path, snap.metadata, data_change=False, hidden=hidden)
        written.adds = [tag(add, bins[g]) for add, g in zip(written.adds, written.groups)]
        if add_fields:
            written.adds = [dataclasses.replace(a, **add_fields) for a in written.adds]
    if hidden:
        txn.row_ids_preserved = all(f.base_row_id is not None for f in inputs)
    ts = now_ms()
    actions = [f.remove(deletion_timestamp=ts, data_change=False) for f in inputs]
    actions += list(written.adds) if written is not None else []
    metrics = operation_metrics(inputs, written.adds if written is not None else [])

    spark = getattr(ctx, "spark", None)
    parallelism = spark.sparkContext.defaultParallelism if spark is not None else 1
    result = result_metrics(snap, inputs, written.adds if written is not None else [], considered=considered,
                            groups=len(groups), layout=layout, columns=columns, started_ms=started_ms,
                            parallelism=parallelism)

    def commit() -> CommitResult:
        # nothing to rewrite: nothing committed, the version stays
        version = P.txn_commit(txn, actions, operation, params, metrics) if actions else snap.version
        return OptimizeResult(version=version, operation=operation, metrics=dict(metrics), table=handle.name,
                              elapsed_s=time.perf_counter() - started, path=handle.path, result_metrics=result)

    staged = list(written.staged_paths) if written is not None else []
    return PreparedWrite(operation=operation, table=handle.name, commit_fn=commit, staged_paths=staged,
                         metrics=dict(metrics))


def _compact(ctx, stmt, handle, txn, snap, *, purge: bool):
    verb = "REORG TABLE" if purge else "OPTIMIZE"
    where_sql = partition_filter_sql(stmt, snap.metadata, verb)
    target = target_file_size(ctx, snap.metadata)
    considered = _considered(snap, where_sql)
    bins = plan_bins(considered, target, purge=purge)
    hidden = row_tracking.materialized_columns(snap.metadata) or ()
    groups = []
    if bins:
        bins, groups = _bin_pack_groups(ctx, handle, snap, bins, hidden)
    files = TableFiles(handle.path, snap.metadata)
    if purge:
        operation = "REORG"
        params = {"predicate": json.dumps([where_sql] if where_sql else []), "applyPurge": "true"}
    else:
        operation = "OPTIMIZE"
        params = {"predicate": json.dumps([where_sql] if where_sql else []), "auto": "false", "clusterBy": "[]",
                  "zOrderBy": "[]"}
    return _rewrite(ctx, handle, txn, snap, where_sql=where_sql, bins=bins, groups=groups,
                    tag=lambda add, inputs: _tagged(add, inputs, files), operation=operation, params=params,
                    hidden=hidden, considered=len(considered))


#: the clustering domain of Databricks' preview of liquid clustering (writer feature ``liquid``):
#: ``{"clusteringColumns": [{"physicalName": ["col"]}, ...]}``
LIQUID_DOMAIN = "delta.liquid"


def clustering_columns(snap) -> list[str]:
    """Logical names of the clustering columns: the ``delta.clustering`` domain, else the
    ``delta.liquid`` domain that tables clustered by Databricks' preview carry."""
    columns = P.clustering_columns(snap)
    if columns:
        return columns
    dm = (getattr(snap, "domain_metadata", None) or {}).get(LIQUID_DOMAIN)
    if dm is None or getattr(dm, "removed", False):
        return []
    try:
        listed = json.loads(dm.configuration or "{}").get("clusteringColumns") or []
    except ValueError:
        return []
    logical = {S.physical_name(f): f.name for f in S.metadata_schema(snap.metadata).fields}
    out = []
    for entry in listed:
        path = entry.get("physicalName") if isinstance(entry, dict) else entry
        path = path if isinstance(path, list) else [path]
        out.append(".".join(logical.get(p, p) for p in path))
    return out


def _stable_ids_tag(hidden):
    return {STABLE_IDS_TAG: "true"} if hidden else {}


def _zorder(ctx, stmt, handle, txn, snap):
    if clustering_columns(snap):
        raise AnalysisError(
            f"OPTIMIZE ... ZORDER BY cannot be used on {handle.name}: it is clustered (CLUSTER BY "
            f"{', '.join(clustering_columns(snap))}); OPTIMIZE {handle.name} clusters it.",
            error_class="DELTA_CLUSTERING_WITH_ZORDER_BY", sqlstate="42613")
    columns = layout_columns(snap.metadata, stmt.zorder_by, "ZORDER BY")
    where_sql = partition_filter_sql(stmt, snap.metadata, "OPTIMIZE")
    target = target_file_size(ctx, snap.metadata)
    marker = json.dumps(columns)
    by_partition: dict = {}
    considered = _considered(snap, where_sql)
    for f in considered:
        by_partition.setdefault(json.dumps(sorted((f.partition_values or {}).items())), []).append(f)
    # a partition already Z-ordered by these columns, with nothing added or deleted since, is left alone
    bins = [sorted(fs, key=lambda f: f.path) for _, fs in sorted(by_partition.items())
            if not all((f.tags or {}).get(ZORDER_TAG) == marker and f.deletion_vector is None for f in fs)]
    hidden = row_tracking.materialized_columns(snap.metadata) or ()
    groups = _curve_groups(ctx, handle, snap, bins, columns, target, hidden, ZORDER) if bins else []
    params = {"predicate": json.dumps([where_sql] if where_sql else []), "auto": "false", "clusterBy": "[]",
              "zOrderBy": marker}
    return _rewrite(ctx, handle, txn, snap, where_sql=where_sql, bins=bins, groups=groups,
                    tag=lambda add, _: dataclasses.replace(
                        add, tags={**(add.tags or {}), ZORDER_TAG: marker, **_stable_ids_tag(hidden)}),
                    operation="OPTIMIZE", params=params, hidden=hidden, considered=len(considered), layout=ZORDER,
                    columns=columns)


def _cluster(ctx, stmt, handle, txn, snap, columns: list[str]):
    if stmt.where is not None:
        raise AnalysisError(f"OPTIMIZE ... WHERE is not supported on a clustered table ({handle.name}): "
                            "clustering picks the files itself.",
                            error_class="DELTA_CLUSTERING_WITH_PARTITION_PREDICATE", sqlstate="0A000")
    columns = layout_columns(snap.metadata, columns, "CLUSTER BY")
    target = target_file_size(ctx, snap.metadata)
    marker = json.dumps(columns)
    files = sorted(snap.all_files, key=lambda f: f.path)
    if not stmt.full:  # incremental: only what is not clustered by these columns yet
        files = [f for f in files if f.clustering_provider != CLUSTERING_PROVIDER
                 or (f.tags or {}).get(CLUSTERED_BY_TAG) != marker or _deleted_ratio(f) > MAX_DELETED_ROWS_RATIO]
    bins = [files] if files else []
    hidden = row_tracking.materialized_columns(snap.metadata) or ()
    groups = _curve_groups(ctx, handle, snap, bins, columns, target, hidden, HILBERT) if bins else []
    params = {"predicate": "[]", "auto": "false", "clusterBy": marker, "zOrderBy": "[]",
              "isFull": "true" if stmt.full else "false"}
    return _rewrite(ctx, handle, txn, snap, where_sql=None, bins=bins, groups=groups,
                    tag=lambda add, _: dataclasses.replace(
                        add, tags={**(add.tags or {}), CLUSTERED_BY_TAG: marker, **_stable_ids_tag(hidden)}),
                    operation="OPTIMIZE", params=params, hidden=hidden,
                    add_fields={"clustering_provider": CLUSTERING_PROVIDER}, considered=len(snap.all_files),
                    layout=HILBERT, columns=columns)


def layout_columns(metadata, names, clause: str) -> list[str]:
    """The columns of a ZORDER BY / CLUSTER BY as the schema spells them, after checking that
    each exists, is not a partition column, can be ordered, and has stats (else a warning)."""
    fields = {f.name.lower(): f for f in S.metadata_schema(metadata).fields}
    parts = {p.lower() for p in S.partition_columns(metadata)}
    indexed = stats_columns(metadata)
    out = []
    for name in names:
        name = name if isinstance(name, str) else ".".join(name)
        field = fields.get(name.lower())
        if field is None:
            raise AnalysisError(f"{clause}: column `{name}` does not exist.{did_you_mean(name, [f.name for f in fields.values()])}",
                                error_class="UNRESOLVED_COLUMN", sqlstate="42703")
        if name.lower() in parts:
            raise AnalysisError(f"`{field.name}` is a partition column: {clause} can only use data columns "
                                "(each partition is already one value of it).",
                                error_class="DELTA_ZORDERING_ON_PARTITION_COLUMN", sqlstate="42P10")
        if not _orderable(field.dataType):
            raise AnalysisError(f"{clause}: column `{field.name}` has type {field.dataType.simpleString()}, which "
                                "has no order to cluster by.", error_class="DATATYPE_MISMATCH", sqlstate="42K09")
        if field.name.lower() in {o.lower() for o in out}:
            raise AnalysisError(f"{clause}: column `{field.name}` is listed twice.",
                                error_class="DUPLICATE_COLUMN", sqlstate="42711")
        if field.name.lower() not in indexed:
            warnings.warn(f"{clause} column `{field.name}` has no statistics in this table "
                          "(delta.dataSkippingNumIndexedCols / delta.dataSkippingStatsColumns), so files clustered "
                          "by it cannot be skipped by it.", stacklevel=2)
        out.append(field.name)
    if not out:
        raise AnalysisError(f"{clause} needs at least one column.", error_class="PARSE_SYNTAX_ERROR", sqlstate="42601")
    return out


def _orderable(dt) -> bool:
    from pyspark.sql import types as T

    return not isinstance(dt, (T.StructType, T.ArrayType, T.MapType, T.NullType, T.BinaryType)) and \
        type(dt).__name__ not in ("VariantType", "CalendarIntervalType")


def stats_columns(metadata) -> set[str]:
    """Lower-cased names of the columns Delta collects min/max statistics for."""
    conf = S.configuration(metadata)
    names = [f.name for f in S.metadata_schema(metadata).fields]
    listed = conf.get("delta.dataSkippingStatsColumns")
    if listed:
        return {c.strip().strip("`").lower() for c in listed.split(",") if c.strip()}
    limit = int(conf.get("delta.dataSkippingNumIndexedCols", "32"))
    parts = {p.lower() for p in S.partition_columns(metadata)}
    data = [n for n in names if n.lower() not in parts]
    return {n.lower() for n in (data if limit < 0 else data[:limit])}


@executes(ast.Optimize)
def run_optimize(ctx, stmt: ast.Optimize):
    handle, txn, snap = _start(ctx, stmt, "OPTIMIZE")
    if stmt.zorder_by:
        return _zorder(ctx, stmt, handle, txn, snap)
    clustering = clustering_columns(snap)
    if clustering:
        return _cluster(ctx, stmt, handle, txn, snap, clustering)
    if stmt.full:
        raise AnalysisError("OPTIMIZE ... FULL re-clusters a clustered table; this table is not clustered "
                            "(CREATE TABLE ... CLUSTER BY or ALTER TABLE ... CLUSTER BY makes one).",
                            error_class="DELTA_CLUSTERING_NOT_SUPPORTED", sqlstate="0A000")
    return _compact(ctx, stmt, handle, txn, snap, purge=False)


@executes(ast.Reorg)
def run_reorg(ctx, stmt: ast.Reorg):
    if not stmt.purge:
        from .reorg_uniform import run_upgrade_uniform

        return run_upgrade_uniform(ctx, stmt)
    return _compact(ctx, stmt, *_start(ctx, stmt, "REORG TABLE"), purge=True)
