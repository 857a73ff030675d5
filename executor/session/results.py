"""What statements return: a QueryResult (DataFrame-like rows) for queries/SHOW/DESCRIBE, a
CommitResult for writes, and the two-phase PreparedWrite that sits between a write's data work
and its commit. Also the DataFrame subclass whose actions raise isolde errors
(``isolde_dataframe``), which ``Session.sql()`` returns and ``QueryResult.df`` holds."""

from __future__ import annotations

import functools
import importlib
import inspect
import threading
import time
import types
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union


@dataclass(frozen=True)
class CommitResult:
    """A committed write: the new table version, Delta's operation name and its metrics.

    A write that answers with a result row, as Databricks' SQL does (UPDATE / DELETE / MERGE /
    INSERT: ``num_affected_rows`` ...; OPTIMIZE: ``path, metrics``), also reads like a one-row
    DataFrame: ``columns``, ``rows`` / ``collect()`` (``pyspark.sql.Row``s), ``first()`` /
    ``head()``, ``take(n)``, ``count()``, ``isEmpty()``, iteration, ``as_dicts()``, ``show()``,
    ``toPandas()``, ``schema`` / ``dtypes``. A subclass says what its row is by overriding
    ``result_row()`` (an ordered ``{column: value}``) and, when it knows them, ``result_types()``
    (``{column: Spark SQL type}``); the base class answers with no row (``columns == []``), so
    ``bool(result.columns)`` tells a caller (the REPL) whether there is a row to show."""

    version: int
    operation: str
    metrics: dict = field(default_factory=dict)
    table: str = ""
    elapsed_s: float = 0.0
    # where the statement's time went, ms per phase (executor/runtime/phases.py); empty for prepare()
    phases: dict = field(default_factory=dict)

    # -- what the statement answers with (overridden by the results that have a row)
    def result_row(self) -> Optional[dict]:
        """The statement's result row as ``{column: value}`` in column order, or None."""
        return None

    def result_types(self) -> Optional[dict]:
        """``{column: Spark SQL type name}`` of ``result_row()``, or None when not declared."""
        return None

    # -- the row, DataFrame-style
    @property
    def columns(self) -> list[str]:
        row = self.result_row()
        return list(row) if row else []

    @property
    def rows(self) -> list:
        row = self.result_row()
        if not row:
            return []
        from pyspark.sql import Row

        def value(v):
            if isinstance(v, dict):
                return Row(**{k: value(x) for k, x in v.items()})
            return v

        return [Row(**{k: value(v) for k, v in row.items()})]

    @property
    def schema(self):
        """Spark's StructType of the row when its types are declared, else None."""
        types = self.result_types()
        if not types:
            return None
        from pyspark.sql import types as T

        simple = {"bigint": T.LongType, "int": T.IntegerType, "string": T.StringType, "double": T.DoubleType,
                  "boolean": T.BooleanType}
        if any(t not in simple for t in types.values()):
            return None
        return T.StructType([T.StructField(name, simple[t](), True) for name, t in types.items()])

    @property
    def dtypes(self) -> Optional[list[tuple[str, str]]]:
        types = self.result_types()
        return list(types.items()) if types else None

    def collect(self) -> list:
        return list(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def first(self):
        rows = self.rows
        return rows[0] if rows else None

    def head(self, n: Optional[int] = None):
        return self.first() if n is None else self.take(n)

    def take(self, num: int) -> list:
        return self.rows[:max(int(num), 0)]

    def count(self) -> int:
        return len(self.rows)

    def isEmpty(self) -> bool:  # noqa: N802 - PySpark's name
        return not self.rows

    def as_dicts(self) -> list[dict]:
        return [r.asDict(recursive=True) for r in self.rows]

    def toPandas(self):  # noqa: N802 - PySpark's name
        import pandas as pd

        return pd.DataFrame.from_records([tuple(r) for r in self.rows], columns=self.columns)

    def show(self, n: int = 20, truncate: Union[bool, int] = True, vertical: bool = False) -> None:
        print(show_string(self.columns, self.rows, n, truncate, vertical))


# Databricks' result columns of the DML statements (all BIGINT)
DML_RESULT_COLUMNS = {
    "UPDATE": ("num_affected_rows",),
    "DELETE": ("num_affected_rows",),
    "MERGE": ("num_affected_rows", "num_updated_rows", "num_deleted_rows", "num_inserted_rows"),
    "INSERT": ("num_affected_rows", "num_inserted_rows"),
}
# the row counts each statement's num_affected_rows adds up
_DML_COUNTS = {"UPDATE": ("updated",), "DELETE": ("deleted",), "MERGE": ("updated", "deleted", "inserted"),
               "INSERT": ("inserted",)}


@dataclass(frozen=True)
class DmlResult(CommitResult):
    """UPDATE / DELETE / MERGE / INSERT's commit, which also answers with Databricks' one-row
    result of BIGINT counts (``execute("DELETE ...").first().num_affected_rows``):

    UPDATE, DELETE   ``num_affected_rows``
    MERGE            ``num_affected_rows, num_updated_rows, num_deleted_rows, num_inserted_rows``
                     (affected = updated + deleted + inserted)
    INSERT           ``num_affected_rows, num_inserted_rows`` (INTO, OVERWRITE, REPLACE WHERE:
                     the rows the statement inserted; rows an overwrite replaced are not counted)

    A statement that changed nothing (and committed nothing: ``version`` is the version it
    read) answers with zeros. ``counts`` holds the values by column name; build one with
    ``DmlResult.of(kind, ...)``."""

    kind: str = ""  # UPDATE | DELETE | MERGE | INSERT (``operation`` is Delta's name: WRITE for INSERT)
    counts: dict = field(default_factory=dict)

    @classmethod
    def of(cls, kind: str, version: int, operation: str, metrics: dict, table: str = "", elapsed_s: float = 0.0, *,
           updated: int = 0, deleted: int = 0, inserted: int = 0) -> "DmlResult":
        """The result of a ``kind`` statement with these row counts (only the ones its row has
        are used: UPDATE reads ``updated``, DELETE ``deleted``, INSERT ``inserted``)."""
        counted = _DML_COUNTS[kind]
        updated, deleted, inserted = (int(n) if name in counted else 0
                                      for name, n in (("updated", updated), ("deleted", deleted), ("inserted", inserted)))
        values = {"num_affected_rows": updated + deleted + inserted, "num_updated_rows": updated,
                  "num_deleted_rows": deleted, "num_inserted_rows": inserted}
        columns = DML_RESULT_COLUMNS[kind]
        return cls(version=version, operation=operation, metrics=metrics, table=table, elapsed_s=elapsed_s,
                   kind=kind, counts={c: values[c] for c in columns})

    def result_row(self) -> Optional[dict]:
        columns = DML_RESULT_COLUMNS.get(self.kind)
        if columns is None:
            return None
        return {c: int(self.counts.get(c, 0)) for c in columns}

    def result_types(self) -> Optional[dict]:
        columns = DML_RESULT_COLUMNS.get(self.kind)
        return {c: "bigint" for c in columns} if columns else None


@dataclass(frozen=True)
class OptimizeResult(CommitResult):
    """OPTIMIZE / REORG's commit, which also answers with Delta's result row: ``path`` (the
    table's location) and ``metrics`` (a struct: files added / removed with their size
    statistics, partitions optimised, z-order or clustering columns, deletion vectors removed,
    ...), so ``execute("OPTIMIZE t").first().metrics.numFilesAdded`` reads as it does in Delta."""

    path: str = ""
    result_metrics: dict = field(default_factory=dict)

    def result_row(self) -> Optional[dict]:
        return {"path": self.path, "metrics": self.result_metrics}


class QueryResult:
    """What ``Session.execute()`` returns for a statement that answers with rows (a query, SHOW,
    DESCRIBE, EXPLAIN, SET) or only with a message (CREATE DATABASE, DROP TABLE, ...).

    It answers the PySpark DataFrame actions people use, the same way whether the rows come
    from Spark (a query) or were built by isolde (SHOW / DESCRIBE / SET / EXPLAIN):

    ``collect()``          list of ``pyspark.sql.Row`` (named fields: ``row.a``, ``row["a"]``,
                           ``row.asDict()``); Row is a tuple, so ``row == (1, "x")`` holds
    iteration              yields those Rows; ``len(result)`` is the number of rows
    ``count()``            number of rows (a query not yet collected runs Spark's count)
    ``first()``            the first Row, or None;  ``head()`` the same; ``head(n)`` /
                           ``take(n)`` / ``tail(n)`` lists of Rows;  ``isEmpty()``
    ``toPandas()``         a pandas DataFrame (Spark's own conversion for a query)
    ``show(n=20, truncate=True, vertical=False)``  prints the rows as Spark does
    ``columns``            column names;  ``schema`` / ``dtypes``: Spark's StructType / (name,
                           type) pairs for a query, None for rows isolde built
    ``df``                 the query's DataFrame (a real ``pyspark.sql.DataFrame`` whose
                           actions raise isolde errors), None for rows isolde built
    ``rows``               the kept list of Rows itself (what ``collect()`` copies);
                           ``as_dicts()`` a list of {column: value}
    ``message``            the text of a statement that answers with a message (no columns)

    A query's rows are collected once, on first use (``rows``, ``collect()``, iteration,
    ``len``), and kept: every later call sees the same rows. Until then ``count()``,
    ``first()``, ``head(n)``, ``take(n)``, ``isEmpty()``, ``toPandas()`` and ``show()`` run the
    corresponding (smaller) Spark job on ``df``. Transformations (``filter``, ``select``, ...)
    are ``df``'s: ``result.df.filter(...)``. Spark errors surface as isolde errors
    (``AnalysisError`` / ``ExecutionError`` carrying Spark's error class and SQLSTATE).
    """

    def __init__(self, columns: Sequence[str] | None = None, rows: Sequence[tuple] | None = None, df: Any = None,
                 message: str | None = None, schema: Any = None):
        self.df = isolde_dataframe(df) if df is not None else None
        self._columns = list(columns) if columns is not None else None
        self._rows = list(rows) if rows is not None else None
        self._schema = schema
        self.message = message  # e.g. "Table created" for DDL with no rows

    # The kept rows. Whatever is stored (tuples from isolde's builders or an older subclass,
    # Rows from Spark) reads back as named Rows, converted once.
    @property
    def _rows(self) -> Optional[list]:
        stored = self.__dict__.get("_stored_rows")
        if stored is not None and not self.__dict__.get("_rows_named"):
            stored = named_rows(self.columns, stored)
            self.__dict__["_stored_rows"] = stored
            self.__dict__["_rows_named"] = True
        return stored

    @_rows.setter
    def _rows(self, value: Optional[Sequence]) -> None:
        self.__dict__["_stored_rows"] = list(value) if value is not None else None
        self.__dict__["_rows_named"] = False

    def attach(self, ctx) -> "QueryResult":
        """Bind the statement's context: errors of later Spark actions name near tables."""
        if self.df is not None and isinstance(self.df, _isolde_classes().get("df", ())):
            self.df._isolde_ctx = ctx
        return self

    # -- shape
    @property
    def columns(self) -> list[str]:
        if self._columns is None:
            self._columns = list(self.df.columns) if self.df is not None else []
        return self._columns

    @property
    def schema(self):
        """Spark's StructType of a query's rows (None for rows isolde built)."""
        if self._schema is None and self.df is not None:
            self._schema = self.df.schema
        return self._schema

    @property
    def dtypes(self) -> Optional[list[tuple[str, str]]]:
        schema = self.schema
        if schema is None:
            return None
        return [(f.name, f.dataType.simpleString()) for f in schema.fields]

    @property
    def collected(self) -> bool:
        """Are the rows in memory (no Spark job needed to answer)?"""
        return self.__dict__.get("_stored_rows") is not None or self.df is None

    # -- rows
    @property
    def rows(self) -> list:
        if self._rows is None:
            self._rows = self.df.collect() if self.df is not None else []
        return self._rows

    def _all(self) -> list:
        return self.rows  # through the property: a subclass's ``rows`` may be the one that collects

    def collect(self) -> list:
        return list(self._all())

    def __iter__(self):
        return iter(self._all())

    def toLocalIterator(self, prefetchPartitions: bool = False):  # noqa: N802 - PySpark's name
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def count(self) -> int:
        if not self.collected:
            return int(self.df.count())
        return len(self._all())

    def isEmpty(self) -> bool:  # noqa: N802 - PySpark's name
        if not self.collected:
            return bool(self.df.isEmpty())
        return not self._all()

    def take(self, num: int) -> list:
        if not self.collected:
            return list(self.df.take(num))
        return list(self._all()[:max(int(num), 0)])

    def head(self, n: Optional[int] = None):
        if n is None:
            rows = self.take(1)
            return rows[0] if rows else None
        return self.take(n)

    def first(self):
        return self.head()

    def tail(self, num: int) -> list:
        if not self.collected:
            return list(self.df.tail(num))
        num = max(int(num), 0)
        return list(self._all()[-num:]) if num else []

    def as_dicts(self) -> list[dict]:
        columns = self.columns
        return [dict(zip(columns, r)) for r in self._all()]

    # -- conversion and display
    def toPandas(self):  # noqa: N802 - PySpark's name
        if self.df is not None:
            return self.df.toPandas()
        import pandas as pd

        return pd.DataFrame.from_records([tuple(r) for r in self._all()], columns=self.columns)

    def show(self, n: int = 20, truncate: Union[bool, int] = True, vertical: bool = False) -> None:
        if self.df is not None:
            self.df.show(n, truncate, vertical)
            return
        print(show_string(self.columns, self._all(), n, truncate, vertical))  # as pyspark prints showString

    def __repr__(self) -> str:
        if self.message is not None and not self.columns:
            return f"QueryResult(message={self.message!r})"
        count = len(self._all()) if self.collected else "not collected"
        return f"QueryResult(columns={self.columns!r}, rows={count})"


def named_rows(columns: Sequence[str], rows: Sequence) -> list:
    """``rows`` (tuples or Rows) as ``pyspark.sql.Row`` objects with ``columns`` as field names.
    Rows that already carry field names are kept as they are."""
    if not rows:
        return list(rows)
    from pyspark.sql import Row

    columns = [str(c) for c in columns]
    make = Row(*columns) if columns else None
    out = []
    for r in rows:
        if isinstance(r, Row) and hasattr(r, "__fields__"):
            out.append(r)
        elif make is not None and len(r) == len(columns):
            out.append(make(*r))
        else:
            out.append(Row(*r))  # no (or mismatched) column names: a plain positional Row
    return out


# --------------------------------------------------------------------------- Spark's show()

def _half_width(text: str) -> int:
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def _show_cell(value: Any) -> str:
    """A value as Spark's ``show()`` prints it (its cast to STRING)."""
    import datetime as dt
    import decimal

    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return "[" + " ".join(f"{b:02X}" for b in value) + "]"
    if isinstance(value, dt.datetime):
        text = f"{value.year:04d}-{value.month:02d}-{value.day:02d} {value:%H:%M:%S}"
        if value.microsecond:
            text += f".{value.microsecond:06d}".rstrip("0")
        return text
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_show_cell(k)} -> {_show_cell(v)}" for k, v in value.items()) + "}"
    if hasattr(value, "asDict"):
        return "{" + ", ".join(_show_cell(v) for v in value) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show_cell(v) for v in value) + "]"
    return str(value)


