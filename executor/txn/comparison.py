"""Spark's comparison semantics for "column <op> literal" over statistics (no data read).

Data skipping and conflict pruning ask one question of a file or a partition: *can some row
summarised by these statistics satisfy ``col <op> literal``?* Answering it right means
comparing the way Spark compares, not the way Python does: Spark first coerces both sides
to one type (measured on Spark 4 with ANSI on, the default), and that type decides the
answer. ``double_col = 0.1`` compares doubles, ``float_col = 0.1`` compares the float
widened to a double with the decimal 0.1 rounded to a double, ``decimal(38,0)_col = 0.1``
compares with 0.1 rounded to scale 0, NaN is larger than every other number and equal to
itself, -0.0 equals 0.0, a timestamp literal without an offset is read in the session zone.

Every value here becomes an interval of *keys* in one comparison domain:

* ``exact``  ints and Decimals compared exactly (integral and decimal columns, integral and
  decimal literals); when Spark's common decimal type loses scale, both sides are rounded
  outward to that scale (floor for lower bounds, ceiling for upper bounds);
* ``double`` (is_nan, float) pairs, NaN the largest; floats, doubles and anything compared
  with them. A literal Spark would round to a double becomes the interval of its two
  neighbouring doubles when the rounding is inexact, and statistics are widened by one ulp
  outward, so one ulp of disagreement between two roundings never skips a matching file;
* ``string`` code points (Spark's UTF8_BINARY order is the code point order);
* ``date`` (ordinal), ``ts`` (UTC microseconds), ``ntz`` (wall-clock microseconds),
  ``bool``.

A statistic is turned into a :class:`Bounds` (lower and upper key, either unknown); a
literal into a (lo, hi) key interval. Anything not modelled here answers "unknown", which
callers treat as "may match": a wrong answer can only ever keep a file, never skip one.

String maxima are prefix bounds: Delta and other engines truncate long string statistics
(Delta keeps 32 characters and appends a tie-breaker), so a max ``m`` only says that every
value's first ``len(m)`` characters are <= ``m``. Trailing tie-breaker characters are dropped
first. This is exact for untruncated maxima too (a value is never longer than itself).
Floating-point maxima never exclude NaN: Parquet footers (pyarrow, delta-rs) leave NaN out
of min/max, so a file may hold NaN whatever its max says, and in Spark NaN > everything.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np
from sqlglot import exp

UNKNOWN = object()  # "cannot be analysed": the caller assumes the comparison may hold

NAN_KEY = (1, 0.0)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_US = 1_000_000
#: a timestamp without an offset may be in any session zone (UTC-12 .. UTC+14, and a margin)
ZONE_SLACK_US = 15 * 3600 * _US
_MS_US = 1000
_MAX_DECIMAL_PRECISION = 38
_TIE_BREAKERS = "\U0010ffff\uffff\ufffd"

_INTEGRAL_DIGITS = {"byte": 3, "tinyint": 3, "short": 5, "smallint": 5, "integer": 10, "int": 10,
                    "long": 20, "bigint": 20}


# --------------------------------------------------------------------------- types


@dataclass(frozen=True)
class SqlType:
    """A Spark type as far as comparisons care: a family plus decimal precision/scale."""

    family: str  # integral | decimal | float | double | string | date | ts | ntz | bool | other
    precision: int = 0
    scale: int = 0


OTHER = SqlType("other")
_DECIMAL_RE = re.compile(r"^\s*decimal\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$", re.IGNORECASE)


def column_type(delta_type: Any, metadata: Optional[Mapping] = None) -> SqlType:
    """The comparison type of a Delta schema column type (``"double"``, ``"decimal(10,2)"``)."""
    if not isinstance(delta_type, str):
        return OTHER
    t = delta_type.strip().lower()
    if t in _INTEGRAL_DIGITS:
        return SqlType("integral", _INTEGRAL_DIGITS[t], 0)
    if t in ("float", "real"):
        return SqlType("float")
    if t == "double":
        return SqlType("double")
    m = _DECIMAL_RE.match(t)
    if m:
        return SqlType("decimal", int(m.group(1) or 10), int(m.group(2) or 0))
    if t == "string" or t.startswith("varchar"):
        char_varchar = str((metadata or {}).get("__CHAR_VARCHAR_TYPE_STRING", "")).lower()
        return OTHER if char_varchar.startswith("char") else SqlType("string")  # CHAR(n) pads
    if t == "date":
        return SqlType("date")
    if t == "timestamp":
        return SqlType("ts")
    if t == "timestamp_ntz":
        return SqlType("ntz")
    if t == "boolean":
        return SqlType("bool")
    return OTHER


# --------------------------------------------------------------------------- literals


@dataclass(frozen=True)
class Literal:
    """A SQL literal: its Spark type and value (None for NULL).

    ``value`` is an int, Decimal, float (double / float literals, NaN included), str,
    date, (microseconds, had_offset) for timestamps, or bool.
    """

    type: SqlType
    value: Any


NULL = Literal(SqlType("null"), None)
_T = exp.DataType.Type
_INT_RE = re.compile(r"^\s*[+-]?\d+\s*$")
_NUM_RE = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")
_TS_RE = re.compile(
    r"^\s*([+-]?\d{4,6})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{0,9}))?)?)?"
    r"\s*(Z|UTC|GMT|[+-]\d{1,2}(?::?\d{2})?)?\s*$",
    re.IGNORECASE,
)
_DATE_RE = re.compile(r"^\s*([+-]?\d{4,6})-(\d{1,2})-(\d{1,2})(?:[ T].*)?$")


def _decimal_type_of(value: decimal.Decimal) -> SqlType:
    sign, digits, exponent = value.as_tuple()
    scale = max(0, -exponent)
    precision = max(len(digits), scale) if exponent <= 0 else len(digits) + exponent
    return SqlType("decimal", max(precision, 1), scale)


def number_literal(text: str) -> Literal | object:
    """Spark's type for an unadorned number: INT, BIGINT, DECIMAL(p,s) or (with an exponent) DOUBLE."""
    text = text.strip()
    if "e" in text.lower():
        try:
            return Literal(SqlType("double"), float(text))
        except ValueError:
            return UNKNOWN
    try:
        value = decimal.Decimal(text)
    except decimal.InvalidOperation:
        return UNKNOWN
    if "." not in text:
        n = int(value)
        if -(2**31) <= n < 2**31:
            return Literal(SqlType("integral", 10), n)
        if -(2**63) <= n < 2**63:
            return Literal(SqlType("integral", 20), n)
    return Literal(_decimal_type_of(value), value)


