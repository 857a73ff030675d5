"""Delta UniForm (Iceberg): Delta (IcebergCompatV2, column mapping) -> Iceberg v2 metadata beside the log.

Pure Python: isolde's Delta log reader + pyiceberg 0.12 (its manifest / manifest-list / metadata
writers, its snapshot producers and its summaries). No hand-written Avro, no catalog service, no
pyspark. Design: docs/uniform-design.md. Uses pyiceberg internals (``_OverwriteFiles``,
``Transaction._apply``): pin ``pyiceberg>=0.12,<0.13``.

    convert_table(path) -> ConversionResult

writes <path>/metadata/v<N>.metadata.json (+ manifests, manifest lists, version-hint.text) so
that StaticTable.from_metadata(<path>/metadata/v<N>.metadata.json) reads exactly the Delta rows
of the Delta version recorded in the metadata's `delta-version` property.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import time
import urllib.parse
import uuid
from dataclasses import dataclass

from .actions import AddFile, Metadata, RemoveFile
from .delta_log import DeltaLog
from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile, ToOutputFile
from pyiceberg.table import CommitTableResponse, StaticTable, Table
from pyiceberg.table.metadata import TableMetadataV2
from pyiceberg.table.name_mapping import MappedField, NameMapping
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import AddSchemaUpdate, SetCurrentSchemaUpdate, update_table_metadata
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType, BooleanType, DateType, DecimalType, DoubleType, FloatType, IntegerType, ListType,
    LongType, MapType, NestedField, StringType, StructType, TimestampType, TimestamptzType,
)

DELTA_VERSION = "delta-version"          # the names Delta's IcebergConverter writes
DELTA_TIMESTAMP = "delta-timestamp"
BASE_DELTA_VERSION = "base-delta-version"
NAME_MAPPING = "schema.name-mapping.default"
CM_ID, CM_PHYS, CM_NESTED = "delta.columnMapping.id", "delta.columnMapping.physicalName", "delta.columnMapping.nested.ids"
MAX_COMMITS_TO_CONVERT = 100             # Delta: spark.databricks.delta.uniform.iceberg.maxCommitsToConvert

_PRIMITIVES = {
    "byte": IntegerType(), "short": IntegerType(), "integer": IntegerType(), "long": LongType(),
    "float": FloatType(), "double": DoubleType(), "string": StringType(), "binary": BinaryType(),
    "boolean": BooleanType(), "date": DateType(),
    "timestamp": TimestamptzType(),      # Delta TIMESTAMP = instant (UTC-adjusted)
    "timestamp_ntz": TimestampType(),    # Delta TIMESTAMP_NTZ = local date-time
}


# --------------------------------------------------------------------------- schema / spec


def _iceberg_type(t, field: dict, path: str):
    """Delta type JSON -> Iceberg type; nested ids from `delta.columnMapping.nested.ids`."""
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return _PRIMITIVES[t]
        if t.startswith("decimal("):
            p, s = t[len("decimal("):-1].split(",")
            return DecimalType(int(p), int(s))
        raise ValueError(f"IcebergCompatV2 does not allow Delta type {t!r}")
    nested = (field.get("metadata") or {}).get(CM_NESTED) or {}
    if t["type"] == "struct":
        return StructType(*[_iceberg_field(f) for f in t["fields"]])
    if t["type"] == "array":
        key = f"{path}.element"
        return ListType(element_id=int(nested[key]), element_type=_iceberg_type(t["elementType"], field, key),
                        element_required=not t["containsNull"])
    if t["type"] == "map":
        k, v = f"{path}.key", f"{path}.value"
        return MapType(key_id=int(nested[k]), key_type=_iceberg_type(t["keyType"], field, k),
                       value_id=int(nested[v]), value_type=_iceberg_type(t["valueType"], field, v),
                       value_required=not t["valueContainsNull"])
    raise ValueError(f"unsupported Delta type {t!r}")


def _iceberg_field(f: dict) -> NestedField:
    meta = f.get("metadata") or {}
    if CM_ID not in meta:
        raise ValueError(f"column {f['name']!r} has no delta.columnMapping.id (IcebergCompatV2 needs column mapping)")
    return NestedField(field_id=int(meta[CM_ID]), name=f["name"],
                       field_type=_iceberg_type(f["type"], f, meta.get(CM_PHYS, f["name"])),
                       required=not f.get("nullable", True))


def iceberg_schema(metadata: Metadata, schema_id: int = 0) -> Schema:
    return Schema(*[_iceberg_field(f) for f in metadata.schema["fields"]], schema_id=schema_id)


def partition_spec(schema: Schema, metadata: Metadata) -> PartitionSpec:
    # Delta's IcebergTransactionUtils.createPartitionSpec: identity per partition column, in order
    fields = [PartitionField(source_id=schema.find_field(c).field_id, field_id=1000 + i,
                             transform=IdentityTransform(), name=c)
              for i, c in enumerate(metadata.partition_columns)]
    return PartitionSpec(*fields, spec_id=0)


def name_mapping(metadata: Metadata) -> str:
    """Logical and physical names for each id: lets readers match files lacking field ids."""
    def mapped(f: dict) -> MappedField:
        meta = f.get("metadata") or {}
        names = list(dict.fromkeys([f["name"], meta.get(CM_PHYS, f["name"])]))
        sub = f["type"]["fields"] if isinstance(f["type"], dict) and f["type"]["type"] == "struct" else []
        return MappedField(field_id=int(meta[CM_ID]), names=names, fields=[mapped(s) for s in sub])
    return NameMapping([mapped(f) for f in metadata.schema["fields"]]).model_dump_json()


# --------------------------------------------------------------------------- values and stats


def _ts_micros(text: str, utc_default: bool = True) -> int:
    text = text.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    value = dt.datetime.fromisoformat(text.replace(" ", "T", 1))
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)  # NTZ / Delta partition values without zone
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _typed(itype, value, *, from_partition: bool, is_upper: bool = False):
    """A Delta stats / partition value as pyiceberg's internal representation (None = unusable)."""
    if value is None:
        return None
    if isinstance(itype, (IntegerType, LongType)):
        return int(value)
    if isinstance(itype, (FloatType, DoubleType)):
        v = float(value)
        return v if v == v and v not in (float("inf"), float("-inf")) or from_partition else None
    if isinstance(itype, StringType):
        return str(value)
    if isinstance(itype, BooleanType):
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if isinstance(itype, DecimalType):
        return decimal.Decimal(str(value)).quantize(decimal.Decimal(1).scaleb(-itype.scale))
    if isinstance(itype, DateType):
        return (dt.date.fromisoformat(str(value)) - dt.date(1970, 1, 1)).days
    if isinstance(itype, (TimestampType, TimestamptzType)):
        micros = _ts_micros(str(value))
        # Delta stats keep milliseconds (Spark truncates the max): widen the upper bound
        return micros + 999 if is_upper and not from_partition else micros
    if isinstance(itype, BinaryType):
        if from_partition:
            return str(value).encode("utf-8")  # Delta writes binary partition values as raw strings
        return None  # Delta keeps no binary min/max
    return None


