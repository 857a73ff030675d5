"""MERGE INTO target USING source ON cond WHEN ... : every clause form, first matching clause
wins, Delta's cardinality rule, insert-only fast path, schema evolution.

Plan (all Spark work happens before the commit; the commit only writes the log):

1. Source: an isolde table (its current snapshot), a Spark temp view / table (e.g. a
   DataFrame the user registered), or a query (isolde tables in it bound to snapshots).
   Materialised once with a row id (localCheckpoint): every pass sees the same rows.
2. Scope: ``merge_join_keys`` names the equality joins; one aggregate over the source gives
   the number of source rows and, per key, count / min / max of its values, then the
   distinct values when there are at most 1,000 (else the min/max range). The planner's
   ``conflict_scope`` turns those into the read predicate, recorded via the transaction,
   which also returns the candidate files.
3. Pass 1: join the candidates with the source (broadcast when small) -> the matching
   (target row, source row) pairs, and with NOT MATCHED BY SOURCE clauses the unmatched target
   rows; which clause acts per pair (first match wins); per file the rows updated / deleted ->
   touched files; the cardinality check (MergeCardinalityError when one target row would be
   modified by several source rows, except for a lone unconditional DELETE as in Delta),
   skipped when the source's key tuples are unique; and which source rows matched.
4. Pass 2: rows of the touched files joined again with the source -> new values and actions;
   source rows that matched nothing (an anti join on the source row ids from pass 1, no
   second look at the target) -> inserted rows; executor/rows/dml.py writes them (rewrite or
   deletion vector per file, a touched partition per job when no row moves). A source too big
   to broadcast whose matches touch every candidate takes one full outer join instead.

With deletion vectors there is no pass 2: pass 1 materialises the pairs with the acting
clause's new values (old target values only where an UPDATE clause keeps them), and the
vectors, the updated rows and the matched source rows all come from there.
"""

from __future__ import annotations

import datetime
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
import sqlglot.expressions as exp
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from isolde.errors import AnalysisError, ColumnNotFoundError, MergeCardinalityError, TableNotFoundError
from ..rows import bounded_rows, cdf, dml, few_rows, id_sets, inline_source, routes
from ..catalog import properties as P
from ..catalog import schema as S
from ..catalog import schema_evolution as evolution
from ..rows import store_assignment as SA
from ..rows.dml import ACTION_COL, DELETE, INSERT, KEEP, UPDATE, q
from . import executes
from ..runtime.phases import phase
from ..rows.stable_row_ids import kept_row_id_column, stable_row_id
from ..runtime.spark import without_adaptive
from ..rows.scan import FILE_COL, ROW_COL
from ..rows.target_key_filter import target_key_filter
from ..catalog.table_binding import pin, table_source
from ..rows.target_reads import statement_reads_target
from isolde.grammar import ast
from isolde.grammar.dialect import DIALECT

SRC_FLAG = "__isolde_src"
SID = "__isolde_sid"
CLAUSE = "__isolde_cl"
KEY_SET_LIMIT = 1000


_bound = dml.bound_sql


def _source_df(ctx, stmt: ast.Merge, target, views):
    """The source's rows: a table (at the version it names, the target at the transaction's
    snapshot: executor/catalog/table_binding.py), a Spark temp view, or a query."""
    src = stmt.source
    if isinstance(src, ast.TableRef):
        try:
            return table_source(ctx, src, pin(target.path, target.snapshot))
        except TableNotFoundError:
            raise TableNotFoundError(src.name, ctx.table_candidates()) from None
    return ctx.spark.sql(dml.sql_of(dml.bind_tables(ctx, src.tree, views, target=target)))


def _field(struct, name):
    return S.field_named(struct, name)


def _kind(clause) -> str:
    if isinstance(clause, ast.WhenNotMatched):
        return "insert"
    return "delete" if isinstance(clause.action, ast.DeleteAction) else "update"


def _clause_params(clauses) -> str:
    out = []
    for c in clauses:
        d = {"actionType": _kind(c)}
        if c.condition is not None:
            d["predicate"] = c.condition.sql
        out.append(d)
    return json.dumps(out)


@dataclass(frozen=True)
class SourceSummary:
    """What one aggregate over the source tells the plan."""

    key_values: dict  # target join column -> the distinct source values, or a KeyRange
    rows: int
    # every source row with non-NULL keys has a distinct key tuple (compared in the target's
    # types): then no target row can match two source rows, and pass 1 needs no row positions.
    # False: not proven (or not computed: ``_ObservedSummary``)
    unique_keys: bool
    # target join column -> the type ON compares it in (Spark's, after coercion)
    comparison_types: dict = field(default_factory=dict)


#: types whose equality with the same type involves no coercion and no collation: a key that is a
#: source column of the target column's type (one of these) compares in that type
_SAME_TYPE_KEYS = frozenset(["TINYINT", "SMALLINT", "INT", "BIGINT", "STRING", "BOOLEAN", "DATE", "TIMESTAMP",
                             "TIMESTAMP_NTZ"])


def _same_type_key(k, t: str, src_struct) -> bool:
    """Whether ON's ``k`` compares a plain source column with a target column of type ``t`` of
    the same type (``_SAME_TYPE_KEYS``): Spark's comparison is then in ``t``, known without
    analysing a query (a view and an analysis per key)."""
    if k.source_column is None or src_struct is None or t.upper() not in _SAME_TYPE_KEYS:
        return False
    found = [f for f in src_struct.fields if f.name.lower() == k.source_column.lower()]
    return len(found) == 1 and found[0].dataType.simpleString().upper() == t.upper()


def _comparison_types(spark, src_view, s_alias: str, keys, target_types: dict, src_struct=None) -> list:
    """Spark's type for each ``<source key> = <target column>`` of ON (after its own type
    coercion: a STRING source key against an INT target compares as BIGINT), or None where
    Spark refuses the comparison. Key sets and ranges must be computed in this type: in the
    source's own type a range of strings is lexicographic and misses matching numbers.
    ``src_view``: the source's view, or a function making it (called only when a key's type
    is not read from ``src_struct``, the source's schema)."""
    lower_types = {name.lower(): t for name, t in target_types.items()}
    out: list = []
    for k in keys:
        t = lower_types.get(k.target_column.lower())
        if t is None:
            out.append(None)
            continue
        if _same_type_key(k, t, src_struct):
            out.append(t.upper())  # (as Spark writes the type)
            continue
        if callable(src_view):
            src_view = src_view()
        try:
            plan = spark.sql(f"SELECT ({k.source_sql}) = CAST(NULL AS {t}) FROM {src_view} AS {q(s_alias)}")
            comparison = plan._jdf.queryExecution().analyzed().projectList().apply(0).child()
            out.append(str(comparison.left().dataType().sql()))
        except Exception:
            out.append(None)
    return out


# key comparison types whose equality and order in Python are Spark's (no NaN, no collation)
_DRIVER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT", "STRING", "DATE", "TIMESTAMP", "TIMESTAMP_NTZ", "BOOLEAN")


def _local_source(spark, src_df):
    """``src_df`` with the SRC_FLAG and SID columns as a new local relation, when Spark holds its
    rows on the driver already (at most ``routes.LOCAL_SOURCE_ROWS``, types that round-trip through
    Arrow); else None. Its row ids are literals: every pass sees the same rows with the same ids,
    as with a checkpoint, and projections / filters of it run without a Spark job; its summary
    is computed from its rows there (no aggregate jobs)."""
    import pyarrow as pa

    try:
        plan = src_df._jdf.queryExecution().optimizedPlan()
        if plan.getClass().getSimpleName() != "LocalRelation" or plan.data().size() > routes.LOCAL_SOURCE_ROWS:
            return None
        if not all(few_rows.arrow_safe(f.dataType) for f in src_df.schema.fields):
            return None
        table = few_rows.rows_as_arrow(src_df)
        n = table.num_rows
        table = table.append_column(pa.field(SRC_FLAG, pa.bool_(), nullable=False), pa.array([True] * n, pa.bool_()))
        table = table.append_column(pa.field(SID, pa.int64(), nullable=False), pa.array(range(n), pa.int64()))
        out = spark.createDataFrame(table)
        if out.schema[: len(src_df.schema.fields)] != src_df.schema:
            return None
        return out
    except Exception:
        return None


def _driver_rows(spark, src_view: str, s_alias: str, values: list, usable) -> Optional[list]:
    """The summary's key values of a local source, one tuple per source row (no Spark job: a
    projection of a local relation is evaluated on the driver); None when a key's type is not
    one whose equality and order Python shares."""
    if not all(t.upper() in _DRIVER_TYPES or re.fullmatch(r"DECIMAL\(\d+,\s*\d+\)", t.upper()) for _, t in usable):
        return None
    rows = spark.sql(f"SELECT {', '.join(values) or '1'} FROM {src_view} AS {q(s_alias)}").collect()
    return [tuple(r) if values else () for r in rows]


