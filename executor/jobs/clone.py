"""CREATE [OR REPLACE] TABLE [IF NOT EXISTS] t {SHALLOW | DEEP} CLONE src [VERSION|TIMESTAMP AS OF ...]
[TBLPROPERTIES (...)] [LOCATION '...'].

SHALLOW: the new table's log points at the source's data files by absolute ``file:`` URI
(PROTOCOL.md allows absolute paths in ``add.path``); deletion vectors stored in files
(``u``, relative to the source) become absolute (``p``) descriptors; inline DVs are copied.
No data is copied, so VACUUM on the *source* can later delete files the clone still uses
(as in Delta: VACUUM only looks at its own table).

DEEP: the data files (and DV files) are copied into the new table's folder under the same
relative paths (files a shallow-cloned source points to by absolute path are copied in too, and
their DVs become relative ``u`` DVs), so the clone is independent of the source.

Both: same schema, partitioning, clustering and properties (TBLPROPERTIES override them,
validated like SET TBLPROPERTIES), a new table id, the source protocol (raised when the
properties need more). Operation ``CLONE`` with parameters source / sourceVersion /
isShallow and Delta's metrics (sourceTableSize, sourceNumOfFiles, numRemovedFiles,
numCopiedFiles, removedFilesSize, copiedFilesSize). OR REPLACE of an existing table commits
the removal of all its files in the same version (its protocol is never downgraded).
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid

from isolde.errors import AnalysisError, TableAlreadyExistsError
from ..catalog import properties as P
from ..catalog.warehouse import foreign_entries
from . import executes
from ..log.actions import DeletionVectorDescriptor, DomainMetadata, Metadata
from ..log import table_files
from ..log.deletion_vectors import dv_file_path, z85_encode
from ..session.results import CommitResult, PreparedWrite, QueryResult
from isolde.grammar import ast


def _shallow_add(src_path: str, add):
    path = P.to_file_uri(P.local_path(src_path, add.path))
    dv = add.deletion_vector
    if dv is not None and dv.storage_type == "u":
        abs_dv = dv_file_path(src_path, dv)
        dv = DeletionVectorDescriptor("p", P.to_file_uri(abs_dv), dv.size_in_bytes, dv.cardinality, dv.offset,
                                      dict(dv.extra))
    return dataclasses.replace(add, path=path, deletion_vector=dv, data_change=True)


def _deep_add(src_path: str, dst_path: str, add, copied: list[str], dv_names: dict):
    src_file = P.local_path(src_path, add.path)
    if "://" in add.path or add.path.startswith(("file:", "/")):
        rel = os.path.basename(src_file)  # the source itself was a shallow clone: bring the file home
    else:
        rel = P.local_path("", add.path).lstrip("/")
    dst_file = table_files.join(dst_path, rel)
    if not table_files.exists(dst_file):
        table_files.copy(src_file, dst_file)  # a new mtime: VACUUM sees a new file
        copied.append(dst_file)
    dv = add.deletion_vector
    if dv is not None and dv.storage_type == "u":
        src_dv = dv_file_path(src_path, dv)
        dst_dv = dv_file_path(dst_path, dv)
        if not table_files.exists(dst_dv):
            table_files.copy(src_dv, dst_dv)
            copied.append(dst_dv)
    elif dv is not None and dv.storage_type == "p":  # an absolute DV (the source is a shallow clone): copy it home
        src_dv = dv_file_path(src_path, dv)
        file_id = dv_names.get(src_dv)
        if file_id is None:
            file_id = uuid.uuid4()
            dst_dv = table_files.join(dst_path, f"deletion_vector_{file_id}.bin")
            table_files.copy(src_dv, dst_dv)
            copied.append(dst_dv)
            dv_names[src_dv] = file_id
        dv = DeletionVectorDescriptor("u", z85_encode(file_id.bytes), dv.size_in_bytes, dv.cardinality, dv.offset,
                                      dict(dv.extra))
    return dataclasses.replace(add, path=P.encode_relative(rel), deletion_vector=dv, data_change=True)


@executes(ast.CloneTable)
def run(ctx, stmt: ast.CloneTable):
    src_handle = P.resolve(ctx, stmt.source)
    src = P.snapshot_of(ctx, src_handle, stmt.source)
    target = P.resolve(ctx, stmt.table, must_exist=False, location=stmt.location)
    if table_files.absolute(target.path) == table_files.absolute(src_handle.path):
        raise AnalysisError(f"Cannot clone {src_handle.name} onto itself.", error_class="DELTA_CLONE_SAME_TABLE")
    exists = target.exists
    if exists or (getattr(target, "registration", None) and os.path.exists(target.registration)):
        if stmt.if_not_exists:
            return QueryResult(columns=[], rows=[], message=f"Table {target.name} already exists; nothing cloned.")
        if not stmt.or_replace:
            raise TableAlreadyExistsError(target.name)
    elif foreign_entries(target.path):
        raise AnalysisError(f"Cannot clone into {target.path}: the folder is not empty and is not a Delta table.",
                            error_class="DELTA_CLONE_TARGET_NOT_EMPTY")
    overrides = P.validate_new_properties(P.properties_dict(stmt.properties))
    conf, features, min_reader, min_writer = P.split_feature_properties(overrides)
    config = dict(src.metadata.configuration)
    config.update(conf)
    txn = ctx.start_transaction(target.log)
    current = txn.snapshot
    replacing = current.version >= 0
    metadata = Metadata(
        schema_string=src.metadata.schema_string,
        partition_columns=tuple(src.metadata.partition_columns),
        configuration=config,
        id=current.metadata.id if replacing else Metadata(schema_string="{}").id,
        name=None,
        description=src.metadata.description,
        format_provider=src.metadata.format_provider,
        format_options=dict(src.metadata.format_options),
    )
    protocol = P.protocol_for_metadata(src.protocol, metadata)
    protocol = P.protocol_with(protocol, reader={f for f in features if f in P.READER_WRITER_FEATURES},
                               writer=features, min_reader=min_reader, min_writer=min_writer)
    if replacing:
        protocol = P.merge_protocols(current.protocol, protocol)
    src_root = table_files.absolute(src_handle.path)
    dst_root = table_files.absolute(target.path)
    copied: list[str] = []
    started = time.perf_counter()
    try:
        if stmt.shallow:
            adds = [_shallow_add(src_root, a) for a in src.all_files]
        else:
            if not table_files.is_remote(dst_root):
                os.makedirs(dst_root, exist_ok=True)
            dv_names: dict = {}
            adds = [_deep_add(src_root, dst_root, a, copied, dv_names) for a in src.all_files]
    except FileNotFoundError as e:
        for p in copied:
            table_files.delete(p)
        raise AnalysisError(f"Cannot clone {src_handle.name} at version {src.version}: a file it needs is missing "
                            f"({e.filename}); was it vacuumed?", error_class="DELTA_CLONE_MISSING_FILES")
    removes = [a.remove(data_change=True) for a in current.all_files] if replacing else []
    actions = [protocol, metadata]
    src_domains = src.domain_metadata
    for name, dm in src_domains.items():
        if name == P.CLUSTERING_DOMAIN or not name.startswith("delta."):
            actions.append(DomainMetadata(name, dm.configuration, False))
    if replacing:
        for name, dm in current.domain_metadata.items():
            if name not in src_domains and (name == P.CLUSTERING_DOMAIN or not name.startswith("delta.")):
                actions.append(DomainMetadata(name, dm.configuration, True))
    actions += removes + adds
    source_size = sum(int(a.size or 0) for a in src.all_files)
    metrics = {
        "sourceTableSize": source_size,
        "sourceNumOfFiles": len(src.all_files),
        "numRemovedFiles": len(removes),
        "numCopiedFiles": 0 if stmt.shallow else len(adds),
        "removedFilesSize": sum(int(a.size or 0) for a in removes),
        "copiedFilesSize": 0 if stmt.shallow else source_size,
    }
    params = {"source": src_handle.name, "sourceVersion": src.version, "isShallow": bool(stmt.shallow)}
    operation = "CLONE"

    def commit() -> CommitResult:
        version = P.txn_commit(txn, actions, operation, params, metrics)
        if getattr(target, "external", False) and getattr(target, "registration", None):
            ctx.catalog.register_external(target)
        return CommitResult(version=version, operation=operation, metrics=dict(metrics), table=target.name,
                            elapsed_s=time.perf_counter() - started)

    return PreparedWrite(operation=operation, table=target.name, commit_fn=commit, staged_paths=list(copied),
                         metrics=dict(metrics))


# Pure log work: the session need not wait for Spark to start (no Spark job group).
run.needs_spark = False
