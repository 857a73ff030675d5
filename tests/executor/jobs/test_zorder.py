"""OPTIMIZE ... ZORDER BY and liquid clustering: rows never change (isolde and delta-rs agree),
files come out clustered (narrow ranges on either column touch few files), idempotency and
incremental clustering, the errors, stable row ids kept through the rewrite, and conflicts
through prepare()/commit() in both orders, with and without row tracking."""

from __future__ import annotations

import json
import os
import warnings

import pyarrow.parquet as pq
import pytest

from isolde import errors as E

pytestmark = pytest.mark.spark

N = 4000


def _log_actions(path: str, version: int) -> list[dict]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _files(s, name="t") -> int:
    return s.execute(f"DESCRIBE DETAIL {name}").first().numFiles


def _rows(s, name="t"):
    return sorted(tuple(r) for r in s.sql(f"SELECT * FROM {name}").collect())


def _fill(s, name="t", batches=8, rows=N):
    """``batches`` INSERTs of pseudo-random a (BIGINT) and b (STRING sharing a long prefix)."""
    per = rows // batches
    for i in range(batches):
        s.execute(f"INSERT INTO {name} SELECT id, (id * 7919 + 13) % 100003 AS a, "
                  f"concat('customer-region-', lpad(CAST((id * 104729) % 99991 AS STRING), 8, '0')) AS b "
                  f"FROM range({i * per}, {(i + 1) * per})")


def _create(s, extra="", props=None, name="t"):
    props = {"delta.targetFileSize": "8192", **(props or {})}
    text = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
    s.execute(f"CREATE TABLE {name} (id BIGINT, a BIGINT, b STRING) {extra} TBLPROPERTIES ({text})")


def _snapshot(s, name="t"):
    from isolde.grammar import ast

    return s.catalog.resolve(ast.TableRef(parts=(name,)), s.current_database).log.snapshot()


def _bounds(s, column, name="t"):
    """Per live file: (min, max) of ``column`` from the log's stats."""
    snap = _snapshot(s, name)
    return [(f.parsed_stats["minValues"][column], f.parsed_stats["maxValues"][column]) for f in snap.all_files]


def _fraction_read(bounds, lo, hi) -> float:
    return sum(1 for mn, mx in bounds if not (mx < lo or mn > hi)) / len(bounds)


