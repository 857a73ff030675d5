"""Bad UPDATE / DELETE / MERGE input: a named error that says which table or column and
suggests a near name, no position that points into isolde's rewritten SQL, and the table
left exactly as it was. MERGE is analysed even when no file has to be read (an empty table),
as Delta does."""

from __future__ import annotations

import os
import re

import pytest

from isolde import errors as E

pytestmark = pytest.mark.spark

UNKNOWN_SOURCE = (E.TableNotFoundError, r"Table or view `srcc` cannot be found\. Did you mean `src`\?")
CASES = [
    ("MERGE INTO t USING srcc s ON s.id = t.id WHEN MATCHED THEN DELETE", *UNKNOWN_SOURCE),
    ("MERGE INTO t USING (SELECT * FROM srcc) s ON s.id = t.id WHEN MATCHED THEN DELETE", *UNKNOWN_SOURCE),
    ("DELETE FROM t WHERE id IN (SELECT id FROM srcc)", *UNKNOWN_SOURCE),
    ("UPDATE t SET name = 'x' WHERE EXISTS (SELECT 1 FROM srcc s WHERE s.id = t.id)", *UNKNOWN_SOURCE),
    ("MERGE INTO t USING updatez u ON u.id = t.id WHEN MATCHED THEN DELETE",
     E.TableNotFoundError, r"`updatez` cannot be found\. Did you mean `updates`\?"),  # the user's temp view
    ("MERGE INTO t USING src ON id = id WHEN MATCHED THEN UPDATE SET name = 'x'",
     E.AnalysisError, r"Reference `id` is ambiguous, could be: \[`src`\.`id`, `t`\.`id`\]\.$"),
    ("MERGE INTO t USING src s ON s.id = t.id WHEN MATCHED AND s.nme = 'a' THEN DELETE",
     E.ColumnNotFoundError, r"`s\.nme` cannot be resolved\. Did you mean `name`\?"),
    ("MERGE INTO t USING src s ON s.id = t.id WHEN MATCHED THEN UPDATE SET name = s.nmae",
     E.ColumnNotFoundError, r"`s\.nmae` cannot be resolved\. Did you mean `name`\?"),
    ("UPDATE t SET nme = 'x'", E.ColumnNotFoundError, r"`nme` cannot be resolved in table `t`\. Did you mean `name`\?"),
    ("DELETE FROM t WHERE nmae = 'a'", E.ColumnNotFoundError, r"`nmae` cannot be resolved\. Did you mean `name`\?"),
]


def _state(path):
    """Every file under the table (log and data): what a failed statement must not change."""
    return sorted(os.path.relpath(os.path.join(d, n), path) for d, _, names in os.walk(path) for n in names)


@pytest.mark.parametrize("rows", [0, 3], ids=["empty-table", "table-with-rows"])
def test_bad_dml_is_named_and_changes_nothing(session, table_path, rows):
    s = session
    s.execute("CREATE TABLE t (id INT, name STRING)")
    s.execute("CREATE TABLE src (id INT, name STRING)")
    s.execute("INSERT INTO src VALUES (1, 'one'), (9, 'nine')")
    if rows:
        s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    s.spark.createDataFrame([(1, "u")], "id INT, name STRING").createOrReplaceTempView("updates")
    path = table_path(s, "t")
    before = _state(path)
    table_before = sorted(s.execute("SELECT * FROM t").rows)
    try:
        for sql, error, message in CASES:
            with pytest.raises(error) as info:
                s.execute(sql)
            assert type(info.value) is error, (sql, type(info.value))
            text = str(info.value)
            assert re.search(message, text.splitlines()[0]), (sql, text)
            assert " pos " not in text, (sql, text)  # no position in the SQL isolde rewrote
            assert _state(path) == before, sql
        assert sorted(s.execute("SELECT * FROM t").rows) == table_before
    finally:
        s.spark.catalog.dropTempView("updates")
