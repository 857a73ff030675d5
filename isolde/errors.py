"""The isolde error hierarchy, grouped by pipeline phase (parse / analysis / execution /
concurrency / internal), as DESIGN.md section 2 specifies.

Every error carries an ``error_class`` (Delta/Spark style, e.g. ``DELTA_CONCURRENT_APPEND``)
and a ``sqlstate`` so callers can branch on something more stable than the message.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence


class IsoldeError(Exception):
    """Root of every error isolde raises on purpose."""

    error_class: str = "ISOLDE_ERROR"
    sqlstate: str = "XX000"

    def __init__(self, message: str, *, error_class: str | None = None, sqlstate: str | None = None):
        super().__init__(message)
        self.message = message
        if error_class is not None:
            self.error_class = error_class
        if sqlstate is not None:
            self.sqlstate = sqlstate

    def __str__(self) -> str:
        return self.message


# --------------------------------------------------------------------------- parse phase


class ParseError(IsoldeError):
    """A syntax error, with the position and a caret excerpt of the failing token; or a
    statement over one of the parser's limits (STATEMENT_TOO_LONG / _COMPLEX), said as such."""

    error_class = "PARSE_SYNTAX_ERROR"
    sqlstate = "42601"

    #: how the message starts, by error class: a statement over a limit is not a syntax error
    HEADLINES = {"STATEMENT_TOO_LONG": "Statement too long", "STATEMENT_TOO_COMPLEX": "Statement too complex"}

    def __init__(
        self,
        description: str,
        *,
        line: int,
        column: int,
        token: str | None = None,
        expected: Sequence[str] = (),
        excerpt: str = "",
        statement_line: int | None = None,
        error_class: str | None = None,
        sqlstate: str | None = None,
    ):
        self.description = description
        self.line = line
        self.column = column
        self.token = token
        self.expected = tuple(expected)
        self.excerpt = excerpt
        self.statement_line = statement_line
        headline = self.HEADLINES.get(error_class or self.error_class, "Syntax error")
        head = f"{headline} at line {line}, column {column}: {description}"
        body = f"\n{excerpt}" if excerpt else ""
        super().__init__(head + body, error_class=error_class, sqlstate=sqlstate)

    @property
    def headline(self) -> str:
        return self.HEADLINES.get(self.error_class, "Syntax error")


def caret_excerpt(text: str, line: int, column: int, width: int = 1) -> str:
    """Two lines: the source line (1-based ``line``) and a caret under ``column`` (1-based)."""
    lines = text.splitlines() or [""]
    index = min(max(line, 1), len(lines)) - 1
    source = lines[index].expandtabs(1)
    gutter = f"{line} | "
    caret = " " * (len(gutter) + max(column - 1, 0)) + "^" * max(width, 1)
    return f"{gutter}{source}\n{caret}"


# --------------------------------------------------------------------------- analysis phase


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """' Did you mean `x`?' for the nearest candidate, or '' when nothing is near."""
    pool = list(dict.fromkeys(candidates))
    lowered = {c.lower(): c for c in pool}
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return f" Did you mean `{lowered[match[0]]}`?" if match else ""


class AnalysisError(IsoldeError):
    """The statement parses but cannot be planned: unknown names, type errors, bad options."""

    error_class = "ANALYSIS_ERROR"
    sqlstate = "42000"


class TableNotFoundError(AnalysisError):
    error_class = "TABLE_OR_VIEW_NOT_FOUND"
    sqlstate = "42P01"

    def __init__(self, table: str, candidates: Iterable[str] = ()):
        self.table = table
        super().__init__(f"Table or view `{table}` cannot be found.{did_you_mean(table, candidates)}")


class TableAlreadyExistsError(AnalysisError):
    error_class = "TABLE_OR_VIEW_ALREADY_EXISTS"
    sqlstate = "42P07"

    def __init__(self, table: str):
        self.table = table
        super().__init__(f"Cannot create table `{table}`: it already exists. Use IF NOT EXISTS or CREATE OR REPLACE.")


class ColumnNotFoundError(AnalysisError):
    error_class = "UNRESOLVED_COLUMN"
    sqlstate = "42703"

    def __init__(self, column: str, table: str | None = None, candidates: Iterable[str] = ()):
        self.column = column
        self.table = table
        where = f" in table `{table}`" if table else ""
        super().__init__(f"Column `{column}` cannot be resolved{where}.{did_you_mean(column, candidates)}")


