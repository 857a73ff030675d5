"""Parquet checkpoints (classic, and V2 with sidecars), written with pyarrow in Delta's checkpoint schema.

A checkpoint holds the whole table state at one version (protocol, metadata, app
transaction versions, domain metadata, live files and unexpired tombstones), so a
reader replays only the JSON commits after it. The schema is the one Delta and
delta-rs write, so any Delta reader can start from an isolde checkpoint.

isolde reads every kind: classic, multi-part, and V2 checkpoints (table feature
``v2Checkpoint``): ``n.checkpoint.<uuid>.json|parquet`` or a classic name, holding a
``checkpointMetadata`` action, the non-file actions, and either the file actions themselves or
``sidecar`` actions naming Parquet files in ``_delta_log/_sidecars`` that hold them.

It writes classic single-file checkpoints, and for tables with ``delta.checkpointPolicy = v2``
V2 checkpoints as Delta Spark lays them out: the file actions (adds, then unexpired
tombstones) in sidecar files of at most ``SIDECAR_PART_ACTIONS`` actions each, named
``n.checkpoint.<part>.<parts>.<uuid>.parquet``, and a UUID-named top-level Parquet file with
one ``checkpointMetadata`` action, the ``sidecar`` actions and the non-file actions. Sidecars
keep the top-level file (which ``_last_checkpoint`` may also embed) small, and let a later
checkpoint or log cleanup treat the bulk of the state as immutable, uniquely named files.
Multi-part checkpoints are never written (the protocol forbids them with v2Checkpoint).
"""

from __future__ import annotations

import gc
import io
import json
import os
import re
import uuid
from collections import OrderedDict
from itertools import repeat
from typing import Iterable
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .actions import AddFile, DeletionVectorDescriptor, DomainMetadata, Metadata, Protocol, RemoveFile, SetTransaction

CHECKPOINT_RE = re.compile(
    r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10})\.parquet"  # multi-part (classic only)
    r"|\.([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.(?:parquet|json)"  # V2
    r"|\.parquet)$"
)
SIDECAR_DIR = "_sidecars"
#: The schema of a metaData action that has none (Delta Live Tables create tables so).
EMPTY_SCHEMA_STRING = '{"type":"struct","fields":[]}'

_STRING_MAP = pa.map_(pa.string(), pa.string())
_DV = pa.struct(
    [
        pa.field("storageType", pa.string(), nullable=False),
        pa.field("pathOrInlineDv", pa.string(), nullable=False),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32(), nullable=False),
        pa.field("cardinality", pa.int64(), nullable=False),
    ]
)

CHECKPOINT_SCHEMA = pa.schema(
    [
        pa.field(
            "txn",
            pa.struct(
                [
                    pa.field("appId", pa.string(), nullable=False),
                    pa.field("version", pa.int64(), nullable=False),
                    pa.field("lastUpdated", pa.int64()),
                ]
            ),
        ),
        pa.field(
            "add",
            pa.struct(
                [
                    pa.field("path", pa.string(), nullable=False),
                    pa.field("partitionValues", _STRING_MAP, nullable=False),
                    pa.field("size", pa.int64(), nullable=False),
                    pa.field("modificationTime", pa.int64(), nullable=False),
                    pa.field("dataChange", pa.bool_(), nullable=False),
                    pa.field("stats", pa.string()),
                    pa.field("tags", _STRING_MAP),
                    pa.field("deletionVector", _DV),
                    pa.field("baseRowId", pa.int64()),
                    pa.field("defaultRowCommitVersion", pa.int64()),
                    pa.field("clusteringProvider", pa.string()),
                ]
            ),
        ),
        pa.field(
            "remove",
            pa.struct(
                [
                    pa.field("path", pa.string(), nullable=False),
                    pa.field("deletionTimestamp", pa.int64()),
                    pa.field("dataChange", pa.bool_(), nullable=False),
                    pa.field("extendedFileMetadata", pa.bool_()),
                    pa.field("partitionValues", _STRING_MAP),
                    pa.field("size", pa.int64()),
                    pa.field("tags", _STRING_MAP),
                    pa.field("deletionVector", _DV),
                    pa.field("baseRowId", pa.int64()),
                    pa.field("defaultRowCommitVersion", pa.int64()),
                ]
            ),
        ),
        pa.field(
            "metaData",
            pa.struct(
                [
                    pa.field("id", pa.string(), nullable=False),
                    pa.field("name", pa.string()),
                    pa.field("description", pa.string()),
                    pa.field(
                        "format",
                        pa.struct(
                            [pa.field("provider", pa.string(), nullable=False), pa.field("options", _STRING_MAP)]
                        ),
                        nullable=False,
                    ),
                    pa.field("schemaString", pa.string(), nullable=False),
                    pa.field("partitionColumns", pa.list_(pa.string()), nullable=False),
                    pa.field("createdTime", pa.int64()),
                    pa.field("configuration", _STRING_MAP),
                ]
            ),
        ),
        pa.field(
            "protocol",
            pa.struct(
                [
                    pa.field("minReaderVersion", pa.int32(), nullable=False),
                    pa.field("minWriterVersion", pa.int32(), nullable=False),
                    pa.field("readerFeatures", pa.list_(pa.string())),
                    pa.field("writerFeatures", pa.list_(pa.string())),
                ]
            ),
        ),
        pa.field(
            "domainMetadata",
            pa.struct(
                [
                    pa.field("domain", pa.string(), nullable=False),
                    pa.field("configuration", pa.string(), nullable=False),
                    pa.field("removed", pa.bool_(), nullable=False),
                ]
            ),
        ),
    ]
)

