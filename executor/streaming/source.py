"""``spark.readStream.format("isolde")``: a Delta table read version by version.

A Python Data Source (pyspark.sql.datasource) so that no Delta JAR is needed. The driver side
(``IsoldeStreamReader``) plans batches from the log with ``plan.StreamPlan``; each task reads
its files with pyarrow (``arrow_files.read_file``) and yields Arrow record batches.

Options: ``path`` (or ``load(path)``), or ``table`` with ``warehouse`` (and ``database``);
``startingVersion`` (a number or ``latest``), ``startingTimestamp``, ``maxFilesPerTrigger``
(default 1000, as Delta), ``maxBytesPerTrigger``, ``skipChangeCommits``, ``ignoreDeletes``.
``Trigger.AvailableNow`` reads up to the version that was the latest when the query started.
"""

from __future__ import annotations

import json
from typing import Iterator

from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from isolde.errors import AnalysisError
from ..log import DeltaLog, table_files
from .arrow_files import columns_of, read_file
from .plan import (
    Offset,
    StreamOptions,
    StreamPlan,
    metadata_changed_error,
)

FORMAT = "isolde"
# a task reads at most this many files / bytes (whole files): small batches stay one task
TASK_MAX_FILES = 32
TASK_MAX_BYTES = 128 << 20


def _plain(dt: T.DataType) -> T.DataType:
    """``dt`` nullable all the way down and without field metadata: what a stream yields."""
    if isinstance(dt, T.StructType):
        return T.StructType([T.StructField(f.name, _plain(f.dataType), True) for f in dt.fields])
    if isinstance(dt, T.ArrayType):
        return T.ArrayType(_plain(dt.elementType), True)
    if isinstance(dt, T.MapType):
        return T.MapType(_plain(dt.keyType), _plain(dt.valueType), True)
    return dt


def stream_schema(metadata) -> T.StructType:
    """The schema a stream over a table with this metadata has (logical names, all nullable)."""
    return _plain(T.StructType.fromJson(json.loads(metadata.schema_string)))


def table_path_from_options(options) -> str:
    opts = {str(k).lower(): v for k, v in dict(options).items()}
    if opts.get("path"):
        return opts["path"]
    if opts.get("table"):
        from ..catalog.warehouse import Catalog
        from ..session.session import _ref_from_name

        warehouse = opts.get("warehouse", "./warehouse")
        return Catalog(warehouse).resolve(_ref_from_name(opts["table"]), opts.get("database", "default")).path
    raise AnalysisError("A stream with format 'isolde' needs the table: load(path), option('path', ...) or "
                        "option('table', name) with option('warehouse', folder).",
                        error_class="DELTA_TABLE_NOT_FOUND", sqlstate="42P01")


class FilesPartition(InputPartition):
    """The files one task reads (AddFile JSON) and where the table lives."""

    def __init__(self, table_path: str, adds: list[dict]):
        super().__init__(adds)
        self.table_path = table_path
        self.adds = adds


class IsoldeDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _log(self) -> DeltaLog:
        table_files.adopt_aws_options(self.options)
        return DeltaLog.for_table(table_path_from_options(self.options))

    def schema(self) -> T.StructType:
        snap = self._log().update()
        if snap.version < 0:
            raise AnalysisError(f"`{snap.table_path}` is not a Delta table.", error_class="DELTA_TABLE_NOT_FOUND",
                                sqlstate="42P01")
        return stream_schema(snap.metadata)

    def streamReader(self, schema: T.StructType) -> "IsoldeStreamReader":
        log = self._log()
        return IsoldeStreamReader(log, dict(self.options), schema)


class IsoldeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, log: DeltaLog, options: dict, schema: T.StructType):
        self.aws = {k: v for k, v in options.items() if str(k).lower().startswith(table_files.AWS_OPTION_PREFIX)}
        self.options = StreamOptions.parse(table_files.adopt_aws_options(options))
        self.plan = StreamPlan.at_latest(log, self.options)
        snap = log.snapshot(self.plan.read_version)
        if stream_schema(snap.metadata) != _plain(schema):  # changed between load() and start()
            raise metadata_changed_error(log.table_path, snap.version, ["schema"])
        self.schema = _plain(schema)
        self.columns = columns_of(json.loads(snap.metadata.schema_string), snap.metadata.partition_columns,
                                  snap.metadata.configuration)
        self.until_version = None
        self.table_id = snap.metadata.id  # every offset carries it: a checkpoint is one table's

    def _out(self, offset: Offset) -> dict:
        return {**offset.to_dict(), "reservoirId": self.table_id}

    def _in(self, d: dict) -> Offset:
        """An offset from the checkpoint; one written for another table (its id) is refused, as
        Delta refuses it: its versions mean nothing here."""
        theirs = d.get("reservoirId")
        if theirs is not None and theirs != self.table_id:
            raise AnalysisError(
                f"The streaming query was reading from an unexpected Delta table (id = '{self.table_id}', "
                f"{self.plan.table_path}). According to the checkpoint it used to read from another Delta table "
                f"(id = '{theirs}'). This happens when the query now reads a new table, or the table was deleted "
                "and re-created. Revert the change, or delete the query's checkpoint to start from scratch.",
                error_class="DIFFERENT_DELTA_TABLE_READ_BY_STREAMING_SOURCE", sqlstate="55019")
        return Offset.from_dict(d)

    def __getstate__(self) -> dict:
        """Tasks get what ``read`` needs: the log (and its lock) stays on the driver."""
        return {"schema": self.schema, "columns": self.columns, "aws": self.aws}

    # ------------------------------------------------------------------ offsets
    def initialOffset(self) -> dict:
        return self._out(self.plan.initial_offset())

    def getDefaultReadLimit(self):
        if self.options.max_files is not None:
            return ReadMaxFiles(self.options.max_files)
        if self.options.max_bytes is not None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadMaxFiles(self.options.file_limit())

    def prepareForTriggerAvailableNow(self) -> None:
        self.until_version = self.plan.latest_version()

    def latestOffset(self, start: dict, limit=None) -> dict:
        start_offset = self._in(start)
        max_files = max_bytes = None
        if limit is not None and not isinstance(limit, ReadAllAvailable):
            max_files = self.options.file_limit()
            max_bytes = self.options.max_bytes
            if isinstance(limit, ReadMaxFiles):
                max_files = limit.max_files
            elif isinstance(limit, ReadMaxBytes):
                max_bytes = limit.max_bytes
        end = self.plan.next_offset(start_offset, max_files=max_files, max_bytes=max_bytes,
                                    until_version=self.until_version)
        return self._out(end)

    def reportLatestOffset(self):
        return self._out(Offset(self.plan.latest_version() + 1))

    # ------------------------------------------------------------------ data
    def partitions(self, start: dict, end: dict) -> list[FilesPartition]:
        entries = self.plan.batch(self._in(start), self._in(end))
        out: list[FilesPartition] = []
        group: list[dict] = []
        size = 0
        for e in entries:
            if group and (len(group) >= TASK_MAX_FILES or size >= TASK_MAX_BYTES):
                out.append(FilesPartition(self.plan.table_path, group))
                group, size = [], 0
            group.append(e.add.to_dict())
            size += e.add.size or 0
        if group:
            out.append(FilesPartition(self.plan.table_path, group))
        return out

    def read(self, partition: FilesPartition) -> Iterator:
        from pyspark.sql.pandas.types import to_arrow_schema

        table_files.adopt_aws_options(self.aws)

        from ..log.actions import AddFile

        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        for d in partition.adds:
            table = read_file(partition.table_path, AddFile.from_dict(d), self.columns, arrow_schema)
            yield from table.to_batches()

    def commit(self, end: dict) -> None:
        """Nothing to release: offsets are table versions, and the log keeps them (Spark's
        checkpoint records how far the query got)."""


_REGISTERED: "set[int]" = set()


def register(spark) -> None:
    """Make ``format("isolde")`` known to ``spark`` (once per SparkSession)."""
    key = id(spark)
    if key in _REGISTERED:
        return
    spark.dataSource.register(IsoldeDataSource)
    _REGISTERED.add(key)