class DatabaseNotFoundError(AnalysisError):
    error_class = "SCHEMA_NOT_FOUND"
    sqlstate = "42704"

    def __init__(self, database: str, candidates: Iterable[str] = ()):
        self.database = database
        super().__init__(f"Database `{database}` cannot be found.{did_you_mean(database, candidates)}")


class InvalidPropertyError(AnalysisError):
    error_class = "DELTA_INVALID_TABLE_PROPERTY"
    sqlstate = "42616"


# --------------------------------------------------------------------------- execution phase


class TransactionStateError(AnalysisError):
    """A statement that cannot run in the current transaction state: DDL inside a transaction,
    COMMIT without BEGIN, a second table written by one transaction. Nothing was run."""

    error_class = "INVALID_TRANSACTION_STATE"
    sqlstate = "25000"


class ExecutionError(IsoldeError):
    """The statement was planned but running it failed; the table is unchanged."""

    error_class = "EXECUTION_ERROR"
    sqlstate = "58000"


class ConstraintViolationError(ExecutionError):
    error_class = "DELTA_VIOLATE_CONSTRAINT_WITH_VALUES"
    sqlstate = "23001"


class NotNullViolationError(ConstraintViolationError):
    error_class = "DELTA_NOT_NULL_CONSTRAINT_VIOLATED"
    sqlstate = "23502"


class StoreAssignmentError(ExecutionError):
    """A value cannot be stored in its column: a number that does not fit
    (CAST_OVERFLOW_IN_TABLE_INSERT, DELTA_CAST_OVERFLOW_IN_TABLE_WRITE) or a malformed string
    (CAST_INVALID_INPUT). Delta's ANSI store assignment, whatever ``spark.sql.ansi.enabled``
    says; nothing was written."""

    error_class = "DELTA_CAST_OVERFLOW_IN_TABLE_WRITE"
    sqlstate = "22003"


class StagedFileMissingError(ExecutionError):
    """A write's staged data file or deletion vector is gone before its commit (deleted by a
    VACUUM with a shortened retention, or by hand): nothing was committed."""

    error_class = "DELTA_FILE_NOT_FOUND_DETAILED"
    sqlstate = "42K03"


class MergeCardinalityError(ExecutionError):
    error_class = "DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE"
    sqlstate = "21506"


class UnsupportedFeatureError(ExecutionError):
    """The table needs a reader or writer feature isolde does not implement."""

    error_class = "DELTA_UNSUPPORTED_FEATURES_FOR_READ"
    sqlstate = "56038"


class VersionNotFoundError(ExecutionError):
    error_class = "DELTA_VERSION_NOT_FOUND"
    sqlstate = "22003"


class InternalError(IsoldeError):
    """A bug in isolde: please report it with the statement."""

    error_class = "INTERNAL_ERROR"
    sqlstate = "XX000"


# --------------------------------------------------------------------------- concurrency


@dataclass(frozen=True)
class ConflictFacts:
    """What the conflict checker knows about the table and the winning commit, so the advice
    fits the case. ``None`` means unknown: no advice is built on an unknown fact.

    ``partition_columns``  the table's partition columns (``()``: unpartitioned)
    ``winner_blind_append`` the winning commit only appended and read nothing
    ``isolation_level``    the table's isolation level this transaction was checked at (None
                           when the transaction itself forced the level, e.g. a metadata change)
    ``row_level_setting``  the table has deletion vectors but its conflicts are checked per
                           file: the ``isolde.rowLevelConcurrency`` value that would check them
                           per row ('auto' or 'always'); None when that does not apply
    """

    partition_columns: Optional[tuple] = None
    winner_blind_append: Optional[bool] = None
    isolation_level: Optional[str] = None
    row_level_setting: Optional[str] = None


RETRY = "Please try the operation again."


