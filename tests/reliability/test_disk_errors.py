"""Issue 25, crash safety: a full disk or a folder the writer may not write in, while writing data
files, a deletion vector, the commit or a checkpoint, leaves the table at its last version with
a clear isolde error; the next writer succeeds and VACUUM removes whatever was left over.

Disk full: the warehouse lives on a small tmpfs that a filler file fills (to 0 free bytes, or to
a few pages where the commit must fit and the checkpoint must not). Permission errors: one child
process runs every failing statement as ``nobody`` against tables root owns, with the one folder
that matters read-only (root ignores file modes); root is then the next writer. Every table is
read back by isolde and by delta-rs (``deltalake``).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
from urllib.parse import unquote

import pytest

import isolde
from isolde import errors as E
from isolde.executor.log.delta_log import DeltaLog
from isolde.executor.log.deletion_vectors import dv_file_path, read_deletion_vector, write_deletion_vectors
from isolde.executor.log.store import LocalLogStore, StorageError

from disk_helpers import (Filler, PAGE, as_unprivileged, run_unprivileged, table_files, tmpfs,
                          unprivileged_problem, wait_for_idle_spark)

SPARK = pytest.mark.spark
NEEDS_SPARK = True  # the whole module is marked spark, the store-level cases too

START = [(1, "a"), (2, "b"), (3, "c")]
NO_DV = "TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')"
DV = "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"

#: statement, the rows it leaves when it succeeds (from START)
INSERT = ("INSERT INTO {t} VALUES (4, 'd')", START + [(4, "d")])
UPDATE = ("UPDATE {t} SET v = 'z' WHERE id = 2", [(1, "a"), (2, "z"), (3, "c")])
MERGE = ("MERGE INTO {t} AS tgt USING (SELECT 3 AS id, 'm' AS v UNION ALL SELECT 5, 'n') src ON tgt.id = src.id "
         "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *", [(1, "a"), (2, "b"), (3, "m"), (5, "n")])
DELETE = ("DELETE FROM {t} WHERE id = 1", [(2, "b"), (3, "c")])


# --------------------------------------------------------------------------- checks


def delta_rs(path: str) -> tuple[int, list]:
    """(version, sorted rows) as delta-rs reads them (QueryBuilder honours deletion vectors)."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(path)
    table = pa.table(QueryBuilder().register("t", dt).execute("SELECT id, v FROM t").read_all())
    return dt.version(), sorted(tuple(r.values()) for r in table.to_pylist())


def isolde_rows(s, path: str) -> list:
    return sorted(tuple(r) for r in s.sql(f"SELECT id, v FROM delta.`{path}`").collect())


def assert_intact(s, path: str, version: int, rows: list) -> None:
    """The table is exactly at ``version`` with ``rows`` for isolde (a fresh log) and delta-rs;
    no commit file beyond it, no temporary file in the log, and a _last_checkpoint (if any)
    that names a complete checkpoint no newer than the table."""
    log = os.path.join(path, "_delta_log")
    names = os.listdir(log)
    commits = sorted(int(n[:20]) for n in names if n.endswith(".json") and len(n) == 25)
    assert commits == list(range(version + 1)), f"commit files {commits}, expected 0..{version}"
    assert [n for n in names if n.startswith(".") and not n.endswith(".crc")] == [], names
    if "_last_checkpoint" in names:
        with open(os.path.join(log, "_last_checkpoint")) as fh:
            last = json.load(fh)  # a torn pointer would not parse
        assert last["version"] <= version
        assert f"{last['version']:020d}.checkpoint.parquet" in names
    assert DeltaLog(path).update().version == version
    assert isolde_rows(s, path) == sorted(rows)
    assert delta_rs(path) == (version, sorted(rows))


def referenced(path: str) -> set[str]:
    """The data and deletion-vector files the latest version needs, relative to the table."""
    out = set()
    for add in DeltaLog(path).update().all_files:
        out.add(unquote(add.path))
        if add.deletion_vector is not None and not add.deletion_vector.is_inline:
            out.add(os.path.relpath(dv_file_path(path, add.deletion_vector), path))
    return out