def _physical_ids(metadata: Metadata) -> dict:
    """physical name path (tuple) -> (field id, iceberg type) for primitive leaves of structs."""
    out = {}
    schema = iceberg_schema(metadata)

    def walk(delta_fields, prefix):
        for f in delta_fields:
            meta = f.get("metadata") or {}
            key = prefix + (meta.get(CM_PHYS, f["name"]),)
            fid = int(meta[CM_ID])
            if isinstance(f["type"], dict) and f["type"]["type"] == "struct":
                walk(f["type"]["fields"], key)
            elif isinstance(f["type"], str) or f["type"]["type"] not in ("array", "map"):
                out[key] = (fid, schema.find_type(fid))
    walk(metadata.schema["fields"], ())
    return out


def _stats_maps(stats: dict, leaves: dict, top_level_ids: set):
    lower, upper, nulls = {}, {}, {}

    def flat(d, prefix=()):
        for k, v in (d or {}).items():
            if isinstance(v, dict):
                yield from flat(v, prefix + (k,))
            else:
                yield prefix + (k,), v

    for key, v in flat(stats.get("minValues")):
        if key in leaves and (t := _typed(leaves[key][1], v, from_partition=False)) is not None:
            lower[leaves[key][0]] = to_bytes(leaves[key][1], t)
    for key, v in flat(stats.get("maxValues")):
        if key in leaves and (t := _typed(leaves[key][1], v, from_partition=False, is_upper=True)) is not None:
            upper[leaves[key][0]] = to_bytes(leaves[key][1], t)
    for key, v in flat(stats.get("nullCount")):
        if key in leaves and isinstance(v, int):
            nulls[leaves[key][0]] = v
    n = int(stats["numRecords"])
    values = {fid: n for fid in top_level_ids}  # a top-level column has one value (maybe null) per row
    return lower, upper, nulls, values


