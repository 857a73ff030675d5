"""The Session: the facade behind ``isolde.connect``.

    connect(warehouse="./warehouse", spark=None, master=None, conf=None, start=False) -> Session

    s.sql(query) -> pyspark DataFrame            (queries only; every table bound to one snapshot;
                                                  its actions raise isolde errors)
    s.execute(stmt) -> CommitResult | QueryResult (text with several statements: runs all,
                                                  returns the last result; QueryResult answers
                                                  collect() -> Rows, toPandas(), show(), ...)
    s.prepare(stmt) -> PreparedWrite             (writes only: data work done, not committed)
    s.run_script(path_or_text) -> list[results]  (stops at the first error, re-raised with
                                                  ``statement_line`` and a "line N: " prefix)
    s.explain(stmt) -> str
    s.read_stream(table, **options); s.write_batches(table, checkpoint=...)  (streaming source / sink)
    s.table_changes(table, start, end=None)      (change data feed, as SELECT * FROM table_changes(...))
    s.read.format("delta").option(...).load(path) / .table(name)  (versionAsOf, timestampAsOf, readChangeFeed)
    s.tables(database=None) -> list[str];  s.columns(table) -> list[(name, type)]
    s.current_database; s.conf (SET/RESET store); s.start(); s.ready; s.wait_ready(timeout=None)
    s.cancel(); s.close(); s.last_metrics (files total / read of the last query)

Spark exceptions never reach the user raw: they are translated to isolde errors
(AnalysisError family for analysis problems, ExecutionError otherwise).
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import os
import re
import threading
import time
import uuid
from typing import Optional, Union

from isolde import errors as E
from ..runtime import phases
from ..catalog.warehouse import DEFAULT_DATABASE, Catalog, check_name
from ..runtime.spark import SPARK_WAREHOUSE_DIR
from .context import ConfStore, ExecutionContext
from .idempotency import WriteAlreadyCommitted
from .results import CommitResult, DmlResult, PreparedWrite, QueryResult
from ..catalog.views import expand_views
from isolde.grammar import ast

VIEW_PREFIX = "__isolde_"


def connect(warehouse: str = "./warehouse", spark=None, master: Optional[str] = None, conf: Optional[dict] = None,
            start: bool = False, warm_up: bool = False) -> "Session":
    return Session(warehouse=warehouse, spark=spark, master=master, conf=conf, start=start, warm_up=warm_up)


def parse_statements(text: str) -> list:
    from isolde.grammar.parser import parse

    return list(parse(text))


#: statements that read coordinated tables as of one coordinator sequence number when run on
#: their own (they commit nothing; a write reads the latest and its commit is checked as usual)
_READ_POINT_STATEMENTS = frozenset({"Select", "Explain"})


class Session:
    def __init__(self, warehouse: str = "./warehouse", spark=None, master: Optional[str] = None,
                 conf: Optional[dict] = None, start: bool = False, warm_up: bool = False):
        self.catalog = Catalog(warehouse)
        self.warehouse = self.catalog.warehouse
        self._master = master or os.environ.get("ISOLDE_SPARK_MASTER")
        self._spark_conf = {k: v for k, v in (conf or {}).items() if k.startswith("spark.")
                            and not k.startswith("spark.databricks.")}
        # Spark's own catalog folder goes inside isolde's warehouse (hidden: not a database),
        # never a spark-warehouse/ in the user's working directory.
        # (An S3 warehouse keeps Spark's folder local: isolde's catalog is its own, and Spark would
        # otherwise reach for the bucket before the first statement.)
        if not self.catalog.files.remote:
            self._spark_conf.setdefault("spark.sql.warehouse.dir", os.path.join(self.warehouse, SPARK_WAREHOUSE_DIR))
        self._spark = spark
        self._start_error: Optional[BaseException] = None
        self._started = threading.Event()
        self._loaded = threading.Event()  # the statement modules are imported (wait_loaded)
        self.start_phase: Optional[str] = None  # while Spark starts: what it is doing (REPL spinner)
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._current_database = DEFAULT_DATABASE
        self._job_groups: collections.deque = collections.deque(maxlen=64)  # recent groups (lazy collects)
        self._closed = False
        self.conf = ConfStore(self, conf)
        self.last_metrics: dict = {}
        # the open BEGIN ... COMMIT (executor/session/transactions.py), or None
        self.active_transaction = None
        # answer a plain look at a table (SELECT * FROM t LIMIT 10) on the driver while Spark is
        # still starting (executor/jobs/driver_query.py); the REPL and scripts turn it on
        self.driver_reads = False
        self._warm_up_wanted = warm_up  # executor/runtime/warmup.py, once Spark is up
        self.warm_up = None
        if spark is not None:
            from ..runtime.spark import with_kept_lookups

            with_kept_lookups(spark)
            self._started.set()
            self._start_warm_up()
        elif start:
            self.start()

    # ------------------------------------------------------------------ Spark lifecycle

    def start(self) -> "Session":
        """Start Spark in a background thread (returns at once)."""
        with self._lock:
            if self._started.is_set() or self._thread is not None:
                return self
            # imported here, before any other thread can: two threads' first imports of pyspark
            # (a package whose modules import each other) fail with "partially initialized"
            import pyspark  # noqa: F401

            self._thread = threading.Thread(target=self._start_spark, name="isolde-spark-start", daemon=True)
            self._thread.start()
        return self

    def _start_spark(self) -> None:
        try:
            from ..jobs import load_all
            from ..runtime.spark import get_spark

            # every statement module is imported (0.6 s) while the JVM boots, not after it:
            # the start thread joins the imports before its own next import (SparkContext's)
            def import_all() -> None:
                try:
                    load_all()
                finally:
                    self._loaded.set()

            imports = threading.Thread(target=import_all, name="isolde-imports", daemon=True)
            imports.start()
            self._spark = get_spark(self._master, self._spark_conf, after_launch=imports.join,
                                    on_phase=self._set_start_phase)
            self._set_start_phase(None)
            for key, value in self.conf.items():
                if key.startswith("spark.sql."):
                    self._spark.conf.set(key, value)
            imports.join()
            self._start_warm_up()  # before ready: whoever waits for Spark finds it started
        except BaseException as e:  # reported by wait_ready
            self._start_error = e
        finally:
            self._started.set()

    def _start_warm_up(self) -> None:
        if self._warm_up_wanted and self.warm_up is None and not self._closed:
            from ..jobs import load_all
            from ..runtime.warmup import WarmUp

            load_all()  # imported here, not by the warm-up's thread and a statement's at once

            self.warm_up = WarmUp(self._spark).start()

    def _set_start_phase(self, name: Optional[str]) -> None:
        self.start_phase = name

    def wait_loaded(self, timeout: Optional[float] = None) -> bool:
        """Wait until the statement modules are imported: ``start`` imports them in a thread
        of its own while the JVM boots, and a second thread importing them at the same time
        could deadlock on Python's module locks. After this, the catalog, the log and the
        statements that need no Spark (``needs_spark``) can be used before Spark is up."""
        if self._thread is None:  # no start thread is importing them: import here
            from ..jobs import load_all

            load_all()
            self._loaded.set()
        return self._loaded.wait(timeout)

    def start_warm_up(self) -> None:
        """Warm the JVM up now (once Spark is up, if it is not yet): the REPL starts it when
        no statement is waiting for Spark, or after the first one."""
        self._warm_up_wanted = True
        if self._started.is_set() and self._spark is not None:
            self._start_warm_up()

    def needs_spark(self, stmt: Union[str, ast.Statement]) -> bool:
        """Does running ``stmt`` (text: every statement of it) need Spark? DESCRIBE, SHOW
        TBLPROPERTIES, SET and other log-only statements do not: they run before Spark is up."""
        from ..jobs import EXECUTORS, load_all

        load_all()
        for one in self._parse(stmt):
            runner = EXECUTORS.get(type(one))
            needs = getattr(runner, "needs_spark", True) if runner is not None else True
            if callable(needs):
                needs = needs(one, self)
            if needs:
                return True
        return False

    def _stop_warm_up(self) -> None:
        """A statement never waits for the warm-up: its jobs are cancelled first."""
        warm = self.warm_up
        if warm is not None and warm.running:
            warm.cancel()

    @property
    def ready(self) -> bool:
        return self._started.is_set() and self._spark is not None

    def wait_ready(self, timeout: Optional[float] = None) -> bool:
        if not self._started.is_set() and self._thread is None:
            self.start()
        self._started.wait(timeout)
        if self._start_error is not None:
            raise E.ExecutionError(f"Spark failed to start: {self._start_error}") from self._start_error
        return self.ready

    @property
    def spark(self):
        """The SparkSession, for the caller's own use: ``spark.readStream.format("isolde")``
        works on it without a helper call. (Registering that source costs ~1 s of a cold
        JVM, so it is done here, on first use, not while a fresh session's first statement
        waits; statements use ``engine``.)"""
        spark = self.engine
        try:
            from ..streaming import register

            register(spark)
        except Exception:  # noqa: BLE001 - streaming is optional; read_stream registers again
            pass
        return spark

    @property
    def engine(self):
        """The SparkSession statements run on (waits for Spark to start)."""
        if self._spark is None:
            self.wait_ready()
        return self._spark

    def close(self) -> None:
        """Forget the session (the process-wide SparkSession stays up for reuse); a transaction
        still open is rolled back."""
        if self.active_transaction is not None:
            from .transactions import roll_back_open

            roll_back_open(self, "the session closed")
        self._closed = True
        self._stop_warm_up()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ catalog helpers

    @property
    def current_database(self) -> str:
        return self._current_database

    @current_database.setter
    def current_database(self, name: str) -> None:
        self.catalog.require_database(name)
        self._current_database = check_name(name, "database")

    def use(self, name: str) -> None:
        self.current_database = name

    def tables(self, database: Optional[str] = None) -> list[str]:
        return self.catalog.list_tables(database or self.current_database)

    def databases(self) -> list[str]:
        return self.catalog.list_databases()

    def columns(self, table_name: str) -> list[tuple[str, str]]:
        from ..catalog import schema as S

        ref = _ref_from_name(table_name)
        handle = self.catalog.resolve(ref, self.current_database)
        snap = handle.log.snapshot()
        return [(f.name, f.dataType.simpleString()) for f in S.metadata_schema(snap.metadata).fields]

    # ------------------------------------------------------------------ statements

    def _parse(self, stmt) -> list:
        if isinstance(stmt, ast.Statement):
            return [stmt]
        if isinstance(stmt, (list, tuple)):
            return list(stmt)
        return parse_statements(stmt)

    def _run(self, stmt: ast.Statement, *, prepare: bool = False, write_options: Optional[dict] = None):
        """One statement; inside a transaction, against the tables as the transaction sees them."""
        from ..log import coordinator

        default = coordinator.DEFAULT_LOCATION.set(self._coordinator_location)
        # a query reads every coordinated table as of one coordinator sequence number (a
        # transaction has its own read point, fixed at its first coordinated read)
        point = coordinator.READ_POINT.set({} if type(stmt).__name__ in _READ_POINT_STATEMENTS else None)
        try:
            return self._run_in_transaction(stmt, prepare=prepare, write_options=write_options)
        finally:
            coordinator.READ_POINT.reset(point)
            coordinator.DEFAULT_LOCATION.reset(default)

    @property
    def _coordinator_location(self) -> str:
        """Where tables of this warehouse opting in to coordinated commits get their coordinator."""
        from ..log.coordinator import FOLDER

        return self.warehouse.rstrip("/") + "/" + FOLDER

    def _run_in_transaction(self, stmt: ast.Statement, *, prepare: bool = False,
                            write_options: Optional[dict] = None):
        transaction = self.active_transaction
        if transaction is None or isinstance(stmt, _TRANSACTION_CONTROL):
            return self._run_statement(stmt, prepare=prepare, write_options=write_options)
        if prepare:
            raise E.TransactionStateError("prepare() of one statement inside a transaction: its statements commit "
                                          "together; prepare the transaction (tx.prepare()) instead.",
                                          error_class="PREPARE_IN_TRANSACTION")
        from ..log.staged_log import ACTIVE_TRANSACTION

        from .transactions import query_scope

        transaction.begin_statement(stmt)
        token = ACTIVE_TRANSACTION.set(transaction)
        from ..log.coordinator import READ_POINT

        READ_POINT.set(transaction.read_point)  # reset by _run
        ok = False
        try:
            out = self._run_statement(stmt, write_options=write_options)
            ok = True
        except E.TransactionStateError:
            raise  # refused before it ran anything: the transaction stays usable
        except BaseException as e:
            transaction.abort(e)  # failed while running: as in Databricks, only ROLLBACK ends it now
            raise
        finally:
            ACTIVE_TRANSACTION.reset(token)
            transaction.end_statement(ok, query_scope(stmt))
        if isinstance(out, CommitResult):  # staged, not committed: no version yet
            out = dataclasses.replace(out, version=None)
        return out

    @property
    def transaction_tables(self) -> Optional[list]:
        """None outside a transaction; inside one, the tables it has written so far (the REPL's prompt)."""
        transaction = self.active_transaction
        return None if transaction is None else transaction.written_tables

    def roll_back_open_transaction(self, why: str) -> Optional[str]:
        """Roll back a transaction still open (the REPL is leaving); the sentence saying so, or None."""
        from .transactions import roll_back_open

        return roll_back_open(self, why)

    def transaction(self):
        """``with s.transaction() as tx: tx.execute(...)``: the statements commit as one when the
        block ends, and roll back when it raises (executor/session/transactions.py)."""
        from .transactions import Transaction

        return Transaction(self)

    def _run_statement(self, stmt: ast.Statement, *, prepare: bool = False, write_options: Optional[dict] = None):
        from ..jobs import EXECUTORS, load_all

        load_all()
        self._stop_warm_up()
        runner = EXECUTORS.get(type(stmt))
        if runner is None:
            raise E.AnalysisError(f"{_statement_name(stmt)} is not supported yet.",
                                  error_class="UNSUPPORTED_FEATURE", sqlstate="0A000")
        if prepare:
            from isolde.planner.plan import is_write

            if not is_write(stmt):  # refuse before running: prepare() must never run a non-write
                raise E.AnalysisError(f"{_statement_name(stmt)} is not a write; prepare() needs INSERT, UPDATE, "
                                      "DELETE, MERGE or another statement that commits.",
                                      error_class="NOT_A_WRITE", sqlstate="42000")
        ctx = ExecutionContext(self, stmt)
        ctx.write_options = dict(write_options or {})
        stmt = ctx.statement = expand_views(ctx, stmt)  # reads of views become reads of their tables
        group = f"isolde-{uuid.uuid4().hex[:12]}"
        started = time.perf_counter()
        needs_spark = getattr(runner, "needs_spark", True)
        if callable(needs_spark):
            needs_spark = needs_spark(stmt, self)
        ctx.needs_spark = bool(needs_spark)
        if needs_spark:
            self._set_job_group(group, stmt)
        try:
            with phases.statement_clock() as timer:
                try:
                    out = translate_errors(lambda: runner(ctx, stmt), ctx)
                except WriteAlreadyCommitted as skipped:  # txnAppId / txnVersion: this write was made before
                    out = _skipped_write(stmt, skipped)
                if isinstance(out, PreparedWrite) and not prepare:
                    with phases.phase("commit"):
                        out = translate_errors(out.commit, ctx)
                    if isinstance(out, CommitResult):
                        out = dataclasses.replace(out, elapsed_s=out.elapsed_s or time.perf_counter() - started,
                                                  phases=timer.milliseconds())
                    return out
            if isinstance(out, PreparedWrite):
                return out
            if prepare:
                raise E.AnalysisError(f"{_statement_name(stmt)} is not a write; prepare() needs INSERT, UPDATE, "
                                      "DELETE, MERGE or another statement that commits.",
                                      error_class="NOT_A_WRITE", sqlstate="42000")
            if isinstance(out, QueryResult):
                out.attach(ctx)  # its DataFrame's later actions translate errors with this context
                if getattr(out, "metrics", None):
                    self.last_metrics = out.metrics
            return out
        finally:
            if needs_spark:
                self._clear_job_group(group)

    def _set_job_group(self, group: str, stmt) -> None:
        if self._spark is None:
            self.wait_ready()
        desc = (getattr(stmt, "text", "") or _statement_name(stmt))[:200]
        try:
            self._spark.sparkContext.setJobGroup(group, desc, interruptOnCancel=True)
        except Exception:
            pass
        self._job_groups.append(group)

    def _clear_job_group(self, group: str) -> None:
        # kept in _job_groups: a QueryResult collects lazily, after the statement returned
        pass

    def execute(self, stmt: Union[str, ast.Statement]):
        """Run one statement (or every statement of the text, returning the last result)."""
        statements = self._parse(stmt)
        if not statements:
            raise E.AnalysisError("No statement to execute.", error_class="EMPTY_STATEMENT")
        result = None
        for s in statements:
            result = self._run(s)
        return result

    def prepare(self, stmt: Union[str, ast.Statement]) -> PreparedWrite:
        statements = self._parse(stmt)
        if len(statements) != 1:
            raise E.AnalysisError("prepare() takes exactly one statement.", error_class="NOT_A_SINGLE_STATEMENT")
        return self._run(statements[0], prepare=True)

    @property
    def read(self):
        """Delta's DataFrame-reader spelling: ``s.read.format("delta").option("versionAsOf", 3)
        .load(path)``, ``.option("readChangeFeed", "true").option("startingVersion", 1).table(t)``."""
        from .reader import TableReader

        return TableReader(self)

    def write(self, df):
        """Delta's DataFrame-writer spelling: ``s.write(df).mode("append").option("txnAppId", "job")
        .option("txnVersion", 7).saveAsTable(t)`` (executor/session/df_writer.py)."""
        from .df_writer import TableWriter

        return TableWriter(self, df)

    def table_changes(self, name: str, start, end=None):
        """Delta's change data feed of ``name``: ``table_changes(name, start[, end])`` as a
        QueryResult (versions as ints, or timestamps as text)."""
        from .table_functions import table_changes_sql

        return self.execute(table_changes_sql(name, start, end))

    def read_stream(self, table: str, **options):
        """A streaming DataFrame over ``table``: Delta's streaming source (format "isolde")."""
        from ..streaming import read_stream

        return read_stream(self, table, **options)

    def write_batches(self, table: str, *, checkpoint=None, app_id=None):
        """A foreachBatch function appending each micro-batch exactly once (txn actions)."""
        from ..streaming import write_batches

        return write_batches(self, table, checkpoint=checkpoint, app_id=app_id)

    def sql(self, query: Union[str, ast.Statement]):
        """A query as a pyspark DataFrame bound to the current snapshot of every table it reads.

        The DataFrame is a subclass of pyspark's (``results.isolde_dataframe``): its actions,
        and those of the DataFrames derived from it, raise isolde errors, not Spark's."""
        statements = self._parse(query)
        if len(statements) != 1 or not isinstance(statements[0], ast.Select):
            kind = _statement_name(statements[0]) if statements else "nothing"
            raise E.AnalysisError(f"sql() runs one query (SELECT / WITH / VALUES), not {kind}; use execute().",
                                  error_class="NOT_A_QUERY")
        result = self._run(statements[0])
        return result.df

    def run_script(self, path_or_text: str) -> list:
        from isolde.grammar.splitter import split_statements

        text = path_or_text
        if "\n" not in path_or_text and len(path_or_text) < 4096 and os.path.isfile(path_or_text):  # a file, even named a;b.sql
            with open(path_or_text, encoding="utf-8") as fh:
                text = fh.read()
        # every statement is parsed before any runs: a syntax error in the third must not leave
        # the first two committed. The first error is raised; the others are listed in it.
        parsed, syntax_errors = [], []
        for piece in split_statements(text):
            try:
                parsed.append((piece, parse_statements(piece.text)))
            except E.ParseError as e:
                syntax_errors.append(_with_line(e, piece.line))
        if syntax_errors:
            first = syntax_errors[0]
            if len(syntax_errors) > 1:
                others = "; ".join(e.message.splitlines()[0] for e in syntax_errors[1:])
                first.message = f"{first.message}\n(nothing was run; {len(syntax_errors) - 1} more: {others})"
                first.args = (first.message,)
            raise first
        results = []
        opened_here = self.active_transaction is None
        try:
            for piece, statements in parsed:
                try:
                    for s in statements:
                        results.append(self._run(s))
                except E.IsoldeError as e:
                    raise _with_line(e, piece.line) from e
        finally:
            if opened_here and self.active_transaction is not None:  # BEGIN without COMMIT
                from .transactions import roll_back_open

                results.append(QueryResult(message=roll_back_open(self, "the script ended")))
        return results

    def explain(self, stmt: Union[str, ast.Statement]) -> str:
        statements = self._parse(stmt)
        from ..jobs.query import explain_statement

        def one(stmt):
            ctx = ExecutionContext(self, stmt)
            stmt = ctx.statement = expand_views(ctx, stmt)
            return explain_statement(ctx, stmt)

        return "\n\n".join(translate_errors(lambda s=s: one(s)) for s in statements)

    def cancel(self, grace_s: float = 5.0) -> None:
        """Cancel the Spark jobs of the running statement(s).

        A job that has not reached the scheduler yet cannot be cancelled by Spark, so the most
        recent job group is cancelled again for ``grace_s`` seconds in the background.
        """
        if self._spark is None:
            return
        sc = self._spark.sparkContext
        groups = list(self._job_groups)
        for group in groups:
            try:
                sc.cancelJobGroup(group)
            except Exception:
                pass
        if not groups or grace_s <= 0:
            return
        last = groups[-1]

        def repeat() -> None:
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                time.sleep(0.25)
                try:
                    if sc.statusTracker().getJobIdsForGroup(last):
                        sc.cancelJobGroup(last)
                except Exception:
                    return

        threading.Thread(target=repeat, name="isolde-cancel", daemon=True).start()


_TRANSACTION_CONTROL = (ast.BeginTransaction, ast.CommitTransaction, ast.RollbackTransaction, ast.AtomicBlock)


def _ref_from_name(name: str) -> ast.TableRef:
    name = name.strip()
    m = re.match(r"^delta\.`(.+)`$", name, re.I)
    if m:
        return ast.TableRef(path=m.group(1))
    parts = tuple(p.strip("`") for p in name.split("."))
    return ast.TableRef(parts=parts)


def _statement_name(stmt) -> str:
    name = type(stmt).__name__
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).upper()