def _java_double(x: float) -> str:
    """A double as Spark casts it to STRING (Java's notation: 2.5, 100.0, 1.0E20, 1.5E-5)."""
    import decimal
    import math

    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    if 1e-3 <= abs(x) < 1e7:
        text = repr(x)
        return text if "." in text else text + ".0"
    sign, digit_tuple, exponent = decimal.Decimal(repr(x)).as_tuple()
    e10 = exponent + len(digit_tuple) - 1  # of the leading digit
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    return ("-" if sign else "") + digits[0] + "." + (digits[1:] or "0") + f"E{e10}"


def _escape(text: str) -> str:
    return text.replace("\n", "\\n").replace("\t", "\\t")


def show_string(columns: Sequence[str], rows: Sequence, n: int = 20, truncate: Union[bool, int] = True,
                vertical: bool = False) -> str:
    """Spark's ``showString(n, truncate, vertical)`` of these rows (``show()`` prints it)."""
    width = 20 if truncate is True else 0 if truncate is False else int(truncate)
    n = max(int(n), 0)
    shown = list(rows)[:n]
    more = len(rows) > n
    header = [_escape(str(c)) for c in columns]

    def cell(value: Any) -> str:
        text = _escape(_show_cell(value))
        if width > 0 and len(text) > width:
            text = text[:width] if width < 4 else text[:width - 3] + "..."
        return text

    data = [[cell(v) for v in r] for r in shown]
    out: list[str] = []
    if not vertical:
        widths = [3] * len(header)
        for line in [header] + data:
            for i, text in enumerate(line):
                widths[i] = max(widths[i], _half_width(text))

        def pad(text: str, i: int) -> str:
            fill = " " * (widths[i] - _half_width(text))
            return fill + text if width > 0 else text + fill

        sep = "+" + "+".join("-" * w for w in widths) + "+\n"
        out.append(sep)
        for k, line in enumerate([header] + data):
            out.append("|" + "|".join(pad(t, i) for i, t in enumerate(line)) + "|\n")
            if k == 0:
                out.append(sep)
        out.append(sep)
    else:
        name_w = max([3] + [_half_width(h) for h in header])
        data_w = max([3] + [_half_width(t) for line in data for t in line])
        for k, line in enumerate(data):
            out.append(f"-RECORD {k}".ljust(name_w + data_w + 5, "-") + "\n")
            for name, text in zip(header, line):
                out.append(f" {name}{' ' * (name_w - _half_width(name))} | "
                           f"{text}{' ' * (data_w - _half_width(text))} \n")
    if vertical and not data:
        out.append("(0 rows)")
    elif more:
        out.append(f"only showing top {n} {'row' if n == 1 else 'rows'}")
    return "".join(out)


