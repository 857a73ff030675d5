"""Point UPDATE / MERGE jobs over small files run without generated code (few_rows.collect_few).

Spark writes integer and date literals into the Java it compiles, so a point statement that
names another key, or runs after the table's files changed, compiled two or three classes
(20-85 ms). Over files of at most ``routes.INTERPRETED_ROWS`` rows the job runs interpreted. Checked
here: no class is compiled; the interpreted statements leave the same table (read by isolde
and by delta-rs) as the same statements with generated code, over every type the point route
carries; plans with a subquery, or over bigger files, keep generated code.
"""

from __future__ import annotations

import random
import sys

import pytest

from isolde.executor.rows import routes
from isolde.executor.runtime import spark as isolde_spark
from .test_few_rows import _contents, _tables

pytestmark = pytest.mark.spark


def _compiled(spark) -> int:
    """Classes Spark's code generator has compiled in this JVM so far."""
    return spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()


@pytest.fixture
def interpreted(monkeypatch):
    """The ``interpreted`` setting of each point collection (``collect_few``), in order."""
    seen = []
    plan = isolde_spark.without_adaptive

    def record(df, interpreted=False):
        if sys._getframe(1).f_code.co_name == "collect_few":
            seen.append(interpreted)
        return plan(df, interpreted)

    monkeypatch.setattr(isolde_spark, "without_adaptive", record)
    return seen


def _point(name: str, k: int) -> list:
    return [f"UPDATE {name} SET v = v + 1, s = 'u{k}', dec = dec * 2 WHERE id = {k}",
            f"MERGE INTO {name} t USING (VALUES ({k}, 0.25, 'm')) AS src(id, v, s) ON t.id = src.id "
            f"WHEN MATCHED THEN UPDATE SET v = src.v, s = src.s WHEN NOT MATCHED THEN INSERT (id, v, s) "
            f"VALUES (src.id, src.v, src.s)",
            f"MERGE INTO {name} t USING (VALUES ({k + 100_000}, 0.5, 'new')) AS src(id, v, s) ON t.id = src.id "
            f"WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT (id, v, s) VALUES (src.id, src.v, src.s)"]


def test_point_statements_compile_no_class(session, spark, interpreted):
    rng = random.Random(3)
    _tables(session, spark, rng, list(range(3000)))
    for k in (10, 20):  # the first statements of a kind may compile what any plan needs
        for sql in _point("few", k):
            session.execute(sql)
    for k in (1234, 2345, 2999):
        for sql in _point("few", k):
            before = _compiled(spark)
            session.execute(sql)
            assert _compiled(spark) == before, sql
    assert interpreted and all(interpreted)
    got = {r[0]: (r[1], r[2]) for r in session.sql("SELECT id, v, s FROM few WHERE id IN (10, 1234, 2999, 102345)")
           .collect()}
    assert got[1234] == (0.25, "m") and got[2999] == (0.25, "m") and got[102345] == (0.5, "new")


@pytest.mark.parametrize("seed", range(2))
def test_interpreted_and_generated_code_leave_the_same_table(session, spark, table_path, delta_rows,
                                                             monkeypatch, interpreted, seed):
    rng = random.Random(seed)
    ids = rng.sample(range(10_000), 2000)
    _tables(session, spark, rng, ids)
    keys = rng.sample(ids, 6) + [20_000 + seed]
    statements = [s for k in keys for s in _point("{t}", k)] + [
        "UPDATE {t} SET arr = array(1, 2), st = named_struct('a', 7, 'b', 'x'), m = map('z', 1), "
        "d = date_add(d, 1), ts = ts + INTERVAL 1 SECOND, ntz = ntz + INTERVAL 1 DAY WHERE id IN (%d, %d)"
        % (keys[0], keys[1]),
        "MERGE INTO {t} t USING (SELECT id, -v AS v FROM {t} WHERE id = %d) AS src ON t.id = src.id "
        "WHEN MATCHED THEN UPDATE SET v = src.v" % keys[2],
    ]
    for sql in statements:
        session.execute(sql.format(t="few"))
        with pytest.MonkeyPatch.context() as generated:
            generated.setattr(routes, "INTERPRETED_ROWS", -1)
            session.execute(sql.format(t="wide"))
    # (a statement whose keys no file's statistics admit reads no file: no collection)
    n = len(interpreted) // 2
    assert n >= 12 and interpreted == [True, False] * n
    assert _contents(session, "few") == _contents(session, "wide")
    assert delta_rows(table_path(session, "few")) == delta_rows(table_path(session, "wide"))


def test_a_subquery_or_bigger_files_keep_generated_code(session, spark, monkeypatch, interpreted):
    rng = random.Random(5)
    _tables(session, spark, rng, list(range(3000)))
    session.execute("CREATE TABLE keys (k BIGINT)")
    session.execute("INSERT INTO keys VALUES (7), (8)")
    session.execute("UPDATE few SET s = 'sub' WHERE id IN (SELECT k FROM keys)")
    assert interpreted == [False]
    monkeypatch.setattr(routes, "INTERPRETED_ROWS", 2999)  # the three files hold 3,000 rows
    session.execute("UPDATE few SET s = 'big' WHERE id % 1000 = 9")  # in every file
    assert interpreted == [False, False]
    got = {r[0]: r[1] for r in session.sql("SELECT id, s FROM few WHERE id IN (7, 8, 9, 10)").collect()}
    assert got[7] == got[8] == "sub" and got[9] == "big" and got[10] != "big"
    assert session.sql("SELECT count(*) FROM few WHERE s = 'big'").collect()[0][0] == 3
