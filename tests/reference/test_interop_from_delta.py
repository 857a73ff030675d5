"""Delta-Spark -> isolde, feature by feature: tables Delta created and changed (DV UPDATE / DELETE
/ MERGE, OPTIMIZE / ZORDER, REORG PURGE, RESTORE), with Delta's own checkpoints (classic,
multi-part, v2 with sidecars), ``.crc`` files and ``_last_checkpoint`` checksums, are read by
isolde with exactly Delta's rows; isolde writes (INSERT, UPDATE, DELETE, MERGE, OPTIMIZE) and Delta
reads isolde's result. The change data feed of a table Delta wrote equals isolde's
``table_changes`` on the same versions. Both engines name the table by path (delta.`/path`)."""

from __future__ import annotations

import glob
import json
import os

import pytest

from tests.helpers.interop_features import FEATURES, PROFILES, Table
from tests.helpers.oracle import sorted_rows
from tests.helpers.reference import ref


def _iso(session, text):
    return sorted_rows(session.sql(text).collect())


def _expected(model):
    return sorted(model.items())


def _cdf(rows):
    return sorted_rows((r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in rows)


def _log(path):
    return os.path.join(path, "_delta_log")


def _drop_commits_before_checkpoint(path) -> int:
    """What Delta's log cleanup does: remove the commits the newest checkpoint covers, so a
    reader must start from that checkpoint. Returns the checkpoint's version."""
    with open(os.path.join(_log(path), "_last_checkpoint")) as fh:
        version = json.load(fh)["version"]
    for f in glob.glob(os.path.join(_log(path), "*.json")):
        base = os.path.basename(f).split(".")[0]
        if base.isdigit() and int(base) < version:
            os.remove(f)
    for f in glob.glob(os.path.join(_log(path), "*.crc")):
        base = os.path.basename(f).split(".")[0]
        if base.isdigit() and int(base) < version:
            os.remove(f)
    return version


def _round_trip(features, session, delta, delta_rows, spark, tmp_path, part_size=None):
    tbl = Table(features)
    path = str(tmp_path / "delta_made")
    name = ref(path)
    if part_size:  # multi-part classic checkpoints: at most part_size actions per part
        spark.conf.set("spark.databricks.delta.checkpoint.partSize", str(part_size))
    try:
        create = tbl.create(name, using=True)
        if not tbl.has("v2_checkpoints"):
            create = create[:-1] + ", 'delta.checkpointInterval' = '3')"
        delta.sql(create)
        for stmt in tbl.after_create(name):
            delta.sql(stmt)
        # --- Delta writes -------------------------------------------------------------------------
        model = {i: f"v{i}" for i in range(1, 15)}
        delta.sql(tbl.insert(name, model))
        for stmt in tbl.after_insert(name):
            delta.sql(stmt)
        delta.sql(f"UPDATE {name} SET v = 'du' WHERE id = 2")
        delta.sql(f"DELETE FROM {name} WHERE id = 3")
        delta.sql(tbl.merge(name, {4: "dm", 15: "dm"}))
        model.update({2: "du", 4: "dm", 15: "dm"})
        del model[3]
        restore_to = 4 + len(tbl.after_create(name)) + len(tbl.after_insert(name))  # the MERGE's version
        delta.sql(f"DELETE FROM {name} WHERE id = 5")
        delta.sql(f"RESTORE TABLE {name} TO VERSION AS OF {restore_to}")
        delta.sql(f"OPTIMIZE {name} ZORDER BY (v)" if tbl.zorder else f"OPTIMIZE {name}")
        delta.sql(f"UPDATE {name} SET v = 'du2' WHERE id = 6")
        model[6] = "du2"
        if tbl.dvs:
            delta.sql(f"REORG TABLE {name} APPLY (PURGE)")
        delta.sql(f"DELETE FROM {name} WHERE id = 7")  # a deletion vector for isolde to read
        del model[7]
        end = delta.version(path)
    finally:
        if part_size:
            spark.conf.unset("spark.databricks.delta.checkpoint.partSize")

    select = tbl.select(name)
    delta_read = sorted_rows(delta.sql(select))
    assert [r[:2] for r in delta_read] == _expected(model)
    assert _iso(session, select) == delta_read, "isolde reads Delta's table as Delta does"

    log = _log(path)
    assert glob.glob(os.path.join(log, "*.crc")), "Delta wrote checksum files"
    with open(os.path.join(log, "_last_checkpoint")) as fh:
        assert "checksum" in json.load(fh), "Delta's _last_checkpoint carries a checksum"
    if tbl.has("v2_checkpoints"):
        assert glob.glob(os.path.join(log, "*.checkpoint.*-*.*")), "Delta wrote a v2 checkpoint"
        assert os.listdir(os.path.join(log, "_sidecars")), "with sidecars"
    elif part_size:
        assert glob.glob(os.path.join(log, "*.checkpoint.0000000001.0000000*.parquet")), "a multi-part checkpoint"
    else:
        assert glob.glob(os.path.join(log, "*.checkpoint.parquet")), "a classic checkpoint"
    if tbl.has("change_data_feed"):
        theirs = _cdf(delta.sql(f"SELECT * FROM table_changes_by_path('{path}', 1, {end})"))
        assert _cdf(session.table_changes(path, 1, end).collect()) == theirs
        assert (7, "v7", "delete", end) in theirs
    _drop_commits_before_checkpoint(path)
    assert _iso(session, select) == delta_read, "isolde reads from Delta's checkpoint alone"

    # --- isolde writes, Delta reads --------------------------------------------------------------
    session.execute(tbl.insert(name, {16: "i16", 17: "i17"}))
    session.execute(f"UPDATE {name} SET v = 'iu' WHERE id IN (1, 16)")
    session.execute(f"DELETE FROM {name} WHERE id = 2")
    session.execute(tbl.merge(name, {4: "im", 18: "im"}))
    session.execute(f"OPTIMIZE {name}")
    session.execute(f"UPDATE {name} SET v = 'iu2' WHERE id = 8")
    model.update({16: "iu", 17: "i17", 1: "iu", 4: "im", 18: "im", 8: "iu2"})
    del model[2]
    final = _iso(session, select)
    assert [r[:2] for r in final] == _expected(model)
    assert sorted_rows(delta.sql(select)) == final, "Delta reads isolde's writes on its table"
    if tbl.has("type_widening"):  # delta-rs 1.6.6 has no typeWidening reader feature and says so
        with pytest.raises(Exception, match="TypeWidening"):
            delta_rows(path, ["id", "v"])
    else:
        assert delta_rows(path, ["id", "v"]) == _expected(model)
    if tbl.has("identity_generated"):
        k, g = tbl.position("k"), tbl.position("g")
        ks = [r[k] for r in final]
        assert len(set(ks)) == len(ks) and None not in ks, "isolde continues Delta's identity values"
        assert all(r[g] == r[0] * 2 for r in final)
    if tbl.has("type_widening"):
        assert all(r[tbl.position("w")] == r[0] * 1000 for r in final)
    assert [h["operation"] for h in delta.history(path) if h["version"] > end] == [
        "WRITE", "UPDATE", "DELETE", "MERGE", "OPTIMIZE", "UPDATE"]


# make test runs the v2-checkpoint profile Delta-first and the other isolde-first (time budget)
@pytest.mark.parametrize("profile", [pytest.param(p, marks=[pytest.mark.torture] if "v2_checkpoints" not in f else [])
                                     for p, f in PROFILES.items()])
def test_delta_table_round_trips_through_isolde(profile, session, delta, delta_rows, spark, tmp_path):
    """Every feature profile, Delta first: Delta writes (a checkpoint every 3 commits: multi-part
    classic ones, spark.databricks.delta.checkpoint.partSize = 2, or v2 ones with sidecars), isolde
    reads and writes, Delta reads."""
    part_size = None if "v2_checkpoints" in PROFILES[profile] else 2
    _round_trip(PROFILES[profile], session, delta, delta_rows, spark, tmp_path, part_size=part_size)


@pytest.mark.torture
@pytest.mark.parametrize("feature", [f for f in FEATURES if f != "plain"])
def test_delta_table_round_trips_through_isolde_one_feature(feature, session, delta, delta_rows, spark, tmp_path):
    """Each feature alone, Delta first."""
    _round_trip((feature,), session, delta, delta_rows, spark, tmp_path)


def test_change_data_feed_of_a_delta_table(session, delta, tmp_path):
    """Delta wrote with CDF on (copy-on-write and DV DML): isolde's table_changes equals Delta's
    on every version range tried, including ranges that start or end inside the history."""
    path = str(tmp_path / "cdf")
    name = ref(path)
    delta.sql(f"CREATE TABLE {name} (id INT, v STRING) USING DELTA TBLPROPERTIES ("
              f"'delta.enableChangeDataFeed' = 'true', "
              f"'delta.enableDeletionVectors' = 'true')")
    delta.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")
    delta.sql(f"UPDATE {name} SET v = 'u' WHERE id = 2")
    delta.sql(f"DELETE FROM {name} WHERE id = 3")
    delta.sql(f"MERGE INTO {name} t USING (SELECT 4 AS id, 'm' AS v UNION ALL SELECT 5, 'n') s ON t.id = s.id "
              f"WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *")
    delta.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")
    delta.sql(f"UPDATE {name} SET v = 'cow' WHERE id = 1")
    assert delta.version(path) == 6
    full = _cdf(delta.sql(f"SELECT * FROM table_changes_by_path('{path}', 1, 6)"))
    assert full == sorted_rows([
        (1, "a", "insert", 1), (2, "b", "insert", 1), (3, "c", "insert", 1), (4, "d", "insert", 1),
        (2, "b", "update_preimage", 2), (2, "u", "update_postimage", 2), (3, "c", "delete", 3),
        (4, "d", "update_preimage", 4), (4, "m", "update_postimage", 4), (5, "n", "insert", 4),
        (1, "a", "update_preimage", 6), (1, "cow", "update_postimage", 6)])
    for start, stop in [(1, 6), (2, 4), (3, 3), (5, 6)]:
        theirs = _cdf(delta.sql(f"SELECT * FROM table_changes_by_path('{path}', {start}, {stop})"))
        assert _cdf(session.table_changes(path, start, stop).collect()) == theirs, (start, stop)
