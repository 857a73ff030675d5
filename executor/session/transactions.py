"""A session's multi-statement transaction: BEGIN / COMMIT / ROLLBACK, BEGIN ATOMIC ... END, and
the library's ``with s.transaction() as tx:`` (executor/txn/multi_statement.py holds the
semantics; this module holds the session's side of it).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional

from isolde.errors import ConcurrentModificationException, TransactionStateError

from ..txn.multi_statement import OPERATION, MultiStatementTransaction, summed_metrics
from .results import CommitResult, QueryResult


def query_scope(stmt):
    """What a query inside a transaction read of one table it touched, as the planner's
    ConflictScope (the WHERE of a simple ``SELECT ... FROM t WHERE ...``, as an INSERT's read of
    its target is scoped), or None when that cannot be said (the caller then counts the whole
    table as read)."""

    def scope(table):
        from isolde.grammar import ast
        from isolde.planner.scope import conflict_scope

        from ..catalog import schema as S
        from ..txn.statement_scope import scope_flags
        from .session import _ref_from_name

        query = getattr(stmt, "query", None)
        if query is None:
            return None
        try:
            snap = table.staged.pinned
            struct = S.metadata_schema(snap.metadata)
            return conflict_scope(ast.Insert(table=_ref_from_name(table.name), source=query),
                                  [(f.name, f.dataType) for f in struct.fields], S.partition_columns(snap.metadata),
                                  **scope_flags(snap))
        except Exception:  # not analysable: the whole table counts as read
            return None

    return scope


def begin(session, *, atomic: bool = False) -> MultiStatementTransaction:
    if session.active_transaction is not None:
        raise TransactionStateError(
            "A transaction is already open: transactions do not nest. COMMIT or ROLLBACK it first.",
            error_class="TRANSACTION_ALREADY_OPEN")
    session.active_transaction = MultiStatementTransaction(atomic=atomic)
    return session.active_transaction


def _open(session, verb: str) -> MultiStatementTransaction:
    txn = session.active_transaction
    if txn is None:
        raise TransactionStateError(f"{verb} without a transaction: start one with BEGIN.",
                                    error_class="NO_ACTIVE_TRANSACTION")
    return txn


@dataclasses.dataclass(frozen=True)
class MultiTableCommitResult(CommitResult):
    """A transaction committed to several tables: one coordinator entry, a version per table
    (``versions``: {table: version}; ``version`` is None), the summed metrics."""

    versions: dict = dataclasses.field(default_factory=dict)
    operations: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class PreparedTransaction:
    """A transaction whose statements ran and whose net commit is built, not yet committed;
    ``commit()`` commits it (or raises the named conflict, and the transaction is rolled back),
    ``abort()`` rolls it back."""

    session: object
    transaction: MultiStatementTransaction
    prepared: Optional[tuple]

    @property
    def table(self) -> Optional[str]:
        """The written table's name (several: joined by commas)."""
        if not self.prepared:
            return None
        parts = self.prepared if isinstance(self.prepared, list) else [self.prepared]
        return ", ".join(part[0].name for part in parts)

    def commit(self) -> CommitResult:
        txn, started = self.transaction, time.perf_counter()
        if self.session.active_transaction is txn:
            self.session.active_transaction = None
        try:
            version = txn.commit(self.prepared)
        except ConcurrentModificationException as e:
            e.message = f"{e.message} The whole transaction was rolled back; run it again."
            e.args = (e.message,)
            raise
        if self.prepared is None:  # only reads: one consistent snapshot, nothing to write
            result = CommitResult(version=None, operation="COMMIT", metrics={})
        elif isinstance(self.prepared, list):  # several tables, one coordinator entry
            operations = {part[0].name: part[3] for part in self.prepared}
            result = MultiTableCommitResult(version=None, operation=OPERATION, table=self.table, versions=version,
                                            operations=operations,
                                            metrics=summed_metrics([part[5] for part in self.prepared]))
        else:
            table, _, _, operation, _, metrics = self.prepared
            result = CommitResult(version=version, operation=operation, metrics=metrics, table=table.name)
        return dataclasses.replace(result, elapsed_s=time.perf_counter() - started)

    def abort(self) -> None:
        self._end("rolled back")

    def _end(self, state: str) -> None:
        if self.session.active_transaction is self.transaction:
            self.session.active_transaction = None
        if self.transaction.state == "open":
            self.transaction.finish(state)


def prepare(session) -> PreparedTransaction:
    txn = _open(session, "COMMIT")
    if txn.state == "aborted":  # as PostgreSQL's COMMIT of an aborted transaction: a rollback
        session.active_transaction = None
        txn.finish("rolled back")
        raise TransactionStateError(
            f"COMMIT of a transaction an error aborted ({txn.aborted_by}): it was rolled back, nothing was "
            "committed.", error_class="TRANSACTION_ABORTED")
    from .context import ExecutionContext

    ctx = ExecutionContext(session, None)
    try:
        prepared = txn.prepare(lambda log, snapshot: ctx.start_transaction(log, snapshot))
    except BaseException:
        session.active_transaction = None
        txn.finish("rolled back")
        raise
    return PreparedTransaction(session, txn, prepared)


def commit(session) -> CommitResult:
    return prepare(session).commit()


def rollback(session) -> QueryResult:
    txn = session.active_transaction
    if txn is None:  # as in Databricks: not an error
        return QueryResult(message="No transaction is open: nothing to roll back")
    session.active_transaction = None
    txn.finish("rolled back")
    tables = ", ".join(t.name for t in txn.tables.values() if t.written)
    return QueryResult(message=f"Rolled back{' (nothing of ' + tables + ' was committed)' if tables else ''}")


def roll_back_open(session, why: str) -> Optional[str]:
    """Roll back a transaction left open (a script ended, the REPL closed); the sentence to show."""
    txn = session.active_transaction
    if txn is None:
        return None
    tables = txn.written_tables
    rollback(session)
    return (f"A transaction was still open when {why}: it was rolled back"
            + (f"; nothing it wrote to {', '.join(tables)} was committed." if tables else "."))


class Transaction:
    """``with s.transaction() as tx: tx.execute(...)``: commits when the block ends, rolls back
    when it raises. ``tx.prepare()`` builds the commit without making it (two-phase tests)."""

    def __init__(self, session):
        self.session = session
        self.transaction = begin(session)
        self.result: Optional[CommitResult] = None

    def execute(self, stmt):
        self._check_open()
        return self.session.execute(stmt)

    def sql(self, query):
        self._check_open()
        return self.session.sql(query)

    def prepare(self) -> PreparedTransaction:
        self._check_open()
        return prepare(self.session)

    def commit(self) -> CommitResult:
        self._check_open()
        self.result = commit(self.session)
        return self.result

    def rollback(self) -> None:
        if self.session.active_transaction is self.transaction:
            rollback(self.session)

    @property
    def open(self) -> bool:
        return self.session.active_transaction is self.transaction

    def _check_open(self) -> None:
        if not self.open:
            raise TransactionStateError(f"This transaction is {self.transaction.state}.",
                                        error_class="TRANSACTION_ENDED")

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self.rollback()
            return False
        if self.open:
            self.commit()
        return False
