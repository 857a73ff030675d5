"""Column-mapping tables (files hold physical names): identity columns keep advancing and
nested NOT NULL fields read back. Both were broken: statistics are keyed by physical names,
and Spark refuses a cast from a nullable file field to a NOT NULL one."""

from __future__ import annotations

import pytest

from tests.helpers.oracle import read_delta_rows, sorted_rows

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("mode", ["name", "none"])
def test_identity_values_stay_unique_across_inserts(session, table_path, mode):
    session.execute("CREATE TABLE t (id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 10 INCREMENT BY 5), v STRING) "
                    f"TBLPROPERTIES ('delta.columnMapping.mode' = '{mode}')")
    for batch in (["a", "b"], ["c"], ["d", "e", "f"]):
        session.execute("INSERT INTO t (v) VALUES " + ", ".join(f"('{v}')" for v in batch))
    rows = session.execute("SELECT id, v FROM t").collect()
    ids = [r.id for r in rows]
    assert len(ids) == 6 and len(set(ids)) == 6
    assert all(i >= 10 and (i - 10) % 5 == 0 for i in ids)
    by_value = {r.v: r.id for r in rows}
    assert max(by_value[v] for v in "ab") < by_value["c"] < min(by_value[v] for v in "def")  # later inserts above
    assert sorted_rows(session.execute("SELECT * FROM t").rows) == read_delta_rows(table_path(session, "t"))


def test_nested_not_null_field_reads_under_column_mapping(session, table_path):
    session.execute("CREATE TABLE t (id INT, s STRUCT<a: INT NOT NULL, b: STRING>, xs ARRAY<STRUCT<c: INT NOT NULL>>) "
                    "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    session.execute("INSERT INTO t VALUES (1, named_struct('a', 1, 'b', 'x'), array(named_struct('c', 7)))")
    rows = session.execute("SELECT id, s.a, s.b, xs[0].c FROM t").collect()
    assert [tuple(r) for r in rows] == [(1, 1, "x", 7)]
    session.execute("UPDATE t SET s = named_struct('a', 2, 'b', 'y') WHERE id = 1")
    assert [tuple(r) for r in session.execute("SELECT s.a, s.b FROM t").collect()] == [(2, "y")]


@pytest.mark.parametrize("mode", ["name", "none"])
def test_nested_not_null_is_enforced_where_the_parent_exists(session, mode):
    from isolde import errors as E

    session.execute("CREATE TABLE n (id INT, s STRUCT<a: INT NOT NULL, b: STRING>) "
                    f"TBLPROPERTIES ('delta.columnMapping.mode' = '{mode}')")
    session.execute("INSERT INTO n VALUES (1, named_struct('a', 1, 'b', 'x')), (2, NULL)")  # a null parent is fine
    with pytest.raises(E.IsoldeError) as info:
        session.execute("INSERT INTO n SELECT 3, named_struct('a', CAST(NULL AS INT), 'b', 'y')")
    assert "s.a" in str(info.value) and "NOT NULL" in str(info.value)
    with pytest.raises(E.IsoldeError):
        session.execute("UPDATE n SET s = named_struct('a', CAST(NULL AS INT), 'b', 'z') WHERE id = 1")
    assert sorted(tuple(r) for r in session.execute("SELECT id, s.a FROM n").collect()) == [(1, 1), (2, None)]