# --------------------------------------------------------------------------- Delta file -> DataFile


@dataclass
class _Ctx:
    table_path: str
    metadata: Metadata
    schema: Schema
    spec: PartitionSpec
    leaves: dict
    top_ids: set
    phys_of: dict  # logical partition column -> physical name (partitionValues keys)


def _ctx(table_path: str, metadata: Metadata) -> _Ctx:
    schema = iceberg_schema(metadata)
    phys = {f["name"]: (f.get("metadata") or {}).get(CM_PHYS, f["name"]) for f in metadata.schema["fields"]}
    top = {int(f["metadata"][CM_ID]) for f in metadata.schema["fields"]
           if isinstance(f["type"], str)}
    return _Ctx(table_path, metadata, schema, partition_spec(schema, metadata), _physical_ids(metadata), top, phys)


def _abs_path(table_path: str, delta_path: str) -> str:
    """Delta paths are URI-encoded and (usually) relative; Iceberg wants absolute locations."""
    if "://" in delta_path or delta_path.startswith("file:"):
        parsed = urllib.parse.urlparse(delta_path)
        return urllib.parse.unquote(parsed.path)
    return os.path.join(table_path, urllib.parse.unquote(delta_path))


def data_file(ctx: _Ctx, f: AddFile | RemoveFile) -> DataFile:
    if getattr(f, "deletion_vector", None) is not None:
        raise ValueError(f"{f.path} carries a deletion vector (IcebergCompatV2 forbids them)")
    stats = json.loads(f.stats, parse_float=decimal.Decimal) if f.stats else None
    if not stats or "numRecords" not in stats:
        raise ValueError(f"{f.path} has no numRecords (IcebergCompatV2 CheckAddFileHasStats)")
    lower, upper, nulls, values = _stats_maps(stats, ctx.leaves, ctx.top_ids)
    pvals = f.partition_values or {}
    partition = Record(*[
        _typed(ctx.schema.find_type(pf.source_id), pvals.get(ctx.phys_of[pf.name], pvals.get(pf.name)),
               from_partition=True)
        for pf in ctx.spec.fields])
    df = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=_abs_path(ctx.table_path, f.path),
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=int(stats["numRecords"]),
        file_size_in_bytes=int(f.size),
        value_counts=values,
        null_value_counts=nulls,
        lower_bounds=lower,
        upper_bounds=upper,
        sort_order_id=None,
        spec_id=ctx.spec.spec_id,
        equality_ids=None,
        key_metadata=None,
    )
    df.spec_id = ctx.spec.spec_id  # gotcha: from_args silently drops spec_id (not a struct field)
    return df


# --------------------------------------------------------------------------- metadata files


class _BesideDeltaCatalog(NoopCatalog):
    """Commits a pyiceberg Transaction as <table>/metadata/v<N+1>.metadata.json (exclusive create)
    followed by version-hint.text (HadoopTables layout: readers without a catalog find it)."""

    def __init__(self, table_path: str):
        super().__init__("isolde-uniform")
        self.table_path = table_path

    def commit_table(self, table, requirements, updates) -> CommitTableResponse:
        base = table.metadata
        for r in requirements:
            r.validate(base)
        new = update_table_metadata(base, updates, metadata_location=table.metadata_location or None)
        version = (_metadata_version(table.metadata_location) or 0) + 1
        location = write_metadata_file(self.table_path, new, version)
        return CommitTableResponse(metadata=new, **{"metadata-location": location})


