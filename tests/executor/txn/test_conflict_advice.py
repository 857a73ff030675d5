"""The advice of a ConcurrentAppendException fits the table and the winning commit (issue 21):
partition advice only for a partitioned table, the blind-append remark only when the winner
was a blind append and the table is Serializable, and the row-level remark only when the
table has deletion vectors but its mode keeps conflicts per file. Real logs, no Spark."""

from __future__ import annotations

import pytest

from isolde.errors import (RETRY, ConcurrentAppendException, ConcurrentDeleteDeleteException,
                           ConcurrentDeleteReadException, ConflictFacts, MetadataChangedException)
from isolde.executor.log import DeltaLog
from isolde.executor.log.actions import Metadata, Protocol
from isolde.executor.txn.conflicts import ConflictChecker, TransactionSummary, WinningCommitSummary
from isolde.repl.formatting import format_error

from tests.helpers.log_tables import DEFAULT_SCHEMA, add, create_table

A = "2024-01-01"
DV_PROTOCOL = Protocol(3, 7, ["deletionVectors"], ["deletionVectors"])
DVS = {"delta.enableDeletionVectors": "true"}
SER = {"delta.isolationLevel": "Serializable"}

BLIND = ("The winning commit was a blind append: under WriteSerializable isolation (delta.isolationLevel) it "
         "would not conflict.")
PARTITIONS = ("To avoid the conflict, make the operation's condition select partitions (by date) that concurrent "
              "writers do not write.")


def row_level(setting):
    return (f"Conflicts on this table are checked per file: with SET TBLPROPERTIES ('isolde.rowLevelConcurrency' = "
            f"'{setting}') (it has deletion vectors) they would be checked per row, and statements that change "
            f"different rows of one file would both commit.")


def lose(tmp_path, *, partitioned=True, configuration=None, protocol=None, blind_winner=False, reads="partition",
         own_metadata=False) -> ConcurrentAppendException:
    """A rewrite of one file that loses to a commit adding a file where it read; the exception."""
    path = str(tmp_path / "t")
    pv = {"date": A} if partitioned else {}
    prefix = f"date={A}/" if partitioned else ""
    first = add(f"{prefix}a1.parquet", **pv)
    create_table(path, ("date",) if partitioned else (), configuration, [first], protocol=protocol)
    txn = DeltaLog.for_table(path).start_transaction()
    if reads == "partition":
        txn.filter_files(f"date = '{A}'")
    else:
        txn.read_whole_table()
    winner = DeltaLog.for_table(path).start_transaction()
    if not blind_winner:
        winner.filter_files(f"date = '{A}'")  # a read-modify-write (MERGE inserting rows)
    winner.commit([add(f"{prefix}w.parquet", **pv)], "WRITE" if blind_winner else "MERGE")
    mine = [txn.snapshot.file(first.path).remove(), add(f"{prefix}m.parquet", **pv)]
    if own_metadata:
        mine.insert(0, Metadata(DEFAULT_SCHEMA, ("date",) if partitioned else (),
                                {**(configuration or {}), "comment.x": "y"}))
    with pytest.raises(ConcurrentAppendException) as info:
        txn.commit(mine, "UPDATE")
    return info.value


def test_unpartitioned_table_and_a_read_modify_write_winner_get_no_partition_or_blind_advice(tmp_path):
    exc = lose(tmp_path, partitioned=False)
    assert exc.advice == RETRY
    assert exc.hints == ()
    assert exc.facts == ConflictFacts((), False, "WriteSerializable", None)
    assert str(exc) == (f"ConcurrentAppendException: Files were added to the table by a concurrent update. "
                        f"Conflicting commit: MERGE at version 1. Table: {tmp_path / 't'}. "
                        f"Conflicting file: w.parquet. Please try the operation again.")


def test_partitioned_table_gets_the_partition_advice_only(tmp_path):
    exc = lose(tmp_path)
    assert exc.hints == (PARTITIONS,)
    assert exc.advice == f"{RETRY} {PARTITIONS}"
    assert str(exc).endswith(f"Conflicting file: date={A}/w.parquet. {RETRY} {PARTITIONS}")
    assert exc.partition == f"date={A}"


def test_blind_winner_on_a_serializable_table(tmp_path):
    exc = lose(tmp_path, configuration=SER, blind_winner=True)
    assert exc.hints == (BLIND, PARTITIONS)
    assert exc.winning_operation == "WRITE" and exc.facts.winner_blind_append is True


def test_blind_winner_on_an_unpartitioned_serializable_table(tmp_path):
    exc = lose(tmp_path, partitioned=False, configuration=SER, blind_winner=True)
    assert exc.hints == (BLIND,)


def test_no_blind_append_remark_when_this_transaction_forced_serializable(tmp_path):
    # a transaction that changes metadata is checked as Serializable whatever the table says:
    # WriteSerializable would not help, so the remark would be false
    exc = lose(tmp_path, partitioned=False, blind_winner=True, own_metadata=True)
    assert exc.facts.isolation_level is None and exc.facts.winner_blind_append is True
    assert exc.hints == ()


def test_partitioned_table_with_deletion_vectors_in_auto_mode_could_check_rows(tmp_path):
    exc = lose(tmp_path, configuration=DVS, protocol=DV_PROTOCOL)
    assert exc.hints == (PARTITIONS, row_level("always"))


