"""Row-level stress: threads increment counters and upsert keys on one unpartitioned
deletion-vector table (one file of counters). No lost increment, no duplicate key, every
statement committed or raised a named conflict, and the table equals the serial replay of the
committed statements in log order. ISOLDE_STRESS_SECONDS lengthens it (default 20)."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from isolde.errors import CONFLICT_EXCEPTIONS, ConcurrentModificationException

pytestmark = pytest.mark.slow
KEYS = 12


@pytest.mark.parametrize("level", ["WriteSerializable", "Serializable"])
def test_counters_and_upserts_equal_the_serial_replay(session, level, delta_rows, table_path):
    s = session
    seconds = float(os.environ.get("ISOLDE_STRESS_SECONDS", "20")) / 2
    s.execute(f"CREATE TABLE c (id INT, n INT) TBLPROPERTIES ('delta.isolationLevel' = '{level}')")
    s.execute("INSERT INTO c VALUES " + ", ".join(f"({i}, 0)" for i in range(KEYS)))
    base = s.execute("DESCRIBE HISTORY c").first().version
    committed: dict[int, tuple] = {}
    counts = {"committed": 0, "conflict": 0}
    errors: list = []
    lock = threading.Lock()
    deadline = time.time() + seconds

    def worker(n: int):
        rng = random.Random(n)
        while time.time() < deadline:
            if rng.random() < 0.7:
                k = rng.randrange(KEYS)
                op, sql = ("inc", k), f"UPDATE c SET n = n + 1 WHERE id = {k}"
            else:
                k = rng.randrange(KEYS, KEYS + 6)
                op, sql = ("upsert", k), (f"MERGE INTO c USING (SELECT {k} AS id) s ON c.id = s.id "
                                          "WHEN MATCHED THEN UPDATE SET n = c.n + 1 "
                                          "WHEN NOT MATCHED THEN INSERT (id, n) VALUES (s.id, 1)")
            try:
                r = s.execute(sql)
            except ConcurrentModificationException as e:
                with lock:
                    assert isinstance(e, CONFLICT_EXCEPTIONS)
                    counts["conflict"] += 1
                continue
            except BaseException as e:  # anything else fails the test
                with lock:
                    errors.append((sql, repr(e)))
                return
            with lock:
                assert r.version not in committed
                committed[r.version] = op
                counts["committed"] += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
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
        model[k] = model.get(k, 0) + 1  # an increment, or an upsert's insert (1) / increment
    got = sorted(tuple(r) for r in s.sql("SELECT id, n FROM c").collect())
    assert got == sorted(model.items())  # no lost increment, no duplicate key
    assert sorted(delta_rows(table_path(s, "c"), ["id", "n"])) == got
    assert counts["committed"] > 0
    print(f"\n{level}: {counts}")