# --------------------------------------------------------------------------- DataFrames that raise isolde errors

# methods that run Spark jobs: each runs under its own job group, so Session.cancel() reaches it
_ACTIONS = frozenset({
    "collect", "count", "show", "take", "head", "first", "tail", "toPandas", "toArrow", "toLocalIterator",
    "foreach", "foreachPartition", "isEmpty", "checkpoint", "localCheckpoint", "approxQuantile", "corr", "cov",
    "crosstab", "freqItems", "save", "saveAsTable", "insertInto", "parquet", "json", "csv", "orc", "text", "jdbc",
    "xml", "append", "create", "replace", "createOrReplace", "overwrite", "overwritePartitions", "merge",
})

_local = threading.local()
_CLASSES: dict = {}
_BUILD_LOCK = threading.Lock()


def _is_spark_error(e: BaseException) -> bool:
    """Raised by Spark (the JVM, or the Py4J bridge to it), not by Python-side argument checks."""
    try:
        from py4j.protocol import Py4JJavaError, Py4JNetworkError
        from pyspark.errors.exceptions.captured import CapturedException
    except Exception:  # pragma: no cover
        return False
    # not every Py4JError: "Method limit([class java.lang.String]) does not exist" is a bad
    # Python argument, left as PySpark raises it
    return isinstance(e, (CapturedException, Py4JJavaError, Py4JNetworkError))


