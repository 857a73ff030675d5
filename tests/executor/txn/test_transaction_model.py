"""Model-checked random test of multi-statement transactions on one table, at the log level.

Histories of 2-4 concurrent transactions, each of 1-4 single-row UPDATE / DELETE / MERGE /
INSERT statements (the statement kinds of ``row_model``; keys reused within a transaction, to
read its own writes, and across transactions, to collide), run against real Delta logs with
row-level concurrency on (``auto``) and off, under Serializable and WriteSerializable. Each
transaction pins the table at its first statement (some after others committed), runs its
statements in order against its ``StagedDeltaLog`` and commits through ``mt.prepare`` /
``mt.commit`` in a random order. ``transaction_model.py`` runs and judges them:

* every accepted history equals a serial execution of whole transactions (log order under
  Serializable, some order under WriteSerializable): the final rows (pyarrow with deletion
  vectors, and delta-rs) and every committed transaction's statement results;
* a committed transaction is exactly one new version (none when it had nothing to write: it
  then takes part at its commit point, where ``validate_reads`` checked its reads); a refused
  one leaves no version and no file, and raised a ``ConcurrentModificationException`` subclass;
* a refused history is a *false conflict* when, every transaction forced through, it would
  still have been such a serial execution. ``pytest -s`` prints the counts per level and mode.

Beside the random histories: hand-made ones (two transactions updating one row; two updating
other rows of one file, row level and file level; INSERT, UPDATE, DELETE of one key in one
transaction; a second statement reading what a winner changed, or finding no row a winner then
inserted; statements serial only when interleaved; write skew through phantoms; a pin across a
checkpoint of the real log), and implementations broken on purpose that the model must catch
(reads not unioned, net actions forgetting a removal, reads of a transaction with nothing to
write not validated).

A failure names the seed; replay one history with
``python -c "from tests.helpers.transaction_model import replay; print(replay(SEED, LEVEL, MODE, '/tmp'))"``
(add the generator's arguments the failing test names, e.g. ``extended=0.5``).
"""

from __future__ import annotations

import json
import os

import pytest

from isolde.executor.log import DeltaLog
from isolde.executor.log.actions import RemoveFile
from isolde.executor.txn import multi_statement
from isolde.executor.txn.multi_statement import MultiStatementTransaction

from tests.helpers import row_model as R
from tests.helpers import transaction_model as M
from tests.helpers.model_tally import Tallies, assert_false_conflicts
from tests.helpers.row_model import DELETE, INSERT, MERGE, SERIALIZABLE, UPDATE, WRITE_SERIALIZABLE, Stmt
from tests.helpers.transaction_model import Txn, TxnHistory

FAST_HISTORIES = 50  # per level and mode: 200 in all
FAST_EXTENDED = 15  # per level and mode, with the two-key UPDATE, MOVE, SWEEP and a setup vector
SLOW_HISTORIES = 500  # per level and mode and generator: 6,000 in all
EXTENDED = {"extended": 0.5, "setup": 0.5, "reuse": 0.4}
UNIFORM = {"reuse": 0.0, "own": 0.2}  # keys collide by chance only (and within a transaction)
DEFECT_HUNT = {"reuse": 0.6, "own": 0.1}  # keys collide across transactions most
# The single-statement model's bound. Measured (500 histories per generator), of the refused
# histories with row level on: 0-0.6 % under Serializable, 1.0-2.8 % under WriteSerializable;
# file level 12-38 % and 20-49 %. (Before a blind INSERT stopped forcing a transaction to file
# level and before tables only read were validated against the statements' reads rather than
# the whole table, row level measured 8-26 % and 11-37 %.)
MAX_ROW_LEVEL_FALSE = 0.10
MIN_REFUSED = 5

_tally = Tallies(M, "transaction model", "txn-model")  # the judged histories of one (level, mode), once per session
_assert_no_violations = _tally.assert_no_violations


def _assert_false_conflicts(row: M.Tally, file: M.Tally) -> None:
    assert_false_conflicts(row, file, MAX_ROW_LEVEL_FALSE, MIN_REFUSED)


# --------------------------------------------------------------------------- hand-made histories


