"""The streaming source's plan (no Spark): entries, offsets, limits and refused commits."""

from __future__ import annotations

import json

import pytest

from isolde.errors import AnalysisError
from isolde.executor.log.actions import Metadata, Protocol
from isolde.executor.streaming.plan import (
    Offset,
    StreamChangeCommitError,
    StreamMetadataChangedError,
    StreamOptions,
    StreamPlan,
    parse_bytes,
)

from tests.helpers.log_tables import DEFAULT_SCHEMA, add, create_table


def _append(log, *paths, data_change=True):
    log.start_transaction().commit([add(p, data_change=data_change) for p in paths], "WRITE")


def _plan(log, **options):
    return StreamPlan.at_latest(log, StreamOptions.parse(options))


def _paths(plan, start, end):
    return [e.add.path for e in plan.batch(start, end)]


def _drain(plan, start, **limits):
    """Every batch from ``start`` until nothing is new: [(paths...), ...], last offset."""
    batches = []
    while True:
        end = plan.next_offset(start, **limits)
        if end == start:
            return batches, end
        batches.append(tuple(_paths(plan, start, end)))
        start = end


def test_initial_snapshot_then_new_commits(table_dir):
    log = create_table(table_dir, files=[add("a"), add("b")])
    _append(log, "c")
    plan = _plan(log)
    start = plan.initial_offset()
    assert start == Offset(1, -1, True)
    batches, end = _drain(plan, start)
    assert batches == [("a", "b", "c")] and end == Offset(2)
    _append(log, "d", "e")
    assert _drain(plan, end) == ([("d", "e")], Offset(3))


def test_offsets_round_trip_as_delta_names_them():
    off = Offset(7, 2, True)
    assert off.to_dict() == {"sourceVersion": 1, "reservoirVersion": 7, "index": 2, "isStartingVersion": True}
    assert Offset.from_dict(json.loads(json.dumps(off.to_dict()))) == off


def test_starting_version_reads_commits_not_the_snapshot(table_dir):
    log = create_table(table_dir, files=[add("a")])
    _append(log, "b")
    _append(log, "c")
    plan = _plan(log, startingVersion="1")
    assert plan.initial_offset() == Offset(1)
    assert _drain(plan, Offset(1)) == ([("b", "c")], Offset(3))
    latest = _plan(log, startingVersion="latest")
    assert latest.initial_offset() == Offset(3)
    assert _drain(latest, Offset(3)) == ([], Offset(3))


def test_starting_timestamp_is_the_first_version_at_or_after_it(table_dir):
    import os

    log = create_table(table_dir, files=[add("a")])
    _append(log, "b")
    _append(log, "c")
    for version in range(3):  # commit times 1000 s apart; commitInfo timestamps win over mtimes
        path = log.commit_path(version)
        lines = open(path).read().splitlines()
        body = [json.loads(x) for x in lines]
        for obj in body:
            if "commitInfo" in obj:
                obj["commitInfo"]["timestamp"] = 1_700_000_000_000 + version * 1_000_000
        with open(path, "w") as fh:
            fh.write("\n".join(json.dumps(o) for o in body) + "\n")
        os.utime(path, (1_700_000_000 + version * 1000,) * 2)
    log.invalidate()
    at_v1 = _plan(log, startingTimestamp=str(1_700_000_000_000 + 1_000_000))
    assert at_v1.initial_offset() == Offset(1)
    between = _plan(log, startingTimestamp=str(1_700_000_000_000 + 1_500_000))
    assert between.initial_offset() == Offset(2)
    assert _plan(log, startingTimestamp="2000-01-01").initial_offset() == Offset(0)
    assert _plan(log, startingTimestamp="2100-01-01T00:00:00Z").initial_offset() == Offset(3)


def test_max_files_splits_inside_a_version_and_never_drops_a_file(table_dir):
    log = create_table(table_dir, files=[add(f"s{i}") for i in range(5)])
    plan = _plan(log, maxFilesPerTrigger="2")
    start = plan.initial_offset()  # the snapshot of version 0, then the commits after it
    _append(log, "c1", "c2", "c3")
    batches, end = _drain(plan, start, max_files=2)
    assert batches == [("s0", "s1"), ("s2", "s3"), ("s4", "c1"), ("c2", "c3")]  # batches span versions
    assert end == Offset(2)


