"""Predicate analysis for conflict scopes (no Spark): split conditions into conjuncts, tell
which table each column belongs to, decide whether a conjunct can be analysed, and render
the target-only part as Spark SQL text over plain target column names.

A conjunct is *analysable* when it is deterministic, calls only functions isolde knows,
holds no subquery and touches no struct/array/map value. Dropping a conjunct from a
conjunction only widens the set of rows it describes, so callers may drop what they cannot
analyse (sound for conflict detection: err towards conflict).
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

import sqlglot
import sqlglot.expressions as exp

from isolde.grammar.dialect import DIALECT, needs_quotes  # noqa: E402

# sqlglot classes whose value changes from call to call (or with the clock / session).
NON_DETERMINISTIC = tuple(
    getattr(exp, name)
    for name in (
        "Rand", "Randn", "Randstr", "Uuid", "CurrentDate", "CurrentDatetime", "CurrentTime",
        "CurrentTimestamp", "CurrentTimestampLTZ", "CurrentUser", "CurrentSchema", "CurrentDatabase",
        "CurrentCatalog", "CurrentTimezone", "CurrentSession", "CurrentUserId",
    )
    if hasattr(exp, name)
)

# Spark functions sqlglot leaves as Anonymous. Known deterministic ones are analysable;
# any other Anonymous call (a UDF, or a function we do not know) is not.
NON_DETERMINISTIC_NAMES = frozenset(
    {
        "rand", "random", "randn", "uuid", "shuffle", "monotonically_increasing_id",
        "spark_partition_id", "input_file_name", "input_file_block_start", "input_file_block_length",
        "now", "current_timestamp", "current_date", "localtimestamp", "unix_timestamp",
        "current_user", "user", "session_user", "current_timezone", "rand_str", "randstr",
        "try_reflect", "reflect", "java_method", "raise_error", "assert_true",
    }
)
DETERMINISTIC_ANONYMOUS = frozenset(
    {
        "nvl2", "ifnull", "nanvl", "isnan", "isnull", "isnotnull", "btrim", "ltrim", "rtrim", "char_length",
        "character_length", "octet_length", "bit_length", "lcase", "ucase", "left", "right", "instr",
        "locate", "lpad", "rpad", "repeat", "replace", "reverse", "split_part", "startswith", "endswith",
        "contains", "substring_index", "translate", "initcap", "soundex", "ascii", "chr", "char", "base64",
        "unbase64", "hex", "unhex", "md5", "sha1", "sha2", "crc32", "hash", "xxhash64", "abs", "sign",
        "signum", "mod", "pmod", "positive", "negative", "bround", "ceiling", "factorial", "greatest",
        "least", "dayofweek", "dayofmonth", "dayofyear", "weekofyear", "weekday", "quarter", "hour",
        "minute", "second", "last_day", "next_day", "make_date", "make_timestamp", "to_date",
        "to_timestamp", "date_format", "date_trunc", "trunc", "datediff", "date_diff", "months_between",
        "add_months", "date_sub", "date_add", "year", "month", "day", "decode", "nullif", "typeof",
        "try_cast", "try_add", "try_subtract", "try_multiply", "try_divide", "string", "int", "bigint",
        "double", "boolean", "date", "timestamp", "decimal", "float", "smallint", "tinyint", "binary",
        "equal_null", "regexp", "regexp_like", "rlike", "regexp_extract", "regexp_replace", "like", "ilike",
    }
)

COMPLEX_ACCESS = (exp.Bracket, exp.Dot)
SUBQUERY_NODES = (exp.Subquery, exp.Exists, exp.Select, exp.Union, exp.Intersect, exp.Except)
_SIMPLE_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_condition(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read=DIALECT, into=exp.Condition)


def operands(tree: Optional[exp.Expression], kind: type = exp.And) -> list[exp.Expression]:
    """The operands of a chain of ``kind`` (AND / OR), left to right, parentheses looked
    through. Iterative: generated SQL chains thousands of conditions, deeper than Python's
    recursion limit."""
    if tree is None:
        return []
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, kind):
            stack.append(node.expression)
            stack.append(node.this)
        else:
            out.append(node)
    return out


def conjuncts(tree: Optional[exp.Expression]) -> list[exp.Expression]:
    """Top-level AND operands (parentheses around a conjunction are looked through)."""
    return operands(tree, exp.And)


def is_complex_type(dtype: Any) -> bool:
    """struct / array / map, given a Spark type string, a Delta schema JSON type or a pyspark DataType."""
    if dtype is None:
        return False
    if isinstance(dtype, str):
        return dtype.strip().lower().startswith(("struct", "array", "map"))
    if isinstance(dtype, Mapping):
        return str(dtype.get("type", "")).lower() in ("struct", "array", "map")
    return type(dtype).__name__ in ("StructType", "ArrayType", "MapType")


def quote_ident(name: str) -> str:
    if not needs_quotes(name):
        return name
    return "`" + name.replace("`", "``") + "`"


def column_node(name: str) -> exp.Column:
    """A column reference that renders back to ``name`` (quoted wherever it must be)."""
    return exp.Column(this=exp.Identifier(this=name, quoted=quote_ident(name) != name))


def to_sql(tree: exp.Expression) -> str:
    return tree.sql(dialect=DIALECT)


# --------------------------------------------------------------------------- literals


class Unrenderable(ValueError):
    """A value that cannot be written as an exact Spark SQL literal (the caller widens)."""


class TimestampMicros(int):
    """A TIMESTAMP value as microseconds since the epoch, collected with ``unix_micros`` so that
    no process or session time zone changes it; rendered with an explicit UTC offset."""


_EPOCH = datetime.datetime(1970, 1, 1)


def sql_literal(value: Any) -> str:
    """An exact Spark SQL literal for a Python value collected from Spark."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, TimestampMicros):
        try:
            moment = _EPOCH + datetime.timedelta(microseconds=int(value))
        except OverflowError as e:
            raise Unrenderable(repr(value)) from e
        return f"TIMESTAMP '{moment.isoformat(sep=' ', timespec='microseconds')}Z'"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(value):
            return f"CAST('{'-' if value < 0 else ''}Infinity' AS DOUBLE)"
        return repr(value) + "D"
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise Unrenderable(repr(value))
        return f"{value}BD"
    if isinstance(value, str):
        return exp.Literal.string(value).sql(dialect=DIALECT)
    if isinstance(value, datetime.datetime):
        # naive datetimes from collect() are in the Python process's zone, not Spark's
        # session zone: not exact, so the caller widens.
        raise Unrenderable(repr(value))
    if isinstance(value, datetime.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, (bytes, bytearray)):
        return "X'" + bytes(value).hex().upper() + "'"
    raise Unrenderable(repr(value))


