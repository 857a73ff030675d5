"""Delta log actions as dataclasses with the exact JSON shape of PROTOCOL.md.

Every action keeps the fields other engines wrote that isolde does not model in
``extra``, and writes them back unchanged, so a table round-trips through isolde
without losing another engine's annotations. Unknown action types are ignored by
``parse_action`` (it returns ``None``) so a newer writer never breaks replay.
"""

from __future__ import annotations

import decimal
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping


def now_ms() -> int:
    return int(time.time() * 1000)


def _drop_none(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def _rest(d: Mapping[str, Any], known: frozenset[str]) -> dict:
    return {k: v for k, v in d.items() if k not in known}


# --------------------------------------------------------------------------- deletion vectors


@dataclass(frozen=True)
class DeletionVectorDescriptor:
    """Where the deleted row positions of one data file live (inline, relative uuid file, or path)."""

    storage_type: str  # 'i' inline, 'u' uuid-named file relative to the table, 'p' absolute path
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    _KNOWN = frozenset({"storageType", "pathOrInlineDv", "offset", "sizeInBytes", "cardinality"})

    @property
    def unique_id(self) -> str:
        """PROTOCOL.md: storageType + pathOrInlineDv, plus '@offset' when an offset is set."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return f"{base}@{self.offset}" if self.offset is not None else base

    @property
    def is_inline(self) -> bool:
        return self.storage_type == "i"

    def to_dict(self) -> dict:
        d = {"storageType": self.storage_type, "pathOrInlineDv": self.path_or_inline_dv}
        if self.offset is not None:
            d["offset"] = self.offset
        d["sizeInBytes"] = self.size_in_bytes
        d["cardinality"] = self.cardinality
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "DeletionVectorDescriptor | None":
        if not d:
            return None
        return cls(
            storage_type=d["storageType"],
            path_or_inline_dv=d["pathOrInlineDv"],
            size_in_bytes=int(d["sizeInBytes"]),
            cardinality=int(d["cardinality"]),
            offset=None if d.get("offset") is None else int(d["offset"]),
            extra=_rest(d, cls._KNOWN),
        )


def _dv_id(dv: DeletionVectorDescriptor | None) -> str | None:
    return None if dv is None else dv.unique_id


# --------------------------------------------------------------------------- protocol / metadata


@dataclass
class Protocol:
    """Reader/writer versions; with reader 3 / writer 7 the explicit table features."""

    min_reader_version: int
    min_writer_version: int
    reader_features: list[str] | None = None
    writer_features: list[str] | None = None
    extra: dict = field(default_factory=dict, compare=False)

    KEY = "protocol"
    _KNOWN = frozenset({"minReaderVersion", "minWriterVersion", "readerFeatures", "writerFeatures"})

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"minReaderVersion": self.min_reader_version, "minWriterVersion": self.min_writer_version}
        if self.reader_features is not None:
            d["readerFeatures"] = list(self.reader_features)
        if self.writer_features is not None:
            d["writerFeatures"] = list(self.writer_features)
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Protocol":
        rf, wf = d.get("readerFeatures"), d.get("writerFeatures")
        return cls(
            int(d["minReaderVersion"]),
            int(d["minWriterVersion"]),
            None if rf is None else list(rf),
            None if wf is None else list(wf),
            _rest(d, cls._KNOWN),
        )


@dataclass
class Metadata:
    """Table identity, schema, partition columns and properties (the `metaData` action)."""

    schema_string: str
    partition_columns: tuple[str, ...] | list[str] = ()
    configuration: dict[str, str] = field(default_factory=dict)
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    name: str | None = None
    description: str | None = None
    format_provider: str = "parquet"
    format_options: dict[str, str] = field(default_factory=dict)
    created_time: int | None = field(default_factory=now_ms)
    extra: dict = field(default_factory=dict, compare=False)

    KEY = "metaData"
    _KNOWN = frozenset(
        {"id", "name", "description", "format", "schemaString", "partitionColumns", "configuration", "createdTime"}
    )

    def __post_init__(self) -> None:
        self.partition_columns = tuple(self.partition_columns)
        self.configuration = {
            str(k): (("true" if v else "false") if isinstance(v, bool) else str(v)) for k, v in dict(self.configuration).items()
        }

    @property
    def schema(self) -> dict:
        """The parsed schema JSON (a Delta struct type)."""
        cached = self.__dict__.get("_schema_cache")
        if cached is None or cached[0] != self.schema_string:
            cached = (self.schema_string, json.loads(self.schema_string))
            self.__dict__["_schema_cache"] = cached
        return cached[1]

    def to_dict(self) -> dict:
        d = {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "format": {"provider": self.format_provider, "options": dict(self.format_options)},
            "schemaString": self.schema_string,
            "partitionColumns": list(self.partition_columns),
            "configuration": dict(self.configuration),
            "createdTime": self.created_time,
        }
        d = {k: v for k, v in d.items() if v is not None or k in ("name", "description")}
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Metadata":
        fmt = d.get("format") or {}
        return cls(
            schema_string=d["schemaString"],
            partition_columns=tuple(d.get("partitionColumns") or ()),
            configuration=dict(d.get("configuration") or {}),
            id=d["id"],
            name=d.get("name"),
            description=d.get("description"),
            format_provider=fmt.get("provider", "parquet"),
            format_options=dict(fmt.get("options") or {}),
            created_time=d.get("createdTime"),
            extra=_rest(d, cls._KNOWN),
        )


# --------------------------------------------------------------------------- file actions


@dataclass
class AddFile:
    """A data file that is part of the table (optionally with a deletion vector)."""

    path: str
    partition_values: dict[str, str | None]
    size: int
    modification_time: int
    data_change: bool = True
    stats: str | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    tags: dict[str, str] | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    KEY = "add"
    _KNOWN = frozenset(
        {
            "path", "partitionValues", "size", "modificationTime", "dataChange", "stats", "tags",
            "deletionVector", "baseRowId", "defaultRowCommitVersion", "clusteringProvider",
        }
    )

    @property
    def key(self) -> tuple[str, str | None]:
        """The replay key: (path, deletion vector unique id), as PROTOCOL.md defines a logical file."""
        return (self.path, _dv_id(self.deletion_vector))

    @property
    def parsed_stats(self) -> dict | None:
        cached = self.__dict__.get("_stats_cache")
        if cached is None or cached[0] is not self.stats:
            parsed = None
            if self.stats:
                try:
                    parsed = json.loads(self.stats)
                except ValueError:
                    parsed = None
            cached = (self.stats, parsed)
            self.__dict__["_stats_cache"] = cached
        return cached[1]

    @property
    def exact_stats(self) -> dict | None:
        """The stats with every non-integer number as a Decimal, exactly as written (a decimal
        column's bounds must not pass through a binary float on their way to a comparison)."""
        cached = self.__dict__.get("_exact_stats_cache")
        if cached is None or cached[0] is not self.stats:
            parsed = None
            if self.stats:
                try:
                    parsed = json.loads(self.stats, parse_float=decimal.Decimal)
                except ValueError:
                    parsed = None
            cached = (self.stats, parsed)
            self.__dict__["_exact_stats_cache"] = cached
        return cached[1]

    @property
    def num_records(self) -> int | None:
        s = self.parsed_stats
        return None if not s or s.get("numRecords") is None else int(s["numRecords"])

    def remove(self, deletion_timestamp: int | None = None, data_change: bool = True) -> "RemoveFile":
        """The RemoveFile that retires exactly this logical file (same path and DV)."""
        return RemoveFile(
            path=self.path,
            data_change=data_change,
            partition_values=dict(self.partition_values),
            size=self.size,
            deletion_timestamp=now_ms() if deletion_timestamp is None else deletion_timestamp,
            deletion_vector=self.deletion_vector,
            extended_file_metadata=True,
            stats=self.stats,
            tags=self.tags,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
        )

    def to_dict(self) -> dict:
        d = {
            "path": self.path,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": self.data_change,
        }
        if self.stats is not None:
            d["stats"] = self.stats
        if self.tags is not None:
            d["tags"] = dict(self.tags)
        if self.deletion_vector is not None:
            d["deletionVector"] = self.deletion_vector.to_dict()
        if self.base_row_id is not None:
            d["baseRowId"] = self.base_row_id
        if self.default_row_commit_version is not None:
            d["defaultRowCommitVersion"] = self.default_row_commit_version
        if self.clustering_provider is not None:
            d["clusteringProvider"] = self.clustering_provider
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AddFile":
        extra = {k: v for k, v in d.items() if k not in cls._KNOWN}
        return cls(
            d["path"],
            dict(d.get("partitionValues") or {}),
            int(d.get("size") or 0),
            int(d.get("modificationTime") or 0),
            bool(d.get("dataChange", True)),
            d.get("stats"),
            DeletionVectorDescriptor.from_dict(d.get("deletionVector")),
            d.get("tags"),
            d.get("baseRowId"),
            d.get("defaultRowCommitVersion"),
            d.get("clusteringProvider"),
            extra,
        )


@dataclass
class RemoveFile:
    """A logical file leaving the table; kept as a tombstone until VACUUM's retention passes."""

    path: str
    data_change: bool = True
    partition_values: dict[str, str | None] | None = None
    size: int | None = None
    deletion_timestamp: int | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    extended_file_metadata: bool | None = None
    stats: str | None = None
    tags: dict[str, str] | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    extra: dict = field(default_factory=dict, compare=False)

    KEY = "remove"
    _KNOWN = frozenset(
        {
            "path", "deletionTimestamp", "dataChange", "extendedFileMetadata", "partitionValues", "size",
            "stats", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion",
        }
    )

    def __post_init__(self) -> None:
        if self.deletion_timestamp is None:
            self.deletion_timestamp = now_ms()

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.path, _dv_id(self.deletion_vector))

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"path": self.path}
        if self.deletion_timestamp is not None:
            d["deletionTimestamp"] = self.deletion_timestamp
        d["dataChange"] = self.data_change
        if self.extended_file_metadata is not None:
            d["extendedFileMetadata"] = self.extended_file_metadata
        if self.partition_values is not None:
            d["partitionValues"] = dict(self.partition_values)
        if self.size is not None:
            d["size"] = self.size
        if self.stats is not None:
            d["stats"] = self.stats
        if self.tags is not None:
            d["tags"] = dict(self.tags)
        if self.deletion_vector is not None:
            d["deletionVector"] = self.deletion_vector.to_dict()
        if self.base_row_id is not None:
            d["baseRowId"] = self.base_row_id
        if self.default_row_commit_version is not None:
            d["defaultRowCommitVersion"] = self.default_row_commit_version
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RemoveFile":
        remove = cls(
            path=d["path"],
            data_change=bool(d.get("dataChange", True)),
            partition_values=None if d.get("partitionValues") is None else dict(d["partitionValues"]),
            size=d.get("size"),
            deletion_timestamp=0,
            deletion_vector=DeletionVectorDescriptor.from_dict(d.get("deletionVector")),
            extended_file_metadata=d.get("extendedFileMetadata"),
            stats=d.get("stats"),
            tags=d.get("tags"),
            base_row_id=d.get("baseRowId"),
            default_row_commit_version=d.get("defaultRowCommitVersion"),
            extra=_rest(d, cls._KNOWN),
        )
        remove.deletion_timestamp = d.get("deletionTimestamp")  # keep a missing value missing
        return remove