def _with_line(e: E.IsoldeError, line: int) -> E.IsoldeError:
    """A copy of ``e`` (same class) with ``statement_line`` set and the message prefixed."""
    inner_line = getattr(e, "line", None)
    absolute = line + (inner_line - 1 if isinstance(inner_line, int) and isinstance(e, E.ParseError) else 0)
    new = type(e).__new__(type(e))
    new.__dict__.update(e.__dict__)
    message = f"line {absolute}: {e.message}"
    new.message = message
    new.args = (message,)
    new.statement_line = line
    if isinstance(e, E.ParseError):
        new.line = absolute
    return new


# --------------------------------------------------------------------------- error translation

_VIEW_RE = re.compile(r"`?__isolde_[0-9a-f]+_\d+`?\.?")


def clean_message(text: str, error_class: Optional[str] = None) -> str:
    """Spark's message as a user should read it: no JVM stack trace, SQLSTATE suffix, query
    context, catalog prefix or position in isolde's rewritten SQL, and no leading
    ``[ERROR_CLASS]`` (the error carries the class; the REPL shows it once)."""
    text = str(text)
    text = text.split("\n\nJVM stacktrace:")[0]
    text = re.sub(r"\s*SQLSTATE: \w+", "", text)
    text = text.split("\n== SQL")[0].split("\n== DataFrame")[0]
    text = re.sub(r"spark_catalog\.default\.|`spark_catalog`\.`default`\.", "", text)
    # a position in the SQL isolde handed Spark (tables bound to views, clauses rewritten),
    # not in the user's statement: it would point at the wrong place
    text = re.sub(r";?\s*line \d+ pos \d+", "", text)
    return strip_error_class(text.strip(), error_class)


