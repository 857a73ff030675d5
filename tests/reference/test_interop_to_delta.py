"""isolde -> Delta-Spark, feature by feature: a table isolde created and changed (DV UPDATE /
DELETE / MERGE, RESTORE, OPTIMIZE / ZORDER, REORG PURGE) is read by Delta-Spark with exactly
isolde's rows; Delta then writes to it (INSERT, UPDATE, DELETE, MERGE, OPTIMIZE, VACUUM), isolde
reads Delta's result and writes again, and Delta (and delta-rs) read isolde's final table.

The features come from tests/helpers/interop_features.py: ``make test`` runs its PROFILES
(several features per table, to fit the time budget), ``torture`` every feature alone."""

from __future__ import annotations

import glob
import os

import pytest

from tests.helpers.interop_features import AWKWARD, FEATURES, PROFILES, Table
from tests.helpers.oracle import sorted_rows
from tests.helpers.reference import ref


def _iso(session, text):
    return sorted_rows(session.sql(text).collect())


def _expected(model):
    return sorted(model.items())


def _detail(delta, path):
    return delta.sql(f"DESCRIBE DETAIL {ref(path)}")[0].asDict()


def _cdf_rows(rows):
    return sorted_rows((r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in rows)


def _check_violation(delta, text):
    """The error class (or None) of Delta's statement ``text``."""
    _, err = delta.attempt(text)
    return err


def _delta_rs(delta_rows, tbl, path, model):
    if tbl.has("type_widening"):
        # delta-rs 1.6.6's documented gap: no typeWidening reader feature; it refuses, naming it
        with pytest.raises(Exception, match="TypeWidening"):
            delta_rows(path, ["id", "v"])
    else:
        assert delta_rows(path, ["id", "v"]) == _expected(model), "delta-rs reads the table as isolde does"


def _round_trip(features, session, delta, table_path, delta_rows, spark):
    tbl = Table(features)
    session.execute(tbl.create("t"))
    for stmt in tbl.after_create("t"):
        session.execute(stmt)
    path = table_path(session, "t")
    name = ref(path)
    iso_ops = ["CREATE TABLE"] + ["ADD CONSTRAINT"] * len(tbl.after_create("t"))

    # --- isolde writes ---------------------------------------------------------------------------
    model = {i: f"v{i}" for i in range(1, 15)}
    session.execute(tbl.insert("t", model))
    for stmt in tbl.after_insert("t"):
        session.execute(stmt)
    iso_ops += ["WRITE"] + ["CHANGE COLUMN"] * len(tbl.after_insert("t"))
    session.execute("UPDATE t SET v = 'iu' WHERE id = 2")
    model[2] = "iu"
    session.execute("DELETE FROM t WHERE id = 3")
    del model[3]
    restore_to = session.execute(tbl.merge("t", {4: "im", 15: "im"})).version
    model.update({4: "im", 15: "im"})
    session.execute("DELETE FROM t WHERE id = 5")
    session.execute(f"RESTORE TABLE t TO VERSION AS OF {restore_to}")  # row 5 comes back
    session.execute("OPTIMIZE t ZORDER BY (v)" if tbl.zorder else "OPTIMIZE t")
    session.execute("UPDATE t SET v = 'iu2' WHERE id = 6")
    model[6] = "iu2"
    iso_ops += ["UPDATE", "DELETE", "MERGE", "DELETE", "RESTORE", "OPTIMIZE", "UPDATE"]
    if tbl.dvs:
        assert session.execute("REORG TABLE t APPLY (PURGE)").version is not None
        iso_ops.append("REORG")
    session.execute("DELETE FROM t WHERE id = 7")  # leaves a deletion vector for Delta to read
    del model[7]
    iso_ops.append("DELETE")

    select = tbl.select(name)
    iso_rows = _iso(session, select)
    assert [r[:2] for r in iso_rows] == _expected(model)
    assert sorted_rows(delta.sql(select)) == iso_rows, "Delta-Spark reads isolde's table as isolde does"
    _delta_rs(delta_rows, tbl, path, model)

    detail = _detail(delta, path)
    for feature in tbl.feats:
        assert set(feature.table_features) <= set(detail["tableFeatures"]), feature.name
    if tbl.has("partitioned"):
        assert detail["partitionColumns"] == ["p", "d"]
        # '' is written as a NULL partition value, as Spark does: both engines read NULL
        assert {r[2] for r in iso_rows} == {a or None for a in AWKWARD}
    if tbl.has("liquid_clustering"):
        assert detail["clusteringColumns"] == ["id"]
    if tbl.has("v2_checkpoints"):
        log = os.path.join(path, "_delta_log")
        assert glob.glob(os.path.join(log, "*.checkpoint.*-*.*")), "a UUID-named v2 checkpoint"
        assert os.listdir(os.path.join(log, "_sidecars")), "v2 checkpoint sidecars"
    if tbl.has("check_constraint"):
        assert _check_violation(delta, tbl.insert(name, {-1: "bad"})) == \
            "DeltaInvariantViolationException", "Delta enforces isolde's CHECK constraint"

    # --- Delta writes ------------------------------------------------------------------------------
    delta.sql(tbl.insert(name, {16: "d16", 17: "d17"}))
    model.update({16: "d16", 17: "d17"})
    delta.sql(f"UPDATE {name} SET v = 'du' WHERE id IN (1, 16)")
    model.update({1: "du", 16: "du"})
    delta.sql(f"DELETE FROM {name} WHERE id = 2")
    del model[2]
    delta.sql(tbl.merge(name, {4: "dm", 18: "dm"}))
    model.update({4: "dm", 18: "dm"})
    if tbl.has("change_data_feed"):  # isolde's and Delta's commits, before VACUUM removes change files
        end = len(iso_ops) + 3
        iso_cdf = _cdf_rows(session.table_changes("t", 1, end).collect())
        assert _cdf_rows(delta.sql(f"SELECT * FROM table_changes_by_path('{path}', 1, {end})")) == iso_cdf
        assert (18, "dm", "insert", end) in iso_cdf and (2, "iu", "delete", end - 1) in iso_cdf
    delta.sql(f"OPTIMIZE {name}")
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        delta.sql(f"VACUUM {name} RETAIN 0 HOURS")
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")

    iso_read = _iso(session, select)
    assert [r[:2] for r in iso_read] == _expected(model), "isolde reads Delta's writes (VACUUM kept its files)"

    # --- isolde writes again, Delta and delta-rs read -----------------------------------------------
    session.execute("UPDATE t SET v = 'i2' WHERE id = 17")
    session.execute("DELETE FROM t WHERE id = 1")
    session.execute(tbl.merge("t", {18: "i2m", 19: "i2m"}))
    session.execute(tbl.insert("t", {20: "i20"}))
    model.update({17: "i2", 18: "i2m", 19: "i2m", 20: "i20"})
    del model[1]
    final = _iso(session, select)
    assert [r[:2] for r in final] == _expected(model)
    df = spark.sql(select)
    assert sorted_rows(df.collect()) == final
    _delta_rs(delta_rows, tbl, path, model)
    ops = [h["operation"] for h in delta.history(path)]
    assert ops == iso_ops + ["WRITE", "UPDATE", "DELETE", "MERGE", "OPTIMIZE", "VACUUM START", "VACUUM END",
                             "UPDATE", "DELETE", "MERGE", "WRITE"]
    if tbl.has("identity_generated"):
        k, g = tbl.position("k"), tbl.position("g")
        ks = [r[k] for r in final]
        assert len(set(ks)) == len(ks) and None not in ks, "identity values stay unique across both engines"
        assert all(r[g] == r[0] * 2 for r in final), "both engines compute the generated column"
    if tbl.has("type_widening"):
        assert dict(df.dtypes)["w"] == "bigint"
        assert all(r[tbl.position("w")] == r[0] * 1000 for r in final)


# make test runs the partitioned profile isolde-first and the v2 one Delta-first (time budget)
@pytest.mark.parametrize("profile", [pytest.param(p, marks=[pytest.mark.torture] if "v2_checkpoints" in f else [])
                                     for p, f in PROFILES.items()])
def test_isolde_table_round_trips_through_delta(profile, session, delta, table_path, delta_rows, spark):
    """Every feature profile: isolde writes, Delta reads and writes, isolde reads and writes, Delta reads."""
    _round_trip(PROFILES[profile], session, delta, table_path, delta_rows, spark)


@pytest.mark.torture
@pytest.mark.parametrize("feature", list(FEATURES))
def test_isolde_table_round_trips_through_delta_one_feature(feature, session, delta, table_path, delta_rows, spark):
    """Each feature alone (the profiles combine them): the same round trip."""
    _round_trip((feature,), session, delta, table_path, delta_rows, spark)


#: partition values whose folder and log path each engine must spell the same: every printable
#: ASCII character, spaces (ASCII and not), non-ASCII letters and symbols, a control character
AWKWARD_VALUES = ["".join(chr(c) for c in range(33, 127)), "a b", "ü", "ü€ z", "\u00a0x", "x\u2003y", "日本",
                  "tab\there", "50%", "x/y", "k=v", "c:\\d", "#?[]{}^"]


def _partition_dirs(path: str) -> dict:
    from isolde.executor.log import DeltaLog

    return {f.partition_values["p"]: f.path.rsplit("/", 1)[0] for f in DeltaLog.for_table(path).snapshot().all_files}


def test_partition_paths_are_spelled_as_delta_spells_them(session, delta, table_path, spark, tmp_path):
    """The log's add.path text for each awkward partition value is Delta's own (Hive escaping, then
    Hadoop's Path.toUri()), and Delta's VACUUM -- which matches files on disk to that text -- keeps
    every live file of isolde's table (a non-ASCII value spelled %C3%BC was deleted once)."""
    rows = [(i, v) for i, v in enumerate(AWKWARD_VALUES)]
    session.execute("CREATE TABLE t (id INT, p STRING) PARTITIONED BY (p)")
    session.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, {_sql_str(v)})" for i, v in rows))
    path = table_path(session, "t")
    theirs = str(tmp_path / "delta_t")
    delta.sql(f"CREATE TABLE {ref(theirs)} (id INT, p STRING) USING DELTA PARTITIONED BY (p)")
    delta.sql(f"INSERT INTO {ref(theirs)} VALUES " + ", ".join(f"({i}, {_sql_str(v)})" for i, v in rows))
    assert _partition_dirs(path) == _partition_dirs(theirs)
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        delta.sql(f"VACUUM {ref(path)} RETAIN 0 HOURS")
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert _iso(session, "SELECT id, p FROM t") == sorted(rows)
    assert delta.rows(path) == sorted(rows)


