"""The reference's own conflict suites, run on both engines.

The scenarios of Delta Lake's OptimisticTransactionLegacyTests, OptimizeConflictSuite,
FeatureEnablementConcurrencySuite, RowTrackingConflictResolutionSuite and
IdentityColumnConflictSuite (tests/helpers/conflict_scenarios.py) run on Delta-Spark, T1 held at
its commit by Delta's own phase-locking observer (tests/helpers/delta_interleave.py), and on
isolde through ``prepare()`` / ``commit()``. Each asserts the outcome (committed or the exact
conflict class) and the final rows. Where isolde is strictly more precise (row level, DV
carry-over through OPTIMIZE) the scenario says so with a per-engine expectation and its
``reason``; where isolde is stricter than Delta it is an isolde bug: xfail(strict=True).
"""

from __future__ import annotations

import pytest

from tests.helpers.conflict_scenarios import NOT_ON_ISOLDE, SAME, SCENARIOS, run_delta, run_isolde


def _params(engine: str):
    out = []
    for sc in SCENARIOS:
        marks = [pytest.mark.torture] if sc.long else []
        if engine == "isolde" and sc.name in NOT_ON_ISOLDE:
            marks.append(pytest.mark.skip(reason=NOT_ON_ISOLDE[sc.name]))
        if engine == "isolde" and sc.isolde_bug:
            marks.append(pytest.mark.xfail(strict=True, reason="isolde bug: " + sc.isolde_bug))
        out.append(pytest.param(sc, id=sc.name, marks=marks))
    return out


@pytest.mark.parametrize("sc", _params("delta"))
def test_delta_spark(spark, tmp_path, sc):
    """Delta-Spark 4.4 gives the outcome and rows the table records (the reference's answer)."""
    result = run_delta(spark, sc, str(tmp_path / "delta_t"))
    assert (result.error, result.rows) == (sc.expect, list(sc.rows))


@pytest.mark.parametrize("sc", _params("isolde"))
def test_isolde(spark, session, table_path, sc):
    """isolde gives Delta's answer, or its own documented, strictly more precise one."""
    result = run_isolde(session, spark, sc, path_of=table_path)
    assert (result.error, result.rows) == (sc.isolde_outcome(), list(sc.isolde_final_rows()))


def test_the_table_is_well_formed():
    """Every departure has a reason, every scenario a distinct name and at least one winner."""
    names = [sc.name for sc in SCENARIOS]
    assert len(names) == len(set(names))
    for sc in SCENARIOS:
        assert sc.winners, sc.name
        departs = sc.isolde_expect is not SAME or sc.isolde_rows is not SAME
        assert bool(sc.reason) == departs, f"{sc.name}: a per-engine expectation needs a reason, and only then"
        assert not (departs and sc.isolde_bug), f"{sc.name}: a departure is either documented or a bug"
