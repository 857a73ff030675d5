"""What storing a value in a table column does: one rule for every write path.

Delta applies Spark's ANSI store-assignment policy to every write, whatever the session's
``spark.sql.ansi.enabled`` says (Delta-Spark 4.4 observed, and ``DeltaErrors.castOverflow``):

* a number that does not fit its column fails -- BIGINT 2^31 into INT, 12345.6 into
  DECIMAL(5,2), NaN or infinity into an integral column: ``CAST_OVERFLOW_IN_TABLE_INSERT``
  for INSERT, ``DELTA_CAST_OVERFLOW_IN_TABLE_WRITE`` for UPDATE and MERGE; a fraction is
  truncated as CAST does (2.7 into INT is 2);
* a malformed string (into a number, a date, a timestamp, a boolean) fails:
  ``CAST_INVALID_INPUT``;
* a string longer than its CHAR(n) / VARCHAR(n) column allows fails, trailing spaces
  included (Delta's invariant ``c IS NULL OR length(c) <= n``):
  ``DELTA_EXCEED_CHAR_VARCHAR_LIMIT``; CHAR(n) reads padded to n (``scan``);
* structs: INSERT stores fields by position, as Spark's positional INSERT does; UPDATE and
  MERGE resolve them by name (Delta's ``resolveStructsByName``), through arrays and maps too;
  fields that do not match by name are refused before any data is read
  (``DELTA_UPDATE_SCHEMA_MISMATCH_EXPRESSION``).

``stored_sql`` turns the SQL of a value (a column of the statement's projection, so it is
evaluated once) into the SQL of what is stored; a failure raises inside the Spark job through
the writer's violation marker and reaches the user as ``StoreAssignmentError`` (or
``ConstraintViolationError`` for a length) with Delta's error class. The writer's ``conform``
(INSERT, the rows every DML route writes, COPY INTO, CTAS, the DataFrame writer, the streaming
sink) and the assignments of UPDATE and MERGE use it; nothing else casts a value into a column.
"""

from __future__ import annotations

import itertools
from typing import Optional

from pyspark.sql import types as T

from isolde.errors import AnalysisError

#: field metadata Spark and Delta keep for a CHAR(n) / VARCHAR(n) column (stored as STRING)
CHAR_VARCHAR_KEY = "__CHAR_VARCHAR_TYPE_STRING"

INSERT, UPDATE = "insert", "update"  # how a write resolves structs, and which overflow class it raises
OVERFLOW_CLASS = {INSERT: "CAST_OVERFLOW_IN_TABLE_INSERT", UPDATE: "DELTA_CAST_OVERFLOW_IN_TABLE_WRITE"}
MALFORMED_CLASS = "CAST_INVALID_INPUT"
LENGTH_CLASS = "DELTA_EXCEED_CHAR_VARCHAR_LIMIT"
#: error class -> SQLSTATE of the failures raised inside a job
SQLSTATES = {OVERFLOW_CLASS[INSERT]: "22003", OVERFLOW_CLASS[UPDATE]: "22003", MALFORMED_CLASS: "22018",
             LENGTH_CLASS: "22001"}

_NUMERIC = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)
_INTEGRAL_RANK = {T.ByteType: 1, T.ShortType: 2, T.IntegerType: 3, T.LongType: 4}
_CHECKED = (*_NUMERIC, T.DateType, T.TimestampType, T.TimestampNTZType, T.BooleanType)
_lambda_names = itertools.count()


# --------------------------------------------------------------------------- types


def char_varchar(field: T.StructField) -> Optional[tuple[str, int]]:
    """("char" | "varchar", n) for a CHAR(n) / VARCHAR(n) column, else None."""
    text = (field.metadata or {}).get(CHAR_VARCHAR_KEY)
    if not isinstance(text, str) or "(" not in text:
        return None
    kind, _, rest = text.partition("(")
    try:
        return kind.strip().lower(), int(rest.rstrip(") "))
    except ValueError:
        return None