def _metadata_dir(table_path: str) -> str:
    return os.path.join(table_path, "metadata")


def _metadata_version(location: str | None) -> int | None:
    if not location:
        return None
    name = os.path.basename(location)
    return int(name[1:].split(".")[0]) if name.startswith("v") else None


def write_metadata_file(table_path: str, md, version: int) -> str:
    folder = _metadata_dir(table_path)
    os.makedirs(folder, exist_ok=True)
    final = os.path.join(folder, f"v{version}.metadata.json")
    tmp = os.path.join(folder, f".v{version}.{uuid.uuid4().hex}.tmp")
    ToOutputFile.table_metadata(md, PyArrowFileIO().new_output(tmp))
    try:
        os.link(tmp, final)  # atomic, fails if another converter took this version
    finally:
        os.unlink(tmp)
    hint_tmp = os.path.join(folder, f".version-hint.{uuid.uuid4().hex}.tmp")
    with open(hint_tmp, "w") as fh:
        fh.write(str(version))
    os.replace(hint_tmp, os.path.join(folder, "version-hint.text"))
    return final


def latest_metadata_location(table_path: str) -> str | None:
    folder = _metadata_dir(table_path)
    try:
        with open(os.path.join(folder, "version-hint.text")) as fh:
            version = int(fh.read().strip())
    except (FileNotFoundError, ValueError):
        versions = [_metadata_version(n) for n in os.listdir(folder)] if os.path.isdir(folder) else []
        versions = [v for v in versions if v is not None]
        if not versions:
            return None
        version = max(versions)
    # the hint may lag a crash between the link and the hint rewrite: look one ahead
    while os.path.exists(os.path.join(folder, f"v{version + 1}.metadata.json")):
        version += 1
    return os.path.join(folder, f"v{version}.metadata.json")


def _load(table_path: str, location: str, catalog) -> Table:
    io = PyArrowFileIO()
    md = FromInputFile.table_metadata(io.new_input(location))
    return Table(("uniform", os.path.basename(table_path)), md, location, io, catalog)


def _empty_table(table_path: str, delta_metadata: Metadata, catalog) -> Table:
    schema = iceberg_schema(delta_metadata)
    spec = partition_spec(schema, delta_metadata)
    md = TableMetadataV2(
        location=table_path, table_uuid=uuid.uuid4(), last_updated_ms=int(time.time() * 1000),
        last_column_id=_max_id(delta_metadata, schema), schemas=[schema], current_schema_id=0,
        partition_specs=[spec], default_spec_id=0, last_partition_id=spec.last_assigned_field_id,
        sort_orders=[UNSORTED_SORT_ORDER], default_sort_order_id=0,
        properties=iceberg_properties(delta_metadata), last_sequence_number=0,
    )
    # never written: the first commit below produces v1 (metadata-log stays empty)
    return Table(("uniform", os.path.basename(table_path)), md, "", PyArrowFileIO(), catalog)


def _max_id(delta_metadata: Metadata, schema: Schema) -> int:
    return max(int(delta_metadata.configuration.get("delta.columnMapping.maxColumnId", 0)), schema.highest_field_id)


def iceberg_properties(delta_metadata: Metadata) -> dict:
    """DeltaToIcebergConvert.TableProperties: copied `delta.universalformat.config.iceberg.*` keys."""
    prefix = "delta.universalformat.config.iceberg."
    props = {k[len(prefix):]: v for k, v in delta_metadata.configuration.items() if k.lower().startswith(prefix)}
    props[NAME_MAPPING] = name_mapping(delta_metadata)
    return props


# --------------------------------------------------------------------------- conversion


