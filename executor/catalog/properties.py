"""Table-property and protocol glue for the ALTER / CLONE / CONVERT / RESTORE / VACUUM jobs.

The log helper's :func:`isolde.executor.log.features.validate_table_properties` checks
values; this module adds what the metadata commands need on top of it:

* the list of ``delta.*`` keys Delta knows, so an unknown key is refused with a
  "did you mean" (``delta.enableDeletionVector`` -> ``delta.enableDeletionVectors``);
* keys a user may not set or unset directly (``delta.constraints.*``: use
  ``ADD/DROP CONSTRAINT``);
* protocol arithmetic: the protocol a new metadata needs, merged with the current one so
  it never goes down (``upgrade_protocol``), and the feature removal ``DROP FEATURE``
  needs (``drop_feature``);
* small helpers: identity-column metadata, local paths of log paths, retention settings.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Mapping, Optional
import unicodedata
from urllib.parse import quote, unquote, urlparse

from isolde.errors import InvalidPropertyError, did_you_mean
from ..log.actions import Metadata, Protocol
from ..log.features import (
    FEATURE_DEPENDENCIES,
    needs_invariants,
    parse_interval_ms,
    reader_features,
    validate_table_properties,
    writer_features,
)

CONSTRAINT_PREFIX = "delta.constraints."
FEATURE_PREFIX = "delta.feature."
CLUSTERING_DOMAIN = "delta.clustering"

#: Table properties Delta Lake defines (canonical spelling). isolde accepts exactly the
#: ones its validator knows; the rest are only used for "did you mean".
KNOWN_DELTA_PROPERTIES = (
    "delta.appendOnly",
    "delta.autoOptimize.autoCompact",
    "delta.autoOptimize.optimizeWrite",
    "delta.checkpoint.writeStatsAsJson",
    "delta.checkpoint.writeStatsAsStruct",
    "delta.checkpointInterval",
    "delta.checkpointRetentionDuration",
    "delta.columnMapping.mode",
    "delta.columnMapping.maxColumnId",
    "delta.dataSkippingNumIndexedCols",
    "delta.dataSkippingStatsColumns",
    "delta.deletedFileRetentionDuration",
    "delta.enableChangeDataFeed",
    "delta.enableDeletionVectors",
    "delta.enableIcebergCompatV2",
    "delta.enableRowTracking",
    "delta.isolationLevel",
    "delta.logRetentionDuration",
    "delta.minReaderVersion",
    "delta.minWriterVersion",
    "delta.randomizeFilePrefixes",
    "delta.targetFileSize",
    "delta.tuneFileSizesForRewrites",
    "delta.universalFormat.enabledFormats",
)

DEFAULT_DELETED_FILE_RETENTION = "interval 1 week"
RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"

# Legacy writer versions and the features they imply (PROTOCOL.md "Table Features").
_LEGACY_WRITER_IMPLIES = {
    2: {"appendOnly", "invariants"},
    3: {"appendOnly", "invariants", "checkConstraints"},
    4: {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"},
    5: {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping"},
    6: {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping",
        "identityColumns"},
}
_LEGACY_FEATURE_VERSION = {"appendOnly": 2, "invariants": 2, "checkConstraints": 3, "changeDataFeed": 4,
                           "generatedColumns": 4, "columnMapping": 5, "identityColumns": 6}
READER_WRITER_FEATURES = frozenset({"deletionVectors", "columnMapping", "timestampNtz", "v2Checkpoint",
                                    "typeWidening", "vacuumProtocolCheck", "variantType"})


# --------------------------------------------------------------------------- properties


def _canonical_known() -> dict[str, str]:
    return {k.lower(): k for k in KNOWN_DELTA_PROPERTIES}


def check_settable(props: Mapping[str, Optional[str]], *, for_unset: bool = False) -> None:
    """Refuse reserved and unknown ``delta.*`` keys with a clear message (and did-you-mean)."""
    known = _canonical_known()
    for key in props:
        lower = key.lower()
        if lower.startswith(CONSTRAINT_PREFIX):
            verb = "DROP CONSTRAINT" if for_unset else "ADD CONSTRAINT"
            raise InvalidPropertyError(
                f"Cannot {'unset' if for_unset else 'set'} `{key}` directly: CHECK constraints are managed with "
                f"ALTER TABLE ... {verb}.", error_class="DELTA_CANNOT_MODIFY_TABLE_PROPERTY")
        if lower.startswith(FEATURE_PREFIX):
            if for_unset:
                raise InvalidPropertyError(
                    f"Cannot unset `{key}`: table features are removed with ALTER TABLE ... DROP FEATURE.",
                    error_class="DELTA_CANNOT_MODIFY_TABLE_PROPERTY")
            continue
        if lower.startswith("delta.") and lower not in known and not _log_knows(key):
            raise InvalidPropertyError(
                f"Unknown Delta table property `{key}`.{did_you_mean(key, all_known_properties())}",
                error_class="DELTA_UNKNOWN_CONFIGURATION", sqlstate="F0000")
        if value_is_none(props, key) and not for_unset:
            raise InvalidPropertyError(f"Table property `{key}` needs a value.")


def _log_knows(key: str) -> bool:
    """Whether the log layer's validator accepts ``key`` as a property name (its value aside)."""
    try:
        validate_table_properties({key: "true"})
    except InvalidPropertyError as e:
        return "Unknown Delta table property" not in e.message
    return True


