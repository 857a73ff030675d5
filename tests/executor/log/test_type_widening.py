"""Type widening without Spark: Delta's list of changes, recording them in the schema, refusing
what Delta refuses, and data skipping on widened columns (executor/log/type_widening.py)."""

from __future__ import annotations

import json
import os

import pytest

from isolde.errors import AnalysisError, UnsupportedFeatureError
from isolde.executor.log import DeltaLog
from isolde.executor.log import type_widening as TW
from isolde.executor.log.actions import AddFile
from isolde.executor.txn.predicates import Predicate

from tests.helpers import ENGINES  # noqa: E402  (tests/data/engines)


@pytest.mark.parametrize("from_type, to_type, supported", [
    ("byte", "short", True), ("byte", "long", True), ("short", "integer", True), ("integer", "long", True),
    ("long", "integer", False), ("short", "byte", False),
    ("float", "double", True), ("double", "float", False),
    ("byte", "double", True), ("short", "double", True), ("integer", "double", True), ("long", "double", False),
    ("integer", "float", False),
    ("date", "timestamp_ntz", True), ("date", "timestamp", False), ("timestamp_ntz", "timestamp", False),
    ("decimal(10,2)", "decimal(12,2)", True), ("decimal(10,2)", "decimal(12,4)", True),
    ("decimal(10,2)", "decimal(12,5)", False),  # loses an integer digit
    ("decimal(10,2)", "decimal(10,3)", False), ("decimal(10,2)", "decimal(9,2)", False),
    ("byte", "decimal(10,0)", True), ("integer", "decimal(11,1)", True), ("integer", "decimal(9,0)", False),
    ("integer", "decimal(10,1)", False), ("long", "decimal(20,0)", True), ("long", "decimal(21,1)", True),
    ("long", "decimal(19,0)", False),
    ("integer", "string", False), ("string", "integer", False), ("decimal(10,2)", "double", False),
])
def test_supported_changes_are_deltas_list(from_type, to_type, supported):
    assert TW.is_supported_change(from_type, to_type) is supported


@pytest.mark.parametrize("from_type, to_type, up_cast", [
    ("integer", "long", True), ("long", "double", True), ("integer", "string", True), ("date", "timestamp", True),
    ("long", "integer", False), ("double", "float", False), ("string", "integer", False),
    ("decimal(10,2)", "decimal(9,2)", False), ("decimal(10,0)", "long", True), ("double", "decimal(38,2)", False),
])
def test_up_cast_decides_which_component_refuses(from_type, to_type, up_cast):
    assert TW.can_up_cast(from_type, to_type) is up_cast


@pytest.mark.parametrize("from_type, to_type, ok", [
    ("integer", "long", True), ("float", "double", True), ("decimal(10,2)", "decimal(12,2)", True),
    ("decimal(10,2)", "decimal(12,4)", False), ("integer", "double", False), ("date", "timestamp_ntz", False),
    ("long", "decimal(20,0)", False),
])
def test_iceberg_compatible_changes(from_type, to_type, ok):
    assert TW.iceberg_compatible(from_type, to_type) is ok


SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "integer", "nullable": True, "metadata": {}},
    {"name": "s", "type": {"type": "struct", "fields": [
        {"name": "x", "type": "short", "nullable": True, "metadata": {"comment": "kept"}}]},
     "nullable": True, "metadata": {}},
    {"name": "arr", "type": {"type": "array", "elementType": "byte", "containsNull": True}, "nullable": True,
     "metadata": {}},
    {"name": "m", "type": {"type": "map", "keyType": "float", "valueType": {
        "type": "array", "elementType": "decimal(6,2)", "containsNull": True}, "valueContainsNull": True},
     "nullable": True, "metadata": {}},
]}


