"""Protocol versions, table features and table properties isolde understands.

A table that needs a feature isolde does not implement is refused with
``UnsupportedFeatureError`` naming the feature, separately for reading and for
writing, so isolde never silently misreads or corrupts a table.
"""

from __future__ import annotations

import re
from typing import Mapping

from isolde.errors import InvalidPropertyError, UnsupportedFeatureError

from .actions import Metadata, Protocol

#: Every table feature isolde implements (reader side and writer side).
SUPPORTED_FEATURES: frozenset[str] = frozenset(
    {
        "deletionVectors",
        "appendOnly",
        "invariants",
        "checkConstraints",
        "generatedColumns",
        "identityColumns",
        "domainMetadata",
        "columnMapping",
        "timestampNtz",
        "rowTracking",
        "clustering",
        # Databricks' preview name of clustering (delta.liquid domain), as delta-rs's test table has it
        "liquid",
        "icebergCompatV2",
        "allowColumnDefaults",
        # checkpoints: UUID-named V2 checkpoints with sidecars are read and (delta.checkpointPolicy
        # = v2) written, never multi-part ones (DeltaLog.checkpoint)
        "v2Checkpoint",
        # a writer restriction on VACUUM only: it checks the read and the write protocol before it
        # deletes anything (executor/jobs/vacuum.py)
        "vacuumProtocolCheck",
        # commit times from commitInfo.inCommitTimestamp (DeltaLog.commit_timestamp); every commit
        # of such a table is stamped (DeltaLog.stamp_in_commit_timestamp, from the transaction)
        "inCommitTimestamp",
        # widened column types (delta.typeChanges in the schema); the preview name is the same
        # feature as Delta 3.x wrote it
        "typeWidening",
        "typeWidening-preview",
        # VARIANT columns (Spark 4's type), the preview name as Delta 3.x wrote it
        "variantType",
        "variantType-preview",
        # with delta.enableChangeDataFeed, UPDATE / DELETE / MERGE write cdc files
        # (executor/rows/cdf.py); table_changes() reads them (executor/jobs/table_changes.py)
        "changeDataFeed",
        # added by DROP FEATURE (executor/jobs/drop_feature.py): log cleanup may remove history
        # before delta.requireCheckpointProtectionBeforeVersion only in one go; isolde's cleanup
        # meets the protocol's exception (a): it creates no checkpoint during cleanup and never
        # erases one after the truncation version (DeltaLog.cleanup_expired_logs)
        "checkpointProtection",
        # isolde's own writer feature: the table's commits go through its commit coordinator
        # (isolde.coordinatedCommits, executor/log/coordinator.py); engines that do not know it
        # read the table and refuse to write it
        "isoldeCoordinatedCommits",
    }
)

#: Features isolde reads but does not write (none at the moment; the refusal names them apart).
READ_ONLY_FEATURES: frozenset[str] = frozenset()

#: Reader-writer features: listed in readerFeatures as well as writerFeatures.
READER_WRITER_FEATURES: frozenset[str] = frozenset(
    {"deletionVectors", "columnMapping", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "typeWidening",
     "typeWidening-preview", "variantType", "variantType-preview"}
)

CHECKPOINT_POLICIES = ("classic", "v2")
DEFAULT_LOG_RETENTION = "interval 30 days"
ICT_ENABLED = "delta.enableInCommitTimestamps"
ICT_ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

# Features implied by legacy writer versions (before table features, writer < 7).
_LEGACY_WRITER_FEATURES = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}

#: Writer features that ask nothing of a writer until a table property turns them on.
_PROPERTY_ENABLED = frozenset({"changeDataFeed", "inCommitTimestamp"})

ISOLATION_LEVELS = ("Serializable", "WriteSerializable")
DEFAULT_ISOLATION_LEVEL = "WriteSerializable"
DEFAULT_CHECKPOINT_INTERVAL = 10


