"""When the REPL's warm-up starts (issue 55, item 6): never while a statement waits for Spark
(both would share two cores and the statement would wait for the warm-up's cancellation),
but after that statement; at once when nobody waits. And the not-yet-ready Session is handed
out for log-only statements. A stand-in session: no JVM."""

from __future__ import annotations

import io
import threading
import time

import pytest

from isolde.repl.config import Settings
from isolde.repl.runner import Runner, SessionHolder, starting_text


class Result:
    columns = ["x"]
    rows = [(1,)]


class GatedSession:
    """Spark is 'up' when the test opens the gate; records when the warm-up was started."""

    def __init__(self, log_only=("DESCRIBE",)):
        self.gate = threading.Event()
        self.events: list[str] = []
        self.log_only = log_only

    def start(self):
        return self

    def wait_loaded(self, timeout=None):
        return True

    def wait_ready(self, timeout=None):
        self.gate.wait(30)
        return True

    def start_warm_up(self):
        self.events.append("warm-up")

    def needs_spark(self, sql):
        return not sql.lstrip().upper().startswith(self.log_only)

    def execute(self, sql):
        self.events.append(sql)
        return Result()

    def cancel(self):
        pass


def _holder(session, warm_up=True):
    holder = SessionHolder({}, factory=lambda **kw: session)
    holder.warm_up = warm_up
    return holder


def test_warm_up_starts_at_readiness_when_nobody_waits():
    session = GatedSession()
    holder = _holder(session)
    holder.start_background()
    session.gate.set()
    deadline = time.monotonic() + 10
    while not session.events and time.monotonic() < deadline:  # no statement ever asks for Spark
        time.sleep(0.01)
    assert session.events == ["warm-up"] and holder.ready


def test_warm_up_waits_for_the_statement_that_waited_for_spark():
    session = GatedSession()
    holder = _holder(session)
    out = io.StringIO()
    runner = Runner(holder, Settings(), out, out, interactive=False)
    holder.start_background()
    threading.Timer(0.3, session.gate.set).start()  # Spark comes up while the statement waits
    assert runner.run_text("SELECT 1;")
    assert session.events == ["SELECT 1", "warm-up"]


def test_no_warm_up_unless_configured():
    session = GatedSession()
    holder = _holder(session, warm_up=False)
    runner = Runner(holder, Settings(), io.StringIO(), io.StringIO(), interactive=False)
    holder.start_background()
    session.gate.set()
    assert runner.run_text("SELECT 1; SELECT 2;")
    assert "warm-up" not in session.events


def test_a_log_only_statement_runs_before_spark_is_up():
    session = GatedSession()
    holder = _holder(session)
    out = io.StringIO()
    runner = Runner(holder, Settings(), out, out, interactive=False)
    holder.start_background()
    assert runner.run_text("DESCRIBE HISTORY t;")  # the gate is still closed: Spark never came up
    assert session.events == ["DESCRIBE HISTORY t"] and not holder.ready
    session.gate.set()
    holder.get()


def test_the_offline_session_is_the_constructed_one():
    session = GatedSession()
    holder = _holder(session, warm_up=False)
    assert holder.offline(timeout=5) is session and not holder.ready
    session.gate.set()
    assert holder.get() is session and holder.offline() is session


class Starting:
    def __init__(self, phase):
        self.start_phase = phase


@pytest.mark.parametrize("session, text", [
    (None, "starting Spark…"),                                    # not even constructed yet
    (Starting(None), "starting Spark…"),
    (Starting("creating the SparkContext"), "starting Spark: creating the SparkContext…"),
    (object(), "starting Spark…"),                                # a stand-in without phases
])
def test_the_spinner_says_what_the_start_is_doing(session, text):
    assert starting_text(session) == text
