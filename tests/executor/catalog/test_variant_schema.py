"""VARIANT in schemas without Spark: detection at any depth, the feature a table needs, and the
columns a variant may not be (executor/catalog/variant.py)."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from isolde.errors import AnalysisError
from isolde.executor.catalog import variant as V

V_TYPE = T.VariantType()
STRUCT = T.StructType([
    T.StructField("id", T.LongType()),
    T.StructField("v", V_TYPE),
    T.StructField("s", T.StructType([T.StructField("x", T.ArrayType(V_TYPE))])),
    T.StructField("m", T.MapType(T.StringType(), V_TYPE)),
])


@pytest.mark.parametrize("dt, expected", [
    (V_TYPE, True), (T.LongType(), False), (T.ArrayType(V_TYPE), True), (T.MapType(T.StringType(), V_TYPE), True),
    (T.StructType([T.StructField("a", T.StructType([T.StructField("b", V_TYPE)]))]), True),
    (T.StructType([T.StructField("a", T.StringType())]), False),
])
def test_uses_variant(dt, expected):
    assert V.uses_variant(dt) is expected
    assert V.schema_uses_variant({"fields": [{"name": "c", "type": dt.jsonValue()}]}) is expected


def test_schema_json_spells_variant_as_delta_does():
    fields = STRUCT.jsonValue()["fields"]
    assert [f["type"] for f in fields][1] == "variant"
    assert fields[3]["type"] == {"type": "map", "keyType": "string", "valueType": "variant", "valueContainsNull": True}
    assert T.StructType.fromJson(STRUCT.jsonValue()) == STRUCT


@pytest.mark.parametrize("features, added", [
    (set(), {"variantType"}), ({"deletionVectors"}, {"variantType"}), ({"variantType"}, set()),
    ({"variantType-preview"}, set()),
])
def test_feature_to_add(features, added):
    assert V.feature_to_add(features) == added


@pytest.mark.parametrize("partitions, clustering, error_class", [
    (["v"], [], "DELTA_INVALID_PARTITION_COLUMN_TYPE"),
    (["M"], [], "DELTA_INVALID_PARTITION_COLUMN_TYPE"),
    ([], ["s"], "DELTA_CLUSTERING_COLUMN_MISSING_STATS"),
    ([], ["v"], "DELTA_CLUSTERING_COLUMN_MISSING_STATS"),
])
def test_variant_cannot_partition_or_cluster(partitions, clustering, error_class):
    with pytest.raises(AnalysisError) as info:
        V.check_placement(STRUCT, partitions, clustering)
    assert info.value.error_class == error_class


def test_other_columns_may_partition_and_cluster():
    V.check_placement(STRUCT, ["id"], ["id"])
