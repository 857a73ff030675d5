"""OPTIMIZE (bin-packing, ZORDER BY, clustering) in a loop while writers run DML (issue 20): on
a deletion-vector table the rewrite never fails, no row is lost or resurrected, and the table (isolde and delta-rs)
equals the serial replay of the committed DML in log order. ISOLDE_STRESS_SECONDS lengthens
it (default 20, split over the two tables)."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from isolde.errors import CONFLICT_EXCEPTIONS, ConcurrentModificationException

pytestmark = pytest.mark.slow
KEYS = 24


LAYOUTS = {  # (partitioned, extra DDL, table properties, the maintenance statement)
    "bin-pack-row-level": (False, "", "", "OPTIMIZE c"),
    "bin-pack-file-level": (True, "", "", "OPTIMIZE c"),
    # clustering rewrites carry concurrent deletion vectors through row ids (row tracking)
    "zorder": (False, "", ", 'delta.enableRowTracking' = 'true'", "OPTIMIZE c ZORDER BY (n, id)"),
    "clustering": (False, " CLUSTER BY (id, n)", "", "OPTIMIZE c"),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_optimize_in_a_loop_beside_writers(session, layout, delta_rows, table_path):
    s = session
    partitioned, ddl, props, optimize = LAYOUTS[layout]
    seconds = float(os.environ.get("ISOLDE_STRESS_SECONDS", "20")) / 2
    s.execute("CREATE TABLE c (id INT, n INT, d STRING)" + (" PARTITIONED BY (d)" if partitioned else "") + ddl
              + f" TBLPROPERTIES ('delta.enableDeletionVectors' = 'true'{props})")
    for start in range(0, KEYS, 4):  # small files for the compaction to find
        s.execute("INSERT INTO c VALUES " + ", ".join(f"({i}, 0, 'p{i % 2}')" for i in range(start, start + 4)))
    base = s.execute("DESCRIBE HISTORY c").first().version
    committed: dict[int, tuple] = {}
    counts = {"committed": 0, "conflict": 0, "optimized": 0, "optimize_noop": 0}
    errors: list = []
    lock = threading.Lock()
    deadline = time.time() + seconds

    def writer(n: int):
        rng = random.Random(n)
        while time.time() < deadline:
            k = rng.randrange(KEYS + 8)
            roll = rng.random()
            if roll < 0.5:
                op, sql = ("inc", k), f"UPDATE c SET n = n + 1 WHERE id = {k}"
            elif roll < 0.65:
                op, sql = ("del", k), f"DELETE FROM c WHERE id = {k}"
            else:
                op, sql = ("upsert", k), (f"MERGE INTO c USING (SELECT {k} AS id) s ON c.id = s.id "
                                          "WHEN MATCHED THEN UPDATE SET n = c.n + 1 "
                                          f"WHEN NOT MATCHED THEN INSERT (id, n, d) VALUES (s.id, 1, 'p{k % 2}')")
            try:
                r = s.execute(sql)
            except ConcurrentModificationException as e:
                with lock:
                    assert isinstance(e, CONFLICT_EXCEPTIONS)
                    counts["conflict"] += 1
                continue
            except BaseException as e:
                with lock:
                    errors.append((sql, repr(e)))
                return
            changed = {"inc": "numUpdatedRows", "del": "numDeletedRows"}.get(op[0])
            if changed is not None and int(r.metrics.get(changed, 0)) == 0:
                continue  # found no row: committed nothing
            with lock:
                if r.version in committed:
                    errors.append(("two statements reported one version", r.version))
                committed[r.version] = op
                counts["committed"] += 1

    def optimizer():
        while time.time() < deadline:
            try:
                r = s.execute(optimize)
            except BaseException as e:  # on a deletion-vector table the compaction never fails
                with lock:
                    errors.append(("OPTIMIZE", repr(e)))
                return
            with lock:
                if r.metrics.get("numRemovedFiles"):  # else nothing to do: nothing committed
                    committed[r.version] = ("optimize", None)
                    counts["optimized"] += 1
                else:
                    counts["optimize_noop"] += 1
            time.sleep(0.2)  # let the writers make new small files and vectors

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)] + [threading.Thread(target=optimizer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    latest = s.execute("DESCRIBE HISTORY c").first().version
    assert sorted(committed) == list(range(base + 1, latest + 1))  # every version is one of ours
    model = {i: 0 for i in range(KEYS)}
    for version in sorted(committed):
        kind, k = committed[version]
        if kind == "inc" and k in model:
            model[k] += 1
        elif kind == "del":
            model.pop(k, None)
        elif kind == "upsert":
            model[k] = model.get(k, 0) + 1
    got = sorted((i, n) for i, n, _ in (tuple(r) for r in s.sql("SELECT id, n, d FROM c").collect()))
    assert got == sorted(model.items())  # nothing lost, nothing resurrected, no duplicate key
    assert sorted((i, n) for i, n in delta_rows(table_path(s, "c"), ["id", "n"])) == got
    assert counts["optimized"] > 0 and counts["committed"] > 0
    print(f"\n{layout}: {counts}")
