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

The moves of issue 52 (``row_model`` docstring): RESTORE to a version whose deletion vectors
are smaller, REORG PURGE and ZORDER beside OPTIMIZE, statements that read two keys, move a row
into another's read or sweep the rows others wrote, placement chains (a statement ordered
before a winner, then further winners of every kind) and row-level budgets small enough that
the checker falls back to the file-level rules. The same judgement applies, and a checker
patched back to each defect found under attack (vectors unioned blindly on rebase, placements
forgotten on a fallback, a compaction treated as a reader that orders) is caught.

A failure names the seed; replay one history with
``python -c "from tests.helpers.row_model import replay; print(replay(SEED, LEVEL, MODE, '/tmp'))"``
(add ``reuse=0.4`` for the collision-heavy batch, ``optimize=0.3`` for the OPTIMIZE ones).
"""

from __future__ import annotations

from dataclasses import replace

from isolde.executor.log.actions import RemoveFile

import pytest

from tests.helpers import row_model as M
from tests.helpers.model_tally import Tallies, assert_false_conflicts
from tests.helpers.row_model import (MERGE, DELETE, INSERT, MOVE, OPTIMIZE, PURGE, RESTORE, SERIALIZABLE, SWEEP, UPDATE,
                        UPDATE2, WRITE_SERIALIZABLE, ZORDER, History, Stmt)

FAST_HISTORIES = 75  # per level and mode: 300 in all, a few seconds
SLOW_HISTORIES = 600  # per level and mode, uniform keys: 2,400 ...
SLOW_COLLIDING = 250  # ... and collision-heavy (reuse 0.4): 1,000 more
COLLIDING = {"reuse": 0.4}
OPTIMIZING = {"optimize": 0.3}  # about 3 histories in 10 hold an OPTIMIZE
FAST_OPTIMIZING = 60  # per level and mode
SLOW_OPTIMIZING = 400  # per level and mode, uniform keys and collision-heavy each
# issue 52's moves (generate_history's arguments)
RESTORING = {"restore": 0.6, "reuse": 0.4}
EXTENDED = {"extended": 0.6, "reuse": 0.4, "optimize": 0.4, "compactions": (OPTIMIZE, PURGE, ZORDER),
            "budget": (1, 12)}
CHAINS = {"placement": 1.0, "budget": (3, 10), "optimize": 0.5, "compactions": (OPTIMIZE, PURGE)}
FAST_NEW_MOVES = 15  # per generator, level and mode: 180 histories, ~1 min
SLOW_NEW_MOVES = 150  # per generator, level and mode
MAX_ROW_LEVEL_FALSE = 0.10
MIN_REFUSED = 5  # fewer refused histories than this and a ratio says nothing

_tally = Tallies(M, "row model", "model")  # the judged histories of one (level, mode), once per session
_assert_no_violations = _tally.assert_no_violations


def _assert_optimize_never_loses(tally: M.Tally, generator: dict, min_crossings: int = 1) -> None:
    """Deletion vectors carried through the compaction: OPTIMIZE and DML never refuse each other."""
    assert tally.optimize_histories, "no history held an OPTIMIZE"
    if tally.optimize_refused_by_dml or tally.dml_refused_by_optimize:
        shown = _tally.first(tally, tally.optimize_examples, generator)
        pytest.fail(f"under {tally.level}, isolde.rowLevelConcurrency={tally.mode}: {tally.optimize_refused_by_dml} "
                    f"OPTIMIZE refused by a DML winner, {tally.dml_refused_by_optimize} DML statements refused by an "
                    f"OPTIMIZE winner\n{tally.summary()}\n\n{shown}", pytrace=False)
    # the histories do cross the compaction both ways (else the counts above prove nothing)
    assert tally.dml_over_optimize >= min_crossings and tally.optimize_over_dml >= min_crossings, tally.summary()


def _assert_false_conflicts(row: M.Tally, file: M.Tally) -> None:
    assert_false_conflicts(row, file, MAX_ROW_LEVEL_FALSE, MIN_REFUSED)


# --------------------------------------------------------------------------- the model itself


def _history(files, stmts, schedule, setup=(), budget=None) -> History:
    """``stmts``: (kind, key) or (kind, key, key2) or (kind, key, key2, sweep) per statement."""
    def stmt(i, spec):
        kind, key, *rest = spec
        return Stmt(i, kind, key, 1 << i, *rest)

    return History(0, tuple(tuple(f) for f in files), tuple(stmt(i, spec) for i, spec in enumerate(stmts)),
                   tuple(schedule), tuple(setup), budget)


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
        assert out.committed == [0, 1] and out.refusals == {2: ("ConcurrentDeleteReadException", 1)}  # S1 won
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


# --------------------------------------------------------------------------- issue 52: the reproducers, at the log level


@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("level", M.LEVELS)
@pytest.mark.parametrize("loser", [DELETE, UPDATE])
def test_a_rebase_over_a_restore_keeps_the_restored_row(tmp_path, level, mode, loser):
    # v1 deletes id 0 (a vector on the one file); a DELETE / UPDATE of id 5 reads v1; RESTORE to
    # v0 brings id 0 back (the file without a vector); the statement then commits over it
    h = _history([range(10)], [(loser, 5), (RESTORE, 0)],
                 [("start", 0), ("start", 1), ("commit", 1), ("commit", 0)], setup=(0,))
    out = M.run_history(h, level, mode, str(tmp_path / "t"))
    assert M.judge(h, level, out).violations == []
    if mode == "auto":  # rebased per row: both commit, and id 0 stays restored
        assert out.committed == [1, 0]
        assert (0, 0) in out.final and (0, 0) in out.delta_rs
        assert out.final == sorted([(i, 0) for i in range(10) if i != 5] + ([(5, 1)] if loser == UPDATE else []))
    else:  # per file: the RESTORE re-added the file the statement read, with rows back in it
        assert out.committed == [1] and out.refusals == {0: ("ConcurrentAppendException", 1)}
        assert out.final == [(i, 0) for i in range(10)]


@pytest.mark.parametrize("compaction", [OPTIMIZE, PURGE])
def test_a_compaction_never_fails_a_statement_ordered_before_an_earlier_winner(tmp_path, compaction):
    # WriteSerializable: S0 reads ids 5 and 1; S1 moves id 9 to 5 (S0 can still be ordered
    # before S1, and is); the compaction commits; S0 then commits
    h = _history([range(5), range(5, 10)], [(UPDATE2, 5, 1), (MOVE, 9, 5), (compaction, -1)],
                 [("start", 0), ("start", 1), ("commit", 1), ("start", 2), ("commit", 2), ("commit", 0)],
                 setup=(3,) if compaction == PURGE else ())  # PURGE needs a vector to purge
    out = M.run_history(h, WRITE_SERIALIZABLE, "auto", str(tmp_path / "t"))
    assert M.judge(h, WRITE_SERIALIZABLE, out).violations == []
    assert out.committed == [1, 2, 0] and not out.refused
    assert (5, 1) in out.final and (1, 1) in out.final and (5, 2) in out.final


# S0 reads first; S1 .. S5 then run one after another; S0 commits last
CHAIN_SCHEDULE = [("start", 0)] + [ev for i in range(1, 6) for ev in (("start", i), ("commit", i))] + [("commit", 0)]


@pytest.mark.parametrize("budget", [None, 6])
def test_a_fallback_past_the_budget_keeps_the_order_it_was_placed_in(tmp_path, budget):
    # S0 reads ids 5 and 1, S1 moves id 9 to 5 (S0 ordered before S1); three rows inserted, then
    # S5 deletes them, the rows S0 writes (n = 1) and id 9: it must follow S1, so S0 precedes it
    # and would lose its rows to it. With a budget of 6 rows the check of S1 stays per row and
    # that of S5 falls back per file, where S5 touched no file S0 read.
    h = _history([range(10)], [(UPDATE2, 5, 1), (MOVE, 9, 5), (INSERT, 11), (INSERT, 11), (INSERT, 11),
                               (SWEEP, 9, -1, (0, 2, 3, 4))],
                 CHAIN_SCHEDULE, budget=budget)
    out = M.run_history(h, WRITE_SERIALIZABLE, "auto", str(tmp_path / "t"))
    assert M.judge(h, WRITE_SERIALIZABLE, out).violations == []
    assert out.committed == [1, 2, 3, 4, 5]
    cls, winner = out.refusals[0]
    assert winner == 5 and cls in ("ConcurrentAppendException", "ConcurrentDeleteReadException")
    if budget is not None:
        assert "Decided per file" in out.refused[0] and "ordered before version 1" in out.refused[0]


def test_a_checker_that_forgets_placements_on_fallback_commits_that_history(tmp_path, monkeypatch):
    """The test of the test above: without the placement the history is not serialisable."""
    from isolde.executor.txn import transaction
    from isolde.executor.txn.conflicts import ConflictChecker

    monkeypatch.setattr(transaction, "fallback_to_file_level",
                        lambda state, winner, budget: ConflictChecker(state.summary, winner).check())
    h = _history([range(10)], [(UPDATE2, 5, 1), (MOVE, 9, 5), (INSERT, 11), (INSERT, 11), (INSERT, 11),
                               (SWEEP, 9, -1, (0, 2, 3, 4))],
                 CHAIN_SCHEDULE, budget=6)
    out = M.run_history(h, WRITE_SERIALIZABLE, "auto", str(tmp_path / "t"), delta_rs=False)
    assert out.committed == [1, 2, 3, 4, 5, 0]
    assert any("is not WriteSerializable" in v for v in M.judge(h, WRITE_SERIALIZABLE, out).violations)


def test_new_moves_are_generated():
    kinds = {s.kind for seed in M.seeds(200) for s in M.generate_history(seed, **EXTENDED).stmts}
    assert {UPDATE2, MOVE, SWEEP, OPTIMIZE, PURGE, ZORDER} <= kinds
    restoring = [M.generate_history(seed, **RESTORING) for seed in M.seeds(200)]
    assert all(h.setup for h in restoring) and 80 <= sum(any(s.kind == RESTORE for s in h.stmts)
                                                         for h in restoring) <= 160
    chains = [M.generate_history(seed, **CHAINS) for seed in M.seeds(100)]
    assert all(h.stmts[0].kind == UPDATE2 and h.stmts[1].kind == MOVE and h.schedule[-1] == ("commit", 0)
               for h in chains)
    assert {h.budget for h in chains} == set(range(3, 11))
    assert M.generate_history(12345, **CHAINS) == M.generate_history(12345, **CHAINS)


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


NEW_MOVES = [RESTORING, EXTENDED, CHAINS]
NEW_MOVES_IDS = ["restore", "moves-compactions-budgets", "placement-chains"]


@pytest.mark.parametrize("generator", NEW_MOVES, ids=NEW_MOVES_IDS)
@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("level", M.LEVELS)
def test_random_histories_with_new_moves_are_serialisable(tmp_path_factory, level, mode, generator):
    tally = _tally(tmp_path_factory, level, mode, FAST_NEW_MOVES, 23, **generator)
    _assert_no_violations(tally, generator)


@pytest.mark.slow
@pytest.mark.torture
@pytest.mark.parametrize("generator", NEW_MOVES, ids=NEW_MOVES_IDS)
@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("level", M.LEVELS)
def test_many_histories_with_new_moves_are_serialisable(tmp_path_factory, level, mode, generator):
    tally = _tally(tmp_path_factory, level, mode, SLOW_NEW_MOVES, 24, **generator)
    _assert_no_violations(tally, generator)
    if generator is CHAINS:  # a carrying compaction never fails a statement placed before a winner
        _assert_optimize_never_loses(tally, generator, min_crossings=0)


@pytest.mark.slow
@pytest.mark.torture
@pytest.mark.parametrize("defect, generator, level", [
    ("union", RESTORING, WRITE_SERIALIZABLE),
    ("forget", CHAINS, WRITE_SERIALIZABLE),
    ("compaction-orders", CHAINS, WRITE_SERIALIZABLE),
], ids=["vectors-unioned-on-rebase", "placements-forgotten-on-fallback", "compaction-treated-as-a-reader"])
def test_the_model_catches_each_defect_found_under_attack(tmp_path, monkeypatch, defect, generator, level):
    from isolde.executor.txn import row_level, transaction
    from isolde.executor.txn.conflicts import ConflictChecker, WinningCommitSummary

    if defect == "union":  # the old rebase: W's vector | this transaction's whole new vector
        real = row_level.rebase_deletion_vectors

        def union(actions, winner, files):
            theirs = {a.path for a in winner.added_files}
            blind = [replace(a, deletion_vector=None) if isinstance(a, RemoveFile) and a.path in theirs else a
                     for a in actions]
            return real(blind, winner, files)

        monkeypatch.setattr(transaction, "rebase_deletion_vectors", union)
    elif defect == "forget":
        monkeypatch.setattr(transaction, "fallback_to_file_level",
                            lambda state, winner, budget: ConflictChecker(state.summary, winner).check())
    else:
        monkeypatch.setattr(WinningCommitSummary, "changes_data", property(lambda self: True))
    tally = M.check_histories(level, "auto", M.seeds(120, 25), str(tmp_path), delta_rs=False, **generator)
    if defect == "compaction-orders":
        assert tally.dml_refused_by_optimize > 0, tally.summary()
    else:
        assert tally.violations, tally.summary()
        assert all("is not WriteSerializable" in text for _, text in tally.violations)


SLOW_GENERATORS = [{}, COLLIDING, OPTIMIZING, {**COLLIDING, **OPTIMIZING}]
SLOW_IDS = ["uniform-keys", "colliding-keys", "optimize-uniform-keys", "optimize-colliding-keys"]


def _slow_count(generator: dict) -> int:
    if "optimize" in generator:
        return SLOW_OPTIMIZING
    return SLOW_COLLIDING if generator else SLOW_HISTORIES


@pytest.mark.slow
@pytest.mark.torture
@pytest.mark.parametrize("generator", SLOW_GENERATORS, ids=SLOW_IDS)
@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("level", M.LEVELS)
def test_thousands_of_histories_are_serialisable(tmp_path_factory, level, mode, generator):
    tally = _tally(tmp_path_factory, level, mode, _slow_count(generator), 20, **generator)
    _assert_no_violations(tally, generator)
    if "optimize" in generator:
        _assert_optimize_never_loses(tally, generator, min_crossings=10)


@pytest.mark.slow
@pytest.mark.torture
@pytest.mark.parametrize("generator", SLOW_GENERATORS, ids=SLOW_IDS)
@pytest.mark.parametrize("level", M.LEVELS)
def test_thousands_of_histories_row_level_false_conflicts(tmp_path_factory, level, generator):
    count = _slow_count(generator)
    row = _tally(tmp_path_factory, level, "auto", count, 20, **generator)
    file = _tally(tmp_path_factory, level, "off", count, 20, **generator)
    _assert_false_conflicts(row, file)