def parse_timestamp(text: str) -> tuple[int, Optional[int]] | None:
    """(wall-clock microseconds since the epoch, UTC offset in microseconds or None)."""
    m = _TS_RE.match(text)
    if not m:
        return None
    year, month, day, hh, mm, ss, frac, zone = m.groups()
    try:
        wall = dt.datetime(int(year), int(month), int(day), int(hh or 0), int(mm or 0), int(ss or 0))
    except ValueError:
        return None
    us = (wall - _EPOCH) // dt.timedelta(microseconds=1) + int((frac or "0")[:6].ljust(6, "0"))
    if zone is None:
        return us, None
    if zone.upper() in ("Z", "UTC", "GMT"):
        return us, 0
    sign = 1 if zone[0] == "+" else -1
    digits = zone[1:].replace(":", "")
    hours, minutes = int(digits[:-2] or 0) if len(digits) > 2 else int(digits), int(digits[-2:]) if len(digits) > 2 else 0
    return us, sign * (hours * 3600 + minutes * 60) * _US


def _parse_date(text: str) -> dt.date | None:
    m = _DATE_RE.match(text)
    if not m:
        return None
    try:
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def _type_of_cast(to: exp.DataType) -> SqlType | None:
    kind = to.this
    if kind in (_T.TINYINT, _T.SMALLINT, _T.INT, _T.BIGINT):
        return SqlType("integral", {_T.TINYINT: 3, _T.SMALLINT: 5, _T.INT: 10, _T.BIGINT: 20}[kind])
    if kind == _T.FLOAT:
        return SqlType("float")
    if kind == _T.DOUBLE:
        return SqlType("double")
    if kind == _T.DECIMAL:
        params = [int(p.name) if isinstance(p, exp.DataTypeParam) else int(p.sql()) for p in to.expressions]
        precision = params[0] if params else 10
        scale = params[1] if len(params) > 1 else 0
        return SqlType("decimal", precision, scale)
    if kind in (_T.TEXT, _T.VARCHAR, _T.NVARCHAR):
        return SqlType("string")
    if kind == _T.DATE:
        return SqlType("date")
    if kind in (_T.TIMESTAMP, _T.TIMESTAMPTZ, _T.TIMESTAMPLTZ, _T.DATETIME):
        return SqlType("ts")
    if kind == _T.TIMESTAMPNTZ:
        return SqlType("ntz")
    if kind == _T.BOOLEAN:
        return SqlType("bool")
    return None


