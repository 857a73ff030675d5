"""The one-job rewrite of touched partitions (``writer.write_partition_slices``): each Spark task
reads one partition's files and its file goes to that partition's folder, the task -> partition
map read from the physical plan. These tests check the map and both of its guards: a plan that
can move rows between tasks is refused before anything runs, and a map that does not match the
rows written (each partition's count against the log's) is refused after the job, leaving the
table untouched for the job-per-partition plan. Every result is read back by delta-rs too.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from tests.helpers.oracle import read_delta_rows  # noqa: E402
from tests.helpers.dml import Runner, always_one_scan, make_table, spy_outcomes, spy_slice_writes  # noqa: E402

from isolde.executor.rows import dml, routes, writer
from isolde.executor.rows import scan as scan_module
from isolde.executor.session.context import ExecutionContext  # noqa: E402
from isolde.executor.rows.dml import open_target  # noqa: E402
from isolde.executor.rows.scan import scan_by_partition  # noqa: E402
from isolde.grammar import ast  # noqa: E402

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("d", pa.string())])


_CHOICE = scan_module._few_tasks_per_file


@pytest.fixture(autouse=True)
def _a_task_per_file_whatever_the_cores(monkeypatch):
    always_one_scan(monkeypatch)


def _rows(ids, d):
    return [{"id": i, "v": i * 10, "d": d} for i in ids]


_ROWS = [(i, i * 10, d) for d, ids in (("a", [1, 2, 9]), ("b", [3, 4, 5, 6]), ("c", [7, 8])) for i in ids]


def _table(r, name="t"):
    # partition a: 3 rows in 2 files, b: 4 rows in 1 file, c: 2 rows in 1 file (counts differ,
    # so a shifted task map shows in the counts)
    make_table(r.path(name), SCHEMA, [_rows([1, 2], "a") + _rows([3, 4, 5, 6], "b") + _rows([7, 8], "c"),
                                      _rows([9], "a")], partition_by=["d"])


def _files_on_disk_are_the_logs(r, name="t"):
    """No staging folder is left, and the Parquet files in the table folder are exactly the
    live files plus those the last commit removed (nothing stray from a refused job)."""
    from urllib.parse import unquote

    path = r.path(name)
    assert not any(n.startswith(".isolde-staging") for n in os.listdir(path))
    log = r.log(name)
    snap = log.update()
    before = log.snapshot(snap.version - 1)
    known = {unquote(a.path) for a in list(snap.all_files) + list(before.all_files)}
    on_disk = {os.path.relpath(os.path.join(root, n), path)
               for root, dirs, names in os.walk(path) if "_delta_log" not in root
               for n in names if n.endswith(".parquet")}
    assert on_disk == known


EXPECTED = [(1, 11, "a"), (2, 20, "a"), (3, 31, "b"), (4, 40, "b"), (5, 51, "b"), (6, 60, "b"), (7, 71, "c"),
            (8, 80, "c"), (9, 91, "a")]


def test_update_writes_each_partition_folder_in_one_job(tmp_path, monkeypatch):
    r = Runner(tmp_path / "wh")
    _table(r)
    calls = spy_slice_writes(monkeypatch)
    jobs = []
    real_groups = writer.write_partition_groups
    monkeypatch.setattr(writer, "write_partition_groups", lambda *a, **k: jobs.append(1) or real_groups(*a, **k))
    res = r.run("UPDATE t SET v = v + 1 WHERE id % 2 = 1")
    assert calls == [True] and jobs == []
    assert res.metrics["numUpdatedRows"] == 5 and res.metrics["numRemovedFiles"] == 4
    assert r.rows("t") == EXPECTED
    assert read_delta_rows(r.path("t"), ["id", "v", "d"]) == EXPECTED
    # every new file sits in the folder of the partition values its AddFile carries
    for add in r.log("t").update().all_files:
        assert add.path.startswith(f"d={add.partition_values['d']}/"), add.path
    _files_on_disk_are_the_logs(r)


def test_a_task_map_that_does_not_match_the_rows_is_refused(tmp_path, monkeypatch):
    """A map shifted by one task puts some partition's rows under another's values: the row
    counts per partition disagree with the log, nothing is committed from that job, and the
    statement falls back to a job per partition with the right result."""
    r = Runner(tmp_path / "wh")
    _table(r)
    calls = spy_slice_writes(monkeypatch)
    real_tasks = writer.slice_tasks

    maps: list = []  # the shifted maps, as built (an exception here would just refuse the plan)

    def shifted(df, slices, table_path):
        layout = real_tasks(df, slices, table_path)
        assert layout is not None
        order = [i for i, _, _ in layout]
        maps.append([(i, n, path) for i, (_, n, path) in zip(order[1:] + order[:1], layout)])  # rotate the slices
        return maps[-1]

    monkeypatch.setattr(writer, "slice_tasks", shifted)
    res = r.run("UPDATE t SET v = v + 1 WHERE id % 2 = 1")
    assert len(maps) == 1 and calls == [False]
    assert res.metrics["numUpdatedRows"] == 5
    assert r.rows("t") == EXPECTED
    assert read_delta_rows(r.path("t"), ["id", "v", "d"]) == EXPECTED
    # the refused job's files were not left in the table folder
    _files_on_disk_are_the_logs(r)


def test_a_task_map_that_swaps_files_across_partitions_is_refused(tmp_path, monkeypatch):
    """Partition a holds files of 1 and 3 rows, b of 3 and 1. A map that labels a's files as
    b's (1 <-> 3, 3 <-> 1) keeps both partitions' totals at 4: only the check per file sees
    it. Nothing from that job is committed; the result is right."""
    from isolde.executor.rows.scan import file_local_path

    r = Runner(tmp_path / "wh")
    make_table(r.path("t"), SCHEMA, [_rows([1], "a") + _rows([2, 3, 4], "b"), _rows([5, 6, 7], "a") + _rows([8], "b")],
               partition_by=["d"])
    calls = spy_slice_writes(monkeypatch)
    real_tasks = writer.slice_tasks

    faked: list = []  # the fake map, as built (an exception here would just refuse the plan)

    def swapped(df, slices, table_path):
        layout = real_tasks(df, slices, table_path)
        assert layout is not None and all(path is not None for _, _, path in layout)
        count = {os.path.normpath(file_local_path(table_path, a.path)): a.num_records for s in slices for a in s.files}
        slice_of = {path: i for i, _, path in layout}
        side = {path: slices[i].partition_values["d"] for path, i in slice_of.items()}
        pair: dict = {}
        for p in [p for p in slice_of if side[p] == "a"]:
            q = next(q for q in slice_of if side[q] == "b" and count[q] != count[p] and q not in pair)
            pair[p], pair[q] = q, p
        fake = [(slice_of[pair[path]], n, pair[path]) for _, n, path in layout]
        totals: dict = {}
        labelled: dict = {}
        for (i, _, path), (j, _, _) in zip(layout, fake):
            totals[i] = totals.get(i, 0) + count[path]
            labelled[j] = labelled.get(j, 0) + count[path]  # the task read `path`, labelled slice j
        assert labelled == totals  # each partition's total still agrees
        faked.append(fake)
        return fake

    monkeypatch.setattr(writer, "slice_tasks", swapped)
    r.run("UPDATE t SET v = v + 1 WHERE id % 2 = 1 OR id = 8")  # touches all four files
    assert len(faked) == 1 and calls == [False]
    want = sorted((i, i * 10 + (i % 2 or i == 8), d) for d, ids in (("a", [1, 5, 6, 7]), ("b", [2, 3, 4, 8]))
                  for i in ids)
    assert r.rows("t") == want
    assert read_delta_rows(r.path("t"), ["id", "v", "d"]) == want
    _files_on_disk_are_the_logs(r)


@pytest.mark.parametrize("read", ["one scan", "union"])
def test_plans_that_move_rows_between_tasks_are_refused(tmp_path, monkeypatch, read):
    r = Runner(tmp_path / "wh")
    _table(r)
    if read == "union":
        monkeypatch.setattr(routes, "ONE_SCAN_MAX_FILES", 0)
    target = open_target(ExecutionContext(r.session), ast.TableRef(parts=("t",)))
    files = list(target.snapshot.all_files)
    df, slices = scan_by_partition(r.session, target.snapshot, target.path, files)
    assert sorted(s.partition_values["d"] for s in slices) == ["a", "b", "c"]
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert plan.count("FileScan") == (1 if read == "one scan" else 3)
    layout = writer.slice_tasks(df.select("id", "v"), slices, target.path)
    assert layout is not None and sorted({i for i, _, _ in layout}) == [0, 1, 2]
    assert all(n >= 1 for _, n, _ in layout)
    if read == "one scan":  # a task per file, named
        local = {os.path.normpath(p) for s in slices for p in s.local_paths(target.path)}
        assert len(layout) == len(files) and all(n == 1 for _, n, _ in layout)
        assert {path for _, _, path in layout} == local
    else:
        assert all(path is None for _, _, path in layout)
    # the rows of each slice, read back, hold its partition's value and only its rows
    assert sorted(tuple(x) for x in df.select("id", "d").collect()) == sorted((i, d) for i, _, d in _ROWS)
    # a shuffle, a coalesce across partitions, a sort: rows leave their task's partition
    assert writer.slice_tasks(df.repartition(3, "id"), slices, target.path) is None
    assert writer.slice_tasks(df.coalesce(1), slices, target.path) is None
    assert writer.slice_tasks(df.orderBy("v"), slices, target.path) is None


def test_a_subquery_delete_uses_per_partition_jobs(tmp_path, monkeypatch):
    """A subquery over the union of per-partition scans (a correlated one becomes a shuffled join)
    broke the one-job plan, so statements with subqueries never try it."""
    r = Runner(tmp_path / "wh")
    _table(r)
    make_table(r.path("k"), pa.schema([("id", pa.int64())]), [[{"id": 3}, {"id": 9}]])
    calls = spy_slice_writes(monkeypatch)
    spark = r.session.spark
    old = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")  # the subquery join shuffles
    try:
        res = r.run("DELETE FROM t WHERE id IN (SELECT id FROM k)")
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", old)
    assert res.metrics["numDeletedRows"] == 2
    assert calls == []  # the one-job plan was not tried
    want = [(1, 10, "a"), (2, 20, "a"), (4, 40, "b"), (5, 50, "b"), (6, 60, "b"), (7, 70, "c"), (8, 80, "c")]
    assert r.rows("t") == want
    assert read_delta_rows(r.path("t"), ["id", "v", "d"]) == want


def test_slice_writes_off_gives_the_same_table(tmp_path, monkeypatch):
    monkeypatch.setattr(dml, "SLICE_WRITES", False)
    calls = spy_slice_writes(monkeypatch)
    r = Runner(tmp_path / "wh")
    _table(r)
    r.run("UPDATE t SET v = v + 1 WHERE id % 2 = 1")
    assert calls == [] and r.rows("t") == EXPECTED


def test_null_and_escaped_partition_values(tmp_path, monkeypatch):
    """A NULL partition and a value needing escaping in its folder name keep their values."""
    r = Runner(tmp_path / "wh")
    make_table(r.path("t"), SCHEMA, [_rows([1, 2], None) + _rows([3], "x/y=z") + _rows([4], "c")],
               partition_by=["d"])
    calls = spy_slice_writes(monkeypatch)
    r.run("UPDATE t SET v = -v WHERE id <> 4")
    assert calls == [True]
    want = [(1, -10, None), (2, -20, None), (3, -30, "x/y=z"), (4, 40, "c")]
    assert sorted(r.rows("t"), key=lambda t: t[0]) == want
    assert sorted(read_delta_rows(r.path("t"), ["id", "v", "d"]), key=lambda t: t[0]) == want
    _files_on_disk_are_the_logs(r)


def _spy_one_scan(monkeypatch) -> list:
    """Record whether each ``scan_file_per_task`` read its files as one scan (False: refused)."""
    return spy_outcomes(monkeypatch, scan_module, "scan_file_per_task")


def test_one_scan_reads_typed_and_null_partition_values_from_folders(tmp_path, monkeypatch):
    """The one scan takes the partition values from the folder names: a date, an int and a
    NULL come back typed, for the condition and in the rewritten table."""
    import datetime as dt

    schema = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("day", pa.date32()), ("n", pa.int32())])
    days = [dt.date(2024, 1, 1), dt.date(2024, 2, 29)]
    rows = [{"id": i, "v": i, "day": days[i % 2], "n": None if i % 3 == 0 else i % 3} for i in range(12)]
    r = Runner(tmp_path / "wh")
    make_table(r.path("t"), schema, [rows], partition_by=["day", "n"])
    reads, calls = _spy_one_scan(monkeypatch), spy_slice_writes(monkeypatch)
    r.run("UPDATE t SET v = v + 100 + n WHERE day = DATE'2024-02-29' OR n IS NULL OR id = 2")
    assert reads == [True] and calls == [True]
    # the scan's own split setting stayed in its clone of the session
    from pyspark.sql import SparkSession

    for spark in (r.session.spark, SparkSession.builder.getOrCreate()):
        assert spark.conf.get("spark.sql.files.openCostInBytes") != str(1 << 40)

    def new_v(x):
        hit = x["day"] == days[1] or x["n"] is None or x["id"] == 2
        return x["v"] + 100 + x["n"] if hit and x["n"] is not None else (None if hit else x["v"])

    want = sorted((x["id"], new_v(x), x["day"], x["n"]) for x in rows)
    assert r.rows("t", ["id", "v", "day", "n"]) == want
    assert read_delta_rows(r.path("t"), ["id", "v", "day", "n"]) == want
    _files_on_disk_are_the_logs(r)


def test_one_scan_and_the_union_agree_on_typed_and_escaped_partitions(tmp_path, monkeypatch):
    """A table isolde wrote (so its folders carry Spark's escaping) partitioned by a string
    needing escapes, a boolean, a decimal and a timestamp: the same UPDATE and MERGE through
    the one scan and through the union of scans give the same table, which delta-rs reads."""
    names = ["a b", "50%", "x=y/z", "\u00e9t\u00e9", None]
    values = ", ".join(f"({i}, {i * 10}, {'NULL' if n is None else repr(n)}, {str(i % 2 == 0).upper()}, "
                       f"{i % 3}.25, TIMESTAMP'2024-03-0{1 + i % 2} 10:30:00')" for i, n in enumerate(names * 2))
    tables = {}
    for read in ("one scan", "union"):
        monkeypatch.setattr(routes, "ONE_SCAN_MAX_FILES", 64 if read == "one scan" else 0)
        r = Runner(tmp_path / read.replace(" ", "_"))
        r.run("CREATE TABLE t (id BIGINT, v BIGINT, s STRING, flag BOOLEAN, amt DECIMAL(10,2), ts TIMESTAMP) "
              "PARTITIONED BY (s, flag, amt, ts) TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")
        r.run(f"INSERT INTO t VALUES {values}")
        reads = _spy_one_scan(monkeypatch)
        r.run("UPDATE t SET v = v + 1 WHERE flag OR amt > 1 OR s IS NULL OR ts > TIMESTAMP'2024-03-01 12:00:00'")
        r.run("MERGE INTO t USING (SELECT id, s, ts, -id AS v FROM t WHERE id % 3 = 0) src "
              "ON src.id = t.id AND src.s <=> t.s AND src.ts = t.ts WHEN MATCHED THEN UPDATE SET v = src.v")
        assert reads == ([True, True] if read == "one scan" else [])
        tables[read] = r.rows("t")
        by_delta_rs = [row[:5] + (row[5].replace(tzinfo=None),)  # delta-rs says UTC; Spark's session is UTC
                       for row in read_delta_rows(r.path("t"), ["id", "v", "s", "flag", "amt", "ts"])]
        assert by_delta_rs == tables[read]
    assert tables["one scan"] == tables["union"]
    assert len(tables["union"]) == 10 and {row[0]: row[1] for row in tables["union"]}[3] == -3


def test_a_task_per_file_only_when_it_makes_no_more_tasks_than_the_union():
    """The choice itself, over fake sessions and files (no Spark): files are counted in
    splits of spark.sql.files.maxPartitionBytes, against partitions x cores."""
    from types import SimpleNamespace as NS

    _few_tasks_per_file = _CHOICE  # the real one, not the fixture's

    def session(cores, split_mb=128):
        conf = NS(filesMaxPartitionBytes=lambda: split_mb << 20)
        return NS(_jsparkSession=NS(sessionState=lambda: NS(conf=lambda: conf)),
                  sparkContext=NS(defaultParallelism=cores))

    def files(*mb):
        return [NS(size=None if m is None else int(m * (1 << 20))) for m in mb]

    assert _few_tasks_per_file(session(2), files(*[50] * 10), 10)  # the benchmark: 10 tasks <= 20
    assert not _few_tasks_per_file(session(2), files(*[1] * 40), 4)  # 40 small files: 40 > 8
    assert _few_tasks_per_file(session(8), files(*[1] * 24), 4)  # more cores: 24 <= 32
    assert not _few_tasks_per_file(session(1), files(300, 300), 2)  # 3 splits each: 6 > 2
    assert _few_tasks_per_file(session(4), files(300, 300), 2)  # 6 <= 8
    assert _few_tasks_per_file(session(2), files(0, None), 2)  # empty or unknown size: one task


def test_a_file_outside_its_partition_folder_is_read_by_a_union(tmp_path, monkeypatch):
    """Delta does not tie a file's folder to its partition values (the log holds them): a file
    whose folder does not name them sends the rewrite to the union of per-partition scans."""
    import json

    r = Runner(tmp_path / "wh")
    _table(r)
    path = r.path("t")
    commit = os.path.join(path, "_delta_log", "00000000000000000001.json")
    with open(commit) as fh:
        actions = [json.loads(line) for line in fh]
    for a in actions:
        add = a.get("add")
        if add and add["partitionValues"]["d"] == "b":
            os.rename(os.path.join(path, add["path"]), os.path.join(path, "moved-b.parquet"))
            add["path"] = "moved-b.parquet"
    with open(commit, "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
    reads, calls = _spy_one_scan(monkeypatch), spy_slice_writes(monkeypatch)
    r.run("UPDATE t SET v = v + 1 WHERE id % 2 = 1")
    assert reads == [False] and calls == [True]
    assert r.rows("t") == EXPECTED
    assert read_delta_rows(r.path("t"), ["id", "v", "d"]) == EXPECTED


def test_a_plan_that_cannot_be_read_is_refused(tmp_path, monkeypatch):
    """If reading the task map fails (a plan shape another Spark version names differently),
    the job's files are discarded and the statement still gives the right table."""
    r = Runner(tmp_path / "wh")
    _table(r)
    calls = spy_slice_writes(monkeypatch)

    def unreadable(*a, **k):
        raise RuntimeError("no such plan node")

    monkeypatch.setattr(writer, "slice_tasks", unreadable)
    r.run("UPDATE t SET v = v + 1 WHERE id % 2 = 1")
    assert calls == [False]
    assert r.rows("t") == EXPECTED
    _files_on_disk_are_the_logs(r)


def test_files_with_old_deletion_vectors_are_rewritten_another_way(tmp_path, monkeypatch):
    """Deletion vectors written while the table had them on, then turned off: the next UPDATE
    rewrites those files (copy-on-write), which must not go through the one-job plan (its row
    check counts numRecords without the vectors' rows, and its scan reads no vectors)."""
    r = Runner(tmp_path / "wh")
    r.run("CREATE TABLE t (id BIGINT, v BIGINT, d STRING) PARTITIONED BY (d) "
          "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    r.run("INSERT INTO t SELECT id, id * 10, CAST(id % 3 AS STRING) FROM range(30)")
    r.run("DELETE FROM t WHERE id % 10 = 0")
    assert any(a.deletion_vector is not None for a in r.log("t").update().all_files)
    r.run("ALTER TABLE t SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")
    calls = spy_slice_writes(monkeypatch)
    res = r.run("UPDATE t SET v = -v WHERE id % 7 = 1")
    assert calls == []  # never tried
    assert res.metrics["numUpdatedRows"] == 5  # 1, 8, 15, 22, 29
    want = sorted((i, -i * 10 if i % 7 == 1 else i * 10, str(i % 3)) for i in range(30) if i % 10)
    assert r.rows("t") == want
    assert read_delta_rows(r.path("t"), ["id", "v", "d"]) == want
    # the touched files were rewritten without their vectors (the vectors' rows stay deleted)
    snap = r.log("t").update()
    before = {a.path for a in r.log("t").snapshot(snap.version - 1).all_files}
    new_files = [a for a in snap.all_files if a.path not in before]
    assert new_files and all(a.deletion_vector is None for a in new_files)


@pytest.mark.parametrize("bad", ["inserted", "updated"])
def test_a_failed_merge_leaves_no_files_from_either_write(tmp_path, monkeypatch, bad):
    """MERGE writes its new rows in a job beside the one-job rewrite. When either write fails
    (here a CHECK constraint), the statement fails, the table is unchanged, and neither write
    leaves files behind, including the one that succeeded."""
    from isolde.errors import ConstraintViolationError

    r = Runner(tmp_path / "wh")
    _table(r)
    r.run("ALTER TABLE t ADD CONSTRAINT positive CHECK (v >= 0)")
    calls = spy_slice_writes(monkeypatch)
    beside = []
    real_beside = writer.BackgroundWrite
    monkeypatch.setattr(writer, "BackgroundWrite", lambda *a, **k: beside.append(1) or real_beside(*a, **k))
    new_v, upd_v = (-1, 5) if bad == "inserted" else (1, -5)
    make_table(r.path("s"), SCHEMA, [[{"id": 3, "v": upd_v, "d": "b"}, {"id": 50, "v": new_v, "d": "c"}]])
    version = r.log("t").update().version
    with pytest.raises(ConstraintViolationError):
        r.run("MERGE INTO t USING s ON s.id = t.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    assert beside == [1]
    assert calls == ([True] if bad == "inserted" else [])  # an updated row's violation stops the rewrite
    assert r.log("t").update().version == version
    assert r.rows("t") == sorted((i, i * 10, d) for i, d in [(1, "a"), (2, "a"), (9, "a"), (3, "b"), (4, "b"),
                                                             (5, "b"), (6, "b"), (7, "c"), (8, "c")])
    path = r.path("t")
    assert not any(n.startswith(".isolde-staging") for n in os.listdir(path))
    live = {a.path for a in r.log("t").update().all_files}
    on_disk = {os.path.relpath(os.path.join(root, n), path).replace(os.sep, "/")
               for root, dirs, names in os.walk(path) if "_delta_log" not in root
               for n in names if n.endswith(".parquet")}
    assert on_disk == live


@pytest.mark.parametrize("odd", [["it's", "plain", "glob[1]*?{a,b}"], ["back\\slash", "q'\\n", "plain"]],
                         ids=["quotes-globs", "backslashes"])
def test_partition_values_with_quotes_globs_and_backslashes(tmp_path, odd):
    """Pass 1 finds each row's file and partition through literal maps keyed by file path,
    built as one SQL expression when no value holds a quote or a backslash and Column by
    Column otherwise: both kinds of partition in one table keep their values. Glob characters
    in a folder name are read as themselves (Spark globs the file paths it is given). delta-rs
    reads a backslash in a path as a folder separator, its own files' too: it checks the first
    table only."""
    r = Runner(tmp_path / "wh")
    make_table(r.path("t"), SCHEMA, [[{"id": i, "v": i, "d": d} for i, d in enumerate(odd)]], partition_by=["d"])
    interop = not any("\\" in d for d in odd)
    r.run("UPDATE t SET v = v + 100 WHERE id % 2 = 0 OR d = 'plain'")
    want = sorted((i, i + 100 if i % 2 == 0 or d == "plain" else i, d) for i, d in enumerate(odd))
    assert r.rows("t") == want
    if interop:
        assert read_delta_rows(r.path("t"), ["id", "v", "d"]) == want
    gone = odd[0]
    literal = gone.replace("\\", "\\\\").replace("'", "''")  # SQL string escapes
    r.run(f"DELETE FROM t WHERE d = '{literal}' OR id = 1")
    want = [w for w in want if w[2] != gone and w[0] != 1]
    assert len(want) == 1 and r.rows("t") == want
    if interop:
        assert read_delta_rows(r.path("t"), ["id", "v", "d"]) == want


def test_merge_with_schema_evolution_through_the_one_job_plan(tmp_path, monkeypatch):
    """A new source column added by MERGE WITH SCHEMA EVOLUTION: the one-job rewrite and the
    inserts' write beside it both write the new schema; delta-rs reads it back."""
    r = Runner(tmp_path / "wh")
    r.run("CREATE TABLE t (id BIGINT, v BIGINT, d STRING) PARTITIONED BY (d) "
          "TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")
    r.run("INSERT INTO t SELECT id, id * 10, CAST(id % 3 AS STRING) FROM range(30)")
    r.run("CREATE TABLE s (id BIGINT, v BIGINT, d STRING, extra STRING)")
    r.run("INSERT INTO s VALUES (1, -1, '1', 'x'), (4, -4, '1', 'y'), (100, 1000, '1', 'new'), (101, 1010, '2', 'n2')")
    calls = spy_slice_writes(monkeypatch)
    beside = []
    real_beside = writer.BackgroundWrite
    monkeypatch.setattr(writer, "BackgroundWrite", lambda *a, **k: beside.append(1) or real_beside(*a, **k))
    res = r.run("MERGE WITH SCHEMA EVOLUTION INTO t USING s ON s.id = t.id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    assert calls == [True] and beside == [1]
    assert (res.metrics["numTargetRowsUpdated"], res.metrics["numTargetRowsInserted"]) == (2, 2)
    changed = {1: (1, -1, "1", "x"), 4: (4, -4, "1", "y"), 100: (100, 1000, "1", "new"), 101: (101, 1010, "2", "n2")}
    want = sorted(changed.get(i, (i, i * 10, str(i % 3), None)) for i in [*range(30), 100, 101])
    assert r.rows("t", ["id", "v", "d", "extra"]) == want
    assert read_delta_rows(r.path("t"), ["id", "v", "d", "extra"]) == want
    _files_on_disk_are_the_logs(r)
