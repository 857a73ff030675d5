"""The torture harness (issue 25): short runs in ``make test``, long ones (marker ``torture``,
skipped by tests/conftest.py unless ``-m`` names torture: ``make torture``). Every run adds a row to the summary table
printed at the end of the session: histories checked, statements committed, conflicts by
class, reader checks, invariant violations (must be 0)."""

from __future__ import annotations

import os
import sys
from collections import Counter

import pytest

sys.path.insert(0, os.path.dirname(__file__))

SUMMARY: list = []  # one dict per history checked
COUNTS: Counter = Counter()  # other figures of the run: "kills survived", "fuzz inputs tried", "errors: <class>"


# the session-scoped `spark` fixture (the run's one SparkSession) is tests/conftest.py's


@pytest.fixture
def summary():
    return SUMMARY


@pytest.fixture
def counts():
    """A Counter any torture test adds its figures to (``counts["kills survived"] += 1``); the
    summary table prints them all."""
    return COUNTS


def pytest_terminal_summary(terminalreporter):
    if not SUMMARY and not COUNTS:
        return
    tr = terminalreporter
    tr.section("torture summary")
    for key, value in sorted(COUNTS.items()):
        tr.write_line(f"{key:<52} {value:>10}")
    if not SUMMARY:
        return
    tr.write_line(f"{'history':<52} {'seconds':>7} {'commits':>7} {'conflicts':>9} {'reads':>6} {'violations':>10}")
    conflicts: Counter = Counter()
    for row in SUMMARY:
        conflicts.update(row["conflicts"])
        tr.write_line(f"{row['name']:<52} {row['seconds']:>7.1f} {row['committed']:>7} "
                      f"{sum(row['conflicts'].values()):>9} {row['reads']:>6} {len(row['violations']):>10}")
    tr.write_line(f"{len(SUMMARY)} histories, {sum(r['committed'] for r in SUMMARY)} statements committed, "
                  f"{sum(r['reads'] for r in SUMMARY)} reader checks, "
                  f"{sum(len(r['violations']) for r in SUMMARY)} invariant violations; conflicts by class: "
                  + (", ".join(f"{k} {v}" for k, v in sorted(conflicts.items())) or "none"))