def _history(files, txns, schedule, setup=()) -> TxnHistory:
    """``txns``: per transaction a list of (kind, key) or (kind, key, key2) or (kind, key, key2,
    sweep); statements are numbered across the history (weights 1, 2, 4, ...).
    ``schedule``: ("start" | "run" | "commit", transaction)."""
    out, i = [], 0
    for t, specs in enumerate(txns):
        stmts = []
        for kind, key, *rest in specs:
            stmts.append(Stmt(i, kind, key, 1 << i, *rest))
            i += 1
        out.append(Txn(t, tuple(stmts)))
    return TxnHistory(0, tuple(tuple(f) for f in files), tuple(out), tuple(schedule), tuple(setup))


def _events(t: int, statements: int) -> list:
    return [("start", t)] + [("run", t)] * (statements - 1)


def _commit_ops(table_path: str, version: int) -> tuple[dict, list]:
    """(commitInfo, the other actions) of one version."""
    with open(os.path.join(table_path, "_delta_log", f"{version:020d}.json")) as f:
        actions = [json.loads(line) for line in f if line.strip()]
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    return info, [a for a in actions if "commitInfo" not in a]


# the model alone


def test_two_transactions_updating_one_row_forced_through_are_not_serialisable():
    h = _history([range(6)], [[(UPDATE, 2)], [(UPDATE, 2)]], _events(0, 1) + _events(1, 1) + [("commit", 0), ("commit", 1)])
    forced = M.simulate(h)
    assert forced.log == [0, 1] and forced.final.count((2, 1)) == 1 and forced.final.count((2, 2)) == 1
    for level in R.LEVELS:
        assert M.serial_order(forced.final, forced.results, h.initial_rows, list(h.txns), level) is None


def test_a_transaction_reads_its_own_writes_in_the_model():
    h = _history([range(6)], [[(INSERT, 9), (UPDATE, 9), (MERGE, 9), (DELETE, 1)]], _events(0, 4) + [("commit", 0)])
    run = M.simulate(h)
    assert run.results == {0: (0, 1), 1: (1, 1), 2: (1, 1), 3: (1, 0)}
    assert run.final == sorted([(i, 0) for i in range(6) if i != 1] + [(9, 7)])
    assert M.serial_order(run.final, run.results, h.initial_rows, list(h.txns), SERIALIZABLE) == list(h.txns)


def test_serial_orders_are_of_whole_transactions():
    # T0 = {UPDATE 9 (finds none), INSERT 9}, T1 = {MERGE 9}, one snapshot, both forced through:
    # the statements have a serial order (S0, S2, S1: the MERGE between T0's two statements),
    # the transactions as wholes have none (either order, the second one finds the first's row)
    h = _history([range(6)], [[(UPDATE, 9), (INSERT, 9)], [(MERGE, 9)]],
                 _events(0, 1) + _events(1, 1) + [("run", 0), ("commit", 0), ("commit", 1)])
    forced = M.simulate(h)
    assert forced.results == {0: (0, 0), 1: (0, 1), 2: (0, 1)}
    assert forced.final == sorted([(i, 0) for i in range(6)] + [(9, 2), (9, 4)])
    s0, s1, s2 = h.stmts
    assert R.serial_order(forced.final, forced.results, h.initial_rows, [s0, s2, s1], SERIALIZABLE) == [s0, s2, s1]
    for level in R.LEVELS:
        assert M.serial_order(forced.final, forced.results, h.initial_rows, list(h.txns), level) is None


def test_histories_are_reproducible_and_varied():
    assert M.generate_history(12345) == M.generate_history(12345)
    assert M.generate_history(12345, **EXTENDED) == M.generate_history(12345, **EXTENDED)
    histories = [M.generate_history(seed) for seed in M.seeds(200)]
    assert {len(h.txns) for h in histories} == {2, 3, 4}
    assert {len(t.stmts) for h in histories for t in h.txns} == {1, 2, 3, 4}
    assert {s.kind for h in histories for s in h.stmts} == set(R.KINDS)
    # some transactions pin after another committed, not most
    late = [h for h in histories if any(ev == "start" for ev, _ in h.schedule[[ev for ev, _ in h.schedule].index("commit"):])]
    assert 30 <= len(late) <= 150, len(late)
    # later statements of a transaction touch a key an earlier one of it touched (own writes)
    own = [h for h in histories if any(len({s.key for s in t.stmts}) < len(t.stmts) for t in h.txns)]
    assert len(own) >= 50, len(own)
    for h in histories:  # every transaction starts, runs its statements, commits, in that order
        assert M.events_by_transaction(h) == {t.idx: M.events(len(t.stmts)) for t in h.txns}


