"""``ALTER TABLE t DROP FEATURE f [TRUNCATE HISTORY]``: Delta 4's two ways of letting a feature go.

Default (Delta's fast drop):
1. Pre-downgrade, each its own commit as Delta does: the property that turns the feature on is
   turned off (``SET TBLPROPERTIES``), and its traces leave the current version (deletion
   vectors: ``REORG TABLE ... APPLY (PURGE)`` rewrites the files that carry them; v2 checkpoints:
   ``delta.checkpointPolicy = classic`` and a classic checkpoint of the latest version).
2. The downgrade commit: the protocol without the feature, lowered to the least that fits.
   A reader-writer feature (deletionVectors, typeWidening, v2Checkpoint, vacuumProtocolCheck) leaves traces in
   history that a client without it cannot read, so the commit adds the writer feature
   ``checkpointProtection`` and ``delta.requireCheckpointProtectionBeforeVersion`` = its own
   version, and protected checkpoints are written at the versions before and of the downgrade:
   a reader that lacks the feature starts there and never meets the older commits. Writer-only
   features (inCommitTimestamp, checkConstraints, allowColumnDefaults) are dropped directly.

``TRUNCATE HISTORY`` (Delta's legacy full downgrade, for writers that lack checkpointProtection):
the same pre-downgrade, then the history younger than
``delta.dropFeatureTruncateHistory.retentionDuration`` (24 hours) must hold no trace of the
feature (deletion vectors on added / removed files, metadata turning it on): otherwise
DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD says to run it again once that much time has passed.
When it holds none, the log is truncated to that window (a checkpoint at its start, everything
older deleted) and the protocol is downgraded without checkpointProtection. ``DROP FEATURE
checkpointProtection`` itself needs TRUNCATE HISTORY and a barrier older than the window.

Every drop reads the whole table: a concurrent writer that starts relying on the feature fails.
"""

from __future__ import annotations

import datetime as dt
import os

from isolde.errors import AnalysisError, ExecutionError, UnsupportedFeatureError
from ..catalog import properties as P
from ..catalog import schema as S
from . import executes
from .alter import _begin, prepared_log_write
from ..log import features as F
from isolde.grammar import ast

PROTECTION = "checkpointProtection"
BARRIER_KEY = "delta.requireCheckpointProtectionBeforeVersion"

_FEATURE_NAMES = ["deletionVectors", "appendOnly", "invariants", "checkConstraints", "changeDataFeed",
                  "generatedColumns", "columnMapping", "identityColumns", "domainMetadata", "rowTracking", "clustering",
                  "timestampNtz", "icebergCompatV2", "v2Checkpoint", "typeWidening", "vacuumProtocolCheck",
                  "inCommitTimestamp", "allowColumnDefaults", "variantType", PROTECTION, "isoldeCoordinatedCommits"]

#: removable features -> the table properties that turn them on (set off / removed with the feature)
_DROPPABLE = {
    "deletionVectors": {"delta.enableDeletionVectors": "false"},
    "vacuumProtocolCheck": {},
    "inCommitTimestamp": {"delta.enableInCommitTimestamps": "false",
                          "delta.inCommitTimestampEnablementVersion": None,
                          "delta.inCommitTimestampEnablementTimestamp": None},
    "checkConstraints": {},
    "allowColumnDefaults": {},
    "typeWidening": {"delta.enableTypeWidening": "false"},
    "typeWidening-preview": {"delta.enableTypeWidening": "false"},
    "v2Checkpoint": {"delta.checkpointPolicy": "classic"},
    PROTECTION: {BARRIER_KEY: None},
    # opting out of the commit coordinator: the drop itself is the last coordinated commit; from
    # the next one on, commits are written directly and other engines may write the table again
    "isoldeCoordinatedCommits": {"isolde.coordinatedCommits": None, "isolde.coordinator": None},
}


