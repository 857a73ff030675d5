"""Structured Streaming on isolde tables: the ``isolde`` streaming source (version by version,
Delta's refusals) and the exactly-once ``foreachBatch`` sink (txn actions), end to end.

Every stream here is a real Spark query over real tables; rows are compared exactly."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import isolde
from isolde import errors as E
from isolde.executor import streaming
from isolde.executor.log import DeltaLog
from isolde.executor.streaming import StreamChangeCommitError, StreamMetadataChangedError

pytestmark = pytest.mark.spark


# --------------------------------------------------------------------------- helpers


def _rows(session, sql: str) -> list[tuple]:
    return [tuple(r) for r in session.execute(sql).collect()]


def _copy(session, source: str, target: str, ckpt: str, *, available_now: bool = True, **options):
    """A started query streaming ``source`` into ``target`` through ``write_batches``."""
    df = streaming.read_stream(session, source, **options)
    writer = streaming.write_batches(session, target, checkpoint=ckpt)
    w = df.writeStream.foreachBatch(writer).option("checkpointLocation", ckpt)
    if available_now:
        w = w.trigger(availableNow=True)
    else:
        w = w.trigger(processingTime="200 milliseconds")
    query = w.start()
    query.writer = writer  # what the sink committed / skipped, for the assertions
    return query


class Collector:
    """A foreachBatch function that keeps each batch's rows (sorted) by batch id."""

    def __init__(self):
        self.batches: dict[int, list[tuple]] = {}

    def __call__(self, df, batch_id):
        self.batches[batch_id] = sorted(tuple(r) for r in df.collect())

    @property
    def rows(self) -> list[tuple]:
        return sorted(r for b in self.batches.values() for r in b)


def _collect(session, source: str, ckpt: str, **options) -> Collector:
    """Run an availableNow query over ``source`` to its end; returns what each batch held."""
    sink = Collector()
    df = streaming.read_stream(session, source, **options)
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start())
    streaming.await_termination(query, 120)
    return sink


# --------------------------------------------------------------------------- the source


def test_snapshot_then_commits_with_deletion_vectors_mapping_and_partitions(session, tmp_path, table_path):
    session.execute("CREATE TABLE src (id BIGINT, name STRING, day DATE) PARTITIONED BY (day) "
                    "TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.enableDeletionVectors' = 'true')")
    session.execute("INSERT INTO src VALUES (1, 'a', DATE'2024-01-01'), (2, 'b', DATE'2024-01-01'), "
                    "(3, 'c', DATE'2024-01-02')")
    session.execute("DELETE FROM src WHERE id = 2")  # a deletion vector on the first file
    ckpt = str(tmp_path / "ckpt")
    first = _collect(session, "src", ckpt)
    d1, d2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    assert first.rows == [(1, "a", d1), (3, "c", d2)]  # the initial snapshot, DV applied
    session.execute("INSERT INTO src VALUES (4, 'd', DATE'2024-01-02')")
    session.execute("INSERT INTO src VALUES (5, 'e', NULL)")
    second = _collect(session, "src", ckpt)
    assert second.rows == [(4, "d", d2), (5, "e", None)]
    streaming.register(session.spark)  # the plain Spark spellings: by path, or table + warehouse
    by_path = session.spark.readStream.format("isolde").load(table_path(session, "src"))
    by_name = (session.spark.readStream.format("isolde").option("table", "src")
               .option("warehouse", session.warehouse).load())
    assert by_path.isStreaming and by_path.columns == by_name.columns == ["id", "name", "day"]


def test_starting_version_and_max_files_per_trigger(session, tmp_path):
    session.execute("CREATE TABLE src (id BIGINT)")
    for i in range(1, 6):  # versions 1..5, a file each
        session.execute(f"INSERT INTO src VALUES ({i})")
    sink = _collect(session, "src", str(tmp_path / "c1"), startingVersion=3, maxFilesPerTrigger=2)
    assert list(sink.batches.values()) == [[(3,), (4,)], [(5,)]]
    sink = _collect(session, "src", str(tmp_path / "c2"), startingVersion="latest")
    assert sink.rows == []
    sink = _collect(session, "src", str(tmp_path / "c3"), maxBytesPerTrigger="1b")
    assert list(sink.batches.values()) == [[(1,)], [(2,)], [(3,)], [(4,)], [(5,)]]