# real logs: the four cases of the brief, and more


@pytest.mark.parametrize("mode", R.MODES)
@pytest.mark.parametrize("level", R.LEVELS)
def test_two_transactions_updating_one_row_the_second_is_refused(tmp_path, level, mode):
    h = _history([range(6)], [[(UPDATE, 2)], [(UPDATE, 2)]],
                 _events(0, 1) + _events(1, 1) + [("commit", 0), ("commit", 1)])
    out = M.run_history(h, level, mode, str(tmp_path / "t"))
    assert out.committed == [0] and out.versions == {0: 1} and list(out.refused) == [1]
    assert out.refusals[1][1] == 0  # T0 won
    assert out.final == sorted([(i, 0) for i in range(6) if i != 2] + [(2, 1)])
    verdict = M.judge(h, level, out)
    assert verdict.violations == [] and verdict.false_conflict is False
    assert DeltaLog.for_table(str(tmp_path / "t")).update().version == 1


@pytest.mark.parametrize("level", R.LEVELS)
def test_two_transactions_updating_other_rows_of_one_file_row_level_both_commit(tmp_path, level):
    h = _history([range(6)], [[(UPDATE, 1), (UPDATE, 2)], [(UPDATE, 3)]],
                 _events(0, 2) + _events(1, 1) + [("commit", 0), ("commit", 1)])
    row = M.run_history(h, level, "auto", str(tmp_path / "row"))
    assert row.committed == [0, 1] and row.versions == {0: 1, 1: 2} and not row.refused
    assert row.row_level == {0: True, 1: True}
    assert row.final == sorted([(0, 0), (4, 0), (5, 0), (1, 1), (2, 2), (3, 4)]) == row.delta_rs
    assert M.judge(h, level, row).violations == []
    info, actions = _commit_ops(str(tmp_path / "row"), 1)
    assert info["operation"] == multi_statement.OPERATION and info["readVersion"] == 0
    assert json.loads(info["operationParameters"]["statements"]) == ["UPDATE", "UPDATE"]
    # net: the one file's vector grew by two rows (one remove, one add), one file per UPDATE's new row
    assert sum("remove" in a for a in actions) == 1 and sum("add" in a for a in actions) == 3
    # file level: the same history refuses T1, needlessly
    file = M.run_history(h, level, "off", str(tmp_path / "file"))
    assert file.committed == [0] and file.refusals == {1: ("ConcurrentDeleteReadException", 0)}
    verdict = M.judge(h, level, file)
    assert verdict.violations == [] and verdict.false_conflict is True


@pytest.mark.parametrize("mode", R.MODES)
@pytest.mark.parametrize("level", R.LEVELS)
def test_insert_update_delete_of_one_key_nets_to_no_change_in_one_version(tmp_path, level, mode):
    """Read your own writes: the UPDATE finds the row the INSERT staged, the DELETE the row the
    UPDATE wrote. What the code does: ``prepare`` does not return None (statements staged
    versions), and the net commit is one version that adds the two files the transaction wrote,
    each with a deletion vector deleting its every row, and removes nothing."""
    path = str(tmp_path / "t")
    h = _history([range(6)], [[(INSERT, 9), (UPDATE, 9), (DELETE, 9)]], _events(0, 3) + [("commit", 0)])
    out = M.run_history(h, level, mode, path)
    assert out.results == {0: (0, 1), 1: (1, 1), 2: (1, 0)}
    assert out.committed == [0] and out.versions == {0: 1} and out.noop == [] and out.staged == {0: 3}
    assert out.final == [(i, 0) for i in range(6)] == out.delta_rs
    assert M.judge(h, level, out).violations == []
    info, actions = _commit_ops(path, 1)
    assert info["operation"] == multi_statement.OPERATION
    assert json.loads(info["operationParameters"]["statements"]) == ["WRITE", "UPDATE", "DELETE"]
    assert not any("remove" in a for a in actions)
    adds = [a["add"] for a in actions if "add" in a]
    assert len(adds) == 2 and all(a["deletionVector"]["cardinality"] == json.loads(a["stats"])["numRecords"]
                                  for a in adds)
    assert DeltaLog.for_table(path).update().version == 1