def _float32(x: float) -> float:
    return float(np.float32(x))


def _parse_double(text: str) -> float | None:
    t = text.strip().lower()
    if t in ("nan", "+nan", "-nan"):
        return math.nan
    if t in ("inf", "+inf", "infinity", "+infinity"):
        return math.inf
    if t in ("-inf", "-infinity"):
        return -math.inf
    t = t[:-1] if t[-1:] in ("d", "f") else t
    return float(t) if _NUM_RE.match(t) else None


def cast_literal(lit: Literal, to: SqlType) -> Literal | object:
    """``CAST(literal AS to)`` as Spark (ANSI) evaluates it, where that is certain; else UNKNOWN."""
    v, src = lit.value, lit.type.family
    if v is None:
        return Literal(to, None)
    fam = to.family
    try:
        if fam == "integral":
            if src == "integral":
                n = v
            elif src == "decimal":
                n = int(v)  # truncates toward zero
            elif src == "string" and _INT_RE.match(v):
                n = int(v)
            else:
                return UNKNOWN
            bits = {3: 8, 5: 16, 10: 32, 20: 64}[to.precision]
            return Literal(to, n) if -(2 ** (bits - 1)) <= n < 2 ** (bits - 1) else UNKNOWN
        if fam in ("double", "float"):
            if src in ("integral", "decimal"):
                x = float(v)
                if fam == "double" and decimal.Decimal(x) != decimal.Decimal(v):
                    return UNKNOWN if math.isinf(x) else Literal(to, ("inexact", x))
            elif src in ("double", "float"):
                x = v
            elif src == "string":
                x = _parse_double(v)
                if x is None:
                    return UNKNOWN
            else:
                return UNKNOWN
            if fam == "float":
                return Literal(to, _float32(x) if not isinstance(x, tuple) else UNKNOWN)
            return Literal(to, x)
        if fam == "decimal":
            if src in ("integral", "decimal"):
                d = decimal.Decimal(v)
            elif src == "string" and _NUM_RE.match(v):
                d = decimal.Decimal(v.strip())
            else:
                return UNKNOWN
            q = d.quantize(decimal.Decimal(1).scaleb(-to.scale), rounding=decimal.ROUND_HALF_UP,
                           context=decimal.Context(prec=80))
            if len(q.as_tuple().digits) - max(0, -q.as_tuple().exponent) > to.precision - to.scale and q != 0:
                return UNKNOWN  # overflow: an error in ANSI mode
            return Literal(to, q)
        if fam == "string":
            if src == "string":
                return Literal(to, v)
            if src == "integral":
                return Literal(to, str(v))
            return UNKNOWN
        if fam == "date":
            if src == "string":
                d = _parse_date(v)
                return UNKNOWN if d is None else Literal(to, d)
            if src == "date":
                return Literal(to, v)
            return UNKNOWN
        if fam in ("ts", "ntz"):
            if src == "string":
                parsed = parse_timestamp(v)
                if parsed is None:
                    return UNKNOWN
                if fam == "ntz" and parsed[1] is not None:
                    return UNKNOWN
                return Literal(to, parsed)
            if src == "date":
                return Literal(to, ((v - _EPOCH_DATE).days * 86400 * _US, None))
            if src in ("ts", "ntz") and src == fam:
                return Literal(to, v)
            return UNKNOWN
        if fam == "bool":
            if src == "bool":
                return Literal(to, v)
            if src == "string":
                t = v.strip().lower()
                if t in ("t", "true", "y", "yes", "1"):
                    return Literal(to, True)
                if t in ("f", "false", "n", "no", "0"):
                    return Literal(to, False)
            return UNKNOWN
    except (ValueError, ArithmeticError, OverflowError, TypeError):
        return UNKNOWN
    return UNKNOWN


