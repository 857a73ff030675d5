"""Warm the JVM up while nobody is waiting for it.

A fresh JVM's first UPDATE / DELETE / MERGE is several times slower than the next one: Spark
loads classes, compiles its generated code and HotSpot compiles the Parquet readers and
writers, the row formats and the hash and join operators, all on the statement's clock. Most of
that cost is the same whatever the table, so it can be paid before the user asks: on a small
throwaway table in a temporary warehouse, the statements isolde's DML path is made of run once
(``benchmarks/first_statement.py`` measures what is left).

The REPL starts it as soon as Spark is up (the user is still typing); a library caller opts in
with ``isolde.connect(warm_up=True)``. A statement of the user never waits for it: the session
cancels the warm-up's jobs before it runs anything (``Session._run``), and the warm-up stops
between its statements. Nothing of it is left: its warehouse is a temporary folder, removed at
the end, and the user's session (settings, current database, job groups) is never touched.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from typing import Optional

log = logging.getLogger(__name__)

#: what runs: the statement kinds of the DML path, on a partitioned deletion-vector table
ROWS = 200_000
STATEMENTS = (
    "CREATE TABLE w (id BIGINT, k BIGINT, v DOUBLE, s STRING, d DATE) PARTITIONED BY (d)",
    "INSERT INTO w SELECT id, id % 1000, id * 0.5, concat('s', id), date_add(DATE'2024-01-01', CAST(id % 4 AS INT)) "
    "FROM range({rows})",
    "SELECT count(*), sum(v) FROM w WHERE k = 7",
    "DELETE FROM w WHERE k = 11",
    "UPDATE w SET v = v + 1 WHERE k = 13",
    "MERGE INTO w USING (SELECT id, k, v, s, d FROM w WHERE k = 17 UNION ALL "
    "SELECT {rows} + id, 17, 0.0, 'new', DATE'2024-01-02' FROM range(100)) src ON w.id = src.id "
    "WHEN MATCHED THEN UPDATE SET v = src.v + 1 WHEN NOT MATCHED THEN INSERT *",
    # the commonest upsert: the source is another table (a staging table), not the target itself
    "CREATE TABLE src AS SELECT id * 2 AS id, k, v + 1 AS v, s, d FROM w WHERE k % 10 = 9",
    "MERGE INTO w t USING src ON src.id = t.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    "SELECT * FROM w WHERE id = 12345",
    "INSERT INTO w VALUES (-1, -1, -1.0, 'one', DATE'2024-01-01')",
)


class WarmUp:
    """One warm-up run in a background thread; ``cancel()`` stops it at once."""

    def __init__(self, spark, rows: int = ROWS):
        self._spark = spark
        self._rows = rows
        self._stop = threading.Event()
        self.done = threading.Event()
        self.statements_run = 0
        self.elapsed_s: Optional[float] = None
        self.error: Optional[BaseException] = None
        self._session = None
        self._thread = threading.Thread(target=self._run, name="isolde-warm-up", daemon=True)

    def start(self) -> "WarmUp":
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def cancel(self, timeout: float = 5.0) -> None:
        """Stop between statements and cancel the Spark jobs of the one running."""
        self._stop.set()
        session = self._session
        if session is not None:
            try:
                session.cancel(grace_s=0)
            except Exception:  # noqa: BLE001 - cancelling is best effort; the user's statement goes on
                pass
        self._thread.join(timeout)

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self.done.wait(timeout)

    def _run(self) -> None:
        from ..session.session import Session

        started = time.perf_counter()
        folder = tempfile.mkdtemp(prefix="isolde-warm-up-")
        try:
            self._session = Session(warehouse=folder, spark=self._spark)
            for text in STATEMENTS:
                if self._stop.is_set():
                    break
                result = self._session.execute(text.format(rows=self._rows))
                collect = getattr(result, "collect", None)
                if callable(collect) and text.startswith("SELECT"):
                    collect()
                self.statements_run += 1
        except BaseException as e:  # noqa: BLE001 - a warm-up must never disturb the session
            if not self._stop.is_set():
                self.error = e
                log.debug("warm-up stopped: %s", e)
        finally:
            self.elapsed_s = time.perf_counter() - started
            shutil.rmtree(folder, ignore_errors=True)
            self.done.set()