def _still_used(snap, name: str) -> str | None:
    """Why ``name`` cannot be dropped from ``snap`` yet (None: it can). Delta's rule: a feature
    goes only when nothing in the table's current state still relies on it."""
    conf = snap.metadata.configuration

    def walk(fields):  # every field, nested struct fields too
        for f in fields:
            yield f
            t = f.get("type")
            if isinstance(t, dict) and t.get("type") == "struct":
                yield from walk(t.get("fields", []))

    fields = list(walk(snap.metadata.schema.get("fields", [])))
    if name == "deletionVectors":
        with_dv = [a for a in snap.all_files if a.deletion_vector is not None]
        if with_dv:
            return (f"{len(with_dv)} live file(s) still have deletion vectors. Run REORG TABLE {{table}} APPLY (PURGE) "
                    "first to rewrite them, then DROP FEATURE again")
    elif name == "checkConstraints":
        names = [k[len(P.CONSTRAINT_PREFIX):] for k in conf if k.lower().startswith(P.CONSTRAINT_PREFIX)]
        if names:
            return f"the CHECK constraint(s) {', '.join(names)} still exist. Drop them first (ALTER TABLE ... DROP CONSTRAINT)"
    elif name == "allowColumnDefaults":
        with_default = [f["name"] for f in fields if S.CURRENT_DEFAULT in (f.get("metadata") or {})]
        if with_default:
            return f"column(s) {', '.join(with_default)} still have a DEFAULT"
    elif name in ("typeWidening", "typeWidening-preview"):
        widened = [f["name"] for f in fields if "delta.typeChanges" in (f.get("metadata") or {})]
        if widened:
            return (f"column(s) {', '.join(widened)} were widened and older files still hold the narrower type; "
                    "rewrite the table (e.g. CREATE OR REPLACE TABLE ... AS SELECT) first")
    return None


def _canonical(feature: str) -> str:
    known = _FEATURE_NAMES + ["typeWidening-preview"]
    return next((f for f in known if f.lower() == feature.lower()), feature)


def _check_droppable(handle, snap, name: str, given: str) -> None:
    if name not in _DROPPABLE:
        from isolde.errors import did_you_mean

        known = _FEATURE_NAMES + ["typeWidening-preview"]
        if name not in known:
            raise AnalysisError(f"Unknown table feature `{given}`.{did_you_mean(given, known)}",
                                error_class="DELTA_FEATURE_DROP_UNSUPPORTED_CLIENT_FEATURE", sqlstate="0AKDC")
        raise UnsupportedFeatureError(
            f"DROP FEATURE {name} is not supported by isolde; the features it can drop: "
            f"{', '.join(sorted(_DROPPABLE))}.", error_class="DELTA_FEATURE_DROP_NONREMOVABLE_FEATURE", sqlstate="0AKDC")
    reader, writer = P.protocol_features(snap.protocol)
    if name not in reader and name not in writer:
        raise AnalysisError(f"Cannot drop feature {name}: {handle.name} does not have it "
                            f"(features: {', '.join(sorted(reader | writer)) or 'none'}).",
                            error_class="DELTA_FEATURE_DROP_FEATURE_NOT_PRESENT", sqlstate="0AKDC")


def _is_on(conf: dict, key: str) -> bool:
    return any(k.lower() == key.lower() and str(v).strip().lower() == "true" for k, v in conf.items())