# --------------------------------------------------------------------------- column resolution


@dataclass
class Side:
    """One table visible to a condition: its qualifiers and columns (lower-case name -> canonical)."""

    qualifiers: list[tuple[str, ...]]
    columns: Optional[dict[str, str]]  # None = unknown columns
    types: dict[str, Any] = field(default_factory=dict)


@dataclass
class Analysis:
    """What one conjunct is: which sides it references and whether it can be analysed."""

    tree: exp.Expression
    sides: set[str]
    analysable: bool
    reads_target: bool = False  # a subquery in it reads the target table
    reasons: list[str] = field(default_factory=list)

    @property
    def target_only(self) -> bool:
        return self.analysable and self.sides <= {"target"}


class Resolver:
    """Resolves columns of a condition against the target (and, for MERGE, the source)."""

    def __init__(self, target: Side, source: Optional[Side] = None, target_table: Sequence[str] = ()):
        self.target = target
        self.source = source
        self.target_table = tuple(p.lower() for p in target_table)

    # -- columns
    def classify(self, col: exp.Column) -> tuple[str, Optional[str], bool]:
        """-> (side, canonical target column or None, nested_access). side in target|source|unknown."""
        parts = [p.lower() for p in (col.catalog, col.db, col.table) if p] + [col.name.lower()]
        sides = [("target", self.target)] + ([("source", self.source)] if self.source else [])
        # qualified by a table alias / name
        for name, side in sides:
            for q in side.qualifiers:
                if q and len(parts) > len(q) and tuple(parts[: len(q)]) == q:
                    rest = parts[len(q):]
                    return self._in_side(name, side, rest)
        # unqualified (or a struct field path of an unqualified column)
        matches = [(name, side) for name, side in sides if side.columns is not None and parts[0] in side.columns]
        unknown = [name for name, side in sides if side.columns is None]
        if len(matches) == 1 and not unknown:
            name, side = matches[0]
            return self._in_side(name, side, parts)
        if len(matches) == 1 and matches[0][0] == "target" and self.source is None:
            return self._in_side("target", self.target, parts)
        return "unknown", None, False

    @staticmethod
    def _in_side(name: str, side: Side, rest: list[str]) -> tuple[str, Optional[str], bool]:
        if side.columns is None:
            return name, None, len(rest) > 1
        canonical = side.columns.get(rest[0])
        if canonical is None:
            return "unknown", None, False
        return name, canonical, len(rest) > 1

    def is_target_table(self, table: exp.Table) -> bool:
        """Does ``table`` read the target's current rows? (Time travel reads an immutable version.)"""
        if not self.target_table or table.args.get("version") is not None:
            return False
        name = (table.name or "").lower()
        if table.db and table.db.lower() == "delta" and len(self.target_table) == 2 and self.target_table[0] == "delta":
            return name == self.target_table[1]
        # err towards conflict: the same last name part counts as the target
        return name == self.target_table[-1]

    # -- conjuncts
    def analyse(self, tree: exp.Expression) -> Analysis:
        a = Analysis(tree=tree, sides=set(), analysable=True)
        for node in tree.walk():
            if isinstance(node, exp.Table) and self.is_target_table(node):
                a.reads_target = True
            if isinstance(node, SUBQUERY_NODES):
                a.analysable = False
        if a.reads_target:
            a.reasons.append("subquery reads the target table")
        elif not a.analysable:
            a.reasons.append("subquery")
        for node in tree.walk():
            if isinstance(node, NON_DETERMINISTIC):
                a.analysable = False
                a.reasons.append(f"non-deterministic {type(node).__name__.lower()}()")
            elif isinstance(node, exp.Anonymous):
                fname = str(node.name).lower()
                if fname in NON_DETERMINISTIC_NAMES:
                    a.analysable = False
                    a.reasons.append(f"non-deterministic {fname}()")
                elif fname not in DETERMINISTIC_ANONYMOUS:
                    a.analysable = False
                    a.reasons.append(f"unknown function or UDF {fname}()")
            elif isinstance(node, COMPLEX_ACCESS):
                a.analysable = False
                a.reasons.append("access into a struct/array/map value")
        inner = {id(c) for sub in tree.find_all(*SUBQUERY_NODES) if sub is not tree for c in sub.find_all(exp.Column)}
        for col in tree.find_all(exp.Column):
            if id(col) in inner:  # a subquery's own columns
                continue
            side, name, nested = self.classify(col)
            if side == "unknown":
                a.analysable = False
                a.reasons.append(f"column {col.sql(dialect=DIALECT)} cannot be attributed")
                a.sides.add("unknown")
                continue
            a.sides.add(side)
            if nested:
                a.analysable = False
                a.reasons.append(f"condition on a struct field {col.sql(dialect=DIALECT)}")
            elif side == "target" and is_complex_type(self.target.types.get(name)):
                a.analysable = False
                a.reasons.append(f"condition on complex-typed column {name}")
        return a

    def render_target(self, tree: exp.Expression) -> str:
        """SQL text of a target-only conjunct over plain (unqualified) target column names."""

        def swap(node):
            if isinstance(node, exp.Column):
                side, name, _ = self.classify(node)
                if side == "target" and name is not None:
                    return column_node(name)
            return node

        return to_sql(tree.copy().transform(swap))

    def target_columns_of(self, tree: exp.Expression) -> set[str]:
        out = set()
        for col in tree.find_all(exp.Column):
            side, name, _ = self.classify(col)
            if side == "target" and name:
                out.add(name)
        return out


def and_all(parts: Iterable[str]) -> Optional[str]:
    items = [p for p in parts if p]
    if not items:
        return None
    if len(items) == 1:
        return items[0]
    return " AND ".join(_wrap(p, exp.Or) for p in items)


def or_all(parts: Iterable[str]) -> Optional[str]:
    items = [p for p in parts if p]
    if not items:
        return None
    if len(items) == 1:
        return items[0]
    return " OR ".join(_wrap(p, exp.And) for p in items)


def _wrap(sql: str, kind) -> str:
    tree = parse_condition(sql)
    if isinstance(tree, kind):
        return f"({sql})"
    return sql


def split_conjunct_sql(sql: Optional[str]) -> list[str]:
    if not sql:
        return []
    return [to_sql(c) for c in conjuncts(parse_condition(sql))]