@pytest.mark.parametrize("mode", R.MODES)
def test_a_transaction_whose_second_statement_reads_a_row_a_winner_changed_is_refused(tmp_path, mode):
    # T0 updates id 1, then (after T1 committed an UPDATE of id 3 over T0's pin) updates id 3
    schedule = [("start", 0), ("start", 1), ("commit", 1), ("run", 0), ("commit", 0)]
    h = _history([range(6)], [[(UPDATE, 1), (UPDATE, 3)], [(UPDATE, 3)]], schedule)
    out = M.run_history(h, SERIALIZABLE, mode, str(tmp_path / "t"))
    assert out.results == {0: (1, 1), 1: (1, 1), 2: (1, 1)}  # T0's read of id 3 is at its pin
    assert out.committed == [1] and list(out.refused) == [0] and out.refusals[0][1] == 1
    verdict = M.judge(h, SERIALIZABLE, out)
    assert verdict.violations == [] and verdict.false_conflict is False
    assert out.final == sorted([(i, 0) for i in range(6) if i != 3] + [(3, 4)])


@pytest.mark.parametrize("mode", R.MODES)
@pytest.mark.parametrize("level", R.LEVELS)
def test_a_second_statement_that_found_no_row_still_reads(tmp_path, level, mode):
    # T0 updates id 1, then updates id 9 and finds none; T1 inserted id 9 over T0's pin. The
    # empty UPDATE's read counts: Serializable refuses T0 (T1 precedes it in the log, and after
    # T1 it would have updated the row); WriteSerializable orders T0 before the blind INSERT
    schedule = [("start", 0), ("start", 1), ("commit", 1), ("run", 0), ("commit", 0)]
    h = _history([range(6)], [[(UPDATE, 1), (UPDATE, 9)], [(INSERT, 9)]], schedule)
    out = M.run_history(h, level, mode, str(tmp_path / "t"))
    assert out.results[1] == (0, 0)
    assert M.judge(h, level, out).violations == []
    if level == SERIALIZABLE:
        assert out.committed == [1] and out.refusals == {0: ("ConcurrentAppendException", 1)}
    else:  # per row and per file alike: a blind append's file is no conflict
        assert out.committed == [1, 0] and not out.refused
        assert out.final == sorted([(i, 0) for i in range(6) if i != 1] + [(1, 1), (9, 4)])


@pytest.mark.parametrize("mode", R.MODES)
@pytest.mark.parametrize("level", R.LEVELS)
def test_interleaved_statements_serial_only_statement_by_statement_are_refused(tmp_path, level, mode):
    # the history of test_serial_orders_are_of_whole_transactions, on a real log
    h = _history([range(6)], [[(UPDATE, 9), (INSERT, 9)], [(MERGE, 9)]],
                 _events(0, 1) + _events(1, 1) + [("run", 0), ("commit", 0), ("commit", 1)])
    out = M.run_history(h, level, mode, str(tmp_path / "t"))
    assert out.committed == [0] and list(out.refused) == [1]
    verdict = M.judge(h, level, out)
    assert verdict.violations == [] and verdict.false_conflict is False


@pytest.mark.parametrize("level", R.LEVELS)
def test_a_transaction_with_nothing_to_write_commits_no_version(tmp_path, level):
    path = str(tmp_path / "t")
    h = _history([range(6)], [[(UPDATE, 9), (DELETE, 8)]], _events(0, 2) + [("commit", 0)])
    out = M.run_history(h, level, "auto", path)
    assert out.noop == [0] and out.committed == [] and not out.refused and out.staged == {0: 0}
    assert M.judge(h, level, out).violations == []
    assert DeltaLog.for_table(path).update().version == 0


# T0 reads id 9 and finds none (nothing to write); T1 inserts id 9 by a MERGE (no blind append)
# and commits first; T0 then commits
READ_ONLY = _history([range(6)], [[(UPDATE, 9), (DELETE, 8)], [(MERGE, 9)]],
                     [("start", 0), ("start", 1), ("commit", 1), ("run", 0), ("commit", 0)])


