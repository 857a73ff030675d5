"""The per-statement phase clock (executor/runtime/phases.py): no Spark."""

from __future__ import annotations

import threading
import time

from isolde.executor.runtime import phases


def test_phases_add_up_and_plan_is_the_rest():
    with phases.statement_clock() as clock:
        with phases.phase("find"):
            time.sleep(0.02)
        with phases.phase("find"):  # a phase met twice is summed
            time.sleep(0.01)
        time.sleep(0.02)  # unclaimed: plan
        with phases.phase("commit"):
            time.sleep(0.01)
        ms = clock.milliseconds()
    assert list(ms) == ["plan", "find", "commit"]  # in ORDER, only the phases met
    assert ms["find"] >= 30 and ms["commit"] >= 10 and ms["plan"] >= 20
    assert ms["find"] < 200


def test_nested_phase_is_charged_to_the_outer_one():
    with phases.statement_clock() as clock:
        with phases.phase("write"):
            with phases.phase("stats"):
                time.sleep(0.02)
        ms = clock.milliseconds()
    assert "stats" not in ms and ms["write"] >= 20


def test_no_clock_outside_a_statement_and_in_other_threads():
    with phases.phase("find"):  # outside a statement: nothing happens, nothing raises
        pass
    seen = []
    with phases.statement_clock() as clock:
        def worker():
            with phases.phase("write"):
                time.sleep(0.01)
            seen.append(True)

        t = threading.Thread(target=worker)
        t.start()
        t.join()
        ms = clock.milliseconds()
    assert seen == [True] and "write" not in ms


def test_clocks_nest_and_restore():
    with phases.statement_clock() as outer:
        with phases.statement_clock() as inner:
            with phases.phase("dv"):
                pass
        with phases.phase("find"):
            pass
    assert "dv" in inner.milliseconds() and "dv" not in outer.milliseconds()
    assert "find" in outer.milliseconds()