def test_max_bytes_is_soft_and_takes_whole_files(table_dir):
    log = create_table(table_dir, files=[add("a"), add("b"), add("c")])  # 100 bytes each
    plan = _plan(log)
    batches, _ = _drain(plan, plan.initial_offset(), max_bytes=150)
    assert batches == [("a", "b"), ("c",)]
    batches, _ = _drain(plan, plan.initial_offset(), max_bytes=1)
    assert batches == [("a",), ("b",), ("c",)]


def test_until_version_caps_available_now(table_dir):
    log = create_table(table_dir, files=[add("a")])
    plan = _plan(log)
    start = plan.initial_offset()
    until = plan.latest_version()
    _append(log, "late")
    end = plan.next_offset(start, until_version=until)
    assert end == Offset(1) and _paths(plan, start, end) == ["a"]
    assert plan.next_offset(end, until_version=until) == end


def test_optimize_commits_deliver_nothing(table_dir):
    log = create_table(table_dir, files=[add("a")])
    t = log.start_transaction()
    a = t.snapshot.file("a")
    t.commit([a.remove(data_change=False), add("big", data_change=False)], "OPTIMIZE")
    _append(log, "b")
    plan = _plan(log, startingVersion="1")
    assert _drain(plan, Offset(1)) == ([("b",)], Offset(3))


def _update(log):
    t = log.start_transaction()
    victim = t.snapshot.all_files[0]
    t.commit([victim.remove(), add("rewritten")], "UPDATE")


def test_a_data_update_fails_with_deltas_words(table_dir):
    log = create_table(table_dir, files=[add("a")])
    _append(log, "b")
    _update(log)
    plan = _plan(log, startingVersion="1")
    end = plan.next_offset(Offset(1))
    assert end == Offset(2) and _paths(plan, Offset(1), end) == ["b"]  # rows before the update arrive
    with pytest.raises(StreamChangeCommitError) as e:
        plan.next_offset(end)
    assert e.value.error_class == "DELTA_SOURCE_TABLE_IGNORE_CHANGES"
    assert str(e.value) == (
        "[DELTA_SOURCE_TABLE_IGNORE_CHANGES] Detected a data update (for example a) in the source table at "
        "version 2. This is currently not supported. If you'd like to ignore updates, set the option "
        "'skipChangeCommits' to 'true'. If you would like the data update to be reflected, please restart "
        f"this query with a fresh checkpoint directory. The source table can be found at path {log.table_path}.")


def test_skip_change_commits_skips_the_whole_commit(table_dir):
    log = create_table(table_dir, files=[add("a")])
    _update(log)
    _append(log, "c")
    plan = _plan(log, startingVersion="0", skipChangeCommits="true")
    assert _drain(plan, Offset(0)) == ([("a", "c")], Offset(3))


def test_deletes_only_fail_as_ignore_delete_unless_ignored(table_dir):
    log = create_table(table_dir, files=[add("a"), add("b")])
    t = log.start_transaction()
    t.commit([t.snapshot.file("a").remove()], "DELETE")
    with pytest.raises(StreamChangeCommitError) as e:
        _plan(log, startingVersion="0").next_offset(Offset(1))
    assert e.value.error_class == "DELTA_SOURCE_IGNORE_DELETE"
    assert "Detected deleted data (for example a) from streaming source at version 1" in str(e.value)
    plan = _plan(log, startingVersion="0", ignoreDeletes="true")
    assert _drain(plan, Offset(0)) == ([("a", "b")], Offset(2))


def test_metadata_change_stops_after_the_rows_before_it(table_dir):
    log = create_table(table_dir, files=[add("a")])
    plan = _plan(log)  # the query reads with version 0's schema
    start = plan.initial_offset()
    _append(log, "b")
    snap = log.update()
    wider = json.loads(snap.metadata.schema_string)
    wider["fields"].append({"name": "extra", "type": "integer", "nullable": True, "metadata": {}})
    t = log.start_transaction()
    t.commit([Metadata(json.dumps(wider), (), {})], "ADD COLUMNS")
    _append(log, "c")
    first = plan.next_offset(start)  # batch 0 is the initial snapshot alone
    assert first == Offset(1) and _paths(plan, start, first) == ["a"]
    end = plan.next_offset(first)
    assert end == Offset(2) and _paths(plan, first, end) == ["b"]
    with pytest.raises(StreamMetadataChangedError) as e:
        plan.next_offset(end)
    assert e.value.error_class == "DELTA_SCHEMA_CHANGED_WITH_VERSION"
    assert "Detected a metadata change (schema) in version 2" in str(e.value)
    assert "Please restart the query from the same checkpoint" in str(e.value)
    restarted = _plan(log)  # a restart reads with the latest metadata and goes on from version 2
    assert _drain(restarted, end) == ([("c",)], Offset(4))


