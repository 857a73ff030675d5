"""Tables, values and a seeded predicate generator for the data-skipping differential test.

Nothing here runs Spark. ``test_skipping_differential.py`` builds the tables these specs
describe (through isolde and through delta-rs), asks Spark which files hold a row matching
each generated predicate and checks that isolde's pruning never skips such a file.

Values are Python objects of the column's kind:

    int (tinyint .. bigint) int              float / double   float (float32-exact for float)
    decimal(p,s)            Decimal          string           str
    boolean                 bool             date             datetime.date
    timestamp               aware datetime   timestamp_ntz    naive datetime
    binary                  bytes

The generator draws literals mostly from the values actually stored, from the files'
min/max statistics as written in the log, and from their neighbours (nextafter, +-1 in the
last decimal digit, +-1 microsecond / millisecond, one more or one less character), and
renders each value in many SQL spellings (``0.1``, ``0.1D``, ``1e-1``, ``0.1F``, ``0.1BD``,
``'0.1'``, ``CAST(.. AS ..)``, ``double('NaN')``, timestamps with and without offsets, ...).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import random
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

UTC = dt.timezone.utc
D = decimal.Decimal
#: 38-digit decimals need more than the default 28 digits of arithmetic
CTX = decimal.Context(prec=80)
NAN = float("nan")
INF = float("inf")

#: the session time zones the oracle runs under (extremes of the offset range and a DST zone)
ZONES = ("UTC", "America/Los_Angeles", "Pacific/Kiritimati")
_OFFSETS = [0, 14 * 60, -12 * 60, 5 * 60 + 30, -8 * 60, 60, -(3 * 60 + 30)]
_REGION_ZONES = ["UTC", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Kiritimati", "GMT+1"]


# --------------------------------------------------------------------------- float helpers


def f32(x: float) -> float:
    """x rounded to the nearest float32 (as a Python float)."""
    if math.isnan(x) or math.isinf(x):
        return x
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(INF, x)


def f32_next(x: float, up: bool) -> float:
    if math.isnan(x) or math.isinf(x):
        return x
    if x == 0:
        tiny = struct.unpack("<f", struct.pack("<i", 1))[0]
        return tiny if up else -tiny
    bits = struct.unpack("<i", struct.pack("<f", x))[0]
    bits += 1 if (x > 0) == up else -1
    return struct.unpack("<f", struct.pack("<i", bits))[0]


def f32_text(x: float) -> str:
    """The shortest decimal text that reads back as this float32."""
    return str(np.float32(x))


def is_f32(x: float) -> bool:
    return math.isnan(x) or f32(x) == x


# --------------------------------------------------------------------------- columns


@dataclass
class Column:
    name: str
    sql_type: str  # as in CREATE TABLE
    kind: str  # int | float | double | decimal | string | boolean | date | timestamp | timestamp_ntz | binary
    pool: list  # non-null values the files may hold
    bits: int = 0  # integers
    precision: int = 0  # decimals
    scale: int = 0
    partition: bool = False

    @property
    def floating(self) -> bool:
        return self.kind in ("float", "double")

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float", "double", "decimal")

    @property
    def temporal(self) -> bool:
        return self.kind in ("date", "timestamp", "timestamp_ntz")


def _ints(bits: int) -> list[int]:
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    base = [lo, hi, lo + 1, hi - 1, 0, 1, -1, 5, 99, 100]
    if bits >= 32:
        base += [16777217, 16777216, 1000]
    if bits >= 64:
        base += [2 ** 53 + 1, 2 ** 53, 2 ** 62 + 1, 10 ** 18 + 1, -(2 ** 53) - 1]
    return base


def _dec(text: str) -> D:
    return D(text)


FLOATS = [f32(0.1), f32(0.2), f32(0.3), 0.0, -0.0, NAN, INF, -INF, f32(3.4028234663852886e38), f32(1.401298464324817e-45),
          16777216.0, 1.0, -2.5, f32(1e-10), f32(123.456), f32(-0.1)]
DOUBLES = [0.1, 0.2, 0.30000000000000004, 0.3, 0.0, -0.0, NAN, INF, -INF, 1.7976931348623157e308, 5e-324,
           2.2250738585072014e-308, 9007199254740993.0, 1e16, -123.456, 1.0, f32(0.1), -0.1, 2.5]

LONG_PREFIX = "shared-prefix-0123456789-abcdefg"  # exactly 32 characters
assert len(LONG_PREFIX) == 32
STRINGS = ["", "a", "ab", "abc", "b", "B", "\u00e9", "\u00fc", "e\u0301", "\u65e5\u672c", "\U0001f600", "\uff61",
           "\ufffd", "z", "0", "10", "9", " a", "NaN", "a\\b", "it's", "\U0001f600x", "\u00e9t\u00e9"]
LONG_STRINGS = [LONG_PREFIX, LONG_PREFIX + "a", LONG_PREFIX + "b", LONG_PREFIX[:-1], LONG_PREFIX + "\U0001f600",
                LONG_PREFIX + "\uffff", LONG_PREFIX + "\U0010ffff", LONG_PREFIX[:-1] + "h", "x" * 33,
                "x" * 31 + "\U0001f600y", "\u00e9" * 40, "\U0001f600" * 20, LONG_PREFIX * 2, LONG_PREFIX[:31] + "\u00e9zz",
                "\U0001f600" * 15 + "\U0001f601", "y" * 32, "y" * 32 + "\u00e9", "short"]
DATES = [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2024, 2, 29), dt.date(2024, 3, 1), dt.date(1, 1, 1),
         dt.date(9999, 12, 31), dt.date(2000, 1, 1), dt.date(2024, 1, 1)]
_WALLS = [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, 0, 0, 0, 123456), dt.datetime(2024, 1, 1, 0, 0, 0, 999),
          dt.datetime(2024, 1, 1, 0, 0, 0, 1000), dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(1970, 1, 1),
          dt.datetime(2024, 3, 10, 10, 30), dt.datetime(2023, 12, 31, 23, 59, 59, 999999), dt.datetime(1, 1, 1),
          # 23:59:59.999999 on 9999-12-31 makes isolde's stats writer overflow (max rounded up to the next ms):
          # the unit test covers it, the tables stay one millisecond short of it
          dt.datetime(9999, 12, 31, 23, 59, 59, 999000), dt.datetime(2024, 6, 30, 14), dt.datetime(2024, 1, 1, 10, 0, 0, 500)]
TIMESTAMPS = [w.replace(tzinfo=UTC) for w in _WALLS]
NTZS = list(_WALLS)
BINARIES = [b"", b"\x00", b"\xff", b"\x00\xff", b"abc", b"ab"]


def wide_columns() -> list[Column]:
    """One column per primitive type (decimals of several precisions, two string columns)."""
    return [
        Column("ti", "TINYINT", "int", _ints(8), bits=8),
        Column("si", "SMALLINT", "int", _ints(16), bits=16),
        Column("i", "INT", "int", _ints(32), bits=32),
        Column("l", "BIGINT", "int", _ints(64), bits=64),
        Column("f", "FLOAT", "float", FLOATS),
        Column("d", "DOUBLE", "double", DOUBLES),
        Column("m38", "DECIMAL(38,18)", "decimal", [_dec(x) for x in (
            "0.1", "-0.1", "0.000000000000000001", "99999999999999999999.999999999999999999",
            "-99999999999999999999.999999999999999999", "1.5", "0.123456789012345678",
            "12345678901234567890.123456789012345678", "0", "1", "0.3", "9007199254740993")], precision=38, scale=18),
        Column("m52", "DECIMAL(5,2)", "decimal", [_dec(x) for x in (
            "0.10", "0.01", "-0.01", "999.99", "-999.99", "1.00", "2.50", "0.33", "0.00", "0.30", "0.11")], precision=5, scale=2),
        Column("m100", "DECIMAL(10,0)", "decimal", [_dec(x) for x in (
            "0", "1", "-1", "9999999999", "-9999999999", "1234567891", "16777217", "5")], precision=10, scale=0),
        Column("m189", "DECIMAL(18,9)", "decimal", [_dec(x) for x in (
            "0.100000000", "0.000000001", "123456789.123456789", "-0.300000000", "999999999.999999999",
            "0.200000000")], precision=18, scale=9),
        Column("s", "STRING", "string", STRINGS),
        Column("ls", "STRING", "string", LONG_STRINGS),
        Column("b", "BOOLEAN", "boolean", [True, False]),
        Column("dt", "DATE", "date", DATES),
        Column("ts", "TIMESTAMP", "timestamp", TIMESTAMPS),
        Column("tn", "TIMESTAMP_NTZ", "timestamp_ntz", NTZS),
        Column("bin", "BINARY", "binary", BINARIES),
    ]


def partitioned_columns() -> list[Column]:
    """Data columns and partition columns of several types (partition pools hold NULL too)."""
    return [
        Column("x", "DOUBLE", "double", [0.1, -0.0, 0.0, NAN, 2.5, 1e16]),
        Column("s", "STRING", "string", ["a", "b", LONG_PREFIX + "a", "\u00e9"]),
        Column("pi", "INT", "int", [0, -1, 2147483647, 5, None], bits=32, partition=True),
        # no '' (Spark writes an empty partition string as NULL)
        Column("ps", "STRING", "string", ["a", "\u00e9", "\U0001f600", "a b", "a/b", "x=y", "%", "it's", None], partition=True),
        Column("pd", "DATE", "date", [dt.date(2024, 1, 1), dt.date(1970, 1, 1), dt.date(1969, 12, 31), None], partition=True),
        Column("pm", "DECIMAL(5,2)", "decimal", [_dec("0.10"), _dec("-0.01"), _dec("999.99"), None],
               precision=5, scale=2, partition=True),
        Column("pf", "DOUBLE", "double", [0.1, -0.0, 0.0, NAN, 1e16, None], partition=True),
        Column("pb", "BOOLEAN", "boolean", [True, False, None], partition=True),
        Column("pts", "TIMESTAMP", "timestamp", [dt.datetime(2024, 1, 1, tzinfo=UTC),
                                                  dt.datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC),
                                                  dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), None],
               partition=True),
    ]


def deltars_columns() -> list[Column]:
    """Columns of the table delta-rs writes (its own stats: float max ignoring NaN, decimals as
    JSON floats, timestamps truncated to milliseconds, strings cut by bytes)."""
    return [
        Column("i", "INT", "int", _ints(32), bits=32),
        Column("l", "BIGINT", "int", _ints(64), bits=64),
        Column("f", "FLOAT", "float", FLOATS),
        Column("d", "DOUBLE", "double", DOUBLES),
        Column("m38", "DECIMAL(38,18)", "decimal", wide_columns()[6].pool, precision=38, scale=18),
        Column("m52", "DECIMAL(5,2)", "decimal", wide_columns()[7].pool, precision=5, scale=2),
        Column("s", "STRING", "string", STRINGS),
        Column("ls", "STRING", "string", LONG_STRINGS),
        Column("b", "BOOLEAN", "boolean", [True, False]),
        Column("dt", "DATE", "date", DATES),
        Column("ts", "TIMESTAMP", "timestamp", [t for t in TIMESTAMPS if t.year > 1]),
        Column("tn", "TIMESTAMP_NTZ", "timestamp_ntz", [t for t in NTZS if t.year > 1]),
    ]


# --------------------------------------------------------------------------- file designs

RID = "rid"


def design_files(columns: list[Column], rng: random.Random, n_files: int, max_rows: int = 3) -> list[list[dict]]:
    """Rows per intended file. Each column gets a profile per file: all NULL, one value, several
    values (biased to the specials at the head of the pool), or values with NULLs."""
    files = []
    for _ in range(n_files):
        n = rng.choice([1, 1, 2, 2, 3][: max_rows + 2])
        rows = [{} for _ in range(n)]
        for c in columns:
            pool = [v for v in c.pool if v is not None]
            r = rng.random()
            if c.partition:
                values = [rng.choice(c.pool)]
            elif r < 0.1:
                values = [None]
            elif r < 0.4:
                values = [rng.choice(pool)]
            elif r < 0.85:
                values = [rng.choice(pool) for _ in range(n)]
            else:
                values = [rng.choice(pool), None]
            for k, row in enumerate(rows):
                row[c.name] = values[k % len(values)]
        files.append(rows)
    return files


# --------------------------------------------------------------------------- SQL text


def sql_string(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _frac(us: int, style: int) -> str:
    if style == 0:  # all six digits
        return f".{us:06d}"
    if style == 1:  # trimmed
        return ("." + f"{us:06d}".rstrip("0")) if us else ""
    if style == 2:  # nanoseconds
        return f".{us:06d}000"
    return f".{us:06d}"


def wall_text(w: dt.datetime, style: int = 1, sep: str = " ") -> str:
    return f"{w.year:04d}-{w.month:02d}-{w.day:02d}{sep}{w.hour:02d}:{w.minute:02d}:{w.second:02d}" + _frac(
        w.microsecond, style)


def _offset_text(minutes: int) -> str:
    if minutes == 0:
        return "Z"
    sign = "+" if minutes > 0 else "-"
    m = abs(minutes)
    return f"{sign}{m // 60:02d}:{m % 60:02d}"


def insert_literal(c: Column, v: Any) -> str:
    """The exact value as SQL (independent of the session time zone)."""
    if v is None:
        return f"CAST(NULL AS {c.sql_type})"
    k = c.kind
    if k == "int":
        return f"CAST('{v}' AS {c.sql_type})"
    if k in ("float", "double"):
        if math.isnan(v):
            text = "NaN"
        elif math.isinf(v):
            text = "Infinity" if v > 0 else "-Infinity"
        else:
            text = repr(v)
        return f"CAST('{text}' AS {c.sql_type})"
    if k == "decimal":
        return f"CAST('{format(v, 'f')}' AS {c.sql_type})"
    if k == "string":
        return sql_string(v)
    if k == "boolean":
        return "TRUE" if v else "FALSE"
    if k == "date":
        return f"DATE'{v.isoformat()}'"
    if k == "timestamp":
        return f"TIMESTAMP'{wall_text(v.astimezone(UTC).replace(tzinfo=None), 0)}+00:00'"
    if k == "timestamp_ntz":
        return f"TIMESTAMP_NTZ'{wall_text(v, 0)}'"
    if k == "binary":
        return f"X'{v.hex()}'"
    raise ValueError(k)


# --------------------------------------------------------------------------- literal spellings


def _decimal_text(v: D) -> str:
    text = format(v, "f")
    return text


def number_forms(v: Any, column: Column) -> list[str]:
    """Spellings of a number (int, float or Decimal) as a SQL literal or constant expression."""
    floating_col = column.floating
    if isinstance(v, bool):
        return ["TRUE" if v else "FALSE"]
    if isinstance(v, int):
        if abs(v) >= 2 ** 63:  # no integral type holds it: a decimal (up to 38 digits) or a double
            forms = [f"{v}D", f"{v}e0", f"CAST('{v}' AS DOUBLE)"]
            return forms + ([str(v), f"{v}BD"] if abs(v) < 10 ** 38 else [])
        forms = [str(v), f"{v}BD", f"{v}.0", f"{v}D", f"{v}e0", f"CAST({v} AS DOUBLE)", f"{v}F"]
        if -(2 ** 63) < v < 2 ** 63:
            forms += [f"{v}L", f"CAST('{v}' AS BIGINT)", f"'{v}'"]
        if -128 < v < 128:
            forms.append(f"{v}Y")
        if -32768 < v < 32768:
            forms.append(f"{v}S")
        if abs(v) < 10 ** 18:
            forms += [f"CAST({v} AS DECIMAL(20,2))", f"CAST({v} AS DECIMAL(38,18))"]
        return forms
    if isinstance(v, float):
        if math.isnan(v):
            forms = ["double('NaN')", "CAST('NaN' AS DOUBLE)", "float('NaN')", "CAST('NaN' AS FLOAT)", "double('nan')"]
            return forms + (["'NaN'"] if floating_col else [])
        if math.isinf(v):
            sign = "" if v > 0 else "-"
            forms = [f"{sign}double('Infinity')", f"CAST('{sign}inf' AS DOUBLE)", f"{sign}float('Infinity')",
                     f"CAST('{sign}Infinity' AS FLOAT)"]
            return forms + ([f"'{sign}Infinity'"] if floating_col else [])
        if v == 0:
            if math.copysign(1, v) < 0:
                return ["-0.0", "-0.0D", "CAST('-0.0' AS DOUBLE)", "-0.0F", "CAST('-0.0' AS FLOAT)", "-0", "-0e0",
                        "-0.0BD"]
            return ["0.0", "0.0D", "0", "0e0", "0.0F", "CAST('0.0' AS DOUBLE)"]
        r = repr(v)
        sci = np.format_float_scientific(v, unique=True)  # shortest, e.g. 1.e-01
        forms = [r, f"{r}D", f"CAST('{r}' AS DOUBLE)", sci, f"{v:.16e}"]
        if "e" not in r:
            forms.append(f"{r}BD")
        if 1e-30 < abs(v) < 1e30:
            # the float's exact binary value as a DECIMAL literal, cut to what a decimal(38, s) holds
            exact = D(v)
            scale = 38 - max(exact.adjusted() + 1, 0)
            exact = exact.quantize(D(1).scaleb(-scale), rounding=decimal.ROUND_DOWN, context=CTX).normalize(CTX)
            if exact and max(-exact.as_tuple().exponent, 0) <= 38:
                forms.append(_decimal_text(exact))
        if column.kind in ("float", "double", "decimal"):
            forms.append(f"'{r}'")
        if is_f32(v):
            s = f32_text(v)
            forms += [f"{s}F", f"CAST('{s}' AS FLOAT)", s, f"CAST({s} AS FLOAT)"]
        return forms
    if isinstance(v, D):
        t = _decimal_text(v)
        whole, _, frac = t.lstrip("-").partition(".")
        int_digits = len(whole.lstrip("0"))
        scale = len(frac)
        precision = max(int_digits + scale, 1)
        forms = [f"{t}D"]
        if precision <= 38:
            forms += [t, f"{t}BD", f"CAST('{t}' AS DECIMAL({precision},{scale}))"]
        if column.kind == "decimal" and int_digits <= column.precision - column.scale:
            forms.append(f"CAST('{t}' AS {column.sql_type})")
        if column.kind in ("float", "double", "decimal") or (column.numeric and "." not in t):
            forms.append(f"'{t}'")
        if column.kind == "float":
            forms.append(f"{t}F")
        return forms
    raise TypeError(type(v))


def temporal_forms(v: Any, column: Column, rng: random.Random) -> list[str]:
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        utc_wall = v.astimezone(UTC).replace(tzinfo=None)
        style = rng.choice([0, 1, 1, 2])
        minutes = rng.choice(_OFFSETS)
        try:
            local = utc_wall + dt.timedelta(minutes=minutes)
        except OverflowError:
            local, minutes = utc_wall, 0
        zoned = wall_text(local, style) + _offset_text(minutes)
        plain = wall_text(utc_wall, style)
        forms = [f"TIMESTAMP'{zoned}'", f"'{zoned}'", f"CAST('{zoned}' AS TIMESTAMP)", f"TIMESTAMP'{plain}'",
                 f"TIMESTAMP'{wall_text(utc_wall, style, 'T')}Z'", f"'{plain}'", f"TIMESTAMP_NTZ'{plain}'",
                 f"DATE'{utc_wall.date().isoformat()}'", f"TIMESTAMP'{plain} {rng.choice(_REGION_ZONES)}'"]
        if column.kind == "timestamp":
            forms.append(f"timestamp_micros({(utc_wall - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)})")
        return forms
    if isinstance(v, dt.datetime):
        style = rng.choice([0, 1, 1, 2])
        plain = wall_text(v, style)
        minutes = rng.choice(_OFFSETS)
        return [f"TIMESTAMP_NTZ'{plain}'", f"'{plain}'", f"TIMESTAMP'{plain}'", f"CAST('{plain}' AS TIMESTAMP_NTZ)",
                f"TIMESTAMP'{plain}{_offset_text(minutes)}'", f"DATE'{v.date().isoformat()}'",
                f"TIMESTAMP_NTZ'{wall_text(v, style, 'T')}'"]
    if isinstance(v, dt.date):
        iso = f"{v.year:04d}-{v.month:02d}-{v.day:02d}"
        return [f"DATE'{iso}'", f"'{iso}'", f"CAST('{iso}' AS DATE)", f"TIMESTAMP'{iso} 00:00:00'",
                f"TIMESTAMP_NTZ'{iso} 00:00:00'", f"TIMESTAMP'{iso} 00:00:00Z'", f"DATE'{iso}' + 0"]
    raise TypeError(type(v))


def literal(v: Any, column: Column, rng: random.Random) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        if column.kind == "boolean":
            return rng.choice(["TRUE", "'true'"] if v else ["FALSE", "'false'"])
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float, D)):
        return rng.choice(number_forms(v, column))
    if isinstance(v, str):
        return rng.choice([sql_string(v)] * 6 + [f"CAST({sql_string(v)} AS STRING)"])
    if isinstance(v, (dt.date, dt.datetime)):
        return rng.choice(temporal_forms(v, column, rng))
    if isinstance(v, bytes):
        return f"X'{v.hex()}'"
    raise TypeError(type(v))


# --------------------------------------------------------------------------- neighbours


def neighbours(v: Any, column: Column) -> list:
    out: list = []
    if v is None or isinstance(v, bool):
        return out
    if isinstance(v, int):
        out += [v - 1, v + 1, CTX.add(D(v), D("0.5")), CTX.subtract(D(v), D("0.5")), float(v)]
        if column.kind in ("float", "double"):
            out += [f32(float(v))]
    elif isinstance(v, float):
        if not math.isnan(v):
            out += [math.nextafter(v, INF), math.nextafter(v, -INF), -v]
            if is_f32(v):
                out += [f32_next(v, True), f32_next(v, False)]
            if not math.isinf(v) and v == int(v) and abs(v) < 2 ** 63:
                out += [int(v)]
            if not math.isinf(v):
                out += [D(repr(v))]  # the shortest decimal spelling, as a DECIMAL literal
    elif isinstance(v, D):
        exp_ = v.as_tuple().exponent
        ulp = D(1).scaleb(exp_)
        tenth = CTX.divide(ulp, 10)
        out += [CTX.add(v, ulp), CTX.subtract(v, ulp), CTX.add(v, tenth), CTX.subtract(v, tenth), float(v)]
        if v == v.to_integral_value() and abs(v) < 2 ** 63:
            out.append(int(v))
    elif isinstance(v, str):
        out += [v + "a", v[:-1], v + "\U0010ffff", v + "\uffff", v[:32], v[:31], v[:32] + "\uffff", v + " "]
        if v:
            last = ord(v[-1])
            for delta in (1, -1):
                n = last + delta
                if 0 < n < 0x110000 and not 0xD800 <= n <= 0xDFFF:
                    out.append(v[:-1] + chr(n))
    elif isinstance(v, dt.datetime):
        for d in (dt.timedelta(microseconds=1), dt.timedelta(milliseconds=1), dt.timedelta(microseconds=999),
                  dt.timedelta(hours=1), dt.timedelta(hours=14), dt.timedelta(days=1)):
            for sign in (1, -1):
                try:
                    out.append(v + sign * d)
                except OverflowError:
                    pass
        out.append(v.date())
        if v.tzinfo is not None:
            out.append(v.replace(tzinfo=None))  # the UTC wall clock as a naive value
        else:
            out.append(v.replace(tzinfo=UTC))
    elif isinstance(v, dt.date):
        for sign in (1, -1):
            try:
                out.append(v + sign * dt.timedelta(days=1))
            except OverflowError:
                pass
        out.append(dt.datetime(v.year, v.month, v.day))
    elif isinstance(v, bytes):
        out += [v + b"\x00", v[:-1], v + b"\xff"]
    return out


def boundaries(column: Column) -> list:
    k = column.kind
    if k in ("int", "float", "double", "decimal"):
        return [0, -1, 1, 2 ** 31, -(2 ** 31) - 1, 2 ** 63 - 1, 2 ** 63, -(2 ** 63), 128, -129, 32768, NAN, INF, -INF, 0.0,
                -0.0, 1e308, 0.1, D("0.1"), D("1e-18"), D("99999999999999999999.999999999999999999"), f32(0.1),
                D("999.995"), D("0.105"), 0.5, 1.5]
    if k == "string":
        return ["", "a", "\U0010ffff", "\uffff", LONG_PREFIX, LONG_PREFIX + "\uffff", LONG_PREFIX + "\U0010ffff",
                "\U0001f600", "\u00e9", "zzzz", "A"]
    if k in ("date", "timestamp", "timestamp_ntz"):
        return [dt.date(1970, 1, 1), dt.date(2024, 1, 1), dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, tzinfo=UTC),
                dt.datetime(1970, 1, 1, tzinfo=UTC), dt.date(9999, 12, 31), dt.date(1, 1, 1),
                dt.datetime(2024, 1, 1, 10, 0, 0, 500), dt.datetime(2023, 12, 31, 14, tzinfo=UTC)]
    if k == "boolean":
        return [True, False]
    if k == "binary":
        return [b"", b"\x00", b"\xff" * 3]
    return []


# --------------------------------------------------------------------------- stats values


def parse_stat_value(raw: Any, column: Column) -> Any:
    """A min/max value as written in the log, as a typed value (None when not understood)."""
    if raw is None:
        return None
    k = column.kind
    try:
        if k in ("int", "float", "double", "decimal"):
            if isinstance(raw, bool):
                return None
            if isinstance(raw, (int, float)):
                return raw
            return D(str(raw))
        if k == "string":
            return raw if isinstance(raw, str) else None
        if k == "boolean":
            return raw if isinstance(raw, bool) else None
        if k == "date":
            return dt.date.fromisoformat(raw)
        if k in ("timestamp", "timestamp_ntz"):
            text = raw.replace("T", " ").rstrip("Z")
            date_part, _, time_part = text.partition(" ")
            y, mo, d = (int(x) for x in date_part.split("-"))
            hh, mm, ss = time_part.split(":") if time_part else ("0", "0", "0")
            sec, _, frac = ss.partition(".")
            value = dt.datetime(y, mo, d, int(hh), int(mm), int(sec), int((frac or "0").ljust(6, "0")[:6]))
            return value.replace(tzinfo=UTC) if k == "timestamp" else value
    except (ValueError, decimal.InvalidOperation, TypeError):
        return None
    return None


# --------------------------------------------------------------------------- predicates


@dataclass
class Pred:
    sql: str
    columns: set = field(default_factory=set)
    temporal: bool = False  # depends on the session time zone (a temporal column or literal)
    index: int = -1


_OPS = ["=", "<>", "!=", "<", "<=", ">", ">="]
_FLIP = {"=": "=", "<=": ">=", ">=": "<=", "<": ">", ">": "<", "<=>": "<=>"}
#: casts that cannot fail on the stored values (NaN, overflow), so Spark refuses few predicates
_CASTS = {
    "int": ["DOUBLE", "FLOAT", "DECIMAL(38,0)", "BIGINT"],
    "float": ["DOUBLE", "FLOAT"],
    "double": ["FLOAT", "DOUBLE"],
    "decimal": ["DOUBLE", "FLOAT", "DECIMAL(38,0)", "DECIMAL(38,2)"],
    "string": ["BINARY"],
    "date": ["TIMESTAMP", "STRING", "TIMESTAMP_NTZ"],
    "timestamp": ["DATE", "STRING", "TIMESTAMP_NTZ"],
    "timestamp_ntz": ["DATE", "STRING", "TIMESTAMP"],
    "binary": ["STRING"],
}


def long_range_edges(columns: list[Column]) -> list[Pred]:
    """Every integral column ordered against literals just past BIGINT's range, each spelling
    and either way round: Spark folds ``l > -9223372036854775809BD`` to TRUE at analysis, so
    files of NULLs match it (a case the random predicates hit only on some seeds)."""
    literals = ["-9223372036854775809BD", "9223372036854775808BD", "-9223372036854775809",
                "9223372036854775808", "-9223372036854775808.5", "9223372036854775807.5", "-1e30BD",
                "9223372036854775807BD", "-9223372036854775808BD", "-3000000000BD", "-9223372036854775809D"]
    out = []
    for c in columns:
        if c.kind != "int":
            continue
        for lit in literals:
            for op in ("<", "<=", ">", ">=", "=", "<>"):
                out.append(Pred(f"{c.name} {op} {lit}", {c.name}))
                out.append(Pred(f"{lit} {_FLIP.get(op, op)} {c.name}", {c.name}))
            out.append(Pred(f"NOT ({c.name} > {lit})", {c.name}))
            out.append(Pred(f"{c.name} >= {lit} AND {c.name} IS NULL", {c.name}))
            out.append(Pred(f"{c.name} BETWEEN {lit} AND 0", {c.name}))
    return out


class Generator:
    """Seeded predicates over one table, biased to its stored values and statistics."""

    def __init__(self, columns: list[Column], stored: dict[str, list], stats: dict[str, list], seed: int):
        self.columns = columns
        self.by_name = {c.name: c for c in columns}
        self.stored = stored  # column -> values present in the files (non-null)
        self.stats = stats  # column -> typed min/max values from the log
        self.rng = random.Random(seed)

    # -- values
    def value(self, c: Column) -> Any:
        rng = self.rng
        stored = self.stored.get(c.name) or []
        stats = self.stats.get(c.name) or []
        r = rng.random()
        if r < 0.42 and stored:
            return rng.choice(stored)
        if r < 0.62 and stats:
            return rng.choice(stats)
        if r < 0.85:
            base = rng.choice(stored + stats) if stored or stats else rng.choice(c.pool)
            near = neighbours(base, c)
            if near:
                return rng.choice(near)
        if c.kind in ("int", "float", "double", "decimal") and rng.random() < 0.3:
            # a value of another numeric column (cross-type comparisons)
            other = rng.choice([o for o in self.columns if o.numeric])
            if self.stored.get(other.name):
                return rng.choice(self.stored[other.name])
        return rng.choice(boundaries(c) or c.pool)

    def lit(self, c: Column) -> str:
        v = self.value(c)
        if isinstance(v, (dt.date, dt.datetime)) and not c.temporal:
            v = rng_choice_same_family(self.rng, c)
        if c.temporal and not isinstance(v, (dt.date, dt.datetime)):
            v = self.rng.choice([x for x in c.pool if x is not None])
        if c.kind == "string" and not isinstance(v, str):
            v = str(v)
        if c.kind == "binary" and not isinstance(v, bytes):
            v = self.rng.choice(BINARIES)
        if c.kind == "boolean" and not isinstance(v, bool):
            v = self.rng.choice([True, False])
        if c.numeric and not isinstance(v, (int, float, D)):
            v = self.rng.choice([x for x in c.pool if x is not None])
        return literal(v, c, self.rng)

    # -- shapes
    def atom(self, focus: list[Column] | None = None) -> Pred:
        rng = self.rng
        c = rng.choice(focus or self.columns)
        name = c.name
        cols = {name}
        r = rng.random()
        if c.kind == "boolean" and r < 0.25:
            sql = rng.choice([name, f"NOT {name}", f"{name} = TRUE", f"{name} = FALSE", f"{name} <> TRUE",
                              f"{name} IN (TRUE)", f"{name} IS TRUE", f"{name} IS NOT FALSE"])
        elif r < 0.45:
            op = rng.choice(_OPS)
            lit = self.lit(c)
            sql = f"{name} {op} {lit}" if rng.random() < 0.75 else f"{lit} {op} {name}"
        elif r < 0.5:
            sql = f"{name} <=> {self.lit(c) if rng.random() < 0.85 else 'NULL'}"
        elif r < 0.62:
            items = [self.lit(c) for _ in range(rng.randint(1, 4))]
            if rng.random() < 0.15:
                items.insert(rng.randrange(len(items) + 1), "NULL")
            neg = "NOT " if rng.random() < 0.25 else ""
            sql = f"{name} {neg}IN ({', '.join(items)})"
        elif r < 0.74:
            a, b = self.lit(c), self.lit(c)
            neg = "NOT " if rng.random() < 0.2 else ""
            sql = f"{name} {neg}BETWEEN {a} AND {b}"
        elif r < 0.8:
            sql = f"{name} IS {'NOT ' if rng.random() < 0.5 else ''}NULL"
        elif r < 0.87 and c.kind in _CASTS:
            to = rng.choice(_CASTS[c.kind])
            sql = f"CAST({name} AS {to}) {rng.choice(_OPS)} {self.lit(c)}"
        elif r < 0.92 and c.floating:
            sql = rng.choice([f"isnan({name})", f"NOT isnan({name})", f"{name} <> {name}", f"{name} = {name}"])
        elif r < 0.96:
            family = [o for o in self.columns if _family(o) == _family(c) and o is not c]
            if family:
                o = rng.choice(family)
                cols.add(o.name)
                sql = f"{name} {rng.choice(_OPS)} {o.name}"
            else:
                sql = f"{name} = {self.lit(c)}"
        else:
            op = rng.choice(_OPS)
            sql = f"{name} {op} {self.lit(c)}"
        temporal = any(self.by_name[n].temporal for n in cols) or any(
            t in sql for t in ("TIMESTAMP", "DATE'", "timestamp_"))
        return Pred(sql, cols, temporal)

    def predicate(self, focus: list[Column] | None = None, depth: int = 0) -> Pred:
        rng = self.rng
        r = rng.random()
        if depth >= 2 or r < 0.55:
            return self.atom(focus)
        if r < 0.65:
            p = self.predicate(focus, depth + 1)
            return Pred(f"NOT ({p.sql})", p.columns, p.temporal)
        a, b = self.predicate(focus, depth + 1), self.predicate(focus, depth + 1)
        op = "AND" if r < 0.85 else "OR"
        return Pred(f"({a.sql}) {op} ({b.sql})", a.columns | b.columns, a.temporal or b.temporal)

    def sweep(self, per_column: int = 24, focus: list[Column] | None = None) -> list[Pred]:
        """One comparison per stored value and per statistic of every column (``=``, ``<=``,
        ``>=``, ... with the value itself, spelled at random): the literal-equals-a-bound cases."""
        rng = self.rng
        out = []
        for c in focus or self.columns:
            seen, values = set(), []
            for v in (self.stored.get(c.name) or []) + (self.stats.get(c.name) or []):
                key = (type(v).__name__, repr(v))
                if key not in seen:
                    seen.add(key)
                    values.append(v)
            rng.shuffle(values)
            for v in values[:per_column]:
                op = rng.choice(["=", "=", "<=", ">=", "<", ">", "<=>", "IN", "BETWEEN", "NOT"])
                lit = literal(v, c, rng)
                if op == "IN":
                    sql = f"{c.name} IN ({self.lit(c)}, {lit})"
                elif op == "BETWEEN":
                    sql = f"{c.name} BETWEEN {lit} AND {literal(v, c, rng)}"
                elif op == "NOT":
                    sql = f"NOT ({c.name} <> {lit})"
                else:
                    sql = f"{c.name} {op} {lit}" if rng.random() < 0.8 else f"{lit} {_FLIP[op]} {c.name}"
                temporal = c.temporal or any(t in sql for t in ("TIMESTAMP", "DATE'", "timestamp_"))
                out.append(Pred(sql, {c.name}, temporal))
        return out

    def many(self, n: int, focus: list[Column] | None = None) -> list[Pred]:
        seen, out = set(), []
        for _ in range(n * 3):
            p = self.predicate(focus)
            if p.sql not in seen:
                seen.add(p.sql)
                out.append(p)
            if len(out) >= n:
                break
        return out


def _family(c: Column) -> str:
    if c.numeric:
        return "number"
    if c.temporal:
        return "time"
    return c.kind


def rng_choice_same_family(rng: random.Random, c: Column) -> Any:
    return rng.choice([x for x in c.pool if x is not None])
