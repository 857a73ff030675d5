"""Model-checked random test of the conflict checkers at the log level (issue 19).

Thousands of small histories (2-4 concurrent single-row UPDATE / DELETE / MERGE / INSERT
statements, random commit orders, some statements starting after others committed) run
against real Delta logs with row-level concurrency on (``isolde.rowLevelConcurrency = auto``)
and off (file-level rules), under Serializable and WriteSerializable. ``row_model.py`` runs
and judges them:

* every history must equal a serial execution of its committed statements, in log order
  (Serializable) or in some order (WriteSerializable): the final rows (pyarrow with deletion
  vectors, and delta-rs) and every statement's result (rows deleted or updated, rows added);
* a history the checker refused something in is a *false conflict* when, with every
  statement forced through, it would still have been such a serial execution.

With file-level rules about two thirds of the refused histories are false conflicts; with
row level on at most 1 in 10 may be. ``pytest -s`` prints the counts per level and mode.

A failure names the seed; replay one history with
``cd tests && python -c "from log.row_model import replay; print(replay(SEED, LEVEL, MODE, '/tmp'))"``
(add ``reuse=0.4`` for the collision-heavy batch).
"""

from __future__ import annotations

import pytest

from . import row_model as M
from .row_model import MERGE, DELETE, INSERT, SERIALIZABLE, UPDATE, WRITE_SERIALIZABLE, History, Stmt

FAST_HISTORIES = 75  # per level and mode: 300 in all, a few seconds
SLOW_HISTORIES = 600  # per level and mode, uniform keys: 2,400 ...
SLOW_COLLIDING = 250  # ... and collision-heavy (reuse 0.4): 1,000 more
COLLIDING = {"reuse": 0.4}
MAX_ROW_LEVEL_FALSE = 0.10
MIN_REFUSED = 5  # fewer refused histories than this and a ratio says nothing

_tallies: dict = {}


def _tally(tmp_path_factory, level: str, mode: str, count: int, base: int, **generator) -> M.Tally:
    """The judged histories of one (level, mode), computed once per session."""
    key = (level, mode, count, base, tuple(sorted(generator.items())))
    if key not in _tallies:
        workdir = str(tmp_path_factory.mktemp(f"model-{level}-{mode}"))
        tally = _tallies[key] = M.check_histories(level, mode, M.seeds(count, base), workdir, **generator)
        note = f" ({', '.join(f'{k}={v}' for k, v in generator.items())})" if generator else ""
        print(f"\n[row model, seeds {base}xxxxxx{note}] {tally.summary()}")
    return _tallies[key]


def _replay_hint(tally: M.Tally, seed: int, generator: dict) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in generator.items())
    return (f"replay: cd tests && python -c \"from log.row_model import replay; "
            f"print(replay({seed}, {tally.level!r}, {tally.mode!r}, '/tmp'{extra}))\"")


def _assert_no_violations(tally: M.Tally, generator: dict) -> None:
    if tally.violations:
        shown = "\n\n".join(f"{text}\n  {_replay_hint(tally, seed, generator)}" for seed, text in tally.violations[:3])
        pytest.fail(f"{len(tally.violations)} of {tally.histories} histories under {tally.level}, "
                    f"isolde.rowLevelConcurrency={tally.mode} are not serialisable (first {min(3, len(tally.violations))}):"
                    f"\n\n{shown}", pytrace=False)


def _assert_false_conflicts(row: M.Tally, file: M.Tally) -> None:
    assert row.refused >= MIN_REFUSED and file.refused >= MIN_REFUSED, (
        f"too few refused histories to measure false conflicts: {row.summary()}\n{file.summary()}")
    examples = "\n\n".join(text for _, text in row.false_examples)
    assert row.ratio <= MAX_ROW_LEVEL_FALSE, (
        f"row level refused {row.false_conflicts} of {row.refused} histories needlessly ({row.ratio:.1%}; at most "
        f"{MAX_ROW_LEVEL_FALSE:.0%} allowed):\n{row.summary()}\n\n{examples}")
    # the measurement discriminates: the file-level rules refuse needlessly more often
    assert file.ratio > row.ratio, f"file level is not worse than row level?\n{row.summary()}\n{file.summary()}"