@dataclass
class AddCDCFile:
    """A change-data file (tolerated and round-tripped; isolde does not write CDF)."""

    path: str
    partition_values: dict[str, str | None]
    size: int
    data_change: bool = False
    tags: dict[str, str] | None = None
    extra: dict = field(default_factory=dict, compare=False)

    KEY = "cdc"
    _KNOWN = frozenset({"path", "partitionValues", "size", "dataChange", "tags"})

    def to_dict(self) -> dict:
        d = {"path": self.path, "partitionValues": dict(self.partition_values), "size": self.size, "dataChange": self.data_change}
        if self.tags is not None:
            d["tags"] = dict(self.tags)
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AddCDCFile":
        return cls(
            d["path"], dict(d.get("partitionValues") or {}), int(d.get("size") or 0),
            bool(d.get("dataChange", False)), d.get("tags"), _rest(d, cls._KNOWN),
        )


# --------------------------------------------------------------------------- txn / domain / commitInfo


@dataclass
class SetTransaction:
    """The last version an application (stream, idempotent job) committed: exactly-once writes."""

    app_id: str
    version: int
    last_updated: int | None = None
    extra: dict = field(default_factory=dict, compare=False)

    KEY = "txn"
    _KNOWN = frozenset({"appId", "version", "lastUpdated"})

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"appId": self.app_id, "version": self.version}
        if self.last_updated is not None:
            d["lastUpdated"] = self.last_updated
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SetTransaction":
        return cls(d["appId"], int(d["version"]), d.get("lastUpdated"), _rest(d, cls._KNOWN))