def all_known_properties() -> list[str]:
    """Every property name isolde knows (for "did you mean" and REPL completion)."""
    from ..log import features as _features

    names = list(KNOWN_DELTA_PROPERTIES)
    for attr in ("_BOOLEAN_PROPERTIES", "_INTERVAL_PROPERTIES", "_POSITIVE_INT_PROPERTIES", "_PASS_THROUGH_PROPERTIES"):
        names.extend(getattr(_features, attr, ()) or ())
    return sorted(dict.fromkeys(n for n in names if not n.endswith(".")))


def value_is_none(props: Mapping, key: str) -> bool:
    return props.get(key) is None


def validate_new_properties(props: Mapping[str, Optional[str]]) -> dict[str, str]:
    """Validated, canonical ``{key: value}`` for SET TBLPROPERTIES / CLONE ... TBLPROPERTIES."""
    check_settable(props)
    try:
        return validate_table_properties({k: v for k, v in props.items()})
    except InvalidPropertyError as e:
        if "Unknown Delta table property" in e.message:
            key = next((k for k in props if f"{k!r}" in e.message), None) or e.message
            raise InvalidPropertyError(f"The Delta table property `{key}` is not supported by isolde.",
                                       error_class="DELTA_UNSUPPORTED_TABLE_PROPERTY") from None
        raise


def canonical_key(key: str) -> str:
    return _canonical_known().get(key.lower(), key)


# --------------------------------------------------------------------------- protocol


def protocol_features(protocol: Protocol, metadata: Optional[Metadata] = None) -> tuple[set[str], set[str]]:
    """(reader features, writer features) a protocol has, legacy versions expanded.

    A legacy writer version implies changeDataFeed / columnMapping, but they are only carried
    over when actually in use (CDF enabled, a column-mapping mode or reader version 2): listing
    them explicitly at writer 7 would make the table need a feature isolde cannot write.
    """
    if protocol.min_writer_version >= 7:
        writer = set(protocol.writer_features or ())
    else:
        writer = set(_LEGACY_WRITER_IMPLIES.get(min(protocol.min_writer_version, 6), set()))
        conf = {k.lower(): str(v).lower() for k, v in (metadata.configuration if metadata is not None else {}).items()}
        if conf.get("delta.enablechangedatafeed", "false") != "true":
            writer.discard("changeDataFeed")
        if protocol.min_reader_version < 2 and conf.get("delta.columnmapping.mode", "none") == "none":
            writer.discard("columnMapping")
    if protocol.min_reader_version >= 3:
        reader = set(protocol.reader_features or ())
    elif protocol.min_reader_version == 2:
        reader = {"columnMapping"}
    else:
        reader = set()
    return reader, writer


