"""Metadata that reads the same to Delta-Spark's conflict checker as to isolde's (found by racing
the engines in tests/reference/test_mixed_conflicts.py):

* ``delta.feature.X`` / ``delta.min*Version`` only ask for a protocol: CREATE keeps them out of the
  metadata (as Delta does), and a winner whose metadata lacks them changed no property;
* a commit that only moves identity high-water marks is tagged ``delta.identity.schemaUpdate``
  (Delta lets a concurrent writer that changes no metadata commit over it), and isolde tolerates
  such a change from Delta as from itself;
* enabling row tracking on a table with files is two commits, as Delta's backfill command does:
  ROW TRACKING BACKFILL (the feature, every live file re-added with its base row id), then the
  property.
"""

from __future__ import annotations

import json

import pytest

from isolde.executor.log.actions import Metadata, Protocol
from isolde.executor.txn import feature_enablement as FE

SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True,
     "metadata": {"delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.allowExplicitInsert": True}},
    {"name": "v", "type": "integer", "nullable": True, "metadata": {}}]}
PROTOCOL = Protocol(3, 7, ["deletionVectors"], ["deletionVectors", "identityColumns", "rowTracking", "domainMetadata"])


def _meta(schema=None, **conf) -> Metadata:
    return Metadata(json.dumps(schema or SCHEMA), (), {"delta.enableDeletionVectors": "true", **conf}, id="t1")


def _with_mark(mark, name="id") -> dict:
    schema = json.loads(json.dumps(SCHEMA))
    schema["fields"][0]["name"] = name
    schema["fields"][0]["metadata"]["delta.identity.highWaterMark"] = mark
    return schema


IDENTITY_ONLY = [
    ("a first mark", _meta(), _meta(_with_mark(1)), True),
    ("a mark moved", _meta(_with_mark(1)), _meta(_with_mark(7)), True),
    ("no change", _meta(_with_mark(1)), _meta(_with_mark(1)), False),
    ("a mark and a property", _meta(), _meta(_with_mark(1), team="x"), False),
    ("a renamed column", _meta(), _meta(_with_mark(1, name="key")), False),
]


@pytest.mark.parametrize("case,read,new,expected", IDENTITY_ONLY, ids=[c[0] for c in IDENTITY_ONLY])
def test_identity_only_updates(case, read, new, expected):
    assert FE.identity_only_update(read, new) is expected


def test_a_winner_dropping_protocol_properties_changed_no_property():
    """Delta's next metadata drops delta.feature.X (isolde's CREATE kept it before): no conflict;
    a real property removed still is one."""
    read = _meta(**{"delta.feature.rowTracking": "supported", "delta.minWriterVersion": "7", "owner": "ops"})
    assert FE.metadata_change_conflicts(read, _meta(owner="ops"), PROTOCOL) is None
    assert "owner" in FE.metadata_change_conflicts(read, _meta(), PROTOCOL)


def test_deltas_identity_write_fails_no_writer_that_changes_no_metadata():
    """What Delta wrote in the race (identity_noMetadataUpdate_vs_generatedId): the mark set, the
    protocol properties dropped, row tracking's materialized column names added."""
    read = _meta(**{"delta.feature.rowTracking": "supported", "delta.enableRowTracking": "false"})
    winner = _meta(_with_mark(1), **{"delta.enableRowTracking": "false",
                                    "delta.rowTracking.materializedRowIdColumnName": "_row-id-col-1",
                                    "delta.rowTracking.materializedRowCommitVersionColumnName": "_row-cv-col-1"})
    assert FE.metadata_change_conflicts(read, winner, PROTOCOL) is None


def _log_lines(path: str) -> list[list[dict]]:
    import glob
    import os

    out = []
    for f in sorted(glob.glob(os.path.join(path, "_delta_log", "*.json"))):
        with open(f) as fh:
            out.append([json.loads(line) for line in fh if line.strip()])
    return out