def _translated(e: BaseException, ctx) -> BaseException:
    from .session import translate_exception

    return translate_exception(e, ctx)


def _start_job_group(ctx, name: str) -> None:
    session = getattr(ctx, "session", None)
    setter = getattr(session, "_set_job_group", None)
    if setter is None or getattr(session, "_spark", None) is None:
        return
    statement = getattr(ctx, "statement", None) or types.SimpleNamespace(text=f"DataFrame.{name}()")
    try:
        setter(f"isolde-{uuid.uuid4().hex[:12]}", statement)
    except Exception:
        pass


def _translating(fn: Callable, name: str) -> Callable:
    action = name in _ACTIONS

    @functools.wraps(fn)
    def method(self, *args, **kwargs):
        depth = getattr(_local, "depth", 0)
        ctx = getattr(self, "_isolde_ctx", None)
        if action and depth == 0:
            _start_job_group(ctx, name)
        _local.depth = depth + 1
        try:
            out = fn(self, *args, **kwargs)
        except Exception as e:
            if depth == 0 and _is_spark_error(e):
                raise _translated(e, ctx) from e
            raise
        finally:
            _local.depth = depth
        return _adopt(out, ctx, name)

    return method


def _translating_iterator(it, ctx):
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        except Exception as e:
            if _is_spark_error(e):
                raise _translated(e, ctx) from e
            raise
        yield item