def _pre_downgrade(ctx, stmt, name: str) -> bool:
    """Delta's pre-downgrade commands: turn the property off, then remove the feature's traces
    from the current version. Returns whether anything was committed."""
    handle, txn, snap = _begin(ctx, stmt.table)
    did = False
    if name == "deletionVectors" and _is_on(snap.metadata.configuration, "delta.enableDeletionVectors"):
        conf = {k: v for k, v in snap.metadata.configuration.items() if k.lower() != "delta.enabledeletionvectors"}
        conf["delta.enableDeletionVectors"] = "false"
        P.txn_commit(txn, [P.copy_metadata(snap.metadata, configuration=conf)], "SET TBLPROPERTIES",
                     {"properties": '{"delta.enableDeletionVectors":"false"}'})
        did = True
        snap = handle.log.update()
    if name == "v2Checkpoint" and F.uses_v2_checkpoints(snap.protocol, snap.metadata):
        conf = {k: v for k, v in snap.metadata.configuration.items() if k.lower() != "delta.checkpointpolicy"}
        conf["delta.checkpointPolicy"] = "classic"
        version = P.txn_commit(txn, [P.copy_metadata(snap.metadata, configuration=conf)], "SET TBLPROPERTIES",
                               {"properties": '{"delta.checkpointPolicy":"classic"}'})
        handle.log.checkpoint(version, cleanup=False)  # a classic checkpoint readers without v2 can start from
        did = True
    if name == "deletionVectors" and any(a.deletion_vector is not None for a in snap.all_files):
        from .optimize import run_reorg

        out = run_reorg(ctx, ast.Reorg(table=stmt.table, purge=True))
        if hasattr(out, "commit"):
            out.commit()
        did = True
    if name in ("typeWidening", "typeWidening-preview"):
        if _is_on(snap.metadata.configuration, "delta.enableTypeWidening"):
            conf = {k: v for k, v in snap.metadata.configuration.items() if k.lower() != "delta.enabletypewidening"}
            conf["delta.enableTypeWidening"] = "false"
            P.txn_commit(txn, [P.copy_metadata(snap.metadata, configuration=conf)], "SET TBLPROPERTIES",
                         {"properties": '{"delta.enableTypeWidening":"false"}'})
            did = True
        did = _rewrite_narrow_files(ctx, handle) or did
        did = _forget_type_changes(ctx, stmt) or did
    return did


#: the Arrow type a Spark-written Parquet column of each Delta primitive reads back as
_ARROW_OF = {"byte": "int8", "short": "int16", "integer": "int32", "long": "int64", "float": "float",
             "double": "double", "date": "date32[day]", "timestamp_ntz": "timestamp[us]"}


def _needs_rewrite(schema, changes) -> bool:
    """Whether a file (its Parquet footer's Arrow ``schema``) may hold a type narrower than the
    table's: a top-level primitive column is checked exactly; anything nested is assumed to."""
    names = set(schema.names)
    for column, to_type in changes:
        if column not in names:
            continue  # added after the change: written wide
        expected = _ARROW_OF.get(to_type) if isinstance(to_type, str) else None
        if isinstance(to_type, str) and to_type.startswith("decimal"):
            expected = to_type.replace("decimal", "decimal128").replace(" ", "")
        actual = str(schema.field(column).type).replace(" ", "")
        if expected is None or actual != expected:
            return True
    return False


def _widened_columns(snap) -> list:
    """(physical top-level column, the table's type: a primitive name, or None when nested)."""
    from ..log import type_widening as TW

    fields = {f["name"]: f for f in snap.metadata.schema.get("fields", [])}
    out = []
    for path, _ in TW.all_type_changes(snap.metadata.schema):
        top = fields[path[0]]
        physical = (top.get("metadata") or {}).get(S.PHYSICAL_NAME, top["name"])
        nested = len(path) > 1 or not isinstance(top.get("type"), str)
        out.append((physical, None if nested else top["type"]))
    return out


def _rewrite_narrow_files(ctx, handle) -> bool:
    """Delta's type-widening pre-downgrade rewrite: every live file that may still hold a column
    in its type from before a change is rewritten in the table's current types (dataChange =
    false, operation REORG), so no reader needs to widen anything."""
    import pyarrow.parquet as pq

    from . import optimize as O
    from ..txn import row_tracking
    from ..txn.row_level import TableFiles

    txn = ctx.start_transaction(handle.log)
    snap = txn.snapshot
    changes = _widened_columns(snap)
    if not changes:
        return False
    files = TableFiles(handle.path, snap.metadata)
    narrow = [a for a in snap.all_files if _needs_rewrite(pq.read_schema(files.local(a.path)), changes)]
    if not narrow:
        return False
    bins = O.pack_by_partition(narrow, O.target_file_size(ctx, snap.metadata))
    hidden = row_tracking.materialized_columns(snap.metadata) or ()
    bins, groups = O._bin_pack_groups(ctx, handle, snap, bins, hidden)
    params = {"predicate": "[]", "applyPurge": "false", "rewriteTypeWidening": "true"}
    prepared = O._rewrite(ctx, handle, txn, snap, where_sql=None, bins=bins, groups=groups,
                          tag=lambda add, inputs: O._tagged(add, inputs, files), operation="REORG", params=params,
                          hidden=hidden, considered=len(snap.all_files))
    prepared.commit()
    return True