def test_a_checkpoint_of_another_table_is_refused(session, tmp_path):
    """Offsets carry the table id: a re-created table (or a query pointed at another table) with
    an old checkpoint fails with Delta's error instead of reading versions that mean nothing."""
    session.execute("CREATE TABLE src (id BIGINT)")
    session.execute("INSERT INTO src VALUES (1)")
    ckpt = str(tmp_path / "c")
    assert _collect(session, "src", ckpt).rows == [(1,)]
    offsets = os.path.join(ckpt, "offsets")
    assert all('"reservoirId"' in open(os.path.join(offsets, n)).read() for n in os.listdir(offsets)
               if n.isdigit())
    session.execute("DROP TABLE src")
    session.execute("CREATE TABLE src (id BIGINT)")
    session.execute("INSERT INTO src VALUES (2)")
    session.execute("INSERT INTO src VALUES (3)")
    with pytest.raises(Exception, match="DIFFERENT_DELTA_TABLE_READ_BY_STREAMING_SOURCE|unexpected Delta table"):
        _collect(session, "src", ckpt)


def test_starting_timestamp(session, tmp_path, table_path):
    session.execute("CREATE TABLE src (id BIGINT)")
    session.execute("INSERT INTO src VALUES (1)")
    time.sleep(0.05)
    session.execute("INSERT INTO src VALUES (2)")
    ts = DeltaLog.for_table(table_path(session, "src")).commit_timestamp(2)
    sink = _collect(session, "src", str(tmp_path / "c"), startingTimestamp=str(ts))
    assert sink.rows == [(2,)]


def test_update_fails_the_stream_in_deltas_words_and_skip_change_commits_passes(session, tmp_path, table_path):
    session.execute("CREATE TABLE src (id BIGINT, v STRING)")
    session.execute("CREATE TABLE dst (id BIGINT, v STRING)")
    session.execute("INSERT INTO src VALUES (1, 'a'), (2, 'b')")
    ckpt = str(tmp_path / "ckpt")
    streaming.await_termination(_copy(session, "src", "dst", ckpt), 120)
    session.execute("INSERT INTO src VALUES (3, 'c')")  # version 2: delivered before the failure
    session.execute("UPDATE src SET v = 'z' WHERE id = 1")  # version 3
    session.execute("INSERT INTO src VALUES (4, 'd')")
    query = _copy(session, "src", "dst", ckpt)
    with pytest.raises(StreamChangeCommitError) as e:
        streaming.await_termination(query, 120)
    assert e.value.error_class == "DELTA_SOURCE_TABLE_IGNORE_CHANGES"
    path = table_path(session, "src")
    assert e.value.message.startswith("Detected a data update (for example ")
    assert e.value.message.endswith(
        ") in the source table at version 3. This is currently not supported. If you'd like to ignore updates, "
        "set the option 'skipChangeCommits' to 'true'. If you would like the data update to be reflected, please "
        f"restart this query with a fresh checkpoint directory. The source table can be found at path {path}.")
    assert _rows(session, "SELECT * FROM dst ORDER BY id") == [(1, "a"), (2, "b"), (3, "c")]
    streaming.await_termination(_copy(session, "src", "dst", ckpt, skipChangeCommits=True), 120)
    assert _rows(session, "SELECT * FROM dst ORDER BY id") == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]


def test_optimize_on_the_source_is_skipped(session, tmp_path):
    session.execute("CREATE TABLE src (id BIGINT)")
    for i in range(3):
        session.execute(f"INSERT INTO src VALUES ({i})")
    ckpt = str(tmp_path / "ckpt")
    assert _collect(session, "src", ckpt).rows == [(0,), (1,), (2,)]
    assert session.execute("OPTIMIZE src").first() is not None
    session.execute("INSERT INTO src VALUES (3)")
    assert _collect(session, "src", ckpt).rows == [(3,)]


def test_add_columns_stops_the_stream_and_a_restart_reads_the_new_column(session, tmp_path, table_path):
    session.execute("CREATE TABLE src (id BIGINT)")
    session.execute("INSERT INTO src VALUES (1)")
    ckpt = str(tmp_path / "ckpt")
    sink = Collector()
    df = session.read_stream("src")  # the Session's spelling of streaming.read_stream
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt)
             .trigger(processingTime="100 milliseconds").start())
    query.processAllAvailable()
    session.execute("INSERT INTO src VALUES (2)")  # version 2
    query.processAllAvailable()
    session.execute("ALTER TABLE src ADD COLUMNS (extra INT)")  # version 3, while the query runs
    session.execute("INSERT INTO src VALUES (3, 30)")
    with pytest.raises(StreamMetadataChangedError) as e:
        streaming.await_termination(query, 120)
    assert e.value.error_class == "DELTA_SCHEMA_CHANGED_WITH_VERSION"
    assert e.value.message.startswith(
        f"Detected a metadata change (schema) in version 3 of the streaming source table at "
        f"path {table_path(session, 'src')}. The stream has delivered every change before version 3 and stopped. "
        "Please restart the query from the same checkpoint to continue with the new metadata.")
    assert sink.rows == [(1,), (2,)]  # everything before the change arrived
    again = _collect(session, "src", ckpt)  # the restart: same checkpoint, the new schema
    assert again.rows == [(3, 30)]
    assert streaming.read_stream(session, "src").columns == ["id", "extra"]