_CLASS_PREFIX = re.compile(r"^\[([A-Z0-9_]+(?:\.[A-Z0-9_]+)*)\]\s*")


def strip_error_class(text: str, error_class: Optional[str] = None) -> str:
    """``[DIVIDE_BY_ZERO] Division by zero.`` -> ``Division by zero.`` when the bracket names
    ``error_class`` (or its main class / a sub-class of it); unchanged otherwise."""
    m = _CLASS_PREFIX.match(text) if error_class else None
    if m is None:
        return text
    named = m.group(1)
    if named == error_class or named.split(".")[0] == error_class.split(".")[0]:
        return text[m.end():]
    return text


def _skipped_write(stmt, skipped) -> PreparedWrite:
    """An idempotent write the table already has: nothing is written, and it answers as a
    statement that changed nothing (zeros, the version it read)."""
    from .results import _DML_COUNTS

    kind = _statement_name(stmt).split()[0].upper()
    operation = "WRITE" if kind == "INSERT" else kind
    if kind in _DML_COUNTS:
        result = DmlResult.of(kind, skipped.read_version, operation, {}, skipped.table)
    else:  # CREATE [OR REPLACE] TABLE ... AS SELECT, COPY INTO, ...: the commit it would have made, none
        result = CommitResult(version=skipped.read_version, operation=_statement_name(stmt),
                              metrics={"numOutputRows": 0, "skipped": True}, table=skipped.table)
    return PreparedWrite(operation=operation, table=skipped.table, commit_fn=lambda: result, staged_paths=[],
                         metrics={})


