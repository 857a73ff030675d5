"""Which concurrent protocol and metadata changes a transaction may commit over (Delta 4.1+).

Delta used to fail every transaction that lost to a protocol or metadata change. Since 4.1 its
ConflictChecker lets a transaction that changes neither commit over a winner that only *enables*
a feature whose rules a commit prepared without it already meets (FeatureEnablementConcurrencySuite):
deletion vectors (a writer may choose not to write them), v2 checkpoints (a checkpoint concern),
in-commit timestamps (isolde stamps each attempt from the commit before it), column mapping
none -> name (existing columns keep their names as physical names). isolde follows the reference.

Two rules, as Delta's: the protocol may gain features but lose none (a supported feature asks
nothing of a writer until a property or the schema turns it on; Delta 4.4 leaves its stricter
``conflictChecker.enforceConcurrentFeatureEnablement`` off by default); the metadata may only differ in an allow-listed property set to the enabling value (and, for column
mapping, in the column-mapping field metadata that mode adds); an identity column's high-water
mark may move (Delta's "identity-only metadata update"). Anything else -- removed
properties, any other key, schema or partitioning changes, disabling -- is a conflict.

Row tracking (``delta.enableRowTracking = true``, with the feature and its backfill of row ids
if the protocol lacked it) is tolerated too: the transaction numbers its new files from the
table as the winner left it (transaction.py starts a row id assigner on that winner), and its
commit is tagged as not preserving row ids, as Delta tags it.
"""

from __future__ import annotations

import json

from ..log.actions import Metadata, Protocol

_LEGACY_WRITER = {2: ("appendOnly", "invariants"), 3: ("checkConstraints",),
                  4: ("changeDataFeed", "generatedColumns"), 5: ("columnMapping",), 6: ("identityColumns",)}

CM_MODE = "delta.columnMapping.mode"
CM_MAX_ID = "delta.columnMapping.maxColumnId"
_CM_FIELD_KEYS = ("delta.columnMapping.id", "delta.columnMapping.physicalName")
IDENTITY_HWM = "delta.identity.highWaterMark"
ROW_TRACKING = "delta.enableRowTracking"
ROW_TRACKING_COLUMNS = ("delta.rowTracking.materializedRowIdColumnName",
                        "delta.rowTracking.materializedRowCommitVersionColumnName")


def protocol_features(protocol: Protocol) -> set[str]:
    """Every feature ``protocol`` supports (legacy versions: every feature they imply)."""
    out = set(protocol.reader_features or ()) if protocol.min_reader_version >= 3 else set()
    if protocol.min_reader_version == 2:
        out.add("columnMapping")
    if protocol.min_writer_version >= 7:
        return out | set(protocol.writer_features or ())
    for version, features in _LEGACY_WRITER.items():
        if protocol.min_writer_version >= version:
            out.update(features)
    return out


def protocol_change_conflicts(read: Protocol | None, winner: Protocol) -> str | None:
    """Why a winner's protocol fails a transaction that read ``read`` and changes no protocol
    itself (None: it does not). As Delta 4.4 by default, only a removed feature does: a feature
    that is merely supported asks nothing of a writer until a metadata change turns it on, and
    that change meets ``metadata_change_conflicts``. (The caller also refuses a protocol isolde
    cannot write; row tracking's row ids are assigned from the winner on, in transaction.py.)"""
    if read is None:
        return "The winning commit changed the table protocol."
    before, after = protocol_features(read), protocol_features(winner)
    if before - after or winner.min_reader_version < read.min_reader_version \
            or winner.min_writer_version < read.min_writer_version:
        return f"The winning commit removed table features ({', '.join(sorted(before - after)) or 'a version'})."
    return None