@dataclass
class ConversionResult:
    metadata_location: str | None
    delta_version: int
    mode: str  # noop | create | incremental | replace
    snapshots_added: int


def _operation_for(adds: list[AddFile], removes: list[RemoveFile]) -> Operation | None:
    """Delta's runIcebergConversionForActions helper choice (no-DV branches)."""
    data_change = any(a.data_change for a in adds) or any(r.data_change for r in removes)
    if adds and not removes:
        return Operation.APPEND if data_change else None   # dataChange=false adds only: NullHelper
    if removes and not adds:
        return Operation.DELETE
    if adds and removes:
        return Operation.OVERWRITE if data_change else Operation.REPLACE  # OPTIMIZE -> RewriteFiles
    return None


class _DeltaCommitFiles(_OverwriteFiles):
    """pyiceberg's overwrite producer with the operation Delta's converter would record.
    Gotcha: update_snapshot_summaries() refuses Operation.REPLACE, so the totals are computed as an
    overwrite (same arithmetic) and the operation is swapped afterwards."""

    def _summary(self, snapshot_properties=EMPTY_DICT) -> Summary:
        wanted = self._operation
        if wanted is not Operation.REPLACE:
            return super()._summary(snapshot_properties)
        self._operation = Operation.OVERWRITE
        try:
            s = super()._summary(snapshot_properties)
        finally:
            self._operation = wanted
        return Summary(operation=Operation.REPLACE, **s.additional_properties)


def _producer(tx, op: Operation, delta_version: int) -> _DeltaCommitFiles:
    return _DeltaCommitFiles(operation=op, transaction=tx, io=tx._table.io,
                             snapshot_properties={DELTA_VERSION: str(delta_version)})


def _commit_snapshot(tx, ctx: _Ctx, adds, removes, op: Operation, delta_version: int, current: dict) -> None:
    """One Iceberg snapshot for one Delta commit, through pyiceberg's _OverwriteFiles producer
    (it writes the added-files manifest, DELETED entries and rewritten manifests, the manifest list
    and the summary). The removed files are looked up in the current Iceberg state by path."""
    producer = _producer(tx, op, delta_version)
    for r in removes:
        path = _abs_path(ctx.table_path, r.path)
        if path in current:
            producer.delete_data_file(current.pop(path))
    for a in adds:
        df = data_file(ctx, a)
        producer.append_data_file(df)
        current[df.file_path] = df
    producer.commit()


def _current_files(table: Table) -> dict:
    snap = table.metadata.current_snapshot()
    if snap is None:
        return {}
    return {e.data_file.file_path: e.data_file
            for m in snap.manifests(table.io) for e in m.fetch_manifest_entry(table.io, discard_deleted=True)}


