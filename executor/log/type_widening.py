"""Type widening (PROTOCOL.md "Type Widening"; Delta's TypeWidening.scala / TypeWideningMetadata.scala).

A table with the ``typeWidening`` (or ``typeWidening-preview``) feature may have columns whose
type was widened after data was written: older Parquet files still hold the narrower type, and
the field records each change in its metadata under ``delta.typeChanges`` (``fromType``,
``toType``, ``fieldPath`` for a map key/value or array element, ``tableVersion`` in preview
tables). Pure logic over Delta schema JSON (no Spark): which changes are allowed, recording a
change, validating a table's recorded changes on read, and which statistics stop being true
bounds after a change.

Reading needs no per-file cast: Spark 4's Parquet readers (vectorized and parquet-mr, nested
too) widen every change in Delta's list natively (measured on Spark 4.3, files written by Spark
and by pyarrow; tests/executor/jobs/test_type_widening.py keeps it true).
"""

from __future__ import annotations

import copy
import re
from typing import Any, Iterator, Optional, Sequence

from isolde.errors import AnalysisError, UnsupportedFeatureError

TYPE_CHANGES = "delta.typeChanges"
ENABLE_PROPERTY = "delta.enableTypeWidening"
FEATURES = ("typeWidening", "typeWidening-preview")

_INTEGRAL = ("byte", "short", "integer", "long")
_NUMERIC_ORDER = ("byte", "short", "integer", "long", "float", "double")  # Spark's legalNumericPrecedence
_INTEGRAL_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 20}
_SQL = {"byte": "TINYINT", "short": "SMALLINT", "integer": "INT", "long": "BIGINT", "float": "FLOAT",
        "double": "DOUBLE", "date": "DATE", "timestamp_ntz": "TIMESTAMP_NTZ", "timestamp": "TIMESTAMP",
        "string": "STRING", "boolean": "BOOLEAN", "binary": "BINARY", "variant": "VARIANT", "void": "VOID"}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")


# --------------------------------------------------------------------------- atomic types


def _decimal(t: Any) -> Optional[tuple[int, int]]:
    if not isinstance(t, str):
        return None
    m = _DECIMAL.match(t.strip().lower())
    return (int(m.group(1)), int(m.group(2))) if m else None


def sql_name(t: Any) -> str:
    """Spark's SQL spelling of a Delta JSON type (``integer`` -> ``INT``, ``decimal(10,2)`` ->
    ``DECIMAL(10,2)``), for messages as Delta words them."""
    if isinstance(t, str):
        d = _decimal(t)
        if d is not None:
            return f"DECIMAL({d[0]},{d[1]})"
        return _SQL.get(t.lower(), t.upper())
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "array":
            return f"ARRAY<{sql_name(t.get('elementType'))}>"
        if kind == "map":
            return f"MAP<{sql_name(t.get('keyType'))}, {sql_name(t.get('valueType'))}>"
        if kind == "struct":
            return "STRUCT<" + ", ".join(f"{f['name']}: {sql_name(f['type'])}" for f in t.get("fields", [])) + ">"
    return str(t).upper()


def _wider_decimal(to: tuple[int, int], integer_digits: int, scale: int) -> bool:
    """Spark's DecimalType.isWiderThan: no fewer integer digits, no smaller scale."""
    return to[0] - to[1] >= integer_digits and to[1] >= scale


def is_supported_change(from_type: str, to_type: str) -> bool:
    """Delta's TypeWidening.isTypeChangeSupported for atomic types (equal types included)."""
    a, b = from_type.strip().lower(), to_type.strip().lower()
    if a == b:
        return True
    da, db = _decimal(a), _decimal(b)
    if a in _INTEGRAL and b in _INTEGRAL:
        return _INTEGRAL.index(a) <= _INTEGRAL.index(b)
    if (a, b) in (("float", "double"), ("date", "timestamp_ntz")):
        return True
    if a in ("byte", "short", "integer") and b == "double":
        return True
    if da is not None and db is not None:
        return _wider_decimal(db, da[0] - da[1], da[1])
    if a in ("byte", "short", "integer") and db is not None:  # INT32 in Parquet: decimal(10, 0) and wider
        return _wider_decimal(db, 10, 0)
    if a == "long" and db is not None:
        return _wider_decimal(db, 20, 0)
    return False