def type_sql(dt: T.DataType) -> str:
    """A type as SQL that parses back to it (struct field names quoted)."""
    if isinstance(dt, T.StructType):
        return "STRUCT<" + ", ".join(f"{quote(f.name)}: {type_sql(f.dataType)}" for f in dt.fields) + ">"
    if isinstance(dt, T.ArrayType):
        return f"ARRAY<{type_sql(dt.elementType)}>"
    if isinstance(dt, T.MapType):
        return f"MAP<{type_sql(dt.keyType)}, {type_sql(dt.valueType)}>"
    return dt.simpleString().upper()


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def same_type(a: T.DataType, b: T.DataType) -> bool:
    """Equal but for nullability (what a write never needs to convert)."""
    if isinstance(a, T.StructType) and isinstance(b, T.StructType):
        return len(a.fields) == len(b.fields) and all(
            x.name == y.name and same_type(x.dataType, y.dataType) for x, y in zip(a.fields, b.fields))
    if isinstance(a, T.ArrayType) and isinstance(b, T.ArrayType):
        return same_type(a.elementType, b.elementType)
    if isinstance(a, T.MapType) and isinstance(b, T.MapType):
        return same_type(a.keyType, b.keyType) and same_type(a.valueType, b.valueType)
    return a == b


def _always_fits(src: T.DataType, dst: T.DataType) -> bool:
    """Does every value of ``src`` convert to ``dst`` without failing?"""
    if same_type(src, dst) or isinstance(src, T.NullType) or isinstance(dst, T.StringType):
        return True
    rs, rd = _INTEGRAL_RANK.get(type(src)), _INTEGRAL_RANK.get(type(dst))
    if rs is not None and rd is not None:
        return rs <= rd
    if rs is not None and isinstance(dst, (T.FloatType, T.DoubleType)):
        return True
    if isinstance(src, T.FloatType) and isinstance(dst, T.DoubleType):
        return True
    if rs is not None and isinstance(dst, T.DecimalType):
        return dst.precision - dst.scale >= {1: 3, 2: 5, 3: 10, 4: 20}[rs]
    if isinstance(src, T.DecimalType) and isinstance(dst, T.DecimalType):
        return dst.scale >= src.scale and dst.precision - dst.scale >= src.precision - src.scale
    if isinstance(src, T.DecimalType) and isinstance(dst, T.DoubleType):
        return True
    if isinstance(src, T.DateType) and isinstance(dst, (T.TimestampType, T.TimestampNTZType)):
        return True
    return False


def _mismatch(src: T.DataType, dst: T.DataType) -> AnalysisError:
    return AnalysisError(
        f"Cannot cast {src.simpleString()} to {dst.simpleString()}. All nested columns must match.",
        error_class="DELTA_UPDATE_SCHEMA_MISMATCH_EXPRESSION", sqlstate="42846")


def _fields_by_name(src: T.StructType, dst: T.StructType) -> list[T.StructField]:
    """The source field for each target field, matched by name (case-insensitive)."""
    by_name = {f.name.lower(): f for f in src.fields}
    if len(by_name) != len(src.fields) or len(src.fields) != len(dst.fields) \
            or any(f.name.lower() not in by_name for f in dst.fields):
        raise _mismatch(src, dst)
    return [by_name[f.name.lower()] for f in dst.fields]


# --------------------------------------------------------------------------- the rule


def _violation_sql(error_class: str, column: str, message_sql: str) -> str:
    from .writer import SEP, VIOLATION_MARK

    head = literal(f"{VIOLATION_MARK}{SEP}{error_class}{SEP}{column}{SEP}")
    return f"raise_error(concat({head}, {message_sql}, {literal(SEP)}))"


def _checked_cast(value: str, src: Optional[T.DataType], dst: T.DataType, column: str, write: str) -> str:
    """``CAST(value AS dst)`` that fails where the ANSI store assignment fails. The source
    type picks the failure (a string is malformed, anything else overflows); unknown (None),
    it is asked of the value when the job runs (``typeof``, folded by Spark)."""
    target = type_sql(dst)
    dst_name = dst.simpleString().upper()
    overflow = OVERFLOW_CLASS[write]
    src_name = f"upper(typeof({value}))"
    if write == INSERT:
        tail = (f'" type to the "{dst_name}" type column or variable {quote(column)} due to an overflow. '
                'Use `try_cast` on the input value to tolerate overflow and return NULL instead.')
        overflow_text = f"concat({literal('Fail to assign a value of ' + chr(34))}, {src_name}, {literal(tail)})"
    else:
        tail = f'" type into the "{dst_name}" type column {quote(column)} due to an overflow.'
        overflow_text = f"concat({literal('Failed to write a value of ' + chr(34))}, {src_name}, {literal(tail)})"
    tail = (f"' of the type \"STRING\" cannot be cast to \"{dst_name}\" because it is malformed. Correct the "
            "value as per the syntax, or change its target type. Use `try_cast` to tolerate malformed input and "
            "return NULL instead.")
    malformed_text = f"concat({literal('The value ' + chr(39))}, CAST(({value}) AS STRING), {literal(tail)})"
    if src is not None:
        failure = _violation_sql(MALFORMED_CLASS, column, malformed_text) if isinstance(src, T.StringType) \
            else _violation_sql(overflow, column, overflow_text)
    else:
        failure = (f"IF(typeof({value}) = 'string', {_violation_sql(MALFORMED_CLASS, column, malformed_text)}, "
                   f"{_violation_sql(overflow, column, overflow_text)})")
    return (f"CASE WHEN ({value}) IS NOT NULL AND try_cast(({value}) AS {target}) IS NULL THEN {failure} "
            f"ELSE CAST(({value}) AS {target}) END")


