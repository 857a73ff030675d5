"""A table's log as one multi-statement transaction sees it: the real log up to the version
the transaction pinned, then the transaction's own commits, held in memory.

Every statement of a transaction runs unchanged against a ``StagedDeltaLog``: it loads the
latest snapshot (the pinned one plus what earlier statements staged, so it reads its own
writes), records its reads in an ordinary OptimisticTransaction and "commits" the next
version into memory, where no other writer can race it. Nothing reaches ``_delta_log``
until the whole transaction commits (executor/txn/multi_statement.py squashes the staged
versions into one real commit). Versions the real log gains after the pin stay invisible,
so every read of the transaction sees one snapshot of the table.
"""

from __future__ import annotations

import contextvars
import os
import re
import time
from typing import Callable, Optional

from isolde.errors import InternalError

from .delta_log import LAST_CHECKPOINT, DeltaLog
from .store import FileStatus, LogStore

#: the multi-statement transaction of the statement running in this context (its ``log_for(name,
#: real_log)`` gives the staged log a table handle opens), or None
ACTIVE_TRANSACTION: contextvars.ContextVar = contextvars.ContextVar("isolde_transaction", default=None)

_VERSIONED = re.compile(r"^(\d{20})\.")
_COMMIT = re.compile(r"^(\d{20})\.json$")


class StagedLogStore(LogStore):
    """The real store up to ``pinned_version``; staged commits above it, in memory."""

    def __init__(self, real: LogStore, log_path: str, pinned_version: int):
        self.real = real
        self.log_path = log_path
        self.pinned_version = pinned_version
        self.staged: dict[str, tuple[bytes, int]] = {}  # commit path -> (body, time in ms)

    def _hidden(self, path: str) -> bool:
        """A log file of a version after the pin (a later commit or checkpoint of the real log)."""
        if os.path.dirname(path) != self.log_path:
            return False
        m = _VERSIONED.match(os.path.basename(path))
        return m is not None and int(m.group(1)) > self.pinned_version

    def read(self, path: str) -> bytes:
        if path in self.staged:
            return self.staged[path][0]
        if self._hidden(path):
            raise FileNotFoundError(path)
        data = self.real.read(path)
        if os.path.basename(path) == LAST_CHECKPOINT and os.path.dirname(path) == self.log_path:
            from .checkpoint import parse_last_checkpoint

            info = parse_last_checkpoint(data)
            if info is not None and info["version"] > self.pinned_version:
                raise FileNotFoundError(path)  # a checkpoint newer than the pin: list instead
        return data

    def put_if_absent(self, path: str, data: bytes) -> None:
        m = _COMMIT.match(os.path.basename(path))
        if os.path.dirname(path) != self.log_path or m is None:
            raise InternalError(f"A statement inside a transaction wrote {path}; only commits are staged.")
        if path in self.staged or int(m.group(1)) <= self.pinned_version:
            raise FileExistsError(path)
        self.staged[path] = (data, int(time.time() * 1000))

    def write(self, path: str, data: bytes) -> None:
        raise InternalError(f"A statement inside a transaction tried to replace {path}.")

    def list_from(self, path: str) -> list[FileStatus]:
        start = os.path.basename(path)
        listed = [s for s in self.real.list_from(path) if not self._hidden(s.path)]
        if os.path.dirname(path) == self.log_path:
            listed += [FileStatus(p, len(body), ms) for p, (body, ms) in self.staged.items()
                       if os.path.basename(p) >= start]
        return sorted(listed, key=lambda s: os.path.basename(s.path))

    def exists(self, path: str) -> bool:
        if path in self.staged:
            return True
        return not self._hidden(path) and self.real.exists(path)

    def status(self, path: str) -> FileStatus:
        if path in self.staged:
            body, ms = self.staged[path]
            return FileStatus(path, len(body), ms)
        if self._hidden(path):
            raise FileNotFoundError(path)
        return self.real.status(path)

    def delete(self, path: str) -> bool:
        raise InternalError(f"A statement inside a transaction tried to delete {path}.")

    def identity(self, path: str) -> tuple:
        if path in self.staged:
            return ("staged", path, id(self))
        return self.real.identity(path)


class StagedDeltaLog(DeltaLog):
    """The log a transaction's statements use for one table (see the module docstring).

    ``pinned`` is the real snapshot the transaction read first; ``on_transaction`` is called
    with every statement transaction started on this log, so the multi-statement
    transaction can collect their reads."""

    staged = True  # OptimisticTransaction skips checkpoints and UniForm after a staged commit

    def __init__(self, real: DeltaLog, pinned, on_transaction: Optional[Callable] = None):
        super().__init__(real.table_path, StagedLogStore(real.store, real.log_path, pinned.version))
        self.real = real
        self.pinned = pinned
        self._latest = pinned
        self._on_transaction = on_transaction

    def __repr__(self) -> str:
        return f"StagedDeltaLog({self.table_path!r} at {self.pinned.version})"

    @property
    def staged_versions(self) -> list[int]:
        return sorted(int(_COMMIT.match(os.path.basename(p)).group(1)) for p in self.store.staged)

    def start_transaction(self, snapshot=None, *, max_attempts: int | None = None):
        txn = super().start_transaction(snapshot, max_attempts=1)
        if self._on_transaction is not None:
            self._on_transaction(self, txn)
        return txn

    def checkpoint(self, version: int | None = None, *, cleanup: bool = True) -> str:
        return ""  # the real log checkpoints when the transaction commits

    def cleanup_expired_logs(self, snapshot=None, *, now: int | None = None) -> list[str]:
        return []