# --------------------------------------------------------------------------- the model itself


def _history(files, stmts, schedule) -> History:
    return History(0, tuple(tuple(f) for f in files), tuple(Stmt(i, kind, key, 1 << i) for i, (kind, key) in
                                                            enumerate(stmts)), tuple(schedule))


SAME_SNAPSHOT_01 = (("start", 0), ("start", 1), ("commit", 0), ("commit", 1))


def test_two_updates_of_one_row_forced_through_are_not_serialisable():
    h = _history([range(6)], [(UPDATE, 2), (UPDATE, 2)], SAME_SNAPSHOT_01)
    forced = M.simulate(h)
    assert forced.final.count((2, 1)) == 1 and forced.final.count((2, 2)) == 1  # two rows where one was
    for level in M.LEVELS:
        assert M.serial_order(forced.final, forced.results, h.initial_rows, [h.stmts[0], h.stmts[1]], level) is None
        assert M.serial_order(forced.final, None, h.initial_rows, [h.stmts[0], h.stmts[1]], level) is None


def test_updates_of_two_rows_forced_through_are_serialisable():
    h = _history([range(6)], [(UPDATE, 2), (UPDATE, 3)], SAME_SNAPSHOT_01)
    forced = M.simulate(h)
    assert forced.final == sorted([(i, 0) for i in range(6) if i not in (2, 3)] + [(2, 1), (3, 2)])
    assert M.serial_order(forced.final, forced.results, h.initial_rows, list(h.stmts), SERIALIZABLE) == list(h.stmts)


def test_the_statements_results_count():
    # both DELETEs report one deleted row: no serial order does, though the rows agree
    h = _history([range(6)], [(DELETE, 2), (DELETE, 2)], SAME_SNAPSHOT_01)
    forced = M.simulate(h)
    assert forced.results == {0: (1, 0), 1: (1, 0)}
    assert M.serial_order(forced.final, None, h.initial_rows, list(h.stmts), SERIALIZABLE) is not None
    assert M.serial_order(forced.final, forced.results, h.initial_rows, list(h.stmts), WRITE_SERIALIZABLE) is None
    # MERGE that updated (0, 0) -> (1, 1) is not a MERGE that inserted (1, 1), though the rows agree
    h = _history([range(6)], [(DELETE, 1), (MERGE, 1)], SAME_SNAPSHOT_01)
    forced = M.simulate(h)
    assert forced.results == {0: (1, 0), 1: (1, 1)}
    assert M.serial_order(forced.final, None, h.initial_rows, list(h.stmts), SERIALIZABLE) is not None
    assert M.serial_order(forced.final, forced.results, h.initial_rows, list(h.stmts), SERIALIZABLE) is None


def test_write_serializable_may_reorder_a_blind_insert():
    # UPDATE id = 2 commits after an INSERT (2, ...) it did not see: only UPDATE-then-INSERT explains it
    h = _history([range(6)], [(UPDATE, 2), (INSERT, 2)], (("start", 0), ("start", 1), ("commit", 1), ("commit", 0)))
    forced = M.simulate(h)
    stmts = [h.stmts[i] for i in forced.log]
    assert [s.idx for s in stmts] == [1, 0]
    assert M.serial_order(forced.final, forced.results, h.initial_rows, stmts, SERIALIZABLE) is None
    assert [s.idx for s in M.serial_order(forced.final, forced.results, h.initial_rows, stmts,
                                          WRITE_SERIALIZABLE)] == [0, 1]


def test_histories_are_reproducible():
    assert M.generate_history(12345) == M.generate_history(12345)
    assert M.generate_history(12345, **COLLIDING) == M.generate_history(12345, **COLLIDING)
    kinds = {s.kind for seed in M.seeds(200) for s in M.generate_history(seed).stmts}
    assert kinds == set(M.KINDS)
    schedules = [M.generate_history(seed).schedule for seed in M.seeds(200)]
    late = [s for s in schedules if any(ev == "start" for ev, _ in s[[ev for ev, _ in s].index("commit"):])]
    assert 20 <= len(late) <= 100, "some statements (not most) start after another committed"


