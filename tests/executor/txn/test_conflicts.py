"""Table-driven conflict tests over real logs (after Delta's OptimisticTransactionSuite and
delta-rs's conflict_checker.rs tests).

Each case: a table (setup), what the transaction reads, the commits that win the race
meanwhile, what the transaction writes, and the expected outcome: success (it rebases
past every winner) or the exact exception with the winning version and operation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Callable

import pytest

from isolde.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    MetadataChangedException,
    ProtocolChangedException,
)
from isolde.executor.log import DeltaLog
from isolde.executor.log.actions import DomainMetadata, Metadata, Protocol, RemoveFile, SetTransaction

from tests.helpers.log_tables import DEFAULT_SCHEMA, add, create_table, stats

A, B, C = "2024-01-01", "2024-01-02", "2024-01-03"


@dataclass
class Setup:
    partition_columns: tuple = ()
    configuration: dict = field(default_factory=dict)
    files: list = field(default_factory=list)
    exists: bool = True


@dataclass
class Winner:
    """A concurrent commit: its own reads (None = blind) and its actions."""

    actions: Callable | list
    operation: str = "WRITE"
    reads: Callable | None = None


@dataclass
class Expect:
    error: type | None = None
    winning_version: int | None = None
    winning_operation: str | None = None
    partition: str | None = None


OK = Expect()


def _resolve(actions, snapshot):
    return actions(snapshot) if callable(actions) else list(actions)


def check(tmp_path, name, setup: Setup, reads, concurrent_commits, actions, expect: Expect, *, max_attempts=None):
    path = str(tmp_path / name)
    if setup.exists:
        create_table(path, setup.partition_columns, setup.configuration, setup.files)
    log = DeltaLog.for_table(path)
    txn = log.start_transaction()
    if max_attempts is not None:
        txn.max_attempts = max_attempts
    if reads is not None:
        reads(txn)
    start_version = txn.read_version
    for w in concurrent_commits:
        wtxn = DeltaLog.for_table(path).start_transaction()
        if w.reads is not None:
            w.reads(wtxn)
        wtxn.commit(_resolve(w.actions, wtxn.snapshot), w.operation)
    winners_end = start_version + len(concurrent_commits)
    my_actions = _resolve(actions, txn.snapshot)
    if expect.error is None:
        version = txn.commit(my_actions, "MERGE")
        assert version == winners_end + 1
        final = DeltaLog.for_table(path).snapshot()
        assert final.version == version
        info = DeltaLog.for_table(path).history(1)[0]
        assert info["operation"] == "MERGE"
        if start_version >= 0:
            assert info["readVersion"] == start_version  # rebasing never rewrites what was read
        live = {f.path for f in final.all_files}
        for a in my_actions:
            if isinstance(a, RemoveFile):
                assert a.path not in live
            elif hasattr(a, "partition_values") and not isinstance(a, RemoveFile):
                assert a.path in live
        return txn
    with pytest.raises(expect.error) as info:
        txn.commit(my_actions, "MERGE")
    exc = info.value
    assert type(exc) is expect.error
    assert exc.winning_version == expect.winning_version
    assert exc.winning_operation == expect.winning_operation
    assert exc.table == log.table_path
    if expect.partition is not None:
        assert exc.partition == expect.partition
    assert exc.error_class.startswith("DELTA_")
    assert exc.sqlstate == "2D521"
    # the loser left nothing behind: the log ends at the last winner
    assert DeltaLog.for_table(path).snapshot().version == winners_end
    return txn


# --------------------------------------------------------------------------- building blocks

PART = ("date",)
PARTS2 = ("date", "country")
SER = {"delta.isolationLevel": "Serializable"}

f_a1 = add("date=A/a1.parquet", date=A)
f_a2 = add("date=A/a2.parquet", date=A)
f_b1 = add("date=B/b1.parquet", date=B)


def read_a(t):
    t.filter_files(f"date = '{A}'")


def read_b(t):
    t.filter_files(f"date = '{B}'")


def read_all(t):
    t.read_whole_table()


def blind_add(path, **pv):
    return Winner([add(path, **pv)], "WRITE")


def rmw_add(path, reads=read_b, **pv):
    """A read-modify-write winner (e.g. MERGE inserting rows): not a blind append."""
    return Winner([add(path, **pv)], "MERGE", reads=reads)


def remove_of(path, data_change=True, operation="DELETE", reads=None):
    def build(snapshot):
        f = snapshot.file(path)
        return [f.remove(data_change=data_change)]

    return Winner(build, operation, reads=reads)


def compaction_of(paths, new_path, operation="OPTIMIZE", **pv):
    def build(snapshot):
        out = [snapshot.file(p).remove(data_change=False) for p in paths]
        return out + [add(new_path, data_change=False, **pv)]

    return Winner(build, operation, reads=lambda t: t.filter_files(None))


def my_compaction(paths, new_path, **pv):
    def build(snapshot):
        return [snapshot.file(p).remove(data_change=False) for p in paths] + [add(new_path, data_change=False, **pv)]

    return build


def my_rewrite(paths, new_path, **pv):
    def build(snapshot):
        return [snapshot.file(p).remove() for p in paths] + [add(new_path, **pv)]

    return build


def enabling(properties: dict):
    """A winner that sets ``properties`` on the table it read (same id, schema, partitioning)."""
    def build(snapshot):
        return [replace(snapshot.metadata, configuration={**snapshot.metadata.configuration, **properties})]

    return build


def name_mapping():
    """A winner that turns on column mapping by name: each field gets an id and its own name as
    its physical name (what ALTER TABLE ... SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name') writes)."""
    def build(snapshot):
        schema = json.loads(snapshot.metadata.schema_string)
        for i, f in enumerate(schema["fields"], 1):
            f["metadata"] = {**f.get("metadata", {}), "delta.columnMapping.id": i,
                             "delta.columnMapping.physicalName": f["name"]}
        conf = {**snapshot.metadata.configuration, "delta.columnMapping.mode": "name",
                "delta.columnMapping.maxColumnId": str(len(schema["fields"]))}
        return [replace(snapshot.metadata, schema_string=json.dumps(schema), configuration=conf)]

    return build


# --------------------------------------------------------------------------- the cases

# (name, setup, reads, concurrent commits, actions, expect)
CASES = [
    # appends
    ("blind append vs blind append", Setup(PART), None, [blind_add("w.parquet", date=A)], [add("m.parquet", date=A)], OK),
    ("blind append vs blind append, Serializable", Setup(PART, SER), None, [blind_add("w.parquet", date=A)],
     [add("m.parquet", date=A)], OK),
    ("blind append vs rmw write in same partition", Setup(PART, files=[f_a1]), None,
     [rmw_add("w.parquet", read_a, date=A)], [add("m.parquet", date=A)], OK),
    ("blind append vs delete", Setup(PART, files=[f_a1]), None, [remove_of(f_a1.path)], [add("m.parquet", date=A)], OK),
    # disjoint partitions
    ("disjoint partitions: rmw add elsewhere", Setup(PART, files=[f_a1, f_b1]), read_a,
     [rmw_add("date=B/w.parquet", date=B)], my_rewrite([f_a1.path], "date=A/m.parquet", date=A), OK),
    ("same partition: rmw add", Setup(PART, files=[f_a1, f_b1]), read_a,
     [rmw_add("date=A/w.parquet", read_a, date=A)], my_rewrite([f_a1.path], "date=A/m.parquet", date=A),
     Expect(ConcurrentAppendException, 1, "MERGE", f"date={A}")),
    ("same partition: blind add, WriteSerializable", Setup(PART, files=[f_a1]), read_a,
     [blind_add("date=A/w.parquet", date=A)], my_rewrite([f_a1.path], "date=A/m.parquet", date=A), OK),
    ("same partition: blind add, Serializable", Setup(PART, SER, files=[f_a1]), read_a,
     [blind_add("date=A/w.parquet", date=A)], my_rewrite([f_a1.path], "date=A/m.parquet", date=A),
     Expect(ConcurrentAppendException, 1, "WRITE", f"date={A}")),
    ("other partition: blind add, Serializable", Setup(PART, SER, files=[f_a1]), read_a,
     [blind_add("date=B/w.parquet", date=B)], my_rewrite([f_a1.path], "date=A/m.parquet", date=A), OK),
    ("compaction add (dataChange=false) never conflicts as an append", Setup(PART, SER, files=[f_a1, f_a2]),
     lambda t: t.filter_files(f"date = '{B}'"), [compaction_of([f_a1.path, f_a2.path], "date=A/c.parquet", date=A)],
     [add("date=B/m.parquet", date=B)], OK),
    # unpartitioned tables
    ("unpartitioned: blind add, WriteSerializable", Setup(files=[add("f1.parquet")]),
     lambda t: t.filter_files("id = 5"), [blind_add("w.parquet")], [add("m.parquet")], OK),
    ("unpartitioned: blind add, Serializable", Setup((), SER, files=[add("f1.parquet")]),
     lambda t: t.filter_files("id = 5"), [blind_add("w.parquet")], [add("m.parquet")],
     Expect(ConcurrentAppendException, 1, "WRITE")),
    ("unpartitioned: rmw add", Setup(files=[add("f1.parquet")]), lambda t: t.filter_files("id = 5"),
     [rmw_add("w.parquet", lambda t: t.filter_files("id = 7"))], [add("m.parquet")],
     Expect(ConcurrentAppendException, 1, "MERGE")),
    # nested partitions
    ("nested partitions: other country", Setup(PARTS2), lambda t: t.filter_files(f"date = '{A}' AND country = 'US'"),
     [rmw_add("w.parquet", lambda t: t.filter_files("country = 'UK'"), date=A, country="UK")],
     [add("m.parquet", date=A, country="US")], OK),
    ("nested partitions: same date and country", Setup(PARTS2),
     lambda t: t.filter_files(f"date = '{A}' AND country = 'US'"),
     [rmw_add("w.parquet", lambda t: t.filter_files("country = 'US'"), date=A, country="US")],
     [add("m.parquet", date=A, country="US")], Expect(ConcurrentAppendException, 1, "MERGE", f"date={A}/country=US")),
    ("nested partitions: only date pinned", Setup(PARTS2), lambda t: t.filter_files(f"date = '{A}'"),
     [rmw_add("w.parquet", lambda t: t.filter_files("country = 'UK'"), date=A, country="UK")],
     [add("m.parquet", date=A, country="US")], Expect(ConcurrentAppendException, 1, "MERGE")),
    ("recorded read of nothing ('false') is not blind but reads no partition", Setup(PART, SER),
     lambda t: t.record_read("false", files=[]), [rmw_add("w.parquet", date=A)], [add("m.parquet", date=A)], OK),
    ("recorded read of nothing, unpartitioned", Setup((), SER), lambda t: t.record_read("false", files=[]),
     [blind_add("w.parquet")], [add("m.parquet")], OK),
    # OR / IN / NOT / range predicates on partitions
    ("OR predicate: add in second branch", Setup(PART), lambda t: t.filter_files(f"date = '{A}' OR date = '{B}'"),
     [rmw_add("w.parquet", date=B)], [add("m.parquet", date=A)], Expect(ConcurrentAppendException, 1, "MERGE")),
    ("OR predicate: add outside", Setup(PART), lambda t: t.filter_files(f"date = '{A}' OR date = '{B}'"),
     [rmw_add("w.parquet", date=C)], [add("m.parquet", date=A)], OK),
    ("IN predicate: add outside", Setup(PART), lambda t: t.filter_files(f"date IN ('{A}', '{B}')"),
     [rmw_add("w.parquet", date=C)], [add("m.parquet", date=A)], OK),
    ("NOT IN predicate: add inside", Setup(PART), lambda t: t.filter_files(f"date NOT IN ('{A}', '{B}')"),
     [rmw_add("w.parquet", date=C)], [add("m.parquet", date=C)], Expect(ConcurrentAppendException, 1, "MERGE")),
    ("range on partition: add outside", Setup(PART), lambda t: t.filter_files(f"date > '{B}'"),
     [rmw_add("w.parquet", date=A)], [add("m.parquet", date=C)], OK),
    ("mixed conjuncts: partition part scopes", Setup(PART), lambda t: t.filter_files(f"date = '{A}' AND id > 3"),
     [rmw_add("w.parquet", date=B)], [add("m.parquet", date=A)], OK),
    ("OR across partition and data: whole scope", Setup(PART), lambda t: t.filter_files(f"date = '{A}' OR id > 3"),
     [rmw_add("w.parquet", date=B)], [add("m.parquet", date=A)], Expect(ConcurrentAppendException, 1, "MERGE")),
    ("unanalysable predicate reads everything", Setup(PART), lambda t: t.filter_files("upper(date) = 'X'"),
     [rmw_add("w.parquet", date=B)], [add("m.parquet", date=A)], Expect(ConcurrentAppendException, 1, "MERGE")),
    ("NULL partition: IS NULL read, NULL add", Setup(PART), lambda t: t.filter_files("date IS NULL"),
     [rmw_add("w.parquet", date=None)], [add("m.parquet", date=None)],
     Expect(ConcurrentAppendException, 1, "MERGE", "date=__HIVE_DEFAULT_PARTITION__")),
    ("NULL partition: IS NULL read, non-NULL add", Setup(PART), lambda t: t.filter_files("date IS NULL"),
     [rmw_add("w.parquet", date=A)], [add("m.parquet", date=None)], OK),
    ("NULL partition: equality never matches NULL", Setup(PART), lambda t: t.filter_files(f"date = '{A}'"),
     [rmw_add("w.parquet", date=None)], [add("m.parquet", date=A)], OK),
    # read whole table
    ("whole table: rmw add anywhere", Setup(PART), read_all, [rmw_add("w.parquet", date=C)], [add("m.parquet", date=A)],
     Expect(ConcurrentAppendException, 1, "MERGE")),
    ("whole table: blind add, WriteSerializable", Setup(PART), read_all, [blind_add("w.parquet", date=C)],
     [add("m.parquet", date=A)], OK),
    ("whole table: any data-changing remove", Setup(PART, files=[f_a1, f_b1]), read_all,
     [remove_of(f_b1.path)], [add("m.parquet", date=A)], Expect(ConcurrentDeleteReadException, 1, "DELETE")),
    ("whole table: compaction remove is fine", Setup(PART, files=[f_a1, f_a2]), read_all,
     [compaction_of([f_a1.path, f_a2.path], "c.parquet", date=A)], [add("m.parquet", date=B)], OK),
    ("filter_files(None) is a full scan", Setup(PART, files=[f_a1]), lambda t: t.filter_files(None),
     [rmw_add("w.parquet", date=C)], [add("m.parquet", date=A)], Expect(ConcurrentAppendException, 1, "MERGE")),
    # deletes vs reads
    ("delete-read: winner deletes a file I read", Setup(PART, files=[f_a1, f_b1]), read_a,
     [remove_of(f_a1.path)], [add("m.parquet", date=A)], Expect(ConcurrentDeleteReadException, 1, "DELETE", f"date={A}")),
    ("delete-read: winner deletes a file I did not read", Setup(PART, files=[f_a1, f_b1]), read_a,
     [remove_of(f_b1.path)], [add("m.parquet", date=A)], OK),
    ("stats pruning: unread file deleted", Setup(files=[add("lo.parquet", stats_json=stats(id=(0, 10))),
                                                        add("hi.parquet", stats_json=stats(id=(200, 300)))]),
     lambda t: t.filter_files("id > 100"), [remove_of("lo.parquet")], my_rewrite(["hi.parquet"], "m.parquet"), OK),
    ("stats pruning: read file deleted", Setup(files=[add("lo.parquet", stats_json=stats(id=(0, 10))),
                                                      add("hi.parquet", stats_json=stats(id=(200, 300)))]),
     lambda t: t.filter_files("id > 100"), [remove_of("hi.parquet")], my_rewrite(["hi.parquet"], "m.parquet"),
     Expect(ConcurrentDeleteReadException, 1, "DELETE")),
    # deletes vs deletes, compaction
    ("delete-delete: both remove the same file (no read recorded)", Setup(PART, files=[f_a1]), None,
     [remove_of(f_a1.path)], my_rewrite([f_a1.path], "m.parquet", date=A),
     Expect(ConcurrentDeleteDeleteException, 1, "DELETE", f"date={A}")),
    ("compaction vs compaction of the same files", Setup(PART, files=[f_a1, f_a2]), None,
     [compaction_of([f_a1.path, f_a2.path], "c1.parquet", date=A)],
     my_compaction([f_a1.path, f_a2.path], "c2.parquet", date=A), Expect(ConcurrentDeleteDeleteException, 1, "OPTIMIZE")),
    ("compaction vs compaction of other partitions", Setup(PART, files=[f_a1, f_a2, f_b1, add("date=B/b2.parquet", date=B)]),
     None, [compaction_of([f_a1.path, f_a2.path], "c1.parquet", date=A)],
     my_compaction([f_b1.path, "date=B/b2.parquet"], "c2.parquet", date=B), OK),
    ("compaction vs read: rewrite of a file I only read", Setup(PART, files=[f_a1, f_a2]), read_a,
     [compaction_of([f_a1.path, f_a2.path], "c.parquet", date=A)], [add("m.parquet", date=A)], OK),
    ("compaction vs rewrite of the same file", Setup(PART, files=[f_a1, f_a2]), read_a,
     [compaction_of([f_a1.path, f_a2.path], "c.parquet", date=A)], my_rewrite([f_a1.path], "m.parquet", date=A),
     Expect(ConcurrentDeleteDeleteException, 1, "OPTIMIZE")),
    ("my compaction vs concurrent rmw append (snapshot isolation)", Setup(PART, SER, files=[f_a1, f_a2]),
     lambda t: t.filter_files(f"date = '{A}'"), [rmw_add("date=A/w.parquet", read_a, date=A)],
     my_compaction([f_a1.path, f_a2.path], "c.parquet", date=A), OK),
    ("my compaction vs concurrent delete of an input", Setup(PART, files=[f_a1, f_a2]),
     lambda t: t.filter_files(f"date = '{A}'"), [remove_of(f_a1.path)],
     my_compaction([f_a1.path, f_a2.path], "c.parquet", date=A), Expect(ConcurrentDeleteReadException, 1, "DELETE")),
    # a read follows its rows through a compaction: deleting one from the new file still conflicts
    ("compaction then delete from the compacted file of a file I read", Setup(PART, files=[f_a1, f_a2, f_b1]), read_a,
     [compaction_of([f_a1.path, f_a2.path], "date=A/c.parquet", date=A), remove_of("date=A/c.parquet")],
     [add("m.parquet", date=A)], Expect(ConcurrentDeleteReadException, 2, "DELETE", f"date={A}")),
    ("compaction of files I read, then a delete in another partition", Setup(PART, files=[f_a1, f_a2, f_b1]), read_a,
     [compaction_of([f_a1.path, f_a2.path], "date=A/c.parquet", date=A), remove_of(f_b1.path)],
     [add("m.parquet", date=A)], OK),
    # application ids
    ("app id read then advanced", Setup(), lambda t: t.txn_version("stream-1"),
     [Winner([SetTransaction("stream-1", 7), add("w.parquet")], "STREAMING UPDATE")],
     [SetTransaction("stream-1", 7), add("m.parquet")], Expect(ConcurrentTransactionException, 1, "STREAMING UPDATE")),
    ("app id: other application", Setup(), lambda t: t.txn_version("stream-1"),
     [Winner([SetTransaction("stream-2", 3), add("w.parquet")], "STREAMING UPDATE")],
     [SetTransaction("stream-1", 1), add("m.parquet")], OK),
    ("app id written by both", Setup(), None,
     [Winner([SetTransaction("job", 1)], "WRITE")], [SetTransaction("job", 1)],
     Expect(ConcurrentTransactionException, 1, "WRITE")),
    ("same metadata domain written by both", Setup(), None,
     [Winner([DomainMetadata("delta.clustering", '{"clusteringColumns":[["id"]]}')], "CLUSTER BY")],
     [DomainMetadata("delta.clustering", '{"clusteringColumns":[["value"]]}')],
     Expect(ConcurrentTransactionException, 1, "CLUSTER BY")),
    ("different metadata domains", Setup(), None,
     [Winner([DomainMetadata("a.domain", "{}")], "X")], [DomainMetadata("b.domain", "{}")], OK),
    # protocol and metadata
    ("metadata change vs blind append", Setup(), None,
     [Winner([Metadata(DEFAULT_SCHEMA, (), {"delta.appendOnly": "false"})], "SET TBLPROPERTIES")],
     [add("m.parquet")], Expect(MetadataChangedException, 1, "SET TBLPROPERTIES")),
    # a protocol that gained a feature asks nothing of a writer until metadata turns it on (Delta
    # 4.4); one that lost a feature fails every writer
    ("protocol upgrade vs blind append", Setup(), None,
     [Winner([Protocol(1, 3)], "UPGRADE PROTOCOL")], [add("m.parquet")], OK),
    ("protocol downgrade vs blind append", Setup(configuration={"delta.enableDeletionVectors": "true"}), None,
     [Winner([Protocol(1, 2)], "DROP FEATURE")], [add("m.parquet")],
     Expect(ProtocolChangedException, 1, "DROP FEATURE")),
    # feature enablement (Delta 4.1+, FeatureEnablementConcurrencySuite): a winner that only turns
    # on a feature a prepared commit honours fails nobody who changes no metadata or protocol
    ("enable deletion vectors (protocol + metadata) vs rmw", Setup(PART, files=[f_a1]), read_a,
     [Winner(enabling({"delta.enableDeletionVectors": "true"}), "SET TBLPROPERTIES")],
     my_rewrite([f_a1.path], "date=A/m.parquet", date=A), OK),
    ("enable in-commit timestamps and v2 checkpoints vs rmw", Setup(PART, files=[f_a1]), read_a,
     [Winner(enabling({"delta.enableInCommitTimestamps": "true", "delta.checkpointPolicy": "v2"}),
             "SET TBLPROPERTIES")],
     my_rewrite([f_a1.path], "date=A/m.parquet", date=A), OK),
    ("enable column mapping by name vs rmw", Setup(PART, files=[f_a1]), read_a,
     [Winner(name_mapping(), "SET TBLPROPERTIES")], my_rewrite([f_a1.path], "date=A/m.parquet", date=A), OK),
    ("enable deletion vectors vs my metadata change", Setup(PART, files=[f_a1]), read_a,
     [Winner(enabling({"delta.enableDeletionVectors": "true"}), "SET TBLPROPERTIES")],
     [Metadata(DEFAULT_SCHEMA, PART, {"delta.appendOnly": "false"})],
     Expect(MetadataChangedException, 1, "SET TBLPROPERTIES")),
    ("enable deletion vectors vs my protocol change", Setup(PART, files=[f_a1]), read_a,
     [Winner(enabling({"delta.enableDeletionVectors": "true"}), "SET TBLPROPERTIES")],
     [Protocol(1, 3), add("m.parquet", date=A)], Expect(ProtocolChangedException, 1, "SET TBLPROPERTIES")),
    ("a replaced table (new id) with deletion vectors vs rmw", Setup(PART, files=[f_a1]), read_a,
     [Winner([Metadata(DEFAULT_SCHEMA, PART, {"delta.enableDeletionVectors": "true"})], "SET TBLPROPERTIES")],
     [add("m.parquet", date=A)], Expect(MetadataChangedException, 1, "SET TBLPROPERTIES")),
    ("disabling deletion vectors vs rmw", Setup(PART, {"delta.enableDeletionVectors": "true"}, files=[f_a1]),
     read_a, [Winner(enabling({"delta.enableDeletionVectors": "false"}), "SET TBLPROPERTIES")],
     [add("m.parquet", date=A)], Expect(MetadataChangedException, 1, "SET TBLPROPERTIES")),
    ("enable row tracking vs rmw", Setup(PART), read_a,
     [Winner(enabling({"delta.enableRowTracking": "true"}), "SET TBLPROPERTIES")],
     [add("m.parquet", stats_json=stats(3), date=A)], OK),
    ("a CHECK constraint vs rmw", Setup(PART, files=[f_a1]), read_a,
     [Winner(enabling({"delta.constraints.pos": "id > 0"}), "ADD CONSTRAINT")],
     [add("m.parquet", date=A)], Expect(MetadataChangedException, 1, "ADD CONSTRAINT")),
    ("two writers create the table", Setup(exists=False), None,
     [Winner([Metadata(DEFAULT_SCHEMA), add("w.parquet")], "CREATE TABLE")],
     [Metadata(DEFAULT_SCHEMA), add("m.parquet")], Expect(ProtocolChangedException, 0, "CREATE TABLE")),
    ("my metadata change is checked as Serializable", Setup(PART, files=[f_a1]), read_a,
     [blind_add("date=A/w.parquet", date=A)], [Metadata(DEFAULT_SCHEMA, PART, {"delta.appendOnly": "false"})],
     Expect(ConcurrentAppendException, 1, "WRITE")),
    # several winners in a row
    ("several winners, all compatible", Setup(PART, files=[f_a1, f_b1]), read_a,
     [blind_add("date=A/w1.parquet", date=A), rmw_add("date=B/w2.parquet", date=B), remove_of(f_b1.path),
      compaction_of(["date=A/w1.parquet"], "date=A/c.parquet", date=A)],
     my_rewrite([f_a1.path], "date=A/m.parquet", date=A), OK),
    ("several winners, the third conflicts", Setup(PART, files=[f_a1, f_b1]), read_a,
     [blind_add("date=A/w1.parquet", date=A), rmw_add("date=B/w2.parquet", date=B),
      rmw_add("date=A/w3.parquet", read_a, date=A), rmw_add("date=A/w4.parquet", read_a, date=A)],
     my_rewrite([f_a1.path], "date=A/m.parquet", date=A), Expect(ConcurrentAppendException, 3, "MERGE")),
    ("several winners, Serializable: the first blind one conflicts", Setup(PART, SER, files=[f_a1]), read_a,
     [rmw_add("date=B/w1.parquet", date=B), blind_add("date=A/w2.parquet", date=A)],
     my_rewrite([f_a1.path], "date=A/m.parquet", date=A), Expect(ConcurrentAppendException, 2, "WRITE")),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_conflict_matrix(tmp_path, case):
    name, setup, reads, winners, actions, expect = case
    check(tmp_path, "t", setup, reads, winners, actions, expect)


def test_a_commit_rebased_over_row_tracking_enablement_numbers_its_rows(tmp_path):
    """The winner added row tracking (and backfilled the live file's ids); the loser, prepared
    without it, gets ids above the winner's high-water mark and says it preserved none."""
    f = add("date=A/f.parquet", stats_json=stats(4), date=A)
    txn = check(tmp_path, "t", Setup(PART, files=[f]), read_a,
                [Winner(enabling({"delta.enableRowTracking": "true"}), "SET TBLPROPERTIES")],
                [add("m.parquet", stats_json=stats(3), date=A)], OK)
    final = DeltaLog.for_table(str(tmp_path / "t")).snapshot()
    ids = {a.path: (a.base_row_id, a.default_row_commit_version) for a in final.all_files}
    assert ids == {"date=A/f.parquet": (0, 1), "m.parquet": (4, 2)}
    assert txn.commit_info.extra["tags"]["delta.rowTracking.preserved"] == "false"


def test_rebased_commit_records_isolation_and_blindness(tmp_path):
    txn = check(tmp_path, "t", Setup(PART), None, [blind_add("w.parquet", date=A)], [add("m.parquet", date=A)], OK)
    assert txn.attempts == 2
    assert txn.winning_versions == [1]
    assert txn.commit_info.is_blind_append is True
    assert txn.commit_info.isolation_level == "WriteSerializable"


def test_compaction_commit_uses_snapshot_isolation(tmp_path):
    txn = check(tmp_path, "t", Setup(PART, files=[f_a1, f_a2]), None, [],
                my_compaction([f_a1.path, f_a2.path], "c.parquet", date=A), OK)
    assert txn.commit_info.isolation_level == "SnapshotIsolation"


def test_running_out_of_attempts(tmp_path):
    with pytest.raises(ConcurrentWriteException) as info:
        check(tmp_path, "t", Setup(PART), None, [blind_add("w.parquet", date=A)], [add("m.parquet", date=A)], OK,
              max_attempts=1)
    assert isinstance(info.value, ConcurrentModificationException)
    assert info.value.winning_version == 1 and info.value.winning_operation == "WRITE"
    assert DeltaLog.for_table(str(tmp_path / "t")).snapshot().version == 1


def test_a_real_conflict_beats_running_out_of_attempts(tmp_path):
    check(tmp_path, "t", Setup(PART, files=[f_a1]), read_a, [remove_of(f_a1.path)], [add("m.parquet", date=A)],
          Expect(ConcurrentDeleteReadException, 1, "DELETE"), max_attempts=1)


def test_conflict_message_names_winner(tmp_path):
    path = str(tmp_path / "t")
    create_table(path, PART, files=[f_a1])
    txn = DeltaLog.for_table(path).start_transaction()
    read_a(txn)
    w = DeltaLog.for_table(path).start_transaction()
    w.commit([w.snapshot.file(f_a1.path).remove()], "DELETE")
    with pytest.raises(ConcurrentDeleteReadException) as info:
        txn.commit([add("m.parquet", date=A)], "UPDATE")
    text = str(info.value)
    assert "DELETE" in text and "version 1" in text and f"date={A}" in text
    assert info.value.error_class == "DELTA_CONCURRENT_DELETE_READ"