def translate_errors(fn, ctx=None):
    """Run ``fn``; turn Spark/Py4J exceptions into isolde errors (``ctx``: the statement's
    context, for the names an unknown table may have meant)."""
    try:
        return fn()
    except (E.IsoldeError, WriteAlreadyCommitted):
        raise
    except Exception as e:  # noqa: BLE001 - translation point
        raise translate_exception(e, ctx) from e


def translate_exception(e: BaseException, ctx=None) -> E.IsoldeError:
    from ..rows.writer import REPLACE_WHERE_MISMATCH, SEP, VIOLATION_MARK

    if isinstance(e, RecursionError):
        return E.ExecutionError(
            "The statement is too deeply nested for isolde to plan (Python's recursion limit): "
            "split it, or flatten nested expressions.", error_class="STATEMENT_TOO_COMPLEX", sqlstate="54001")
    text = str(e)
    if "java.lang.StackOverflowError" in text:
        return E.ExecutionError(
            "The statement is too complex for Spark's planner (its thread stack overflowed): split it, or "
            "flatten nested expressions.", error_class="STATEMENT_TOO_COMPLEX", sqlstate="54001")
    if VIOLATION_MARK in text:
        start = text.index(VIOLATION_MARK)
        parts = text[start:].split(SEP)
        kind, name, message = (parts + ["", "", ""])[1:4]
        from ..rows.store_assignment import LENGTH_CLASS, SQLSTATES

        if kind == "notnull":
            err = E.NotNullViolationError(message)
        elif kind == REPLACE_WHERE_MISMATCH:  # Delta's class and state for a row outside REPLACE WHERE
            err = E.ConstraintViolationError(message, error_class=kind, sqlstate="44000")
        elif kind == LENGTH_CLASS:
            err = E.ConstraintViolationError(message, error_class=kind, sqlstate=SQLSTATES[kind])
        elif kind in SQLSTATES:  # a value its column cannot hold (store_assignment.py)
            err = E.StoreAssignmentError(message, error_class=kind, sqlstate=SQLSTATES[kind])
        else:
            err = E.ConstraintViolationError(message)
        err.constraint = name
        return err
    error_class = None
    params = {}
    sqlstate = None
    try:
        error_class = e.getCondition() if hasattr(e, "getCondition") else e.getErrorClass()
        params = e.getMessageParameters() or {}
        sqlstate = e.getSqlState()
    except Exception:
        pass
    storage = _storage_failure(e, error_class, params)
    if storage is not None:
        return storage
    spark_cause = None
    if (error_class is None or error_class in WRAPPER_CLASSES) and _java_throwable(e) is not None:
        # "Exception thrown in awaitResult", an ExecutionException, a stage-materialisation
        # wrapper...: the Spark error with a class further down the Java cause chain
        spark_cause = _spark_throwable(e)
        if spark_cause is not None:
            error_class, sqlstate, cause_message = spark_cause[:3]
            params = spark_cause[3] or params
    try:
        from pyspark.errors import AnalysisException
    except Exception:  # pragma: no cover
        AnalysisException = ()  # type: ignore
    if spark_cause is not None:
        message = clean_message(cause_message, error_class)
    elif error_class is None and (type(e).__name__ == "Py4JJavaError" or any(
            w in text.split("\n", 1)[0] for w in _WRAPPER_MESSAGES)) and _java_throwable(e) is not None:
        root = _root_cause_text(_java_throwable(e)) or text
        message = clean_message(root.splitlines()[0] if root else text)
    else:
        message = clean_message(getattr(e, "desc", None) or text, error_class)
    message = _VIEW_RE.sub("", message)
    if "cancelled" in text.lower() and ("job group" in text.lower() or "cancel" in (error_class or "").lower()):
        return E.ExecutionError("The statement was cancelled.", error_class="OPERATION_CANCELED", sqlstate="HY008")
    if error_class and error_class.startswith("UNRESOLVED_COLUMN"):
        name = params.get("objectName", "").replace("`", "")
        name = _VIEW_RE.sub("", name)
        proposal = [p.strip().replace("`", "").split(".")[-1] for p in params.get("proposal", "").split(",")
                    if p.strip()]
        err = E.ColumnNotFoundError(name.split(".")[-1] if name else "?", None, proposal)
        if name and "." in name:
            err.message = err.message.replace(f"`{name.split('.')[-1]}`", f"`{name}`", 1)
            err.args = (err.message,)
        return err
    if error_class and error_class.startswith("TABLE_OR_VIEW_NOT_FOUND") and params.get("relationName"):
        name = clean_message(params["relationName"]).replace("`", "")
        return E.TableNotFoundError(name, ctx.table_candidates() if ctx is not None else ())
    if isinstance(e, AnalysisException) or (error_class and error_class.startswith(
            ("PARSE_SYNTAX", "UNRESOLVED", "DATATYPE_MISMATCH", "TABLE_OR_VIEW", "MISSING_", "AMBIGUOUS",
             "INVALID_", "WRONG_NUM_ARGS", "UNSUPPORTED_"))):
        return E.AnalysisError(message, error_class=error_class or "ANALYSIS_ERROR", sqlstate=sqlstate)
    first = message if len(message) < 2000 else message[:2000] + "..."
    return E.ExecutionError(first, error_class=error_class or "EXECUTION_ERROR", sqlstate=sqlstate)