@pytest.mark.parametrize("mode", R.MODES)
@pytest.mark.parametrize("level", R.LEVELS)
def test_a_transaction_with_nothing_to_write_is_validated_at_commit(tmp_path, level, mode):
    path = str(tmp_path / "t")
    out = M.run_history(READ_ONLY, level, mode, path)
    assert out.noop == [0] and out.committed == [1] and out.refusals == {0: ("ConcurrentAppendException", 1)}
    verdict = M.judge(READ_ONLY, level, out)
    assert verdict.violations == [] and verdict.refused_readonly == 1
    # at its commit point T0 would have found T1's row; under WriteSerializable it may be
    # ordered before T1 (it wrote nothing T1 read), so there the refusal is needless
    assert verdict.false_conflict is (level == WRITE_SERIALIZABLE)
    assert DeltaLog.for_table(path).update().version == 1


def test_the_model_catches_a_commit_that_does_not_validate_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(MultiStatementTransaction, "validate_reads", lambda self, written_path: None)
    out = M.run_history(READ_ONLY, SERIALIZABLE, "auto", str(tmp_path / "t"), delta_rs=False)
    assert out.order == [1, 0] and not out.refused
    assert any("history that is not Serializable" in v for v in M.judge(READ_ONLY, SERIALIZABLE, out).violations)


@pytest.mark.parametrize("mode", R.MODES)
def test_a_pin_holds_across_a_checkpoint_of_the_real_log(tmp_path, mode):
    # T0 pins v0; twelve transactions commit (the real log checkpoints at v10), half of them
    # inserting id 11; T0's DELETE of id 11 then still reads v0 (finds none), and T0 is refused
    # under Serializable (its read of id 11 is in the union). (Serializable only: the judge tries
    # every order of the committed transactions under WriteSerializable, 12! here.)
    n = 13
    txns = [[(UPDATE, 1), (DELETE, 11)]] + [[(INSERT, 11)] if i % 2 else [(UPDATE, 3)] for i in range(1, n)]
    schedule = [("start", 0)] + [ev for i in range(1, n) for ev in (("start", i), ("commit", i))] + [("run", 0), ("commit", 0)]
    h = _history([range(3), range(3, 6)], txns, schedule)
    path = str(tmp_path / "t")
    out = M.run_history(h, SERIALIZABLE, mode, path)
    assert os.path.exists(os.path.join(path, "_delta_log", f"{10:020d}.checkpoint.parquet"))
    assert out.read_versions[0] == 0 and out.results[1] == (0, 0)
    assert out.committed == list(range(1, n)) and out.refusals[0] == ("ConcurrentAppendException", 1)
    assert M.judge(h, SERIALIZABLE, out).violations == []


# --------------------------------------------------------------------------- random histories


@pytest.mark.parametrize("mode", R.MODES)
@pytest.mark.parametrize("level", R.LEVELS)
def test_random_transaction_histories_are_serialisable(tmp_path_factory, level, mode):
    _assert_no_violations(_tally(tmp_path_factory, level, mode, FAST_HISTORIES, 61), {})


@pytest.mark.parametrize("mode", R.MODES)
@pytest.mark.parametrize("level", R.LEVELS)
def test_random_transaction_histories_with_more_kinds_are_serialisable(tmp_path_factory, level, mode):
    _assert_no_violations(_tally(tmp_path_factory, level, mode, FAST_EXTENDED, 62, **EXTENDED), EXTENDED)


@pytest.mark.parametrize("level", R.LEVELS)
def test_random_transaction_histories_false_conflicts(tmp_path_factory, level):
    row = _tally(tmp_path_factory, level, "auto", FAST_HISTORIES, 61)
    file = _tally(tmp_path_factory, level, "off", FAST_HISTORIES, 61)
    _assert_false_conflicts(row, file)


SLOW_GENERATORS = [{}, UNIFORM, EXTENDED]
SLOW_IDS = ["colliding-keys", "uniform-keys", "more-kinds-and-a-setup-vector"]


@pytest.mark.slow
@pytest.mark.torture
@pytest.mark.parametrize("generator", SLOW_GENERATORS, ids=SLOW_IDS)
@pytest.mark.parametrize("mode", R.MODES)
@pytest.mark.parametrize("level", R.LEVELS)
def test_thousands_of_transaction_histories_are_serialisable(tmp_path_factory, level, mode, generator):
    _assert_no_violations(_tally(tmp_path_factory, level, mode, SLOW_HISTORIES, 63, **generator), generator)


