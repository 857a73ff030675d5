"""Interop oracle helpers for the Spark tests (delta-rs reads honour deletion vectors)."""

from __future__ import annotations

import pyarrow as pa


def _norm(value):
    return value


def read_delta_rows(path: str, columns=None, order_by=None) -> list[tuple]:
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(path)
    cols = ", ".join(f'"{c}"' for c in columns) if columns else "*"
    table = pa.table(QueryBuilder().register("t", dt).execute(f"SELECT {cols} FROM t").read_all())
    rows = [tuple(r.values()) for r in table.to_pylist()]
    return sorted(rows, key=_sort_key)


def _sort_key(row):
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in row)


def sorted_rows(rows) -> list[tuple]:
    return sorted((tuple(r) for r in rows), key=_sort_key)


def spark_type(t: pa.DataType):
    """The Spark type of a pyarrow type, for tests that write Parquet files and logs directly."""
    from pyspark.sql import types as T

    simple = [(pa.types.is_int64, T.LongType), (pa.types.is_int32, T.IntegerType),
              (pa.types.is_float64, T.DoubleType), (pa.types.is_string, T.StringType),
              (pa.types.is_boolean, T.BooleanType), (pa.types.is_date32, T.DateType)]
    for test, spark in simple:
        if test(t):
            return spark()
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in t])
    raise TypeError(f"no Spark type for {t} in the test helpers")


def pushed_filters(df) -> str:
    """The filters Spark hands to the Parquet reader in ``df``'s physical plan."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    return " ".join(line.split("PushedFilters: ")[1].split("]")[0] for line in plan.splitlines()
                    if "PushedFilters: " in line)
