"""Actions: exact JSON shape, round-trips, and tolerance of other engines' additions."""

from __future__ import annotations

import json

from isolde.executor.log.actions import (
    AddCDCFile,
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    action_to_json,
    parse_action,
    parse_commit,
    serialize_commit,
)

LINES = [
    {"commitInfo": {"timestamp": 1, "operation": "WRITE", "operationParameters": {"mode": "Append"},
                    "engineInfo": "Apache-Spark/3.5 Delta-Lake/3.2", "clusterId": "c-1", "isBlindAppend": True}},
    {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                  "writerFeatures": ["deletionVectors", "appendOnly"]}},
    {"metaData": {"id": "abc", "name": None, "description": None, "format": {"provider": "parquet", "options": {}},
                  "schemaString": '{"type":"struct","fields":[]}', "partitionColumns": ["p"],
                  "configuration": {"delta.enableDeletionVectors": "true"}, "createdTime": 5, "futureField": [1, 2]}},
    {"add": {"path": "p=1/f.parquet", "partitionValues": {"p": "1"}, "size": 10, "modificationTime": 2,
             "dataChange": True, "stats": '{"numRecords":3}', "tags": {"INSERTION_TIME": "1"},
             "deletionVector": {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4,
                                "sizeInBytes": 40, "cardinality": 6},
             "baseRowId": 7, "defaultRowCommitVersion": 1, "vendorExtension": {"x": 1}}},
    {"remove": {"path": "p=1/g.parquet", "deletionTimestamp": 3, "dataChange": False, "extendedFileMetadata": True,
                "partitionValues": {"p": "1"}, "size": 9}},
    {"txn": {"appId": "app", "version": 4, "lastUpdated": 9}},
    {"domainMetadata": {"domain": "delta.clustering", "configuration": '{"clusteringColumns":[]}', "removed": False}},
    {"cdc": {"path": "_change_data/c.parquet", "partitionValues": {}, "size": 5, "dataChange": False}},
    {"checkpointMetadata": {"version": 1}},
    {"someFutureAction": {"anything": True}},
]


def test_every_action_round_trips_exactly():
    data = "\n".join(json.dumps(line) for line in LINES)
    actions = parse_commit(data)
    # two unknown action types are ignored
    assert [type(a) for a in actions] == [
        CommitInfo, Protocol, Metadata, AddFile, RemoveFile, SetTransaction, DomainMetadata, AddCDCFile
    ]
    for line, action in zip(LINES, actions):
        assert json.loads(action_to_json(action)) == line


def test_unknown_fields_are_kept():
    actions = parse_commit("\n".join(json.dumps(line) for line in LINES))
    assert actions[0].extra == {"clusterId": "c-1"}
    assert actions[0].get("clusterId") == "c-1" and actions[0].get("operation") == "WRITE"
    assert actions[2].extra == {"futureField": [1, 2]}
    assert actions[3].extra == {"vendorExtension": {"x": 1}}


def test_add_file_key_uses_deletion_vector_unique_id():
    add = parse_action(LINES[3])
    assert add.key == ("p=1/f.parquet", "uab^-aqEH.-t@S}K{vb[*k^@4")
    assert add.num_records == 3
    remove = add.remove(deletion_timestamp=11, data_change=False)
    assert remove.key == add.key and remove.deletion_timestamp == 11 and remove.data_change is False
    inline = DeletionVectorDescriptor("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", 40, 6)
    assert inline.unique_id == "iwi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"


def test_contract_constructors():
    m = Metadata('{"type":"struct","fields":[]}', ["d"], {"k": 1})
    assert m.partition_columns == ("d",) and m.configuration == {"k": "1"}
    assert m.id and m.created_time and m.schema == {"type": "struct", "fields": []}
    p = Protocol(1, 2)
    assert p.to_dict() == {"minReaderVersion": 1, "minWriterVersion": 2}
    a = AddFile("f.parquet", {}, 1, 2)
    assert a.to_dict() == {"path": "f.parquet", "partitionValues": {}, "size": 1, "modificationTime": 2, "dataChange": True}
    r = RemoveFile("f.parquet")
    assert r.deletion_timestamp is not None and r.data_change
    t = SetTransaction("app", 3)
    assert t.to_dict() == {"appId": "app", "version": 3}


def test_serialize_commit_is_ndjson():
    body = serialize_commit([Protocol(1, 2), SetTransaction("a", 1)])
    lines = body.decode().splitlines()
    assert lines == ['{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}', '{"txn":{"appId":"a","version":1}}']
    assert body.endswith(b"\n")


def test_remove_without_timestamp_stays_without():
    r = parse_action({"remove": {"path": "x", "dataChange": True}})
    assert "deletionTimestamp" not in r.to_dict()