def test_property_and_protocol_changes_stop_too_but_identity_marks_do_not(table_dir):
    log = create_table(table_dir, files=[add("a")])
    plan = _plan(log, startingVersion="0")
    meta = log.update().metadata
    # the same schema and properties written again (an identity high-water mark moved): no stop
    schema = json.loads(meta.schema_string)
    schema["fields"][0]["metadata"]["delta.identity.highWaterMark"] = 5
    log.start_transaction().commit([Metadata(json.dumps(schema), (), {}), add("b")], "WRITE")
    assert _drain(plan, Offset(0)) == ([("a", "b")], Offset(2))
    log.start_transaction().commit([Metadata(DEFAULT_SCHEMA, (), {"delta.appendOnly": "true"})], "SET TBLPROPERTIES")
    with pytest.raises(StreamMetadataChangedError, match=r"\(table properties\) in version 2"):
        plan.next_offset(Offset(2))
    plan2 = _plan(log, startingVersion="3")
    log.start_transaction().commit([Protocol(3, 7, ["deletionVectors"], ["deletionVectors"])],
                                   "UPGRADE PROTOCOL")
    with pytest.raises(StreamMetadataChangedError, match=r"\(protocol\) in version 3"):
        plan2.next_offset(Offset(3))


def test_options_are_checked_when_the_query_is_defined():
    with pytest.raises(AnalysisError) as e:
        StreamOptions.parse({"startingVersion": "1", "startingTimestamp": "2024-01-01"})
    assert e.value.error_class == "DELTA_STARTING_VERSION_AND_TIMESTAMP_BOTH_SET"
    with pytest.raises(AnalysisError):
        StreamOptions.parse({"maxFilesPerTrigger": "0"})
    with pytest.raises(AnalysisError):
        StreamOptions.parse({"startingVersion": "-1"})
    assert StreamOptions.parse({"MAXBYTESPERTRIGGER": "2m"}).max_bytes == 2 << 20
    assert StreamOptions.parse({}).file_limit() == 1000
    assert StreamOptions.parse({"maxBytesPerTrigger": "1k"}).file_limit() is None
    assert parse_bytes("2048") == 2048 and parse_bytes("1g") == 1 << 30


# --------------------------------------------------------------------------- batch 0 and restarts
# Spark asks initialOffset() for the start of batch 0 twice (MicroBatchExecution: for
# latestOffset when it plans the batch, again for partitions when it runs it) and, after a restart
# that finds batch 0 in offsets/ but not in commits/, once more from a new reader. These tests make
# the commits that land between those calls by hand: no timing involved.


def _spark_batch0(plan, between=(), **limits):
    """Batch 0 as Spark runs it: initialOffset -> latestOffset, commits land, initialOffset ->
    partitions. Returns (paths read, end)."""
    planned_from = plan.initial_offset()
    end = plan.next_offset(planned_from, **limits)
    for paths in between:
        _append(plan.log, *paths)
    return _paths(plan, plan.initial_offset(), end), end


@pytest.mark.parametrize("limits", [{"max_files": 2}, {"max_bytes": 150}, {}])
def test_batch0_reads_the_initial_snapshot_it_planned_while_commits_land(table_dir, limits):
    log = create_table(table_dir, files=[add("s0"), add("s1"), add("s2")])
    plan = _plan(log, maxFilesPerTrigger="2")
    _append(log, "c1")  # after the reader pinned its snapshot (version 0), before initialOffset()
    read, end = _spark_batch0(plan, between=[("c2",), ("c3",)], **limits)
    assert plan.initial_offset() == Offset(0, -1, True)  # asked again: the same answer
    expected = ["s0", "s1", "s2"] if not limits else ["s0", "s1"]
    assert read == expected and end == (Offset(1) if not limits else Offset(0, 1, True))
    batches, _ = _drain(plan, end, **limits)
    assert expected + [p for b in batches for p in b] == ["s0", "s1", "s2", "c1", "c2", "c3"]