_MAP_FIELDS = ("partitionValues", "tags", "configuration", "options")

#: The actions a V2 checkpoint adds to the classic ones.
V2_ACTIONS_SCHEMA = pa.schema(
    [
        pa.field(
            "checkpointMetadata",
            pa.struct([pa.field("version", pa.int64()), pa.field("tags", _STRING_MAP)]),
        ),
        pa.field(
            "sidecar",
            pa.struct(
                [
                    pa.field("path", pa.string()),
                    pa.field("sizeInBytes", pa.int64()),
                    pa.field("modificationTime", pa.int64()),
                    pa.field("tags", _STRING_MAP),
                ]
            ),
        ),
    ]
)
_JSON_CHECKPOINT_SCHEMA = pa.schema(list(CHECKPOINT_SCHEMA) + list(V2_ACTIONS_SCHEMA))
#: A V2 checkpoint's top-level Parquet file (Delta's column order: the classic actions, then
#: checkpointMetadata and sidecar).
V2_CHECKPOINT_SCHEMA = _JSON_CHECKPOINT_SCHEMA
#: A sidecar file holds file actions only.
SIDECAR_SCHEMA = pa.schema([CHECKPOINT_SCHEMA.field("add"), CHECKPOINT_SCHEMA.field("remove")])
#: At most this many file actions per sidecar file (Delta Spark's part size for V2 checkpoints).
SIDECAR_PART_ACTIONS = 50_000


def json_checkpoint_table(data: bytes) -> pa.Table:
    """A V2 checkpoint in JSON form as the Arrow table its Parquet form would be (one action a
    row); fields the checkpoint schema does not know are dropped, as a Parquet checkpoint would."""
    rows = []
    for line in (data.decode("utf-8") if isinstance(data, bytes) else data).splitlines():
        if line.strip():
            obj = json.loads(line)
            rows.append({k: v for k, v in obj.items() if k in _JSON_CHECKPOINT_SCHEMA.names})
    return pa.Table.from_pylist(rows, schema=_JSON_CHECKPOINT_SCHEMA)


