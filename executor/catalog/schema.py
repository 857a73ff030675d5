"""Schemas: Delta schema JSON <-> Spark StructType, DDL type strings -> Spark DataType (no JVM
needed), ColumnDef -> StructField with Delta's column metadata, and the lowest protocol a
table's schema + properties need.

Column metadata keys (as Delta writes them):
  identity:  ``delta.identity.start`` / ``.step`` (long), ``.allowExplicitInsert`` (bool),
             ``.highWaterMark`` (long, set by the first write)
  generated: ``delta.generationExpression`` (SQL text)
  default:   ``CURRENT_DEFAULT`` (SQL text; needs the ``allowColumnDefaults`` writer feature)
  comment:   ``comment``
"""

from __future__ import annotations

import json
import re
from typing import Iterable, Optional

from pyspark.sql import types as T

from isolde.errors import AnalysisError, InvalidPropertyError
from isolde.grammar import ast
from ..log.features import FEATURE_DEPENDENCIES, needs_invariants


def quoted(name: str) -> str:
    """``name`` as one Spark SQL identifier: backquoted, its backquotes doubled."""
    return "`" + name.replace("`", "``") + "`"


def column(name: str):
    """``F.col`` of a column named exactly ``name`` (dots, backquotes and all)."""
    from pyspark.sql import functions as F

    return F.col(quoted(name))

IDENTITY_START = "delta.identity.start"
IDENTITY_STEP = "delta.identity.step"
IDENTITY_HWM = "delta.identity.highWaterMark"
IDENTITY_ALLOW_EXPLICIT = "delta.identity.allowExplicitInsert"
GENERATION_EXPRESSION = "delta.generationExpression"
CURRENT_DEFAULT = "CURRENT_DEFAULT"
CONSTRAINT_PREFIX = "delta.constraints."

# --------------------------------------------------------------------------- Delta JSON <-> Spark


def struct_from_delta(schema_string: str | dict) -> T.StructType:
    data = json.loads(schema_string) if isinstance(schema_string, str) else schema_string
    return T.StructType.fromJson(data)


def struct_to_delta(struct: T.StructType) -> str:
    return json.dumps(struct.jsonValue(), separators=(",", ":"))


def metadata_schema(metadata) -> T.StructType:
    """The Spark StructType of a log Metadata action (``schema_string`` attribute)."""
    text = getattr(metadata, "schema_string", None)
    if text is None:
        text = getattr(metadata, "schemaString")
    return struct_from_delta(text)


def partition_columns(metadata) -> list[str]:
    cols = getattr(metadata, "partition_columns", None)
    if cols is None:
        cols = getattr(metadata, "partitionColumns", ())
    return list(cols or ())


def configuration(metadata) -> dict:
    return dict(getattr(metadata, "configuration", None) or {})


def data_schema(metadata) -> T.StructType:
    """Columns stored in the data files (the table schema minus partition columns)."""
    parts = {c.lower() for c in partition_columns(metadata)}
    return T.StructType([f for f in metadata_schema(metadata).fields if f.name.lower() not in parts])


def field_named(struct: T.StructType, name: str) -> Optional[T.StructField]:
    for f in struct.fields:
        if f.name.lower() == name.lower():
            return f
    return None


# --------------------------------------------------------------------------- DDL type strings

_SIMPLE = {
    "string": T.StringType, "text": T.StringType,
    "int": T.IntegerType, "integer": T.IntegerType,
    "bigint": T.LongType, "long": T.LongType,
    "smallint": T.ShortType, "short": T.ShortType,
    "tinyint": T.ByteType, "byte": T.ByteType,
    "float": T.FloatType, "real": T.FloatType,
    "double": T.DoubleType,
    "boolean": T.BooleanType, "bool": T.BooleanType,
    "binary": T.BinaryType,
    "date": T.DateType,
    "timestamp": T.TimestampType, "timestamp_ltz": T.TimestampType,
    "timestamp_ntz": T.TimestampNTZType,
    "void": T.NullType,
    "variant": T.VariantType,
}