def _feature_active(feature: str, metadata: Metadata | None) -> bool:
    """Whether a legacy-version feature is actually in use (legacy versions imply, not enable)."""
    conf = metadata.configuration if metadata is not None else {}
    if feature == "changeDataFeed":
        return conf.get("delta.enableChangeDataFeed", "false").lower() == "true"
    if feature == "columnMapping":
        return conf.get("delta.columnMapping.mode", "none").lower() != "none"
    if feature == "inCommitTimestamp":
        return conf.get("delta.enableInCommitTimestamps", "false").lower() == "true"
    return True


def reader_features(protocol: Protocol, metadata: Metadata | None = None) -> set[str]:
    if protocol.min_reader_version >= 3:
        return set(protocol.reader_features or ())
    if protocol.min_reader_version == 2:
        return {"columnMapping"} if _feature_active("columnMapping", metadata) else set()
    return set()


def writer_features(protocol: Protocol, metadata: Metadata | None = None) -> set[str]:
    if protocol.min_writer_version >= 7:
        return set(protocol.writer_features or ())
    out: set[str] = set()
    for version, features in _LEGACY_WRITER_FEATURES.items():
        if protocol.min_writer_version >= version:
            out.update(f for f in features if _feature_active(f, metadata))
    return out


def _subject(table: str | None, version: int | None) -> str:
    """'table X' / 'version 3 of table X' / 'the table' for the messages below."""
    name = f"table {table}" if table else "the table"
    return name if version is None or version < 0 else f"version {version} of {name}"


def _features(names: list[str], kind: str) -> str:
    return f"the {kind} feature {names[0]}" if len(names) == 1 else f"the {kind} features {', '.join(names)}"


def unsupported_read(protocol: Protocol, metadata: Metadata | None = None) -> str | None:
    """Why isolde cannot read a table with this protocol and metadata (None: it can)."""
    if protocol.min_reader_version > MAX_READER_VERSION:
        return f"it needs Delta reader version {protocol.min_reader_version}; isolde reads up to {MAX_READER_VERSION}"
    missing = sorted(reader_features(protocol, metadata) - SUPPORTED_FEATURES - READ_ONLY_FEATURES)
    if missing:
        return f"it needs {_features(missing, 'reader')}, which isolde does not support"
    return None


def assert_readable(protocol: Protocol, metadata: Metadata | None = None, table: str | None = None,
                    version: int | None = None) -> None:
    """Refuse to read a table (at ``version``) whose protocol needs something isolde cannot honour.

    Only the protocol of the version being read counts: time travel to a version from before
    a table took on a feature isolde lacks reads that version.
    """
    reason = unsupported_read(protocol, metadata)
    if reason is not None:
        raise UnsupportedFeatureError(f"Cannot read {_subject(table, version)}: {reason}.")


def assert_writable(protocol: Protocol, metadata: Metadata | None = None, table: str | None = None,
                    version: int | None = None) -> None:
    """Refuse to write a table whose protocol (that of its latest ``version``, or the one a commit
    is about to set) needs a writer feature isolde does not implement."""
    subject = f"table {table}" if table else "the table"
    it = f"its version {version}" if version is not None and version >= 0 else "it"
    if protocol.min_writer_version > MAX_WRITER_VERSION:
        raise UnsupportedFeatureError(
            f"Cannot write to {subject}: {it} needs Delta writer version {protocol.min_writer_version}; "
            f"isolde writes up to {MAX_WRITER_VERSION}.",
            error_class="DELTA_UNSUPPORTED_FEATURES_FOR_WRITE",
        )
    # a listed feature that only acts once a property enables it (changeDataFeed: a writer of a
    # table without delta.enableChangeDataFeed writes no change data; inCommitTimestamp without
    # delta.enableInCommitTimestamps stamps nothing) needs nothing of a writer
    # until then; enabling it is a metadata change that this check refuses
    missing = sorted(f for f in writer_features(protocol, metadata) - SUPPORTED_FEATURES
                     if f not in _PROPERTY_ENABLED or _feature_active(f, metadata))
    if missing:
        read_only = [f for f in missing if f in READ_ONLY_FEATURES]
        note = f" (isolde reads {', '.join(read_only)} tables but does not write them)" if read_only else ""
        raise UnsupportedFeatureError(
            f"Cannot write to {subject}: {it} needs {_features(missing, 'writer')}, "
            f"which isolde does not support{note}.",
            error_class="DELTA_UNSUPPORTED_FEATURES_FOR_WRITE",
        )