def assert_vacuum_leaves_only_the_table(s, path: str, rows: list) -> None:
    """VACUUM RETAIN 0 HOURS (retention check off) removes every leftover of a failed write
    (after the failed job's last tasks stopped: they may still write into its staging folder)."""
    wait_for_idle_spark(s.spark)
    s.execute("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    s.execute(f"VACUUM delta.`{path}` RETAIN 0 HOURS")
    left = {f for f in table_files(path) if not f.startswith(("_delta_log/", ".isolde-leases/"))}
    assert left == referenced(path)
    assert isolde_rows(s, path) == sorted(rows)


def assert_storage_error(err: BaseException, code: int, what: str, file_name: str | None = None) -> None:
    """A StorageError (an isolde error and an OSError) with this errno, its message naming the
    errno, the kind of file and the file."""
    assert isinstance(err, StorageError) and isinstance(err, E.IsoldeError) and isinstance(err, OSError), repr(err)
    assert err.errno == code
    assert err.error_class == {errno.ENOSPC: "DISK_FULL", errno.EACCES: "INSUFFICIENT_PERMISSIONS",
                               errno.EPERM: "INSUFFICIENT_PERMISSIONS"}[code]
    assert f"[{errno.errorcode[code]}]" in str(err)
    assert what in str(err) and err.filename in str(err)
    if file_name is not None:
        assert os.path.basename(err.filename) == file_name


# --------------------------------------------------------------------------- disk full


@pytest.fixture
def disk(spark, tmp_path):
    """(session, table folder, filler): table ``t`` (id, v) on a 4 MiB tmpfs."""
    with tmpfs(str(tmp_path / "mnt"), size="4m") as mnt:
        filler = Filler(mnt)
        s = isolde.connect(warehouse=os.path.join(mnt, "wh"), spark=spark)
        try:
            yield s, os.path.join(mnt, "wh", "default", "t"), filler
        finally:
            filler.release()
            s.close()


BASE = 2  # the version _create leaves


def _create(s, props: str, table: str = "t", interval: int | None = None) -> None:
    """``table`` at version BASE holding START in one file (OPTIMIZE), so that a DELETE or UPDATE
    of one row leaves a deletion vector rather than emptying a file."""
    if interval is not None:
        props = props[:-1] + f", 'delta.checkpointInterval' = '{interval}')"
    s.execute(f"CREATE TABLE {table} (id BIGINT, v STRING) {props}")
    s.execute(f"INSERT INTO {table} VALUES " + ", ".join(f"({i}, '{v}')" for i, v in START))
    s.execute(f"OPTIMIZE {table}")
    log = DeltaLog(os.path.join(s.warehouse, "default", table))
    if log.update().version == BASE - 1:
        # the VALUES list was written on the driver as one file already (driver_write): nothing
        # to compact, so a property commit takes the table to version BASE instead
        s.execute(f"ALTER TABLE {table} SET TBLPROPERTIES ('isolde.test.base' = 'true')")
    snap = log.update()
    assert (snap.version, snap.num_files) == (BASE, 1)


#: 40,000 rows of 64 hex digits: ~2.6 MB to write, more than the 1 MiB left free
BIG = ("INSERT INTO {t} SELECT id, sha2(CAST(id AS STRING), 256) FROM range(100, 40100)",
       START + [(i, hashlib.sha256(str(i).encode()).hexdigest()) for i in range(100, 40100)])


@SPARK
@pytest.mark.parametrize("statement, rows, leave", [(*INSERT, 0), (*UPDATE, 0), (*MERGE, 0), (*BIG, 1 << 20)],
                         ids=["insert", "update", "merge", "insert-fills-the-disk-midway"])
def test_disk_full_while_writing_data_files(disk, statement, rows, leave, counts):
    s, path, filler = disk
    statement = statement.format(t="t")
    _create(s, NO_DV)
    filler.fill(leave)
    with pytest.raises(E.IsoldeError) as caught:
        s.execute(statement)
    counts[f"errors: {type(caught.value).__name__} (disk full, data)"] += 1
    assert isinstance(caught.value, E.ExecutionError)
    assert_intact(s, path, BASE, START)
    filler.release()
    assert s.execute(statement).version == BASE + 1
    assert_intact(s, path, BASE + 1, rows)
    assert_vacuum_leaves_only_the_table(s, path, rows)
    message = str(caught.value)  # Spark's TASK_WRITE_FAILED, with the I/O error under it named
    assert "No space left on device" in message and "[ENOSPC]" in message, message
    assert caught.value.error_class == "DISK_FULL"


@SPARK
@pytest.mark.parametrize("statement, rows", [DELETE, UPDATE], ids=["delete", "update"])
def test_disk_full_while_writing_a_deletion_vector(disk, statement, rows, counts):
    s, path, filler = disk
    statement = statement.format(t="t")
    _create(s, DV)
    filler.fill(leave=0)
    with pytest.raises(E.IsoldeError) as caught:
        s.execute(statement)
    counts[f"errors: {type(caught.value).__name__} (disk full, deletion vector)"] += 1
    assert_storage_error(caught.value, errno.ENOSPC, "a deletion vector file")
    assert not os.path.exists(caught.value.filename)  # the partial file was removed
    assert_intact(s, path, BASE, START)
    filler.release()
    assert s.execute(statement).version == BASE + 1
    assert_intact(s, path, BASE + 1, rows)
    assert any(n.startswith("deletion_vector_") for n in os.listdir(path))  # the retry used a DV
    assert_vacuum_leaves_only_the_table(s, path, rows)


@SPARK
def test_disk_full_after_the_deletion_vector_before_the_data(disk, counts):
    """An UPDATE on a deletion-vector table writes the DV first (it fits in the pages left), then
    the updated rows (they do not): the table is unchanged, the orphan DV goes with VACUUM."""
    s, path, filler = disk
    s.execute(f"CREATE TABLE t (id BIGINT, v STRING) {DV}")
    s.execute("INSERT INTO t SELECT id, 'x' FROM range(40000)")
    s.execute("OPTIMIZE t")
    rows = [(i, "x") for i in range(40000)]
    statement = "UPDATE t SET v = sha2(CAST(id AS STRING), 256) WHERE id % 2 = 0"
    filler.fill(leave=4 * PAGE)  # the DV of 20,000 positions takes 2 pages, the new rows ~1 MB
    with pytest.raises(E.IsoldeError) as caught:
        s.execute(statement)
    counts[f"errors: {type(caught.value).__name__} (disk full, data after a deletion vector)"] += 1
    assert isinstance(caught.value, E.ExecutionError)
    assert getattr(caught.value, "what", None) != "a deletion vector file"  # the DV did fit
    assert_intact(s, path, BASE, rows)
    filler.release()
    assert s.execute(statement).version == BASE + 1
    updated = [(i, hashlib.sha256(str(i).encode()).hexdigest() if i % 2 == 0 else "x") for i in range(40000)]
    assert_intact(s, path, BASE + 1, updated)
    assert_vacuum_leaves_only_the_table(s, path, updated)


@SPARK
@pytest.mark.parametrize("props, statement, rows", [(NO_DV, *INSERT), (NO_DV, *UPDATE), (DV, *DELETE), (DV, *MERGE)],
                         ids=["insert", "update", "delete-dv", "merge-dv"])
def test_disk_full_while_writing_the_commit(disk, props, statement, rows, counts):
    """The data work is done (prepare), then the disk fills, then the commit JSON cannot be written."""
    s, path, filler = disk
    statement = statement.format(t="t")
    _create(s, props)
    prepared = s.prepare(statement)
    staged = [p for p in prepared.staged_paths if os.path.exists(p)]
    assert staged  # data files or a deletion vector were written
    filler.fill(leave=0)
    with pytest.raises(E.IsoldeError) as caught:
        prepared.commit()
    counts[f"errors: {type(caught.value).__name__} (disk full, commit)"] += 1
    assert_storage_error(caught.value, errno.ENOSPC, f"the commit file of version {BASE + 1}", f"{BASE + 1:020d}.json")
    assert f"Version {BASE + 1} was not committed" in str(caught.value)
    assert prepared.state == "failed"
    assert [p for p in staged if os.path.exists(p)] == []  # the failed write took its files away
    assert_intact(s, path, BASE, START)
    filler.release()
    assert s.execute(statement).version == BASE + 1
    assert_intact(s, path, BASE + 1, rows)
    assert_vacuum_leaves_only_the_table(s, path, rows)


@SPARK
def test_disk_full_while_writing_a_checkpoint(disk, caplog, counts):
    """Version 4 is a checkpoint version: its commit fits in the two free pages, its checkpoint
    does not. The commit stands (a checkpoint is optional), the failure is logged naming ENOSPC,
    no half checkpoint exists and _last_checkpoint still names version 2; once there is space,
    checkpoints are written again."""
    s, path, filler = disk
    _create(s, DV, interval=2)  # version 2 (OPTIMIZE) is a checkpoint
    s.execute("INSERT INTO t VALUES (5, 'e')")  # version 3
    rows = START + [(5, "e"), (6, "f")]
    log = os.path.join(path, "_delta_log")
    with open(os.path.join(log, "_last_checkpoint"), "rb") as fh:
        pointer = fh.read()
    prepared = s.prepare("INSERT INTO t VALUES (6, 'f')")
    filler.fill(leave=2 * PAGE)
    with caplog.at_level(logging.WARNING, logger="isolde"):
        assert prepared.commit().version == 4
    counts["errors: StorageError (disk full, checkpoint; commit stood)"] += 1
    failures = [r for r in caplog.records if "checkpoint at version 4" in r.getMessage()]
    assert len(failures) == 1 and isinstance(failures[0].exc_info[1], StorageError)
    assert_storage_error(failures[0].exc_info[1], errno.ENOSPC, "the checkpoint of version 4")
    assert not os.path.exists(os.path.join(log, f"{4:020d}.checkpoint.parquet"))
    with open(os.path.join(log, "_last_checkpoint"), "rb") as fh:
        assert fh.read() == pointer
    assert_intact(s, path, 4, rows)
    filler.release()
    s.execute("DELETE FROM t WHERE id = 6")  # version 5
    s.execute("INSERT INTO t VALUES (6, 'f')")  # version 6: a checkpoint again
    assert DeltaLog(path).update().version == 6
    assert_intact(s, path, 6, rows)
    checkpoint = os.path.join(log, f"{6:020d}.checkpoint.parquet")
    assert os.path.getsize(checkpoint) > 2 * PAGE  # so it really could not fit at version 4
    with open(os.path.join(log, "_last_checkpoint")) as fh:
        assert json.load(fh)["version"] == 6
    assert_vacuum_leaves_only_the_table(s, path, rows)


# --------------------------------------------------------------------------- permission errors

#: name, table properties, statement, rows after it, the folders nobody gets (mode), the error
PERMISSION_CASES = [
    ("data-insert", NO_DV, *INSERT, {"": 0o755}, "data"),
    ("data-update", NO_DV, *UPDATE, {"": 0o755}, "data"),
    ("data-merge", NO_DV, *MERGE, {"": 0o755}, "data"),
    ("dv-delete", DV, *DELETE, {"": 0o755}, "dv"),
    ("dv-update", DV, *UPDATE, {"": 0o755}, "dv"),
    ("commit-insert", NO_DV, *INSERT, {"": 0o777, "_delta_log": 0o755}, "commit"),
    ("commit-delete-dv", DV, *DELETE, {"": 0o777, "_delta_log": 0o755}, "commit"),
    # a shared, sticky log folder: nobody may add files but not replace root's _last_checkpoint
    ("checkpoint-insert", NO_DV, *INSERT, {"": 0o777, "_delta_log": 0o1777}, "checkpoint"),
]
CHECKPOINT_INTERVAL = 3  # the checkpoint case: root commits 1..5 (checkpoint 3), nobody commits 6
NOTE = "ALTER TABLE {t} SET TBLPROPERTIES ('owner.note' = 'x')"


@pytest.fixture(scope="module")
def unprivileged_run(spark):
    """Every permission case's table, prepared by root, and what nobody's statements did to them
    (one child process for all of them). Yields (warehouse, {case name: child result},
    {case name: version before the child}, root's session)."""
    problem = unprivileged_problem()
    if problem:
        pytest.skip(problem)
    base = tempfile.mkdtemp(prefix="isolde-perm-")  # not under pytest's tmp (root-only folders)
    try:
        os.chmod(base, 0o755)
        home = os.path.join(base, "home")
        os.mkdir(home)
        os.chmod(home, 0o777)
        warehouse = os.path.join(base, "wh")
        s = isolde.connect(warehouse=warehouse, spark=spark)
        steps = []
        for name, props, statement, _, modes, kind in PERMISSION_CASES:
            table = name.replace("-", "_")
            _create(s, props, table, CHECKPOINT_INTERVAL if kind == "checkpoint" else None)
            if kind == "checkpoint":  # versions 3..5, the checkpoint at 3 (root's _last_checkpoint)
                for sql in ("INSERT INTO {t} VALUES (10, 'x')", "DELETE FROM {t} WHERE id = 10", NOTE):
                    s.execute(sql.format(t=table))
            steps.append({"warehouse": warehouse, "sql": statement.format(t=table)})
        for folder, dirs, files in os.walk(warehouse):  # readable by all, writable by root only
            os.chmod(folder, 0o755)
            for f in files:
                os.chmod(os.path.join(folder, f), 0o644)
        for name, _, _, _, modes, _ in PERMISSION_CASES:
            path = os.path.join(warehouse, "default", name.replace("-", "_"))
            for sub, mode in modes.items():
                os.chmod(os.path.join(path, sub) if sub else path, mode)
        before = {name: DeltaLog(os.path.join(warehouse, "default", name.replace("-", "_"))).update().version
                  for name, *_ in PERMISSION_CASES}
        results = run_unprivileged(steps, home)
        yield warehouse, dict(zip((c[0] for c in PERMISSION_CASES), results)), before, s
        s.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@SPARK
@pytest.mark.slow
@pytest.mark.parametrize("name, props, statement, rows, modes, kind", PERMISSION_CASES,
                         ids=[c[0] for c in PERMISSION_CASES])
def test_permission_denied(unprivileged_run, name, props, statement, rows, modes, kind, counts):
    warehouse, results, before, s = unprivileged_run
    table = name.replace("-", "_")
    path = os.path.join(warehouse, "default", table)
    result = results[name]
    version = before[name]
    assert result["uid"] != 0
    if kind == "checkpoint":
        start = sorted(START)
        assert result["ok"] and result["version"] == version + 1, result
        counts["errors: StorageError (permission, checkpoint; commit stood)"] += 1
        log = os.path.join(path, "_delta_log")
        [warning] = [w for w in result["warnings"] if f"checkpoint at version {version + 1}" in w]
        assert "StorageError" in warning and "_last_checkpoint" in warning and "[EPERM]" in warning
        with open(os.path.join(log, "_last_checkpoint")) as fh:
            assert json.load(fh)["version"] == CHECKPOINT_INTERVAL  # root's pointer, untouched
        ckpt = os.path.join(log, f"{version + 1:020d}.checkpoint.parquet")
        assert os.stat(ckpt).st_uid != 0  # nobody's complete checkpoint (written before the pointer)
        assert_intact(s, path, version + 1, start + [(4, "d")])
        os.chmod(log, 0o755)
        s.execute(f"INSERT INTO {table} VALUES (20, 'y')")
        assert_intact(s, path, version + 2, start + [(4, "d"), (20, "y")])
        DeltaLog(path).checkpoint()  # root can move the pointer on again
        with open(os.path.join(log, "_last_checkpoint")) as fh:
            assert json.load(fh)["version"] == version + 2
        assert_intact(s, path, version + 2, start + [(4, "d"), (20, "y")])
        return
    assert not result["ok"] and result["isolde"], result
    counts[f"errors: {result['type']} (permission, {kind})"] += 1
    assert_intact(s, path, version, START)
    if kind == "dv":
        assert result["type"] == "StorageError" and result["errno"] == errno.EACCES, result
        assert result["error_class"] == "INSUFFICIENT_PERMISSIONS" and result["sqlstate"] == "42501"
        assert "a deletion vector file" in result["message"] and "[EACCES]" in result["message"]
        assert os.path.dirname(result["filename"]) == path and not os.path.exists(result["filename"])
    elif kind == "commit":
        assert result["type"] == "StorageError" and result["errno"] == errno.EACCES, result
        assert os.path.basename(result["filename"]) == f"{version + 1:020d}.json"
        assert f"the commit file of version {version + 1}" in result["message"]
        assert f"Version {version + 1} was not committed" in result["message"]
    # root (privileged) is the next writer, on the same folders
    for folder, _, _ in os.walk(path):
        os.chmod(folder, stat.S_IMODE(os.stat(folder).st_mode) & ~stat.S_ISVTX)
    assert s.execute(statement.format(t=table)).version == version + 1
    assert_intact(s, path, version + 1, rows)
    assert_vacuum_leaves_only_the_table(s, path, rows)
    if kind == "data":  # refused before Spark runs: the staging folder cannot be made
        assert "Permission denied" in result["message"] and "staging folder" in result["message"], result


@SPARK
def test_disk_full_while_creating_a_table(disk, counts):
    """CREATE TABLE's commit (version 0) does not fit: a clear error, no table, and once there is
    space the same CREATE TABLE succeeds."""
    s, path, filler = disk
    s.execute("CREATE DATABASE IF NOT EXISTS default")
    filler.fill(leave=0)
    with pytest.raises(E.IsoldeError) as caught:
        s.execute("CREATE TABLE t (id BIGINT, v STRING)")
    counts["errors: StorageError (disk full, CREATE TABLE)"] += 1
    assert_storage_error(caught.value, errno.ENOSPC, "the commit file of version 0", f"{0:020d}.json")
    assert DeltaLog(path).update().version == -1
    assert not [n for n in os.listdir(os.path.join(path, "_delta_log")) if not n.startswith(".")]
    filler.release()
    assert s.execute("CREATE TABLE t (id BIGINT, v STRING)").version == 0  # the empty log folder is no obstacle
    s.execute("INSERT INTO t VALUES (1, 'a')")
    assert_intact(s, path, 1, [(1, "a")])


# --------------------------------------------------------------------------- the log store alone (no Spark)


@pytest.fixture
def small_disk(tmp_path):
    """(mount, filler) on a 1 MiB tmpfs."""
    with tmpfs(str(tmp_path / "mnt"), size="1m") as mnt:
        filler = Filler(mnt)
        try:
            yield mnt, filler
        finally:
            filler.release()


@pytest.mark.parametrize("leave, size", [(0, 10), (PAGE, 3 * PAGE)], ids=["no-page-free", "one-page-free"])
def test_store_commit_on_a_full_disk(small_disk, leave, size):
    """put_if_absent: a StorageError naming the version, no commit file and no temporary file;
    the same commit succeeds once there is space, and the race signal (FileExistsError) stays."""
    mnt, filler = small_disk
    log = os.path.join(mnt, "t", "_delta_log")
    os.makedirs(log)
    target = os.path.join(log, f"{7:020d}.json")
    store = LocalLogStore()
    filler.fill(leave)
    with pytest.raises(StorageError) as caught:
        store.put_if_absent(target, b"x" * size)
    assert_storage_error(caught.value, errno.ENOSPC, "the commit file of version 7", f"{7:020d}.json")
    assert os.listdir(log) == []
    filler.release()
    store.put_if_absent(target, b"x" * size)
    with open(target, "rb") as fh:
        assert fh.read() == b"x" * size
    with pytest.raises(FileExistsError):
        store.put_if_absent(target, b"y")


def test_store_replace_on_a_full_disk_keeps_the_old_file(small_disk):
    """write (a checkpoint, _last_checkpoint): the old body stays whole, nothing else is left."""
    mnt, filler = small_disk
    log = os.path.join(mnt, "t", "_delta_log")
    os.makedirs(log)
    pointer = os.path.join(log, "_last_checkpoint")
    store = LocalLogStore()
    store.write(pointer, b'{"version": 10, "size": 3}')
    filler.fill(0)
    with pytest.raises(StorageError) as caught:
        store.write(pointer, b'{"version": 20, "size": 3}' + b" " * PAGE)
    assert_storage_error(caught.value, errno.ENOSPC, "the _last_checkpoint pointer", "_last_checkpoint")
    with open(pointer, "rb") as fh:
        assert fh.read() == b'{"version": 10, "size": 3}'
    assert os.listdir(log) == ["_last_checkpoint"]


def test_deletion_vector_file_on_a_full_disk(small_disk):
    """A DV file that does not fit: StorageError naming it, and no partial file left behind."""
    from pyroaring import BitMap64

    mnt, filler = small_disk
    table = os.path.join(mnt, "t")
    os.makedirs(table)
    rows = BitMap64(range(0, 2_000_000, 3))  # ~250 KB of bitmap containers
    filler.fill(PAGE)
    with pytest.raises(StorageError) as caught:
        write_deletion_vectors(table, {"part-0.parquet": rows})
    assert_storage_error(caught.value, errno.ENOSPC, "a deletion vector file")
    assert "the table" in str(caught.value) and "unchanged" in str(caught.value)
    assert os.listdir(table) == []
    filler.release()
    written = write_deletion_vectors(table, {"part-0.parquet": rows})
    assert read_deletion_vector(table, written["part-0.parquet"]) == rows


@pytest.fixture
def shared_folder():
    """A folder root owns under /tmp that nobody can reach (pytest's tmp_path is root-only)."""
    problem = unprivileged_problem()
    if problem:
        pytest.skip(problem)
    base = tempfile.mkdtemp(prefix="isolde-perm-")
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _store_case(kind: str, table: str):
    """What nobody tries in ``table`` (root's, read-only where it matters), by case (in a forked
    child: everything it uses is imported already)."""
    log = os.path.join(table, "_delta_log")
    store = LocalLogStore()
    if kind == "commit":
        return store.put_if_absent(os.path.join(log, f"{3:020d}.json"), b"{}")
    if kind == "checkpoint":
        return store.write(os.path.join(log, f"{3:020d}.checkpoint.parquet"), b"PAR1")
    if kind == "pointer":
        return store.write(os.path.join(log, "_last_checkpoint"), b'{"version": 3}')
    if kind == "log-folder":
        return store.mkdirs(os.path.join(table, "new", "_delta_log"))
    return write_deletion_vectors(table, {"part-0.parquet": [1, 2, 3]})


#: case, mode of the table folder, mode of its log, errno, what the message names
STORE_PERMISSION_CASES = [
    ("commit", 0o755, 0o755, errno.EACCES, "the commit file of version 3"),
    ("checkpoint", 0o755, 0o755, errno.EACCES, "the checkpoint of version 3"),
    ("pointer", 0o777, 0o1777, errno.EPERM, "the _last_checkpoint pointer"),  # sticky: root's file stays root's
    ("log-folder", 0o755, 0o755, errno.EACCES, "the log folder"),
    ("deletion-vector", 0o755, 0o777, errno.EACCES, "a deletion vector file"),
]


@pytest.mark.parametrize("kind, table_mode, log_mode, code, what", STORE_PERMISSION_CASES,
                         ids=[c[0] for c in STORE_PERMISSION_CASES])
def test_store_permission_denied(shared_folder, kind, table_mode, log_mode, code, what):
    table = os.path.join(shared_folder, "t")
    log = os.path.join(table, "_delta_log")
    os.makedirs(log)
    with open(os.path.join(log, "_last_checkpoint"), "wb") as fh:
        fh.write(b'{"version": 0}')
    before = table_files(table)
    os.chmod(table, table_mode)
    os.chmod(log, log_mode)
    with pytest.raises(StorageError) as caught:
        as_unprivileged(_store_case, kind, table)
    assert_storage_error(caught.value, code, what)
    assert "user nobody" in str(caught.value)
    assert table_files(table) == before  # nothing half-written, no temporary file
    with open(os.path.join(log, "_last_checkpoint"), "rb") as fh:
        assert fh.read() == b'{"version": 0}'
    _store_case(kind, table)  # root, the next writer, succeeds
