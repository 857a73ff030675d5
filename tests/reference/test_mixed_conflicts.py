"""The reference's conflict suites with the engines mixed: one engine's T1 loses (or not) to the
other engine's winners, in one Delta session (isolde connected to it).

The scenarios of tests/helpers/conflict_scenarios.py again, T1 held between its read and its
commit as in test_conflict_suites.py, but the winners written by the other engine:

* Delta's T1 under Delta's own phase-locking observer (OPTIMIZE included: the loser a process
  race cannot hold), isolde's statements committing meanwhile. Delta's checker judges the actions
  isolde wrote: its outcome and rows must be the ones it gives against its own winners.
* isolde's T1 prepared, Delta-Spark's statements committing meanwhile. isolde's checker judges
  the actions Delta wrote: the outcome and rows isolde gives against its own winners.

A difference from those would mean one engine writes actions the other reads differently: a
lost update or a resurrected row in a mixed pipeline.
"""

from __future__ import annotations

import pytest

from tests.helpers.conflict_scenarios import (MIXED, NOT_ON_ISOLDE, SCENARIOS, run_delta_loses_to_isolde,
                                              run_isolde_loses_to_delta)


def _params(t1_engine: str):
    out = []
    for sc in SCENARIOS:
        marks = [] if sc.name in MIXED.core else [pytest.mark.torture]
        if t1_engine == "isolde" and sc.name in NOT_ON_ISOLDE:
            marks.append(pytest.mark.skip(reason=NOT_ON_ISOLDE[sc.name]))
        if t1_engine == "delta" and sc.name in MIXED.isolde_winner_not_run:
            marks.append(pytest.mark.skip(reason=MIXED.isolde_winner_not_run[sc.name]))
        out.append(pytest.param(sc, id=sc.name, marks=marks))
    return out


@pytest.mark.parametrize("sc", _params("delta"))
def test_delta_loses_to_isolde(spark, session, tmp_path, sc):
    result = run_delta_loses_to_isolde(spark, session, sc, str(tmp_path / "delta_t"))
    expected = MIXED.delta_t1.get(sc.name, (sc.expect, sc.rows))
    assert (result.error, result.rows) == (expected[0], list(expected[1]))


@pytest.mark.parametrize("sc", _params("isolde"))
def test_isolde_loses_to_delta(spark, session, table_path, sc):
    result = run_isolde_loses_to_delta(session, spark, sc, path_of=table_path)
    expected = MIXED.isolde_t1.get(sc.name, (sc.isolde_outcome(), sc.isolde_final_rows()))
    assert (result.error, result.rows) == (expected[0], list(expected[1]))


def test_every_mixed_difference_has_a_reason():
    for side, table in (("delta_t1", MIXED.delta_t1), ("isolde_t1", MIXED.isolde_t1)):
        for name in table:
            assert MIXED.reasons.get(f"{side}/{name}"), f"{side}/{name} needs its reason"
    assert set(MIXED.reasons) == {f"{side}/{n}" for side, t in (("delta_t1", MIXED.delta_t1),
                                                                 ("isolde_t1", MIXED.isolde_t1)) for n in t}