@pytest.mark.slow
@pytest.mark.torture
@pytest.mark.parametrize("generator", SLOW_GENERATORS, ids=SLOW_IDS)
@pytest.mark.parametrize("level", R.LEVELS)
def test_thousands_of_transaction_histories_false_conflicts(tmp_path_factory, level, generator):
    row = _tally(tmp_path_factory, level, "auto", SLOW_HISTORIES, 63, **generator)
    file = _tally(tmp_path_factory, level, "off", SLOW_HISTORIES, 63, **generator)
    _assert_false_conflicts(row, file)


# --------------------------------------------------------------------------- the model catches a broken implementation


def _first_statement_reads_only(monkeypatch):
    """``prepare`` keeps the reads of the transaction's first statement only (no union)."""
    real = MultiStatementTransaction.prepare

    def prepare(self, start_transaction):
        prepared = real(self, start_transaction)
        if prepared is not None:
            table, txn = prepared[0], prepared[1]
            first = table.statements[0]
            txn.read_predicates[:] = list(first.read_predicates)
            txn.read_files = {p: f for p, f in first.read_files.items() if p in txn.read_files}
            txn._read_whole_table = first.reads_whole_table
        return prepared

    monkeypatch.setattr(MultiStatementTransaction, "prepare", prepare)


def _forgets_a_removal(monkeypatch):
    """``net_actions`` forgets the removal of the files the transaction changed."""
    real = multi_statement.net_actions
    monkeypatch.setattr(multi_statement, "net_actions",
                        lambda staged: [a for a in real(staged) if not isinstance(a, RemoveFile)])


# write skew through phantoms: each transaction inserts the key the other's UPDATE found absent.
# Neither order of the two is serial, under either level (the inserts are no blind appends:
# their transactions read); the second to commit is refused, as the UPDATE's read is in the union.
PHANTOMS = _history([range(6)], [[(INSERT, 8), (UPDATE, 9)], [(INSERT, 9), (UPDATE, 8)]],
                    _events(0, 1) + _events(1, 1) + [("run", 0), ("run", 1), ("commit", 0), ("commit", 1)])


@pytest.mark.parametrize("mode", R.MODES)
@pytest.mark.parametrize("level", R.LEVELS)
def test_write_skew_through_phantoms_is_refused(tmp_path, level, mode):
    out = M.run_history(PHANTOMS, level, mode, str(tmp_path / "t"))
    assert out.results == {0: (0, 1), 1: (0, 0), 2: (0, 1), 3: (0, 0)}
    assert out.committed == [0] and out.refusals == {1: ("ConcurrentAppendException", 0)}
    verdict = M.judge(PHANTOMS, level, out)
    assert verdict.violations == [] and verdict.false_conflict is False


@pytest.mark.parametrize("level", R.LEVELS)
def test_the_model_catches_a_commit_that_does_not_union_the_reads(tmp_path, monkeypatch, level):
    _first_statement_reads_only(monkeypatch)
    out = M.run_history(PHANTOMS, level, "auto", str(tmp_path / "t"), delta_rs=False)
    assert out.committed == [0, 1]  # T1's UPDATE 8 read forgotten
    assert any(f"history that is not {level}" in v for v in M.judge(PHANTOMS, level, out).violations)
    if level == SERIALIZABLE:  # random histories find it too
        tally = M.check_histories(level, "auto", M.seeds(40, 64), str(tmp_path), delta_rs=False, **DEFECT_HUNT)
        assert tally.violations, tally.summary()
        assert all(f"VIOLATION: the checker let through a history that is not {level}" in text
                   for _, text in tally.violations), tally.violations[0][1]


@pytest.mark.parametrize("mode", R.MODES)
def test_the_model_catches_net_actions_that_forget_a_removal(tmp_path, monkeypatch, mode):
    _forgets_a_removal(monkeypatch)
    tally = M.check_histories(SERIALIZABLE, mode, M.seeds(20, 64), str(tmp_path), delta_rs=False)
    assert len(tally.violations) >= 10, tally.summary()
    assert all("VIOLATION: the log does not hold the committed transactions' net effects" in text
               for _, text in tally.violations), tally.violations[0][1]