def _forget_type_changes(ctx, stmt) -> bool:
    """Once no file holds an old type, the schema's ``delta.typeChanges`` records go (a metadata
    commit), which is what lets the feature leave."""
    from ..log import type_widening as TW

    handle, txn, snap = _begin(ctx, stmt.table)
    if not TW.has_type_changes(snap.metadata.schema):
        return False

    def strip(t):
        if isinstance(t, dict) and t.get("type") == "struct":
            return {**t, "fields": [{**f, "type": strip(f.get("type")),
                                     "metadata": {k: v for k, v in (f.get("metadata") or {}).items()
                                                  if k != TW.TYPE_CHANGES}} for f in t.get("fields", [])]}
        if isinstance(t, dict) and t.get("type") == "array":
            return {**t, "elementType": strip(t.get("elementType"))}
        if isinstance(t, dict) and t.get("type") == "map":
            return {**t, "keyType": strip(t.get("keyType")), "valueType": strip(t.get("valueType"))}
        return t

    import json

    schema = strip({"type": "struct", "fields": snap.metadata.schema.get("fields", [])})
    metadata = P.copy_metadata(snap.metadata, schema_string=json.dumps(schema, separators=(",", ":")))
    txn.read_whole_table()  # a writer still on the old types must not commit under the change
    P.txn_commit(txn, [metadata], "SET TBLPROPERTIES", {"properties": "{}"})
    return True


def _uses_feature(action, name: str) -> bool:
    """Whether one log action is a trace of ``name`` (Delta's ``actionUsesFeature``)."""
    from ..log.actions import AddFile, Metadata, RemoveFile

    if name == "deletionVectors":
        if isinstance(action, (AddFile, RemoveFile)):
            return action.deletion_vector is not None
        if isinstance(action, Metadata):
            return _is_on(action.configuration, "delta.enableDeletionVectors")
    if name in ("typeWidening", "typeWidening-preview") and isinstance(action, Metadata):
        return "delta.typeChanges" in action.schema_string
    return False


def _wait_error(handle, name: str, retention_ms: int, last_trace: int | None, log) -> ExecutionError:
    hours = retention_ms / 3_600_000
    when = ""
    if last_trace is not None:
        ready = dt.datetime.fromtimestamp((log.commit_file_time(last_trace) + retention_ms) / 1000, dt.timezone.utc)
        when = f" (version {last_trace} still uses it; run it again after {ready:%Y-%m-%d %H:%M} UTC)"
    if name == PROTECTION:
        return ExecutionError(
            f"Cannot drop {PROTECTION} from {handle.name} yet: its protected history (before version "
            f"{last_trace}) is younger than {hours:g} hours (delta.dropFeatureTruncateHistory.retentionDuration){when}.",
            error_class="DELTA_FEATURE_DROP_CHECKPOINT_PROTECTION_WAIT_FOR_RETENTION_PERIOD", sqlstate="0AKDE")
    return ExecutionError(
        f"The feature {name} was turned off and its traces removed from the current version of {handle.name}, "
        f"but the last {hours:g} hours of history still use it{when}. Wait until they are older, then run "
        f"ALTER TABLE {handle.name} DROP FEATURE {name} TRUNCATE HISTORY again; or drop it now without "
        "TRUNCATE HISTORY (protected checkpoints keep the history readable).",
        error_class="DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD", sqlstate="0AKDE")