def _summary_row(rows: list, n_keys: int, all_typed: bool) -> tuple:
    """The aggregate row ``_summarise_source`` asks Spark for, computed from the key tuples;
    also each key's distinct values."""
    out = [len(rows)]
    sets = []
    for i in range(n_keys):
        values = [r[i] for r in rows if r[i] is not None]
        distinct = set(values)
        sets.append(distinct)
        out += [len(distinct), min(values) if values else None, max(values) if values else None,
                int(len(values) < len(rows))]
    if all_typed:
        full = [r for r in rows if all(x is not None for x in r)]
        out += [len(set(full)), len(full)]
    return tuple(out), sets


def _summarise_source(spark, src_view: str, s_alias: str, keys, target_types: dict,
                      local: bool = False, src_struct=None) -> SourceSummary:
    from isolde.planner.predicates import TimestampMicros as _Micros
    from isolde.planner.scope import KeyRange

    cmp_types = _comparison_types(spark, src_view, s_alias, keys, target_types, src_struct)
    usable = [(k, t) for k, t in zip(keys, cmp_types) if t is not None]
    exprs = ["count(*)"]
    values = []  # per usable key: the expression whose values are collected
    for k, t in usable:
        e = f"try_cast(({k.source_sql}) AS {t})"
        v = f"unix_micros({e})" if t.upper() == "TIMESTAMP" else e
        values.append(v)
        exprs += [f"count(DISTINCT {e})", f"min({v})", f"max({v})", f"max(CASE WHEN {e} IS NULL THEN 1 ELSE 0 END)"]
    typed = [f"try_cast(({k.source_sql}) AS {t})" for k, t in usable]
    all_typed = bool(keys) and len(usable) == len(keys)
    if all_typed:
        # the key tuple in the comparison's types (a cast to the same type is removed by Spark)
        exprs += [f"count(DISTINCT {', '.join(typed)})",
                  "count_if(" + " AND ".join(f"{t} IS NOT NULL" for t in typed) + ")"]
    driver = _driver_rows(spark, src_view, s_alias, values, usable) if local else None
    if driver is not None:
        row, driver_sets = _summary_row(driver, len(usable), all_typed)
    else:
        row = without_adaptive(spark.sql(f"SELECT {', '.join(exprs)} FROM {src_view} AS {q(s_alias)}")).collect()[0]
    n_source = int(row[0])
    out = {}
    to_collect = []
    null_safe_with_nulls = False
    for i, (k, t) in enumerate(usable):
        count, lo, hi, has_null = row[1 + 4 * i: 5 + 4 * i]
        if t.upper() == "TIMESTAMP":
            lo, hi = (None if x is None else _Micros(x) for x in (lo, hi))
        has_null = bool(has_null)
        null_safe_with_nulls = null_safe_with_nulls or (k.null_safe and has_null)
        if count == 0:
            out[k.target_column] = [None] if has_null else []
        elif count == 1:
            out[k.target_column] = [lo] + ([None] if has_null else [])
        elif count <= KEY_SET_LIMIT:
            to_collect.append((i, k, has_null))
        else:
            out[k.target_column] = KeyRange(lo, hi, int(count), has_null)
    unique = all_typed and not null_safe_with_nulls and row[-2] == row[-1]
    if to_collect:
        # every set is known to hold at most KEY_SET_LIMIT values: one bounded job for all keys
        if driver is not None:
            got = [list(driver_sets[i]) for i, _, _ in to_collect]
        else:
            sets = ", ".join(f"collect_set({values[i]})" for i, _, _ in to_collect)
            got = without_adaptive(spark.sql(f"SELECT {sets} FROM {src_view} AS {q(s_alias)}")).collect()[0]
        for (i, k, has_null), collected in zip(to_collect, got):
            if usable[i][1].upper() == "TIMESTAMP":
                collected = [_Micros(x) for x in collected]
            out[k.target_column] = list(collected) + ([None] if has_null else [])
    return SourceSummary(out, n_source, unique, {k.target_column: t for k, t in usable})


EPOCH_DAY = datetime.date(1970, 1, 1)


class _ObservedSummary:
    """The source summary of a MERGE into a deletion-vector table, computed by the job that
    materialises the source (``observe``): its row count and, per join key, an approximate
    distinct count, the min, the max and whether a NULL occurs. No aggregate job of its own
    (three stages with the exact distinct counts, ~0.15 s on 100k rows). Only keys with few
    values (an approximate count up to twice KEY_SET_LIMIT) have their values collected, in one
    bounded job, and the exact set then decides between a set and a range, as in
    ``_summarise_source``. Uniqueness of the key tuples is not computed: the deletion-vector
    plans get it from pass 1's bitmaps, where a target row named twice is the error."""

    #: comparison types whose min and max cross py4j as the Python values Spark's collect gives
    #: (DATE and TIMESTAMP as day and microsecond numbers); a key of another type (DECIMAL, a
    #: NaN-ordered double, TIMESTAMP_NTZ, ...) leaves the summary to the aggregate job
    PLAIN_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT", "STRING", "BOOLEAN", "DATE", "TIMESTAMP")

    @classmethod
    def of(cls, spark, views, src_df, s_alias: str, keys, target_types: dict) -> Optional["_ObservedSummary"]:
        """The observed summary of ``src_df``, or None where the aggregate job must do it (a
        key of another type, or a plan Spark would not observe)."""
        def view():  # for the comparison types not read from the schema: analysis only
            return views.add(src_df, "source_types")

        usable = [(k, t) for k, t in zip(keys, _comparison_types(spark, view, s_alias, keys, target_types,
                                                                 src_df.schema))
                  if t is not None]
        if not all(t.upper() in cls.PLAIN_TYPES for _, t in usable):
            return None
        try:
            return cls(src_df, s_alias, usable)
        except Exception:  # noqa: BLE001 - an optimisation: the aggregate job is always right
            return None

    def __init__(self, src_df, s_alias: str, usable: list):
        self.s_alias = s_alias
        self.name = f"isolde_source_{uuid.uuid4().hex[:12]}"
        self.complete = False
        self.usable = usable
        aggs = [F.count(F.lit(1)).alias("n")]
        for i, (k, t) in enumerate(self.usable):
            e = f"try_cast(({k.source_sql}) AS {t})"
            v = {"TIMESTAMP": f"unix_micros({e})", "DATE": f"unix_date({e})"}.get(t.upper(), e)
            aggs += [F.expr(f"approx_count_distinct({e})").alias(f"d{i}"), F.expr(f"min({v})").alias(f"lo{i}"),
                     F.expr(f"max({v})").alias(f"hi{i}"),
                     F.expr(f"max(CASE WHEN {e} IS NULL THEN 1 ELSE 0 END)").alias(f"null{i}")]
        self.watched = src_df.alias(s_alias).observe(self.name, *aggs)
        self._row = None

    def ran(self, materialised) -> None:
        """Read the metrics of the job that materialised ``materialised`` (built on ``watched``)."""
        try:
            found = materialised._jdf.queryExecution().observedMetrics().get(self.name)
            if found.isDefined():
                row = found.get()
                self._row = [row.get(i) for i in range(row.size())]
                self.complete = True
        except Exception:  # noqa: BLE001 - then the aggregate job computes the summary
            self.complete = False

    def summary(self, spark, src_view: str) -> SourceSummary:
        from isolde.planner.predicates import TimestampMicros as _Micros
        from isolde.planner.scope import KeyRange

        row = self._row
        out = {}
        few = []  # (key, expression collected, type, lo, hi, has_null) of the keys with few values
        for i, (k, t) in enumerate(self.usable):
            approx, lo, hi, has_null = row[1 + 4 * i: 5 + 4 * i]
            if t.upper() == "TIMESTAMP":
                lo, hi = (None if x is None else _Micros(x) for x in (lo, hi))
            elif t.upper() == "DATE":
                lo, hi = (None if x is None else EPOCH_DAY + datetime.timedelta(days=x) for x in (lo, hi))
            has_null = bool(has_null)
            if lo is None:  # no value but NULLs (or no row)
                out[k.target_column] = [None] if has_null else []
            elif lo == hi:  # one value, exactly: a point MERGE collects nothing
                out[k.target_column] = [lo] + ([None] if has_null else [])
            elif approx <= 2 * KEY_SET_LIMIT:
                e = f"try_cast(({k.source_sql}) AS {t})"
                few.append((k, f"unix_micros({e})" if t.upper() == "TIMESTAMP" else e, t, lo, hi, has_null))
            else:
                out[k.target_column] = KeyRange(lo, hi, int(approx), has_null)
        if few:
            sets = ", ".join(f"slice(collect_set({v}), 1, {KEY_SET_LIMIT + 1})" for _, v, *_ in few)
            got = without_adaptive(spark.sql(f"SELECT {sets} FROM {src_view} AS {q(self.s_alias)}")).collect()[0]
            for (k, _, t, lo, hi, has_null), values in zip(few, got):
                values = list(values)
                if t.upper() == "TIMESTAMP":
                    values = [_Micros(x) for x in values]
                if len(values) > KEY_SET_LIMIT:
                    out[k.target_column] = KeyRange(lo, hi, len(values), has_null)
                else:
                    out[k.target_column] = values + ([None] if has_null else [])
        return SourceSummary(out, int(row[0]), False, {k.target_column: t for k, t in self.usable})