#: Spark error classes that only wrap the real failure (their cause has the class to report)
WRAPPER_CLASSES = frozenset({"STAGE_MATERIALIZATION_MULTIPLE_FAILURES", "TASK_WRITE_FAILED"})

#: Java exceptions that only wrap their cause (message text to skip when there is no class)
_WRAPPER_MESSAGES = ("Exception thrown in awaitResult", "java.util.concurrent.ExecutionException",
                     "java.util.concurrent.CompletionException")


#: what a Java I/O error says -> its errno (a Spark task's write failing on the disk or the folder)
_IO_FAILURES = (("No space left on device", errno.ENOSPC), ("Disk quota exceeded", errno.EDQUOT),
                ("Permission denied", errno.EACCES), ("Read-only file system", errno.EROFS))


def _storage_failure(e, error_class, params) -> Optional[E.IsoldeError]:
    """A Spark data write that failed on the file system (full disk, no permission): Spark's
    TASK_WRITE_FAILED names only the task; the Java I/O error down its cause chain says why. It
    becomes the same StorageError the log's own writes raise (executor/log/store.py)."""
    if (error_class is not None and error_class not in WRAPPER_CLASSES) or _java_throwable(e) is None:
        return None
    path = str((params or {}).get("path") or "")
    found = None
    for t in _causes(_java_throwable(e), limit=32):
        try:
            if t.getCondition() == "TASK_WRITE_FAILED":
                path = str(dict(t.getMessageParameters() or {}).get("path") or path)
        except Exception:
            pass
        try:
            text = str(t.getMessage() or "")
        except Exception:
            continue
        found = found or next((code for words, code in _IO_FAILURES if words in text), None)
    if found is None:
        return None
    from ..log.store import storage_error

    return storage_error(OSError(found, os.strerror(found)), path.removeprefix("file:") or "the table's folder",
                         what="this write's data files", consequence="Nothing was committed: the table is unchanged.")


