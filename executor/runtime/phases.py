"""Where one statement's time goes: named phases, timed on the statement's own thread.

``Session`` starts a ``PhaseClock`` per statement; the code doing a phase's work wraps it in
``with phase("find"):`` (a no-op outside a statement, and in helper threads, which do not
inherit the clock). What no phase claims is reported as ``plan``: parsing the snapshot,
statistics-based skipping, building Spark plans, and Python in between. The DML benchmark
prints these beside a floor for each (benchmarks/dml.py).

Phases (milliseconds, in ``CommitResult.phases``):
    source   MERGE: materialising the source and the aggregate over its keys
    find     the Spark job that finds the changed rows (and their positions as bitmaps)
    dv       OR-ing old and new deletion vectors, serialising and writing them
    write    Spark jobs writing new data files
    stats    reading the new files' Parquet footers for the log's statistics, moving them in
    commit   the transaction's commit: conflict checks, the log write, post-commit hooks
    plan     the rest
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Optional

ORDER = ("plan", "source", "find", "dv", "write", "stats", "commit")

_clock: ContextVar[Optional["PhaseClock"]] = ContextVar("isolde_phase_clock", default=None)


class PhaseClock:
    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds: dict = {}
        self._open: Optional[str] = None

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def milliseconds(self) -> dict:
        """Phase -> ms, ``plan`` being the total less the others, in ``ORDER``."""
        total = time.perf_counter() - self.started
        out = dict(self.seconds)
        out["plan"] = max(total - sum(self.seconds.values()), 0.0)
        return {k: round(out[k] * 1000, 1) for k in ORDER if k in out}


@contextmanager
def statement_clock():
    """A clock for the statement run inside the block (restores any outer one after)."""
    clock = PhaseClock()
    token = _clock.set(clock)
    try:
        yield clock
    finally:
        _clock.reset(token)


@contextmanager
def phase(name: str):
    """Time the block as ``name`` on the current statement's clock. A phase inside another is
    charged to the outer one only (no time counted twice)."""
    clock = _clock.get()
    if clock is None or clock._open is not None:
        yield
        return
    clock._open = name
    t = time.perf_counter()
    try:
        yield
    finally:
        clock._open = None
        clock.add(name, time.perf_counter() - t)