def stored_sql(value: str, src: Optional[T.DataType], dst: T.DataType, *, column: str, write: str = INSERT) -> str:
    """The SQL of ``value`` (of type ``src``; None: not known here) stored in a column of type
    ``dst`` by a write of kind ``write`` (INSERT or UPDATE: module docstring). ``value`` must be
    cheap to repeat (a column reference): it may appear several times."""
    if src is not None and same_type(src, dst):
        return value
    if src is not None and isinstance(src, T.NullType):
        return f"CAST(NULL AS {type_sql(dst)})"
    if isinstance(dst, T.StructType):
        if not isinstance(src, T.StructType):
            if src is None:
                raise AnalysisError(f"The type of the value for `{column}` must be known to store it in a struct.",
                                    error_class="INTERNAL_ERROR")
            raise _mismatch(src, dst)
        if write == UPDATE:
            sources = _fields_by_name(src, dst)
        else:
            if len(src.fields) != len(dst.fields):
                raise AnalysisError(
                    f"Cannot write to column `{column}`: the struct has {len(src.fields)} field(s), the column "
                    f"{len(dst.fields)} ({dst.simpleString()}).", error_class="INCOMPATIBLE_DATA_FOR_TABLE.STRUCT_MISSING_FIELDS",
                    sqlstate="KD000")
            sources = list(src.fields)
        parts = []
        for s, d in zip(sources, dst.fields):
            inner = stored_sql(f"{value}.{quote(s.name)}", s.dataType, d.dataType,
                               column=f"{column}.{d.name}", write=write)
            parts.append(f"{literal(d.name)}, {inner}")
        # (cast to the column's type: every nested field nullable, as the table declares them)
        return f"CAST(CASE WHEN ({value}) IS NULL THEN NULL ELSE named_struct({', '.join(parts)}) END AS {type_sql(dst)})"
    if isinstance(dst, T.ArrayType):
        if not isinstance(src, T.ArrayType):
            return _checked_or_cast(value, src, dst, column, write)
        x = f"__isolde_x{next(_lambda_names)}"
        inner = stored_sql(x, src.elementType, dst.elementType, column=f"{column}.element", write=write)
        return value if inner == x else f"CAST(transform({value}, {x} -> {inner}) AS {type_sql(dst)})"
    if isinstance(dst, T.MapType):
        if not isinstance(src, T.MapType):
            return _checked_or_cast(value, src, dst, column, write)
        out = value
        k, v = f"__isolde_k{next(_lambda_names)}", f"__isolde_v{next(_lambda_names)}"
        key = stored_sql(k, src.keyType, dst.keyType, column=f"{column}.key", write=write)
        if key != k:
            out = f"transform_keys({out}, ({k}, {v}) -> {key})"
        val = stored_sql(v, src.valueType, dst.valueType, column=f"{column}.value", write=write)
        if val != v:
            out = f"transform_values({out}, ({k}, {v}) -> {val})"
        return out if out == value else f"CAST({out} AS {type_sql(dst)})"
    return _checked_or_cast(value, src, dst, column, write)


def _checked_or_cast(value: str, src, dst, column: str, write: str) -> str:
    if src is not None and _always_fits(src, dst):
        return f"CAST(({value}) AS {type_sql(dst)})"
    if isinstance(dst, _CHECKED):
        return _checked_cast(value, src, dst, column, write)
    return f"CAST(({value}) AS {type_sql(dst)})"


def length_limit(field: T.StructField) -> Optional[tuple[int, str]]:
    """For a CHAR(n) / VARCHAR(n) column: (n, the text of Delta's failed check), else None."""
    spec = char_varchar(field)
    if spec is None:
        return None
    n = spec[1]
    return n, f"(({field.name} IS NULL) OR (length({field.name}) <= {n}))"


# --------------------------------------------------------------------------- assignments (UPDATE, MERGE)