def _truncate_for_drop(handle, snap, name: str) -> None:
    """TRUNCATE HISTORY: the window of history that stays must be free of the feature; then the
    log is cut to it. Raises the wait error otherwise."""
    log = handle.log
    retention = F.truncate_history_retention_ms(snap.metadata)
    first_kept = log.versions_within(retention, snapshot=snap)
    if name == PROTECTION:
        barrier = int(snap.metadata.configuration.get(BARRIER_KEY, "0") or 0)
        if first_kept <= barrier:  # history before the barrier must go in one go, and it is still young
            raise _wait_error(handle, name, retention, barrier, log)
    elif name == "v2Checkpoint":  # its traces are checkpoint files, not commits
        from ..log.checkpoint import is_v2_checkpoint_name

        traces = sorted(int(n[:20]) for n in os.listdir(log.log_path)
                        if is_v2_checkpoint_name(n) and int(n[:20]) >= first_kept - 1)
        if traces:
            raise _wait_error(handle, name, retention, traces[-1], log)
    else:
        traces = [v for v in range(first_kept, snap.version + 1)
                  if any(_uses_feature(a, name) for a in log.read_commit(v))]
        if traces:
            raise _wait_error(handle, name, retention, traces[-1], log)
    log.truncate_history(first_kept, snap)


@executes(ast.DropFeature)
def drop_feature(ctx, stmt: ast.DropFeature):
    """Remove a table feature Delta lets go once nothing relies on it (see the module's text)."""
    handle, txn, snap = _begin(ctx, stmt.table)
    name = _canonical(stmt.feature)
    _check_droppable(handle, snap, name, stmt.feature)
    if name == PROTECTION and not stmt.truncate_history:
        raise ExecutionError(f"{PROTECTION} can only be dropped with TRUNCATE HISTORY: ALTER TABLE {handle.name} "
                             f"DROP FEATURE {PROTECTION} TRUNCATE HISTORY.",
                             error_class="DELTA_FEATURE_CAN_ONLY_DROP_CHECKPOINT_PROTECTION_WITH_HISTORY_TRUNCATION",
                             sqlstate="0AKDE")
    if _pre_downgrade(ctx, stmt, name):
        handle, txn, snap = _begin(ctx, stmt.table)
    why = _still_used(snap, name)
    if why:
        raise ExecutionError(f"Cannot drop feature {name} from {handle.name}: {why.format(table=handle.name)}.",
                             error_class="DELTA_FEATURE_DROP_FEATURE_IS_IN_USE", sqlstate="0AKDE")
    protect = name in F.READER_WRITER_FEATURES and not stmt.truncate_history
    if stmt.truncate_history and (name in F.READER_WRITER_FEATURES or name == PROTECTION):
        _truncate_for_drop(handle, snap, name)
        handle, txn, snap = _begin(ctx, stmt.table)
    configuration = {k: v for k, v in snap.metadata.configuration.items()
                     if k.lower() != f"delta.feature.{name.lower()}"}  # else the feature comes back
    for key, value in _DROPPABLE[name].items():
        for k in list(configuration):
            if k.lower() == key.lower():
                configuration.pop(k)
        if value is not None:
            configuration[key] = value
    protocol = P.protocol_without(snap.protocol, name)
    if protect:
        protocol = P.protocol_with(protocol, writer={PROTECTION})
        configuration[BARRIER_KEY] = str(txn.read_version + 1)
        txn.max_attempts = 1  # the barrier is this commit's own version: never rebased past it
    metadata = P.copy_metadata(snap.metadata, configuration=configuration)
    # a concurrent write that starts relying on the feature (a DELETE adding a deletion vector, an
    # ADD CONSTRAINT) must not slip in under the downgrade: the drop reads the whole table
    txn.read_whole_table()
    params = {"featureName": name, "truncateHistory": bool(stmt.truncate_history)}
    prepared = prepared_log_write(handle, txn, "DROP FEATURE", [protocol, metadata], params)
    if not protect:
        return prepared
    commit = prepared.commit_fn

    def commit_with_protected_checkpoints():
        result = commit()
        if result.version > 0:  # the versions before and of the downgrade
            handle.log.checkpoint(result.version - 1, cleanup=False)
        handle.log.checkpoint(result.version, cleanup=False)
        return result

    prepared.commit_fn = commit_with_protected_checkpoints
    return prepared


drop_feature.needs_spark = lambda stmt, session=None: stmt.feature.lower() in ("deletionvectors", "typewidening",
                                                                                "typewidening-preview")