def iceberg_compatible(from_type: str, to_type: str) -> bool:
    """Delta's isTypeChangeSupportedByIceberg: what UniForm tables may still do."""
    a, b = from_type.strip().lower(), to_type.strip().lower()
    if a == b:
        return True
    if not is_supported_change(a, b):
        return False
    da, db = _decimal(a), _decimal(b)
    if a in _INTEGRAL and b in _INTEGRAL or (a, b) == ("float", "double"):
        return True
    return da is not None and db is not None and da[1] == db[1] and da[0] <= db[0]


def can_up_cast(from_type: str, to_type: str) -> bool:
    """Spark's Cast.canUpCast for atomic types: a change Spark lets through to Delta (which may
    still refuse it); anything else Spark refuses itself (NOT_SUPPORTED_CHANGE_COLUMN)."""
    a, b = from_type.strip().lower(), to_type.strip().lower()
    if a == b or a == "void" or b == "string":
        return True
    da, db = _decimal(a), _decimal(b)
    if db is not None:
        if da is not None:
            return _wider_decimal(db, da[0] - da[1], da[1])
        return a in _INTEGRAL_DIGITS and _wider_decimal(db, _INTEGRAL_DIGITS[a], 0)
    if da is not None:
        return b in _INTEGRAL_DIGITS and da[1] == 0 and da[0] < _INTEGRAL_DIGITS[b]
    if a in _NUMERIC_ORDER and b in _NUMERIC_ORDER:
        return _NUMERIC_ORDER.index(a) <= _NUMERIC_ORDER.index(b)
    return (a, b) in (("date", "timestamp"), ("date", "timestamp_ntz"), ("timestamp_ntz", "timestamp"),
                      ("timestamp", "timestamp_ntz"))


def _is_string(t: Any) -> bool:
    return isinstance(t, str) and (t.lower() == "string" or t.lower().startswith(("char", "varchar")))


# --------------------------------------------------------------------------- recorded changes


