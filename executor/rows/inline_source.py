"""A MERGE's few local source rows written into its plan as literals, joined without a broadcast.

A point MERGE's source (``VALUES (...)``, at most a few rows) is a local relation on the
driver. Joined with a BROADCAST hint, Spark still runs a job to broadcast it
(``BroadcastExchange`` over ``LocalTableScan`` collects through an RDD): the point MERGE's
second job. Written as ``LATERAL VIEW inline(array(struct(<literals>), ...))``, every target
row that passed the key filter meets each source row in the scan's own task, and ON becomes a
WHERE: the same pairs as the inner join, one job fewer.

Only where that is no more work than the join: an inner join (no NOT MATCHED BY SOURCE), a key
filter that keeps only target rows some source key equals, and at most ``routes.INLINE_ROWS`` source
rows (each kept target row is compared with every source row). Only the types whose literals
are written here exactly; any other source keeps the broadcast join.
"""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Optional

import sqlglot.expressions as exp
from pyspark.sql import types as T

from . import routes
from .dml import has_nondeterminism

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


def _string(value: str) -> str:
    """A string literal whatever it holds (quotes, backslashes, any Unicode): its UTF-8 bytes
    as a binary literal cast back to STRING, so no escaping rule of the SQL parser applies."""
    return f"CAST(X'{value.encode('utf-8').hex().upper()}' AS STRING)"


def _floating(value: float) -> str:
    if math.isnan(value):
        text = "NaN"
    elif math.isinf(value):
        text = "Infinity" if value > 0 else "-Infinity"
    else:
        text = repr(value)
    return f"'{text}'"


def _written_here(dtype: T.DataType) -> bool:
    if type(dtype) is T.StringType:
        # (a collated string compares by its collation; its literal would need it spelled)
        return getattr(dtype, "collation", "UTF8_BINARY") == "UTF8_BINARY"
    return isinstance(dtype, _INTEGRAL + (T.BooleanType, T.DateType, T.DecimalType, T.DoubleType, T.FloatType))


def literal(value, dtype: T.DataType) -> Optional[str]:
    """``value`` (as ``Row`` holds it) as a SQL expression of exactly ``dtype``; None when this
    type is not one written here."""
    if not _written_here(dtype):
        return None
    name = dtype.simpleString()
    if value is None:
        return f"CAST(NULL AS {name})"
    if isinstance(dtype, T.BooleanType) and isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(dtype, _INTEGRAL) and isinstance(value, int) and not isinstance(value, bool):
        return f"CAST({value} AS {name})"
    if isinstance(dtype, T.StringType) and isinstance(value, str):
        return _string(value)
    if isinstance(dtype, T.DateType) and isinstance(value, datetime.date):
        return f"DATE'{value.isoformat()}'"
    if isinstance(dtype, T.DecimalType) and isinstance(value, decimal.Decimal) and value.is_finite():
        return f"CAST('{format(value, 'f')}' AS {name})"
    if isinstance(dtype, (T.DoubleType, T.FloatType)) and isinstance(value, float):
        return f"CAST({_floating(value)} AS {name})"
    return None


def plain(on) -> bool:
    """Does ON mean the same as a WHERE? Not when it holds a subquery or a non-deterministic
    call: Spark plans (or rejects) those in a join condition differently than in a filter."""
    return on is not None and on.find(exp.Select) is None and not has_nondeterminism(on)


def lateral_view(rows, schema: T.StructType, alias: str, quote) -> Optional[str]:
    """``LATERAL VIEW inline(array(...)) <alias> AS <columns>`` producing ``rows`` (a list of
    ``Row``s of ``schema``) with their exact types, or None when a value or type is not
    written here (or there are no rows: the generator would drop every target row, which an
    inner join does too, but the caller's plan for that case needs no change)."""
    if not rows or len(rows) > routes.INLINE_ROWS:
        return None
    structs = []
    for row in rows:
        fields = []
        for i, f in enumerate(schema.fields):
            text = literal(row[i], f.dataType)
            if text is None:
                return None
            fields.append(f"'c{i}', {text}")
        structs.append(f"named_struct({', '.join(fields)})")
    columns = ", ".join(quote(f.name) for f in schema.fields)
    return f"LATERAL VIEW inline(array({', '.join(structs)})) {quote(alias)} AS {columns}"