def _mean_fraction(s, column, values):
    bounds = _bounds(s, column)
    values = sorted(values)
    probes = [(values[i], values[min(len(values) - 1, i + len(values) // 200)]) for i in range(0, len(values), 97)]
    return sum(_fraction_read(bounds, lo, hi) for lo, hi in probes) / len(probes)


def test_zorder_clusters_both_columns_and_keeps_every_row(session, table_path, delta_rows):
    s = session
    _create(s)
    _fill(s)
    before = _rows(s)
    a_values = [r[1] for r in before]
    b_values = [r[2] for r in before]
    unordered = (_mean_fraction(s, "a", a_values), _mean_fraction(s, "b", b_values))
    written = _files(s)
    r = s.execute("OPTIMIZE t ZORDER BY (a, b)")
    assert r.operation == "OPTIMIZE" and r.metrics["numRemovedFiles"] == written >= 8
    files = r.metrics["numAddedFiles"]
    assert 4 <= files <= 40
    path = table_path(s, "t")
    assert _rows(s) == before == sorted(delta_rows(path, ["id", "a", "b"]))
    after = (_mean_fraction(s, "a", a_values), _mean_fraction(s, "b", b_values))
    # each column alone now skips most files (random order reads them all)
    assert unordered[0] > 0.9 and unordered[1] > 0.9
    assert after[0] < 0.6 and after[1] < 0.6, after
    actions = _log_actions(path, r.version)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert json.loads(info["operationParameters"]["zOrderBy"]) == ["a", "b"]
    adds = [a["add"] for a in actions if "add" in a]
    assert all(not a["dataChange"] and json.loads(a["tags"]["isolde.zOrderBy"]) == ["a", "b"] for a in adds)
    # Delta's result row: the table's path and a metrics struct
    row = r.first()
    assert row.path == path and r.columns == ["path", "metrics"]
    m = row.metrics
    assert m.numFilesAdded == files and m.numFilesRemoved == written == m.totalConsideredFiles
    assert m.filesAdded.totalFiles == files and m.filesAdded.totalSize == r.metrics["numAddedBytes"]
    assert m.zOrderStats.zOrderBy == ["a", "b"] and m.clusteringStats is None
    assert m.partitionsOptimized == 1 and m.preserveInsertionOrder is False
    # the same ZORDER again: nothing to do, nothing committed
    again = s.execute("OPTIMIZE t ZORDER BY (a, b)")
    assert again.version == r.version and again.metrics["numAddedFiles"] == 0
    # other columns: rewritten
    assert s.execute("OPTIMIZE t ZORDER BY (b)").version == r.version + 1
    assert _rows(s) == before


def test_zorder_by_one_string_column_with_a_long_common_prefix_sorts_it(session):
    s = session
    _create(s)
    _fill(s)
    s.execute("OPTIMIZE t ZORDER BY (b)")
    bounds = sorted(_bounds(s, "b"))
    assert all(prev[1] <= nxt[0] for prev, nxt in zip(bounds, bounds[1:]))  # disjoint ranges


def test_zorder_runs_per_partition_and_where_scopes_it(session, table_path, delta_rows):
    s = session
    s.execute("CREATE TABLE p (id BIGINT, a BIGINT, d STRING) PARTITIONED BY (d) "
              "TBLPROPERTIES ('delta.targetFileSize' = '8192')")
    for i in range(4):
        s.execute(f"INSERT INTO p SELECT id, (id * 31) % 997, IF(id % 2 = 0, 'x', 'y') FROM range({i * 500}, {(i + 1) * 500})")
    before = _rows(s, "p")
    in_x = sum(1 for f in _snapshot(s, "p").all_files if f.partition_values["d"] == "x")
    r = s.execute("OPTIMIZE p WHERE d = 'x' ZORDER BY (a)")
    adds = [a["add"] for a in _log_actions(table_path(s, "p"), r.version) if "add" in a]
    assert {a["partitionValues"]["d"] for a in adds} == {"x"} and r.metrics["numRemovedFiles"] == in_x >= 4
    assert _rows(s, "p") == before == sorted(delta_rows(table_path(s, "p"), ["id", "a", "d"]))
    with pytest.raises(E.AnalysisError, match="`d` is a partition column"):
        s.execute("OPTIMIZE p ZORDER BY (d)")


def test_zorder_errors_name_the_column(session):
    s = session
    s.execute("CREATE TABLE t (id BIGINT, amount BIGINT, s STRUCT<x: INT>) "
              "TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '1')")
    s.execute("INSERT INTO t VALUES (1, 2, named_struct('x', 1)), (2, 3, named_struct('x', 2))")
    with pytest.raises(E.AnalysisError, match="`amont` does not exist.*amount"):
        s.execute("OPTIMIZE t ZORDER BY (amont)")
    with pytest.raises(E.AnalysisError, match="listed twice"):
        s.execute("OPTIMIZE t ZORDER BY (id, ID)")
    with pytest.raises(E.AnalysisError, match="no order"):
        s.execute("OPTIMIZE t ZORDER BY (s)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s.execute("OPTIMIZE t ZORDER BY (amount)")
    assert any("`amount` has no statistics" in str(w.message) for w in caught)
    assert _rows(s) == [(1, 2, (1,)), (2, 3, (2,))]


# --------------------------------------------------------------------------- liquid clustering

def test_clustering_is_incremental_and_full_reclusters_everything(session, table_path, delta_rows):
    s = session
    _create(s, "CLUSTER BY (a, b)")
    _fill(s)
    path = table_path(s, "t")
    before = _rows(s)
    written = _files(s)
    r = s.execute("OPTIMIZE t")
    assert r.metrics["numRemovedFiles"] == written >= 8 and r.metrics["numAddedFiles"] >= 2
    actions = _log_actions(path, r.version)
    adds = [a["add"] for a in actions if "add" in a]
    assert all(a["clusteringProvider"] == "liquid" for a in adds)
    assert r.first().metrics.clusteringStats.clusterBy == ["a", "b"]
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert json.loads(info["operationParameters"]["clusterBy"]) == ["a", "b"]
    assert _rows(s) == before == sorted(delta_rows(path, ["id", "a", "b"]))
    assert _mean_fraction(s, "a", [x[1] for x in before]) < 0.6
    assert _mean_fraction(s, "b", [x[2] for x in before]) < 0.6
    assert s.execute("OPTIMIZE t").version == r.version  # clustered already: nothing to do
    clustered = r.metrics["numAddedFiles"]
    s.execute("INSERT INTO t VALUES (-1, 5, 'customer-region-00000005'), (-2, 6, 'customer-region-00000006')")
    new = [f for f in _snapshot(s).all_files if f.clustering_provider is None]
    inc = s.execute("OPTIMIZE t")
    assert inc.metrics["numRemovedFiles"] == len(new) >= 1  # only the new files
    full = s.execute("OPTIMIZE t FULL")
    assert full.metrics["numRemovedFiles"] == clustered + inc.metrics["numAddedFiles"]
    assert _rows(s) == sorted(before + [(-2, 6, "customer-region-00000006"), (-1, 5, "customer-region-00000005")])
    assert _rows(s) == sorted(delta_rows(path, ["id", "a", "b"]))


def test_clustering_errors(session):
    s = session
    _create(s, "CLUSTER BY (a)")
    s.execute("INSERT INTO t VALUES (1, 1, 'x')")
    with pytest.raises(E.AnalysisError, match="clustered"):
        s.execute("OPTIMIZE t ZORDER BY (a)")
    _create(s, name="plain")
    with pytest.raises(E.AnalysisError, match="not clustered"):
        s.execute("OPTIMIZE plain FULL")


# --------------------------------------------------------------------------- row ids

def _stable_ids(s, path, name="t"):
    """id column value -> stable row id, read from the data files as PROTOCOL.md defines it."""
    snap = _snapshot(s, name)
    column = snap.metadata.configuration["delta.rowTracking.materializedRowIdColumnName"]
    out = {}
    for f in snap.all_files:
        t = pq.read_table(os.path.join(path, f.path))
        mat = t.column(column).to_pylist() if column in t.column_names else [None] * t.num_rows
        for pos, (key, m) in enumerate(zip(t.column("id").to_pylist(), mat)):
            out.setdefault(key, []).append(m if m is not None else f.base_row_id + pos)
    return out


@pytest.mark.parametrize("statement", ["OPTIMIZE t ZORDER BY (a, b)", "OPTIMIZE t"], ids=["zorder", "bin-pack"])
def test_rewrites_keep_stable_row_ids(session, table_path, delta_rows, statement):
    s = session
    _create(s, props={"delta.enableRowTracking": "true", "delta.targetFileSize": "65536"})
    _fill(s, rows=1000)
    path = table_path(s, "t")
    before = _stable_ids(s, path)
    assert sorted(i for ids in before.values() for i in ids) == list(range(1000))
    written = _files(s)
    r = s.execute(statement)
    assert r.metrics["numRemovedFiles"] == written >= 8
    assert _stable_ids(s, path) == before  # every row kept its id through the rewrite
    info = next(a["commitInfo"] for a in _log_actions(path, r.version) if "commitInfo" in a)
    assert info["tags"]["delta.rowTracking.preserved"] == "true"
    adds = [a["add"] for a in _log_actions(path, r.version) if "add" in a]
    assert all(isinstance(a["baseRowId"], int) and a["baseRowId"] >= 1000 for a in adds)  # fresh ids: new files
    stats = [json.loads(a["stats"]) for a in adds]
    assert all(set(st["minValues"]) == {"id", "a", "b"} for st in stats)  # no stats for the hidden columns
    assert len(delta_rows(path, ["id"])) == 1000


# --------------------------------------------------------------------------- conflicts

BASE = {i: 0 for i in range(60)}
CONCURRENT = [
    ("DELETE FROM t WHERE id IN (2, 17, 41)", lambda m: {k: v for k, v in m.items() if k not in (2, 17, 41)}),
    ("UPDATE t SET v = v + 1 WHERE id IN (12, 33)", lambda m: {k: v + (k in (12, 33)) for k, v in m.items()}),
    ("MERGE INTO t USING (SELECT 22 AS id UNION ALL SELECT 500) s ON t.id = s.id "
     "WHEN MATCHED THEN UPDATE SET v = 9 WHEN NOT MATCHED THEN INSERT (id, a, v) VALUES (s.id, 0, 7)",
     lambda m: {**m, 22: 9, 500: 7}),
]


def _conflict_table(s, row_tracking: bool, clustered: bool = False):
    s.execute("CREATE TABLE t (id INT, a INT, v INT)" + (" CLUSTER BY (a, id)" if clustered else "")
              + f" TBLPROPERTIES ('delta.enableRowTracking' = '{str(row_tracking).lower()}', "
                "'delta.targetFileSize' = '1024')")
    for i in range(6):
        s.execute(f"INSERT INTO t SELECT id, (id * 37) % 11, 0 FROM range({i * 10}, {(i + 1) * 10})")
    return s


def _state(s, path, delta_rows):
    rows = _rows(s)
    assert sorted(delta_rows(path, ["id", "a", "v"])) == rows
    assert len({r[0] for r in rows}) == len(rows)  # nothing resurrected or duplicated
    return {i: v for i, _, v in rows}


LAYOUTS = [("OPTIMIZE t ZORDER BY (a, id)", False), ("OPTIMIZE t", True)]


@pytest.mark.parametrize("sql, effect", CONCURRENT, ids=["delete", "update", "merge"])
@pytest.mark.parametrize("rewrite, clustered", LAYOUTS, ids=["zorder", "clustering"])
def test_with_row_tracking_a_clustering_rewrite_carries_concurrent_dml(session, table_path, delta_rows, sql, effect,
                                                                       rewrite, clustered):
    s = _conflict_table(session, True, clustered)
    path = table_path(s, "t")
    w = s.prepare(rewrite)  # the DML commits first: the rewrite carries its deletion vectors
    s.execute(sql)
    assert w.commit().operation == "OPTIMIZE"
    assert _state(s, path, delta_rows) == effect(BASE)
    s.execute("REORG TABLE t APPLY (PURGE)")
    assert _state(s, path, delta_rows) == effect(BASE)
    s.execute("DELETE FROM t WHERE id = 0")
    assert _state(s, path, delta_rows) == {k: v for k, v in effect(BASE).items() if k != 0}


@pytest.mark.parametrize("sql, effect", CONCURRENT, ids=["delete", "update", "merge"])
@pytest.mark.parametrize("rewrite, clustered", LAYOUTS, ids=["zorder", "clustering"])
def test_with_row_tracking_dml_losing_to_a_clustering_rewrite_moves_onto_it(session, table_path, delta_rows, sql,
                                                                            effect, rewrite, clustered):
    s = _conflict_table(session, True, clustered)
    path = table_path(s, "t")
    w = s.prepare(sql)
    s.execute(rewrite)
    w.commit()
    assert _state(s, path, delta_rows) == effect(BASE)
    s.execute("UPDATE t SET v = 100 WHERE id = 1")
    assert _state(s, path, delta_rows) == {**effect(BASE), 1: 100}


def test_without_row_tracking_zorder_keeps_the_reference_conflicts(session, table_path, delta_rows):
    s = _conflict_table(session, False)
    path = table_path(s, "t")
    w = s.prepare("OPTIMIZE t ZORDER BY (a, id)")
    s.execute("DELETE FROM t WHERE id = 3")
    with pytest.raises(E.ConcurrentDeleteReadException):
        w.commit()
    want = {k: v for k, v in BASE.items() if k != 3}
    assert _state(s, path, delta_rows) == want
    w = s.prepare("UPDATE t SET v = 1 WHERE id = 4")
    s.execute("OPTIMIZE t ZORDER BY (a, id)")
    with pytest.raises(E.ConcurrentDeleteDeleteException):
        w.commit()
    assert _state(s, path, delta_rows) == want  # the update is not applied, nothing resurrected
    # INSERTs never conflict, in either order
    w = s.prepare("OPTIMIZE t ZORDER BY (v)")
    s.execute("INSERT INTO t VALUES (70, 1, 0)")
    w.commit()
    w = s.prepare("INSERT INTO t VALUES (71, 1, 0)")
    s.execute("OPTIMIZE t ZORDER BY (a)")
    w.commit()
    assert _state(s, path, delta_rows) == {**want, 70: 0, 71: 0}


def test_two_zorders_of_the_same_files_conflict_and_disjoint_partitions_both_commit(session, table_path, delta_rows):
    s = session
    s.execute("CREATE TABLE t (id INT, a INT, d STRING) PARTITIONED BY (d)")
    for i in range(3):
        s.execute(f"INSERT INTO t VALUES ({i}, {i * 7 % 5}, 'x'), ({i + 10}, {i * 3 % 5}, 'y')")
    before = _rows(s)
    w = s.prepare("OPTIMIZE t ZORDER BY (a)")
    s.execute("OPTIMIZE t ZORDER BY (id)")
    with pytest.raises(E.ConcurrentDeleteDeleteException):
        w.commit()
    x = s.prepare("OPTIMIZE t WHERE d = 'x' ZORDER BY (a)")
    s.execute("OPTIMIZE t WHERE d = 'y' ZORDER BY (a)")
    x.commit()
    assert _rows(s) == before == sorted(delta_rows(table_path(s, "t"), ["id", "a", "d"]))