def literal(node: exp.Expression) -> Literal | object:
    """A literal expression (number, string, typed literal, CAST of a literal, NULL) or UNKNOWN."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Null):
        return NULL
    if isinstance(node, exp.Boolean):
        return Literal(SqlType("bool"), bool(node.this))
    if isinstance(node, exp.Literal):
        if node.is_string:
            return Literal(SqlType("string"), node.this)
        return number_literal(str(node.this))
    if isinstance(node, exp.Neg):
        inner = literal(node.this)
        if inner is UNKNOWN or inner.value is None:
            return inner
        if inner.type.family in ("integral", "decimal", "double", "float") and not isinstance(inner.value, tuple):
            return Literal(inner.type, -inner.value)
        return UNKNOWN
    if isinstance(node, (exp.Cast, exp.TryCast)) and isinstance(node.to, exp.DataType):
        inner = literal(node.this)
        to = _type_of_cast(node.to)
        if inner is UNKNOWN or to is None:
            return UNKNOWN
        return cast_literal(inner, to)
    return UNKNOWN


# --------------------------------------------------------------------------- domains


@dataclass(frozen=True)
class Domain:
    """Where Spark compares a column with a literal: a key family and, for decimals, the scale
    both sides are rounded to (None: no rounding)."""

    family: str  # exact | double | string | date | ts | ntz | bool
    scale: Optional[int] = None


def _literal_digits(lit: Literal) -> tuple[int, int]:
    if lit.type.family == "integral":
        digits = len(str(abs(lit.value))) if lit.value is not None else 1
        return digits, 0
    return lit.type.precision, lit.type.scale


_INTEGRAL_BITS = {3: 8, 5: 16, 10: 32, 20: 64}


def _outside_integral_range(lit: Literal, col: SqlType) -> bool:
    value = lit.value
    if isinstance(value, tuple):
        value = value[1]
    if not isinstance(value, (int, float, decimal.Decimal)) or isinstance(value, bool):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return True
    bits = _INTEGRAL_BITS.get(col.precision, 64)
    return not (-(2 ** (bits - 1)) <= value <= 2 ** (bits - 1) - 1)


_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_FOLDS_TRUE_BELOW_LONG = {">": True, ">=": True, "<": False, "<=": False}


def folded_comparison(op: str, col: SqlType, lit: Literal) -> bool | None:
    """The constant Spark's analyser puts in place of ``col <op> lit`` when an integral column is
    ordered against a DECIMAL literal beyond BIGINT's range, or None when it does not.

    Spark's type coercion (DecimalPrecision) replaces ``l > -9223372036854775809BD`` by TRUE and
    ``l < ...`` by FALSE before anything is evaluated, so a NULL ``l`` matches too: a file of
    NULLs must not be skipped for it. ``=``, ``<>``, IN and ``<=>`` keep NULL semantics.
    """
    if col.family != "integral" or lit.type.family != "decimal" or op not in _FOLDS_TRUE_BELOW_LONG:
        return None
    value = lit.value
    if not isinstance(value, (int, decimal.Decimal)) or isinstance(value, bool):
        return None
    if value < _LONG_MIN:
        return _FOLDS_TRUE_BELOW_LONG[op]
    if value > _LONG_MAX:
        return not _FOLDS_TRUE_BELOW_LONG[op]
    return None


def domain(col: SqlType, lit: Literal) -> Domain | None:
    """Spark's comparison domain for ``col <op> lit`` (Spark 4 type coercion), or None."""
    c, l = col.family, lit.type.family
    if c == "integral" and _outside_integral_range(lit, col):
        return None  # Spark folds such a comparison to a constant at analysis (NULL rows included)
    if c in ("integral", "decimal"):
        if l in ("double", "float"):
            return Domain("double")
        if l == "string":
            return Domain("exact") if c == "integral" else Domain("double")
        if l == "integral" and c == "integral":
            return Domain("exact")
        if l in ("integral", "decimal"):
            p1, s1 = (col.precision, col.scale)
            p2, s2 = _literal_digits(lit)
            scale, rng = max(s1, s2), max(p1 - s1, p2 - s2)
            if rng + scale > _MAX_DECIMAL_PRECISION:
                return Domain("exact", max(0, scale - (rng + scale - _MAX_DECIMAL_PRECISION)))
            return Domain("exact")
        return None
    if c in ("float", "double"):
        return Domain("double") if l in ("integral", "decimal", "double", "float", "string") else None
    if c == "string":
        return Domain("string") if l == "string" else None
    if c == "date":
        if l in ("string", "date"):
            return Domain("date")
        return Domain(l) if l in ("ts", "ntz") else None
    if c == "ts":
        return Domain("ts") if l in ("string", "date", "ts", "ntz") else None
    if c == "ntz":
        if l in ("string", "date", "ntz"):
            return Domain("ntz")
        return Domain("ts") if l == "ts" else None
    if c == "bool":
        return Domain("bool") if l in ("bool", "string") else None
    return None