# --------------------------------------------------------------------------- hand-made histories, real logs


@pytest.mark.parametrize("level", M.LEVELS)
def test_two_rows_of_one_file_file_level_refuses_row_level_does_not(tmp_path, level):
    h = _history([range(6)], [(UPDATE, 2), (UPDATE, 3)], SAME_SNAPSHOT_01)
    row = M.run_history(h, level, "auto", str(tmp_path / "row"))
    assert row.committed == [0, 1] and not row.refused
    assert M.judge(h, level, row).violations == []
    file = M.run_history(h, level, "off", str(tmp_path / "file"))
    assert file.committed == [0] and list(file.refused) == [1]
    assert file.refused[1].startswith("ConcurrentDeleteReadException")
    verdict = M.judge(h, level, file)
    assert verdict.violations == [] and verdict.false_conflict is True


@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("level", M.LEVELS)
def test_one_row_updated_twice_is_refused(tmp_path, level, mode):
    h = _history([range(3), range(3, 6)], [(UPDATE, 4), (MERGE, 4)], SAME_SNAPSHOT_01)
    out = M.run_history(h, level, mode, str(tmp_path / "t"))
    assert out.committed == [0] and list(out.refused) == [1]
    verdict = M.judge(h, level, out)
    assert verdict.violations == [] and verdict.false_conflict is False


@pytest.mark.parametrize("level", M.LEVELS)
def test_the_model_catches_a_checker_that_lets_everything_through(tmp_path, monkeypatch, level):
    from isolde.executor.txn.conflicts import ConflictChecker
    from isolde.executor.txn.row_level import RowLevelChecker

    monkeypatch.setattr(ConflictChecker, "check", lambda self: None)
    monkeypatch.setattr(RowLevelChecker, "check", lambda self: None)  # deletion vectors still rebased
    tally = M.check_histories(level, "auto", M.seeds(40, 21), str(tmp_path), delta_rs=False, **COLLIDING)
    assert tally.refused == 0
    assert len(tally.violations) >= 5
    assert all("VIOLATION: the checker let through a history that is not" in text for _, text in tally.violations)


# --------------------------------------------------------------------------- random histories


@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("level", M.LEVELS)
def test_random_histories_are_serialisable(tmp_path_factory, level, mode):
    _assert_no_violations(_tally(tmp_path_factory, level, mode, FAST_HISTORIES, 19), {})


@pytest.mark.parametrize("level", M.LEVELS)
def test_random_histories_row_level_false_conflicts(tmp_path_factory, level):
    row = _tally(tmp_path_factory, level, "auto", FAST_HISTORIES, 19)
    file = _tally(tmp_path_factory, level, "off", FAST_HISTORIES, 19)
    _assert_false_conflicts(row, file)


@pytest.mark.slow
@pytest.mark.parametrize("generator", [{}, COLLIDING], ids=["uniform-keys", "colliding-keys"])
@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("level", M.LEVELS)
def test_thousands_of_histories_are_serialisable(tmp_path_factory, level, mode, generator):
    count = SLOW_COLLIDING if generator else SLOW_HISTORIES
    _assert_no_violations(_tally(tmp_path_factory, level, mode, count, 20, **generator), generator)


@pytest.mark.slow
@pytest.mark.parametrize("generator", [{}, COLLIDING], ids=["uniform-keys", "colliding-keys"])
@pytest.mark.parametrize("level", M.LEVELS)
def test_thousands_of_histories_row_level_false_conflicts(tmp_path_factory, level, generator):
    count = SLOW_COLLIDING if generator else SLOW_HISTORIES
    row = _tally(tmp_path_factory, level, "auto", count, 20, **generator)
    file = _tally(tmp_path_factory, level, "off", count, 20, **generator)
    _assert_false_conflicts(row, file)
