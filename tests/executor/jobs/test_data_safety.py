"""Issue 18: VACUUM never deletes what is not the table's garbage, staged files survive until
their commit (which checks they exist), and names are refused before they reach the disk."""

from __future__ import annotations

import os
import random
import shutil
import time

import pytest

from isolde import errors as E

OLD = time.time() - 30 * 86400  # older than any retention


def rows(s, ref="t", version=None):
    at = f" VERSION AS OF {version}" if version is not None else ""
    return sorted(tuple(r) for r in s.sql(f"SELECT * FROM {ref}{at}").collect())


def age(path):
    """Make every file under ``path`` look 30 days old."""
    for folder, _, names in os.walk(path):
        for n in names:
            os.utime(os.path.join(folder, n), (OLD, OLD))


def no_retention_check(s):
    s.execute("SET spark.databricks.delta.retentionDurationCheck.enabled = false")


def put(path, text="user data"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    os.utime(path, (OLD, OLD))


# --------------------------------------------------------------------------- CREATE on a non-empty folder


@pytest.mark.parametrize("statement", [
    "CREATE TABLE t (id INT) LOCATION '{loc}'",
    "CREATE TABLE t LOCATION '{loc}' AS SELECT 1 AS id",
    "CREATE OR REPLACE TABLE t (id INT) LOCATION '{loc}'",
    "CREATE TABLE t DEEP CLONE src LOCATION '{loc}'",
])
def test_create_refuses_a_folder_that_holds_files(session, tmp_path, statement):
    s = session
    s.execute("CREATE TABLE src (id INT)")
    loc = tmp_path / "mine"
    put(str(loc / "report.csv"))
    put(str(loc / "old" / "x.parquet"))
    with pytest.raises(E.AnalysisError) as err:
        s.execute(statement.format(loc=loc))
    assert err.value.error_class in ("DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", "DELTA_CLONE_TARGET_NOT_EMPTY")
    assert "report.csv" in str(err.value) or "not empty" in str(err.value)
    assert sorted(os.listdir(loc)) == ["old", "report.csv"]  # nothing written there


def test_create_accepts_an_empty_or_hidden_only_folder(session, tmp_path):
    s = session
    loc = tmp_path / "fresh"
    put(str(loc / ".DS_Store"))
    s.execute(f"CREATE TABLE t (id INT) LOCATION '{loc}'")
    s.execute("INSERT INTO t VALUES (1)")
    assert rows(s) == [(1,)]


# --------------------------------------------------------------------------- VACUUM: only the table's own garbage


FOREIGN = ["notes.txt", "data.csv", "x.parquet.bak", "sub/x.parquet", "a=b/y.parquet", ".hidden/z.parquet",
           "_mine/w.parquet", ".secret.parquet", "_underscore.parquet", "_delta_log_backup/0.json",
           "deletion_vector_not-a-uuid.bin", "other=1/v.parquet"]


@pytest.mark.parametrize("partitioned", [False, True])
def test_vacuum_leaves_foreign_files_and_hidden_folders_alone(session, tmp_path, partitioned):
    s = session
    no_retention_check(s)
    loc = tmp_path / "tbl"
    by = " PARTITIONED BY (p)" if partitioned else ""
    s.execute(f"CREATE TABLE t (id INT, p STRING){by} LOCATION '{loc}' "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = false)")
    s.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y')")
    s.execute("DELETE FROM t WHERE id = 1")  # rewrites a file: its old version is garbage
    live_before = rows(s)
    for rel in FOREIGN:
        put(str(loc / rel))
    age(str(loc))
    garbage = [os.path.join(d, n) for d, _, ns in os.walk(loc) for n in ns
               if n.endswith(".parquet") and "_delta_log" not in d]
    r = s.execute("VACUUM t RETAIN 0 HOURS")
    for rel in FOREIGN:
        assert os.path.exists(loc / rel), f"VACUUM deleted the user's {rel}"
    assert r.metrics["numDeletedFiles"] >= 1
    left = [p for p in garbage if os.path.exists(p)]
    assert len(left) < len(garbage)  # the rewritten file's old version went
    assert rows(s) == live_before


def test_vacuum_after_convert_keeps_what_was_not_converted(session, spark, tmp_path):
    s = session
    no_retention_check(s)
    loc = tmp_path / "pq"
    spark.range(5).selectExpr("CAST(id AS INT) id").write.parquet(str(loc))
    s.execute(f"CONVERT TO DELTA parquet.`{loc}`")  # (it refuses a folder holding other files)
    put(str(loc / "README.txt"))  # what a user keeps beside the table afterwards
    put(str(loc / "notes" / "draft.parquet"))
    age(str(loc))
    s.execute(f"VACUUM delta.`{loc}` RETAIN 0 HOURS")
    assert os.path.exists(loc / "README.txt") and os.path.exists(loc / "notes" / "draft.parquet")
    assert sorted(r[0] for r in s.sql(f"SELECT id FROM delta.`{loc}`").collect()) == [0, 1, 2, 3, 4]


# --------------------------------------------------------------------------- staged files and their commit


def test_a_prepared_deep_clone_survives_a_vacuum_of_its_target(session, table_path):
    s = session
    s.execute("CREATE TABLE src (id INT)")
    s.execute("INSERT INTO src VALUES (1), (2)")
    age(table_path(s, "src"))  # the clone's copies once kept these old times
    s.execute("CREATE TABLE tgt (id INT)")
    s.execute("INSERT INTO tgt VALUES (9)")
    prepared = s.prepare("CREATE OR REPLACE TABLE tgt DEEP CLONE src")
    s.execute("VACUUM tgt")  # default retention: files older than 7 days and unreferenced would go
    prepared.commit()
    assert rows(s, "tgt") == [(1,), (2,)]


def test_a_prepared_write_survives_vacuum_retain_0_hours(session, delta_rows, table_path):
    s = session
    no_retention_check(s)
    s.execute("CREATE TABLE t (id INT)")
    s.execute("INSERT INTO t VALUES (1), (2)")
    prepared = s.prepare("INSERT INTO t VALUES (3)")
    update = s.prepare("UPDATE t SET id = 20 WHERE id = 2")  # a new data file and a deletion vector
    s.execute("VACUUM t RETAIN 0 HOURS")
    prepared.commit()
    update.commit()
    assert rows(s) == [(1,), (3,), (20,)]
    assert sorted(delta_rows(table_path(s, "t"))) == [(1,), (3,), (20,)]
    assert not os.path.exists(os.path.join(table_path(s, "t"), ".isolde-leases"))  # released at commit


def test_a_commit_whose_staged_files_are_gone_fails_and_commits_nothing(session, table_path):
    s = session
    s.execute("CREATE TABLE t (id INT)")
    s.execute("INSERT INTO t VALUES (1)")
    path = table_path(s, "t")
    before = set(os.listdir(path))
    prepared = s.prepare("INSERT INTO t VALUES (2)")
    staged = [p for p in set(os.listdir(path)) - before if p.endswith(".parquet")]
    assert staged
    for name in staged:
        os.remove(os.path.join(path, name))  # as a VACUUM with its safety check off could
    with pytest.raises(E.StagedFileMissingError) as err:
        prepared.commit()
    assert staged[0] in str(err.value) and err.value.error_class == "DELTA_FILE_NOT_FOUND_DETAILED"
    assert rows(s) == [(1,)]
    assert s.execute("DESCRIBE HISTORY t").first().version == 1


def test_a_killed_writer_s_lease_expires(session, table_path, monkeypatch):
    from isolde.executor.catalog import leases

    s = session
    no_retention_check(s)
    s.execute("CREATE TABLE t (id INT)")
    s.execute("INSERT INTO t VALUES (1)")
    path = table_path(s, "t")
    orphan = os.path.join(path, "part-00000-orphan.snappy.parquet")
    shutil.copyfile(next(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".parquet")), orphan)
    lease = leases.take([orphan])  # a writer killed after staging: its lease stays behind
    os.utime(orphan, (OLD, OLD))
    s.execute("VACUUM t RETAIN 0 HOURS")
    assert os.path.exists(orphan)  # leased
    os.utime(lease, (OLD, OLD))  # ... until the lease expires
    s.execute("VACUUM t RETAIN 0 HOURS")
    assert not os.path.exists(orphan) and not os.path.exists(lease)
    assert rows(s) == [(1,)]


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize("name", ["`bad\x00name`", "`evil\u202etxt.exe`", "`tab\tname`", "`" + "x" * 300 + "`"])
def test_table_names_the_file_system_or_a_reader_would_misread_are_refused(session, name):
    with pytest.raises(E.AnalysisError) as err:
        session.execute(f"CREATE TABLE {name} (id INT)")
    assert err.value.error_class == "INVALID_IDENTIFIER"
    assert session.tables() == []