class ConcurrentModificationException(IsoldeError):
    """A concurrent commit won the race in a way this transaction cannot be rebased over.

    ``winning_version`` / ``winning_operation`` name the commit that won; ``partition``
    is a hint of where the conflict was found, when one applies. ``facts`` (ConflictFacts)
    is what the checker knew of the table and the winner; ``hints`` are the sentences of
    advice built from them, and ``advice`` is "Please try the operation again." followed
    by the hints.
    """

    error_class = "DELTA_CONCURRENT_MODIFICATION"
    sqlstate = "2D521"
    what = "A concurrent transaction conflicted with this one."
    advice = RETRY

    def __init__(
        self,
        message: str | None = None,
        *,
        table: str | None = None,
        winning_version: int | None = None,
        winning_operation: str | None = None,
        partition: str | None = None,
        detail: str | None = None,
        facts: ConflictFacts | None = None,
    ):
        self.table = table
        self.winning_version = winning_version
        self.winning_operation = winning_operation
        self.partition = partition
        self.detail = detail
        self.facts = facts or ConflictFacts()
        self.hints = tuple(self.advise(self.facts))
        self.advice = " ".join((RETRY, *self.hints))
        super().__init__(message or self._render())

    def advise(self, facts: ConflictFacts) -> list[str]:
        """Sentences of advice that hold for ``facts`` (beyond trying again)."""
        return []

    def _render(self) -> str:
        name = type(self).__name__
        parts = [f"{name}: {self.what.format(partition=self.partition or 'the table')}"]
        if self.winning_version is not None or self.winning_operation:
            op = self.winning_operation or "transaction"
            at = f" at version {self.winning_version}" if self.winning_version is not None else ""
            parts.append(f"Conflicting commit: {op}{at}.")
        if self.table:
            parts.append(f"Table: {self.table}.")
        if self.detail:
            parts.append(self.detail)
        parts.append(self.advice)
        return " ".join(parts)


def _row_level_hint(facts: ConflictFacts) -> list[str]:
    """The setting that would check this table's conflicts per row, where it keeps them per file:
    two statements changing different rows of one file then both commit."""
    if not facts.row_level_setting:
        return []
    return [f"Conflicts on this table are checked per file: with SET TBLPROPERTIES "
            f"('isolde.rowLevelConcurrency' = '{facts.row_level_setting}') (it has deletion vectors) they "
            f"would be checked per row, and statements that change different rows of one file would both commit."]


class ConcurrentAppendException(ConcurrentModificationException):
    error_class = "DELTA_CONCURRENT_APPEND"
    what = "Files were added to {partition} by a concurrent update."

    def advise(self, facts: ConflictFacts) -> list[str]:
        hints = []
        if facts.winner_blind_append and facts.isolation_level == "Serializable":
            hints.append("The winning commit was a blind append: under WriteSerializable isolation "
                         "(delta.isolationLevel) it would not conflict.")
        if facts.partition_columns:
            hints.append(f"To avoid the conflict, make the operation's condition select partitions "
                         f"(by {', '.join(facts.partition_columns)}) that concurrent writers do not write.")
        return hints + _row_level_hint(facts)


class ConcurrentDeleteReadException(ConcurrentModificationException):
    error_class = "DELTA_CONCURRENT_DELETE_READ"
    what = "This transaction attempted to read one or more files that were deleted by a concurrent update (in {partition})."

    def advise(self, facts: ConflictFacts) -> list[str]:
        return _row_level_hint(facts)


class ConcurrentDeleteDeleteException(ConcurrentModificationException):
    error_class = "DELTA_CONCURRENT_DELETE_DELETE"
    what = "This transaction attempted to delete one or more files that were deleted by a concurrent update (in {partition})."

    def advise(self, facts: ConflictFacts) -> list[str]:
        return _row_level_hint(facts)


class MetadataChangedException(ConcurrentModificationException):
    error_class = "DELTA_METADATA_CHANGED"
    what = "The metadata of the Delta table has been changed by a concurrent update."


class ConcurrentTransactionException(ConcurrentModificationException):
    error_class = "DELTA_CONCURRENT_TRANSACTION"
    what = (
        "A concurrent transaction committed for the same application id; two streams or jobs "
        "must never share an application id (checkpoint location)."
    )


class ProtocolChangedException(ConcurrentModificationException):
    error_class = "DELTA_PROTOCOL_CHANGED"
    what = (
        "The protocol version of the Delta table has been changed by a concurrent update "
        "(or several writers created the table at the same time)."
    )


class ConcurrentWriteException(ConcurrentModificationException):
    error_class = "DELTA_CONCURRENT_WRITE"
    what = "The transaction ran out of commit attempts while concurrent writers kept winning."


CONFLICT_EXCEPTIONS = (
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException,
    MetadataChangedException,
    ConcurrentTransactionException,
    ProtocolChangedException,
)

__all__ = [name for name, value in globals().items() if isinstance(value, type) and issubclass(value, Exception)] + [
    "ConflictFacts",
    "caret_excerpt",
    "did_you_mean",
    "CONFLICT_EXCEPTIONS",
]