def _to_arrow(self):
    """``toArrow`` that converts VARIANT columns holding NULL (PySpark 4 casts every batch to a
    schema whose variant ``value`` / ``metadata`` fields are NOT NULL, which a NULL variant
    breaks: ArrowInvalid, also outside isolde): the same table, those two fields nullable."""
    import pyarrow as pa
    from pyspark.sql import types as T

    from ..catalog.schema import nested_types

    base = _isolde_classes()["classic"]
    if not any(isinstance(t, T.VariantType) for f in self.schema.fields for t in nested_types(f.dataType)):
        return base.toArrow(self)
    try:
        return base.toArrow(self)
    except pa.ArrowInvalid:
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(self.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC")
        batches = self._collect_as_arrow(split_batches=False, empty_list_if_zero_records=False)
        return pa.Table.from_batches(batches).cast(_nullable_arrow(schema))


def _nullable_arrow(schema):
    """An Arrow schema with every nested field nullable (map keys stay as Arrow needs them)."""
    import pyarrow as pa

    def relax(t):
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, relax(f.type), True) for f in t])
        if pa.types.is_list(t):
            return pa.list_(pa.field(t.value_field.name, relax(t.value_type), True))
        if pa.types.is_large_list(t):
            return pa.large_list(pa.field(t.value_field.name, relax(t.value_type), True))
        if pa.types.is_map(t):
            return pa.map_(t.key_type, pa.field(t.item_field.name, relax(t.item_type), True))
        return t

    return pa.schema([pa.field(f.name, relax(f.type), f.nullable) for f in schema])