def table_features(protocol: Protocol, metadata: Optional[Metadata] = None) -> list[str]:
    """Sorted feature names for DESCRIBE DETAIL (legacy implied features included, as Delta shows)."""
    reader, writer = protocol_features(protocol, metadata)
    return sorted(reader | writer)


def protocol_with(protocol: Protocol, reader: Iterable[str] = (), writer: Iterable[str] = (),
                  min_reader: int = 0, min_writer: int = 0) -> Protocol:
    """``protocol`` plus the given features / versions; never lower than ``protocol``.

    Returns the very same object when nothing changes (so callers can test ``is``).
    Writer-only legacy features on a legacy protocol bump the legacy writer version
    (checkConstraints -> 1/3) as Delta does; anything else moves to table features
    (x/7, and 3/7 when a reader feature is needed).
    """
    add_reader = set(reader)
    add_writer = set(writer) | add_reader
    have_reader, have_writer = protocol_features(protocol)
    new_min_reader = max(protocol.min_reader_version, min_reader)
    new_min_writer = max(protocol.min_writer_version, min_writer)
    if add_reader <= have_reader and add_writer <= have_writer and new_min_reader == protocol.min_reader_version \
            and new_min_writer == protocol.min_writer_version:
        return protocol
    # Stay legacy when possible.
    if protocol.min_writer_version < 7 and not add_reader and new_min_writer < 7 and new_min_reader < 3 and all(
            f in _LEGACY_FEATURE_VERSION for f in add_writer):
        writer_version = max([new_min_writer] + [_LEGACY_FEATURE_VERSION[f] for f in add_writer])
        return Protocol(new_min_reader, writer_version)
    reader_set = (have_reader if protocol.min_reader_version >= 3 else set()) | add_reader
    writer_set = have_writer | add_writer
    if protocol.min_reader_version == 2:  # legacy column mapping -> explicit feature
        reader_set.add("columnMapping")
        writer_set.add("columnMapping")
    if reader_set or new_min_reader >= 3:
        return Protocol(3, 7, sorted(reader_set), sorted(writer_set | reader_set))
    return Protocol(max(new_min_reader, 1), 7, None, sorted(writer_set))


def protocol_for_metadata(protocol: Protocol, metadata: Metadata) -> Protocol:
    """The protocol ``metadata`` needs, starting from ``protocol`` (never downgraded)."""
    conf = {k.lower(): v for k, v in metadata.configuration.items()}
    reader: set[str] = set()
    writer: set[str] = set()
    if str(conf.get("delta.enabledeletionvectors", "")).lower() == "true":
        reader.add("deletionVectors")
    if str(conf.get("delta.enablerowtracking", "")).lower() == "true":
        writer.update({"rowTracking", "domainMetadata"})
    if str(conf.get("delta.appendonly", "")).lower() == "true":
        writer.add("appendOnly")
    if str(conf.get("delta.enablechangedatafeed", "")).lower() == "true":
        writer.add("changeDataFeed")
    if str(conf.get("delta.columnmapping.mode", "none")).lower() != "none":
        reader.add("columnMapping")
    if str(conf.get("delta.enableicebergcompatv2", "")).lower() == "true":
        writer.add("icebergCompatV2")
    if any(k.startswith(CONSTRAINT_PREFIX) for k in conf):
        writer.add("checkConstraints")
    for f in iter_fields(metadata.schema):
        meta = f.get("metadata") or {}
        if "delta.identity.start" in meta:
            writer.add("identityColumns")
        if "delta.generationExpression" in meta:
            writer.add("generatedColumns")
    if needs_invariants(metadata.schema):
        writer.add("invariants")
    for feature, needs in FEATURE_DEPENDENCIES.items():
        if feature in writer:
            writer |= needs
    return protocol_with(protocol, reader=reader, writer=writer)


