"""Deterministic interleavings on Delta-Spark: T1 reads, winners commit, then T1 commits.

Delta's JAR ships the phase-locking transaction observer its own concurrency suites use
(``org.apache.spark.sql.delta.fuzzer.PhaseLockingTransactionExecutionObserver``). It is a
thread-local hook on every ``OptimisticTransaction``: the transaction's snapshot is taken in
its initial phase, its data work runs before the prepare phase, and the commit phase waits on
a barrier. PySpark pins each Python thread to one JVM thread, so setting the observer from
T1's Python thread and running ``spark.sql(T1)`` there puts T1's transaction under it; the
main thread runs the winners (no observer: the default no-op) and then opens the commit
barrier. Works for every Delta command (DML, OPTIMIZE, ALTER ...), with no change to what T1
reads -- unlike a gate UDF, which would have to sit inside the statement.

    outcome = run_interleaved(spark, "UPDATE delta.`/p` SET v = 1 WHERE id = 1", winners)
    outcome.error   # None (committed) or "ConcurrentAppendException"-style class name

A command that retries after a conflict (OPTIMIZE) starts its next transaction under a
second observer whose barriers are all open; a third transaction would find no observer
barrier open and fail loudly rather than hang (the wait has a timeout).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from tests.helpers.reference import error_class

TIMEOUT_S = 120.0


@dataclass
class Outcome:
    rows: list | None
    error: str | None
    reached_commit: bool  # T1 got to its commit before the winners ran


def _fuzzer(jvm):
    return jvm.org.apache.spark.sql.delta.fuzzer


def _observer(jvm, name: str):
    f = _fuzzer(jvm)
    return f.PhaseLockingTransactionExecutionObserver(f.OptimisticTransactionPhases.forName(name))


def _phases(obs):
    p = obs.phases()
    return [p.analysisPhase(), p.initialPhase(), p.preparePhase(), p.commitPhase(), p.backfillPhase(),
            p.postCommitPhase()]


def _unblock(phases):
    for phase in phases:
        barrier = phase.entryBarrier()
        if barrier.load().toString() in ("Blocked", "Requested"):
            barrier.unblock()


def _wait(check, what: str, thread: threading.Thread):
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        if not thread.is_alive():
            return False
        if time.monotonic() > deadline:
            raise TimeoutError(f"Delta T1 did not reach {what} in {TIMEOUT_S:.0f} s")
        time.sleep(0.01)
    return True


def run_interleaved(spark, t1_sql: str, winners) -> Outcome:
    """Run ``t1_sql`` on Delta-Spark with ``winners()`` committed between its read and its commit."""
    jvm = spark._jvm
    teo = jvm.org.apache.spark.sql.delta.TransactionExecutionObserver
    first = _observer(jvm, "isolde-t1")
    retry = _observer(jvm, "isolde-t1-retry")
    _unblock(_phases(retry))
    first.setNextObserver(retry, True)
    result: dict = {}

    def t1():
        teo.setObserver(first)
        try:
            first.phases().analysisPhase().waitToEnter()
            result["rows"] = spark.sql(t1_sql).collect()
        except Exception as exc:  # the class name is the answer
            result["error"] = error_class(exc)
            result["exc"] = exc
        finally:
            teo.setObserver(getattr(getattr(jvm.org.apache.spark.sql.delta, "NoOpTransactionExecutionObserver$"), "MODULE$"))

    thread = threading.Thread(target=t1, name="delta-t1", daemon=True)
    thread.start()
    phases = _phases(first)
    _unblock(phases[:3])
    reached = _wait(lambda: phases[2].hasEntered(), "its commit", thread)
    try:
        if reached:
            winners()
    finally:
        _unblock(phases[3:])
        if reached:
            # with a next observer set, T1 waits for this exit before handing over to it
            exit_barrier = phases[5].exitBarrier()
            if exit_barrier.load().toString() in ("Blocked", "Requested"):
                exit_barrier.unblock()
        thread.join(TIMEOUT_S)
    if thread.is_alive():
        raise TimeoutError("Delta T1 did not finish after the winners committed")
    return Outcome(result.get("rows"), result.get("error"), reached)