def _enables(key: str, value: str, was_set: bool, before: dict, features: set[str]) -> bool:
    """Is setting ``key`` to ``value`` a feature enablement a prepared commit may ignore?"""
    lowered = value.strip().lower()
    if key == "delta.enableDeletionVectors":
        return lowered == "true" and "deletionVectors" in features
    if key == "delta.checkpointPolicy":
        return lowered == "v2" and "v2Checkpoint" in features
    if key == "delta.enableInCommitTimestamps":
        return lowered == "true" and "inCommitTimestamp" in features
    if key in ("delta.inCommitTimestampEnablementVersion", "delta.inCommitTimestampEnablementTimestamp"):
        return not was_set
    if key == CM_MODE:
        return lowered == "name" and before.get(CM_MODE, "none").lower() == "none" and "columnMapping" in features
    if key == CM_MAX_ID:
        return True
    if key == ROW_TRACKING:
        return lowered == "true" and "rowTracking" in features
    if key in ROW_TRACKING_COLUMNS:
        return not was_set
    return False


def _schema_core(node, name_mapping: bool):
    """A schema JSON node without what a prepared commit may ignore: an identity column's
    high-water mark (each generated value moves it; Delta tolerates an identity-only update) and,
    when column mapping by name is being enabled, the field ids and physical names it adds.
    None when a physical name differs from its field's name (a rename: a real schema change)."""
    if isinstance(node, list):
        out = [_schema_core(n, name_mapping) for n in node]
        return None if any(o is None for o, n in zip(out, node) if n is not None) else out
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "metadata" and isinstance(value, dict):
            physical = value.get("delta.columnMapping.physicalName")
            if name_mapping and physical is not None and physical != node.get("name"):
                return None
            dropped = (IDENTITY_HWM, *(_CM_FIELD_KEYS if name_mapping else ()))
            value = {k: v for k, v in value.items() if k not in dropped}
        else:
            value = _schema_core(value, name_mapping)
            if value is None and node.get(key) is not None:
                return None
        out[key] = value
    return out


def _table_properties(configuration: dict) -> dict:
    from ..catalog.properties import is_protocol_property

    return {k: v for k, v in (configuration or {}).items() if not is_protocol_property(k)}


def identity_only_update(read: Metadata | None, new: Metadata) -> bool:
    """Does ``new`` differ from ``read`` only in identity high-water marks? Such a commit is tagged
    ``delta.identity.schemaUpdate`` (Delta's IDENTITY_COMMITINFO_TAG), by which Delta's checker lets
    a concurrent transaction that changes no metadata commit over it."""
    if read is None or read.schema_string == new.schema_string:
        return False
    if (read.id, read.name, read.description, read.format_provider, tuple(read.partition_columns),
            read.configuration) != (new.id, new.name, new.description, new.format_provider,
                                    tuple(new.partition_columns), new.configuration):
        return False
    return _schema_core(json.loads(new.schema_string), False) == _schema_core(json.loads(read.schema_string), False)


IDENTITY_TAG = "delta.identity.schemaUpdate"


def metadata_change_conflicts(read: Metadata | None, winner: Metadata, protocol: Protocol | None) -> str | None:
    """Why a winner's metadata fails a transaction that read ``read`` and changes no metadata
    itself (None: the winner only enabled features the transaction's commit already honours).
    ``protocol``: the table's protocol as of the winner (its own, or the latest before it)."""
    if read is None or protocol is None:
        return "The winning commit changed the table's metadata."
    if (read.id, read.name, read.description, read.format_provider, tuple(read.partition_columns)) != \
            (winner.id, winner.name, winner.description, winner.format_provider, tuple(winner.partition_columns)):
        return "The winning commit changed the table's identity, description or partitioning."
    # delta.feature.X / delta.min*Version only ask for a protocol (the protocol check judges that):
    # Delta drops them from the metadata it writes, which is no change of a property
    before, after = _table_properties(read.configuration), _table_properties(winner.configuration)
    if set(before) - set(after):
        return f"The winning commit removed the table properties {', '.join(sorted(set(before) - set(after)))}."
    features = protocol_features(protocol)
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    refused = sorted(k for k, v in changed.items() if not _enables(k, v, k in before, before, features))
    if refused:
        return f"The winning commit changed the table properties {', '.join(refused)}."
    if read.schema_string != winner.schema_string:
        name_mapping = CM_MODE in changed
        old, new = json.loads(read.schema_string), json.loads(winner.schema_string)
        if _schema_core(new, name_mapping) != _schema_core(old, name_mapping):
            return "The winning commit changed the table's schema."
    return None
