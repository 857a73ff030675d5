"""Row tracking at commit time (executor/txn/row_tracking.py): fresh row ids above the
high-water mark, commit versions, recommits keeping theirs, renumbering after losing a race,
the backfill when row tracking is turned on, and the materialised column names."""

from __future__ import annotations

import json

import pytest

from isolde.executor.log import DeltaLog
from isolde.executor.log.actions import AddFile, DomainMetadata, Metadata, RemoveFile
from isolde.executor.txn import row_tracking as RT

from tests.helpers.log_tables import DEFAULT_SCHEMA, create_table, stats

ON = {"delta.enableRowTracking": "true", "delta.enableDeletionVectors": "true"}


def _add(path, rows, **kw):
    return AddFile(path, {}, 100, 1_700_000_000_000, stats=stats(rows), **kw)


def _commit_actions(log, version):
    with open(log.commit_path(version), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _adds(log, version):
    return {a["add"]["path"]: a["add"] for a in _commit_actions(log, version) if "add" in a}


def _hwm(log, version):
    dms = [a["domainMetadata"] for a in _commit_actions(log, version) if "domainMetadata" in a]
    found = [json.loads(d["configuration"])["rowIdHighWaterMark"] for d in dms if d["domain"] == RT.DOMAIN]
    return found[0] if found else None


def test_new_files_get_consecutive_ids_above_the_high_water_mark(table_dir):
    log = create_table(table_dir, configuration=ON)
    log.start_transaction().commit([_add("a", 3), _add("b", 5)], "WRITE")
    adds = _adds(log, 1)
    assert (adds["a"]["baseRowId"], adds["b"]["baseRowId"]) == (0, 3)
    assert adds["a"]["defaultRowCommitVersion"] == adds["b"]["defaultRowCommitVersion"] == 1
    assert _hwm(log, 1) == 7
    log.start_transaction().commit([_add("c", 2)], "WRITE")
    assert _adds(log, 2)["c"]["baseRowId"] == 8 and _hwm(log, 2) == 9


def test_materialised_column_names_are_assigned_once(table_dir):
    log = create_table(table_dir, configuration=ON)
    conf = log.snapshot().metadata.configuration
    row_id, version = conf[RT.ROW_ID_COLUMN], conf[RT.COMMIT_VERSION_COLUMN]
    assert row_id.startswith("_row-id-col-") and version.startswith("_row-commit-version-col-") and row_id != version
    assert RT.materialized_columns(log.snapshot().metadata) == (row_id, version)
    m = log.snapshot().metadata
    log.start_transaction().commit([Metadata(m.schema_string, (), {**m.configuration, "x.y": "1"}, id=m.id)], "SET")
    assert log.snapshot().metadata.configuration[RT.ROW_ID_COLUMN] == row_id  # not renamed by later metadata


def test_recommit_and_remove_keep_the_ids_of_the_file_they_replace(table_dir):
    log = create_table(table_dir, configuration=ON, files=[_add("a", 4)])
    live = log.snapshot().file("a")
    assert live.base_row_id == 0 and live.default_row_commit_version == 0
    # a DELETE that adds a deletion vector: remove + re-add of the same path, neither numbered by the writer
    bare = AddFile("a", {}, 100, 1, stats=stats(4))
    log.start_transaction().commit([RemoveFile("a", deletion_timestamp=1), bare], "DELETE")
    rec = _commit_actions(log, 1)
    assert next(a["add"] for a in rec if "add" in a)["baseRowId"] == 0
    assert next(a["add"] for a in rec if "add" in a)["defaultRowCommitVersion"] == 0
    assert next(a["remove"] for a in rec if "remove" in a)["baseRowId"] == 0
    assert _hwm(log, 1) is None  # nothing new numbered: the mark stays


def test_a_writer_that_loses_the_race_renumbers_instead_of_conflicting(table_dir):
    log = create_table(table_dir, configuration=ON)
    t1, t2 = log.start_transaction(), log.start_transaction()
    assert t1.commit([_add("a", 10)], "WRITE") == 1
    assert t2.commit([_add("b", 5)], "WRITE") == 2  # blind appends: no conflict, new ids
    assert _adds(log, 1)["a"]["baseRowId"] == 0
    b = _adds(log, 2)["b"]
    assert b["baseRowId"] == 10 and b["defaultRowCommitVersion"] == 2
    assert _hwm(log, 2) == 14
    ids = [set(range(f.base_row_id, f.base_row_id + f.num_records)) for f in log.snapshot().all_files]
    assert not ids[0] & ids[1]


def test_turning_row_tracking_on_backfills_every_live_file(table_dir):
    log = create_table(table_dir, configuration={"delta.enableDeletionVectors": "true"},
                       files=[_add("a", 3), _add("b", 2)])
    assert all(f.base_row_id is None for f in log.snapshot().all_files)
    m = log.snapshot().metadata
    log.start_transaction().commit([Metadata(m.schema_string, (), {**m.configuration, **ON}, id=m.id)], "SET")
    snap = DeltaLog.for_table(table_dir).snapshot()
    assert "rowTracking" in snap.protocol.writer_features
    files = {f.path: f for f in snap.all_files}
    assert sorted((f.base_row_id, f.num_records) for f in files.values()) == [(0, 3), (3, 2)]
    assert all(f.default_row_commit_version == 1 and not f.data_change for f in files.values())
    assert RT.high_water_mark(snap.domain_metadata) == 4


def test_backfill_conflicts_with_a_concurrent_delete_instead_of_resurrecting(table_dir):
    from isolde.errors import ConcurrentDeleteReadException

    log = create_table(table_dir, configuration={"delta.enableDeletionVectors": "true"}, files=[_add("a", 3)])
    m = log.snapshot().metadata
    enabling = log.start_transaction()
    log.start_transaction().commit([RemoveFile("a", deletion_timestamp=1)], "DELETE")
    with pytest.raises(ConcurrentDeleteReadException):
        enabling.commit([Metadata(m.schema_string, (), {**m.configuration, **ON}, id=m.id)], "SET")
    assert log.snapshot().all_files == []


def test_ids_kept_by_a_commit_raise_the_high_water_mark():
    """A restore or clone that keeps old ids: new ids go above them."""
    assigner = RT.RowIdAssigner({}, high_water_mark=4)
    out = assigner.assign([_add("old", 10, base_row_id=20, default_row_commit_version=3), _add("new", 2)], 9)
    by_path = {a.path: a for a in out if isinstance(a, AddFile)}
    assert by_path["old"].base_row_id == 20 and by_path["old"].default_row_commit_version == 3
    assert by_path["new"].base_row_id == 30
    assert [json.loads(d.configuration) for d in out if isinstance(d, DomainMetadata)] == [{"rowIdHighWaterMark": 31}]


def test_missing_num_records_is_an_internal_error():
    from isolde.errors import InternalError

    with pytest.raises(InternalError, match="numRecords"):
        RT.RowIdAssigner({}, -1).assign([AddFile("x", {}, 1, 1)], 1)


@pytest.mark.parametrize("actions, declared, expected", [
    ([_add("n", 1)], None, True),  # an insert copies nothing
    ([RemoveFile("a"), _add("a", 1)], None, True),  # a deletion vector on a: rows stay in place
    ([RemoveFile("a")], None, True),  # a whole file deleted
    ([RemoveFile("a"), _add("n", 1)], None, False),  # rows moved to a new file without their ids
    ([RemoveFile("a"), _add("n", 1)], True, True),  # ... unless the writer materialised them
    # a deletion vector on a and the rows' new values in n: a deletion-vector UPDATE / MERGE
    ([RemoveFile("a"), _add("a", 1), _add("n", 1)], None, False),
    ([RemoveFile("a"), _add("a", 1), _add("n", 1)], True, True),
    ([_add("a", 1), _add("n", 1)], None, True),  # recommits beside an insert: no row left a file
])
def test_preserved_tag(actions, declared, expected):
    assert RT.preserved(actions, declared) is expected


def test_tables_without_the_feature_get_no_row_ids(table_dir):
    log = create_table(table_dir, schema=DEFAULT_SCHEMA)
    log.start_transaction().commit([_add("a", 3)], "WRITE")
    assert "baseRowId" not in _adds(log, 1)["a"] and _hwm(log, 1) is None


def test_the_high_water_mark_other_engines_wrote_is_read():
    """Delta and delta-rs write rowIdHighWaterMark (PROTOCOL.md); tables isolde wrote before
    used highWaterMark. Either is read, so no row id is handed out twice."""
    for conf, expected in [('{"rowIdHighWaterMark":9,"domainName":"delta.rowTracking"}', 9),
                           ('{"highWaterMark":31}', 31), ("{}", -1)]:
        assert RT.high_water_mark({RT.DOMAIN: DomainMetadata(RT.DOMAIN, conf)}) == expected
