"""Running statements and showing their results: shared by the REPL and the script runner.

``SessionHolder`` opens the Session (``isolde.connect``) in a background thread so the
prompt never waits for Spark; ``Runner`` splits text into statements, runs them one by one
(in a worker thread when interactive, so Ctrl-C can cancel the Spark job and a progress
bar can be drawn), and prints results, commit lines and errors.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Optional, TextIO

import isolde
from . import formatting, paging, statements
from .config import Settings, config_path
from .progress import StatusLine, read_stages, render_progress, spinner_frame

DDL_WORDS = {"CREATE", "DROP", "ALTER", "REPLACE", "CONVERT", "USE", "RESTORE"}


class SessionHolder:
    """The Session, opened in the background (``start_background``) or on first ``get``."""

    def __init__(self, connect_kwargs: dict | None = None, factory: Callable[..., Any] | None = None):
        self.connect_kwargs = dict(connect_kwargs or {})
        self.factory = factory or isolde.connect
        self._session: Any = None
        self._error: Optional[BaseException] = None
        self._ready = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.started_at: Optional[float] = None
        self.ready_after: Optional[float] = None
        self.on_ready: list[Callable[[Any], None]] = []
        self.on_constructed: list[Callable[[Any], None]] = []
        # the Session object exists (its catalog reads the log) a moment after start, seconds
        # before Spark is up: log-only statements and meta-commands use it meanwhile
        self._constructed = threading.Event()
        self._offline: Any = None
        # the warm-up (executor/runtime/warmup.py) is started here, not by ``connect``: never
        # while a statement waits for Spark (it would compete for the two cores), but after it
        self.warm_up = False
        self._warm_up_started = False
        self._waiting = 0

    def start_background(self) -> None:
        with self._lock:
            if self._thread is None:
                # The parser (lark, sqlglot) is imported here, before the thread that imports the
                # executor does: the first statement's syntax check (``isolde.parse`` on this
                # thread) importing lark while that thread was importing it too deadlocked
                # Python's module locks (_DeadlockError on lark.parsers.lalr_analysis, in a
                # fresh clone whose modules were still being compiled).
                import isolde.grammar.parser  # noqa: F401

                self.started_at = time.perf_counter()
                self._thread = threading.Thread(target=self._open, name="isolde-spark-start", daemon=True)
                self._thread.start()

    def _open(self) -> None:
        try:
            session = self.factory(**self.connect_kwargs)
            if hasattr(session, "driver_reads"):
                session.driver_reads = True  # a first look at a table need not wait for Spark
            starter = getattr(session, "start", None)
            if callable(starter):
                starter()  # (returns at once; pyspark imported by then, see Session.start)
            loaded = getattr(session, "wait_loaded", None)
            if callable(loaded):
                loaded()  # its modules imported (~0.6 s, while the JVM boots): usable offline
            self._offline = session
            self._constructed.set()
            for callback in list(self.on_constructed):
                try:
                    callback(session)
                except Exception:
                    pass
            waiter = getattr(session, "wait_ready", None)
            if callable(waiter):
                waiter()
            self._session = session
        except BaseException as exc:  # noqa: BLE001 - reported on first use
            self._error = exc
        finally:
            self._constructed.set()
            self.ready_after = time.perf_counter() - (self.started_at or time.perf_counter())
            self._ready.set()
        if self._session is not None and not self._waiting:
            self.start_warm_up()
        if self._session is not None:
            for callback in list(self.on_ready):
                try:
                    callback(self._session)
                except Exception:
                    pass

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self._session is not None

    def peek(self) -> Any:
        return self._session if self._ready.is_set() else None

    def offline(self, timeout: float = 5.0) -> Any:
        """The Session before Spark is up (its catalog and log-only statements work), or the
        ready one; None if it could not be made within ``timeout``."""
        self.start_background()
        self._constructed.wait(timeout)
        return self._session if self._ready.is_set() and self._session is not None else self._offline

    def start_warm_up(self) -> None:
        """Start the session's warm-up once, if wanted and Spark is up (else at readiness)."""
        session = self._session
        if not self.warm_up or self._warm_up_started or session is None:
            return
        starter = getattr(session, "start_warm_up", None)
        if callable(starter):
            self._warm_up_started = True
            starter()

    def get(self, on_wait: Callable[[float], None] | None = None) -> Any:
        """The ready Session; calls ``on_wait(elapsed)`` about every 0.1 s while Spark starts."""
        self.start_background()
        began = time.perf_counter()
        self._waiting += 1
        try:
            while not self._ready.wait(0.1):
                if on_wait is not None:
                    on_wait(time.perf_counter() - began)
        finally:
            self._waiting -= 1
        if self._error is not None:
            raise self._error
        return self._session

    def close(self) -> None:
        session = self.peek()
        if session is not None and hasattr(session, "close"):
            try:
                session.close()
            except Exception:
                pass