def _reader(path: str, **options):
    """The source's reader as Spark's Python planner worker makes it (one per query run)."""
    from isolde.executor.streaming.source import IsoldeDataSource

    source = IsoldeDataSource({"path": path, **{k: str(v) for k, v in options.items()}})
    return source.streamReader(source.schema())


def _read_ids(reader, start: dict, end: dict) -> list[int]:
    """What ``partitions(start, end)`` and the tasks' ``read`` deliver, as sorted ids."""
    import pyarrow as pa

    out = []
    for part in reader.partitions(start, end):
        batches = list(reader.read(part))
        if batches:
            out += pa.Table.from_batches(batches).column("id").to_pylist()
    return sorted(out)


def test_batch0_reads_the_snapshot_it_planned_although_spark_asks_initial_offset_twice(session, table_path):
    """Spark's MicroBatchExecution asks initialOffset() for batch 0's start when it plans the batch
    (latestOffset) and again when it runs it (partitions); commits land in between. And a restart
    that finds batch 0 in offsets/ but not in commits/ replays it from a new reader's
    initialOffset(). The reader's methods are called here in that order, commits made by hand."""
    session.execute("CREATE TABLE src (id BIGINT)")
    for k in range(3):  # the initial snapshot: 3 files, ids 0..29
        session.execute(f"INSERT INTO src SELECT id FROM range({k * 10}, {k * 10 + 10})")
    path = table_path(session, "src")
    reader = _reader(path, maxFilesPerTrigger=2)
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()  # planning batch 0
    end = reader.latestOffset(start, limit)
    session.execute("INSERT INTO src SELECT id FROM range(30, 40)")  # a writer between the two calls
    again = reader.initialOffset()  # running batch 0
    assert again == start
    assert sum(len(part.adds) for part in reader.partitions(again, end)) == 2  # maxFilesPerTrigger
    batch0 = _read_ids(reader, again, end)
    assert batch0 and set(batch0) < set(range(30))  # two files of the initial snapshot
    delivered, end0 = list(batch0), end
    while True:
        nxt = reader.latestOffset(end, limit)
        if nxt == end:
            break
        delivered += _read_ids(reader, end, nxt)
        end = nxt
    assert sorted(delivered) == list(range(40))
    # a restart replays batch 0 (its end recorded, not committed) from a later initial snapshot
    restarted = _reader(path, maxFilesPerTrigger=2)
    assert restarted.initialOffset()["reservoirVersion"] > start["reservoirVersion"]
    assert _read_ids(restarted, restarted.initialOffset(), end0) == batch0


# --------------------------------------------------------------------------- the sink


def test_replayed_batch_is_skipped(session, tmp_path):
    session.execute("CREATE TABLE dst (id BIGINT)")
    df = session.spark.createDataFrame([(1,), (2,)], "id BIGINT")
    writer = streaming.write_batches(session, "dst", app_id="app-1")
    writer(df, 0)
    writer(df, 0)  # Spark replays batch 0 after a crash: already in the table
    writer(df.limit(1), 1)
    assert writer.committed == [0, 1] and writer.skipped == [0]
    assert _rows(session, "SELECT id FROM dst ORDER BY id") == [(1,), (1,), (2,)]
    history = session.execute("DESCRIBE HISTORY dst").collect()
    assert [(h.operation, h.operationParameters.get("epochId")) for h in history[:2]] == [
        ("STREAMING UPDATE", "1"), ("STREAMING UPDATE", "0")]


def test_two_writers_with_one_app_id_conflict(session, table_path):
    session.execute("CREATE TABLE dst (id BIGINT)")
    a = streaming.prepare_batch(session, "dst", session.spark.createDataFrame([(1,)], "id BIGINT"), "shared", 0)
    b = streaming.prepare_batch(session, "dst", session.spark.createDataFrame([(2,)], "id BIGINT"), "shared", 0)
    a.commit()
    with pytest.raises(E.ConcurrentTransactionException) as e:
        b.commit()
    assert type(e.value) is E.ConcurrentTransactionException and "shared" in str(e.value)
    assert _rows(session, "SELECT id FROM dst") == [(1,)]
    assert not any(os.path.exists(p) for p in b.staged_paths)  # the loser's files are gone
    # another app id never conflicts
    other = streaming.prepare_batch(session, "dst", session.spark.createDataFrame([(3,)], "id BIGINT"), "other", 0)
    other.commit()
    assert _rows(session, "SELECT id FROM dst ORDER BY id") == [(1,), (3,)]


