"""Statement AST: small frozen dataclasses with declared fields and a source span.

The lark grammar (``isolde.lark``) owns statement shapes; every expression slot
(conditions, assignments, values, queries) is an :class:`Expr` or :class:`Query` holding
both the user's original text (never regenerated SQL) and the sqlglot tree.

Every node has ``span`` (keyword-only, excluded from equality) so golden dumps and
equality compare structure, while errors can still point at the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

import sqlglot.expressions as exp


@dataclass(frozen=True)
class Span:
    """Where a node came from: 0-based character offsets, 1-based line/column."""

    start: int
    end: int
    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class Node:
    span: Optional[Span] = field(default=None, compare=False, repr=False, kw_only=True)

    def children(self):
        for f in fields(self):
            if f.name == "span":
                continue
            yield f.name, getattr(self, f.name)

    def dump(self, indent: int = 0) -> str:
        """A stable, readable rendering used by the golden fixtures."""
        return _dump(self, indent)


def _dump(value: Any, indent: int) -> str:
    pad = "  " * indent
    if isinstance(value, Node):
        items = [(k, v) for k, v in value.children() if v not in (None, (), False, "")]
        if not items:
            return f"{type(value).__name__}()"
        inner = "\n".join(f"{pad}  {k}={_dump(v, indent + 1)}" for k, v in items)
        return f"{type(value).__name__}(\n{inner}\n{pad})"
    if isinstance(value, tuple):
        if not value:
            return "()"
        inner = "\n".join(f"{pad}  {_dump(v, indent + 1)}" for v in value)
        return f"[\n{inner}\n{pad}]"
    if isinstance(value, exp.Expression):
        return f"<{type(value).__name__}>"
    return repr(value)


# --------------------------------------------------------------------------- building blocks


@dataclass(frozen=True)
class Expr(Node):
    """An expression slot: the user's text plus sqlglot's tree of it."""

    sql: str
    tree: exp.Expression = field(compare=False)

    def __repr__(self) -> str:  # short, so AST reprs stay readable
        return f"Expr({self.sql!r})"


@dataclass(frozen=True)
class TableRef(Node):
    """A table: ``name`` / ``db.name`` (``parts``), or ``delta.`/path``` (``path``).

    ``version`` / ``timestamp`` carry ``VERSION AS OF n`` / ``TIMESTAMP AS OF expr``.
    """

    parts: tuple[str, ...] = ()
    path: Optional[str] = None
    version: Optional[int] = None
    timestamp: Optional[Expr] = None

    @property
    def name(self) -> str:
        return f"delta.`{self.path}`" if self.path is not None else ".".join(self.parts)


@dataclass(frozen=True)
class Query(Node):
    """A whole Spark SQL query (SELECT / WITH / set operation / VALUES), parsed by sqlglot.

    ``tables`` lists the table references found in it (with time travel), so the planner
    can bind each one to a snapshot without re-walking the tree.
    """

    sql: str
    tree: exp.Expression = field(compare=False)
    tables: tuple[TableRef, ...] = ()

    def __repr__(self) -> str:
        return f"Query({self.sql!r})"


@dataclass(frozen=True)
class Assignment(Node):
    """``col = expr`` in UPDATE/MERGE; ``column`` is the (possibly nested) column path."""

    column: tuple[str, ...]
    value: Expr


@dataclass(frozen=True)
class Property(Node):
    """A ``'key' = value`` pair of TBLPROPERTIES / OPTIONS (value is text, as Spark stores it)."""

    key: str
    value: Optional[str]


@dataclass(frozen=True)
class PartitionValue(Node):
    """One column of ``PARTITION (col = value, col2)``; ``value`` None means dynamic."""

    column: str
    value: Optional[Expr] = None


@dataclass(frozen=True)
class IdentitySpec(Node):
    always: bool
    start: int = 1
    increment: int = 1


@dataclass(frozen=True)
class ColumnDef(Node):
    name: str
    data_type: str
    nullable: bool = True
    identity: Optional[IdentitySpec] = None
    generated_as: Optional[Expr] = None
    default: Optional[Expr] = None
    comment: Optional[str] = None


# --------------------------------------------------------------------------- statements


@dataclass(frozen=True)
class Statement(Node):
    """Base of every statement. ``text`` is the statement's own source (no trailing ';')."""

    text: str = field(default="", compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class Select(Statement):
    query: Query


@dataclass(frozen=True)
class Insert(Statement):
    table: TableRef
    source: Query
    overwrite: bool = False
    partition: tuple[PartitionValue, ...] = ()
    columns: tuple[str, ...] = ()
    by_name: bool = False
    replace_where: Optional[Expr] = None


@dataclass(frozen=True)
class Update(Statement):
    table: TableRef
    assignments: tuple[Assignment, ...]
    alias: Optional[str] = None
    where: Optional[Expr] = None


@dataclass(frozen=True)
class Delete(Statement):
    table: TableRef
    alias: Optional[str] = None
    where: Optional[Expr] = None


# MERGE clauses: one class per WHEN kind, one per action.


@dataclass(frozen=True)
class UpdateAction(Node):
    """``UPDATE SET *`` (star=True) or ``UPDATE SET a = x, ...``."""

    assignments: tuple[Assignment, ...] = ()
    star: bool = False


@dataclass(frozen=True)
class DeleteAction(Node):
    pass


@dataclass(frozen=True)
class InsertAction(Node):
    """``INSERT *`` (star=True) or ``INSERT (cols) VALUES (exprs)``."""

    columns: tuple[str, ...] = ()
    values: tuple[Expr, ...] = ()
    star: bool = False


@dataclass(frozen=True)
class WhenMatched(Node):
    action: Any  # UpdateAction | DeleteAction
    condition: Optional[Expr] = None


@dataclass(frozen=True)
class WhenNotMatched(Node):
    """``WHEN NOT MATCHED [BY TARGET]``: rows of the source with no target match."""

    action: InsertAction
    condition: Optional[Expr] = None


@dataclass(frozen=True)
class WhenNotMatchedBySource(Node):
    action: Any  # UpdateAction (never star) | DeleteAction
    condition: Optional[Expr] = None


@dataclass(frozen=True)
class Merge(Statement):
    target: TableRef
    source: Any  # TableRef | Query
    on: Expr
    clauses: tuple[Any, ...]  # WhenMatched | WhenNotMatched | WhenNotMatchedBySource, in order
    target_alias: Optional[str] = None
    source_alias: Optional[str] = None
    schema_evolution: bool = False


@dataclass(frozen=True)
class CreateTable(Statement):
    """CREATE [OR REPLACE] TABLE [IF NOT EXISTS] / REPLACE TABLE (``replace`` without create)."""

    table: TableRef
    columns: tuple[ColumnDef, ...] = ()
    or_replace: bool = False
    replace: bool = False
    if_not_exists: bool = False
    using: Optional[str] = None
    partitioned_by: tuple[str, ...] = ()
    cluster_by: tuple[str, ...] = ()
    location: Optional[str] = None
    comment: Optional[str] = None
    properties: tuple[Property, ...] = ()
    query: Optional[Query] = None
    constraints: tuple[Any, ...] = ()  # reserved: table-level CHECK constraints


@dataclass(frozen=True)
class CloneTable(Statement):
    table: TableRef
    source: TableRef  # carries VERSION/TIMESTAMP AS OF
    shallow: bool = True
    or_replace: bool = False
    if_not_exists: bool = False
    location: Optional[str] = None
    properties: tuple[Property, ...] = ()


@dataclass(frozen=True)
class DropTable(Statement):
    table: TableRef
    if_exists: bool = False


@dataclass(frozen=True)
class CreateDatabase(Statement):
    name: str
    if_not_exists: bool = False
    location: Optional[str] = None
    comment: Optional[str] = None


@dataclass(frozen=True)
class DropDatabase(Statement):
    name: str
    if_exists: bool = False
    cascade: bool = False


@dataclass(frozen=True)
class Use(Statement):
    name: str


@dataclass(frozen=True)
class ShowTables(Statement):
    database: Optional[str] = None
    pattern: Optional[str] = None


@dataclass(frozen=True)
class ShowDatabases(Statement):
    """``SHOW DATABASES | SCHEMAS [[LIKE] 'pattern']``."""

    pattern: Optional[str] = None


@dataclass(frozen=True)
class ShowViews(Statement):
    database: Optional[str] = None
    pattern: Optional[str] = None


@dataclass(frozen=True)
class ShowColumns(Statement):
    """``SHOW COLUMNS {IN | FROM} t [{IN | FROM} db]``."""

    table: TableRef
    database: Optional[str] = None


@dataclass(frozen=True)
class ShowCreateTable(Statement):
    table: TableRef


@dataclass(frozen=True)
class CreateView(Statement):
    """``CREATE [OR REPLACE] [TEMP | TEMPORARY] VIEW [IF NOT EXISTS] v [(cols)] AS query``.

    ``columns`` renames the query's output columns (``column_comments`` aligned with them,
    None where a column has no comment)."""

    view: TableRef
    query: Query
    columns: tuple[str, ...] = ()
    column_comments: tuple[Optional[str], ...] = ()
    or_replace: bool = False
    temporary: bool = False
    if_not_exists: bool = False
    comment: Optional[str] = None
    properties: tuple[Property, ...] = ()


@dataclass(frozen=True)
class DropView(Statement):
    view: TableRef
    if_exists: bool = False


@dataclass(frozen=True)
class TruncateTable(Statement):
    table: TableRef
    partition: tuple[PartitionValue, ...] = ()  # parsed to be refused: Delta truncates whole tables


@dataclass(frozen=True)
class CreateTableLike(Statement):
    """``CREATE TABLE [IF NOT EXISTS] t LIKE src [USING delta] [TBLPROPERTIES] [LOCATION]``."""

    table: TableRef
    source: TableRef
    if_not_exists: bool = False
    using: Optional[str] = None
    location: Optional[str] = None
    properties: tuple[Property, ...] = ()


@dataclass(frozen=True)
class CopyInto(Statement):
    """Databricks' idempotent load: ``COPY INTO t FROM 'path' | (SELECT exprs FROM 'path')
    FILEFORMAT = fmt [FILES = (...) | PATTERN = 'glob'] [FORMAT_OPTIONS (...)]
    [COPY_OPTIONS (...)]``. ``select`` is the projection over the files (its FROM is the
    placeholder table ``__copy_source``), None for all columns."""

    table: TableRef
    source: str
    file_format: str
    select: Optional[Query] = None
    files: tuple[str, ...] = ()
    pattern: Optional[str] = None
    format_options: tuple[Property, ...] = ()
    copy_options: tuple[Property, ...] = ()


# ALTER TABLE: one statement class per action.


@dataclass(frozen=True)
class SetTblProperties(Statement):
    table: TableRef
    properties: tuple[Property, ...]


@dataclass(frozen=True)
class UnsetTblProperties(Statement):
    table: TableRef
    keys: tuple[str, ...]
    if_exists: bool = False


@dataclass(frozen=True)
class AddColumns(Statement):
    table: TableRef
    columns: tuple[ColumnDef, ...]


@dataclass(frozen=True)
class DropFeature(Statement):
    table: TableRef
    feature: str
    truncate_history: bool = False


@dataclass(frozen=True)
class AlterClusterBy(Statement):
    """``ALTER TABLE t CLUSTER BY (cols)``; ``columns`` empty means ``CLUSTER BY NONE``."""

    table: TableRef
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class SyncIdentity(Statement):
    table: TableRef
    column: str


@dataclass(frozen=True)
class AlterColumnType(Statement):
    """``ALTER TABLE t ALTER|CHANGE COLUMN path TYPE type`` (type widening), or Hive's
    ``CHANGE COLUMN path name type``; ``column`` is the path (``s.x``, ``arr.element``,
    ``m.value``), ``new_name`` the repeated name of the Hive form."""

    table: TableRef
    column: tuple[str, ...]
    data_type: str
    new_name: Optional[str] = None


@dataclass(frozen=True)
class RenameColumn(Statement):
    """``ALTER TABLE t RENAME COLUMN path TO name`` (column mapping tables: metadata only)."""

    table: TableRef
    column: tuple[str, ...]
    new_name: str


@dataclass(frozen=True)
class DropColumns(Statement):
    """``ALTER TABLE t DROP COLUMN[S] [IF EXISTS] a, s.b`` (column mapping tables: metadata only)."""

    table: TableRef
    columns: tuple[tuple[str, ...], ...]
    if_exists: bool = False


@dataclass(frozen=True)
class AddConstraint(Statement):
    table: TableRef
    name: str
    check: Expr


@dataclass(frozen=True)
class DropConstraint(Statement):
    table: TableRef
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class Optimize(Statement):
    table: TableRef  # a quoted path becomes TableRef(path=...)
    full: bool = False
    where: Optional[Expr] = None
    zorder_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reorg(Statement):
    """``REORG TABLE t [WHERE] APPLY (PURGE)`` or ``APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=n))``."""

    table: TableRef
    purge: bool = False
    where: Optional[Expr] = None
    iceberg_compat_version: Optional[int] = None


@dataclass(frozen=True)
class RepairTable(Statement):
    """``[MSCK] REPAIR TABLE t [SYNC METADATA | {ADD|DROP|SYNC} PARTITIONS]``: SYNC METADATA
    brings a UniForm table's Iceberg metadata up to date; the partition forms are Hive's."""

    table: TableRef
    sync_metadata: bool = False
    partitions: bool = False


@dataclass(frozen=True)
class Vacuum(Statement):
    table: TableRef
    retain_hours: Optional[float] = None
    dry_run: bool = False
    mode: Optional[str] = None  # 'LITE' | 'FULL'


@dataclass(frozen=True)
class Restore(Statement):
    table: TableRef
    version: Optional[int] = None
    timestamp: Optional[Expr] = None


@dataclass(frozen=True)
class DescribeHistory(Statement):
    table: TableRef
    limit: Optional[int] = None


@dataclass(frozen=True)
class DescribeDetail(Statement):
    table: TableRef


@dataclass(frozen=True)
class DescribeTable(Statement):
    table: TableRef
    extended: bool = False


@dataclass(frozen=True)
class ShowTblProperties(Statement):
    table: TableRef
    key: Optional[str] = None


@dataclass(frozen=True)
class ConvertToDelta(Statement):
    """``CONVERT TO DELTA parquet.`path` [NO STATISTICS] [PARTITIONED BY (col type, ...)]``."""

    table: TableRef  # TableRef(path=...) for parquet.`path`, or a name
    no_statistics: bool = False
    partitioned_by: tuple[ColumnDef, ...] = ()


@dataclass(frozen=True)
class SetConfig(Statement):
    """``SET key = value``; ``SET key`` shows one; bare ``SET`` (key None) lists all."""

    key: Optional[str] = None
    value: Optional[str] = None


@dataclass(frozen=True)
class ResetConfig(Statement):
    key: Optional[str] = None


@dataclass(frozen=True)
class BeginTransaction(Statement):
    """``BEGIN [TRANSACTION]``: later statements commit together at COMMIT."""


@dataclass(frozen=True)
class CommitTransaction(Statement):
    """``COMMIT [TRANSACTION]``."""


@dataclass(frozen=True)
class RollbackTransaction(Statement):
    """``ROLLBACK [TRANSACTION]``."""


@dataclass(frozen=True)
class AtomicBlock(Statement):
    """``BEGIN ATOMIC <statements> END``: all of them commit at END, or none."""

    statements: tuple = ()


@dataclass(frozen=True)
class Explain(Statement):
    statement: Statement
    mode: Optional[str] = None  # EXTENDED | FORMATTED | ... (kept as written, upper-cased)