def starting_text(session: Any) -> str:
    """The spinner's words while Spark starts: what the start is doing, when the session says."""
    phase = getattr(session, "start_phase", None) if session is not None else None
    return f"starting Spark: {phase}…" if isinstance(phase, str) and phase else "starting Spark…"


def spark_of(session: Any) -> Any:
    """The SparkSession a Session's statements run on (``engine``: not the public ``spark``,
    whose first use registers the streaming source, ~1 s of a fresh JVM's time)."""
    return getattr(session, "engine", None) or getattr(session, "spark", None)


class Cancelled(Exception):
    pass


def cancel_jobs(session: Any) -> None:
    """Ctrl-C: ``session.cancel()`` (the statement's job group), and, because a query's rows
    are collected after ``execute`` returned (outside its job group), every job of this
    process's SparkContext -- the REPL runs one statement at a time."""
    try:
        session.cancel()
    except Exception:
        pass
    try:
        spark = spark_of(session) if getattr(session, "ready", False) else None
        if spark is not None:
            spark.sparkContext.cancelAllJobs()
    except Exception:
        pass


class Rows:
    """A query result cut to the REPL's ``max_rows`` (``truncated`` when more rows exist)."""

    def __init__(self, columns: list, rows: list, message: Optional[str] = None, truncated: bool = False):
        self.columns = columns
        self.rows = rows
        self.message = message
        self.truncated = truncated


def materialize(result: Any, max_rows: int = 0) -> Any:
    """Collect a query's rows now (a lazy result runs its Spark job on first ``rows``), so
    the job runs where progress is shown and Ctrl-C can cancel it. With ``max_rows``, a
    result backed by a DataFrame fetches at most max_rows + 1 rows."""
    if result is None or formatting.is_commit(result) or not hasattr(result, "rows"):
        return result
    df = getattr(result, "df", None)
    if max_rows and df is not None and hasattr(df, "limit"):
        try:
            rows = [tuple(r) for r in df.limit(max_rows + 1).collect()]
        except Exception:
            result.rows  # noqa: B018 - re-raises the error the facade's way (translated)
            return result
        return Rows(list(result.columns), rows[:max_rows], getattr(result, "message", None), len(rows) > max_rows)
    result.rows  # noqa: B018 - the property does the work
    return result