def checkpoint_name(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


def v2_checkpoint_name(version: int, ext: str = "parquet") -> str:
    """A new UUID-named V2 checkpoint: ``n.checkpoint.<uuid>.parquet``."""
    return f"{version:020d}.checkpoint.{uuid.uuid4()}.{ext}"


def sidecar_name(version: int, part: int, parts: int) -> str:
    """A new sidecar file name, as Delta Spark names them: ``n.checkpoint.<part>.<parts>.<uuid>.parquet``."""
    return f"{version:020d}.checkpoint.{part:010d}.{parts:010d}.{uuid.uuid4()}.parquet"


def is_v2_checkpoint_name(name: str) -> bool:
    m = CHECKPOINT_RE.match(os.path.basename(name))
    return m is not None and m.group(4) is not None


def checkpoint_version(name: str) -> int | None:
    m = CHECKPOINT_RE.match(os.path.basename(name))
    return None if m is None else int(m.group(1))


def _map_items(d: dict | None):
    return None if d is None else [(str(k), None if v is None else str(v)) for k, v in d.items()]


def _dv_row(dv) -> dict | None:
    if dv is None:
        return None
    return {
        "storageType": dv.storage_type,
        "pathOrInlineDv": dv.path_or_inline_dv,
        "offset": dv.offset,
        "sizeInBytes": dv.size_in_bytes,
        "cardinality": dv.cardinality,
    }


def _add_row(a: AddFile) -> dict:
    return {
        "path": a.path,
        "partitionValues": _map_items(a.partition_values) or [],
        "size": a.size,
        "modificationTime": a.modification_time,
        "dataChange": False,  # a checkpoint states what is, not a change
        "stats": a.stats,
        "tags": _map_items(a.tags),
        "deletionVector": _dv_row(a.deletion_vector),
        "baseRowId": a.base_row_id,
        "defaultRowCommitVersion": a.default_row_commit_version,
        "clusteringProvider": a.clustering_provider,
    }


def _remove_row(r: RemoveFile) -> dict:
    return {
        "path": r.path,
        "deletionTimestamp": r.deletion_timestamp,
        "dataChange": False,
        "extendedFileMetadata": r.extended_file_metadata,
        "partitionValues": _map_items(r.partition_values),
        "size": r.size,
        "tags": _map_items(r.tags),
        "deletionVector": _dv_row(r.deletion_vector),
        "baseRowId": r.base_row_id,
        "defaultRowCommitVersion": r.default_row_commit_version,
    }


def checkpoint_table(
    protocol: Protocol,
    metadata: Metadata,
    transactions: Iterable[SetTransaction],
    domains: Iterable[DomainMetadata],
    files: Iterable[AddFile],
    tombstones: Iterable[RemoveFile],
    *,
    schema: pa.Schema = CHECKPOINT_SCHEMA,
    leading: Iterable[tuple[str, dict]] = (),
) -> pa.Table:
    """The checkpoint rows (one action per row) as an Arrow table in ``schema`` (CHECKPOINT_SCHEMA;
    V2_CHECKPOINT_SCHEMA with ``leading`` (kind, value) rows such as checkpointMetadata and
    sidecar actions for a V2 checkpoint's top-level file)."""
    columns: dict[str, list] = {f.name: [] for f in schema}

    def row(kind: str, value: dict) -> None:
        for name, col in columns.items():
            col.append(value if name == kind else None)

    for kind, value in leading:
        row(kind, value)

    row(
        "protocol",
        {
            "minReaderVersion": protocol.min_reader_version,
            "minWriterVersion": protocol.min_writer_version,
            "readerFeatures": protocol.reader_features,
            "writerFeatures": protocol.writer_features,
        },
    )
    row(
        "metaData",
        {
            "id": metadata.id,
            "name": metadata.name,
            "description": metadata.description,
            "format": {"provider": metadata.format_provider, "options": _map_items(metadata.format_options) or []},
            "schemaString": metadata.schema_string,
            "partitionColumns": list(metadata.partition_columns),
            "createdTime": metadata.created_time,
            "configuration": _map_items(metadata.configuration) or [],
        },
    )
    for t in transactions:
        row("txn", {"appId": t.app_id, "version": t.version, "lastUpdated": t.last_updated})
    for d in domains:
        if not d.removed:
            row("domainMetadata", {"domain": d.domain, "configuration": d.configuration, "removed": False})
    add_rows = [_add_row(a) for a in files]
    remove_rows = [_remove_row(r) for r in tombstones]
    n_before = len(columns["add"])
    total = n_before + len(add_rows) + len(remove_rows)
    for name, col in columns.items():
        if name == "add":
            col.extend(add_rows)
            col.extend([None] * len(remove_rows))
        elif name == "remove":
            col.extend([None] * len(add_rows))
            col.extend(remove_rows)
        else:
            col.extend([None] * (len(add_rows) + len(remove_rows)))
        assert len(col) == total
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def sidecar_tables(files: Iterable[AddFile], tombstones: Iterable[RemoveFile],
                   part_actions: int = SIDECAR_PART_ACTIONS) -> list[pa.Table]:
    """The file actions of a V2 checkpoint as sidecar tables (SIDECAR_SCHEMA) of at most
    ``part_actions`` rows each: adds first, then tombstones. An empty table state gives no
    sidecar (a V2 checkpoint may reference none)."""
    add_rows = [_add_row(a) for a in files]
    remove_rows = [_remove_row(r) for r in tombstones]
    total = len(add_rows) + len(remove_rows)
    if total == 0:
        return []
    adds = pa.array(add_rows + [None] * len(remove_rows), type=SIDECAR_SCHEMA.field("add").type)
    removes = pa.array([None] * len(add_rows) + remove_rows, type=SIDECAR_SCHEMA.field("remove").type)
    table = pa.Table.from_arrays([adds, removes], schema=SIDECAR_SCHEMA)
    size = max(1, part_actions)
    return [table.slice(start, size) for start in range(0, total, size)]


def checkpoint_metadata_action(version: int, *, sidecar_actions: int, sidecar_bytes: int,
                               num_add_files: int) -> dict:
    """The ``checkpointMetadata`` action of a V2 checkpoint (with Delta's optional tags)."""
    return {
        "version": version,
        "tags": [
            ("sidecarNumActions", str(sidecar_actions)),
            ("sidecarSizeInBytes", str(sidecar_bytes)),
            ("numOfAddFiles", str(num_add_files)),
        ],
    }


def sidecar_action(name: str, size: int, modification_time: int) -> dict:
    """A ``sidecar`` action: the file's bare name (it lives in ``_delta_log/_sidecars``)."""
    return {"path": name, "sizeInBytes": size, "modificationTime": modification_time, "tags": None}


def checkpoint_bytes(table: pa.Table) -> bytes:
    """Parquet bytes; tombstones (the trailing ``remove`` rows) go to their own row groups.

    Readers that only need the table state then skip the tombstone row groups by their
    statistics, so a long history of removes does not slow down loading a snapshot.
    """
    removes = table.column("remove")
    n_state = len(table) - (len(removes) - removes.null_count)
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, table.schema, compression="snappy") as writer:
        if n_state:
            writer.write_table(table.slice(0, n_state))
        if n_state < len(table):
            writer.write_table(table.slice(n_state))
    return sink.getvalue()


