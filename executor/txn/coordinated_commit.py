"""Several tables' commits decided as one: a multi-table transaction's COMMIT.

Each table's commit is an ordinary OptimisticTransaction (its reads, its conflict checks, its
row-level rebase); here they are driven together. Every attempt builds each table's body at its
next version and asks the coordinator to decide all of them as one entry
(executor/log/coordinator.py). When a table's version was taken meanwhile, every table catches
up on its winners (raising the named conflict if one conflicts) and the next attempt is made;
a decided entry is published to every table, by this writer or by whoever comes next.
"""

from __future__ import annotations

from typing import Callable, Optional

from isolde.errors import InternalError

from ..log.coordinator import CoordinatedCommit, Coordinator, VersionTaken


def coordinator_of(txns: list) -> Optional[Coordinator]:
    """The coordinator every one of ``txns`` commits through; None when none does."""
    coordinators = {id(c): c for c in (txn.coordinator for txn in txns)}
    if len(coordinators) > 1 or (len(txns) > 1 and None in (txn.coordinator for txn in txns)):
        raise InternalError("The tables of one commit must share one commit coordinator.")
    return next(iter(coordinators.values()))


def commit_together(coordinator: Coordinator, prepared: list, validate: Optional[Callable[[], None]] = None) -> dict:
    """Commit each ``(table, txn, actions, operation, parameters, metrics)`` of ``prepared`` in
    one coordinator entry; returns ``{table path: version}``. ``validate`` runs right before each
    decision (the transaction's read-only tables)."""
    txns, attempts = [], []
    for table, txn, actions, operation, parameters, metrics in prepared:
        txn.begin_commit(actions, operation, parameters, metrics=metrics)
        txns.append(txn)
    try:
        while True:
            attempts = [(txn, *txn.next_attempt()) for txn in txns]
            try:
                coordinator.decide([CoordinatedCommit(txn.log.log_path, version, body)
                                    for txn, version, body in attempts], validate)
                break
            except VersionTaken:
                for txn in txns:
                    txn.catch_up()
    except BaseException:
        if attempts and attempts[0][0].landed(attempts[0][1]):  # decided before the error: it stands
            for txn, version, _ in attempts:
                txn.finish_commit(version)
        else:
            for txn in txns:
                txn.discard_rebased_files()
        raise
    for txn, version, _ in attempts:
        txn.finish_commit(version)
    return {txn.log.table_path: version for txn, version, _ in attempts}