def split_feature_properties(props: Mapping[str, str]) -> tuple[dict[str, str], set[str], int, int]:
    """Separate ``delta.feature.X`` and ``delta.min{Reader,Writer}Version`` (protocol, not configuration)."""
    conf: dict[str, str] = {}
    features: set[str] = set()
    min_reader = min_writer = 0
    for key, value in props.items():
        lower = key.lower()
        if lower.startswith(FEATURE_PREFIX):
            features.add(key[len(FEATURE_PREFIX):])
        elif lower == "delta.minreaderversion":
            min_reader = _version(key, value, 3)
        elif lower == "delta.minwriterversion":
            min_writer = _version(key, value, 7)
        else:
            conf[key] = value
    return conf, features, min_reader, min_writer


def without_protocol_properties(config: Mapping[str, str]) -> dict[str, str]:
    """``config`` without ``delta.feature.X`` and ``delta.min{Reader,Writer}Version``: they only ask
    for a protocol, and Delta keeps them out of the metadata it writes (a Delta writer's next
    metadata would otherwise drop them, which reads as a concurrent property change)."""
    return {k: v for k, v in config.items() if not is_protocol_property(k)}


def is_protocol_property(key: str) -> bool:
    lower = key.lower()
    return lower.startswith(FEATURE_PREFIX) or lower in ("delta.minreaderversion", "delta.minwriterversion")


