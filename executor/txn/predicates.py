"""Predicate analysis over partition values and file statistics (no data is read).

A read predicate is SQL text over a table's columns. It is split into its
partition-only conjuncts (which scope conflicts by partition values) and the rest
(which prunes files by min/max/nullCount stats). Evaluation is three-valued and
conservative: for a set of rows summarised by a range it answers "can some row make
this true?" and "can some row make this false?"; anything that cannot be analysed
answers yes to both, so an unanalysable predicate matches everything. That errs
towards conflicts and towards reading a file, never towards a lost update.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import sqlglot
from sqlglot import exp

from isolde.executor.log.actions import AddFile

_UTC = dt.timezone.utc
_EPOCH = dt.datetime(1970, 1, 1)
#: A timestamp literal or partition value without an offset may be in any session time zone.
_ZONE_SLACK_US = 14 * 3600 * 1_000_000
_MS_US = 1000
_STRING_PREFIX_LENGTH = 32

_INTEGRAL = {"byte", "short", "integer", "int", "long", "tinyint", "smallint", "bigint"}
_FLOATING = {"float", "double", "real"}

_UNKNOWN = object()


# --------------------------------------------------------------------------- typed values


def _type_kind(delta_type: Any) -> str:
    """A coarse comparison kind for a Delta schema type."""
    if not isinstance(delta_type, str):
        return "nested"
    t = delta_type.lower()
    if t in _INTEGRAL or t in _FLOATING or t.startswith("decimal"):
        return "number"
    if t == "string" or t.startswith("varchar") or t.startswith("char"):
        return "string"
    if t == "date":
        return "date"
    if t == "timestamp":
        return "timestamp"
    if t == "timestamp_ntz":
        return "timestamp_ntz"
    if t == "boolean":
        return "boolean"
    return "other"


_TS_RE = re.compile(
    r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?\s*(Z|UTC|[+-]\d{2}:?\d{2})?\s*$",
    re.IGNORECASE,
)


def _parse_timestamp(text: str) -> tuple[int, bool] | None:
    """(microseconds since the epoch, had an explicit zone) or None."""
    m = _TS_RE.match(text)
    if not m:
        return None
    year, month, day, hh, mm, ss, frac, zone = m.groups()
    try:
        value = dt.datetime(int(year), int(month), int(day), int(hh or 0), int(mm or 0), int(ss or 0))
    except ValueError:
        return None
    micros = int((frac or "0").ljust(6, "0")[:6])
    us = (value - _EPOCH) // dt.timedelta(microseconds=1) + micros
    if zone and zone.upper() not in ("Z", "UTC"):
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        us -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60) * 1_000_000
    return us, bool(zone)


def _datetime_us(value: dt.datetime) -> int:
    if value.tzinfo is not None:
        value = value.astimezone(_UTC).replace(tzinfo=None)
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def coerce(value: Any, kind: str, *, zone_slack: bool = True) -> tuple[Any, Any] | object:
    """A literal / partition value as an interval (lo, hi) of the column's comparison kind.

    Most values are exact (lo == hi); a timestamp without an explicit zone compared
    with a zoned TIMESTAMP column is widened by 14 hours each way. Returns _UNKNOWN
    when the value cannot be compared with the column safely.
    """
    if value is None:
        return (None, None)
    if kind == "number":
        if isinstance(value, bool):
            return _UNKNOWN
        if isinstance(value, (int, float, decimal.Decimal)):
            return (value, value)
        if isinstance(value, str):
            try:
                number = decimal.Decimal(value.strip())
            except decimal.InvalidOperation:
                return _UNKNOWN
            if not number.is_finite():
                return _UNKNOWN
            return (number, number)
        return _UNKNOWN
    if kind == "string":
        return (value, value) if isinstance(value, str) else _UNKNOWN
    if kind == "boolean":
        if isinstance(value, bool):
            return (value, value)
        if isinstance(value, str) and value.lower() in ("true", "false"):
            b = value.lower() == "true"
            return (b, b)
        return _UNKNOWN
    if kind == "date":
        if isinstance(value, dt.datetime):
            return _UNKNOWN
        if isinstance(value, dt.date):
            return (value, value)
        if isinstance(value, str):
            try:
                d = dt.date.fromisoformat(value.strip())
            except ValueError:
                return _UNKNOWN
            return (d, d)
        return _UNKNOWN
    if kind in ("timestamp", "timestamp_ntz"):
        zoned = False
        if isinstance(value, dt.datetime):
            us, zoned = _datetime_us(value), value.tzinfo is not None
        elif isinstance(value, dt.date):
            us = _datetime_us(dt.datetime(value.year, value.month, value.day))
        elif isinstance(value, str):
            parsed = _parse_timestamp(value)
            if parsed is None:
                return _UNKNOWN
            us, zoned = parsed
        else:
            return _UNKNOWN
        if kind == "timestamp" and not zoned and zone_slack:
            return (us - _ZONE_SLACK_US, us + _ZONE_SLACK_US)
        return (us, us)
    return _UNKNOWN


def _stat_bound(value: Any, kind: str, is_max: bool) -> Any:
    """A min/max from the stats JSON as a comparable bound, or None when unusable."""
    if value is None:
        return None
    if kind == "string":
        if not isinstance(value, str):
            return None
        if is_max and len(value) >= _STRING_PREFIX_LENGTH:
            return None  # possibly truncated: no longer an upper bound
        return value
    if kind in ("timestamp", "timestamp_ntz"):
        parsed = _parse_timestamp(value) if isinstance(value, str) else None
        if parsed is None:
            return None
        us, zoned = parsed
        if kind == "timestamp" and not zoned:
            return None  # a zoned column's stats are always in UTC with 'Z'; anything else is suspect
        return us + (_MS_US - 1 if is_max else 0)  # stats are truncated to milliseconds
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None  # NaN / infinities are not usable bounds
    got = coerce(value, kind, zone_slack=False)
    if got is _UNKNOWN or got[0] is None:
        return None
    return got[1] if is_max else got[0]


@dataclass(frozen=True)
class ColumnSummary:
    """What is known about a column over a set of rows (a file, or one partition value)."""

    min: Any = None  # None: unknown lower bound
    max: Any = None  # None: unknown upper bound
    null_count: int | None = None
    num_records: int | None = None

    @property
    def all_null(self) -> bool:
        return self.null_count is not None and self.num_records is not None and self.null_count >= self.num_records

    @property
    def has_null(self) -> bool | None:
        return None if self.null_count is None else self.null_count > 0


_EVERYTHING = ColumnSummary()


# --------------------------------------------------------------------------- schema binding


def schema_columns(schema: Mapping[str, Any] | None) -> dict[str, tuple[str, Any]]:
    """lower-cased top-level column name -> (name, Delta type)."""
    if not schema:
        return {}
    return {f["name"].lower(): (f["name"], f.get("type")) for f in schema.get("fields", [])}


def parse_predicate(sql: str | exp.Expression | None) -> exp.Expression | None:
    """SQL text (databricks dialect) to a sqlglot expression; None stays None."""
    if sql is None or isinstance(sql, exp.Expression):
        return sql
    return sqlglot.parse_one(sql, read="databricks")


def _top_level(column: exp.Column, columns: Mapping[str, tuple[str, Any]] | None = None) -> str | None:
    """Lower-cased top-level column name, or None when the reference reaches into a struct."""
    parts = [p.name.lower() for p in column.parts]
    if len(parts) == 1:
        return parts[0]
    if columns is not None and parts[0] in columns:
        return None  # `s.x` where s is a column: a struct field, not analysable here
    return parts[-1]  # `t.x`: an alias-qualified column


def referenced_columns(
    expression: exp.Expression, columns: Mapping[str, tuple[str, Any]] | None = None
) -> set[str]:
    """Lower-cased top-level columns referenced; a reference into a struct keeps its dotted path.

    Without ``columns`` (the schema) a dotted reference is taken as alias-qualified.
    """
    out = set()
    for c in expression.find_all(exp.Column):
        top = _top_level(c, columns)
        out.add(top if top is not None else ".".join(p.name.lower() for p in c.parts))
    return out


def conjuncts(expression: exp.Expression | None) -> list[exp.Expression]:
    if expression is None:
        return []
    node = expression
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def _and_all(parts: Sequence[exp.Expression]) -> exp.Expression | None:
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = exp.and_(out, p)
    return out


def _is_opaque(expression: exp.Expression) -> bool:
    return any(True for _ in expression.find_all(exp.Subquery, exp.Select, exp.Exists))


def split_partition_predicate(
    predicate: str | exp.Expression | None,
    partition_columns: Iterable[str],
    schema: Mapping[str, Any] | None = None,
) -> tuple[exp.Expression | None, exp.Expression | None]:
    """(conjunction of partition-only conjuncts, conjunction of the rest).

    Conjuncts without any column (``false``, ``1 = 1``) count as partition conjuncts:
    they hold or fail for every file alike, so ``false`` scopes a read to nothing.
    """
    expression = parse_predicate(predicate)
    partition_set = {c.lower() for c in partition_columns}
    columns = schema_columns(schema) if schema else None
    partition_parts, data_parts = [], []
    for c in conjuncts(expression):
        cols = referenced_columns(c, columns)
        if cols <= partition_set and not _is_opaque(c):  # constants (`false`) scope like partitions
            partition_parts.append(c)
        else:
            data_parts.append(c)
    return _and_all(partition_parts), _and_all(data_parts)


# --------------------------------------------------------------------------- evaluation

_MAYBE = (True, True)


def _literal(node: exp.Expression) -> Any:
    """A literal expression's Python value (None for NULL), or _UNKNOWN."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = str(node.this)
        try:
            return int(text)
        except ValueError:
            try:
                return decimal.Decimal(text)
            except decimal.InvalidOperation:
                return _UNKNOWN
    if isinstance(node, exp.Neg):
        inner = _literal(node.this)
        if isinstance(inner, (int, float, decimal.Decimal)) and not isinstance(inner, bool):
            return -inner
        return _UNKNOWN
    if isinstance(node, exp.Cast):
        inner = _literal(node.this)
        if inner is _UNKNOWN or inner is None:
            return inner
        to = node.to.this if isinstance(node.to, exp.DataType) else None
        T = exp.DataType.Type
        if to == T.DATE:
            try:
                return dt.date.fromisoformat(str(inner).strip()[:10])
            except ValueError:
                return _UNKNOWN
        if to in (T.TIMESTAMP, T.TIMESTAMPTZ, T.TIMESTAMPLTZ, T.DATETIME):
            parsed = _parse_timestamp(str(inner))
            if parsed is None:
                return _UNKNOWN
            us, zoned = parsed
            value = _EPOCH + dt.timedelta(microseconds=us)
            return value.replace(tzinfo=_UTC) if zoned else value
        if to == T.TIMESTAMPNTZ:
            parsed = _parse_timestamp(str(inner))
            return _UNKNOWN if parsed is None else _EPOCH + dt.timedelta(microseconds=parsed[0])
        if to in (T.INT, T.BIGINT, T.SMALLINT, T.TINYINT):
            try:
                return int(str(inner))
            except ValueError:
                return _UNKNOWN
        if to in (T.DOUBLE, T.FLOAT, T.DECIMAL):
            try:
                return decimal.Decimal(str(inner))
            except decimal.InvalidOperation:
                return _UNKNOWN
        if to in (T.VARCHAR, T.TEXT, T.CHAR):
            return str(inner) if not isinstance(inner, bool) else _UNKNOWN
        return _UNKNOWN
    return _UNKNOWN


