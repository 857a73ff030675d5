"""A point MERGE's local source written as literals (executor/rows/inline_source.py): Spark reads
each literal back as the value and type it was, and a MERGE planned with the literals gives the
same table as with the broadcast join, on two copies of one table, read by isolde and by
delta-rs. One Spark job fewer (the source's broadcast) is asserted in test_dml_job_counts.py."""

from __future__ import annotations

import datetime
import decimal
import math
import random

import pytest
from pyspark.sql import types as T

from isolde.errors import MergeCardinalityError
from isolde.executor.rows import inline_source, routes

pytestmark = pytest.mark.spark

ALPHABET = "ab'\\\"\n\t é€😀%_`"


def _random_value(rng: random.Random, dtype):
    if rng.random() < 0.1:
        return None
    if isinstance(dtype, T.ByteType):
        return rng.choice([-128, 127, 0, rng.randint(-128, 127)])
    if isinstance(dtype, T.IntegerType):
        return rng.choice([-2**31, 2**31 - 1, rng.randint(-2**31, 2**31 - 1)])
    if isinstance(dtype, T.LongType):
        return rng.choice([-2**63, 2**63 - 1, rng.randint(-2**63, 2**63 - 1)])
    if isinstance(dtype, T.StringType):
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8)))
    if isinstance(dtype, T.BooleanType):
        return rng.random() < 0.5
    if isinstance(dtype, T.DateType):
        return datetime.date(1, 1, 1) + datetime.timedelta(days=rng.randint(0, 3_652_058))
    if isinstance(dtype, T.DecimalType):
        digits = rng.randint(0, dtype.precision)
        unscaled = rng.randint(-(10 ** digits - 1), 10 ** digits - 1)
        return decimal.Decimal(unscaled).scaleb(-dtype.scale)
    if isinstance(dtype, T.DoubleType):
        return rng.choice([float("nan"), float("inf"), -0.0, 5e-324, 1.7976931348623157e308,
                           rng.uniform(-1e6, 1e6), rng.random() * 10 ** rng.randint(-300, 300)])
    if isinstance(dtype, T.FloatType):  # values a float32 holds
        import struct
        return struct.unpack("f", struct.pack("f", rng.uniform(-1e6, 1e6)))[0]
    raise AssertionError(dtype)


TYPES = [T.ByteType(), T.IntegerType(), T.LongType(), T.StringType(), T.BooleanType(), T.DateType(),
         T.DecimalType(10, 2), T.DecimalType(38, 0), T.DecimalType(38, 38), T.DoubleType(), T.FloatType()]


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, float) and a == 0.0 and isinstance(b, float):
        return b == 0.0 and math.copysign(1, a) == math.copysign(1, b)
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_spark_reads_each_literal_back_as_written(spark, seed):
    rng = random.Random(seed)
    pairs = [(t, _random_value(rng, t)) for _ in range(12) for t in TYPES]
    texts = [inline_source.literal(v, t) for t, v in pairs]
    assert all(text is not None for text in texts)
    df = spark.sql("SELECT " + ", ".join(f"{text} AS c{i}" for i, text in enumerate(texts)))
    assert [f.dataType for f in df.schema.fields] == [t for t, _ in pairs]
    row = df.collect()[0]
    bad = [(t, v, text, row[i]) for i, ((t, v), text) in enumerate(zip(pairs, texts)) if not _same(v, row[i])]
    assert not bad


COLUMNS = "k BIGINT, name STRING, d DATE, amt DECIMAL(10,2), f DOUBLE, flag BOOLEAN"
NAMES = ["k", "name", "d", "amt", "f", "flag"]


def _sql_string(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


DOUBLES = ["CAST('NaN' AS DOUBLE)", "-0.0D", "1.5D", "CAST(NULL AS DOUBLE)"]


def _source_row(rng, k) -> str:
    name = "".join(rng.choice(ALPHABET) for _ in range(3))
    d = datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randint(0, 60))
    return (f"({k if k is not None else 'CAST(NULL AS BIGINT)'}, {_sql_string(name)}, DATE'{d}', "
            f"CAST('{rng.randint(-9999, 9999) / 100:.2f}' AS DECIMAL(10,2)), "
            f"{rng.choice(DOUBLES)}, "
            f"{rng.choice(['true', 'false'])})")