def _round(value: decimal.Decimal | int, scale: Optional[int], up: bool) -> decimal.Decimal | int:
    if scale is None:
        return value
    q = decimal.Decimal(1).scaleb(-scale)
    return decimal.Decimal(value).quantize(q, rounding=decimal.ROUND_CEILING if up else decimal.ROUND_FLOOR,
                                           context=decimal.Context(prec=100))


def _double_key(x: float) -> tuple:
    return NAN_KEY if math.isnan(x) else (0, x + 0.0)  # -0.0 + 0.0 == 0.0


def _next(x: float, up: bool) -> float:
    return math.nextafter(x, math.inf if up else -math.inf)


def _to_double_bound(value: Any, up: bool) -> float:
    """The nearest double at or beyond ``value`` in the bound's direction (outward rounding)."""
    if isinstance(value, float):
        return value
    x = float(value)
    exact = decimal.Decimal(x)
    target = decimal.Decimal(value)
    if up and exact < target:
        x = _next(x, True)
    elif not up and exact > target:
        x = _next(x, False)
    return x


def literal_keys(lit: Literal, dom: Domain, zone_slack: bool = True) -> tuple[Any, Any] | object:
    """The literal as a (lo, hi) key interval in ``dom``; (None, None) for NULL; or UNKNOWN."""
    if lit.value is None:
        return (None, None)
    fam = dom.family
    if fam == "exact":
        if lit.type.family == "string":
            got = cast_literal(lit, SqlType("integral", 20))
            if got is UNKNOWN:
                return UNKNOWN
            lit = got
        if lit.type.family not in ("integral", "decimal"):
            return UNKNOWN
        return (_round(lit.value, dom.scale, False), _round(lit.value, dom.scale, True))
    if fam == "double":
        got = cast_literal(lit, SqlType("float" if lit.type.family == "float" else "double"))
        if got is UNKNOWN:
            return UNKNOWN
        x = got.value
        if isinstance(x, tuple):  # inexact decimal -> double: either neighbour
            _, x = x
            return (_double_key(_next(x, False)), _double_key(_next(x, True)))
        return (_double_key(x), _double_key(x))
    if fam == "string":
        return (lit.value, lit.value) if lit.type.family == "string" else UNKNOWN
    if fam == "bool":
        got = cast_literal(lit, SqlType("bool"))
        return UNKNOWN if got is UNKNOWN else (got.value, got.value)
    if fam == "date":
        got = cast_literal(lit, SqlType("date"))
        if got is UNKNOWN:
            return UNKNOWN
        return (got.value.toordinal(), got.value.toordinal())
    if fam in ("ts", "ntz"):
        src = lit.type.family
        got = lit if src in ("ts", "ntz") else cast_literal(lit, SqlType(fam if src != "date" else "ntz"))
        if got is UNKNOWN:
            return UNKNOWN
        wall, offset = got.value
        if fam == "ntz":
            return (wall, wall) if offset is None and src != "ts" else UNKNOWN
        if offset is not None:
            return (wall - offset, wall - offset)
        if not zone_slack:
            return (wall, wall)
        return (wall - ZONE_SLACK_US, wall + ZONE_SLACK_US)
    return UNKNOWN


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Bounds:
    """Keys bounding a column's non-null values over some rows; None is unbounded.

    ``prefix_max``: the upper bound is a string prefix bound (see module docstring).
    """

    lo: Any = None
    hi: Any = None
    prefix_max: bool = False

    def may_lt(self, x) -> bool:
        return self.lo is None or self.lo < x

    def may_le(self, x) -> bool:
        return self.lo is None or self.lo <= x

    def may_ge(self, x) -> bool:
        if self.hi is None:
            return True
        if self.prefix_max:
            return x[: len(self.hi)] <= self.hi
        return self.hi >= x

    def may_gt(self, x) -> bool:
        if self.hi is None:
            return True
        if self.prefix_max:
            return x[: len(self.hi)] <= self.hi
        return self.hi > x

    def all_equal(self, x) -> bool:
        return not self.prefix_max and self.lo is not None and self.lo == self.hi == x