def is_default_keyword(tree) -> bool:
    """Is an assigned value (a sqlglot tree) the keyword DEFAULT (``SET c = DEFAULT``)?"""
    import sqlglot.expressions as exp

    if isinstance(tree, exp.Var):
        return tree.name.upper() == "DEFAULT"
    return isinstance(tree, exp.Column) and not tree.table and not tree.this.args.get("quoted") \
        and tree.name.upper() == "DEFAULT"


def default_sql(field: T.StructField) -> str:
    """What DEFAULT means for a column: its default expression, else NULL (as Spark)."""
    from ..catalog import schema as S

    default = S.default_expression(field)
    return f"CAST(({default}) AS {type_sql(field.dataType)})" if default else f"CAST(NULL AS {type_sql(field.dataType)})"


def refuse_identity_update(field: T.StructField) -> None:
    """UPDATE / MERGE ... UPDATE of an identity column: Delta refuses it."""
    from ..catalog import schema as S

    if S.is_identity(field):
        raise AnalysisError(f"UPDATE on IDENTITY column {field.name} is not supported.",
                            error_class="DELTA_IDENTITY_COLUMNS_UPDATE_NOT_SUPPORTED", sqlstate="42808")


def refuse_identity_insert(field: T.StructField) -> None:
    """A value given for a GENERATED ALWAYS AS IDENTITY column: Delta refuses it."""
    from ..catalog import schema as S

    if S.is_identity(field) and not field.metadata.get(S.IDENTITY_ALLOW_EXPLICIT, False):
        raise AnalysisError(f"Providing values for GENERATED ALWAYS AS IDENTITY column {field.name} is not supported.",
                            error_class="DELTA_IDENTITY_COLUMNS_EXPLICIT_INSERT_NOT_SUPPORTED", sqlstate="42808")


def generated_guard(struct: T.StructType, row_sql: dict, given) -> Optional[str]:
    """A condition that is TRUE, or fails the job where a generated column given a value
    (``given``: their names) differs from its generation expression over the row being written
    (``row_sql``: lower-case column name -> SQL of its new value; a column missing from it is
    read by its own name): Delta's constraint on a generated column, on every write that gives
    one a value. A filter, not a value: the writer recomputes generated columns, and Spark
    would prune a value nobody reads, with its check. None when no generated column is given."""
    from ..catalog import schema as S

    guards = [_generated_check(struct, f.name, row_sql[f.name.lower()], row_sql)
              for f in struct.fields if S.is_generated(f) and f.name in given]
    return " AND ".join(f"({g})" for g in guards) if guards else None


def generation_reads(field: T.StructField) -> set:
    """Lower-case names of every top-level column (or struct) a generated column's expression
    reads; a struct field reference ``st.x`` counts as ``st``."""
    import sqlglot
    import sqlglot.expressions as exp

    from ..catalog import schema as S
    from isolde.grammar.dialect import DIALECT

    tree = sqlglot.parse_one(field.metadata[S.GENERATION_EXPRESSION], read=DIALECT)
    return {part.name.lower() for node in tree.find_all(exp.Column) for part in node.parts[:1]}


def _generated_check(struct: T.StructType, column: str, value_sql: str, row_sql: dict) -> str:
    import sqlglot
    import sqlglot.expressions as exp

    from ..catalog import schema as S
    from isolde.grammar.dialect import DIALECT, sql as render_sql

    field = S.field_named(struct, column)
    expression = field.metadata[S.GENERATION_EXPRESSION]
    tree = sqlglot.parse_one(expression, read=DIALECT)
    marks = {}
    for node in list(tree.find_all(exp.Column)):
        if node.table:
            continue
        name = node.name.lower()
        if name in row_sql and S.field_named(struct, name) is not None:
            mark = f"__isolde_gen_{len(marks)}__"
            marks[mark] = row_sql[name]
            node.replace(exp.column(mark))
    generated = render_sql(tree)
    for mark, sql in marks.items():
        generated = generated.replace(mark, f"({sql})")
    expected = f"CAST(({generated}) AS {type_sql(field.dataType)})"
    shown = ", ".join(f"'\\n - {c} : ', coalesce(CAST(({row_sql.get(c.lower(), quote(c))}) AS STRING), 'null')"
                      for c in [field.name] + [f.name for f in struct.fields
                                               if f.name != field.name and f.name.lower() in expression.lower()][:7])
    message = (f"concat({literal(f'CHECK constraint Generated Column ({quote(field.name)} <=> {expression}) violated by row with values:')}, "
               f"{shown})")
    return (f"CASE WHEN NOT (({value_sql}) <=> {expected}) THEN {_violation_sql('generated', field.name, message)} "
            f"ELSE true END")