def _source_per_partition(views, src_df, pairs_df, touched: dict):
    """``partition key -> temp view`` of the source rows that matched the touched files of that
    partition (from pass 1's pairs). A partition's rewrite then broadcasts a tenth of the
    matched rows, not all of them: a smaller hash table to build, ship and probe (measured on
    10 partitions: the rewrite 13.4 -> 11.8 s). Built on first use, once, for all partitions."""
    if len(touched) > routes.SPLIT_SOURCE_MAX_FILES:
        return None
    keys = sorted({dml.partition_key(a) for a in touched.values()})
    index = {k: i for i, k in enumerate(keys)}
    lock = threading.Lock()
    built: dict = {}

    def view_of(key):
        with lock:  # the partitions' jobs are planned in parallel threads
            if "rows" not in built:
                group_of = F.create_map(*[x for path, add in touched.items()
                                          for x in (F.lit(path), F.lit(index[dml.partition_key(add)]))])
                pairs = (pairs_df.filter(F.col("sid").isNotNull())
                         .select(group_of[F.col("f")].alias("__isolde_g"), F.col("sid").alias(SID))
                         .filter(F.col("__isolde_g").isNotNull()).distinct())
                built["rows"] = views.checkpoint(src_df.join(F.broadcast(pairs), SID))
            rows = built["rows"]
            return views.add(rows.filter(F.col("__isolde_g") == index[key]).drop("__isolde_g"), "matched_part")

    return view_of


def _cardinality_error(target) -> MergeCardinalityError:
    return MergeCardinalityError(
        "Cannot perform Merge as multiple source rows matched and attempted to modify the same "
        f"target row in the Delta table `{target.name}` in possibly conflicting ways. By SQL "
        "semantics of Merge, when multiple source rows match on the same target row, the result "
        "may be ambiguous as it is unclear which source row should be used to update or delete "
        "the matching target row. You can preprocess the source table to eliminate the "
        "possibility of multiple matches.")


class _Pairs:
    """What the plan needs from pass 1's (target file, row, source row id, acting clause)
    pairs, from bitmaps Spark built in ONE job (``row_bitmaps``): per (file, clause) the target
    rows and how many pairs named them, and the matched source row ids. No pair list reaches
    the driver: a 10M-row MERGE brings at most ``rows / 32768`` 4 KiB bitmaps per file.

    A target row's clause is the acting one (at most one acts unless a lone DELETE: two pairs
    naming one row under acting clauses is what the cardinality check refuses)."""

    def __init__(self, found: dict):
        """``found``: (0, file, clause) -> the target rows, (1, None, None) -> the source ids."""
        sources = found.pop((1, None, None), None)
        self.sids = sources.rows if sources is not None else None
        self.n_matched = sources.pairs if sources is not None else 0  # pairs with a source row
        self.by_file: dict = {}  # file -> {clause: RowBitmap}
        for (_, f, cl), bm in found.items():
            self.by_file.setdefault(f, {})[cl] = bm
        self.max_act = max([2 if self._excess(cls, acting=True) else 1 for cls in self.by_file.values()] or [0])

    @classmethod
    def built_in_spark(cls, pass1_rows) -> "_Pairs":
        from ..rows import row_bitmaps

        pairs = pass1_rows.select(F.explode(F.array(
            F.struct(F.lit(0).alias("k"), F.col(FILE_COL).alias("f"), F.col(CLAUSE).cast("int").alias("cl"),
                     F.col(ROW_COL).cast("long").alias("p")),
            F.struct(F.lit(1).alias("k"), F.lit(None).cast("string").alias("f"), F.lit(None).cast("int").alias("cl"),
                     F.col("sid").cast("long").alias("p")))).alias("x")).select("x.*")
        return cls(row_bitmaps.collect_bitmaps(pairs, ["k", "f", "cl"], "p"))

    @classmethod
    def of_table(cls, table) -> "_Pairs":
        """The same from pass 1's rows collected to the driver (``few_rows``)."""
        from ..rows import row_bitmaps

        n = table.num_rows
        target = pa.table({"k": pa.array([0] * n, pa.int8()), "f": table.column(FILE_COL).cast(pa.string()),
                           "cl": table.column(CLAUSE).cast(pa.int32()), "p": table.column(ROW_COL).cast(pa.int64())})
        source = pa.table({"k": pa.array([1] * n, pa.int8()), "f": pa.nulls(n, pa.string()),
                           "cl": pa.nulls(n, pa.int32()), "p": table.column("sid").cast(pa.int64())})
        return cls(row_bitmaps.bitmaps_of_table(pa.concat_tables([target, source]), ["k", "f", "cl"], "p"))

    @staticmethod
    def _excess(clauses: dict, acting: bool) -> bool:
        """Does some row of the file have two pairs (under acting clauses only, if ``acting``)?"""
        from pyroaring import BitMap64

        mine = [bm for cl, bm in clauses.items() if cl >= 0 or not acting]
        return bool(mine) and sum(bm.pairs for bm in mine) > len(BitMap64.union(*[bm.rows for bm in mine]))

    def matched_sids(self) -> list:
        """The distinct source row ids that matched a target row, sorted."""
        return list(self.sids) if self.sids is not None else []

    def _rows(self, clauses: dict, idx):
        from pyroaring import BitMap64

        return BitMap64.union(BitMap64(), *[bm.rows for cl, bm in clauses.items() if cl in idx])

    def per_file(self, update_idx, delete_idx) -> dict:
        """file -> (rows updated, rows deleted, most pairs of one row: 1, or 2 for "more")."""
        return {f: (len(self._rows(cls, set(update_idx))), len(self._rows(cls, set(delete_idx))),
                    2 if self._excess(cls, acting=False) else 1)
                for f, cls in self.by_file.items()}

    def count_rows(self, idx) -> int:
        """Target rows acted on by the clauses ``idx`` (a row under one clause only)."""
        return sum(len(self._rows(cls, set(idx))) for cls in self.by_file.values())

    def positions(self, changing_idx) -> dict:
        """file -> ``BitMap64`` of its rows an UPDATE or DELETE clause acts on."""
        out = {f: self._rows(cls, set(changing_idx)) for f, cls in self.by_file.items()}
        return {f: rows for f, rows in out.items() if rows}


_PLAIN_TYPES = (T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
                T.DecimalType, T.StringType, T.BinaryType, T.DateType, T.TimestampType, T.TimestampNTZType)


def _plain_type_sql(dt) -> Optional[str]:
    """The type's spelling in a SQL CAST, for a flat type whose spelling is plain (no CHAR /
    VARCHAR, no nested field names); else None."""
    if not isinstance(dt, _PLAIN_TYPES) or isinstance(dt, (T.CharType, T.VarcharType)):
        return None
    return S.type_sql(dt)


def _clause_case(indexed) -> str:
    """CASE over (index, condition sql) in order: first true condition wins; -1 when none."""
    if not indexed:
        return "-1"
    parts = " ".join(f"WHEN ({cond}) THEN {i}" for i, cond in indexed)
    return f"CASE {parts} ELSE -1 END"


@executes(ast.Merge)
def run(ctx, stmt: ast.Merge):
    from isolde.planner.scope import conflict_scope, merge_join_keys

    from ..rows.live_rows_first import retried

    started = time.time()
    spark = ctx.spark

    def attempt(target):
        views = dml.TempViews(spark)
        try:
            return _run(ctx, stmt, target, views, started, conflict_scope, merge_join_keys)
        finally:
            views.close()

    return retried(dml.open_target(ctx, stmt.target), attempt)