def test_row_level_turned_off_on_an_unpartitioned_table(tmp_path):
    exc = lose(tmp_path, partitioned=False, configuration={**DVS, "isolde.rowLevelConcurrency": "off"},
               protocol=DV_PROTOCOL, reads="whole")
    assert exc.hints == (row_level("auto"),)


def test_row_level_turned_off_on_a_partitioned_table_needs_always(tmp_path):
    exc = lose(tmp_path, configuration={**DVS, "isolde.rowLevelConcurrency": "off"}, protocol=DV_PROTOCOL)
    assert exc.hints == (PARTITIONS, row_level("always"))


def test_no_row_level_remark_where_row_level_is_already_the_mode(tmp_path):
    # unpartitioned, deletion vectors, auto: row level is available to statements whose read
    # can be checked per row; nothing to change on the table
    exc = lose(tmp_path, partitioned=False, configuration=DVS, protocol=DV_PROTOCOL, reads="whole")
    assert exc.hints == ()
    exc = lose(tmp_path / "always", configuration={**DVS, "isolde.rowLevelConcurrency": "always"},
               protocol=DV_PROTOCOL)
    assert exc.hints == (PARTITIONS,)


def test_no_row_level_remark_without_deletion_vectors(tmp_path):
    exc = lose(tmp_path, partitioned=False, configuration={"isolde.rowLevelConcurrency": "off"})
    assert exc.hints == ()


def _summary(**kw) -> TransactionSummary:
    base = dict(table=None, read_version=0, isolation_level="WriteSerializable", partition_columns=("date",),
                read_predicates=[], read_file_paths=set(), read_whole_table=True, read_app_ids=set(), actions=[])
    return TransactionSummary(**{**base, **kw})


def test_flags_given_by_the_transaction_need_no_log_read():
    winner = WinningCommitSummary.from_actions(1, [add(f"date={A}/w.parquet", date=A)])
    flags = {"deletion_vectors": True, "clustered": False, "row_level_mode": "auto"}
    checker = ConflictChecker(_summary(table_flags=flags), winner)
    assert checker.facts(ConcurrentAppendException).row_level_setting == "always"
    clustered = ConflictChecker(_summary(table_flags={**flags, "clustered": True}), winner)
    assert clustered.facts(ConcurrentAppendException).row_level_setting is None
    # an unreadable table (no path): no row-level fact, never an error
    assert ConflictChecker(_summary(), winner).facts(ConcurrentAppendException).row_level_setting is None
    # so do the conflicts over one file that a row-level check tells apart per row
    assert checker.facts(ConcurrentDeleteReadException).row_level_setting == "always"
    assert checker.facts(ConcurrentDeleteDeleteException).row_level_setting == "always"
    # other conflicts do not read the table's flags
    assert checker.facts(MetadataChangedException).row_level_setting is None


@pytest.mark.parametrize("mode,partitioned,setting", [
    ("auto", True, "always"), ("off", True, "always"), ("off", False, "auto"), ("always", True, None),
])
def test_a_rewrite_of_a_file_another_writer_changed_names_the_row_level_setting(tmp_path, mode, partitioned,
                                                                              setting):
    """Two writers change rows of one file: at file level the later one fails with ConcurrentDeleteReadException, whose advice says
    which setting would check the table per row (issue 55); none where row level is the mode."""
    path = str(tmp_path / "t")
    pv = {"date": A} if partitioned else {}
    prefix = f"date={A}/" if partitioned else ""
    first = add(f"{prefix}a1.parquet", **pv)
    create_table(path, ("date",) if partitioned else (), {**DVS, "isolde.rowLevelConcurrency": mode}, [first],
                 protocol=DV_PROTOCOL)
    txn = DeltaLog.for_table(path).start_transaction()
    txn.filter_files(f"date = '{A}'") if partitioned else txn.read_whole_table()
    winner = DeltaLog.for_table(path).start_transaction()
    winner.read_whole_table()
    winner.commit([winner.snapshot.file(first.path).remove()], "DELETE")
    with pytest.raises(ConcurrentDeleteReadException) as info:
        txn.commit([txn.snapshot.file(first.path).remove(), add(f"{prefix}m.parquet", **pv)], "UPDATE")
    assert info.value.hints == ((row_level(setting),) if setting else ())


def test_exception_without_facts_says_only_to_retry():
    exc = ConcurrentAppendException(table="t", winning_version=3, winning_operation="MERGE")
    assert exc.advice == RETRY and exc.hints == ()
    assert str(exc) == ("ConcurrentAppendException: Files were added to the table by a concurrent update. "
                        "Conflicting commit: MERGE at version 3. Table: t. Please try the operation again.")


def test_repl_prints_the_hints_after_what_to_do():
    exc = ConcurrentAppendException(table="t", winning_version=3, winning_operation="WRITE", partition=f"date={A}",
                                    facts=ConflictFacts(("date",), True, "Serializable", None))
    lines = format_error(exc).splitlines()
    assert lines == [
        "ConcurrentAppendException [DELTA_CONCURRENT_APPEND]",
        f"ConcurrentAppendException: Files were added to date={A} by a concurrent update. Table: t.",
        "Winning commit: WRITE at version 3.",
        f"What to do: re-run the statement; it will read the table at its new version. {BLIND} {PARTITIONS}",
    ]
    plain = format_error(ConcurrentAppendException(table="t", winning_version=3, winning_operation="MERGE"))
    assert plain.splitlines()[-1] == "What to do: re-run the statement; it will read the table at its new version."
