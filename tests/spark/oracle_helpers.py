"""Interop oracle helpers for the Spark tests (delta-rs reads honour deletion vectors)."""

from __future__ import annotations


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