UNBOUNDED = Bounds()


def _stat_number(value: Any) -> decimal.Decimal | float | int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, decimal.Decimal, float)):
        return value
    if isinstance(value, str):
        parsed = _parse_double(value) if value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity") else None
        if parsed is not None:
            return parsed
        try:
            return decimal.Decimal(value.strip())
        except decimal.InvalidOperation:
            return None
    return None


def stat_bounds(col: SqlType, dom: Domain, lo_raw: Any, hi_raw: Any, *, nan_free: bool = False) -> Bounds:
    """Delta statistics (min / max JSON values) of column ``col`` as Bounds in ``dom``.

    A value that cannot be read as a safe bound leaves that side unbounded. A float column's
    max counts only when the file is known to hold no NaN (``nan_free``).
    """
    fam = dom.family
    if fam == "exact":
        return Bounds(_exact_bound(col, dom, lo_raw, False), _exact_bound(col, dom, hi_raw, True))
    if fam == "double":
        lo = None
        a = _stat_number(lo_raw)
        if a is not None and not (isinstance(a, float) and math.isnan(a)):
            lo = _double_key(_double_bound(col, a, up=False, widen=True))
        if col.family in ("float", "double") and not nan_free:
            return Bounds(lo, NAN_KEY)  # NaN may be present whatever the max says
        b = _stat_number(hi_raw)
        hi = _double_key(_double_bound(col, b, up=True, widen=True)) if b is not None else None
        return Bounds(lo, hi)
    if fam == "string":
        lo = lo_raw if isinstance(lo_raw, str) else None
        if isinstance(hi_raw, str):
            return Bounds(lo, hi_raw.rstrip(_TIE_BREAKERS), prefix_max=True)
        return Bounds(lo, None)
    if fam == "bool":
        return Bounds(_bool_value(lo_raw), _bool_value(hi_raw))
    if fam == "date":
        return Bounds(_date_key(lo_raw), _date_key(hi_raw)) if col.family == "date" else UNBOUNDED
    if fam in ("ts", "ntz"):
        return Bounds(_timestamp_bound(col, dom, lo_raw, up=False, stat=True),
                      _timestamp_bound(col, dom, hi_raw, up=True, stat=True))
    return UNBOUNDED