@dataclass
class DomainMetadata:
    """Named configuration owned by a feature (clustering columns, row tracking, ...)."""

    domain: str
    configuration: str
    removed: bool = False
    extra: dict = field(default_factory=dict, compare=False)

    KEY = "domainMetadata"
    _KNOWN = frozenset({"domain", "configuration", "removed"})

    def to_dict(self) -> dict:
        d = {"domain": self.domain, "configuration": self.configuration, "removed": self.removed}
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DomainMetadata":
        return cls(d["domain"], d.get("configuration") or "", bool(d.get("removed", False)), _rest(d, cls._KNOWN))


@dataclass
class CommitInfo:
    """Provenance of one commit; free-form in the protocol, so everything unknown is kept."""

    timestamp: int | None = None
    operation: str | None = None
    operation_parameters: dict[str, str] | None = None
    read_version: int | None = None
    isolation_level: str | None = None
    is_blind_append: bool | None = None
    operation_metrics: dict[str, str] | None = None
    engine_info: str | None = None
    txn_id: str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    KEY = "commitInfo"
    _FIELDS = (
        ("timestamp", "timestamp"),
        ("operation", "operation"),
        ("operation_parameters", "operationParameters"),
        ("read_version", "readVersion"),
        ("isolation_level", "isolationLevel"),
        ("is_blind_append", "isBlindAppend"),
        ("operation_metrics", "operationMetrics"),
        ("engine_info", "engineInfo"),
        ("txn_id", "txnId"),
    )
    _KNOWN = frozenset(k for _, k in _FIELDS)

    def to_dict(self) -> dict:
        d = {key: getattr(self, attr) for attr, key in self._FIELDS if getattr(self, attr) is not None}
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CommitInfo":
        return cls(**{attr: d.get(key) for attr, key in cls._FIELDS}, extra=_rest(d, cls._KNOWN))

    def get(self, key: str, default: Any = None) -> Any:
        """Look a field up by its JSON name (known or extra)."""
        for attr, k in self._FIELDS:
            if k == key:
                value = getattr(self, attr)
                return default if value is None else value
        return self.extra.get(key, default)