@pytest.mark.parametrize("path, to_type, holder, field_type, change", [
    (("ID",), "long", ("id",), "long", {"fromType": "integer", "toType": "long"}),
    (("s", "X"), "integer", ("s", "x"), "integer", {"fromType": "short", "toType": "integer"}),
    (("arr", "element"), "double", ("arr",), {"type": "array", "elementType": "double", "containsNull": True},
     {"fromType": "byte", "toType": "double", "fieldPath": "element"}),
    (("m", "key"), "double", ("m",), None, {"fromType": "float", "toType": "double", "fieldPath": "key"}),
    (("m", "value", "element"), "decimal(10,4)", ("m",), None,
     {"fromType": "decimal(6,2)", "toType": "decimal(10,4)", "fieldPath": "value.element"}),
])
def test_a_change_is_recorded_on_the_nearest_struct_field(path, to_type, holder, field_type, change):
    change_at = TW.resolve(SCHEMA, path)
    TW.check_change(change_at, to_type, enabled=True, iceberg=False, table="t")
    out = TW.widened_schema(SCHEMA, change_at, to_type, record=True)
    got = TW.resolve(out, holder)
    assert got.holder["metadata"][TW.TYPE_CHANGES] == [change]
    if field_type is not None:
        assert got.holder["type"] == field_type
    assert TW.resolve(out, path).current == to_type
    assert SCHEMA["fields"][0]["type"] == "integer"  # the input is not modified
    if path == ("s", "X"):
        assert got.holder["metadata"]["comment"] == "kept"


def test_changes_accumulate_and_preview_tables_get_the_version():
    first = TW.widened_schema(SCHEMA, TW.resolve(SCHEMA, ["id"]), "long", record=True, table_version=3)
    second = TW.widened_schema(first, TW.resolve(first, ["id"]), "decimal(20,0)", record=True, table_version=5)
    assert TW.resolve(second, ["id"]).holder["metadata"][TW.TYPE_CHANGES] == [
        {"tableVersion": 3, "fromType": "integer", "toType": "long"},
        {"tableVersion": 5, "fromType": "long", "toType": "decimal(20,0)"}]
    TW.check_readable(second)
    assert TW.resolve(SCHEMA, ["nope"]) is None and TW.resolve(SCHEMA, ["id", "element"]) is None


@pytest.mark.parametrize("path, to_type, enabled, iceberg, error_class", [
    (("id",), "long", False, False, "DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP"),  # widening off
    (("id",), "short", True, False, "NOT_SUPPORTED_CHANGE_COLUMN"),  # narrowing: Spark refuses
    (("id",), "string", True, False, "DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP"),  # up-cast, not widening
    (("id",), "float", True, False, "DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP"),
    (("id",), "double", True, True, "DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP"),  # Iceberg cannot
    (("s",), "long", True, False, "DELTA_CANNOT_UPDATE_STRUCT_FIELD"),
    (("arr",), {"type": "array", "elementType": "long", "containsNull": True}, True, False,
     "DELTA_CANNOT_UPDATE_ARRAY_FIELD"),
    (("m",), "string", True, False, "DELTA_CANNOT_UPDATE_MAP_FIELD"),
])
def test_refused_changes_use_deltas_error_classes(path, to_type, enabled, iceberg, error_class):
    with pytest.raises(AnalysisError) as info:
        TW.check_change(TW.resolve(SCHEMA, path), to_type, enabled=enabled, iceberg=iceberg, table="db.t")
    assert info.value.error_class == error_class


def test_refusal_wording():
    with pytest.raises(AnalysisError) as info:
        TW.check_change(TW.resolve(SCHEMA, ["id"]), "long", enabled=False, iceberg=False, table="db.t")
    assert str(info.value) == (
        "ALTER TABLE CHANGE COLUMN is not supported for changing column id from INT to BIGINT. Type widening is not "
        "enabled on db.t: ALTER TABLE db.t SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true') allows it.")
    with pytest.raises(AnalysisError) as info:
        TW.check_change(TW.resolve(SCHEMA, ["s", "x"]), "byte", enabled=True, iceberg=False, table="db.t")
    assert str(info.value) == ("ALTER TABLE ALTER/CHANGE COLUMN is not supported for changing db.t's column s.x with "
                               "type SMALLINT to s.x with type TINYINT.")
    assert info.value.sqlstate == "0A000"


def test_the_golden_table_records_supported_changes():
    snap = DeltaLog(os.path.join(ENGINES, "type-widening")).update()
    changes = TW.all_type_changes(snap.metadata.schema)
    assert len(changes) == 13 and all(len(c) == 3 for _, c in changes)  # fromType, toType, tableVersion
    TW.check_readable(snap.metadata.schema)
    assert TW.stats_types(snap.metadata.schema) == {"float_double": "float"}