def type_changes(field: dict) -> list[dict]:
    """The ``delta.typeChanges`` entries of one schema field (a list of dicts; [] when none)."""
    value = (field.get("metadata") or {}).get(TYPE_CHANGES)
    return [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []


def _struct_fields(t: Any) -> Iterator[tuple[tuple[str, ...], dict]]:
    """(path inside ``t``, field) of every struct field reachable in a type, through arrays and maps."""
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            for f in t.get("fields", []):
                yield (f["name"],), f
                for path, inner in _struct_fields(f.get("type")):
                    yield (f["name"], *path), inner
        elif kind == "array":
            for path, inner in _struct_fields(t.get("elementType")):
                yield ("element", *path), inner
        elif kind == "map":
            for part, key in (("key", "keyType"), ("value", "valueType")):
                for path, inner in _struct_fields(t.get(key)):
                    yield (part, *path), inner


def all_type_changes(schema: dict) -> list[tuple[tuple[str, ...], dict]]:
    """(path of the field holding it, change) for every recorded type change, nested ones too."""
    out = []
    for path, f in _struct_fields({"type": "struct", "fields": (schema or {}).get("fields", [])}):
        out += [(path, c) for c in type_changes(f)]
    return out


def has_type_changes(schema: dict) -> bool:
    return any(True for _ in all_type_changes(schema))


def check_readable(schema: dict) -> None:
    """Refuse a schema recording a type change outside Delta's list (a non-compliant writer),
    as Delta's TypeWidening.assertTableReadable does: reading it could not be right."""
    for path, change in all_type_changes(schema):
        a, b = change.get("fromType"), change.get("toType")
        if _is_string(a) and _is_string(b):
            continue  # char/varchar/string changes are not type widening
        if isinstance(a, str) and isinstance(b, str) and is_supported_change(a, b):
            continue
        inner = [p for p in str(change.get("fieldPath") or "").split(".") if p]
        raise UnsupportedFeatureError(
            "Unable to operate on this table because an unsupported type change was applied. Field "
            f"{'.'.join((*path, *inner))} was changed from {sql_name(a)} to {sql_name(b)}.",
            error_class="DELTA_UNSUPPORTED_TYPE_CHANGE_IN_SCHEMA", sqlstate="0AKDC")


def stats_types(schema: dict) -> dict[str, str]:
    """lower-cased top-level column -> the type its statistics must be read as, for columns whose
    older files' statistics are not true bounds in the current type.

    Only float -> double needs it: another engine prints a FLOAT statistic as the shortest
    decimal that rounds to the float (Delta wrote 3.4 for 3.4000000953674316), which as a DOUBLE
    is no bound at all (0.7 for 0.699999988079071 is above the value). Read as a FLOAT
    (float32 rounding, one float ulp outward) it stays a bound, and every true double bound of
    a file written after the change stays one too. The other changes keep a statistic's meaning
    (integers are exact in a long, a decimal or a double; JSON decimals are values, not unscaled
    digits, so a scale increase changes nothing; a date ``2024-09-09`` is midnight as a
    timestamp_ntz), and nested fields have no statistics isolde uses."""
    out = {}
    for f in (schema or {}).get("fields", []):
        if any(not c.get("fieldPath") and str(c.get("fromType", "")).lower() == "float" for c in type_changes(f)):
            out[f["name"].lower()] = "float"
    return out


# --------------------------------------------------------------------------- changing a type


def _find_field(fields: list, name: str) -> Optional[dict]:
    return next((f for f in fields if f["name"].lower() == name.lower()), None)


class TypeChange:
    """A resolved ``ALTER COLUMN path TYPE new``: the field holding the metadata, the path inside
    it (``element`` / ``key`` / ``value`` steps), and the type found there."""

    def __init__(self, holder: dict, inner: tuple[str, ...], current: Any, names: tuple[str, ...]):
        self.holder = holder
        self.inner = inner
        self.current = current
        self.names = names  # the path as spelled in the schema

    @property
    def display(self) -> str:
        return ".".join(self.names)


def resolve(schema: dict, path: Sequence[str]) -> Optional[TypeChange]:
    """Find ``path`` (``c``, ``s.x``, ``arr.element``, ``m.value``, ``m.key``) in a schema; None
    when it names nothing."""
    fields = (schema or {}).get("fields", [])
    holder = None
    inner: tuple[str, ...] = ()
    names: list[str] = []
    current: Any = {"type": "struct", "fields": fields}
    for part in path:
        low = part.lower()
        kind = current.get("type") if isinstance(current, dict) else None
        if kind == "struct":
            f = _find_field(current.get("fields", []), part)
            if f is None:
                return None
            holder, inner, current = f, (), f.get("type")
            names.append(f["name"])
        elif kind == "array" and low == "element":
            inner, current = inner + ("element",), current.get("elementType")
            names.append("element")
        elif kind == "map" and low in ("key", "value"):
            inner, current = inner + (low,), current.get("keyType" if low == "key" else "valueType")
            names.append(low)
        else:
            return None
    if holder is None:
        return None
    return TypeChange(holder, inner, current, tuple(names))


def _replace_inner(t: Any, inner: tuple[str, ...], new: Any) -> Any:
    if not inner:
        return new
    t = dict(t)
    step, rest = inner[0], inner[1:]
    key = {"element": "elementType", "key": "keyType", "value": "valueType"}[step]
    t[key] = _replace_inner(t[key], rest, new)
    return t


def widened_schema(schema: dict, change: TypeChange, to_type: str, *, record: bool,
                   table_version: Optional[int] = None) -> dict:
    """A copy of ``schema`` with ``change``'s field set to ``to_type``; with ``record`` the change
    is appended to the holder's ``delta.typeChanges`` (``tableVersion`` for preview tables, as
    Delta keeps it for preview clients), older entries kept."""
    out = copy.deepcopy(schema)
    target = resolve(out, change.names)
    assert target is not None
    holder = target.holder
    from_type = target.current
    holder["type"] = _replace_inner(holder.get("type"), target.inner, to_type)
    if record and from_type != to_type:
        entry: dict = {}
        if table_version is not None:
            entry["tableVersion"] = int(table_version)
        entry.update({"fromType": from_type, "toType": to_type})
        if target.inner:
            entry["fieldPath"] = ".".join(target.inner)
        meta = dict(holder.get("metadata") or {})
        meta[TYPE_CHANGES] = [*type_changes(holder), entry]
        holder["metadata"] = meta
    return out


def check_change(change: TypeChange, to_type: Any, *, enabled: bool, iceberg: bool, table: str) -> None:
    """Refuse ``ALTER COLUMN ... TYPE to_type`` as Delta does (its error classes):

    * a struct / array / map replaced as a whole: DELTA_CANNOT_UPDATE_{STRUCT,ARRAY,MAP}_FIELD;
    * a change Spark does not consider an up-cast (narrowing, string -> int):
      NOT_SUPPORTED_CHANGE_COLUMN, as Spark's analyzer refuses it before Delta sees it;
    * any other change outside Delta's widening list, or any change while
      ``delta.enableTypeWidening`` is not true, or one Iceberg cannot follow on a UniForm table:
      DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP.
    """
    current = change.current
    kinds = {"struct": "STRUCT", "array": "ARRAY", "map": "MAP"}
    if isinstance(current, dict) and current != to_type:
        kind = current.get("type")
        raise AnalysisError(
            f"Cannot update {table} field {change.display}: only the types of its atomic fields can change "
            f"(ALTER COLUMN {change.display}.<field|element|key|value> TYPE ...).",
            error_class=f"DELTA_CANNOT_UPDATE_{kinds.get(kind, 'OTHER')}_FIELD", sqlstate="429BQ")
    if not isinstance(to_type, str):
        raise AnalysisError(
            f"ALTER TABLE ALTER/CHANGE COLUMN is not supported for changing {table}'s column {change.display} with type "
            f"{sql_name(current)} to {change.display} with type {sql_name(to_type)}.",
            error_class="NOT_SUPPORTED_CHANGE_COLUMN", sqlstate="0A000")
    if current == to_type:
        return
    if not can_up_cast(current, to_type):
        raise AnalysisError(
            f"ALTER TABLE ALTER/CHANGE COLUMN is not supported for changing {table}'s column {change.display} with type "
            f"{sql_name(current)} to {change.display} with type {sql_name(to_type)}.",
            error_class="NOT_SUPPORTED_CHANGE_COLUMN", sqlstate="0A000")
    supported = is_supported_change(current, to_type)
    reason = ""
    if supported and not enabled:
        reason = (f" Type widening is not enabled on {table}: ALTER TABLE {table} SET TBLPROPERTIES "
                  f"('{ENABLE_PROPERTY}' = 'true') allows it.")
    elif supported and iceberg and not iceberg_compatible(current, to_type):
        reason = " Iceberg (UniForm is enabled on this table) cannot follow this type change."
    elif supported:
        return
    raise AnalysisError(
        f"ALTER TABLE CHANGE COLUMN is not supported for changing column {change.display} from {sql_name(current)} "
        f"to {sql_name(to_type)}.{reason}",
        error_class="DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP", sqlstate="0AKDC")


def enabled(configuration: dict) -> bool:
    value = next((v for k, v in (configuration or {}).items() if k.lower() == ENABLE_PROPERTY.lower()), "false")
    return str(value).strip().lower() == "true"