def _run(ctx, stmt, target, views, started, conflict_scope, merge_join_keys):
    spark = ctx.spark
    t_alias = stmt.target_alias or (stmt.target.parts[-1] if stmt.target.parts else "target")
    if stmt.source_alias:
        s_alias = stmt.source_alias
    elif isinstance(stmt.source, ast.TableRef) and stmt.source.parts:
        s_alias = stmt.source.parts[-1]
    else:
        s_alias = "source"

    clauses = list(stmt.clauses)
    for c in clauses:
        if isinstance(c, ast.WhenNotMatchedBySource) and getattr(c.action, "star", False):
            raise AnalysisError("WHEN NOT MATCHED BY SOURCE cannot UPDATE SET *: there is no source row.",
                                error_class="DELTA_MERGE_UNSUPPORTED_STAR", sqlstate="42000")

    # ---- source
    src_df = _source_df(ctx, stmt, target, views)
    # (a source view looked up here is not looked up again by statement_reads_target)
    looked_up = {stmt.source.name: src_df} if isinstance(stmt.source, ast.TableRef) and stmt.source.path is None \
        and stmt.source.parts else {}
    src_cols = list(src_df.columns)
    src_struct = src_df.schema
    types = target.column_types
    keys = merge_join_keys(stmt, types, stmt.target_alias, src_cols)
    observed = None  # the key summary, computed by the job that materialises the source
    # materialised once, with a row id: every pass sees the same rows (non-deterministic sources
    # too), a source query runs once, and pass 1 can say which source rows matched
    with phase("source"):
        local = _local_source(spark, src_df)
        if local is not None:
            src_df = local
        else:
            if target.deletion_vectors:  # (their plans need no proof that the keys are unique)
                observed = _ObservedSummary.of(spark, views, src_df, s_alias, keys, types)
                src_df = observed.watched if observed is not None else src_df
            rows = src_df.select("*", F.lit(True).alias(SRC_FLAG), F.monotonically_increasing_id().alias(SID))
            src_df = views.checkpoint(rows)
            if observed is not None:
                observed.ran(rows)
    src_view = views.add(src_df, "source")
    materialized = time.time()

    # ---- schema (evolution adds the source's new columns for SET * / INSERT *, and the source
    # columns an INSERT column list names that the table lacks; as Delta 4.4, an UPDATE SET of a
    # column the table lacks is not evolution but an unresolved column)
    struct = target.struct
    new_metadata = new_protocol = None
    star = any(getattr(c.action, "star", False) for c in clauses)
    # MERGE WITH SCHEMA EVOLUTION, or Delta's session setting that turns it on for every MERGE
    evolve = stmt.schema_evolution or evolution.auto_merge(ctx.conf)
    if evolve:  # the new columns, and new fields of the source's structs (schema_evolution.py)
        listed = {col.lower() for c in clauses if isinstance(c, ast.WhenNotMatched) and not c.action.star
                  for col in c.action.columns if "." not in col}
        data = list(src_struct.fields) if star else [
            f for f in src_struct.fields if f.name.lower() in listed and _field(struct, f.name) is None]
        evolved = evolution.by_name(struct, data)
        if evolution.changed(struct, evolved):
            new_metadata, new_protocol = P.with_schema(target.metadata, target.snapshot.protocol, evolved)
            struct = S.metadata_schema(new_metadata)

    # ---- scope
    with phase("source"):
        summary = observed.summary(spark, src_view) if observed is not None and observed.complete else \
            _summarise_source(spark, src_view, s_alias, keys, types, local=local is not None, src_struct=src_struct)
    key_values, n_source = summary.key_values, summary.rows
    scope = conflict_scope(stmt, types, target.partition_columns, stmt.target_alias, key_values,
                           source_columns=src_cols, **target.scope_flags(),
                           target_read=statement_reads_target(ctx, target.path, stmt, looked_up))
    files = dml.read_scope(target, scope)
    by_path = {a.path: a for a in files}

    on = _bound(ctx, stmt.on, views, target)
    matched = [(i, c) for i, c in enumerate(clauses) if isinstance(c, ast.WhenMatched)]
    not_matched = [(i, c) for i, c in enumerate(clauses) if isinstance(c, ast.WhenNotMatched)]
    by_source = [(i, c) for i, c in enumerate(clauses) if isinstance(c, ast.WhenNotMatchedBySource)]
    cond = {i: _bound(ctx, c.condition, views, target) for i, c in enumerate(clauses)}
    matched_case = _clause_case([(i, cond[i]) for i, _ in matched])
    nm_case = _clause_case([(i, cond[i]) for i, _ in not_matched])
    bs_case = _clause_case([(i, cond[i]) for i, _ in by_source])
    update_idx = [i for i, c in enumerate(clauses) if _kind(c) == "update"]
    delete_idx = [i for i, c in enumerate(clauses) if _kind(c) == "delete"]
    # Delta's per-clause metrics: the rows each kind of clause changed (a target row acts
    # under one clause: the first whose condition holds)
    matched_idx = {i for i, _ in matched}
    by_clause = {"numTargetRowsMatchedUpdated": [i for i in update_idx if i in matched_idx],
                 "numTargetRowsMatchedDeleted": [i for i in delete_idx if i in matched_idx],
                 "numTargetRowsNotMatchedBySourceUpdated": [i for i in update_idx if i not in matched_idx],
                 "numTargetRowsNotMatchedBySourceDeleted": [i for i in delete_idx if i not in matched_idx]}

    parameters = {
        "predicate": json.dumps([stmt.on.sql]),
        "matchedPredicates": _clause_params([c for _, c in matched]),
        "notMatchedPredicates": _clause_params([c for _, c in not_matched]),
        "notMatchedBySourcePredicates": _clause_params([c for _, c in by_source]),
    }
    if stmt.schema_evolution:
        parameters["schemaEvolution"] = "true"

    # ---- assignments, validated before any data work
    quals = {x.lower() for x in (t_alias, stmt.target.parts[-1] if stmt.target.parts else None) if x}

    def strip(path):
        return dml.strip_qualifier(struct, path, quals)

    update_values: dict[int, list] = {}  # clause -> [(assignment, value sql)]
    for i, c in enumerate(clauses):
        if _kind(c) != "update":
            continue
        if c.action.star:
            pairs = []
            for f in struct.fields:
                sf = _field(src_struct, f.name)
                if sf is None:
                    continue
                for path in evolution.update_paths(sf.dataType, f.dataType) if evolve else [()]:
                    value = f"{q(s_alias)}.{q(sf.name)}" + "".join(f".{q(p)}" for p in path)
                    tree = exp.column(sf.name, table=s_alias) if not path else sqlglot.parse_one(value, read=DIALECT)
                    pairs.append((ast.Assignment((f.name, *path), ast.Expr(value, tree)), value))
            missing = [f.name for f in struct.fields if _field(src_struct, f.name) is None]
            if missing and not evolve:
                raise AnalysisError(
                    f"UPDATE SET * needs every target column in the source; missing: {', '.join(missing)}.",
                    error_class="DELTA_MERGE_UNRESOLVED_EXPRESSION", sqlstate="42601")
        else:
            for a in c.action.assignments:  # (resolved against the table as it was: see the schema step)
                dml.resolve_column_path(target.struct, strip(a.column), target.name)
            pairs = [(ast.Assignment(strip(a.column), a.value),
                      SA.default_sql(dml.resolve_field(struct, strip(a.column))) if SA.is_default_keyword(a.value.tree)
                      else _bound(ctx, a.value, views, target))
                     for a in c.action.assignments]
        for a, _ in pairs:
            dml.resolve_column_path(struct, tuple(a.column), target.name)
        update_values[i] = pairs
    insert_values: dict[int, dict] = {}  # clause -> {column: value sql}
    insert_trees: dict[int, dict] = {}  # clause -> {column: the value's tree (its type, when plain)}
    for i, c in not_matched:
        act = c.action
        vals, trees = {}, {}
        if act.star:
            for f in struct.fields:
                sf = _field(src_struct, f.name)
                if sf is not None:
                    vals[f.name] = f"{q(s_alias)}.{q(sf.name)}"
                    trees[f.name] = exp.column(sf.name, table=s_alias)
                    if evolve and vals[f.name] != (filled := evolution.filled_sql(vals[f.name], sf.dataType,
                                                                                   f.dataType)):
                        vals[f.name], trees[f.name] = filled, None  # (its type is analysed)
            # as Delta 4.4: without schema evolution INSERT * takes every target column from the
            # source, generated, identity and DEFAULT columns included (measured on Delta-Spark)
            missing = [f.name for f in struct.fields if _field(src_struct, f.name) is None]
            if missing and not evolve:
                raise AnalysisError(
                    f"INSERT * needs every target column in the source; missing: {', '.join(missing)}.",
                    error_class="DELTA_MERGE_UNRESOLVED_EXPRESSION", sqlstate="42601")
        else:
            if len(act.columns) != len(act.values):
                raise AnalysisError("INSERT column list and VALUES differ in length.",
                                    error_class="DELTA_MERGE_INSERT_ARITY", sqlstate="21S01")
            named = [col.split(".")[-1].lower() for col in act.columns]
            twice = sorted({n for n in named if named.count(n) > 1})
            if twice:
                raise AnalysisError(f"Duplicate column names in INSERT clause: {', '.join(twice)}.",
                                    error_class="DELTA_DUPLICATE_COLUMNS_ON_INSERT", sqlstate="42701")
            for col, v in zip(act.columns, act.values):
                f = _field(struct, col.split(".")[-1] if "." in col else col)
                if f is None:
                    raise ColumnNotFoundError(col, target.name, [x.name for x in struct.fields])
                vals[f.name] = SA.default_sql(f) if SA.is_default_keyword(v.tree) else _bound(ctx, v, views, target)
                trees[f.name] = v.tree
        for name in vals:
            SA.refuse_identity_insert(_field(struct, name))
        insert_values[i] = vals
        insert_trees[i] = trees

    # ---- the types of the values (what storing them needs: store_assignment.py)
    def plain_type(tree):
        """A value that is a plain source or target column: its type, else None."""
        if not isinstance(tree, exp.Column) or tree.args.get("db") is not None:
            return None
        side = (tree.table or "").lower()
        if side == s_alias.lower() or (not side and _field(struct, tree.name) is None):
            sf = _field(src_struct, tree.name)
            return sf.dataType if sf is not None else None
        if not side or side in quals:
            tf = _field(struct, tree.name)
            return tf.dataType if tf is not None else None
        return None

    value_type: dict = {}  # (kind, clause, j) -> DataType or None
    unknown: dict = {}  # the values whose type must be analysed: key -> SQL
    for i, pairs in update_values.items():
        for j, (a, sql) in enumerate(pairs):
            t = plain_type(a.value.tree)
            value_type[("v", i, j)] = t
            if t is None and dml._holds_struct(dml.resolve_column_path(struct, tuple(a.column), target.name)[2]):
                unknown[("v", i, j)] = sql
    for i, vals in insert_values.items():
        for j, (col, sql) in enumerate(vals.items()):
            t = plain_type(insert_trees[i][col])
            value_type[("i", i, j)] = t
            if t is None and dml._holds_struct(_field(struct, col).dataType):
                unknown[("i", i, j)] = sql
    if unknown:  # one analysis over no rows
        analysed = list(unknown)
        items = ", ".join(f"({unknown[k]}) AS __isolde_t{n}" for n, k in enumerate(analysed))
        schema = spark.sql(f"SELECT {items} FROM {views.add(dml.scan_rows(ctx, target, [], False), 'types')} "
                           f"AS {q(t_alias)} FULL OUTER JOIN {src_view} AS {q(s_alias)} ON ({_bound(ctx, stmt.on, views, target)})").schema
        for n, k in enumerate(analysed):
            value_type[k] = schema[f"__isolde_t{n}"].dataType

    metrics = {"numSourceRows": n_source, "numTargetRowsUpdated": 0, "numTargetRowsDeleted": 0,
               "numTargetRowsInserted": 0, **{key: 0 for key in by_clause}}
    # a condition or value that is not deterministic (rand(), current_timestamp(), ...) must be
    # decided once: the single pass materialises its pairs anyway; copy-on-write does it below
    nondeterministic = dml.has_nondeterminism(
        stmt.on.tree, *[c.condition.tree for c in clauses if c.condition is not None],
        *[a.value.tree for pairs in update_values.values() for a, _ in pairs])

    def target_view(file_list, hint, ids=True):
        return views.add(dml.scan_rows(ctx, target, file_list, ids), hint)

    # each value computed only for the rows its clause acts on (Spark's lateral alias: the
    # select item {CLAUSE} beside them), so a value that fails elsewhere fails nowhere, as in
    # Delta: WHEN MATCHED AND b < 0 THEN UPDATE SET b = b + 9223372036854775800
    value_cols = [f"CASE WHEN {CLAUSE} = {i} THEN ({sql}) END AS __isolde_v_{i}_{j}"
                  for i, pairs in update_values.items() for j, (_, sql) in enumerate(pairs)]
    per_clause = {}  # update clause -> {top-level column: new value}
    for i, pairs in update_values.items():
        per_clause[i] = dml.assignment_columns(struct, [a for a, _ in pairs], target.name,
                                               lambda j, i=i: f"__isolde_v_{i}_{j}",
                                               [value_type[("v", i, j)] for j in range(len(pairs))])
    # a generated column an UPDATE clause assigns must match its expression: a filter of the rows
    # that carry the clause's values, before they are projected (dml.generated_guard)
    update_guards = [g for i, pairs in update_values.items() if (g := dml.generated_guard(
        struct, [a for a, _ in pairs], target.name, lambda j, i=i: f"__isolde_v_{i}_{j}",
        [value_type[("v", i, j)] for j in range(len(pairs))], when=f"{CLAUSE} = {i}")) is not None]
    update_guard = " AND ".join(f"({g})" for g in update_guards) or None

    def guarded(rows):
        return rows.filter(update_guard) if update_guard is not None else rows

    old_names = {f.name.lower() for f in target.struct.fields}
    # a row's old value as the (maybe evolved) column's type: a struct the evolution gave new
    # fields holds them NULL (schema_evolution.filled_sql)
    old_sql = {f.name: evolution.filled_sql(q(f.name), _field(target.struct, f.name).dataType, f.dataType)
               for f in struct.fields if f.name.lower() in old_names}
    cl = F.col(CLAUSE)
    # every touched file takes a deletion vector (routes.MODE): only the changed rows are
    # needed, and pass 1 can keep them (one scan of the target, not two)
    single_pass = routes.choose_mode(target.deletion_vectors) == routes.DV
    kept_ids = None  # the materialised row-id column the single pass writes updated rows with

    def old_value(f):
        if f.name not in old_sql:
            return F.lit(None).cast(f.dataType)
        return F.col(q(f.name)) if old_sql[f.name] == q(f.name) else F.expr(old_sql[f.name])

    def acting_value(f):
        """A column's value after the clause that acts on the row; NULL for a deleted row (not
        written), so the old value is read only when some UPDATE clause keeps it: an
        UPDATE SET * reads no target column but the keys."""
        expr = None
        for i, cols in per_clause.items():
            value = cols.get(f.name, old_value(f))
            expr = F.when(cl == i, value) if expr is None else expr.when(cl == i, value)
        return expr if expr is not None else F.lit(None).cast(f.dataType)

    # each update clause's assigned columns as (column -> value column), when every assignment
    # sets a whole top-level column: then ``acting_sql`` writes the values as SQL
    flat_updates = {}
    for i, pairs in update_values.items():
        resolved = [dml.resolve_column_path(struct, tuple(a.column), target.name) for a, _ in pairs]
        if any(nested for _, nested, _ in resolved):
            flat_updates = None
            break
        # each value stored by Delta's rules, a generated column's checked (dml.assignment_sql)
        flat_updates[i] = dml.assignment_sql(struct, [a for a, _ in pairs], target.name,
                                             lambda j, i=i: f"__isolde_v_{i}_{j}",
                                             [value_type[("v", i, j)] for j in range(len(pairs))])

    def acting_sql(f):
        """``acting_value`` as a SQL select item (no Column built over py4j); None where a type
        has no plain CAST spelling or an assignment sets a nested field."""
        type_sql = _plain_type_sql(f.dataType)
        if type_sql is None or flat_updates is None:
            return None
        old = old_sql.get(f.name, "NULL")
        cases = " ".join(f"WHEN {CLAUSE} = {i} THEN CAST({cols.get(f.name, old)} AS {type_sql})"
                         for i, cols in flat_updates.items())
        return f"CASE {cases} END AS {q(f.name)}" if cases else f"CAST(NULL AS {type_sql}) AS {q(f.name)}"

    # an inner join's source keys bound the target rows pass 1 can pair (target_key_filter)
    key_filter = target_key_filter(keys, key_values, summary.comparison_types, types, target.partition_columns) \
        if files and single_pass and not by_source else None
    # pass 1's routes: how its pairs are found (routes.FIND), its source as literals or joined
    # (routes.PASS1_SOURCE), and the join: the source is usually the small side, broadcast when
    # small, else hashed (a shuffled hash join never sorts the target side; routes.SOURCE_JOIN).
    # FULL OUTER cannot broadcast.
    facts = routes.Statement(kind=routes.MERGE, deletion_vectors=single_pass, source_rows=n_source,
                             matched=bool(matched), by_source=bool(by_source), local_source=local is not None,
                             key_filtered=key_filter is not None, plain_on=inline_source.plain(stmt.on.tree))
    find_route = routes.choose(routes.FIND, facts)
    broadcast = routes.choose(routes.SOURCE_JOIN, facts) == routes.BROADCAST
    shuffle_hint = f"/*+ SHUFFLE_HASH({q(s_alias)}) */"
    hint = f"/*+ BROADCAST({q(s_alias)}) */" if broadcast else shuffle_hint
    ta, sa = q(t_alias), q(s_alias)

    # ---- pass 1: the (target row, source row) pairs ON matches over the candidates (plus, with
    # NOT MATCHED BY SOURCE clauses, the unmatched target rows a clause acts on) -> touched files,
    # rows updated / deleted per file, the cardinality check, and which source rows matched
    # (what decides the inserts: no second look at the target's keys)
    touched: dict = {}
    changed: dict = {}
    deleted: dict = {}  # per touched file, the rows deleted from it
    positions = None  # per touched file, the changed rows' positions, when pass 1 collected them
    matched_sid_values = None  # the matched source row ids, when pass 1 collected them
    upd_total = del_total = 0
    max_all = 0
    moves = False  # some row changes partition: rows cannot be written per source partition
    matched_sids = None  # source row ids of the source rows that matched some target row
    pass2_source = None  # the source rows pass 2 needs (those that matched), when known
    pass1_table = None  # pass 1's rows on the driver (Arrow), when few (few_rows, bounded_rows)
    updated_on_driver = None  # the updated rows as written (Arrow), when bounded_rows collected pass 1
    n_matched = 0
    if not files:
        # no file to read, yet ON, the clause conditions and the values are analysed, as Delta
        # does: a MERGE wrong for this table (an ambiguous `id`) must not pass while it is empty
        spark.sql(f"SELECT CASE WHEN {sa}.{SRC_FLAG} IS NULL THEN {bs_case} ELSE {matched_case} END AS {CLAUSE}, "
                  f"{', '.join(value_cols) or '1'} FROM {target_view([], 'target')} AS {ta} "
                  f"FULL OUTER JOIN {src_view} AS {sa} ON ({on})").schema
    if files:
        join = "LEFT JOIN" if by_source else "INNER JOIN"
        # does an acting clause move a row to another partition (assigns a partition column a new value)?
        part_lower = {c.lower() for c in target.partition_columns}
        moved_sql = {}
        for i, pairs in update_values.items():
            tests = []
            for a, sql in pairs:
                f = _field(struct, a.column[0]) if len(a.column) == 1 else None
                if f is not None and f.name.lower() in part_lower:
                    tests.append(f"NOT (CAST(({sql}) AS {f.dataType.simpleString()}) <=> {ta}.{q(f.name)})")
            if tests:
                moved_sql[i] = "(" + " OR ".join(tests) + ")"

        def moved_case(indexed):
            parts = " ".join(f"WHEN ({cond[i]}) THEN {moved_sql.get(i, 'false')}" for i, _ in indexed)
            return f"CASE {parts} ELSE false END" if indexed and moved_sql else "false"

        mv = (f"CASE WHEN {sa}.{SRC_FLAG} IS NULL THEN {moved_case(by_source)} "
              f"ELSE {moved_case(matched)} END") if moved_sql else "false"
        clause_sql = f"CASE WHEN {sa}.{SRC_FLAG} IS NULL THEN {bs_case} ELSE {matched_case} END"
        if single_pass:
            # the pairs with the acting clause's new values, materialised: the deletion vectors
            # and the updated rows come from here, with no second scan. The target's deletion
            # vectors and row paths are applied to the pairs, not to every row before the join
            # (the join is inner, or LEFT with the target preserved: a deleted row is one more
            # pair or unmatched row, dropped here). An upsert of 100k rows into 10M in 10 files
            # with vectors, interleaved medians: find 1.02 -> 0.79 s, statement 2.26 -> 1.83 s.
            # the updated rows are written with their stable row ids (row tracking)
            kept_ids = kept_row_id_column(target.metadata, files) if update_idx else None
            target_rows, after_join = dml.scan_rows_for_join(ctx, target, files,
                                                             (kept_ids,) if kept_ids is not None else ())
            joined = f"{hint} {', '.join([f'{ta}.*', f'{sa}.{SID} AS sid', f'{clause_sql} AS {CLAUSE}'] + value_cols)}"
            pairing = f"{join} {src_view} AS {sa} ON ({on})"
            if key_filter is not None:
                target_rows = target_rows.filter(key_filter)
            if routes.choose(routes.PASS1_SOURCE, facts) == routes.INLINE:
                # the few source rows as literals beside each kept target row: no broadcast job
                generated = inline_source.lateral_view(src_df.collect(), src_df.schema, s_alias, q)
                if generated is not None:
                    joined, pairing = joined.replace(hint, "", 1), f"{generated} WHERE ({on})"
            pass1_rows = guarded(spark.sql(f"SELECT {joined} FROM {views.add(target_rows, 'target')} AS {ta} {pairing}"))
            file_path = after_join.file_path_sql() if not kept_ids else None
            if file_path is not None:
                # the deleted rows dropped, the path added by the select below: two plan steps
                # fewer than ``finish`` (the path's select, a drop)
                pass1_rows = after_join.live(pass1_rows)
                file_col = F.expr(file_path).alias(FILE_COL)
            else:
                pass1_rows, file_col = after_join.finish(pass1_rows), F.col(FILE_COL)
            if by_source:
                pass1_rows = pass1_rows.filter(f"sid IS NOT NULL OR {CLAUSE} >= 0")
            acting = [acting_sql(f) for f in struct.fields]
            if file_path is not None and all(x is not None for x in acting):
                pass1_rows = pass1_rows.selectExpr(*acting, f"{file_path} AS {FILE_COL}", ROW_COL, "sid", CLAUSE)
            else:
                pass1_rows = pass1_rows.select(*[acting_value(f).alias(f.name) for f in struct.fields],
                                               file_col, ROW_COL, "sid", CLAUSE,
                                               *([stable_row_id(files, kept_ids)] if kept_ids else []))
            if find_route == routes.POINT:
                # a few source rows: their pairs come to the driver in one job, no checkpoint
                with phase("find"):
                    few = few_rows.collect_few(pass1_rows, files=files)
                if few is not None:
                    pass1_table, pass1_rows = few
            elif find_route == routes.BOUNDED:
                # up to the rows the driver writes: the pairs with the updated rows as they are
                # written, in one job (bounded_rows); the write takes those rows from here
                with phase("find"):
                    pass1_table = bounded_rows.collect_changed(
                        ctx, target, new_metadata or target.metadata, pass1_rows, kept_ids, files,
                        passthrough=("sid", CLAUSE), only_where=F.col(CLAUSE).isin(update_idx or [-2]))
                if pass1_table is not None:
                    updated_on_driver = bounded_rows.written_part(
                        pass1_table.filter(pc.is_in(pass1_table.column(CLAUSE), pa.array(update_idx or [-2], pa.int32()))),
                        kept_ids, new_metadata or target.metadata)
            if pass1_table is None:
                # (filled lazily by the job that brings the pairs to the driver, when one follows)
                pass1_rows = views.checkpoint(pass1_rows, eager=not (matched or by_source))
            # with clauses on matches, the plan's counts come from pass 1's bitmaps (below): no
            # pairs DataFrame is planned (two Dataset steps less)
            pairs_df = None if matched or by_source else pass1_rows.select(
                F.col(FILE_COL).alias("f"), F.col(ROW_COL).alias("r"), "sid", F.col(CLAUSE).alias("cl"),
                F.lit(False).alias("mv"))
        else:
            # copy-on-write with a clause condition or a value that is not deterministic: the
            # pairs are found, and their clause and values decided, ONCE (materialised); pass 2
            # reads them back by row position instead of joining the source again
            tv_all = target_view(files, "target")
            extra = "".join(", " + v for v in value_cols) if nondeterministic else ""
            pairs_df = spark.sql(
                f"SELECT {hint} {ta}.{FILE_COL} AS f, {ta}.{ROW_COL} AS r, {sa}.{SID} AS sid, "
                f"{clause_sql} AS {CLAUSE}, coalesce({mv}, true) AS mv{extra} "
                f"FROM {tv_all} AS {ta} {join} {src_view} AS {sa} ON ({on})")
            if by_source:
                pairs_df = pairs_df.filter(f"sid IS NOT NULL OR {CLAUSE} >= 0")
            if nondeterministic:
                decided = views.checkpoint(guarded(pairs_df))
                pairs_df = decided
            pairs_df = pairs_df.select("f", "r", "sid", F.col(CLAUSE).alias("cl"), "mv")
        per_pair = ("SELECT f, 1 AS n_all, IF(cl >= 0, 1, 0) AS n_act, IF(cl >= 0, cl, NULL) AS cl, "
                    "IF(cl >= 0 AND mv, 1, 0) AS mv, IF(sid IS NULL, 0, n) AS m, n FROM {pairs}")
        if summary.unique_keys and single_pass:
            # a row per pair, no target row in two: counted per file directly (no GROUP BY f, r)
            pairs_df = pairs_df.withColumn("n", F.lit(1)) if pairs_df is not None else None
            per_row = per_pair
        elif summary.unique_keys:
            # no target row matches two source rows, so row positions are not needed: count the
            # pairs per (file, source row, clause) -- one row per match in an upsert, one per file
            # and clause for the unmatched target rows or a low-cardinality join key
            pairs_df = pairs_df.groupBy("f", "sid", "cl", "mv").agg(F.count(F.lit(1)).alias("n"))
            if broadcast:
                # small, and used two or three times: file statistics, the inserts, pass 2's source
                pairs_df = views.checkpoint(pairs_df)
                # a broadcast semi join: one stage, where Spark planned two shuffles and two sorts
                # (the checkpoint's size is unknown to it); interleaved medians 7.17 -> 6.96 s
                pass2_source = src_df.join(F.broadcast(pairs_df.select(F.col("sid").alias(SID))), SID, "left_semi")
            per_row = per_pair
        else:
            per_row = ("SELECT f, r, count(*) AS n_all, sum(IF(cl >= 0, 1, 0)) AS n_act, "
                       "max(IF(cl >= 0, cl, NULL)) AS cl, max(IF(cl >= 0 AND mv, 1, 0)) AS mv, "
                       "count(sid) AS m, 1 AS n FROM {pairs} GROUP BY f, r")
        # (planned only if the insert pass joins them: a function, never None here)
        matched_sids = pairs_df.filter("sid IS NOT NULL").select("sid") if pairs_df is not None else \
            (lambda rows=pass1_rows: rows.filter("sid IS NOT NULL").select("sid"))
        if single_pass and (matched or by_source):
            # ONE job builds the pairs' bitmaps in Spark (the rows the vectors need anyway): the
            # per-file counts, the cardinality check and the matched source rows come from them
            with phase("find"):
                pairs = _Pairs.of_table(pass1_table) if pass1_table is not None else _Pairs.built_in_spark(pass1_rows)
            positions = pairs.positions(update_idx + delete_idx)
            matched_sid_values = pairs.matched_sids()
            n_matched = pairs.n_matched
            lone_delete = len(matched) == 1 and _kind(matched[0][1]) == "delete" and matched[0][1].condition is None
            if pairs.max_act > 1 and not lone_delete:
                raise _cardinality_error(target)
            for f, (upd, dele, m_all) in pairs.per_file(update_idx, delete_idx).items():
                if upd or dele:
                    touched[f] = by_path[f]
                    changed[f] = upd + dele
                    deleted[f] = dele
                    upd_total += upd
                    del_total += dele
                    max_all = max(max_all, m_all)
            for key, idx in by_clause.items():
                metrics[key] = pairs.count_rows(idx)
        elif matched or by_source:
            per_row = per_row.format(pairs=views.add(pairs_df, "pairs"))
            upd_list = ",".join(map(str, update_idx)) or "-2"
            del_list = ",".join(map(str, delete_idx)) or "-2"
            clause_sums = "".join(f", sum(IF(n_act > 0 AND cl IN ({','.join(map(str, idx)) or '-2'}), n, 0))"
                                  for idx in by_clause.values())
            per_file = (f"SELECT f, sum(IF(n_act > 0 AND cl IN ({upd_list}), n, 0)) AS upd, "
                        f"sum(IF(n_act > 0 AND cl IN ({del_list}), n, 0)) AS del, max(n_act) AS max_act, "
                        f"max(n_all) AS max_all, max(mv) AS mv, sum(m) AS m{clause_sums} FROM ({per_row}) GROUP BY f")
            with phase("find"):
                stats = spark.sql(per_file).collect()
            lone_delete = len(matched) == 1 and _kind(matched[0][1]) == "delete" and matched[0][1].condition is None
            for f, upd, dele, max_act, m_all, f_mv, m, *clause_rows in stats:
                for key, n_rows in zip(by_clause, clause_rows):
                    metrics[key] += int(n_rows or 0)
                n_matched += int(m or 0)
                moves = moves or bool(f_mv)
                if max_act and max_act > 1 and not lone_delete:
                    raise _cardinality_error(target)
                if upd or dele:
                    touched[f] = by_path[f]
                    changed[f] = int(upd) + int(dele)
                    deleted[f] = int(dele)
                    upd_total += int(upd)
                    del_total += int(dele)
                    max_all = max(max_all, int(m_all or 0))
        elif pass2_source is not None:
            n_matched = matched_sids.count()  # materialised: a cheap count
        else:
            n_matched = routes.BROADCAST_ROWS + 1  # not counted: do not broadcast the matched ids
    scanned = time.time()
    metrics["numTargetRowsUpdated"] = upd_total
    metrics["numTargetRowsDeleted"] = del_total

    # ---- pass 2: rows of the touched files joined again with the source -> new values; source
    # rows that matched nothing -> inserts. A source too big to broadcast whose matches touch
    # every candidate file goes through one full outer join instead (one shuffle, not two).
    has_identity = any(S.is_identity(f) for f in struct.fields)
    combined = bool(not single_pass and not broadcast and not_matched and touched and len(touched) == len(files)
                    and max_all <= 1 and not has_identity and not nondeterministic)
    ins_cols = [f"CASE WHEN {CLAUSE} = {i} THEN ({sql}) END AS __isolde_i_{i}_{j}"  # (as value_cols)
                for i, vals in insert_values.items() for j, (col, sql) in enumerate(vals.items())]

    # each insert clause's row: column -> the SQL of its stored value (a value given, else the
    # column's DEFAULT, else NULL); a generated column given a value is checked against its
    # expression over the row (identity and other generated columns are filled when written)
    insert_rows: dict = {}
    insert_guards: list = []  # a generated column given a value must match it (a filter of the inserts)
    for i, vals in insert_values.items():
        cols = list(vals)
        row = {}
        for f in struct.fields:
            if f.name in vals:
                j = cols.index(f.name)
                row[f.name] = SA.stored_sql(f"__isolde_i_{i}_{j}", value_type[("i", i, j)], f.dataType,
                                            column=f.name, write=SA.UPDATE)
            else:
                row[f.name] = SA.default_sql(f)
        guard = SA.generated_guard(struct, {n.lower(): v for n, v in row.items()}, set(vals))
        if guard is not None:
            insert_guards.append(f"CASE WHEN {CLAUSE} = {i} THEN {guard} ELSE true END")
        insert_rows[i] = row

    def insert_value(f):
        expr = None
        for i in insert_values:
            v = F.expr(insert_rows[i][f.name])
            expr = F.when(cl == i, v) if expr is None else expr.when(cl == i, v)
        return expr

    def insert_sql(f):
        """``insert_value`` as SQL; None for a type without a plain CAST spelling."""
        type_sql = _plain_type_sql(f.dataType)
        if type_sql is None:
            return None
        cases = [f"WHEN {CLAUSE} = {i} THEN CAST(({insert_rows[i][f.name]}) AS {type_sql})" for i in insert_values]
        return f"CASE {' '.join(cases)} END AS {q(f.name)}"

    def target_value(f):
        base = old_value(f)
        expr = None
        for i, cols in per_clause.items():
            if f.name in cols:
                expr = F.when(cl == i, cols[f.name]) if expr is None else expr.when(cl == i, cols[f.name])
        return expr.otherwise(base) if expr is not None else base

    target_action = F.when(cl.isin(update_idx or [-2]), F.lit(UPDATE)).when(
        cl.isin(delete_idx or [-2]), F.lit(DELETE)).otherwise(F.lit(KEEP))
    changes = None
    inserted = None
    changes_for = None
    changes_by_partition = None
    # copy-on-write needs no row positions, unless its change data reads the old rows by them
    pass2_ids = target.deletion_vectors or max_all > 1 or cdf.enabled(new_metadata or target.metadata)
    if combined:
        tv = target_view(list(touched.values()), "touched", pass2_ids)
        t_cols = [f"{ta}.{q(f.name)}" for f in target.struct.fields] + [
            f"{ta}.{FILE_COL}", f"{ta}.{ROW_COL}", f"{ta}.{dml.TGT_FLAG}"]
        clause = (f"CASE WHEN {ta}.{dml.TGT_FLAG} IS NULL THEN {nm_case} "
                  f"WHEN {sa}.{SRC_FLAG} IS NULL THEN {bs_case} ELSE {matched_case} END AS {CLAUSE}")
        rows = guarded(spark.sql(f"SELECT {shuffle_hint} {', '.join(t_cols + [clause] + value_cols + ins_cols)} "
                                 f"FROM {tv} AS {ta} FULL OUTER JOIN {src_view} AS {sa} ON ({on})"))
        if insert_guards:  # (clause indices tell insert clauses from update clauses)
            rows = rows.filter(" AND ".join(f"({g})" for g in insert_guards))
        is_ins = F.col(dml.TGT_FLAG).isNull()
        rows = rows.filter(~is_ins | (cl >= 0))
        out = []
        for f in struct.fields:
            ins = insert_value(f)
            out.append(F.when(is_ins, ins).otherwise(target_value(f)).alias(f.name))
        action = F.when(is_ins, F.lit(INSERT)).otherwise(target_action)
        changes = rows.select(*out, F.col(FILE_COL), F.col(ROW_COL), action.alias(ACTION_COL))
    else:
        pass2_lock = threading.Lock()
        pass2_views: list = []

        def pass2_view():
            """The source rows pass 2 joins: only those that matched, when known (half the
            broadcast in an upsert), materialised once on first use; else the whole source."""
            if pass2_source is None:
                return src_view
            with pass2_lock:  # partitions' jobs are planned in parallel threads
                if not pass2_views:
                    pass2_views.append(views.add(views.checkpoint(pass2_source), "matched_source"))
                return pass2_views[0]

        # the same column expressions for every partition's job (built once: ~0.06 s of py4j
        # calls each time otherwise); the single pass has its rows already
        new_values = [] if single_pass else [target_value(f).alias(f.name) for f in struct.fields] + [
            F.col(FILE_COL), F.col(ROW_COL), target_action.alias(ACTION_COL)]

        def changes_over(file_list, ids, source_view=None, tv=None):
            if nondeterministic:  # the pairs decided once (pass 1), joined back by row position
                tv = tv or target_view(file_list, "touched", True)
                values = [c.rsplit(" AS ", 1)[1] for c in value_cols]
                rows = spark.sql(
                    f"SELECT {ta}.*, coalesce(d.{CLAUSE}, -1) AS {CLAUSE}{''.join(', d.' + v for v in values)} "
                    f"FROM {tv} AS {ta} LEFT JOIN {views.add(decided, 'decided')} AS d "
                    f"ON {ta}.{FILE_COL} = d.f AND {ta}.{ROW_COL} = d.r")
                if max_all > 1:
                    w = Window.partitionBy(FILE_COL, ROW_COL).orderBy(F.col(CLAUSE).desc())
                    rows = rows.withColumn("__isolde_rn", F.row_number().over(w)).filter("__isolde_rn = 1")
                return rows.select(*new_values)
            tv = tv or target_view(file_list, "touched", ids)
            sel = ", ".join([f"{ta}.*", f"CASE WHEN {sa}.{SRC_FLAG} IS NULL THEN {bs_case} ELSE {matched_case} END "
                                        f"AS {CLAUSE}"] + value_cols)
            rows = guarded(spark.sql(f"SELECT {hint} {sel} FROM {tv} AS {ta} LEFT JOIN "
                                     f"{source_view or pass2_view()} AS {sa} ON ({on})"))
            if max_all > 1:  # a target row matched several source rows (at most one of them acts)
                w = Window.partitionBy(FILE_COL, ROW_COL).orderBy(F.col(CLAUSE).desc())
                rows = rows.withColumn("__isolde_rn", F.row_number().over(w)).filter("__isolde_rn = 1")
            return rows.select(*new_values)

        if touched and single_pass:
            def changes():  # the rows an UPDATE or DELETE clause acts on (every other pair is kept)
                return pass1_rows.filter(cl.isin(update_idx + delete_idx or [-2])).select(
                    *[q(f.name) for f in struct.fields], FILE_COL, ROW_COL, target_action.alias(ACTION_COL),
                    *([S.column(kept_ids)] if kept_ids else []))
        elif touched:
            def changes():  # built only if dml writes all touched files in one job
                return changes_over(list(touched.values()), pass2_ids)
            if broadcast and not pass2_ids and not moves and not nondeterministic:
                # no row leaves its partition: dml may write each touched partition in its own job,
                # each joined with only the source rows that matched that partition's files
                source_of = _source_per_partition(views, src_df, pairs_df, touched) \
                    if pass2_source is not None and n_matched >= routes.SPLIT_SOURCE_ROWS else None

                def changes_in(adds):
                    view = source_of(dml.partition_key(adds[0])) if source_of is not None else None
                    return changes_over(list(adds), False, view)

                changes_for = changes_in

                def over_partition_slices():  # one job over all touched partitions, one broadcast
                    df, slices = dml.scan_rows_by_partition(ctx, target, list(touched.values()))
                    # one job, so the matched source rows need no materialising job of their own:
                    # the broadcast computes them (interleaved medians: 7.66 -> 7.45 s)
                    source = views.add(pass2_source, "matched_source") if pass2_source is not None else None
                    rows = changes_over(None, False, source, tv=views.add(df, "touched"))
                    return dml.plan_slice_write(ctx, target, rows, slices, new_metadata)

                changes_by_partition = over_partition_slices
        # a local source whose every row matched (a point upsert of a key the table holds)
        # inserts nothing: no insert pass is planned (~20 ms of plans and py4j calls)
        all_matched = (local is not None and matched_sid_values is not None
                       and len(set(matched_sid_values)) == n_source)
        if not_matched and not all_matched:
            sel = ", ".join([f"{nm_case} AS {CLAUSE}"] + ins_cols)
            if matched_sids is None:  # no candidate file: no source row matches
                query = f"SELECT {sel} FROM {src_view} AS {sa}"
            elif matched_sid_values is not None and \
                    (matched := id_sets.membership_sql(matched_sid_values, f"{sa}.{SID}")) is not None:
                # the matched ids as a literal (a list, or a bitmap): no broadcast job (none at
                # all over a local source); an upsert of 100k rows: one job and ~0.1 s less
                query = f"SELECT {sel} FROM {src_view} AS {sa} WHERE NOT ({matched})"
            else:
                if updated_on_driver is not None:  # pass 1 is not materialised: the ids from the driver
                    matched_sids = spark.createDataFrame(pa.table({"sid": pa.array(matched_sid_values, pa.int64())}))
                ids = views.add(matched_sids() if callable(matched_sids) else matched_sids, "matched")
                ids_hint = "/*+ BROADCAST(m) */" if n_matched <= routes.BROADCAST_ROWS else ""
                query = (f"SELECT {ids_hint} {sel} FROM {src_view} AS {sa} "
                         f"LEFT ANTI JOIN {ids} AS m ON {sa}.{SID} = m.sid")
            values = [insert_sql(f) for f in struct.fields]
            checked = "".join(f" AND ({g})" for g in insert_guards)
            if all(v is not None for v in values):
                # the acting clause's test and the new rows' values in the same query: one
                # Dataset step (each is an analysis of the plan), no Column built over py4j
                inserted = spark.sql(f"SELECT {', '.join(values)} FROM ({query}) AS __isolde_ins "
                                     f"WHERE {CLAUSE} >= 0{checked}")
            else:
                inserted = spark.sql(query).filter(f"{CLAUSE} >= 0{checked}").select(
                    *[insert_value(f).alias(f.name) for f in struct.fields])
            if target.partition_columns and not single_pass:  # (dml does it with the updated rows)
                # each partition's new rows in one task: one new file per partition, not one per
                # partition and source split
                inserted = inserted.repartition(*[F.col(q(c)) for c in target.partition_columns])

    # change data comes from the rows the write writes, never from a second evaluation of the
    # statement (cdf.acted_rows): the rows acted on and the inserted rows are materialised once
    acted = None
    with_cdf = cdf.enabled(new_metadata or target.metadata)
    if with_cdf and touched:
        if single_pass:
            if pass1_table is not None and updated_on_driver is not None:  # (bounded_rows: on the driver)
                acted = spark.createDataFrame(pass1_table.drop_columns(
                    [c for c in pass1_table.column_names if c.startswith("_isolde_ord")])).select(
                    *[q(f.name) for f in struct.fields], FILE_COL, ROW_COL, target_action.alias(ACTION_COL))
            else:
                acted = changes()
        else:
            materialised = views.checkpoint(changes() if callable(changes) else changes)
            changes, changes_for, changes_by_partition = materialised, None, None
            acted = materialised
    if with_cdf and inserted is not None and not has_identity:
        inserted = views.checkpoint(inserted)
    change = dml.apply_changes(ctx, target, changes, touched, inserted, changed_rows=changed,
                               metadata=new_metadata, changes_for=changes_for, views=views,
                               changes_by_partition=changes_by_partition, deleted_rows=deleted,
                               changed_only=single_pass, positions=positions, row_ids=kept_ids,
                               inserted_at_most=n_source, rows_on_driver=updated_on_driver)
    if single_pass and not update_idx:
        change.row_ids_kept = True  # rows only deleted (by vectors) or inserted: none took a new id
    if touched and with_cdf:
        # every changed row: once a commit has a cdc file, readers take nothing from its adds
        if inserted is not None and has_identity:  # identity values exist only in the files written
            read_back = cdf.written_inserts(ctx, target, change.metadata_update or new_metadata or target.metadata,
                                            change, touched)
            inserted = read_back if read_back is not None else inserted
        cdf.record(ctx, target, change, cdf.acted_rows(ctx, target, acted, touched, struct, inserted), new_metadata)
    if change.metadata_update is not None:
        new_metadata = change.metadata_update
    if new_metadata is not None:
        change.actions.insert(0, new_metadata)
    if new_protocol is not None and not P.same_protocol(new_protocol, target.snapshot.protocol):
        change.actions.insert(0, new_protocol)
    metrics["materializeSourceTimeMs"] = int((materialized - started) * 1000)
    metrics["scanTimeMs"] = int((scanned - materialized) * 1000)
    metrics["rewriteTimeMs"] = int((time.time() - scanned) * 1000)
    written = change.num_written_rows
    inserted_total = max(written - upd_total - change.num_copied_rows, 0)
    metrics["numTargetRowsInserted"] = inserted_total
    metrics["numTargetRowsCopied"] = change.num_copied_rows
    metrics["numOutputRows"] = written
    metrics["numTargetFilesAdded"] = change.num_added_files
    # files removed outright (rewritten, or left with no live row); a file that only takes a
    # deletion vector is not removed (Delta's numTargetFilesRemoved with deletion vectors)
    metrics["numTargetFilesRemoved"] = change.num_removed_files
    metrics["numTargetBytesAdded"] = change.num_added_bytes
    metrics["numTargetBytesRemoved"] = change.num_removed_bytes
    metrics["numTargetDeletionVectorsAdded"] = change.num_dv_files
    metrics["numTargetDeletionVectorsRemoved"] = change.num_dv_removed
    metrics["numTargetDeletionVectorsUpdated"] = change.num_dv_updated
    return dml.prepared(target, "MERGE", parameters, change, metrics, started,
                        updated=upd_total, deleted=del_total, inserted=inserted_total)