#: writer features a table must also support when it supports these (PROTOCOL.md: row tracking
#: and clustering keep their state in domain metadata); Delta adds them the same way
FEATURE_DEPENDENCIES = {"rowTracking": frozenset({"domainMetadata"}), "clustering": frozenset({"domainMetadata"})}


def needs_invariants(schema: dict | None) -> bool:
    """Does a schema (Delta's JSON dict) use the invariants writer feature? A NOT NULL column, or a
    legacy ``delta.invariants`` expression, at the top level or inside structs (not inside arrays
    or maps), as Delta's Invariants.getFromSchema counts them: a table-features protocol that
    lacks the feature is refused by Delta-Spark (DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH)."""
    for f in (schema or {}).get("fields") or []:
        if f.get("nullable") is False or "delta.invariants" in (f.get("metadata") or {}):
            return True
        if isinstance(f.get("type"), dict) and f["type"].get("type") == "struct" and needs_invariants(f["type"]):
            return True
    return False


def required_protocol(metadata: Metadata, base: Protocol | None = None) -> Protocol:
    """The smallest protocol for ``metadata``: ``base`` (or 1/2) unless a property needs table features.

    Versions and features never go down: everything ``base`` has is kept.
    """
    conf = {k.lower(): v.lower() for k, v in metadata.configuration.items()}
    reader: set[str] = set()
    writer: set[str] = set()
    if conf.get("delta.enabledeletionvectors") == "true":
        reader.add("deletionVectors")
    if conf.get("delta.enablerowtracking") == "true":
        writer.update({"rowTracking", "domainMetadata"})
    if conf.get("delta.columnmapping.mode", "none") != "none":
        reader.add("columnMapping")
    if conf.get("delta.enableicebergcompatv2") == "true":
        writer.add("icebergCompatV2")
    if conf.get("delta.checkpointpolicy", "classic").strip() == "v2":
        reader.add("v2Checkpoint")
    if conf.get("delta.enabletypewidening") == "true" and "typeWidening-preview" not in (
            set(base.reader_features or ()) if base is not None else set()):
        reader.add("typeWidening")  # a table on the preview feature keeps it (Delta adds no second one)
    if conf.get("delta.enablechangedatafeed") == "true":
        writer.add("changeDataFeed")
    if conf.get(COORDINATED_PROPERTY.lower()) == "true":
        writer.add("isoldeCoordinatedCommits")
    if conf.get(ICT_ENABLED.lower()) == "true" and "inCommitTimestamp" in SUPPORTED_FEATURES:
        writer.add("inCommitTimestamp")
    for key, value in conf.items():
        if key.startswith("delta.feature."):
            name = next((f for f in SUPPORTED_FEATURES if f.lower() == key[len("delta.feature."):]), None)
            if name is not None:
                writer.add(name)
                if name in READER_WRITER_FEATURES:
                    reader.add(name)
    if needs_invariants(metadata.schema):
        writer.add("invariants")
    for feature, needs in FEATURE_DEPENDENCIES.items():
        if feature in writer:
            writer |= needs
    base = base or Protocol(1, 2)
    have_reader = reader_features(base, metadata)
    have_writer = writer_features(base, metadata)
    if reader <= have_reader and (writer | reader) <= have_writer:
        return base
    reader |= have_reader if base.min_reader_version >= 3 else (have_reader & reader)
    writer |= have_writer | reader
    if conf.get("delta.appendonly") == "true":
        writer.add("appendOnly")
    if reader:
        return Protocol(3, 7, sorted(reader), sorted(writer))
    return Protocol(max(1, base.min_reader_version), 7, None, sorted(writer))


# --------------------------------------------------------------------------- table properties