def convert_table(table_path: str, version: int | None = None, *, fail_after_snapshots: int | None = None) -> ConversionResult:
    """Bring <table>/metadata up to Delta `version` (default: latest). Idempotent; catches up
    over several Delta commits (one Iceberg snapshot per data-changing commit, one metadata file)."""
    log = DeltaLog(table_path)
    table_path = os.path.abspath(log.table_path)
    snap = log.update() if version is None else log.snapshot(version)
    target = snap.version
    catalog = _BesideDeltaCatalog(table_path)
    location = latest_metadata_location(table_path)
    table = _load(table_path, location, catalog) if location else None
    last = int(table.metadata.properties[DELTA_VERSION]) if table and DELTA_VERSION in table.metadata.properties else None
    if last is not None and last >= target:
        return ConversionResult(location, last, "noop", 0)

    incremental = (last is not None and target - last <= MAX_COMMITS_TO_CONVERT
                   and all(log._read_commit_bytes(v) is not None for v in range(last + 1, target + 1)))
    if table is None:
        table, mode = _empty_table(table_path, snap.metadata, catalog), "create"
    else:
        mode = "incremental" if incremental else "replace"
    tx = table.transaction()
    n = 0
    if mode == "incremental":
        current = _current_files(table)
        prev_meta = log.snapshot(last).metadata
        for v in range(last + 1, target + 1):
            actions = log.read_commit(v)
            meta = next((a for a in actions if isinstance(a, Metadata)), None)
            if meta is not None and meta.schema_string != prev_meta.schema_string:
                if list(meta.partition_columns) != list(prev_meta.partition_columns):
                    raise ValueError("partition columns changed (IcebergCompatV2 CheckNoPartitionEvolution)")
                new_schema = iceberg_schema(meta, schema_id=max(s.schema_id for s in tx.table_metadata.schemas) + 1)
                tx._apply((AddSchemaUpdate(schema_=new_schema), SetCurrentSchemaUpdate(schema_id=-1)))
            if meta is not None:
                prev_meta = meta
            ctx = _ctx(table_path, prev_meta)
            adds = [a for a in actions if isinstance(a, AddFile)]
            removes = [a for a in actions if isinstance(a, RemoveFile)]
            op = _operation_for(adds, removes)
            if op is not None:
                _commit_snapshot(tx, ctx, adds, removes, op, v, current)
                n += 1
                if fail_after_snapshots is not None and n >= fail_after_snapshots:
                    raise RuntimeError("simulated crash before the metadata file is written")
    else:
        # create or replace: the whole live file set as one snapshot (Delta: CREATE_TABLE /
        # REPLACE_TABLE from snapshot.allFiles); replace deletes everything the last snapshot had
        ctx = _ctx(table_path, snap.metadata)
        current = _current_files(table) if mode == "replace" else {}
        removes = [RemoveFile(path=p) for p in current] if current else []
        op = Operation.APPEND if not removes else Operation.OVERWRITE
        if snap.all_files or removes:
            producer = _producer(tx, op, target)
            for p in list(current):
                producer.delete_data_file(current.pop(p))
            for a in snap.all_files:
                producer.append_data_file(data_file(ctx, a))
            producer.commit()
            n += 1
    props = iceberg_properties(snap.metadata)
    props.update({DELTA_VERSION: str(target), DELTA_TIMESTAMP: str(log.commit_timestamp(target))})
    if last is not None:
        props[BASE_DELTA_VERSION] = str(last)
    tx.set_properties(props)
    stale = set(tx.table_metadata.properties) - set(props) - {DELTA_VERSION, DELTA_TIMESTAMP, BASE_DELTA_VERSION}
    if stale:
        tx.remove_properties(*stale)
    tx.commit_transaction()
    return ConversionResult(table.metadata_location, target, mode, n)


def uniform_iceberg_enabled(configuration: dict | None) -> bool:
    """Whether ``delta.universalFormat.enabledFormats`` (any key case) lists ``iceberg``."""
    for k, v in (configuration or {}).items():
        if str(k).lower() == "delta.universalformat.enabledformats":
            return "iceberg" in [x.strip().lower() for x in str(v).split(",")]
    return False


def enabled_formats(configuration: dict | None) -> list[str]:
    for k, v in (configuration or {}).items():
        if str(k).lower() == "delta.universalformat.enabledformats":
            return [x.strip().lower() for x in str(v).split(",") if x.strip()]
    return []


def converted_delta_version(table_path: str) -> int | None:
    """The Delta version the latest Iceberg metadata reflects (None: never converted)."""
    location = latest_metadata_location(os.path.abspath(DeltaLog(table_path).table_path))
    if not location:
        return None
    md = FromInputFile.table_metadata(PyArrowFileIO().new_input(location))
    v = md.properties.get(DELTA_VERSION)
    return int(v) if v is not None else None


def convert_after_commit(table_path: str, version: int) -> ConversionResult | None:
    """The post-commit hook's entry point: convert up to ``version`` (catching up on earlier
    commits whose conversion failed). A lost race for a metadata file is retried once; a later
    commit always catches up, so callers log failures and never fail the Delta commit."""
    try:
        return convert_table(table_path, version)
    except FileExistsError:  # another converter published this Iceberg version first
        return convert_table(table_path, version)


def read_iceberg(table_path: str):
    location = latest_metadata_location(os.path.abspath(table_path))
    return StaticTable.from_metadata(location)
