"""Support for the metadata-command tests (test_meta_*.py, test_alter_*.py); no tests here.

* ``new_session(tmp_path)``: an isolde Session on the process's one SparkSession.
* ``make_table(path, rows, ...)``: a Delta table written straight through the log with
  pyarrow files (version 0 = metadata, version 1 = one file per batch), so tests need no
  Spark job to set up a table.
* ``append(path, rows)`` / ``delete_positions(path, add, positions)``: a commit adding a file,
  a commit putting a deletion vector on a file (no Spark).
* ``delta_rows(path, version)``: the rows as delta-rs (``deltalake``) reads them through its
  QueryBuilder (which applies deletion vectors); ``isolde_rows(session, ref)``: isolde's read.
"""

from __future__ import annotations

import os
import uuid
from typing import Iterable, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from tests.helpers.oracle import spark_type

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.int32()), ("s", pa.string())])


def fast_conf() -> dict:
    return {"spark.master": "local[2]"}


def new_session(tmp_path, **conf):
    import isolde

    settings = fast_conf()
    settings.update(conf)
    return isolde.connect(warehouse=str(tmp_path / "wh"), conf=settings)


def _write_file(path: str, rows: Sequence[dict], schema: pa.Schema, partition_by: Sequence[str]):
    from isolde.executor.log.actions import AddFile
    from isolde.executor.log.stats import file_stats

    key = tuple(rows[0].get(p) for p in partition_by)
    sub = "/".join(f"{p}={'__HIVE_DEFAULT_PARTITION__' if v is None else v}" for p, v in zip(partition_by, key))
    name = f"part-{uuid.uuid4().hex}.snappy.parquet"
    rel = f"{sub}/{name}" if sub else name
    local = os.path.join(path, rel)
    os.makedirs(os.path.dirname(local), exist_ok=True)
    data_schema = pa.schema([f for f in schema if f.name not in partition_by])
    table = pa.Table.from_pylist([{k: v for k, v in r.items() if k not in partition_by} for r in rows],
                                 schema=data_schema)
    pq.write_table(table, local, compression="snappy")
    _, stats = file_stats(local)
    st = os.stat(local)
    return AddFile(rel, {p: (None if v is None else str(v)) for p, v in zip(partition_by, key)}, st.st_size,
                   int(st.st_mtime * 1000), True, stats)


def make_table(path: str, batches: Iterable[Sequence[dict]] = (), *, schema: pa.Schema = SCHEMA,
               partition_by: Sequence[str] = (), properties: Optional[dict] = None, field_metadata=None):
    """Version 0: metadata (+protocol by the transaction); version 1: one file per batch/partition."""
    from pyspark.sql import types as T

    from isolde.executor.catalog import schema as S
    from isolde.executor.log.actions import Metadata
    from isolde.executor.log.delta_log import DeltaLog

    os.makedirs(path, exist_ok=True)
    field_metadata = field_metadata or {}
    struct = T.StructType([T.StructField(f.name, spark_type(f.type), True, field_metadata.get(f.name, {}))
                           for f in schema])
    config = {"delta.enableDeletionVectors": "true"}
    config.update(properties or {})
    metadata = Metadata(schema_string=S.struct_to_delta(struct), partition_columns=tuple(partition_by),
                        configuration=config)
    log = DeltaLog.for_table(path)
    log.start_transaction().commit([metadata], operation="CREATE TABLE")
    batches = [list(b) for b in batches]
    if batches:
        append_batches(path, batches, schema=schema, partition_by=partition_by)
    return log


def append_batches(path: str, batches, *, schema: pa.Schema = SCHEMA, partition_by: Sequence[str] = ()) -> int:
    from isolde.executor.log.delta_log import DeltaLog

    adds = []
    for batch in batches:
        groups: dict = {}
        for row in batch:
            groups.setdefault(tuple(row.get(p) for p in partition_by), []).append(row)
        for group in groups.values():
            adds.append(_write_file(path, group, schema, partition_by))
    txn = DeltaLog.for_table(path).start_transaction()
    return txn.commit(adds, operation="WRITE", operation_parameters={"mode": "Append"})


def append(path: str, rows: Sequence[dict], **kw) -> int:
    return append_batches(path, [rows], **kw)


def delete_positions(path: str, add, positions: Iterable[int]) -> int:
    """Commit a deletion vector on ``add`` (remove old (path, dv) + add with the new DV)."""
    import dataclasses

    from isolde.executor.log.deletion_vectors import write_deletion_vector
    from isolde.executor.log.delta_log import DeltaLog

    log = DeltaLog.for_table(path)
    dv = write_deletion_vector(path, list(positions))
    txn = log.start_transaction()
    txn.read_whole_table()
    new = dataclasses.replace(add, deletion_vector=dv, data_change=True)
    return txn.commit([add.remove(), new], operation="DELETE", operation_parameters={"predicate": "test"})


