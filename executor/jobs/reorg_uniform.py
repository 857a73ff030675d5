"""``REORG TABLE t APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2))``: Delta's three commits
(``ReorgTableForUpgradeUniformHelper.doRewrite``, docs/uniform-design.md §6).

1. ``SET TBLPROPERTIES`` ("upgrade uniform properties"): ``delta.enableIcebergCompatV2 = true``,
   ``delta.enableDeletionVectors = false``, column mapping in name mode when the table had none
   (every field gets an id, its physical name = its current name, so the old files stay
   readable; arrays / maps get nested ids; ``delta.columnMapping.maxColumnId``), protocol with
   ``columnMapping`` + ``icebergCompatV2``.
2. ``REORG`` (dataChange = false): every live file without ``tags.ICEBERG_COMPAT_VERSION = "2"``
   is rewritten (field ids, INT64 timestamps, deletion-vector rows dropped: this is also the
   purge); the new files carry the tag.
3. ``SET TBLPROPERTIES delta.universalFormat.enabledFormats = iceberg``: its post-commit hook
   writes the first Iceberg metadata (executor/log/uniform.py).

A step with nothing to do commits nothing. Each step is its own transaction, as in Delta: a
failure after step 1 leaves a compat table that a re-run finishes.
"""

from __future__ import annotations

import dataclasses
import json
import time

from pyspark.sql import types as T

from isolde.errors import UnsupportedFeatureError
from ..catalog import properties as P
from ..catalog import schema as S
from ..session.results import CommitResult, PreparedWrite
from ..txn import row_tracking
from ..txn.row_level import TableFiles

ICEBERG_COMPAT_TAG = "ICEBERG_COMPAT_VERSION"
ENABLED_FORMATS = "delta.universalFormat.enabledFormats"


def _conf_get(conf: dict, key: str):
    for k, v in conf.items():
        if k.lower() == key.lower():
            return k, v
    return key, None


def _put(conf: dict, key: str, value: str) -> None:
    existing, _ = _conf_get(conf, key)
    conf[existing] = value


def _with_current_names(dt):
    """Every field (nested too) with physical name = its current name (set before ids are assigned:
    S.assign_column_mapping keeps an existing physical name)."""
    return S.map_field_metadata(dt, lambda f: {**(f.metadata or {}),
                                               S.PHYSICAL_NAME: (f.metadata or {}).get(S.PHYSICAL_NAME, f.name)})


def upgrade_to_name_mapping(struct: T.StructType, conf: dict, *, nested_ids: bool) -> T.StructType:
    """Column mapping for a table that had none (or ids missing on some fields): every field gets
    an id, and a field without a physical name takes its current name as one, so the files already
    written stay readable without a rewrite. ``conf`` gets mode name (when it was none) and
    ``delta.columnMapping.maxColumnId``; the struct with the new field metadata is returned."""
    mode = str(_conf_get(conf, "delta.columnMapping.mode")[1] or "none").lower()
    if mode == "none":
        struct = _with_current_names(struct)
        _put(conf, "delta.columnMapping.mode", "name")
    start = int(_conf_get(conf, "delta.columnMapping.maxColumnId")[1] or 0)
    new_struct, max_id = S.assign_column_mapping(struct, start, nested_ids=nested_ids)  # existing ids are kept
    _put(conf, "delta.columnMapping.maxColumnId", str(max(max_id, start)))
    return new_struct


_ALLOWED = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType,
            T.StringType, T.BinaryType, T.BooleanType, T.TimestampType, T.TimestampNTZType, T.DateType)


def check_types(struct: T.StructType, partition_columns, table: str) -> None:
    """IcebergCompatV2's type allow-list (CheckTypeInV2AllowList / CheckPartitionDataTypeInV2AllowList)."""
    def walk(dt, path):
        if isinstance(dt, T.StructType):
            for f in dt.fields:
                walk(f.dataType, f"{path}.{f.name}" if path else f.name)
        elif isinstance(dt, T.ArrayType):
            walk(dt.elementType, path + ".element")
        elif isinstance(dt, T.MapType):
            walk(dt.keyType, path + ".key")
            walk(dt.valueType, path + ".value")
        elif not isinstance(dt, _ALLOWED):
            raise UnsupportedFeatureError(
                f"Cannot enable UniForm (IcebergCompatV2) on {table}: column `{path}` has the type "
                f"{dt.simpleString()}, which Iceberg cannot represent.",
                error_class="DELTA_ICEBERG_COMPAT_VIOLATION.UNSUPPORTED_DATA_TYPE", sqlstate="KD00E")
    walk(struct, "")


