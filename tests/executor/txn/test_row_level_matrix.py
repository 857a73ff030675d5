"""The reference matrix with row-level concurrency (issue 19), through prepare()/commit():
statement A is prepared, statement B commits first, then A commits or raises. Exact
exception class, the table afterwards by isolde and by delta-rs, both isolation levels."""

from __future__ import annotations

import glob
import json
import os

import pytest

from isolde import errors as E

WS, SER = "WriteSerializable", "Serializable"
A, DD, DR = E.ConcurrentAppendException, E.ConcurrentDeleteDeleteException, E.ConcurrentDeleteReadException
BASE = [(i, 0) for i in range(10)]  # one file
UPSERT = ("MERGE INTO t USING (SELECT {k} AS id, {v} AS v) s ON t.id = s.id "
          "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *")


def model(rows, sql):
    """What one statement of the cases below does to the rows (a tiny model of each shape)."""
    rows = dict(rows)
    if sql.startswith("UPDATE t SET v = v + 1 WHERE id = "):
        k = int(sql.rsplit(" ", 1)[1])
        if k in rows:
            rows[k] += 1
    elif sql.startswith("UPDATE t SET v = 9 WHERE id >= "):
        k = int(sql.rsplit(" ", 1)[1])
        rows = {i: (9 if i >= k else v) for i, v in rows.items()}
    elif sql.startswith("DELETE FROM t WHERE id = "):
        rows.pop(int(sql.rsplit(" ", 1)[1]), None)
    elif sql.startswith("INSERT INTO t VALUES"):
        k, v = (int(x) for x in sql[sql.index("(") + 1:sql.index(")")].split(","))
        rows[k] = v
    elif sql.startswith("INSERT INTO t SELECT id + 100"):
        rows.update({i + 100: v for i, v in list(rows.items()) if i < 3})
    elif sql.startswith("MERGE"):
        k = int(sql.split("SELECT ")[1].split(" AS id")[0])
        v = int(sql.split("AS id, ")[1].split(" AS v")[0])
        rows[k] = v
    else:
        raise ValueError(sql)
    return rows


CASES = [
    # (name, A (prepared), B (committed first), levels, expected exception or None)
    ("updates of different rows", "UPDATE t SET v = v + 1 WHERE id = 1", "UPDATE t SET v = v + 1 WHERE id = 2",
     (WS, SER), None),
    ("delete vs update of the same row", "UPDATE t SET v = v + 1 WHERE id = 1", "DELETE FROM t WHERE id = 1",
     (WS, SER), DD),
    ("deletes of different rows", "DELETE FROM t WHERE id = 1", "DELETE FROM t WHERE id = 2", (WS, SER), None),
    # ordered before the blind append it did not see: the new row keeps v = 0
    ("update vs matching blind insert, WS", "UPDATE t SET v = 9 WHERE id >= 5", "INSERT INTO t VALUES (17, 0)",
     (WS,), "before"),
    ("update vs matching blind insert, Ser", "UPDATE t SET v = 9 WHERE id >= 5", "INSERT INTO t VALUES (70, 0)",
     (SER,), A),
    ("update vs non-matching blind insert", "UPDATE t SET v = 9 WHERE id >= 5", "INSERT INTO t VALUES (-7, 0)",
     (WS, SER), None),
    # ordered before the DELETE (its inserted rows are not what the DELETE read): 101 exists
    ("insert-select vs delete of a row it read, WS", "INSERT INTO t SELECT id + 100, v FROM t WHERE id < 3",
     "DELETE FROM t WHERE id = 1", (WS,), "before"),
    ("insert-select vs delete of a row it read, Ser", "INSERT INTO t SELECT id + 100, v FROM t WHERE id < 3",
     "DELETE FROM t WHERE id = 1", (SER,), DR),
    ("upserts of the same new key", UPSERT.format(k=50, v=5), UPSERT.format(k=50, v=6), (WS, SER), A),
    ("upserts of different new keys", UPSERT.format(k=50, v=5), UPSERT.format(k=51, v=6), (WS, SER), None),
    ("upserts of the same existing key", UPSERT.format(k=3, v=5), UPSERT.format(k=3, v=6), (WS, SER), DD),
    ("blind insert vs update", "INSERT INTO t VALUES (55, 5)", "UPDATE t SET v = 9 WHERE id >= 5", (WS, SER), None),
]


def _table(s, level, extra=""):
    s.execute(f"CREATE TABLE t (id INT, v INT) TBLPROPERTIES ('delta.isolationLevel' = '{level}'{extra})")
    s.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, {v})" for i, v in BASE))