def _subclass(base: type, doc: str, overrides: Optional[dict] = None) -> type:
    """``base`` with every public method (and property) translating Spark errors and handing
    back DataFrames / helper objects that do the same; ``overrides``: name -> the function used
    in place of ``base``'s."""
    cls = _CLASSES.get(base)
    if cls is not None:
        return cls
    ns: dict = {"__module__": __name__, "__doc__": doc, "_isolde_ctx": None}
    for name in dir(base):
        if name.startswith("_"):
            continue
        static = inspect.getattr_static(base, name)
        if overrides and name in overrides:
            ns[name] = _translating(overrides[name], name)
        elif isinstance(static, property) and static.fget is not None and static.fset is None:
            ns[name] = property(_translating(static.fget, name), doc=static.__doc__)
        elif inspect.isfunction(static):
            ns[name] = _translating(static, name)
    cls = type("Isolde" + base.__name__, (base,), ns)
    _CLASSES[base] = cls
    return cls


def _isolde_classes() -> dict:
    """{"df": the DataFrame subclass, "classic": pyspark's classic DataFrame, "helpers": {class:
    subclass}} -- built on first use (importing pyspark only when a DataFrame exists)."""
    built = _CLASSES.get("built")
    if built is not None:
        return built
    with _BUILD_LOCK:  # one class per process, whichever thread asks first
        built = _CLASSES.get("built")
        if built is None:
            built = _build_classes()
            _CLASSES["built"] = built
    return built


def _build_classes() -> dict:
    try:
        from pyspark.sql.classic.dataframe import DataFrame as Classic
    except Exception:  # pragma: no cover - no pyspark: nothing to wrap
        return {"df": (), "classic": (), "helpers": {}}
    helpers: dict = {}
    for module, name in (("pyspark.sql.group", "GroupedData"),
                         ("pyspark.sql.classic.dataframe", "DataFrameNaFunctions"),
                         ("pyspark.sql.classic.dataframe", "DataFrameStatFunctions"),
                         ("pyspark.sql.readwriter", "DataFrameWriter"),
                         ("pyspark.sql.readwriter", "DataFrameWriterV2"),
                         ("pyspark.sql.merge", "MergeIntoWriter"),
                         ("pyspark.sql.pandas.group_ops", "PandasCogroupedOps")):
        try:
            base = getattr(importlib.import_module(module), name)
        except Exception:  # pragma: no cover - an older or newer PySpark without it
            continue
        helpers[base] = _subclass(base, f"pyspark's {name} whose Spark errors are isolde errors.")
    return {"df": _subclass(Classic, _DATAFRAME_DOC, {"toArrow": _to_arrow}), "classic": Classic, "helpers": helpers}