# --------------------------------------------------------------------------- end to end


def test_concurrent_writer_stop_restart_and_lost_commit_marker_deliver_each_row_once(session, spark, tmp_path,
                                                                                   table_path):
    session.execute("CREATE TABLE src (id BIGINT, grp INT)")
    session.execute("CREATE TABLE dst (id BIGINT, grp INT)")
    session.execute("INSERT INTO src SELECT id, CAST(id % 3 AS INT) FROM range(0, 20)")
    ckpt = str(tmp_path / "ckpt")
    feeder = isolde.connect(warehouse=session.warehouse, spark=spark)
    done = threading.Event()
    errors = []

    def write():
        try:
            for k in range(1, 13):
                feeder.execute(f"INSERT INTO src SELECT id, CAST(id % 3 AS INT) FROM range({k * 20}, {k * 20 + 20})")
                time.sleep(0.15)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            done.set()

    thread = threading.Thread(target=write)
    thread.start()
    first = _copy(session, "src", "dst", ckpt, available_now=False, maxFilesPerTrigger=2)
    deadline = time.monotonic() + 60
    while len(first.writer.committed) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    first.stop()
    assert len(first.writer.committed) >= 2
    # the state a crash between the sink's commit of its last batch and Spark's commit log leaves:
    # that batch planned (offsets) and in the table, not marked done (commits), nothing after it
    last = DeltaLog.for_table(table_path(session, "dst")).snapshot().transaction_version(first.writer.app_id)
    for log in ("commits", "offsets"):
        for name in os.listdir(os.path.join(ckpt, log)):
            if name.isdigit() and (int(name) > last or (log == "commits" and int(name) == last)):
                _forget(ckpt, log, int(name))
    second = _copy(session, "src", "dst", ckpt, available_now=False, maxFilesPerTrigger=2)
    done.wait(60)
    thread.join()
    assert errors == []
    second.processAllAvailable()
    second.stop()
    assert second.writer.skipped[:1] == [last]  # replayed, found in the table, skipped
    expected = [(i, i % 3) for i in range(0, 260)]
    assert _rows(session, "SELECT id, grp FROM dst ORDER BY id") == expected


def _forget(ckpt: str, log: str, batch: int) -> None:
    """Remove one entry of a checkpoint's metadata log (and its Hadoop checksum file)."""
    for name in (str(batch), f".{batch}.crc"):
        path = os.path.join(ckpt, log, name)
        if os.path.exists(path):
            os.remove(path)


_CRASHING_QUERY = r'''
import os, signal, sys
import isolde
from isolde.executor import streaming

warehouse, ckpt = sys.argv[1], sys.argv[2]
s = isolde.connect(warehouse=warehouse)
writer = streaming.write_batches(s, "dst", checkpoint=ckpt)

def batch(df, batch_id):
    writer(df, batch_id)
    if batch_id == 1:  # the table has batch 1, Spark's checkpoint never will: die now
        os.kill(os.getpid(), signal.SIGKILL)

df = streaming.read_stream(s, "src", maxFilesPerTrigger=1)
df.writeStream.foreachBatch(batch).option("checkpointLocation", ckpt).trigger(availableNow=True).start() \
    .awaitTermination()
'''


def test_killed_process_restarts_from_its_checkpoint_exactly_once(session, tmp_path):
    session.execute("CREATE TABLE src (id BIGINT)")
    session.execute("CREATE TABLE dst (id BIGINT)")
    for k in range(4):
        session.execute(f"INSERT INTO src SELECT id FROM range({k * 10}, {k * 10 + 10})")
    script = tmp_path / "crash.py"
    script.write_text(_CRASHING_QUERY)
    ckpt = str(tmp_path / "ckpt")
    env = dict(os.environ, ISOLDE_JVM="startup")
    proc = subprocess.run([sys.executable, str(script), session.warehouse, ckpt], env=env,
                          capture_output=True, timeout=180)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    history = session.execute("DESCRIBE HISTORY dst").collect()
    assert [h.operationParameters.get("epochId") for h in history if h.operation == "STREAMING UPDATE"] == ["1", "0"]
    assert not os.path.exists(os.path.join(ckpt, "commits", "1"))  # Spark never recorded batch 1
    query = _copy(session, "src", "dst", ckpt)  # batch 1 again (as planned), then the rest at once
    streaming.await_termination(query, 120)
    assert query.writer.skipped == [1] and query.writer.committed == [2]
    assert _rows(session, "SELECT id FROM dst ORDER BY id") == [(i,) for i in range(40)]