# --------------------------------------------------------------------------- reading


def _normalise(value):
    """Arrow's Python form of a checkpoint struct -> the JSON form the action parsers expect."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if v is None or k.endswith("_parsed"):
                continue
            if k in _MAP_FIELDS and isinstance(v, list):
                out[k] = {mk: mv for mk, mv in v}
            else:
                out[k] = _normalise(v)
        return out
    return value


def _column_rows(tables: list[pa.Table], name: str) -> list[dict]:
    rows: list[dict] = []
    for table in tables:
        if name not in table.column_names:
            continue
        for chunk in table.column(name).chunks:
            rows.extend(_normalise(v) for v in _valid_rows(chunk).to_pylist())
    return rows


_ADD_KNOWN = frozenset(AddFile._KNOWN)


class CheckpointFiles:
    """The live files of a checkpoint, kept as Arrow and turned into AddFiles only when asked.

    Conversion is column by column (one ``to_pylist`` per flat child column, none for
    columns that are entirely null, no per-row dicts), and happens once per checkpoint:
    every snapshot derived from the same checkpoint shares the result.
    """

    __slots__ = ("_adds", "_files", "_keys", "_index")

    def __init__(self, adds: pa.StructArray | None):
        self._adds = adds
        self._files: list[AddFile] | None = None
        self._keys: list[tuple] | None = None
        self._index: dict | None = None

    def __len__(self) -> int:
        return 0 if self._adds is None else len(self._adds)

    def materialize(self) -> list[AddFile]:
        if self._files is None:
            # building many small objects would trigger the cyclic GC again and again (they
            # hold no cycles): pause it for the batch
            paused = gc.isenabled()
            gc.disable()
            try:
                self._files = self._convert()
            finally:
                if paused:
                    gc.enable()
        return self._files

    def key_index(self) -> dict | None:
        """Replay key (path, DV id) -> position in ``materialize()``; None if keys repeat."""
        if self._index is None:
            files = self.materialize()
            keys = self._keys
            if keys is None:
                keys = [f.key for f in files]
            index = dict(zip(keys, range(len(keys))))
            self._index = index if len(index) == len(files) else {}
            self._keys = None
        return self._index or None

    def _convert(self) -> list[AddFile]:
        arr = self._adds
        if arr is None or len(arr) == 0:
            return []
        typ = arr.type
        names = [typ.field(i).name for i in range(typ.num_fields)]
        n = len(arr)

        def column(name):
            """The child column as Python values, or None when it is missing or all null."""
            if name not in names:
                return None
            child = arr.field(name)
            if child.null_count == len(child):
                return None
            return child.to_pylist()

        none = repeat(None)
        paths = column("path")
        if paths is None:
            paths = [None] * n
        sizes = column("size")
        sizes = [0] * n if sizes is None else [v or 0 for v in sizes] if None in sizes else sizes
        mtimes = column("modificationTime")
        mtimes = [0] * n if mtimes is None else [v or 0 for v in mtimes] if None in mtimes else mtimes
        data_changes = column("dataChange")
        if data_changes is None:
            data_changes = repeat(True)
        elif None in data_changes:
            data_changes = [True if v is None else v for v in data_changes]
        stats = column("stats") or none

        pv_column = arr.field("partitionValues") if "partitionValues" in names else None
        if pv_column is None or _all_empty_lists(pv_column):
            partition_values = [{} for _ in range(n)]
        else:
            partition_values = [dict(pv) if pv else {} for pv in pv_column.to_pylist()]
        tags = column("tags")
        tags = none if tags is None else [None if t is None else dict(t) for t in tags]
        dvs = column("deletionVector")
        from_dv = DeletionVectorDescriptor.from_dict
        dvs = none if dvs is None else [None if dv is None else from_dv(dv) for dv in dvs]
        base_row_ids = column("baseRowId") or none
        row_commit_versions = column("defaultRowCommitVersion") or none
        clustering = column("clusteringProvider") or none

        extras = []
        for name in names:
            if name not in _ADD_KNOWN and not name.endswith("_parsed"):
                values = column(name)
                if values is not None:
                    extras.append((name, values))
        extra_dicts = [{} for _ in range(n)]
        for name, values in extras:
            for extra, value in zip(extra_dicts, values):
                if value is not None:
                    extra[name] = _normalise(value)

        # the dataclass __init__, called through map: the cheapest way to build them in bulk
        files = list(
            map(
                AddFile, paths, partition_values, sizes, mtimes, data_changes, stats, dvs, tags,
                base_row_ids, row_commit_versions, clustering, extra_dicts,
            )
        )
        if dvs is none:
            self._keys = list(zip(paths, none))
        return files


def _all_empty_lists(column: pa.Array) -> bool:
    """True when every entry of a list/map column is empty or null (no value to convert)."""
    offsets = column.offsets
    return len(offsets) == 0 or offsets[0].as_py() == offsets[len(offsets) - 1].as_py()


def _valid_rows(chunk: pa.Array) -> pa.Array:
    """The non-null entries of one chunk: a zero-copy slice when they are contiguous.

    Checkpoint writers group each action type together, so the adds of a checkpoint are
    one run of rows; filtering (which copies every nested child, stats strings included)
    is only needed for an interleaved layout.
    """
    nulls = chunk.null_count
    n = len(chunk)
    if nulls == 0:
        return chunk
    if nulls == n:
        return chunk.slice(0, 0)
    mask = chunk.is_valid()
    # (pc.index would do for the first position, but its Python wrapper imports pandas)
    positions = pc.indices_nonzero(mask)
    first = positions[0].as_py()
    count = len(positions)
    if positions[count - 1].as_py() - first + 1 == count:
        return chunk.slice(first, count)
    return chunk.filter(mask)


def _valid_struct(tables: list[pa.Table], name: str) -> pa.StructArray | None:
    chunks = []
    for table in tables:
        if name not in table.column_names:
            continue
        for chunk in table.column(name).chunks:
            valid = _valid_rows(chunk)
            if len(valid):
                chunks.append(valid)
    if not chunks:
        return None
    if len(chunks) == 1:
        return chunks[0]
    if any(c.type != chunks[0].type for c in chunks[1:]):
        chunks = _same_struct_type(chunks)
    return pa.concat_arrays(chunks)


def _same_struct_type(chunks: list) -> list:
    """Struct arrays from files with different schemas (V2 sidecars and the checkpoint beside
    them, say) as one struct type: the union of their children, missing ones null; a child whose
    types disagree goes through Python values (rare: the writers of one table agree)."""
    fields: dict[str, pa.DataType] = {}
    clash: set[str] = set()
    for chunk in chunks:
        for f in chunk.type:
            if f.name.endswith("_parsed"):
                continue  # parsed stats / partition values: never read
            if f.name in fields and fields[f.name] != f.type:
                clash.add(f.name)
            fields.setdefault(f.name, f.type)
    out = []
    for chunk in chunks:
        names = {f.name for f in chunk.type}
        children, kept = [], []
        for name, typ in fields.items():
            if name not in names:
                children.append(pa.nulls(len(chunk), typ))
            elif name in clash:
                children.append(pa.array(chunk.field(name).to_pylist(), typ))
            else:
                children.append(chunk.field(name))
            kept.append(pa.field(name, typ))
        out.append(pa.StructArray.from_arrays(children, fields=kept, mask=chunk.is_null()))
    return out


def _row_groups_with(metadata: pq.FileMetaData, actions: list[str]) -> list[int] | None:
    """Row groups where some of ``actions`` is non-null, judged by the first leaf's null count.

    None means "read everything" (a single row group, or statistics are missing).
    """
    if metadata.num_row_groups <= 1:
        return None
    leaf_of: dict[str, int] = {}
    for i in range(metadata.num_columns):
        top = metadata.schema.column(i).path.split(".", 1)[0]
        leaf_of.setdefault(top, i)
    groups = []
    for rg in range(metadata.num_row_groups):
        group = metadata.row_group(rg)
        for action in actions:
            index = leaf_of.get(action)
            if index is None:
                continue
            stats = group.column(index).statistics
            if stats is None or not stats.has_null_count or stats.null_count < group.num_rows:
                groups.append(rg)
                break
    return groups


#: Live files of recently read checkpoints, per process. A checkpoint file never changes
#: once written, so (path, size, mtime) identifies its content; AddFiles are shared and
#: must be treated as immutable.
_FILES_CACHE: "OrderedDict[tuple, CheckpointFiles]" = OrderedDict()
FILES_CACHE_SIZE = 4


def _read_columns(pf: pq.ParquetFile, present: list[str]) -> list[pa.Table]:
    if not present:
        return []
    groups = _row_groups_with(pf.metadata, present)
    if groups is None:
        return [pf.read(columns=present)]
    return [pf.read_row_groups(groups, columns=present)] if groups else []


def clear_checkpoint_cache() -> None:
    _FILES_CACHE.clear()


class CheckpointReader:
    """Reads the parts of one checkpoint; removes (tombstones) are read only when asked for.

    ``identity`` ((path, size, mtime) per part) lets snapshots of the same checkpoint
    share its live files across DeltaLog instances in one process.
    """

    STATE_COLUMNS = ("protocol", "metaData", "txn", "add", "domainMetadata")

    def __init__(self, paths: list[str], read_bytes, identity: tuple | None = None):
        self.paths = paths
        self._read_bytes = read_bytes
        self.identity = identity
        self._json: dict[str, pa.Table] = {}

    def _sidecar_path(self, path: str) -> str:
        """A sidecar action's path: relative to ``_delta_log/_sidecars``, or an absolute URI."""
        if "://" in path or path.startswith("file:"):
            return unquote(urlparse(path).path)
        return os.path.join(os.path.dirname(self.paths[0]), SIDECAR_DIR, unquote(path))

    def _read(self, columns: tuple[str, ...]) -> list[pa.Table]:
        """The given action columns, from the row groups that hold any of them; the file
        actions of a V2 checkpoint also from its sidecar files."""
        tables = []
        sidecars: list[dict] = []
        for path in self.paths:
            if path.endswith(".json"):  # a V2 checkpoint in JSON
                table = self._json.get(path)
                if table is None:
                    table = self._json[path] = json_checkpoint_table(self._read_bytes(path))
                tables.append(table.select([c for c in columns if c in table.column_names]))
                sidecars += _column_rows([table], "sidecar")
                continue
            pf = pq.ParquetFile(pa.BufferReader(self._read_bytes(path)))
            names = set(pf.schema_arrow.names)
            tables.extend(_read_columns(pf, [c for c in columns if c in names]))
            if "sidecar" in names:
                sidecars += _column_rows(_read_columns(pf, ["sidecar"]), "sidecar")
        file_columns = [c for c in columns if c in ("add", "remove")]
        if file_columns:
            for sidecar in sidecars:
                pf = pq.ParquetFile(pa.BufferReader(self._read_bytes(self._sidecar_path(sidecar["path"]))))
                names = set(pf.schema_arrow.names)
                tables.extend(_read_columns(pf, [c for c in file_columns if c in names]))
        return tables

    def state(self) -> dict:
        """protocol, metadata, transactions, domains and (lazy) live files of the checkpoint."""
        cached = _FILES_CACHE.get(self.identity) if self.identity is not None else None
        if cached is not None:
            _FILES_CACHE.move_to_end(self.identity)
            tables = self._read(tuple(c for c in self.STATE_COLUMNS if c != "add"))
            files = cached
        else:
            tables = self._read(self.STATE_COLUMNS)
            files = CheckpointFiles(_valid_struct(tables, "add"))
            if self.identity is not None:
                _FILES_CACHE[self.identity] = files
                while len(_FILES_CACHE) > FILES_CACHE_SIZE:
                    _FILES_CACHE.popitem(last=False)
        protocols = _column_rows(tables, "protocol")
        metadatas = _column_rows(tables, "metaData")
        if metadatas and metadatas[-1].get("schemaString") is None:
            # a table created without columns (as the log's own replay reads it: no columns)
            metadatas[-1]["schemaString"] = EMPTY_SCHEMA_STRING
        return {
            "protocol": Protocol.from_dict(protocols[-1]) if protocols else None,
            "metadata": Metadata.from_dict(metadatas[-1]) if metadatas else None,
            "txns": [SetTransaction.from_dict(d) for d in _column_rows(tables, "txn")],
            "domains": [DomainMetadata.from_dict(d) for d in _column_rows(tables, "domainMetadata")],
            "files": files,
        }

    def tombstones(self) -> list[RemoveFile]:
        return [RemoveFile.from_dict(d) for d in _column_rows(self._read(("remove",)), "remove")]