Action = Protocol | Metadata | AddFile | RemoveFile | AddCDCFile | SetTransaction | DomainMetadata | CommitInfo

ACTION_TYPES: dict[str, type] = {
    cls.KEY: cls for cls in (Protocol, Metadata, AddFile, RemoveFile, AddCDCFile, SetTransaction, DomainMetadata, CommitInfo)
}


def parse_action(obj: Mapping[str, Any]) -> Action | None:
    """One log line (already JSON-decoded) to an action; None for unknown action types."""
    for key, body in obj.items():
        cls = ACTION_TYPES.get(key)
        if cls is not None and body is not None:
            return cls.from_dict(body)
    return None


def parse_commit(data: bytes | str) -> list[Action]:
    """All known actions of one commit file, in order."""
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    out: list[Action] = []
    for line in data.splitlines():
        line = line.strip()
        if not line:
            continue
        action = parse_action(json.loads(line))
        if action is not None:
            out.append(action)
    return out


def action_to_json(action: Action) -> str:
    return json.dumps({action.KEY: action.to_dict()}, separators=(",", ":"), ensure_ascii=False)


def serialize_commit(actions: list[Action]) -> bytes:
    """The newline-delimited JSON body of a commit file."""
    return ("\n".join(action_to_json(a) for a in actions) + "\n").encode("utf-8")
