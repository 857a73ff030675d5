"""README's short tour runs as written, and runs again (issue 55: a second run failed with
TableAlreadyExistsError, and its UPDATE changed no row, so its phases were not an UPDATE's)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"
CONNECT = 'isolde.connect(warehouse="./warehouse")'


def _tour() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## A short tour"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_tour_runs_twice_and_its_update_changes_a_row(spark, tmp_path):
    tour = _tour()
    assert CONNECT in tour  # the line this test points at a temporary warehouse
    code = tour.replace(CONNECT, "isolde.connect(warehouse=WAREHOUSE, spark=SPARK)")
    for _ in range(2):
        scope = {"WAREHOUSE": str(tmp_path / "warehouse"), "SPARK": spark}
        with contextlib.redirect_stdout(io.StringIO()) as out:
            exec(compile(code, str(README), "exec"), scope)
        s = scope["s"]
        update = s.execute("DESCRIBE HISTORY events").first()
        assert update.operation == "UPDATE" and update.operationMetrics["numUpdatedRows"] == "1"
        assert [tuple(r) for r in s.execute("SELECT id, kind FROM events").collect()] == [(1, "view")]
        assert "Syntax error at line 1, column 14" in out.getvalue()
        s.close()