class _Env:
    """Binds column names to their summaries for one file or partition."""

    def __init__(self, columns: Mapping[str, tuple[str, Any]], summaries: Mapping[str, ColumnSummary]):
        self.columns = columns
        self.summaries = summaries

    def column(self, node: exp.Expression) -> tuple[str, ColumnSummary] | None:
        while isinstance(node, exp.Paren):
            node = node.this
        if not isinstance(node, exp.Column):
            return None
        key = _top_level(node, self.columns)
        if key is None or key not in self.columns:
            return None
        return _type_kind(self.columns[key][1]), self.summaries.get(key, _EVERYTHING)


def _lt(a, b) -> bool | None:
    try:
        return a < b
    except TypeError:
        return None


def _compare(op: str, kind: str, s: ColumnSummary, value: Any) -> tuple[bool, bool]:
    """Can `col <op> value` be true / false for some row summarised by ``s``?"""
    bounds = coerce(value, kind)
    if bounds is _UNKNOWN:
        return _MAYBE
    lo, hi = bounds
    if lo is None or s.all_null:
        return (False, False)  # NULL on every row
    mn, mx = s.min, s.max
    try:
        if op == "=":
            can_true = (mx is None or not mx < lo) and (mn is None or not mn > hi)
            can_false = not (mn is not None and mx is not None and mn == mx == lo == hi)
        elif op == "<>":
            can_true = not (mn is not None and mx is not None and mn == mx == lo == hi)
            can_false = (mx is None or not mx < lo) and (mn is None or not mn > hi)
        elif op == "<":
            can_true = mn is None or mn < hi
            can_false = mx is None or mx >= lo
        elif op == "<=":
            can_true = mn is None or mn <= hi
            can_false = mx is None or mx > lo
        elif op == ">":
            can_true = mx is None or mx > lo
            can_false = mn is None or mn <= hi
        elif op == ">=":
            can_true = mx is None or mx >= lo
            can_false = mn is None or mn < hi
        else:
            return _MAYBE
    except TypeError:
        return _MAYBE
    return (bool(can_true), bool(can_false))


