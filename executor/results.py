"""What statements return: rows for queries/SHOW/DESCRIBE, a CommitResult for writes, and
the two-phase PreparedWrite that sits between a write's data work and its commit."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence


@dataclass(frozen=True)
class CommitResult:
    """A committed write: the new table version, Delta's operation name and its metrics."""

    version: int
    operation: str
    metrics: dict = field(default_factory=dict)
    table: str = ""
    elapsed_s: float = 0.0


class QueryResult:
    """Rows with column names. Wraps a Spark DataFrame (collected on first use) or fixed rows.

    ``df`` stays available for callers that want to keep working in Spark.
    """

    def __init__(self, columns: Sequence[str] | None = None, rows: Sequence[tuple] | None = None, df: Any = None,
                 message: str | None = None):
        self.df = df
        self._columns = list(columns) if columns is not None else None
        self._rows = [tuple(r) for r in rows] if rows is not None else None
        self.message = message  # e.g. "Table created" for DDL with no rows

    @property
    def columns(self) -> list[str]:
        if self._columns is None:
            self._columns = list(self.df.columns) if self.df is not None else []
        return self._columns

    @property
    def rows(self) -> list[tuple]:
        if self._rows is None:
            self._rows = [tuple(r) for r in self.df.collect()] if self.df is not None else []
        return self._rows

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def as_dicts(self) -> list[dict]:
        return [dict(zip(self.columns, r)) for r in self.rows]

    def __repr__(self) -> str:
        return f"QueryResult(columns={self.columns!r}, rows={len(self.rows)})"


@dataclass
class PreparedWrite:
    """A write whose data work is done and whose new files are staged, but not committed.

    ``commit_fn()`` performs the transactional commit and returns a CommitResult (or raises a
    ConcurrentModificationException); ``staged_paths`` are deleted by ``abort()`` and after a
    failed commit, so a refused or abandoned write leaves nothing behind but the old table.
    """

    operation: str
    table: str
    commit_fn: Callable[[], CommitResult]
    staged_paths: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    state: str = "prepared"  # prepared | committed | aborted | failed
    result: Optional[CommitResult] = None
    started: float = field(default_factory=time.perf_counter)

    def commit(self) -> CommitResult:
        if self.state != "prepared":
            raise RuntimeError(f"this write is already {self.state}")
        try:
            self.result = self.commit_fn()
        except BaseException:
            self.state = "failed"
            self._remove_staged()
            raise
        self.state = "committed"
        return self.result

    def abort(self) -> None:
        if self.state == "prepared":
            self.state = "aborted"
            self._remove_staged()

    def _remove_staged(self) -> None:
        import os

        for path in self.staged_paths:
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.remove(path)