STATEMENTS = [
    # (ON and clauses; a {src} placeholder for the VALUES source)
    "MERGE INTO {t} t USING (VALUES {src}) AS s({cols}) ON t.k = s.k "
    "WHEN MATCHED AND s.flag THEN DELETE WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    "MERGE INTO {t} t USING (VALUES {src}) AS s({cols}) ON t.k = s.k AND t.name = s.name "
    "WHEN MATCHED THEN UPDATE SET amt = t.amt + s.amt, d = s.d, f = s.f "
    "WHEN NOT MATCHED AND s.k IS NOT NULL THEN INSERT (k, name, f) VALUES (s.k, s.name, s.f)",
    "MERGE INTO {t} t USING (VALUES {src}) AS s({cols}) ON t.d = s.d AND t.k = s.k AND s.amt > t.amt - 100 "
    "WHEN MATCHED AND t.flag = s.flag THEN UPDATE SET name = concat(t.name, s.name)",
]


def _comparable(rows) -> list:
    """Rows with NaN as a string (NaN != NaN would fail an equal comparison), sorted."""
    from tests.helpers.oracle import sorted_rows

    nan = lambda v: "NaN" if isinstance(v, float) and math.isnan(v) else v  # noqa: E731
    return sorted_rows(tuple(nan(v) for v in r) for r in rows)


def _rows(session, table):
    return _comparable(session.sql(f"SELECT {', '.join(NAMES)} FROM {table}").collect())


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_merge_with_literals_equals_the_join(session, spark, table_path, delta_rows, monkeypatch, seed):
    """Two copies of a two-file table with vectors; each statement runs on one with the source
    as literals, on the other with the broadcast join; the tables stay equal."""
    rng = random.Random(seed)
    names = [_sql_string("".join(rng.choice(ALPHABET) for _ in range(3))) for _ in range(400)]
    for table in ("lit", "joined"):
        session.execute(f"CREATE TABLE {table} ({COLUMNS})")
        for lo in (0, 200):
            rows = ", ".join(f"({i}, {names[i]}, DATE'2024-01-01' + {i % 61}, {i}.25, {i} / 7.0D, {str(i % 3 == 0).lower()})"
                             for i in range(lo, lo + 200))
            session.execute(f"INSERT INTO {table} VALUES {rows}")
    used = []
    real = inline_source.lateral_view

    def spy(*args, **kwargs):
        text = real(*args, **kwargs)
        used.append(text is not None)
        return text

    monkeypatch.setattr(inline_source, "lateral_view", spy)
    inline_rows = routes.INLINE_ROWS
    for n, template in enumerate(STATEMENTS * 2):
        keys = [rng.choice([rng.randint(0, 399), rng.randint(400, 500), None]) for _ in range(rng.randint(1, 8))]
        keys = list(dict.fromkeys(keys))  # one source row per key: no cardinality error here
        src = ", ".join(_source_row(rng, k) for k in keys)
        outcome = {}
        for table, rows_inline in (("lit", inline_rows), ("joined", 0)):
            monkeypatch.setattr(routes, "INLINE_ROWS", rows_inline)
            used.clear()
            session.execute(template.format(t=table, src=src, cols=", ".join(NAMES)))
            outcome[table] = used[:]
        assert outcome["joined"] in ([], [False])
        if any(k is not None and k < 400 for k in keys):  # a key the target holds: pass 1 runs
            assert outcome["lit"] == [True], (n, keys)
        assert _rows(session, "lit") == _rows(session, "joined"), (n, template, src)
    want = _rows(session, "lit")
    assert _comparable(delta_rows(table_path(session, "lit"), NAMES)) == want
    assert _comparable(delta_rows(table_path(session, "joined"), NAMES)) == want


def test_two_source_rows_for_one_target_row_still_fail(session, spark, monkeypatch):
    session.execute("CREATE TABLE card (k BIGINT, v STRING)")
    session.execute("INSERT INTO card VALUES (1, 'a'), (2, 'b')")
    used = []
    real = inline_source.lateral_view
    monkeypatch.setattr(inline_source, "lateral_view", lambda *a, **k: used.append(real(*a, **k)) or used[-1])
    with pytest.raises(MergeCardinalityError):
        session.execute("MERGE INTO card t USING (VALUES (1, 'x'), (1, 'y')) AS s(k, v) ON t.k = s.k "
                        "WHEN MATCHED THEN UPDATE SET v = s.v")
    assert used and used[0] is not None
    assert sorted(tuple(r) for r in session.sql("SELECT * FROM card").collect()) == [(1, "a"), (2, "b")]
