"""Statement classification (no Spark): what kind of work a statement is, and what it targets.

    classify(stmt) -> "query" | "write" | "ddl" | "session" | "metadata" | "transaction"
    target_of(stmt) -> TableRef | None
    is_write(stmt) -> bool      (the statement commits to a table: prepare() accepts it)
"""

from __future__ import annotations

from typing import Optional

from isolde.grammar import ast

_WRITES = tuple(getattr(ast, n) for n in (
    "Insert", "Update", "Delete", "Merge", "CreateTable", "CloneTable", "SetTblProperties", "UnsetTblProperties",
    "AddColumns", "DropFeature", "AlterClusterBy", "SyncIdentity", "AlterColumnType", "RenameColumn", "DropColumns", "AddConstraint", "DropConstraint", "Optimize",
    "Reorg", "Restore", "ConvertToDelta", "CopyInto", "TruncateTable", "CreateTableLike"))
_QUERIES = (ast.Select, ast.Explain)
_METADATA = tuple(getattr(ast, n) for n in ("DescribeHistory", "DescribeDetail", "DescribeTable", "ShowTblProperties",
                                            "ShowTables", "Vacuum", "ShowDatabases", "ShowViews",
                                            "ShowColumns", "ShowCreateTable", "RepairTable"))
_SESSION = (ast.SetConfig, ast.ResetConfig, ast.Use)
_DDL = (ast.DropTable, ast.CreateDatabase, ast.DropDatabase, ast.CreateView, ast.DropView)
_TRANSACTION = (ast.BeginTransaction, ast.CommitTransaction, ast.RollbackTransaction, ast.AtomicBlock)


def classify(stmt) -> str:
    if isinstance(stmt, _QUERIES):
        return "query"
    if isinstance(stmt, _WRITES):
        return "write"
    if isinstance(stmt, _SESSION):
        return "session"
    if isinstance(stmt, _DDL):
        return "ddl"
    if isinstance(stmt, _METADATA):
        return "metadata"
    if isinstance(stmt, _TRANSACTION):
        return "transaction"
    return "unknown"


def is_write(stmt) -> bool:
    return classify(stmt) == "write"


def target_of(stmt) -> Optional[ast.TableRef]:
    for name in ("table", "target"):
        ref = getattr(stmt, name, None)
        if isinstance(ref, ast.TableRef):
            return ref
    return None