@pytest.mark.parametrize("name", ["`bad\x00name`", "`evil\u202etxt.exe`", "`new\nline`"])
def test_column_names_with_control_or_bidi_characters_are_refused(session, name):
    for sql in (f"CREATE TABLE t ({name} INT, v INT)", f"CREATE TABLE t AS SELECT 1 AS {name}"):
        with pytest.raises(E.AnalysisError) as err:
            session.execute(sql)
        # Spark's own check may speak first (a newline: INVALID_COLUMN_NAME)
        assert err.value.error_class in ("INVALID_IDENTIFIER", "INVALID_COLUMN_NAME")
    session.execute("CREATE TABLE t (v INT)")
    with pytest.raises(E.AnalysisError):
        session.execute(f"ALTER TABLE t ADD COLUMNS ({name} INT)")


# --------------------------------------------------------------------------- interleavings


def test_random_interleavings_keep_every_version_within_retention_readable(session, table_path, delta_rows):
    """Prepared writes, clones, RESTOREs and VACUUMs (default retention, and 0 hours with the
    check off) in a seeded random order; after every step each version that must still read
    (all of them, or those after the last zero-retention VACUUM) reads with its rows."""
    s = session
    no_retention_check(s)
    rng = random.Random(18)
    s.execute("CREATE TABLE t (id INT, v INT)")
    s.execute("INSERT INTO t VALUES (1, 0), (2, 0)")
    path = table_path(s, "t")
    expected = {}  # version -> rows
    expected[1] = [(1, 0), (2, 0)]
    pending = []  # (prepared write, function of rows -> rows)
    floor = 0  # the first version that must still read
    next_id = 3
    for step in range(28):
        op = rng.choice(["prepare_insert", "prepare_update", "prepare_delete", "commit", "commit", "restore",
                         "clone", "vacuum", "vacuum0"])
        latest = max(expected)
        if op.startswith("prepare") and len(pending) < 3:
            if op == "prepare_insert":
                i = next_id
                next_id += 1
                pending.append((s.prepare(f"INSERT INTO t VALUES ({i}, 0)"), lambda r, i=i: sorted(r + [(i, 0)])))
            else:
                ids = [x[0] for x in expected[latest]]
                if not ids:
                    continue
                k = rng.choice(ids)
                if op == "prepare_update":
                    pending.append((s.prepare(f"UPDATE t SET v = v + 1 WHERE id = {k}"),
                                    lambda r, k=k: sorted((i, v + 1) if i == k else (i, v) for i, v in r)))
                else:
                    pending.append((s.prepare(f"DELETE FROM t WHERE id = {k}"),
                                    lambda r, k=k: sorted(x for x in r if x[0] != k)))
        elif op == "commit" and pending:
            prepared, apply = pending.pop(rng.randrange(len(pending)))
            try:
                result = prepared.commit()
            except E.ConcurrentModificationException:
                continue
            if result.version > latest:
                expected[result.version] = apply(expected[latest])
        elif op == "restore" and latest > floor + 1:
            to = rng.randint(max(floor, 1), latest)
            r = s.execute(f"RESTORE TABLE t TO VERSION AS OF {to}")
            expected[r.version] = expected[to]
        elif op == "clone":
            name = f"c{step}"
            kind = rng.choice(["SHALLOW", "DEEP"])
            s.execute(f"CREATE TABLE {name} {kind} CLONE t")
            assert rows(s, name) == expected[max(expected)]
        elif op in ("vacuum", "vacuum0"):
            retain = " RETAIN 0 HOURS" if op == "vacuum0" else ""
            r = s.execute(f"VACUUM t{retain}")
            if op == "vacuum0":
                floor = max(expected)
            else:
                assert r.metrics["numDeletedFiles"] == 0  # nothing is 7 days old here
        # every version that must read, reads as it was committed
        for version, want in expected.items():
            if version >= floor:
                assert rows(s, version=version) == want, (step, op, version)
        assert sorted(delta_rows(path)) == expected[max(expected)], (step, op)
    for prepared, _ in pending:
        prepared.abort()