def _sql_str(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# --- DESCRIBE HISTORY and operationMetrics: the same statement on two equal tables ----------------

# the row-count metrics both engines write, per operation
_METRICS = {
    "WRITE": ("numOutputRows",),
    "UPDATE": ("numUpdatedRows", "numCopiedRows"),
    "DELETE": ("numDeletedRows", "numCopiedRows"),
    "MERGE": ("numSourceRows", "numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted",
              "numTargetRowsCopied", "numOutputRows"),
}
# Delta 4.4's per-clause MERGE breakdown
_MERGE_CLAUSE_METRICS = ("numTargetRowsMatchedUpdated", "numTargetRowsMatchedDeleted",
                         "numTargetRowsNotMatchedBySourceUpdated", "numTargetRowsNotMatchedBySourceDeleted")
_STATEMENTS = [
    "INSERT INTO {t} SELECT id, CAST(id AS STRING) FROM range(10) AS r(id)",
    "UPDATE {t} SET v = 'u' WHERE id < 3",
    "DELETE FROM {t} WHERE id = 9",
    "MERGE INTO {t} AS t USING (SELECT id, 'm' AS v FROM range(5, 12) AS r(id)) AS s ON t.id = s.id "
    "WHEN MATCHED AND t.id = 5 THEN DELETE WHEN MATCHED THEN UPDATE SET v = s.v "
    "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v) "
    "WHEN NOT MATCHED BY SOURCE AND t.id = 0 THEN DELETE",
]
_MERGE_CLAUSE_VALUES = {"numTargetRowsMatchedUpdated": "3", "numTargetRowsMatchedDeleted": "1",
                        "numTargetRowsNotMatchedBySourceUpdated": "0", "numTargetRowsNotMatchedBySourceDeleted": "1"}


def _twin_histories(dv, session, delta, table_path):
    ddl = f"(id INT, v STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = '{dv}')"
    session.execute(f"CREATE TABLE a {ddl}")
    session.execute(f"CREATE TABLE b {ddl}")
    pa, pb = table_path(session, "a"), table_path(session, "b")
    for stmt in _STATEMENTS:
        session.execute(stmt.format(t="a"))
        delta.sql(stmt.format(t=ref(pb)))
    assert delta.rows(pa) == delta.rows(pb)
    return delta.history(pa), delta.history(pb)


@pytest.mark.parametrize("dv", ["true", pytest.param("false", marks=pytest.mark.torture)])
def test_history_and_operation_metrics_agree(dv, session, delta, table_path):
    """The same statements, isolde's on one table and Delta's on an equal one: the same operation
    names in DESCRIBE HISTORY and the same values for the row-count metrics."""
    ha, hb = _twin_histories(dv, session, delta, table_path)
    assert [h["operation"] for h in ha] == [h["operation"] for h in hb] == ["CREATE TABLE", "WRITE", "UPDATE",
                                                                              "DELETE", "MERGE"]
    for a, b in zip(ha[1:], hb[1:]):
        keys = _METRICS[a["operation"]]
        assert {k: a["operationMetrics"].get(k) for k in keys} == {k: b["operationMetrics"][k] for k in keys}, \
            a["operation"]
    assert hb[4]["operationMetrics"]["numTargetRowsInserted"] == "3"  # source ids 9, 10, 11
    assert {k: hb[4]["operationMetrics"][k] for k in _MERGE_CLAUSE_METRICS} == _MERGE_CLAUSE_VALUES


@pytest.mark.parametrize("dv", ["true", "false"])
def test_merge_metrics_carry_the_per_clause_breakdown(session, dv):
    """Delta 4.4 writes these for the MERGE of _STATEMENTS (asserted above); isolde too, with
    deletion vectors and by copy-on-write."""
    session.execute(f"CREATE TABLE a (id INT, v STRING) TBLPROPERTIES ('delta.enableDeletionVectors' = '{dv}')")
    for stmt in _STATEMENTS:
        session.execute(stmt.format(t="a"))
    merge = [r.asDict() for r in session.execute("DESCRIBE HISTORY a").collect() if r["operation"] == "MERGE"][0]
    assert {k: merge["operationMetrics"].get(k) for k in _MERGE_CLAUSE_METRICS} == _MERGE_CLAUSE_VALUES
