"""In-commit timestamps written: every commit of a table with delta.enableInCommitTimestamps
carries commitInfo.inCommitTimestamp first, strictly increasing; turning it on for an existing
table records the enablement version and timestamp; delta-rs reads the same history."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.spark


def _first_actions(path: str) -> list[dict]:
    log = os.path.join(path, "_delta_log")
    return [json.loads(open(os.path.join(log, f)).readline()) for f in sorted(os.listdir(log)) if f.endswith(".json")]


def test_new_table_stamps_every_commit(session, table_path):
    from deltalake import DeltaTable

    session.execute("CREATE TABLE t (a INT) TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')")
    for i in range(3):
        session.execute(f"INSERT INTO t VALUES ({i})")
    session.execute("DELETE FROM t WHERE a = 1")
    path = table_path(session, "t")
    firsts = _first_actions(path)
    assert all(list(f) == ["commitInfo"] for f in firsts)  # commitInfo is the first action
    stamps = [f["commitInfo"]["inCommitTimestamp"] for f in firsts]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    dt = DeltaTable(path)
    assert "inCommitTimestamp" in dt.protocol().writer_features
    assert sorted(h["inCommitTimestamp"] for h in dt.history()) == stamps
    history = session.execute("DESCRIBE HISTORY t").collect()
    assert [round(r.timestamp.timestamp() * 1000) for r in reversed(history)] == stamps


def test_enabling_on_an_existing_table_records_where_it_started(session, table_path):
    from deltalake import DeltaTable

    session.execute("CREATE TABLE u (a INT)")
    session.execute("INSERT INTO u VALUES (1)")
    session.execute("ALTER TABLE u SET TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')")
    session.execute("INSERT INTO u VALUES (2)")
    path = table_path(session, "u")
    firsts = _first_actions(path)
    assert [("inCommitTimestamp" in f["commitInfo"]) for f in firsts] == [False, False, True, True]
    config = DeltaTable(path).metadata().configuration
    assert config["delta.inCommitTimestampEnablementVersion"] == "2"
    assert int(config["delta.inCommitTimestampEnablementTimestamp"]) == firsts[2]["commitInfo"]["inCommitTimestamp"]
    assert firsts[3]["commitInfo"]["inCommitTimestamp"] > firsts[2]["commitInfo"]["inCommitTimestamp"]
    assert [tuple(r) for r in session.execute("SELECT a FROM u VERSION AS OF 1").collect()] == [(1,)]