def _bins(files, target: int) -> list[list]:
    """Files lacking the compat tag, bin-packed per partition (every such file is rewritten)."""
    from .optimize import pack_by_partition

    return pack_by_partition([f for f in files if (f.tags or {}).get(ICEBERG_COMPAT_TAG) != "2"
                              or f.deletion_vector is not None], target)


def _step1_properties(ctx, handle):
    txn = ctx.start_transaction(handle.log)
    snap = txn.snapshot
    conf = dict(snap.metadata.configuration)
    struct = S.metadata_schema(snap.metadata)
    check_types(struct, snap.metadata.partition_columns, handle.name)
    changes = {}
    new_struct = upgrade_to_name_mapping(struct, conf, nested_ids=True)
    if S.struct_to_delta(new_struct) != S.struct_to_delta(S.metadata_schema(snap.metadata)):
        changes["schema_string"] = S.struct_to_delta(new_struct)
    _put(conf, "delta.enableIcebergCompatV2", "true")
    _put(conf, "delta.enableDeletionVectors", "false")
    if conf != dict(snap.metadata.configuration):
        changes["configuration"] = conf
    if not changes:
        return None
    metadata = P.copy_metadata(snap.metadata, **changes)
    protocol = P.protocol_with(P.protocol_for_metadata(snap.protocol, metadata),
                               reader={"columnMapping"}, writer={"columnMapping", "icebergCompatV2"})
    actions = ([] if P.same_protocol(protocol, snap.protocol) else [protocol]) + [metadata]
    props = {k: v for k, v in conf.items() if snap.metadata.configuration.get(k) != v}
    return P.txn_commit(txn, actions, "SET TBLPROPERTIES", {"properties": json.dumps(props)})


def _step2_rewrite(ctx, handle):
    from . import optimize as O

    txn = ctx.start_transaction(handle.log)
    snap = txn.snapshot
    target = O.target_file_size(ctx, snap.metadata)
    considered = list(snap.all_files)
    bins = _bins(considered, target)
    if not bins:
        return None, {}
    hidden = row_tracking.materialized_columns(snap.metadata) or ()
    bins, groups = O._bin_pack_groups(ctx, handle, snap, bins, hidden)
    files = TableFiles(handle.path, snap.metadata)

    def tag(add, inputs):
        add = O._tagged(add, inputs, files)
        return dataclasses.replace(add, tags={**(add.tags or {}), ICEBERG_COMPAT_TAG: "2"})

    params = {"predicate": "[]", "applyPurge": "false", "icebergCompatVersion": "2"}
    prepared = O._rewrite(ctx, handle, txn, snap, where_sql=None, bins=bins, groups=groups, tag=tag,
                          operation="REORG", params=params, hidden=hidden, considered=len(considered))
    result = prepared.commit()
    return result.version, dict(result.metrics or {})


def _step3_enable(ctx, handle):
    txn = ctx.start_transaction(handle.log)
    snap = txn.snapshot
    conf = dict(snap.metadata.configuration)
    key, value = _conf_get(conf, ENABLED_FORMATS)
    formats = [f.strip() for f in str(value or "").split(",") if f.strip()]
    if "iceberg" in [f.lower() for f in formats]:
        return None
    conf[key] = ",".join(formats + ["iceberg"])
    metadata = P.copy_metadata(snap.metadata, configuration=conf)
    return P.txn_commit(txn, [metadata], "SET TBLPROPERTIES", {"properties": json.dumps({key: conf[key]})})


def run_upgrade_uniform(ctx, stmt):
    if stmt.iceberg_compat_version != 2:
        raise UnsupportedFeatureError(
            f"REORG TABLE ... APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION={stmt.iceberg_compat_version})) is not "
            "supported: isolde writes IcebergCompatV2 (ICEBERG_COMPAT_VERSION=2).",
            error_class="UNSUPPORTED_FEATURE", sqlstate="0A000")
    if stmt.where is not None:
        raise UnsupportedFeatureError("REORG ... APPLY (UPGRADE UNIFORM(...)) upgrades the whole table: drop the "
                                      "WHERE clause.", error_class="UNSUPPORTED_FEATURE", sqlstate="0A000")
    handle = P.resolve(ctx, stmt.table)
    started = time.perf_counter()

    def commit() -> CommitResult:
        versions = []
        v1 = _step1_properties(ctx, handle)
        versions.append(v1)
        v2, metrics = _step2_rewrite(ctx, handle)
        versions.append(v2)
        v3 = _step3_enable(ctx, handle)
        versions.append(v3)
        done = [v for v in versions if v is not None]
        version = done[-1] if done else handle.log.update().version
        return CommitResult(version=version, operation="REORG", metrics=metrics, table=handle.name,
                            elapsed_s=time.perf_counter() - started)

    return PreparedWrite(operation="REORG", table=handle.name, commit_fn=commit)
