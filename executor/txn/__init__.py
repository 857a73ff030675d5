"""Optimistic transactions and the conflict checker. Never imports Spark."""

from .conflicts import (
    SERIALIZABLE,
    SNAPSHOT_ISOLATION,
    WRITE_SERIALIZABLE,
    ConflictChecker,
    TransactionSummary,
    WinningCommitSummary,
)
from .predicates import Predicate, file_may_match, prune_files, split_partition_predicate
from .transaction import OptimisticTransaction

__all__ = [
    "SERIALIZABLE",
    "SNAPSHOT_ISOLATION",
    "WRITE_SERIALIZABLE",
    "ConflictChecker",
    "OptimisticTransaction",
    "Predicate",
    "TransactionSummary",
    "WinningCommitSummary",
    "file_may_match",
    "prune_files",
    "split_partition_predicate",
]