def test_an_unsupported_recorded_change_makes_the_table_unreadable():
    schema = {"fields": [{"name": "a", "type": {"type": "array", "elementType": "integer"}, "metadata": {
        TW.TYPE_CHANGES: [{"fromType": "long", "toType": "integer", "fieldPath": "element"}]}}]}
    with pytest.raises(UnsupportedFeatureError) as info:
        TW.check_readable(schema)
    assert info.value.error_class == "DELTA_UNSUPPORTED_TYPE_CHANGE_IN_SCHEMA"
    assert str(info.value) == ("Unable to operate on this table because an unsupported type change was applied. "
                               "Field a.element was changed from BIGINT to INT.")
    TW.check_readable({"fields": [{"name": "s", "type": "string", "metadata": {
        TW.TYPE_CHANGES: [{"fromType": "varchar(3)", "toType": "string"}]}}]})


# --------------------------------------------------------------------------- data skipping


def _schema(column_type: str, changes=None) -> dict:
    meta = {TW.TYPE_CHANGES: changes} if changes else {}
    return {"type": "struct", "fields": [{"name": "c", "type": column_type, "nullable": True, "metadata": meta}]}


def _file(lo, hi, tags=None) -> AddFile:
    stats = {"numRecords": 1, "minValues": {"c": lo}, "maxValues": {"c": hi}, "nullCount": {"c": 0}}
    return AddFile("f.parquet", {}, 1, 1, stats=json.dumps(stats), tags=tags)


FLOAT_TO_DOUBLE = [{"fromType": "float", "toType": "double"}]
# what Delta writes for a FLOAT 0.7 (really 0.699999988079071) written before the change, and the
# value a widened read returns for it
FLOAT_07 = "0.699999988079071"


@pytest.mark.parametrize("schema, stats, predicate, kept", [
    # float -> double: the printed float statistic is read as a float
    (_schema("double", FLOAT_TO_DOUBLE), (0.7, 0.7), f"c = {FLOAT_07}", True),
    (_schema("double", FLOAT_TO_DOUBLE), (0.7, 0.7), f"c <= {FLOAT_07}", True),
    (_schema("double", FLOAT_TO_DOUBLE), (0.7, 0.7), "c < 0.69", False),  # still prunes what it can
    # the same statistics on a column that was always DOUBLE are exact: the file is skipped
    (_schema("double"), (0.7, 0.7), f"c = {FLOAT_07}", False),
    # isolde's own statistics after the change (doubles, exact; the NaN-free tag trusts the max)
    (_schema("double", FLOAT_TO_DOUBLE), (0.1, 0.1), "c = 0.1", True),
    (_schema("double", FLOAT_TO_DOUBLE), (0.1, 0.1), "c > 0.2", False),
    # the other changes keep their statistics' meaning
    (_schema("long", [{"fromType": "integer", "toType": "long"}]), (1, 3), "c = 5", False),
    (_schema("long", [{"fromType": "integer", "toType": "long"}]), (1, 3), "c = 3", True),
    (_schema("double", [{"fromType": "integer", "toType": "double"}]), (1, 3), "c > 3.5", False),
    (_schema("decimal(20,5)", [{"fromType": "decimal(10,2)", "toType": "decimal(20,5)"}]), (67.89, 67.89),
     "c = 67.89", True),
    (_schema("decimal(20,5)", [{"fromType": "decimal(10,2)", "toType": "decimal(20,5)"}]), (67.89, 67.89),
     "c = 67.891", False),
    (_schema("timestamp_ntz", [{"fromType": "date", "toType": "timestamp_ntz"}]), ("2024-09-09", "2024-09-09"),
     "c = TIMESTAMP_NTZ'2024-09-09 00:00:00'", True),
    (_schema("timestamp_ntz", [{"fromType": "date", "toType": "timestamp_ntz"}]), ("2024-09-09", "2024-09-09"),
     "c > TIMESTAMP_NTZ'2024-09-09 00:00:01'", False),
])
def test_pruning_on_widened_columns(schema, stats, predicate, kept):
    tags = {"isolde.nanFree": '["c"]'}  # the max counts too (else a float max never prunes)
    assert Predicate(predicate, schema).file_may_match(_file(*stats, tags=tags)) is kept