def partition_bounds(col: SqlType, dom: Domain, raw: str) -> Bounds:
    """A (non-NULL) partition value, Delta's string serialisation, as Bounds in ``dom``."""
    fam = dom.family
    if fam == "exact":
        value = _stat_number(raw) if col.family in ("integral", "decimal") else None
        if not isinstance(value, (int, decimal.Decimal)):
            return UNBOUNDED
        return Bounds(_round(value, dom.scale, False), _round(value, dom.scale, True))
    if fam == "double":
        value = _parse_double(raw) if col.family in ("float", "double") else _stat_number(raw)
        if value is None:
            return UNBOUNDED
        return Bounds(_double_key(_double_bound(col, value, up=False, widen=False)),
                      _double_key(_double_bound(col, value, up=True, widen=False)))
    if fam == "string":
        return Bounds(raw, raw)
    if fam == "bool":
        b = _bool_value(raw)
        return Bounds(b, b)
    if fam == "date":
        k = _date_key(raw) if col.family == "date" else None
        return Bounds(k, k)
    if fam in ("ts", "ntz"):
        return Bounds(_timestamp_bound(col, dom, raw, up=False, stat=False),
                      _timestamp_bound(col, dom, raw, up=True, stat=False))
    return UNBOUNDED


def _exact_bound(col: SqlType, dom: Domain, raw: Any, up: bool):
    value = _stat_number(raw)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = decimal.Decimal(repr(value))
    if not isinstance(value, (int, decimal.Decimal)):
        return None
    if col.family == "decimal":
        value = _widen_printed_double(value, up)
        value = _round(value, col.scale, up)  # a statistic printed with noise: outward to the column's scale
    return _round(value, dom.scale, up)


def _widen_printed_double(value, up: bool):
    """A decimal statistic of more than 15 significant digits that is exactly a double may be a
    double's rounding of the true bound (delta-rs writes decimal stats as JSON doubles:
    9007199254740993 became 9007199254740994.0): widen it by one ulp outward."""
    d = decimal.Decimal(value)
    if len(d.normalize().as_tuple().digits) <= 15:
        return value
    x = float(d)
    if not math.isfinite(x) or (decimal.Decimal(x) != d and decimal.Decimal(repr(x)) != d):
        return value  # not a double's printing: an exact decimal
    return decimal.Decimal(_next(x, up))


def _double_bound(col: SqlType, value: Any, up: bool, widen: bool) -> float:
    """A column value as a double bound: outward rounding, float columns through float32, and
    (``widen``) one ulp outward for floating statistics, whose printing another engine chose."""
    if isinstance(value, float) and math.isnan(value):
        return value
    if widen and col.family == "decimal" and isinstance(value, (int, decimal.Decimal)):
        value = _widen_printed_double(value, up)
    x = _to_double_bound(value, up)
    if col.family == "float":
        x = _float32(x)
        if widen:
            with np.errstate(over="ignore"):  # past FLOAT's largest the next value is infinity, as wanted
                x = float(np.nextafter(np.float32(x), np.float32(math.inf if up else -math.inf)))
    elif widen and col.family == "double":
        x = _next(x, up)
    return x