def _norm(v):
    return v


def sorted_rows(rows) -> list[tuple]:
    return sorted((tuple(r) for r in rows), key=lambda r: tuple((x is None, str(type(x)), x if x is not None else 0)
                                                               for x in r))


def delta_rows(path: str, version: Optional[int] = None, columns: Optional[Sequence[str]] = None) -> list[tuple]:
    """delta-rs's view of the table (QueryBuilder applies deletion vectors)."""
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(path, version=version)
    cols = ", ".join(f'"{c}"' for c in columns) if columns else "*"
    table = pa.table(QueryBuilder().register("t", dt).execute(f"SELECT {cols} FROM t").read_all())
    names = table.column_names
    return sorted_rows(tuple(r[n] for n in names) for r in table.to_pylist())


def isolde_rows(session, ref: str, columns: Optional[Sequence[str]] = None) -> list[tuple]:
    cols = ", ".join(f"`{c}`" for c in columns) if columns else "*"
    result = session.execute(f"SELECT {cols} FROM {ref}")
    return sorted_rows(result.rows)


def assert_same_rows(session, path: str, ref: Optional[str] = None, columns: Optional[Sequence[str]] = None,
                     expected: Optional[list] = None) -> list[tuple]:
    """isolde and delta-rs read the same rows (and, when given, the expected ones)."""
    ref = ref or f"delta.`{path}`"
    mine = isolde_rows(session, ref, columns)
    theirs = delta_rows(path, columns=columns)
    assert mine == theirs, f"isolde {mine} != delta-rs {theirs}"
    if expected is not None:
        assert mine == sorted_rows(expected), f"{mine} != expected {sorted_rows(expected)}"
    return mine


def version_of(path: str) -> int:
    from isolde.executor.log.delta_log import DeltaLog

    return DeltaLog.for_table(path).update().version


def snapshot(path: str, version: Optional[int] = None):
    from isolde.executor.log.delta_log import DeltaLog

    return DeltaLog.for_table(path).snapshot(version)


def age_files(path: str, seconds: float) -> None:
    """Make every file under ``path`` (but the log) look ``seconds`` old."""
    import time

    when = time.time() - seconds
    for root, dirs, files in os.walk(path):
        if "_delta_log" in root.split(os.sep):
            continue
        for name in files:
            os.utime(os.path.join(root, name), (when, when))
        if root != path:
            os.utime(root, (when, when))


class LogCtx:
    """A Spark-free stand-in for the runner context: catalog, conf, resolve (log-level tests)."""

    def __init__(self, warehouse: str, conf: Optional[dict] = None):
        from isolde.executor.catalog.warehouse import Catalog

        self.catalog = Catalog(warehouse)
        self.conf = dict(conf or {})
        self.current_database = "default"

    def resolve(self, ref, must_exist: bool = True, location: Optional[str] = None):
        return self.catalog.resolve(ref, self.current_database, must_exist=must_exist, location=location)

    def start_transaction(self, log):  # the real context's (it needs only ``conf.get``)
        from isolde.executor.session.context import ExecutionContext

        return ExecutionContext.start_transaction(self, log)

    @property
    def spark(self):  # pragma: no cover - log-level tests must not reach Spark
        raise AssertionError("this log-level test tried to use Spark")


def run_stmt(ctx, sql: str):
    """Parse one statement and run its runner; commit a PreparedWrite. Returns the result."""
    import isolde
    from isolde.executor.jobs import EXECUTORS, load_all
    from isolde.executor.session.results import PreparedWrite

    load_all()
    (stmt,) = isolde.parse(sql)
    out = EXECUTORS[type(stmt)](ctx, stmt)
    if isinstance(out, PreparedWrite):
        return out.commit()
    return out


def prepare_stmt(ctx, sql: str):
    import isolde
    from isolde.executor.jobs import EXECUTORS, load_all

    load_all()
    (stmt,) = isolde.parse(sql)
    return EXECUTORS[type(stmt)](ctx, stmt)


def rows_of(n: int, start: int = 0, s: str = "a") -> list[dict]:
    return [{"id": i, "x": i * 10, "s": s} for i in range(start, start + n)]


def as_tuples(rows: Sequence[dict], cols=("id", "x", "s")) -> list[tuple]:
    return sorted_rows(tuple(r[c] for c in cols) for r in rows)