_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_OPS = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}


def _eval(node: exp.Expression, env: _Env) -> tuple[bool, bool]:
    """(can be TRUE for some row, can be FALSE for some row); NULL is neither."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        lt, lf = _eval(node.this, env)
        rt, rf = _eval(node.expression, env)
        return (lt and rt, lf or rf)
    if isinstance(node, exp.Or):
        lt, lf = _eval(node.this, env)
        rt, rf = _eval(node.expression, env)
        return (lt or rt, lf and rf)
    if isinstance(node, exp.Not):
        t, f = _eval(node.this, env)
        return (f, t)
    op = _OPS.get(type(node))
    if op is not None:
        left, right = env.column(node.this), env.column(node.expression)
        if left is not None and right is None:
            value = _literal(node.expression)
            return _MAYBE if value is _UNKNOWN else _compare(op, left[0], left[1], value)
        if right is not None and left is None:
            value = _literal(node.this)
            return _MAYBE if value is _UNKNOWN else _compare(_FLIP[op], right[0], right[1], value)
        if left is None and right is None:
            a, b = _literal(node.this), _literal(node.expression)
            if a is _UNKNOWN or b is _UNKNOWN:
                return _MAYBE
            if a is None or b is None:
                return (False, False)
            return _constant_compare(op, a, b)
        return _MAYBE
    if isinstance(node, exp.In):
        if node.args.get("query") is not None or node.args.get("unnest") is not None:
            return _MAYBE
        items = node.expressions
        if not items:
            return _MAYBE
        target = node.this
        can_true, can_false = False, True
        for item in items:
            t, f = _eval(exp.EQ(this=target, expression=item), env)
            can_true = can_true or t
            can_false = can_false and f
        return (can_true, can_false)
    if isinstance(node, exp.Between):
        low = exp.GTE(this=node.this, expression=node.args["low"])
        high = exp.LTE(this=node.this, expression=node.args["high"])
        return _eval(exp.And(this=low, expression=high), env)
    if isinstance(node, exp.Is):
        if isinstance(node.expression, exp.Null):
            bound = env.column(node.this)
            if bound is None:
                value = _literal(node.this)
                if value is _UNKNOWN:
                    return _MAYBE
                return (value is None, value is not None)
            s = bound[1]
            can_true = s.null_count is None or s.null_count > 0
            can_false = s.null_count is None or s.num_records is None or s.null_count < s.num_records
            return (can_true, can_false)
        return _MAYBE
    if isinstance(node, (exp.Boolean, exp.Null, exp.Literal)):
        value = _literal(node)
        if value is None:
            return (False, False)
        if isinstance(value, bool):
            return (value, not value)
        return _MAYBE
    if isinstance(node, exp.Column):
        bound = env.column(node)
        if bound is not None and bound[0] == "boolean":
            return _compare("=", "boolean", bound[1], True)
        return _MAYBE
    return _MAYBE


def _constant_compare(op: str, a: Any, b: Any) -> tuple[bool, bool]:
    try:
        result = {
            "=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
        }[op]
    except TypeError:
        return _MAYBE
    return (bool(result), not result)


# --------------------------------------------------------------------------- summaries


def partition_summaries(
    partition_values: Mapping[str, str | None], columns: Mapping[str, tuple[str, Any]]
) -> dict[str, ColumnSummary]:
    """Exact summaries of a file's partition columns (a NULL partition value is all-null)."""
    out = {}
    for name, raw in partition_values.items():
        key = name.lower()
        if key not in columns:
            continue
        if raw is None:
            out[key] = ColumnSummary(None, None, 1, 1)
            continue
        kind = _type_kind(columns[key][1])
        bounds = coerce(raw, kind)
        if bounds is _UNKNOWN:
            out[key] = ColumnSummary(None, None, 0, 1)
        else:
            out[key] = ColumnSummary(bounds[0], bounds[1], 0, 1)
    return out


