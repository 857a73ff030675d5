"""VARIANT columns (PROTOCOL.md "Variant Data Type"; Spark 4's VariantType).

A table with a VARIANT column, at any depth, needs the ``variantType`` reader+writer feature
(``variantType-preview`` tables written by Delta 3.x count as having it). Its Parquet files must
hold each variant *unshredded* (a struct of the binary ``value`` and ``metadata``) unless the
table also has ``variantShredding``, which isolde does not support: Spark 4.1+ shreds by default
(``spark.sql.variant.writeShredding.enabled``), so isolde turns that off before writing. No
min/max statistics exist for variants (stats.py keeps top-level leaves only), so no data
skipping either.
"""

from __future__ import annotations

from pyspark.sql import types as T

FEATURES = ("variantType", "variantType-preview")
SHREDDING_CONF = "spark.sql.variant.writeShredding.enabled"


def uses_variant(dt: T.DataType) -> bool:
    """``dt`` is, or holds at any depth, a VARIANT."""
    from .schema import uses_type

    return uses_type(dt, T.VariantType)


def schema_uses_variant(schema: dict) -> bool:
    """The same over Delta schema JSON (no Spark types built)."""
    def walk(t) -> bool:
        if isinstance(t, str):
            return t == "variant"
        if isinstance(t, dict):
            kind = t.get("type")
            if kind == "struct":
                return any(walk(f.get("type")) for f in t.get("fields", []))
            if kind == "array":
                return walk(t.get("elementType"))
            if kind == "map":
                return walk(t.get("keyType")) or walk(t.get("valueType"))
            return walk(kind) if isinstance(kind, str) and kind not in ("struct", "array", "map") else False
        return False

    return any(walk(f.get("type")) for f in (schema or {}).get("fields", []))


def feature_to_add(reader_features: set) -> set:
    """The feature a table that gains a VARIANT column needs: none when it has either name."""
    return set() if set(FEATURES) & set(reader_features) else {"variantType"}


def ensure_unshredded_writes(spark) -> None:
    """Make Spark write variants unshredded (Delta's format without ``variantShredding``). The
    setting is read when a write is planned, so it is set on the session, and left off."""
    try:
        # no default in get(): the registered default (true) is what a fresh session has
        if str(spark.conf.get(SHREDDING_CONF)).lower() != "false":
            spark.conf.set(SHREDDING_CONF, "false")
    except Exception:  # a Spark without the setting writes unshredded anyway
        pass


def check_placement(struct: T.StructType, partition_columns=(), clustering_columns=()) -> None:
    """Refuse a VARIANT partition or clustering column (PROTOCOL.md: Variant is not comparable),
    with Delta's error classes. For CREATE TABLE / REPLACE (executor/jobs/ddl.py)."""
    from isolde.errors import AnalysisError

    by_name = {f.name.lower(): f for f in struct.fields}
    for name in partition_columns:
        f = by_name.get(name.lower())
        if f is not None and uses_variant(f.dataType):
            raise AnalysisError(f"Using column {f.name} of type {f.dataType.simpleString().upper()} as a partition "
                                "column is not supported.", error_class="DELTA_INVALID_PARTITION_COLUMN_TYPE",
                                sqlstate="42996")
    for name in clustering_columns:
        f = by_name.get(str(name).lower())
        if f is not None and uses_variant(f.dataType):
            raise AnalysisError(f"Cannot cluster by `{f.name}`: its type {f.dataType.simpleString()} has no min/max "
                                "statistics.", error_class="DELTA_CLUSTERING_COLUMN_MISSING_STATS", sqlstate="22000")