def _version(key: str, value: str, maximum: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if not 1 <= number <= maximum:
        raise InvalidPropertyError(f"`{key}` must be an integer between 1 and {maximum}, not {value!r}.")
    return number


def protocol_without(protocol: Protocol, feature: str) -> Protocol:
    """``protocol`` with ``feature`` removed, and the versions lowered to the least that still fit."""
    reader, writer = protocol_features(protocol)
    reader.discard(feature)
    writer.discard(feature)
    if not reader and all(f in _LEGACY_FEATURE_VERSION for f in writer):
        version = 1
        for v in sorted(_LEGACY_WRITER_IMPLIES):
            if writer <= _LEGACY_WRITER_IMPLIES[v]:
                version = v
                break
        else:
            version = 7
        if version < 7:
            needed = max([2] + [_LEGACY_FEATURE_VERSION[f] for f in writer])
            if "columnMapping" in writer:
                return Protocol(2, max(needed, 5))
            return Protocol(1, needed)
    if reader:
        return Protocol(3, 7, sorted(reader), sorted(writer | reader))
    return Protocol(1, 7, None, sorted(writer))


def merge_protocols(a: Protocol, b: Protocol) -> Protocol:
    """The smallest protocol that has everything ``a`` and ``b`` have (RESTORE never downgrades)."""
    reader_b, writer_b = protocol_features(b)
    return protocol_with(a, reader=reader_b, writer=writer_b, min_reader=min(b.min_reader_version, 3)
                         if b.min_reader_version < 3 else 0, min_writer=b.min_writer_version
                         if b.min_writer_version < 7 else 0)


def same_protocol(a: Optional[Protocol], b: Optional[Protocol]) -> bool:
    if a is None or b is None:
        return a is b
    return (a.min_reader_version, a.min_writer_version, sorted(a.reader_features or []),
            sorted(a.writer_features or [])) == (b.min_reader_version, b.min_writer_version,
                                                 sorted(b.reader_features or []), sorted(b.writer_features or []))


# --------------------------------------------------------------------------- schema JSON helpers


def iter_fields(schema: dict):
    """Top-level fields of a Delta schema dict."""
    return list((schema or {}).get("fields") or [])


def copy_metadata(metadata: Metadata, **changes) -> Metadata:
    """A new Metadata action with the same id/created time and ``changes`` applied."""
    base = dict(
        schema_string=metadata.schema_string,
        partition_columns=tuple(metadata.partition_columns),
        configuration=dict(metadata.configuration),
        id=metadata.id,
        name=metadata.name,
        description=metadata.description,
        format_provider=metadata.format_provider,
        format_options=dict(metadata.format_options),
        created_time=metadata.created_time,
        extra=dict(metadata.extra),
    )
    base.update(changes)
    return Metadata(**base)


def clustering_columns(snapshot) -> list[str]:
    """Logical names of a table's clustering columns (``delta.clustering`` domain), or []."""
    domains = getattr(snapshot, "domain_metadata", {}) or {}
    dm = domains.get(CLUSTERING_DOMAIN)
    if dm is None or getattr(dm, "removed", False):
        return []
    try:
        conf = json.loads(dm.configuration or "{}")
    except ValueError:
        return []
    physical_to_logical = {}
    if snapshot.metadata is not None:
        for f in iter_fields(snapshot.metadata.schema):
            phys = (f.get("metadata") or {}).get("delta.columnMapping.physicalName")
            if phys:
                physical_to_logical[phys] = f["name"]
    out = []
    for path in conf.get("clusteringColumns") or []:
        parts = [physical_to_logical.get(p, p) for p in (path if isinstance(path, list) else [path])]
        out.append(".".join(parts))
    return out


# --------------------------------------------------------------------------- paths / retention


def table_root(table_path: str) -> str:
    if table_path.startswith("file:"):
        return unquote(urlparse(table_path).path)
    return table_path


def local_path(table_path: str, log_path: str) -> str:
    """Where a path recorded in the log (relative, percent-encoded; or an absolute URI) lives: a
    local path, or an ``s3a://bucket/key`` URI (decoded) for a table or file on S3."""
    from ..log import table_files
    from ..log.s3_store import is_s3_uri

    if is_s3_uri(log_path):
        parsed = urlparse(log_path)
        return f"s3a://{parsed.netloc}{unquote(parsed.path)}"
    if "://" in log_path or log_path.startswith("file:"):
        return unquote(urlparse(log_path).path)
    if log_path.startswith("/"):
        return unquote(log_path)
    return table_files.join(table_root(table_path), unquote(log_path))


#: what java.net.URI leaves unescaped in a path: unreserved and punctuation characters, '@', '/'
_URI_PATH_SAFE = "/=,;@&$+!*'()~:"


def uri_path_quote(path: str) -> str:
    """``path`` percent-encoded exactly as Hadoop's ``Path.toUri().toString()`` writes it, which is
    what Delta-Spark records in the log: ASCII outside the URI path set is escaped (space -> %20,
    ``%`` -> %25); other Unicode characters stay as they are unless they are control or space
    characters (java.net.URI's "other" set). A path encoded differently names the same file to a
    reader that decodes, but not to Delta's VACUUM, which matches the log's strings to the files it
    lists: a non-ASCII partition value written as %C3%BC was deleted as unreferenced."""
    out = []
    for ch in path:
        if ord(ch) > 127 and not 0x80 <= ord(ch) <= 0x9F and unicodedata.category(ch) not in ("Zs", "Zl", "Zp"):
            out.append(ch)
        else:
            out.append(quote(ch, safe=_URI_PATH_SAFE))
    return "".join(out)


def to_file_uri(abs_path: str) -> str:
    """An absolute local path as a ``file:`` URI the way Hadoop writes it (``=`` kept, space -> %20);
    an ``s3a://bucket/key`` location stays an s3a URI, its key quoted the same way."""
    if abs_path.startswith("s3a://"):
        bucket, _, key = abs_path[6:].partition("/")
        return f"s3a://{bucket}/" + uri_path_quote(key)
    return "file:" + uri_path_quote(os.path.abspath(abs_path))


def encode_relative(rel_path: str) -> str:
    """A table-relative path in the log's percent-encoded form (Hadoop's, as Delta writes it)."""
    return uri_path_quote(rel_path.replace(os.sep, "/"))


def deleted_file_retention_ms(metadata: Optional[Metadata]) -> int:
    text = DEFAULT_DELETED_FILE_RETENTION
    if metadata is not None:
        for k, v in metadata.configuration.items():
            if k.lower() == "delta.deletedfileretentionduration":
                text = v
    try:
        return parse_interval_ms(text)
    except InvalidPropertyError:
        return parse_interval_ms(DEFAULT_DELETED_FILE_RETENTION)


def conf_get(ctx, key: str, default: Optional[str] = None) -> Optional[str]:
    """A session setting: the session's conf store (SET ..., which falls back to Spark's conf),
    else Spark's runtime conf when the context has no store."""
    conf = getattr(ctx, "conf", None)
    if conf is not None:
        try:
            value = conf.get(key, None)
        except Exception:
            value = None
        return default if value is None else str(value)
    spark = getattr(ctx, "spark", None)
    if spark is not None:
        try:
            value = spark.conf.get(key, None)
            if value is not None:
                return str(value)
        except Exception:
            pass
    return default


def properties_dict(props) -> dict[str, Optional[str]]:
    """``ast.Property`` tuple -> ordered dict (later keys win)."""
    out: dict[str, Optional[str]] = {}
    for p in props or ():
        out[p.key] = p.value
    return out


def reader_writer_features(protocol: Protocol, metadata: Optional[Metadata]) -> tuple[set[str], set[str]]:
    """The log helper's view (legacy features counted only when active)."""
    return reader_features(protocol, metadata), writer_features(protocol, metadata)


# --------------------------------------------------------------------------- job glue
# (small helpers the metadata jobs share; kept here so they touch no other helper's module)


def current_database(ctx) -> str:
    for holder in (ctx, getattr(ctx, "session", None)):
        if holder is None:
            continue
        for attr in ("current_database", "database", "current_db"):
            value = getattr(holder, attr, None)
            if isinstance(value, str) and value:
                return value
    return "default"


def resolve(ctx, ref, must_exist: bool = True, location: Optional[str] = None):
    """The TableHandle of ``ref`` through the session catalog."""
    if callable(getattr(ctx, "resolve", None)):
        return ctx.resolve(ref, must_exist=must_exist, location=location)
    return ctx.catalog.resolve(ref, current_database(ctx), must_exist=must_exist, location=location)


def eval_timestamp(ctx, expr) -> object:
    """A TIMESTAMP AS OF expression as something DeltaLog.snapshot(timestamp=...) accepts: an
    aware UTC datetime. A literal without an offset is wall-clock time in the session time zone
    (``spark.sql.session.timeZone``), as Spark reads it; the Python process's zone never matters."""
    import datetime as _dt

    import sqlglot.expressions as exp

    from ..session.context import timestamp_from_spark

    if callable(getattr(ctx, "eval_timestamp", None)):
        return ctx.eval_timestamp(expr)
    tree = getattr(expr, "tree", None)
    if isinstance(tree, exp.Literal) and tree.is_string:
        text = tree.this.strip()
        try:
            value = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            value = None
        if value is not None and value.tzinfo is not None:
            return value.astimezone(_dt.timezone.utc)
        if value is not None:
            zone = _session_zone(conf_get(ctx, "spark.sql.session.timeZone", "UTC"))
            if zone is not None:
                return value.replace(tzinfo=zone).astimezone(_dt.timezone.utc)
    return timestamp_from_spark(ctx.spark, getattr(expr, "sql", str(expr)))


def _session_zone(name: Optional[str]):
    """The tzinfo of a region-based session zone id, or None (let Spark read other spellings)."""
    import datetime as _dt

    if not name or name.upper() in ("UTC", "Z", "GMT", "ETC/UTC"):
        return _dt.timezone.utc
    try:
        import zoneinfo

        return zoneinfo.ZoneInfo(name)
    except Exception:
        return None


def snapshot_of(ctx, handle, ref=None, version: Optional[int] = None, timestamp=None):
    """The snapshot a reference asks for (``VERSION/TIMESTAMP AS OF``), else the latest."""
    if callable(getattr(ctx, "snapshot", None)):
        return ctx.snapshot(handle, version=version if version is not None else getattr(ref, "version", None),
                            timestamp=timestamp if timestamp is not None else getattr(ref, "timestamp", None))
    if ref is not None:
        version = ref.version if version is None else version
        timestamp = ref.timestamp if timestamp is None else timestamp
    if timestamp is not None:
        return handle.log.snapshot(timestamp=eval_timestamp(ctx, timestamp))
    return handle.log.snapshot(version) if version is not None else handle.log.update()


def commit_version(result) -> int:
    """txn.commit(...) may return the version or an object carrying it."""
    if isinstance(result, int):
        return result
    for attr in ("version", "committed_version"):
        value = getattr(result, attr, None)
        if isinstance(value, int):
            return value
    raise TypeError(f"cannot find the committed version in {result!r}")


def str_params(params: Mapping) -> dict[str, str]:
    """operationParameters / operationMetrics as Delta writes them: every value a string (JSON for lists)."""
    out = {}
    for k, v in params.items():
        if v is None:
            continue
        if isinstance(v, str):
            out[k] = v
        elif isinstance(v, bool):
            out[k] = "true" if v else "false"
        elif isinstance(v, (list, dict, tuple)):
            out[k] = json.dumps(v)
        else:
            out[k] = str(v)
    return out


def txn_commit(txn, actions, operation: str, parameters: Mapping, metrics: Optional[Mapping] = None) -> int:
    result = txn.commit(list(actions), operation=operation, operation_parameters=str_params(parameters),
                        metrics=str_params(metrics or {}))
    return commit_version(result)


def add_columns(metadata: Metadata, protocol: Protocol, new_fields) -> tuple[Metadata, Protocol]:
    """The metadata with ``new_fields`` (pyspark StructFields) appended to its schema, and the
    protocol that needs (``with_schema``)."""
    from pyspark.sql import types as T

    from . import schema as S

    added = _without_mapping(T.StructType(list(new_fields)))  # ids from another table mean nothing here
    return with_schema(metadata, protocol, T.StructType(list(S.metadata_schema(metadata).fields) + list(added.fields)))


def with_schema(metadata: Metadata, protocol: Protocol, struct) -> tuple[Metadata, Protocol]:
    """The metadata with the schema ``struct`` (the table's, with fields added: ADD COLUMNS,
    schema evolution), and the protocol that needs. Under column mapping every field that has
    no column id yet, nested ones too, gets the next id and a fresh physical name, and
    ``delta.columnMapping.maxColumnId`` moves on (a field without them makes the schema
    unreadable to other Delta readers)."""
    from . import schema as S

    before = {t.typeName() for f in S.metadata_schema(metadata).fields for t in S.nested_types(f.dataType)}
    changes: dict = {}
    if S.column_mapping_mode(metadata) != "none":
        configuration = dict(metadata.configuration)
        struct, max_id = S.assign_column_mapping(
            struct, int(configuration.get("delta.columnMapping.maxColumnId", "0") or 0),
            nested_ids=S.iceberg_compat_v2(configuration))
        configuration["delta.columnMapping.maxColumnId"] = str(max_id)
        changes["configuration"] = configuration
    changes["schema_string"] = S.struct_to_delta(struct)
    new_metadata = copy_metadata(metadata, **changes)
    new_protocol = protocol_for_metadata(protocol, new_metadata)
    now = {t.typeName() for f in struct.fields for t in S.nested_types(f.dataType)}
    if "timestamp_ntz" in now - before:
        new_protocol = protocol_with(new_protocol, reader={"timestampNtz"}, writer={"timestampNtz"})
    return new_metadata, new_protocol


def _without_mapping(dt):
    """``dt`` with every column-mapping annotation (id, physical name) removed, nested too."""
    from .schema import map_field_metadata

    return map_field_metadata(dt, lambda f: {k: v for k, v in (f.metadata or {}).items()
                                             if not k.startswith("delta.columnMapping.")})