def _timestamp_bound(col: SqlType, dom: Domain, raw: Any, up: bool, stat: bool) -> int | None:
    """A timestamp / date statistic or partition value as a key of the ``ts`` (UTC µs) or
    ``ntz`` (wall-clock µs) domain, rounded outward.

    Statistics have millisecond precision (an upper bound is widened by 999 µs). Statistics
    of a zoned column carry an offset (``Z``); one without is not trusted. A zoned column's
    partition value without an offset was written in some writer's session zone, and a date
    or wall-clock value compared as a timestamp is read in the session zone: both get the
    zone slack.
    """
    slack = ZONE_SLACK_US if up else -ZONE_SLACK_US
    if col.family == "date":
        k = _date_key(raw)
        if k is None:
            return None
        us = (k - _EPOCH_DATE.toordinal()) * 86400 * _US
        return us + slack if dom.family == "ts" else us
    if not isinstance(raw, str):
        return None
    parsed = parse_timestamp(raw)
    if parsed is None:
        return None
    wall, offset = parsed
    if col.family == "ntz":
        if offset not in (None, 0):
            return None
        key = wall + (slack if dom.family == "ts" else 0)
    elif col.family == "ts":
        if offset is not None:
            key = wall - offset
        elif not stat:
            key = wall + slack
        else:
            return None
    else:
        return None
    if stat and up:
        key += _MS_US - 1
    return key


def _bool_value(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _date_key(value: Any) -> int | None:
    if isinstance(value, dt.datetime):
        return None
    if isinstance(value, dt.date):
        return value.toordinal()
    if isinstance(value, str):
        m = re.match(r"^\s*([+-]?\d{4,6})-(\d{1,2})-(\d{1,2})\s*$", value)
        if m:
            try:
                return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3))).toordinal()
            except ValueError:
                return None
    return None


# --------------------------------------------------------------------------- row values


def value_bounds(col: SqlType, dom: Domain, value: Any) -> Bounds:
    """One row's (non-NULL) value, as Arrow hands it to Python, as Bounds in ``dom``: exact
    wherever Spark's comparison is exact, an interval where Spark rounds the column value
    (a decimal to a smaller scale, a long to a double) or reads it in the session zone."""
    fam = dom.family
    if fam == "exact":
        if isinstance(value, bool) or not isinstance(value, (int, decimal.Decimal)):
            return UNBOUNDED
        return Bounds(_round(value, dom.scale, False), _round(value, dom.scale, True))
    if fam == "double":
        if isinstance(value, bool) or not isinstance(value, (int, float, decimal.Decimal)):
            return UNBOUNDED
        if isinstance(value, float):
            return Bounds(_double_key(value), _double_key(value))
        return Bounds(_double_key(_to_double_bound(value, False)), _double_key(_to_double_bound(value, True)))
    if fam == "string":
        return Bounds(value, value) if isinstance(value, str) else UNBOUNDED
    if fam == "bool":
        return Bounds(value, value) if isinstance(value, bool) else UNBOUNDED
    if fam == "date":
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return Bounds(value.toordinal(), value.toordinal())
        return UNBOUNDED
    if fam in ("ts", "ntz"):
        if isinstance(value, dt.datetime):
            if value.tzinfo is not None:  # a TIMESTAMP column: an instant
                us = (value.astimezone(dt.timezone.utc).replace(tzinfo=None) - _EPOCH) // dt.timedelta(microseconds=1)
                return Bounds(us, us) if col.family == "ts" else UNBOUNDED
            us = (value - _EPOCH) // dt.timedelta(microseconds=1)
            if col.family == "ntz" and fam == "ntz":
                return Bounds(us, us)
            return Bounds(us - ZONE_SLACK_US, us + ZONE_SLACK_US)  # wall clock read in the session zone
        if isinstance(value, dt.date):  # a DATE column compared as a timestamp: midnight, session zone
            us = (value - _EPOCH_DATE).days * 86400 * _US
            return Bounds(us, us) if fam == "ntz" else Bounds(us - ZONE_SLACK_US, us + ZONE_SLACK_US)
    return UNBOUNDED