_INTERVAL = re.compile(
    r"^\s*interval\s+(\d+)\s+(second|seconds|minute|minutes|hour|hours|day|days|week|weeks)\s*$", re.IGNORECASE
)
_UNIT_MS = {"second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000}

_BOOLEAN_PROPERTIES = (
    "delta.appendOnly",
    "delta.enableDeletionVectors",
    "delta.enableChangeDataFeed",
    "delta.enableRowTracking",
    "delta.enableIcebergCompatV2",
    "delta.checkpoint.writeStatsAsJson",
    "delta.checkpoint.writeStatsAsStruct",
    "delta.enableExpiredLogCleanup",
)
_INTERVAL_PROPERTIES = (
    "delta.logRetentionDuration",
    "delta.dropFeatureTruncateHistory.retentionDuration",
    "delta.deletedFileRetentionDuration",
    "delta.checkpointRetentionDuration",
)
_POSITIVE_INT_PROPERTIES = ("delta.checkpointInterval", "delta.targetFileSize", "delta.dataSkippingNumIndexedCols")
_PASS_THROUGH_PREFIXES = (
    "delta.constraints.", "delta.rowtracking.", "delta.identity.", "delta.checkpoint.",
    "delta.universalformat.", "delta.columnmapping.", "delta.clustering",
)
# Other Delta properties isolde accepts and stores without interpreting them.
_PASS_THROUGH_PROPERTIES = (
    "delta.requireCheckpointProtectionBeforeVersion",
    "delta.enableTypeWidening",
    "delta.enableInCommitTimestamps",
    "delta.inCommitTimestampEnablementVersion",
    "delta.inCommitTimestampEnablementTimestamp",
    "delta.setTransactionRetentionDuration",
    "delta.autoOptimize.autoCompact",
    "delta.autoOptimize.optimizeWrite",
    "delta.compatibility.symlinkFormatManifest.enabled",
    "delta.parquet.compression.codec",
    "delta.timeUntilArchived",
    "delta.enableIcebergCompatV1",
    "delta.icebergCompatV2.enabled",
)


def parse_interval_ms(text: str) -> int:
    """'interval 7 days' -> milliseconds; InvalidPropertyError for anything else."""
    m = _INTERVAL.match(text or "")
    if not m:
        raise InvalidPropertyError(f"{text!r} is not an interval like 'interval 7 days'.")
    unit = m.group(2).lower().rstrip("s")
    return int(m.group(1)) * _UNIT_MS[unit]


ROW_LEVEL_PROPERTY = "isolde.rowLevelConcurrency"
#: isolde.coordinatedCommits (executor/log/coordinator.py; named here to keep features.py first)
COORDINATED_PROPERTY = "isolde.coordinatedCommits"
#: auto: row level where the reference has it (deletion vectors, no partition columns or
#: CLUSTER BY); always: partitioned deletion-vector tables too; off: file level only
ROW_LEVEL_MODES = ("auto", "always", "off")


def row_level_mode(metadata) -> str:
    """The table's row-level concurrency mode (``isolde.rowLevelConcurrency``, default auto)."""
    if metadata is None:
        return "auto"
    value = str(metadata.configuration.get(ROW_LEVEL_PROPERTY, "auto")).strip().lower()
    return value if value in ROW_LEVEL_MODES else "auto"


def validate_table_properties(conf: Mapping[str, str]) -> dict[str, str]:
    """Check the ``delta.*`` properties isolde interprets; returns them with canonical values.

    Keys are matched case-insensitively (as Delta does) and returned with Delta's spelling.
    Unknown ``delta.`` keys are refused, so a typo never silently does nothing.
    """
    known = {k.lower(): k for k in (*_BOOLEAN_PROPERTIES, *_INTERVAL_PROPERTIES, *_POSITIVE_INT_PROPERTIES)}
    known.update(
        {
            "delta.isolationlevel": "delta.isolationLevel",
            "delta.columnmapping.mode": "delta.columnMapping.mode",
            "delta.columnmapping.maxcolumnid": "delta.columnMapping.maxColumnId",
            "delta.minreaderversion": "delta.minReaderVersion",
            "delta.minwriterversion": "delta.minWriterVersion",
            "delta.universalformat.enabledformats": "delta.universalFormat.enabledFormats",
            "delta.tuneFileSizesForRewrites".lower(): "delta.tuneFileSizesForRewrites",
            "delta.randomizefileprefixes": "delta.randomizeFilePrefixes",
            "delta.datasKippingstatscolumns".lower(): "delta.dataSkippingStatsColumns",
            "delta.checkpointpolicy": "delta.checkpointPolicy",
        }
    )
    known.update({k.lower(): k for k in _PASS_THROUGH_PROPERTIES})
    out: dict[str, str] = {}
    for raw_key, raw_value in conf.items():
        key = str(raw_key)
        value = str(raw_value)
        lower = key.lower()
        if lower.startswith("delta.feature."):
            if value.lower() not in ("supported", "enabled"):
                raise InvalidPropertyError(f"{key} must be 'supported', not {value!r}.")
            feature = key[len("delta.feature."):]
            if feature not in SUPPORTED_FEATURES:
                raise InvalidPropertyError(f"isolde does not support the table feature {feature!r}.")
            out[key] = "supported"
            continue
        if lower == ROW_LEVEL_PROPERTY.lower():
            mode = value.strip().lower()
            if mode not in ROW_LEVEL_MODES:
                raise InvalidPropertyError(
                    f"{ROW_LEVEL_PROPERTY} must be one of {', '.join(ROW_LEVEL_MODES)}, not {value!r}.")
            out[ROW_LEVEL_PROPERTY] = mode
            continue
        if lower == COORDINATED_PROPERTY.lower():
            if value.strip().lower() not in ("true", "false"):
                raise InvalidPropertyError(f"{COORDINATED_PROPERTY} must be true or false, not {value!r}.")
            out[COORDINATED_PROPERTY] = value.strip().lower()
            continue
        if not lower.startswith("delta."):
            out[key] = value
            continue
        canonical = known.get(lower)
        if canonical is None:
            if lower.startswith(_PASS_THROUGH_PREFIXES):
                out[key] = value
                continue
            raise InvalidPropertyError(f"Unknown Delta table property {key!r}.")
        if canonical == "delta.isolationLevel":
            match = {lvl.lower(): lvl for lvl in ISOLATION_LEVELS}.get(value.strip().lower())
            if match is None:
                raise InvalidPropertyError(
                    f"delta.isolationLevel must be one of {', '.join(ISOLATION_LEVELS)}, not {value!r}."
                )
            value = match
        elif canonical in _BOOLEAN_PROPERTIES:
            if value.strip().lower() not in ("true", "false"):
                raise InvalidPropertyError(f"{canonical} must be true or false, not {value!r}.")
            value = value.strip().lower()
        elif canonical in _INTERVAL_PROPERTIES:
            parse_interval_ms(value)
        elif canonical in _POSITIVE_INT_PROPERTIES:
            try:
                number = int(value)
            except ValueError:
                number = 0
            if number <= 0 and not (canonical == "delta.dataSkippingNumIndexedCols" and value.strip() == "-1"):
                raise InvalidPropertyError(f"{canonical} must be a positive integer, not {value!r}.")
        elif canonical == "delta.checkpointPolicy":
            if value.strip().lower() not in CHECKPOINT_POLICIES:
                raise InvalidPropertyError(f"delta.checkpointPolicy must be classic or v2, not {value!r}.")
            value = value.strip().lower()
        elif canonical == "delta.columnMapping.mode":
            if value.lower() not in ("none", "name", "id"):
                raise InvalidPropertyError(f"delta.columnMapping.mode must be none, name or id, not {value!r}.")
            value = value.lower()
        out[canonical] = value
    return out


def isolation_level(metadata: Metadata | None) -> str:
    """The table's write isolation level (``delta.isolationLevel``, default WriteSerializable)."""
    if metadata is None:
        return DEFAULT_ISOLATION_LEVEL
    value = metadata.configuration.get("delta.isolationLevel", DEFAULT_ISOLATION_LEVEL)
    match = {lvl.lower(): lvl for lvl in ISOLATION_LEVELS}.get(value.strip().lower())
    if match is None:
        raise InvalidPropertyError(
            f"delta.isolationLevel must be one of {', '.join(ISOLATION_LEVELS)}, not {value!r}."
        )
    return match


def checkpoint_interval(metadata: Metadata | None) -> int:
    if metadata is None:
        return DEFAULT_CHECKPOINT_INTERVAL
    try:
        value = int(metadata.configuration.get("delta.checkpointInterval", DEFAULT_CHECKPOINT_INTERVAL))
    except ValueError:
        return DEFAULT_CHECKPOINT_INTERVAL
    return value if value > 0 else DEFAULT_CHECKPOINT_INTERVAL


def retention_ms(metadata: Metadata | None, key: str, default: str) -> int:
    text = metadata.configuration.get(key, default) if metadata is not None else default
    try:
        return parse_interval_ms(text)
    except InvalidPropertyError:
        return parse_interval_ms(default)


# --------------------------------------------------------------------------- checkpoints, log retention


def uses_v2_checkpoints(protocol: Protocol | None, metadata: Metadata | None) -> bool:
    """Whether checkpoints of this table are written as V2 (UUID-named, with sidecars): the
    table has the v2Checkpoint feature and ``delta.checkpointPolicy`` is ``v2``."""
    if protocol is None or metadata is None:
        return False
    policy = next((v for k, v in metadata.configuration.items() if k.lower() == "delta.checkpointpolicy"), "classic")
    return str(policy).strip().lower() == "v2" and "v2Checkpoint" in writer_features(protocol, metadata)


def has_v2_checkpoint_feature(protocol: Protocol | None) -> bool:
    return protocol is not None and "v2Checkpoint" in set(protocol.reader_features or ()) | set(
        protocol.writer_features or ())


def expired_log_cleanup_enabled(metadata: Metadata | None) -> bool:
    """``delta.enableExpiredLogCleanup`` (default true)."""
    if metadata is None:
        return False
    value = next((v for k, v in metadata.configuration.items() if k.lower() == "delta.enableexpiredlogcleanup"),
                 "true")
    return str(value).strip().lower() != "false"


DEFAULT_TRUNCATE_HISTORY_RETENTION = "interval 24 hours"


def truncate_history_retention_ms(metadata: Metadata | None) -> int:
    """``delta.dropFeatureTruncateHistory.retentionDuration`` in ms (default 24 hours): the history
    DROP FEATURE ... TRUNCATE HISTORY keeps, and must find free of the feature."""
    text = DEFAULT_TRUNCATE_HISTORY_RETENTION
    if metadata is not None:
        text = next((v for k, v in metadata.configuration.items()
                     if k.lower() == "delta.dropfeaturetruncatehistory.retentionduration"), text)
    try:
        return parse_interval_ms(text)
    except InvalidPropertyError:
        return parse_interval_ms(DEFAULT_TRUNCATE_HISTORY_RETENTION)


def log_retention_ms(metadata: Metadata | None) -> int:
    """``delta.logRetentionDuration`` in ms (default 30 days)."""
    text = DEFAULT_LOG_RETENTION
    if metadata is not None:
        text = next((v for k, v in metadata.configuration.items() if k.lower() == "delta.logretentionduration"), text)
    try:
        return parse_interval_ms(text)
    except InvalidPropertyError:
        return parse_interval_ms(DEFAULT_LOG_RETENTION)


def in_commit_timestamps_enabled(metadata: Metadata | None) -> bool:
    """``delta.enableInCommitTimestamps`` is true (commit times come from commitInfo.inCommitTimestamp)."""
    if metadata is None:
        return False
    value = next((v for k, v in metadata.configuration.items() if k.lower() == ICT_ENABLED.lower()), "false")
    return str(value).strip().lower() == "true"


def in_commit_timestamp_enablement(metadata: Metadata | None) -> tuple[int, int | None] | None:
    """(first version with in-commit timestamps, its timestamp) for a table that has them on,
    (0, None) when they were on from the start; None when they are off."""
    if not in_commit_timestamps_enabled(metadata):
        return None
    conf = metadata.configuration
    try:
        version = int(conf[ICT_ENABLEMENT_VERSION])
        timestamp = int(conf[ICT_ENABLEMENT_TIMESTAMP])
    except (KeyError, ValueError, TypeError):
        return (0, None)
    return (version, timestamp)