def _java_throwable(e):
    """The Java throwable behind a Py4JJavaError (``java_exception``) or a PySpark captured
    exception (``_origin``), or None."""
    for attr in ("java_exception", "_origin"):
        try:
            throwable = getattr(e, attr, None)
        except Exception:
            throwable = None
        if throwable is not None:
            return throwable
    return None


def _causes(throwable, limit: int = 16):
    """``throwable`` and its Java causes, outermost first (bounded, cycle-safe)."""
    seen = set()
    for _ in range(limit):
        if throwable is None:
            return
        try:
            key = throwable.hashCode()
        except Exception:
            key = None
        if key is not None and key in seen:
            return
        seen.add(key)
        yield throwable
        try:
            throwable = throwable.getCause()
        except Exception:
            return


def _spark_throwable(e) -> Optional[tuple]:
    """(error class, SQLSTATE, message, message parameters) of the first Spark error with an
    error class in the Java cause chain of ``e`` (a Py4JJavaError or a captured PySpark
    exception): "Exception thrown in awaitResult" wraps the real one, and so do the classes in
    WRAPPER_CLASSES -- their cause wins when it has a class of its own."""
    throwable = _java_throwable(e)
    wrapper = None
    for t in _causes(throwable):
        try:
            condition = t.getCondition()
        except Exception:
            condition = None
        if not condition:
            continue
        try:
            sqlstate = t.getSqlState()
        except Exception:
            sqlstate = None
        try:
            message = t.getMessage() or str(condition)
        except Exception:
            message = str(condition)
        try:
            params = dict(t.getMessageParameters() or {})
        except Exception:
            params = {}
        found = (str(condition), sqlstate, message, params)
        if str(condition) not in WRAPPER_CLASSES:
            return found
        wrapper = wrapper or found
    return wrapper


def _root_cause_text(throwable) -> Optional[str]:
    """``toString()`` of the first throwable in the chain that is not a mere wrapper."""
    last = None
    for t in _causes(throwable):
        try:
            text = t.toString()
        except Exception:
            continue
        last = text
        if not any(w in text for w in _WRAPPER_MESSAGES):
            return text
    return last
