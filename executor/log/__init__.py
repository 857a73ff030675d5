"""The Delta log: actions, snapshots, checkpoints and the log store. Never imports Spark."""

from .actions import (
    AddCDCFile,
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from .delta_log import DeltaLog
from .features import SUPPORTED_FEATURES, validate_table_properties
from .snapshot import Snapshot
from .stats import file_stats
from .store import LocalLogStore, LogStore

__all__ = [
    "AddCDCFile",
    "AddFile",
    "CommitInfo",
    "DeletionVectorDescriptor",
    "DeltaLog",
    "DomainMetadata",
    "LocalLogStore",
    "LogStore",
    "Metadata",
    "Protocol",
    "RemoveFile",
    "SUPPORTED_FEATURES",
    "SetTransaction",
    "Snapshot",
    "file_stats",
    "validate_table_properties",
]