_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:])|('(?:[^'\\]|\\.)*')|(\S))")


class _TypeParser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = []
        for m in _TOKEN.finditer(text):
            if m.group(6):
                raise self.error(f"unexpected character {m.group(6)!r}")
            tok = next(g for g in m.groups()[:5] if g is not None)
            self.tokens.append(tok)
        self.i = 0

    def error(self, why: str) -> AnalysisError:
        return AnalysisError(f"Cannot parse data type `{self.text}`: {why}.", error_class="UNSUPPORTED_DATATYPE",
                             sqlstate="0A000")

    def peek(self) -> Optional[str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: Optional[str] = None) -> str:
        tok = self.peek()
        if tok is None:
            raise self.error("unexpected end")
        if expected is not None and tok.lower() != expected:
            raise self.error(f"expected {expected!r}, found {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> T.DataType:
        dt = self.data_type()
        if self.peek() is not None:
            raise self.error(f"unexpected {self.peek()!r}")
        return dt

    def ints(self) -> list[int]:
        self.take("(")
        out = [int(self.take())]
        while self.peek() == ",":
            self.take(",")
            out.append(int(self.take()))
        self.take(")")
        return out

    def data_type(self) -> T.DataType:
        word = self.take()
        low = word.lower()
        if low in ("decimal", "dec", "numeric"):
            if self.peek() == "(":
                try:
                    args = self.ints()
                except ValueError:
                    raise self.error("decimal precision and scale must be integers")
                precision, scale = (args + [0])[:2]
                if not (1 <= precision <= 38) or not (0 <= scale <= precision):
                    raise self.error("decimal precision must be 1..38 and scale 0..precision")
                return T.DecimalType(precision, scale)
            return T.DecimalType(10, 0)
        if low in ("varchar", "char", "character"):
            if self.peek() == "(":
                self.ints()
            return T.StringType()
        if low == "timestamp" and self.peek() and self.peek().lower() in ("with", "without"):
            raise self.error("use TIMESTAMP or TIMESTAMP_NTZ")
        if low in _SIMPLE:
            return _SIMPLE[low]()
        if low == "array":
            self.take("<")
            element = self.data_type()
            self.take(">")
            return T.ArrayType(element, True)
        if low == "map":
            self.take("<")
            key = self.data_type()
            self.take(",")
            value = self.data_type()
            self.take(">")
            return T.MapType(key, value, True)
        if low == "struct":
            self.take("<")
            fields = []
            while self.peek() != ">":
                name = self.take()
                if name.startswith("`"):
                    name = name[1:-1].replace("``", "`")
                if self.peek() == ":":
                    self.take(":")
                ftype = self.data_type()
                nullable = True
                if self.peek() and self.peek().lower() == "not":
                    self.take()
                    self.take("null")
                    nullable = False
                metadata = {}
                if self.peek() and self.peek().lower() == "comment":
                    self.take()
                    literal = self.take()
                    if not literal.startswith("'"):
                        raise self.error(f"expected a string after COMMENT, found {literal!r}")
                    metadata["comment"] = re.sub(r"\\(.)", r"\1", literal[1:-1])
                fields.append(T.StructField(name, ftype, nullable, metadata or None))
                if self.peek() == ",":
                    self.take(",")
            self.take(">")
            return T.StructType(fields)
        raise self.error(f"unknown type {word!r}")


def parse_data_type(text: str) -> T.DataType:
    """A SQL DDL type (``INT``, ``DECIMAL(10,2)``, ``ARRAY<STRUCT<a: INT>>``, ...) as a Spark DataType."""
    return _TypeParser(text.strip()).parse()


def type_sql(dt: T.DataType) -> str:
    """Spark's SQL spelling of a type (``INT``, ``BIGINT``, ``DECIMAL(10,2)``, ``ARRAY<STRING>``...)."""
    return dt.simpleString().upper()


# --------------------------------------------------------------------------- column definitions


#: a top-level CHAR(n) / VARCHAR(n) column type (nested ones are plain STRING)
_CHAR_VARCHAR = re.compile(r"^\s*(VAR)?CHAR(?:ACTER)?\s*\(\s*(\d+)\s*\)\s*$", re.I)
CHAR_VARCHAR_KEY = "__CHAR_VARCHAR_TYPE_STRING"  # (store_assignment.py enforces it)


def column_to_field(col: ast.ColumnDef) -> T.StructField:
    from .warehouse import check_identifier

    check_identifier(col.name, "column")
    dt = parse_data_type(col.data_type)
    meta: dict = {}
    nullable = col.nullable
    if col.comment:
        meta["comment"] = col.comment
    if col.identity is not None:
        if not isinstance(dt, T.LongType):
            if isinstance(dt, (T.IntegerType, T.ShortType, T.ByteType)):
                raise AnalysisError(f"Identity column `{col.name}` must be BIGINT, not {col.data_type.upper()}.",
                                    error_class="DELTA_IDENTITY_COLUMNS_UNSUPPORTED_DATA_TYPE", sqlstate="428H2")
            raise AnalysisError(f"Identity column `{col.name}` must be BIGINT, not {col.data_type.upper()}.",
                                error_class="DELTA_IDENTITY_COLUMNS_UNSUPPORTED_DATA_TYPE", sqlstate="428H2")
        if col.identity.increment == 0:
            raise AnalysisError(f"Identity column `{col.name}`: INCREMENT BY cannot be 0.",
                                error_class="DELTA_IDENTITY_COLUMNS_ILLEGAL_STEP", sqlstate="42611")
        if col.generated_as is not None or col.default is not None:
            raise AnalysisError(f"Column `{col.name}` cannot be both an identity column and generated/defaulted.",
                                error_class="DELTA_IDENTITY_COLUMNS_WITH_GENERATED_EXPRESSION", sqlstate="42613")
        meta[IDENTITY_START] = int(col.identity.start)
        meta[IDENTITY_STEP] = int(col.identity.increment)
        meta[IDENTITY_ALLOW_EXPLICIT] = not col.identity.always
    length = _CHAR_VARCHAR.match(col.data_type or "")
    if length is not None:  # kept as Spark and Delta keep it: STRING with the declared type beside it
        kind = "varchar" if length.group(1) else "char"
        meta[CHAR_VARCHAR_KEY] = f"{kind}({int(length.group(2))})"
    if col.generated_as is not None:
        meta[GENERATION_EXPRESSION] = col.generated_as.sql
    if col.default is not None:
        meta[CURRENT_DEFAULT] = col.default.sql
    return T.StructField(col.name, dt, nullable, meta)


def columns_to_struct(columns: Iterable[ast.ColumnDef]) -> T.StructType:
    fields = [column_to_field(c) for c in columns]
    seen = {}
    for f in fields:
        key = f.name.lower()
        if key in seen:
            raise AnalysisError(f"Found duplicate column `{f.name}` in the table definition.",
                                error_class="COLUMN_ALREADY_EXISTS", sqlstate="42711")
        seen[key] = f
    return T.StructType(fields)


def is_identity(f: T.StructField) -> bool:
    return IDENTITY_START in (f.metadata or {})


def is_generated(f: T.StructField) -> bool:
    return GENERATION_EXPRESSION in (f.metadata or {})


def default_expression(f: T.StructField) -> Optional[str]:
    return (f.metadata or {}).get(CURRENT_DEFAULT)


def _walk_fields(struct: T.StructType):
    for f in struct.fields:
        yield f
        dt = f.dataType
        while isinstance(dt, (T.ArrayType, T.MapType)):
            dt = dt.elementType if isinstance(dt, T.ArrayType) else dt.valueType
        if isinstance(dt, T.StructType):
            yield from _walk_fields(dt)


def nested_types(dt: T.DataType):
    """``dt`` and every type it holds at any depth (struct fields, array elements, map keys / values)."""
    yield dt
    if isinstance(dt, T.StructType):
        for f in dt.fields:
            yield from nested_types(f.dataType)
    elif isinstance(dt, T.ArrayType):
        yield from nested_types(dt.elementType)
    elif isinstance(dt, T.MapType):
        yield from nested_types(dt.keyType)
        yield from nested_types(dt.valueType)


def uses_type(struct: T.DataType, cls) -> bool:
    """``struct`` is, or holds at any depth (struct fields, array elements, map keys / values), a ``cls``."""
    return any(isinstance(dt, cls) for dt in nested_types(struct))


# --------------------------------------------------------------------------- protocol

# legacy writer features and the writer version that implies them
LEGACY_WRITER = {"appendOnly": 2, "invariants": 2, "checkConstraints": 3, "changeDataFeed": 4,
                 "generatedColumns": 4, "columnMapping": 5, "identityColumns": 6}
READER_WRITER_FEATURES = {"deletionVectors", "timestampNtz", "columnMapping", "v2Checkpoint", "typeWidening",
                          "typeWidening-preview", "vacuumProtocolCheck", "variantType"}
WRITER_ONLY_FEATURES = {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
                        "identityColumns", "domainMetadata", "clustering", "rowTracking", "allowColumnDefaults",
                        "inCommitTimestamp", "icebergCompatV1", "icebergCompatV2"}
KNOWN_FEATURES = READER_WRITER_FEATURES | WRITER_ONLY_FEATURES


def _truthy(value) -> bool:
    return str(value).strip().lower() == "true"


def features_for(struct: T.StructType, config: dict, clustering: bool = False) -> set[str]:
    """The table features a schema + configuration use."""
    feats: set[str] = set()
    if _truthy(config.get("delta.appendOnly", "false")):
        feats.add("appendOnly")
    if any(k.startswith(CONSTRAINT_PREFIX) for k in config):
        feats.add("checkConstraints")
    if _truthy(config.get("delta.enableChangeDataFeed", "false")):
        feats.add("changeDataFeed")
    if _truthy(config.get("delta.enableDeletionVectors", "false")):
        feats.add("deletionVectors")
    if _truthy(config.get("delta.enableRowTracking", "false")):
        feats.update({"rowTracking", "domainMetadata"})
    if str(config.get("delta.columnMapping.mode", "none")).lower() != "none":
        feats.add("columnMapping")
    if _truthy(config.get("delta.enableInCommitTimestamps", "false")):
        feats.add("inCommitTimestamp")
    if str(config.get("delta.universalFormat.enabledFormats", "")).strip():
        feats.add("icebergCompatV2")
    if _truthy(config.get("delta.enableIcebergCompatV2", "false")):
        feats.add("icebergCompatV2")
    fields = list(_walk_fields(struct))
    if any(is_identity(f) for f in fields):
        feats.add("identityColumns")
    if any(is_generated(f) for f in fields):
        feats.add("generatedColumns")
    if any(default_expression(f) is not None for f in fields):
        feats.add("allowColumnDefaults")
    if any("delta.invariants" in (f.metadata or {}) for f in fields):
        feats.add("invariants")
    if uses_type(struct, T.TimestampNTZType):
        feats.add("timestampNtz")
    if uses_type(struct, T.VariantType):
        feats.add("variantType")
    if _truthy(config.get("delta.enableTypeWidening", "false")):
        feats.add("typeWidening")
    if clustering:
        feats.update({"clustering", "domainMetadata"})
    for key, value in config.items():
        if key.startswith("delta.feature."):
            feats.add(key[len("delta.feature."):])
    if needs_invariants(json.loads(struct.json())):
        feats.add("invariants")
    for feature, needs in FEATURE_DEPENDENCIES.items():
        if feature in feats:
            feats |= needs
    return feats


def protocol_for(struct: T.StructType, config: dict, clustering: bool = False, min_reader: int = 1,
                 min_writer: int = 2) -> tuple[int, int, Optional[list[str]], Optional[list[str]]]:
    """The lowest protocol (reader, writer, readerFeatures, writerFeatures) the table needs.

    Legacy versions when every feature is legacy (1/2 plain, 1/3 CHECK, 1/4 generated or CDF,
    1/6 identity); table features otherwise (1/7, or 3/7 when a reader feature is used), with
    every feature in use listed (legacy ones included, as the protocol requires at writer 7).
    """
    feats = features_for(struct, config, clustering)
    unknown = feats - KNOWN_FEATURES
    if unknown:
        raise InvalidPropertyError(f"Unknown table feature(s): {', '.join(sorted(unknown))}.",
                                   error_class="DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT")
    needs_features = any(f not in LEGACY_WRITER for f in feats) or min_writer >= 7 or min_reader >= 3
    if feats & {"columnMapping"} and feats <= set(LEGACY_WRITER) and min_writer < 7:
        needs_features = False
    if not needs_features:
        writer = max([min_writer, 2] + [LEGACY_WRITER[f] for f in feats])
        reader = max(min_reader, 2 if "columnMapping" in feats else 1)
        return reader, writer, None, None
    reader_feats = sorted(f for f in feats if f in READER_WRITER_FEATURES)
    writer_feats = sorted(feats)
    if reader_feats or min_reader >= 3:
        return 3, 7, reader_feats, writer_feats
    return max(min_reader, 1), 7, None, writer_feats


def needs_metadata_update(struct: T.StructType) -> bool:
    return any(is_identity(f) for f in struct.fields)


# --------------------------------------------------------------------------- column mapping

PHYSICAL_NAME = "delta.columnMapping.physicalName"
COLUMN_ID = "delta.columnMapping.id"
PARQUET_FIELD_ID = "parquet.field.id"


def column_mapping_mode(metadata) -> str:
    return str(configuration(metadata).get("delta.columnMapping.mode", "none")).lower()


def physical_name(f: T.StructField) -> str:
    return (f.metadata or {}).get(PHYSICAL_NAME, f.name)


def nullable_type(dt: T.DataType) -> T.DataType:
    """``dt`` with every nested field, element and value nullable: what a file read yields
    (Spark's file sources read every column as nullable), and what Spark can cast a
    physical struct to (it refuses a cast from a nullable field to a NOT NULL one)."""
    if isinstance(dt, T.StructType):
        return T.StructType([T.StructField(f.name, nullable_type(f.dataType), True, f.metadata) for f in dt.fields])
    if isinstance(dt, T.ArrayType):
        return T.ArrayType(nullable_type(dt.elementType), True)
    if isinstance(dt, T.MapType):
        return T.MapType(nullable_type(dt.keyType), nullable_type(dt.valueType), True)
    return dt


def map_structs(dt: T.DataType, on_struct) -> T.DataType:
    """``dt`` with every struct in it (also inside arrays and maps) replaced by ``on_struct(struct)``."""
    if isinstance(dt, T.StructType):
        return on_struct(dt)
    if isinstance(dt, T.ArrayType):
        return T.ArrayType(map_structs(dt.elementType, on_struct), dt.containsNull)
    if isinstance(dt, T.MapType):
        return T.MapType(map_structs(dt.keyType, on_struct), map_structs(dt.valueType, on_struct),
                         dt.valueContainsNull)
    return dt


def map_field_metadata(dt: T.DataType, new_metadata) -> T.DataType:
    """``dt`` with every field's metadata (nested too) replaced by ``new_metadata(field)``."""
    return map_structs(dt, lambda st: T.StructType([
        T.StructField(f.name, map_field_metadata(f.dataType, new_metadata), f.nullable, new_metadata(f))
        for f in st.fields]))


def physical_struct(struct: T.StructType) -> T.StructType:
    """The schema as stored in data files under column mapping: physical names (nested too) and
    the column ids as Parquet field ids."""
    fields = []
    for f in struct.fields:
        meta = {}
        if COLUMN_ID in (f.metadata or {}):
            meta[PARQUET_FIELD_ID] = int(f.metadata[COLUMN_ID])
        fields.append(T.StructField(physical_name(f), map_structs(f.dataType, physical_struct), f.nullable, meta))
    return T.StructType(fields)


NESTED_IDS = "delta.columnMapping.nested.ids"


def fields_with_nested_ids(struct: T.StructType) -> list[str]:
    """Names of the fields (nested ones too) whose ``delta.columnMapping.nested.ids`` give ids to
    array elements / map keys and values (icebergCompatV2): Delta writes those ids into the
    Parquet list and map groups through its own Parquet write support, which plain Spark lacks."""
    return [f.name for f in _walk_fields(struct) if (f.metadata or {}).get(NESTED_IDS)]


def logical_to_physical(metadata) -> dict[str, str]:
    """Top-level logical name -> physical name (identity without column mapping)."""
    struct = metadata_schema(metadata)
    if column_mapping_mode(metadata) == "none":
        return {f.name: f.name for f in struct.fields}
    return {f.name: physical_name(f) for f in struct.fields}


def iceberg_compat_v2(config: dict) -> bool:
    """Whether a configuration turns on icebergCompatV2 (directly or through UniForm), which
    makes Delta give array elements and map keys / values ids of their own."""
    conf = {str(k).lower(): str(v).strip().lower() for k, v in (config or {}).items()}
    return conf.get("delta.enableicebergcompatv2") == "true" or \
        "iceberg" in conf.get("delta.universalformat.enabledformats", "")


def assign_column_mapping(struct: T.StructType, start_id: int = 0,
                          nested_ids: bool = False) -> tuple[T.StructType, int]:
    """Give every field (nested too) a column id and a ``col-<uuid>`` physical name, as Delta
    does when a table is created with column mapping; with ``nested_ids`` (icebergCompatV2) also
    the ids of array elements and map keys / values under ``delta.columnMapping.nested.ids``,
    numbered after the column ids as Delta numbers them. Returns (schema, max id)."""
    struct, max_id = _assign_column_ids(struct, start_id)
    if nested_ids:
        struct, max_id = _assign_nested_ids(struct, max_id)
    return struct, max_id


def _assign_nested_ids(struct: T.StructType, start_id: int) -> tuple[T.StructType, int]:
    """Ids for the ``element`` / ``key`` / ``value`` of every array and map, kept in the metadata
    of the nearest enclosing struct field under ``<physical name>.element`` and so on (an
    existing id is kept: it is already in the table's files)."""
    counter = [start_id]

    def walk_type(dt, path: str, ids: dict):
        if isinstance(dt, T.StructType):
            return walk_struct(dt)
        if isinstance(dt, T.ArrayType):
            element = assign(f"{path}.element", ids)
            return T.ArrayType(walk_type(dt.elementType, element, ids), dt.containsNull)
        if isinstance(dt, T.MapType):
            key = assign(f"{path}.key", ids)
            key_type = walk_type(dt.keyType, key, ids)
            value = assign(f"{path}.value", ids)
            return T.MapType(key_type, walk_type(dt.valueType, value, ids), dt.valueContainsNull)
        return dt

    def assign(key: str, ids: dict) -> str:
        if key not in ids:
            counter[0] += 1
            ids[key] = counter[0]
        return key

    def walk_struct(st):
        out = []
        for f in st.fields:
            meta = dict(f.metadata or {})
            ids = dict(meta.get(NESTED_IDS) or {})
            dt = walk_type(f.dataType, physical_name(f), ids)
            if ids:
                meta[NESTED_IDS] = ids
            out.append(T.StructField(f.name, dt, f.nullable, meta))
        return T.StructType(out)

    return walk_struct(struct), counter[0]


def _assign_column_ids(struct: T.StructType, start_id: int) -> tuple[T.StructType, int]:
    import uuid

    counter = [start_id]

    def walk_struct(st):
        out = []
        for f in st.fields:
            meta = dict(f.metadata or {})
            if COLUMN_ID not in meta:
                counter[0] += 1
                meta[COLUMN_ID] = counter[0]
            meta.setdefault(PHYSICAL_NAME, f"col-{uuid.uuid4()}")
            out.append(T.StructField(f.name, map_structs(f.dataType, walk_struct), f.nullable, meta))
        return T.StructType(out)

    return walk_struct(struct), counter[0]
