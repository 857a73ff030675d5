"""ALTER TABLE ... RENAME COLUMN / DROP COLUMN[S]: metadata-only schema changes that column
mapping makes possible (Delta's rule): files name their columns by physical name (and field
id), so a rename changes only the logical name and a drop only forgets the field -- no file is
rewritten, the dropped values stay in old files unread, and ``delta.columnMapping.maxColumnId``
never goes down, so a column added later under the same name gets a new id and physical name.

Both are metadata changes: every concurrent writer fails with MetadataChangedException."""

from __future__ import annotations

import json

from isolde.errors import AnalysisError, ColumnNotFoundError
from ..catalog import properties as P
from ..catalog.warehouse import check_identifier
from ..catalog import schema as S
from . import executes
from .alter import _begin, _dependents, _noop, prepared_log_write
from ..log.type_widening import resolve
from isolde.grammar import ast


def _require_column_mapping(snap, table: str, what: str) -> None:
    if S.column_mapping_mode(snap.metadata) == "none":
        raise AnalysisError(
            f"{what} needs column mapping, and table {table} has none: its files name columns by their names. "
            "Create the table with TBLPROPERTIES ('delta.columnMapping.mode' = 'name').",
            error_class="DELTA_UNSUPPORTED_DROP_COLUMN" if what.startswith("DROP") else
            "DELTA_UNSUPPORTED_RENAME_COLUMN", sqlstate="0AKDC")


def _struct_field(schema: dict, path: tuple, table: str):
    """(the list holding the field, the field) for a top-level column or a struct field path."""
    found = resolve(schema, path)
    if found is None or found.inner:  # arrays' elements / maps' keys are no columns to rename or drop
        return None
    parent = schema if len(path) == 1 else resolve(schema, path[:-1]).current
    return parent["fields"], found.holder


def _refuse_dependents(snap, path: tuple, table: str, verb: str) -> None:
    constraints, generated = _dependents(snap, path)
    name = ".".join(path)
    if constraints:
        raise AnalysisError(f"Cannot {verb} column {name} of {table}: the CHECK constraint(s) "
                            f"{', '.join(f'{k} ({v})' for k, v in constraints.items())} use it. Drop them first.",
                            error_class="DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE", sqlstate="42K09")
    if generated:
        raise AnalysisError(f"Cannot {verb} column {name} of {table}: the generated column(s) "
                            f"{', '.join(f'{k} ({v})' for k, v in generated.items())} use it.",
                            error_class="DELTA_GENERATED_COLUMNS_DEPENDENT_COLUMN_CHANGE", sqlstate="42K09")


def _clustering_columns(snap) -> set:
    dm = snap.domain_metadata.get("delta.clustering")
    if dm is None or dm.removed:
        return set()
    physical = {p.lower() for cols in json.loads(dm.configuration or "{}").get("clusteringColumns", []) for p in cols[:1]}
    return {f["name"].lower() for f in snap.metadata.schema.get("fields", [])
            if str((f.get("metadata") or {}).get(S.PHYSICAL_NAME, f["name"])).lower() in physical}


def _commit(handle, txn, snap, schema: dict, operation: str, params: dict, partition_columns=None):
    changes = {"schema_string": json.dumps(schema, separators=(",", ":"))}
    if partition_columns is not None:
        changes["partition_columns"] = tuple(partition_columns)
    return prepared_log_write(handle, txn, operation, [P.copy_metadata(snap.metadata, **changes)], params)


@executes(ast.RenameColumn)
def rename_column(ctx, stmt: ast.RenameColumn):
    handle, txn, snap = _begin(ctx, stmt.table)
    _require_column_mapping(snap, handle.name, "RENAME COLUMN")
    schema = json.loads(json.dumps(snap.metadata.schema))  # a copy to edit
    found = _struct_field(schema, stmt.column, handle.name)
    if found is None:
        raise ColumnNotFoundError(".".join(stmt.column), handle.name, [f["name"] for f in schema.get("fields", [])])
    siblings, field = found
    old = field["name"]
    check_identifier(stmt.new_name, "column")
    if stmt.new_name == old:
        return _noop(f"{handle.name}.{'.'.join(stmt.column)} is already called {old}; nothing to change.")
    if any(f is not field and f["name"].lower() == stmt.new_name.lower() for f in siblings):
        raise AnalysisError(f"Cannot rename column {'.'.join(stmt.column)} of {handle.name} to {stmt.new_name}: "
                            "a column of that name already exists.",
                            error_class="DELTA_DUPLICATE_COLUMNS_FOUND", sqlstate="42711")
    _refuse_dependents(snap, stmt.column, handle.name, "rename")
    field["name"] = stmt.new_name
    parts = None
    if len(stmt.column) == 1 and old.lower() in {c.lower() for c in snap.metadata.partition_columns}:
        parts = [stmt.new_name if c.lower() == old.lower() else c for c in snap.metadata.partition_columns]
    params = {"oldColumnPath": ".".join(stmt.column), "newColumnPath": ".".join(stmt.column[:-1] + (stmt.new_name,))}
    return _commit(handle, txn, snap, schema, "RENAME COLUMN", params, parts)


@executes(ast.DropColumns)
def drop_columns(ctx, stmt: ast.DropColumns):
    handle, txn, snap = _begin(ctx, stmt.table)
    _require_column_mapping(snap, handle.name, "DROP COLUMN")
    schema = json.loads(json.dumps(snap.metadata.schema))
    partitions = {c.lower() for c in snap.metadata.partition_columns}
    clustering = _clustering_columns(snap)
    dropped = []
    for path in stmt.columns:
        found = _struct_field(schema, path, handle.name)
        if found is None:
            if stmt.if_exists:
                continue
            raise ColumnNotFoundError(".".join(path), handle.name, [f["name"] for f in schema.get("fields", [])])
        siblings, field = found
        top = path[0].lower()
        if len(path) == 1 and top in partitions:
            raise AnalysisError(f"Cannot drop column {field['name']} of {handle.name}: it is a partition column.",
                                error_class="DELTA_DROP_PARTITION_COLUMN", sqlstate="42000")
        if len(path) == 1 and top in clustering:
            raise AnalysisError(f"Cannot drop column {field['name']} of {handle.name}: it is a clustering column "
                                "(ALTER TABLE ... CLUSTER BY without it first).",
                                error_class="DELTA_UNSUPPORTED_DROP_CLUSTERING_COLUMN", sqlstate="0AKDC")
        _refuse_dependents(snap, path, handle.name, "drop")
        if len(siblings) == 1:
            raise AnalysisError(f"Cannot drop column {'.'.join(path)} of {handle.name}: it is the last field "
                                f"{'of its struct' if len(path) > 1 else 'of the table'}.",
                                error_class="DELTA_DROP_COLUMN_ON_SINGLE_FIELD_SCHEMA", sqlstate="0AKDC")
        siblings.remove(field)
        dropped.append(".".join(path))
    if not dropped:
        return _noop(f"None of the columns exist in {handle.name}; nothing to drop.")
    return _commit(handle, txn, snap, schema, "DROP COLUMNS", {"columns": json.dumps(dropped)})