def _delivered_after_restart(log, end, options, **limits):
    """A new run from the checkpoint: batch 0 (end recorded, not committed) again from a new
    reader's initialOffset(), then everything after it."""
    restarted = _plan(log, **options)
    replay = _paths(restarted, restarted.initial_offset(), end)
    batches, _ = _drain(restarted, end, **limits)
    return replay + [p for b in batches for p in b]


@pytest.mark.parametrize("limits", [{"max_files": 2}, {"max_bytes": 150}, {}])
def test_batch0_replayed_after_a_restart_reads_the_snapshot_it_recorded(table_dir, limits):
    log = create_table(table_dir, files=[add("s0"), add("s1"), add("s2")])
    plan = _plan(log, maxFilesPerTrigger="2")
    read, end = _spark_batch0(plan, between=[("c1",)], **limits)
    _append(log, "c2")
    # the run dies before commits/0: the restart replays batch 0 from a later initial snapshot
    assert _plan(log).initial_offset() == Offset(2, -1, True)
    delivered = _delivered_after_restart(log, end, {}, **limits)
    assert delivered[:len(read)] == read and delivered == ["s0", "s1", "s2", "c1", "c2"]


def test_batch0_of_an_empty_snapshot_then_a_restart(table_dir):
    log = create_table(table_dir)
    plan = _plan(log)
    read, end = _spark_batch0(plan, between=[("c1",)])
    assert read == [] and end == Offset(1)  # the (empty) snapshot of version 0 only
    _append(log, "c2")
    assert _delivered_after_restart(log, end, {}) == ["c1", "c2"]
    assert _drain(plan, end) == ([("c1", "c2")], Offset(3))


def test_restart_in_the_middle_of_a_split_snapshot_reads_the_rest_of_that_snapshot(table_dir):
    log = create_table(table_dir, files=[add("s0"), add("s1"), add("s2"), add("s3")])
    plan = _plan(log)
    end = plan.next_offset(plan.initial_offset(), max_files=1)
    end = plan.next_offset(end, max_files=1)
    assert end == Offset(0, 1, True)  # s0, s1 delivered and recorded
    _append(log, "c1")
    t = log.start_transaction()  # a file of the snapshot removed meanwhile (no data change)
    t.commit([t.snapshot.file("s2").remove(data_change=False), add("s2b", data_change=False)], "OPTIMIZE")
    restarted = _plan(log)
    assert restarted.initial_offset() == Offset(2, -1, True)  # not used: the checkpoint has offsets
    assert _drain(restarted, end, max_files=2) == ([("s2", "s3"), ("c1",)], Offset(3))


@pytest.mark.parametrize("option", ["latest", "timestamp"])
def test_batch0_after_latest_or_a_late_timestamp_keeps_its_start(table_dir, option):
    log = create_table(table_dir, files=[add("a")])
    # a timestamp after every commit starts, like 'latest', at the next version
    options = ({"startingVersion": "latest"} if option == "latest"
               else {"startingTimestamp": str(log.commit_timestamp(0) + 1)})
    plan = _plan(log, **options)
    assert plan.initial_offset() == Offset(1)
    _append(log, "b1", "b2")  # version 1
    read, end = _spark_batch0(plan, between=[("c",)], max_files=5)
    assert plan.initial_offset() == Offset(1)  # 'latest' is decided once
    assert read == ["b1", "b2"] and end == Offset(1, 1)  # version 1 only; its end names it
    assert _drain(plan, end, max_files=5) == ([("c",)], Offset(3))
    _append(log, "d")
    # a restart replays batch 0 from a new 'latest' (version 4): still b1, b2, then c and d
    assert _delivered_after_restart(log, end, options, max_files=5) == ["b1", "b2", "c", "d"]


def test_empty_batch0_after_latest_then_a_restart(table_dir):
    log = create_table(table_dir, files=[add("a")])
    plan = _plan(log, startingVersion="latest")
    read, end = _spark_batch0(plan)  # nothing new yet: Spark still runs batch 0, start = end
    assert read == [] and end == Offset(1)
    _append(log, "b")
    _append(log, "c")
    assert _delivered_after_restart(log, end, {"startingVersion": "latest"}) == ["b", "c"]