class Runner:
    """Runs statement text and writes what happened.

    ``interactive``: worker thread + Ctrl-C cancel + progress + pager + confirmation.
    ``on_error``: 'stop' (default) or 'continue' between statements of one text."""

    def __init__(self, holder: SessionHolder, settings: Settings, out: TextIO | None = None,
                 err: TextIO | None = None, *, interactive: bool = False, color: bool = False,
                 on_error: str = "stop", confirm: Callable[[str], bool] | None = None,
                 progress: bool = False, pager: bool = False, on_ddl: Callable[[], None] | None = None):
        self.holder = holder
        self.settings = settings
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.interactive = interactive
        self.color = color
        self.on_error = on_error
        self.confirm = confirm
        self.progress = progress
        self.pager = pager
        self.on_ddl = on_ddl
        self.failures = 0
        self.echo_statements = False  # scripts: print each statement before its result (--echo)
        self.debug = bool(os.environ.get("ISOLDE_DEBUG"))

    # ------------------------------------------------------------------ output

    def echo(self, text: str = "", err: bool = False) -> None:
        stream = self.err if err else self.out
        stream.write(text + "\n")
        stream.flush()

    def show_error(self, exc: BaseException, where: str = "") -> None:
        text = formatting.format_error(exc, color=self.color, where=where, debug=self.debug)
        self.echo(text, err=not self.interactive)

    def show_error_text(self, text: str) -> None:
        self.echo(formatting._paint(text, formatting.BOLD_RED, self.color), err=not self.interactive)

    def _page(self, text: str) -> None:
        if self.pager and self.settings.pager and self.out.isatty():
            if paging.should_page(text, shutil.get_terminal_size((80, 24)).lines):
                try:
                    env = dict(os.environ)
                    env.setdefault("LESS", "")
                    subprocess.run(shlex.split(self.settings.pager), input=text + "\n", text=True, env=env,
                                   check=False)
                    return
                except (OSError, ValueError):
                    pass
        self.echo(text)

    def width(self) -> int | None:
        """The terminal's width to fit wide results into (interactive, ``fit_width``), else None."""
        if not (self.interactive and self.settings.fit_width):
            return None
        return shutil.get_terminal_size((80, 24)).columns

    def show_result(self, result: Any, elapsed: float | None, waited: float | None = None) -> None:
        fmt = self.settings.effective_format
        timing = elapsed if (self.settings.timing and elapsed is not None) else None
        width = self.width()
        body, status = formatting.format_result(result, fmt, timing, footer=True, waited=waited, width=width)
        if body and fmt == "table" and width and getattr(result, "columns", None) and not formatting.is_commit(result):
            def vertical() -> str:
                return formatting.format_result(result, "vertical", None, footer=False)[0]

            body = paging.terminal_body(body, vertical, width, shutil.get_terminal_size((80, 24)).lines)
        if body:
            self._page(body)
        if getattr(result, "truncated", False):
            note = (f"(only the first {len(result.rows)} rows are shown: max_rows in {config_path()}; "
                    f"use LIMIT, or -e / -f for everything)")
            self.echo(formatting._paint(note, formatting.YELLOW, self.color))
        if status:
            # csv/json bodies stay machine-readable: their status lines go to stderr off a terminal
            to_err = not self.interactive and fmt in ("csv", "json")
            paint = formatting.GREEN if formatting.is_commit(result) else formatting.DIM
            self.echo(formatting._paint(status, paint, self.color), err=to_err)

    # ------------------------------------------------------------------ running

    def session(self) -> Any:
        status = StatusLine(self.out) if (self.interactive and self.progress) else None

        def waiting(elapsed: float) -> None:
            if status is not None and elapsed > 0.2:
                status.show(spinner_frame(elapsed, starting_text(self.holder.offline(timeout=0))))

        try:
            return self.holder.get(on_wait=waiting)
        finally:
            if status is not None:
                status.clear()

    def catalog_session(self) -> Any:
        """A Session for the log and the warehouse (``\\dt``, ``\\d``): the one Spark is still
        starting for, if Spark is not up yet."""
        offline = getattr(self.holder, "offline", None)
        session = offline() if callable(offline) and not self.holder.ready else None
        return session if session is not None else self.session()

    def _without_spark(self, sql: str) -> Any:
        """The not-yet-ready Session if ``sql`` runs without Spark, else None."""
        offline = getattr(self.holder, "offline", None)
        session = offline() if callable(offline) else None
        needs = getattr(session, "needs_spark", None)
        if session is None or not callable(needs):
            return None
        try:
            return None if needs(sql) else session
        except Exception:  # noqa: BLE001 - the statement runs the usual way and reports its own error
            return None

    def run_text(self, text: str, source: str | None = None) -> bool:
        """Run every statement of ``text``. Returns True when all succeeded."""
        try:
            pieces = statements.split_statements(text)
        except Exception as exc:  # a splitter error is reported like a statement error
            self.failures += 1
            self.show_error(exc, where=f"{source}: " if source else "")
            return False
        if len(pieces) > 1 and not self._syntax_checked(pieces, text, source):
            return False
        ok = True
        for piece in pieces:
            if not self.run_statement(piece.text, line=getattr(piece, "line", 1), source=source,
                                      column=_column(text, piece), script=text):
                ok = False
                if self.on_error == "stop":
                    break
        return ok

    def _syntax_checked(self, pieces, text: str, source: str | None) -> bool:
        """Parse every statement before running any: a script with a syntax error in its third
        statement must not commit the first two. Shows every syntax error (by line); False if any."""
        found = []
        for piece in pieces:
            try:
                isolde.parse(piece.text)
            except isolde.errors.ParseError as exc:
                found.append(script_parse_error(exc, piece.text, getattr(piece, "line", 1), _column(text, piece), text)
                             if exc.line else exc)
        for exc in found:
            self.failures += 1
            self.show_error(exc, where=f"{source}: " if source else "")
        if found:
            many = f"{len(found)} syntax errors" if len(found) > 1 else "a syntax error"
            self.echo(f"Nothing was run: {many} in {len(pieces)} statements.", err=not self.interactive)
        return not found

    def run_statement(self, sql: str, line: int = 1, source: str | None = None, column: int = 1,
                      script: str | None = None) -> bool:
        where = ""
        try:
            if self.interactive and self.confirm is not None and self.settings.confirm_destructive:
                kind = statements.destructive_without_where(sql)
                if kind is not None:
                    question = (f"{kind} without WHERE changes every row of the table. Run it anyway?")
                    if not self.confirm(question):
                        self.echo("Not run.")
                        return True
            if self.echo_statements:
                lines = sql.splitlines() or [""]
                shown = ["isolde> " + lines[0]] + ["     -> " + ln for ln in lines[1:]]
                self.echo("\n" + "\n".join(shown) + ";")
            # the statement's time includes any wait for Spark to start (said apart)
            began = time.perf_counter()
            was_ready = self.holder.ready
            session = None
            if not was_ready:
                isolde.parse(sql)  # a syntax error is shown at once, not after Spark has started
                session = self._without_spark(sql)  # DESCRIBE, SHOW TBLPROPERTIES, SET ...: no wait
                was_ready = session is not None
            if session is None:
                session = self.session()
            waited = None if was_ready else time.perf_counter() - began
            try:
                result = self._execute(session, sql)
            finally:
                self.holder.start_warm_up()  # after the first statement, if it waited for Spark
            elapsed = time.perf_counter() - began
            self.show_result(result, elapsed, waited)
            first = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            if first in DDL_WORDS and self.on_ddl is not None:
                self.on_ddl()
            return True
        except Cancelled:
            self.echo("Cancelled.", err=not self.interactive)
            return False
        except KeyboardInterrupt:
            self.echo("Cancelled.", err=not self.interactive)
            if not self.interactive:
                raise
            return False
        except BaseException as exc:  # noqa: BLE001 - the loop never dies
            if isinstance(exc, SystemExit):
                raise
            self.failures += 1
            if source is not None:
                if isinstance(exc, isolde.errors.ParseError) and exc.line:
                    exc = script_parse_error(exc, sql, line, column, script)
                    where = f"{source}: "
                else:
                    err_line = line
                    if getattr(exc, "statement_line", None):
                        err_line = line + int(exc.statement_line) - 1
                    where = f"{source}, line {err_line}: "
            self.show_error(exc, where=where)
            return False

    def _execute(self, session: Any, sql: str) -> Any:
        if not self.interactive:
            return materialize(session.execute(sql))
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["result"] = materialize(session.execute(sql), self.settings.max_rows)
            except BaseException as exc:  # noqa: BLE001
                box["error"] = exc

        worker = threading.Thread(target=work, name="isolde-statement", daemon=True)
        status = StatusLine(self.out, shutil.get_terminal_size((80, 24)).columns) if self.progress else None
        spark = None
        cancelled = False
        started = False
        began = time.perf_counter()
        try:
            while not started or worker.is_alive():
                # a Ctrl-C at any point once the statement may be running cancels it: one that
                # came between the start and the wait must not leave it running unseen
                try:
                    if not started:
                        started = True
                        worker.start()
                        continue
                    worker.join(0.1)
                    elapsed = time.perf_counter() - began
                    after = self.settings.progress_after
                    if status is not None and after >= 0 and elapsed > after and worker.is_alive():
                        if spark is None:
                            spark = spark_of(session)
                        stages = read_stages(spark) if spark is not None else []
                        status.show(render_progress(stages, elapsed, status.width))
                except KeyboardInterrupt:
                    if cancelled:
                        raise Cancelled() from None  # second Ctrl-C: stop waiting
                    cancelled = True
                    if status is not None:
                        status.clear()
                    self.echo("Cancelling… (Ctrl-C again to stop waiting)")
                    cancel_jobs(session)
        finally:
            if status is not None:
                status.clear()
        if cancelled:
            raise Cancelled()
        if "error" in box:
            raise box["error"]
        return box.get("result")


def _column(text: str, piece) -> int:
    """The column (1-based) a split statement starts at in its script."""
    start = getattr(piece, "start", None)
    if isinstance(start, int) and 0 <= start <= len(text):
        return start - (text.rfind("\n", 0, start) + 1) + 1
    return 1


def script_parse_error(exc: Any, statement: str, line: int, column: int = 1, script: str | None = None) -> Any:
    """The ParseError of a statement that starts at (``line``, ``column``) of a script,
    re-addressed to script coordinates (line, column and the caret excerpt's gutter)."""
    from isolde import errors

    try:
        abs_line = line + exc.line - 1
        abs_col = exc.column + (column - 1 if exc.line == 1 else 0)
        width = len(exc.token) if getattr(exc, "token", None) else 1
        padded = script if script is not None else "\n" * (abs_line - exc.line) + " " * (column - 1) + statement
        excerpt = errors.caret_excerpt(padded, abs_line, abs_col, width) if exc.excerpt else ""
        return errors.ParseError(exc.description, line=abs_line, column=abs_col, token=exc.token,
                                 expected=exc.expected, excerpt=excerpt, statement_line=line,
                                 error_class=exc.error_class, sqlstate=exc.sqlstate)
    except Exception:
        return exc