_DATAFRAME_DOC = """A pyspark DataFrame (``isinstance(df, pyspark.sql.DataFrame)``, same JVM Dataset) whose
methods raise isolde errors instead of Spark's: an action (collect, count, show, toPandas, take,
first, head, tail, toLocalIterator, foreach, write...save, ...) that fails in Spark raises
``AnalysisError`` / ``ExecutionError`` with Spark's error class, SQLSTATE and message (the
original exception is the ``__cause__``). Transformations return DataFrames of this class, and
``groupBy`` / ``na`` / ``stat`` / ``write`` / ``writeTo`` / ``mergeInto`` helpers that do the
same, so the whole chain translates. Errors Python raises on bad arguments (TypeError, ...) are
left as they are; ``df.rdd`` is a plain RDD."""


def dataframe_class() -> type:
    """The isolde DataFrame class (a subclass of pyspark's classic DataFrame)."""
    cls = _isolde_classes()["df"]
    if not cls:
        raise RuntimeError("pyspark is not installed")
    return cls


def isolde_dataframe(df: Any, ctx: Any = None) -> Any:
    """``df`` as a DataFrame whose actions raise isolde errors (the same Dataset; other objects,
    e.g. Spark Connect DataFrames, are returned unchanged)."""
    classes = _isolde_classes()
    if classes["df"] and isinstance(df, classes["df"]):
        if ctx is not None:
            df._isolde_ctx = ctx
        return df
    if not classes["classic"] or not isinstance(df, classes["classic"]):
        return df
    new = classes["df"](df._jdf, df.sparkSession)
    new.is_cached = df.is_cached
    new._isolde_ctx = ctx
    return new


def _adopt(value: Any, ctx: Any, name: str) -> Any:
    classes = _isolde_classes()
    if classes["classic"] and isinstance(value, classes["classic"]):
        return isolde_dataframe(value, ctx) if not isinstance(value, classes["df"]) else value
    if name == "toLocalIterator" and value is not None:
        return _translating_iterator(iter(value), ctx)
    if name == "randomSplit" and isinstance(value, list):
        return [_adopt(v, ctx, "") for v in value]
    helper = classes["helpers"].get(type(value))
    if helper is not None:
        try:
            value.__class__ = helper
            value._isolde_ctx = ctx
        except TypeError:  # pragma: no cover - a layout that cannot take the subclass
            pass
    return value


@dataclass
class PreparedWrite:
    """A write whose data work is done and whose new files are staged, but not committed.

    ``commit_fn()`` performs the transactional commit and returns a CommitResult (or raises a
    ConcurrentModificationException); ``staged_paths`` are deleted by ``abort()`` and after a
    failed commit, so a refused or abandoned write leaves nothing behind but the old table.
    """

    operation: str
    table: str
    commit_fn: Callable[[], CommitResult]
    staged_paths: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    state: str = "prepared"  # prepared | committed | aborted | failed
    result: Optional[CommitResult] = None
    started: float = field(default_factory=time.perf_counter)
    lease: Optional[str] = None  # keeps VACUUM off the staged files until commit or abort
    root: Optional[str] = None  # the folder of a table this write creates (its lease lives there)

    def __post_init__(self) -> None:
        if self.staged_paths and self.lease is None:
            from ..catalog import leases

            try:
                self.lease = leases.take(self.staged_paths, root=self.root)
            except OSError:  # a read-only table folder: the commit will fail anyway
                self.lease = None

    def commit(self) -> CommitResult:
        if self.state != "prepared":
            raise RuntimeError(f"this write is already {self.state}")
        try:
            self.result = self.commit_fn()
        except BaseException:
            self.state = "failed"
            self._remove_staged()
            raise
        self.state = "committed"
        self._release()
        return self.result

    def _release(self) -> None:
        from ..catalog import leases

        leases.release(self.lease)
        self.lease = None

    def abort(self) -> None:
        if self.state == "prepared":
            self.state = "aborted"
            self._remove_staged()

    def _remove_staged(self) -> None:
        from ..log import table_files

        for path in self.staged_paths:
            table_files.delete(path)
        self._release()