def parse_last_checkpoint(data: bytes) -> dict | None:
    try:
        info = json.loads(data)
    except ValueError:
        return None
    return info if isinstance(info, dict) and isinstance(info.get("version"), int) else None


def checkpoint_part_names(version: int, parts: int | None) -> list[str]:
    if not parts:
        return [checkpoint_name(version)]
    return [f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]


def complete_checkpoints(names: Iterable[str]) -> dict[int, list[str]]:
    """version -> part names, for checkpoints whose parts are all present (a classic
    single-file checkpoint first, else a V2 one, else a complete multi-part one)."""
    singles: dict[int, list[str]] = {}
    v2: dict[int, list[str]] = {}
    multi: dict[tuple[int, int], set[int]] = {}
    for name in names:
        m = CHECKPOINT_RE.match(os.path.basename(name))
        if not m:
            continue
        version = int(m.group(1))
        if m.group(4) is not None:
            # several V2 checkpoints of one version are equivalent: take one deterministically
            if version not in v2 or os.path.basename(name) < v2[version][0]:
                v2[version] = [os.path.basename(name)]
        elif m.group(2) is None:
            singles[version] = [os.path.basename(name)]
        else:
            multi.setdefault((version, int(m.group(3))), set()).add(int(m.group(2)))
    out = dict(singles)
    for version, name in v2.items():
        out.setdefault(version, name)
    for (version, total), parts in multi.items():
        if version not in out and parts == set(range(1, total + 1)):
            out[version] = checkpoint_part_names(version, total)
    return out


def referenced_sidecars(path: str, read_bytes) -> set[str]:
    """Bare names of the sidecar files a checkpoint file (JSON or Parquet, any name) references."""
    data = read_bytes(path)
    rows: list[dict] = []
    if path.endswith(".json"):
        for line in data.decode("utf-8").splitlines():
            if '"sidecar"' in line:
                body = json.loads(line).get("sidecar")
                if isinstance(body, dict):
                    rows.append(body)
    else:
        pf = pq.ParquetFile(pa.BufferReader(data))
        if "sidecar" in pf.schema_arrow.names:
            rows = _column_rows([pf.read(columns=["sidecar"])], "sidecar")
    out = set()
    for row in rows:
        p = row.get("path")
        if isinstance(p, str) and p:
            out.add(os.path.basename(unquote(urlparse(p).path if "://" in p or p.startswith("file:") else p)))
    return out
