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

Histories with OPTIMIZE (``optimize=...``: the table starts with 2-3 files, and some histories
hold one OPTIMIZE compacting every live file into one, as executor/jobs/optimize.py does at
the log level) are judged the same way, the OPTIMIZE a statement that changes no row. With
deletion vectors carried through the compaction (executor/txn/compaction.py) neither side
may lose to the other: no OPTIMIZE refused by an UPDATE / DELETE / MERGE winner, no DML
statement refused by an OPTIMIZE winner, row level or file level.

A failure names the seed; replay one history with
``cd tests && python -c "from log.row_model import replay; print(replay(SEED, LEVEL, MODE, '/tmp'))"``
(add ``reuse=0.4`` for the collision-heavy batch, ``optimize=0.3`` for the OPTIMIZE ones).
"""

from __future__ import annotations

import pytest

from . import row_model as M
from .row_model import (MERGE, DELETE, INSERT, OPTIMIZE, SERIALIZABLE, UPDATE, WRITE_SERIALIZABLE, History,
                        Stmt)

FAST_HISTORIES = 75  # per level and mode: 300 in all, a few seconds
SLOW_HISTORIES = 600  # per level and mode, uniform keys: 2,400 ...
SLOW_COLLIDING = 250  # ... and collision-heavy (reuse 0.4): 1,000 more
COLLIDING = {"reuse": 0.4}
OPTIMIZING = {"optimize": 0.3}  # about 3 histories in 10 hold an OPTIMIZE
FAST_OPTIMIZING = 60  # per level and mode
SLOW_OPTIMIZING = 400  # per level and mode, uniform keys and collision-heavy each
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


def _assert_optimize_never_loses(tally: M.Tally, generator: dict, min_crossings: int = 1) -> None:
    """Deletion vectors carried through the compaction: OPTIMIZE and DML never refuse each other."""
    assert tally.optimize_histories, "no history held an OPTIMIZE"
    if tally.optimize_refused_by_dml or tally.dml_refused_by_optimize:
        shown = "\n\n".join(f"{text}\n  {_replay_hint(tally, seed, generator)}" for seed, text in tally.optimize_examples[:3])
        pytest.fail(f"under {tally.level}, isolde.rowLevelConcurrency={tally.mode}: {tally.optimize_refused_by_dml} "
                    f"OPTIMIZE refused by a DML winner, {tally.dml_refused_by_optimize} DML statements refused by an "
                    f"OPTIMIZE winner\n{tally.summary()}\n\n{shown}", pytrace=False)
    # the histories do cross the compaction both ways (else the counts above prove nothing)
    assert tally.dml_over_optimize >= min_crossings and tally.optimize_over_dml >= min_crossings, tally.summary()


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


def test_optimize_changes_no_row():
    # OPTIMIZE between an UPDATE's snapshot and its commit: the row identities survive it
    h = _history([range(3), range(3, 6)], [(UPDATE, 4), (OPTIMIZE, -1)], SAME_SNAPSHOT_01)
    forced = M.simulate(h)
    assert forced.log == [0, 1] and forced.noop == [] and forced.results == {0: (1, 1), 1: (0, 0)}
    assert forced.final == sorted([(i, 0) for i in range(6) if i != 4] + [(4, 1)])
    for level in M.LEVELS:
        assert M.serial_order(forced.final, forced.results, h.initial_rows, list(h.stmts), level) == list(h.stmts)
    # one file without a deletion vector: nothing to compact, nothing committed
    h = _history([range(6)], [(OPTIMIZE, -1), (INSERT, 9)], SAME_SNAPSHOT_01)
    assert M.simulate(h).noop == [0]


def test_histories_are_reproducible():
    assert M.generate_history(12345) == M.generate_history(12345)
    assert M.generate_history(12345, **COLLIDING) == M.generate_history(12345, **COLLIDING)
    kinds = {s.kind for seed in M.seeds(200) for s in M.generate_history(seed).stmts}
    assert kinds == set(M.KINDS)
    schedules = [M.generate_history(seed).schedule for seed in M.seeds(200)]
    late = [s for s in schedules if any(ev == "start" for ev, _ in s[[ev for ev, _ in s].index("commit"):])]
    assert 20 <= len(late) <= 100, "some statements (not most) start after another committed"
    # OPTIMIZE only when asked for: the histories of old stay seed for seed
    assert M.generate_history(12345, optimize=0.0) == M.generate_history(12345)
    assert M.generate_history(12345, **OPTIMIZING) == M.generate_history(12345, **OPTIMIZING)
    histories = [M.generate_history(seed, **OPTIMIZING) for seed in M.seeds(200)]
    assert all(len(h.files) >= 2 for h in histories)
    counts = [sum(s.kind == OPTIMIZE for s in h.stmts) for h in histories]
    assert max(counts) == 1 and 40 <= sum(counts) <= 80, "about 3 histories in 10 hold one OPTIMIZE"


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


@pytest.mark.parametrize("optimize_first", [True, False], ids=["optimize-wins", "delete-wins"])
@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("level", M.LEVELS)
def test_optimize_and_concurrent_dml_both_commit(tmp_path, level, mode, optimize_first):
    h = _history([range(3), range(3, 6)], [(OPTIMIZE, -1), (DELETE, 4), (UPDATE, 1)],
                 [("start", 0), ("start", 1), ("start", 2)]
                 + [("commit", i) for i in ((0, 1, 2) if optimize_first else (1, 2, 0))])
    out = M.run_history(h, level, mode, str(tmp_path / "t"))
    verdict = M.judge(h, level, out)
    assert verdict.violations == []
    if mode == "off" and optimize_first:
        # file level: the DELETE and the UPDATE, carried onto the one compacted file, now both
        # change it, and the later loses to the earlier as on any one file (a false conflict the
        # OPTIMIZE brought in; neither side of the compaction loses)
        assert out.committed == [0, 1] and out.refusals == {2: ("ConcurrentDeleteReadException", DELETE)}
        assert out.final == sorted([(i, 0) for i in range(6) if i != 4])
        assert verdict.false_conflict is True
        return
    assert not out.refused and sorted(out.committed) == [0, 1, 2]
    assert out.final == sorted([(i, 0) for i in range(6) if i not in (1, 4)] + [(1, 4)])
    # the compaction left one data file plus the UPDATE's new row
    from isolde.executor.log import DeltaLog
    assert len(DeltaLog.for_table(str(tmp_path / "t")).update().all_files) == 2


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


@pytest.mark.parametrize("mode", M.MODES)
def test_the_model_catches_a_compaction_that_misplaces_rows(tmp_path, monkeypatch, mode):
    # a layout tag naming the inputs in the wrong order: carried deletion vectors hit other rows
    real = M.layout_tag
    monkeypatch.setattr(M, "layout_tag", lambda inputs: real(list(reversed(inputs))))
    tally = M.check_histories(SERIALIZABLE, mode, M.seeds(40, 22), str(tmp_path), delta_rs=False,
                              optimize=0.8, reuse=0.4)
    assert tally.violations, tally.summary()


@pytest.mark.parametrize("mode", M.MODES)
def test_the_model_sees_a_checker_that_does_not_carry(tmp_path, monkeypatch, mode):
    from isolde.executor.txn import transaction

    monkeypatch.setattr(transaction.OptimisticTransaction, "_carry_through_compaction",
                        lambda self, winner, actions: (actions, set()))
    tally = M.check_histories(SERIALIZABLE, mode, M.seeds(40, 22), str(tmp_path), delta_rs=False,
                              optimize=0.8, reuse=0.4)
    assert tally.violations == []  # refusing is safe ...
    assert tally.optimize_refused_by_dml and tally.dml_refused_by_optimize  # ... and counted


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


@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("level", M.LEVELS)
def test_random_histories_with_optimize(tmp_path_factory, level, mode):
    tally = _tally(tmp_path_factory, level, mode, FAST_OPTIMIZING, 19, **OPTIMIZING)
    _assert_no_violations(tally, OPTIMIZING)
    _assert_optimize_never_loses(tally, OPTIMIZING)


SLOW_GENERATORS = [{}, COLLIDING, OPTIMIZING, {**COLLIDING, **OPTIMIZING}]
SLOW_IDS = ["uniform-keys", "colliding-keys", "optimize-uniform-keys", "optimize-colliding-keys"]


def _slow_count(generator: dict) -> int:
    if "optimize" in generator:
        return SLOW_OPTIMIZING
    return SLOW_COLLIDING if generator else SLOW_HISTORIES


@pytest.mark.slow
@pytest.mark.parametrize("generator", SLOW_GENERATORS, ids=SLOW_IDS)
@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("level", M.LEVELS)
def test_thousands_of_histories_are_serialisable(tmp_path_factory, level, mode, generator):
    tally = _tally(tmp_path_factory, level, mode, _slow_count(generator), 20, **generator)
    _assert_no_violations(tally, generator)
    if "optimize" in generator:
        _assert_optimize_never_loses(tally, generator, min_crossings=10)


@pytest.mark.slow
@pytest.mark.parametrize("generator", SLOW_GENERATORS, ids=SLOW_IDS)
@pytest.mark.parametrize("level", M.LEVELS)
def test_thousands_of_histories_row_level_false_conflicts(tmp_path_factory, level, generator):
    count = _slow_count(generator)
    row = _tally(tmp_path_factory, level, "auto", count, 20, **generator)
    file = _tally(tmp_path_factory, level, "off", count, 20, **generator)
    _assert_false_conflicts(row, file)
