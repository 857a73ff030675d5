"""The route a DML statement takes, decided in one place: a table of rules per decision.

Each table is read top to bottom; the first rule whose condition holds names the route to try
(``choose``). The call sites (``dml._run_update_delete``, ``dml.apply_changes``,
``jobs/merge._run``, ``id_sets.membership_sql``) ask here, then run that route. A route on the
driver is tried, not promised: it brings at most its bound to the driver and gives up past it
(a key not unique in the target, an UPDATE whose condition selects more rows than its small
files suggested, a type Arrow does not carry back exactly). Those fall-backs happen where the
route runs, at run time:

    FIND, UPDATE     point -> bounded -> spark   (``collect_few``, then ``collect_changed``, None)
    FIND, DELETE     bounded -> spark            (``collect_positions`` None)
    FIND, MERGE      point -> spark; bounded -> spark   (a MERGE's point miss goes to Spark)
    PASS1_SOURCE     inline -> joined            (``lateral_view`` None: a value not written here)
    MATCHED_IDS      bitmap -> join              (``membership_sql`` None past BITMAP_MAX_BYTES)
    the writer       driver -> Spark's writer    (``driver_write``: past its bound, or a table
                                                  pyarrow does not write as Spark does)

The row-level or file-level conflict scope is the planner's (it cannot import the executor):
``planner.scope.file_level_reason`` (deletion vectors on; ``isolde.rowLevelConcurrency`` auto:
no partition columns or CLUSTER BY, always: any, off: never), and the statement's conditions
analysable; ``txn.statement_scope.record_scope`` turns the transaction's check per row then.

Every threshold that chooses a route is here, with the measurement that set it (the sessions
of docs/DECISIONS.md have the figures); tests monkeypatch them here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

# --------------------------------------------------------------------------- thresholds

# MERGE source rows whose pairs a point MERGE brings to the driver (``few_rows.collect_few``):
# a point MERGE's checkpoint was ~120-145 ms of a ~0.6 s statement; p50 0.465 -> 0.365 s
FEW_ROWS = 1000
# an UPDATE tries the point route when its candidate files hold at most this many rows, so a try
# that finds more than FEW_ROWS costs at most one scan of small files (point UPDATE p50 0.319 -> 0.265 s)
SMALL_SCAN_ROWS = 250_000
# a point job over files of at most this many rows runs without generated code: 2-3 classes
# compiled per point statement cost 20-85 ms (point UPDATE p50 0.298 -> 0.274 s, MERGE 0.468 -> 0.409 s)
INTERPRETED_ROWS = 131_072
# (file, row) pairs a DELETE brings to the driver (~26 MB of Arrow): DELETE of 0.1% of 10M rows
# 0.88 -> 0.70 s against Spark's bitmap aggregate behind a shuffle; past it that aggregate is better
POSITION_ROWS = 262_144
# rows of a local relation the driver writes with pyarrow (no Spark write job): a point MERGE's
# write ~150 ms -> ~45 ms; bounds what the driver holds
DRIVER_WRITE_ROWS = 1000
# changed rows a statement computes into Arrow and writes on the driver, at most this many rows
# and bytes by their types' sizes: 50M-row UPDATE of 500k rows (~72 MB) 6.95-9.23 -> 5.83-5.93 s
# (raised from 262,144 rows / 64 MB); the driver holds at most COUNTED_BYTES of them
COUNTED_ROWS = 1 << 20
COUNTED_BYTES = 128 << 20
# a point MERGE's local source written as literals beside each kept target row (no broadcast
# job); each kept target row is compared with every one, so at most this many
INLINE_ROWS = 8
# a MERGE's matched source ids tested as ``IN (...)`` up to this many, a bitmap literal beyond:
# the upsert of 100k rows one job less, its write 0.444 -> 0.358 s
IN_LIST_IDS = 256
# ... and past this many bytes of bitmap (4M source rows) the broadcast anti join: bounds the plan's literal
BITMAP_MAX_BYTES = 512 << 10
# a MERGE source of at most this many rows is broadcast, a bigger one shuffled; bounds the
# executors' memory (a broadcast is held whole by every task)
BROADCAST_ROWS = 500_000
# from this many matched source rows on, each partition's rewrite broadcasts only the rows that
# matched it (one more materialisation, ~0.3 s; below it the whole source is a small broadcast)
SPLIT_SOURCE_ROWS = 20_000
# ... over at most this many touched files (a literal map tells each pair its partition)
SPLIT_SOURCE_MAX_FILES = 2000
# a source Spark holds on the driver (VALUES, a small local DataFrame) of at most this many rows
# is taken as it is, row ids added on the driver: a point upsert 12 Spark jobs -> 4
LOCAL_SOURCE_ROWS = 10_000
# a copy-on-write rewrite of at most this many partitions holding GROUP_MIN_BYTES each on average
# writes a job per partition (no partitionBy sort): 10M rows / 10 partitions (30 MB each) UPDATE
# 24.6 -> 17.9 s; a job costs ~0.3-0.5 s on 2 cores, so at 1M rows (6 MB) it was slower
MAX_GROUP_JOBS = 64
GROUP_MIN_BYTES = 16 << 20
# each row's file is a literal map lookup up to this many files, a broadcast join on the path
# past it: keyed by size the map and the join cross near 100 files (10M rows in 1,230 files)
MAP_LOOKUP_MAX_FILES = 48
# deletion vectors applied as a bit test on dense words up to this many bytes of words (10M
# rows, 100k deleted: bitmaps 0.93 s, anti join 1.73 s); past it a sparse vector takes the anti join
DV_BITMAP_MAX_BYTES = 64 << 20
# up to this many deleted rows (all files of a scan) tested as literals: no broadcast, so
# point statements run one job fewer
DV_INLINE_MAX_ROWS = 128
# ``scan_by_partition`` reads up to this many files as one scan, a task per file (when that makes
# no more tasks than a union of one scan per partition, whose splits pack small files)
ONE_SCAN_MAX_FILES = 64

# --------------------------------------------------------------------------- routes

POINT, BOUNDED, SPARK = "point", "bounded", "spark"  # few_rows / bounded_rows / Spark's route
DV, REWRITE = "dv", "rewrite"
INLINE, JOINED = "inline", "joined"
BROADCAST, SHUFFLE = "broadcast", "shuffle"
IN_LIST, BITMAP = "in_list", "bitmap"
UPDATE, DELETE, MERGE = "UPDATE", "DELETE", "MERGE"


@dataclass(frozen=True)
class Statement:
    """What is known of a DML statement when its route is chosen."""

    kind: Optional[str] = None  # UPDATE, DELETE or MERGE
    deletion_vectors: bool = False  # the table writes deletion vectors (MODE)
    deterministic: bool = True  # no rand(), current_timestamp(), ... in its condition or values
    file_rows: Optional[int] = None  # the candidate files' rows by their statistics; None: unknown
    source_rows: int = 0  # MERGE: the source's rows
    matched: bool = False  # MERGE: a WHEN MATCHED clause
    by_source: bool = False  # MERGE: a WHEN NOT MATCHED BY SOURCE clause
    local_source: bool = False  # MERGE: the source is a local relation on the driver
    key_filtered: bool = False  # MERGE: its source keys filter the target's scan (target_key_filter)
    plain_on: bool = False  # MERGE: ON means the same as a WHERE (inline_source.plain)


class Rule(NamedTuple):
    route: str
    when: Callable[[Any], bool]
    why: str


def _always(_) -> bool:
    return True


def _pairs_on_driver(s: Statement) -> bool:
    """A MERGE whose pairs are its matched target rows: inner join, a clause acts on them."""
    return s.kind == MERGE and s.matched and not s.by_source


#: per touched file: its changed rows' positions into its deletion vector, or the file rewritten
MODE = (
    Rule(DV, lambda s: s.deletion_vectors, "delta.enableDeletionVectors and the feature: Delta's rule"),
    Rule(REWRITE, _always, "copy-on-write: the file's surviving rows go to new files"),
)

#: how an UPDATE / DELETE / MERGE finds its changed rows (and their positions)
FIND = (
    Rule(SPARK, lambda s: not s.deletion_vectors,
         "copy-on-write: Spark counts the changed rows per file, the files are rewritten whole"),
    Rule(SPARK, lambda s: s.kind != MERGE and not s.deterministic,
         "a non-deterministic condition is evaluated once over every row and checkpointed"),
    Rule(POINT, lambda s: s.kind == UPDATE and s.file_rows is not None and s.file_rows <= SMALL_SCAN_ROWS,
         "small candidate files: a try that finds more than FEW_ROWS costs one small scan"),
    Rule(BOUNDED, lambda s: s.kind in (UPDATE, DELETE),
         "one job brings the rows as written (a DELETE: its positions) up to their bound, no shuffle"),
    Rule(POINT, lambda s: _pairs_on_driver(s) and s.source_rows <= FEW_ROWS,
         "a few source rows pair with few target rows: pass 1 once into Arrow, no checkpoint"),
    Rule(BOUNDED, lambda s: _pairs_on_driver(s) and s.source_rows <= COUNTED_ROWS,
         "the pairs with the updated rows as written, in one job, up to what the driver writes"),
    Rule(SPARK, _always, "a lazy checkpoint, the deletion vectors' bitmaps built in Spark"),
)

#: a deletion-vector MERGE's pass 1: its source as literals beside each target row, or joined
PASS1_SOURCE = (
    Rule(INLINE, lambda s: (s.kind == MERGE and s.deletion_vectors and not s.by_source and s.key_filtered
                            and s.local_source and s.source_rows <= INLINE_ROWS and s.plain_on),
         "a broadcast of a local relation still runs a job: the point MERGE's second"),
    Rule(JOINED, _always, "the join SOURCE_JOIN chooses"),
)

#: how a MERGE joins its source with the target
SOURCE_JOIN = (
    Rule(BROADCAST, lambda s: s.source_rows <= BROADCAST_ROWS, "a small source: no shuffle of the target"),
    Rule(SHUFFLE, _always, "a source too big to hold in every task: a shuffled hash join"),
)

#: how a MERGE's inserts test the matched source ids (the facts: how many ids)
MATCHED_IDS = (
    Rule(IN_LIST, lambda n: n <= IN_LIST_IDS, "Spark turns the list into a hash set"),
    Rule(BITMAP, _always, "a bit per source row in one binary literal (a join past BITMAP_MAX_BYTES)"),
)


def choose(rules, facts) -> str:
    """The route of the first rule whose condition ``facts`` meet."""
    for rule in rules:
        if rule.when(facts):
            return rule.route
    raise AssertionError("a table of routes ends with a rule that always holds")


def choose_mode(deletion_vectors: bool) -> str:
    """DV or REWRITE for a touched file of a table with or without deletion vectors (MODE)."""
    return choose(MODE, Statement(deletion_vectors=deletion_vectors))


def file_rows(files) -> Optional[int]:
    """The rows the files (AddFiles) hold by their statistics; None when a file has none."""
    total = 0
    for add in files:
        if add.num_records is None:
            return None
        total += add.num_records
    return total


def interpreted(files) -> bool:
    """Does a job over these files (AddFiles) run without generated code (INTERPRETED_ROWS)?"""
    rows = file_rows(files)
    return rows is not None and rows <= INTERPRETED_ROWS


def counted_limit(row_bytes: int) -> int:
    """The most changed rows of ``row_bytes`` each (in Arrow) the driver is brought and writes."""
    return min(COUNTED_ROWS, COUNTED_BYTES // max(row_bytes, 1))


def driver_writes(rows: int, row_bytes: int) -> bool:
    """Does the driver write ``rows`` counted rows of ``row_bytes`` each (COUNTED_ROWS, COUNTED_BYTES)?"""
    return rows <= COUNTED_ROWS and rows * row_bytes <= COUNTED_BYTES


def jobs_per_partition(partitions: int, size: int) -> bool:
    """Does a copy-on-write rewrite of ``size`` bytes over ``partitions`` partitions write a job
    per partition (MAX_GROUP_JOBS, GROUP_MIN_BYTES), not one sorted partitionBy write?"""
    return partitions <= MAX_GROUP_JOBS and size >= GROUP_MIN_BYTES * partitions