def _last_commit(path):
    last = sorted(glob.glob(os.path.join(path, "_delta_log", "*.json")))[-1]
    with open(last) as fh:
        return next(json.loads(line)["commitInfo"] for line in fh if '"commitInfo"' in line)


@pytest.mark.parametrize("name,a,b,level,expected",
                         [(n, a, b, lv, x) for n, a, b, levels, x in CASES for lv in levels],
                         ids=[f"{n}-{lv[:3]}" for n, _, _, levels, _ in CASES for lv in levels])
def test_row_level_cell(session, table_path, delta_rows, name, a, b, level, expected):
    s = session
    _table(s, level)
    path = table_path(s, "t")
    assert "checked per row" in s.explain(a) or a.startswith("INSERT INTO t VALUES")
    prepared = s.prepare(a)
    winner = s.execute(b)
    want = model(dict(BASE), b)
    if expected in (None, "before"):
        prepared.commit()
        info = _last_commit(path)
        assert info.get("rowLevel") is True or info.get("isBlindAppend")
        want = model(model(dict(BASE), a), b) if expected == "before" else model(want, a)
    else:
        with pytest.raises(E.ConcurrentModificationException) as err:
            prepared.commit()
        assert type(err.value) is expected
        assert err.value.winning_version == winner.version
        assert err.value.winning_operation
        assert str(winner.version) in str(err.value)
    got = sorted(tuple(r) for r in s.sql("SELECT id, v FROM t").collect())
    assert got == sorted(want.items())
    assert sorted(delta_rows(path, ["id", "v"])) == got


def test_same_row_message_names_the_row(session):
    s = session
    _table(s, WS)
    p = s.prepare("UPDATE t SET v = v + 1 WHERE id = 4")
    s.execute("DELETE FROM t WHERE id = 4")
    with pytest.raises(DD) as err:
        p.commit()
    assert "row 4 of" in str(err.value) and "DELETE" in str(err.value)


def test_upsert_same_key_message_names_the_predicate(session):
    s = session
    _table(s, SER)
    p = s.prepare(UPSERT.format(k=77, v=1))
    s.execute(UPSERT.format(k=77, v=2))
    with pytest.raises(A) as err:
        p.commit()
    assert "id=77" in str(err.value) and "id = 77" in str(err.value)


def test_non_deterministic_predicate_falls_back_to_file_level(session):
    s = session
    _table(s, WS)
    plan = s.explain("UPDATE t SET v = 1 WHERE id = 1 AND rand() < 2")
    assert "checked per file" in plan
    p = s.prepare("UPDATE t SET v = 1 WHERE id = 1 AND rand() < 2")
    s.execute("UPDATE t SET v = 2 WHERE id = 2")  # another row of the same file
    with pytest.raises(E.ConcurrentModificationException):
        p.commit()


@pytest.mark.parametrize("mode,per_row", [("auto", False), ("always", True), ("off", False)])
def test_partitioned_tables_follow_the_mode(session, mode, per_row):
    s = session
    s.execute(f"CREATE TABLE t (id INT, v INT, p INT) PARTITIONED BY (p) "
              f"TBLPROPERTIES ('isolde.rowLevelConcurrency' = '{mode}')")
    s.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, 0, 1)" for i in range(6)))
    a = "UPDATE t SET v = 1 WHERE id = 1"
    assert ("checked per row" in s.explain(a)) is per_row
    detail = s.execute("DESCRIBE DETAIL t").first().asDict()
    assert detail["rowLevelConcurrency"] == ("row" if per_row else "file")
    p = s.prepare(a)
    s.execute("UPDATE t SET v = 2 WHERE id = 2")
    if per_row:
        p.commit()
        assert sorted(tuple(r) for r in s.sql("SELECT id, v FROM t WHERE id < 3").collect()) == \
            [(0, 0), (1, 1), (2, 2)]
    else:
        with pytest.raises(E.ConcurrentModificationException):
            p.commit()


def test_an_invalid_mode_is_refused(session):
    s = session
    with pytest.raises(E.AnalysisError) as err:
        s.execute("CREATE TABLE t (id INT) TBLPROPERTIES ('isolde.rowLevelConcurrency' = 'sometimes')")
    assert "auto, always, off" in str(err.value)
    s.execute("CREATE TABLE t (id INT)")
    props = dict(tuple(r) for r in s.execute("SHOW TBLPROPERTIES t").collect())
    assert props["isolde.rowLevelConcurrency"] == "auto"
    assert props["isolde.rowLevelConcurrency.effective"].startswith("row level")