def _commit_info(actions: list[dict]) -> dict:
    return next(a["commitInfo"] for a in actions if "commitInfo" in a)


@pytest.mark.spark
def test_create_keeps_protocol_properties_out_of_the_metadata(session, table_path):
    session.execute("CREATE TABLE t (id INT) TBLPROPERTIES ('delta.feature.rowTracking' = 'supported', "
                    "'delta.minWriterVersion' = '7', 'team' = 'x')")
    session.execute("CREATE TABLE u LIKE t")
    for name in ("t", "u"):
        first = _log_lines(table_path(session, name))[0]
        meta = next(a["metaData"] for a in first if "metaData" in a)
        protocol = next(a["protocol"] for a in first if "protocol" in a)
        assert not any(k.startswith("delta.feature.") or k.startswith("delta.min") for k in meta["configuration"])
        assert "rowTracking" in protocol["writerFeatures"] and protocol["minWriterVersion"] == 7
        shown = dict(session.execute(f"SHOW TBLPROPERTIES {name}").rows)
        assert shown["delta.feature.rowTracking"] == "supported"  # SHOW reads them off the protocol


@pytest.mark.spark
def test_identity_writes_are_tagged_identity_only(session, table_path):
    session.execute("CREATE TABLE t (id BIGINT GENERATED ALWAYS AS IDENTITY, v INT)")
    session.execute("INSERT INTO t (v) VALUES (1), (2)")
    session.execute("CREATE TABLE plain (v INT)")
    session.execute("INSERT INTO plain VALUES (1)")
    write = _commit_info(_log_lines(table_path(session, "t"))[1])
    assert write["operation"] == "WRITE" and write["tags"][FE.IDENTITY_TAG] == "true"
    assert FE.IDENTITY_TAG not in (_commit_info(_log_lines(table_path(session, "plain"))[1]).get("tags") or {})
    session.execute("ALTER TABLE t SET TBLPROPERTIES ('team' = 'x')")  # a metadata change, not identity-only
    assert FE.IDENTITY_TAG not in (_commit_info(_log_lines(table_path(session, "t"))[2]).get("tags") or {})


@pytest.mark.spark
def test_row_tracking_on_an_existing_table_is_backfilled_in_a_commit_of_its_own(session, table_path, delta_rows):
    session.execute("CREATE TABLE t (id INT, v INT)")
    session.execute("INSERT INTO t VALUES (1, 0), (2, 0)")
    session.execute("INSERT INTO t VALUES (3, 0)")
    pending = session.prepare("DELETE FROM t WHERE id = 2")  # read before both commits
    session.execute("ALTER TABLE t SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')")
    commits = _log_lines(table_path(session, "t"))
    backfill, enable = commits[3], commits[4]
    assert _commit_info(backfill)["operation"] == "ROW TRACKING BACKFILL"
    readds = [a["add"] for a in backfill if "add" in a]
    assert len(readds) == 2 and all(not a["dataChange"] and a["baseRowId"] is not None for a in readds)
    assert "rowTracking" in next(a["protocol"] for a in backfill if "protocol" in a)["writerFeatures"]
    assert not any("metaData" in a for a in backfill)
    assert _commit_info(enable)["operation"] == "SET TBLPROPERTIES"
    assert not any("add" in a for a in enable)
    assert next(a["metaData"] for a in enable if "metaData" in a)["configuration"]["delta.enableRowTracking"] == "true"
    pending.commit()  # over both: the backfill's re-added files are no data it should have read
    assert sorted(tuple(r) for r in session.sql("SELECT id, v FROM t").collect()) == [(1, 0), (3, 0)]
    assert sorted(delta_rows(table_path(session, "t"), ["id", "v"])) == [(1, 0), (3, 0)]
    # a new table created with row tracking on has nothing to backfill: one commit
    session.execute("CREATE TABLE n (id INT) TBLPROPERTIES ('delta.enableRowTracking' = 'true')")
    assert len(_log_lines(table_path(session, "n"))) == 1