def file_summaries(add: AddFile, columns: Mapping[str, tuple[str, Any]]) -> dict[str, ColumnSummary]:
    """Summaries of a file's columns from its stats and partition values.

    A deletion vector only removes rows, so min/max stay bounds, "all null" stays
    true and "no null" stays true: the stats are used as they are.
    """
    out: dict[str, ColumnSummary] = {}
    stats = add.parsed_stats or {}
    num_records = stats.get("numRecords")
    mins = stats.get("minValues") or {}
    maxs = stats.get("maxValues") or {}
    nulls = stats.get("nullCount") or {}
    lowered = {k.lower(): k for k in (*mins, *maxs, *nulls)}
    for key, original in lowered.items():
        if key not in columns:
            continue
        kind = _type_kind(columns[key][1])
        if kind in ("nested", "other"):
            continue
        null_count = nulls.get(original)
        out[key] = ColumnSummary(
            _stat_bound(mins.get(original), kind, False),
            _stat_bound(maxs.get(original), kind, True),
            null_count if isinstance(null_count, int) else None,
            num_records if isinstance(num_records, int) else None,
        )
    out.update(partition_summaries(add.partition_values, columns))
    return out


# --------------------------------------------------------------------------- public API


class Predicate:
    """A read predicate bound to a table: SQL text, its partition part and its data part."""

    def __init__(
        self,
        sql: str | exp.Expression | None,
        schema: Mapping[str, Any] | None,
        partition_columns: Iterable[str] = (),
        *,
        partition_sql: str | exp.Expression | None = None,
    ):
        self.partition_columns = tuple(partition_columns)
        self.columns = schema_columns(schema)
        self.analysable = True
        try:
            expression = parse_predicate(sql)
            extra_partition = parse_predicate(partition_sql)
        except sqlglot.errors.SqlglotError:
            expression, extra_partition, self.analysable = None, None, False
        self.expression = expression
        parts = conjuncts(expression) + conjuncts(extra_partition)
        self.partition_expression, self.data_expression = split_partition_predicate(
            _and_all(parts), self.partition_columns, schema
        )
        self.sql = _render(sql, partition_sql)

    @property
    def is_true(self) -> bool:
        """True when the predicate selects every file (no analysable condition)."""
        return self.analysable and self.partition_expression is None and self.data_expression is None

    def partition_may_match(self, partition_values: Mapping[str, str | None]) -> bool:
        """Could rows with these partition values satisfy the partition part?"""
        if not self.analysable or self.partition_expression is None:
            return True
        env = _Env(self.columns, partition_summaries(partition_values, self.columns))
        return _eval(self.partition_expression, env)[0]

    def file_may_match(self, add: AddFile) -> bool:
        """Could some row of this file satisfy the whole predicate (partition values + stats)?"""
        if not self.analysable:
            return True
        if not self.partition_may_match(add.partition_values):
            return False
        if self.data_expression is None:
            return True
        env = _Env(self.columns, file_summaries(add, self.columns))
        return _eval(self.data_expression, env)[0]

    def filter(self, files: Iterable[AddFile]) -> list[AddFile]:
        return [f for f in files if self.file_may_match(f)]

    def __repr__(self) -> str:
        return f"Predicate({self.sql!r})"


def _render(sql, partition_sql) -> str | None:
    parts = []
    for p in (partition_sql, sql):
        if p is None:
            continue
        parts.append(p.sql(dialect="databricks") if isinstance(p, exp.Expression) else str(p))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else " AND ".join(f"({p})" for p in parts)


def prune_files(
    files: Iterable[AddFile],
    predicate_sql: str | exp.Expression | None,
    schema: Mapping[str, Any] | None,
    partition_columns: Iterable[str] = (),
) -> list[AddFile]:
    """The files that may hold rows matching ``predicate_sql`` (data skipping)."""
    files = list(files)
    if predicate_sql is None:
        return files
    return Predicate(predicate_sql, schema, partition_columns).filter(files)


def file_may_match(
    add: AddFile, predicate_sql: str | exp.Expression | None, schema: Mapping[str, Any] | None,
    partition_columns: Iterable[str] = (),
) -> bool:
    if predicate_sql is None:
        return True
    return Predicate(predicate_sql, schema, partition_columns).file_may_match(add)
