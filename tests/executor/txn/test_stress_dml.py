"""Threaded stress: 8 threads of UPDATE / DELETE / MERGE / INSERT on a partitioned table under
Serializable. Every statement either commits or raises a named conflict, and the final table
equals a serial replay (a Python model) of the committed statements in log order.

Issues statements for ~15 s by default; ISOLDE_STRESS_SECONDS lengthens it.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from tests.helpers.dml_workload import SCHEMA, Stmt, initial  # noqa: E402
from tests.helpers.dml import Runner, make_table  # noqa: E402

from isolde.errors import CONFLICT_EXCEPTIONS, ConcurrentModificationException  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_stress_serializable_equals_serial_replay(tmp_path):
    seconds = float(os.environ.get("ISOLDE_STRESS_SECONDS", "15"))
    r = Runner(tmp_path / "wh")
    rows = [{"id": i, "date": d, "v": v} for (i, d), v in initial().items()]
    make_table(r.path("t"), SCHEMA, [rows[: len(rows) // 2], rows[len(rows) // 2:]], partition_by=["date"],
               properties={"delta.isolationLevel": "Serializable"})
    base_version = r.log("t").update().version
    committed: dict[int, Stmt] = {}
    outcomes = {"committed": 0, "noop": 0, "conflict": 0}
    conflict_kinds: dict[str, int] = {}
    errors: list = []
    lock = threading.Lock()
    deadline = time.time() + seconds

    def worker(n: int):
        rng = random.Random(1000 + n)
        seq = 0
        while time.time() < deadline:
            seq += 1
            st = Stmt(rng, n, seq)
            try:
                res = r.run(st.sql())
            except ConcurrentModificationException as e:
                with lock:
                    assert isinstance(e, CONFLICT_EXCEPTIONS), type(e)
                    outcomes["conflict"] += 1
                    conflict_kinds[type(e).__name__] = conflict_kinds.get(type(e).__name__, 0) + 1
                continue
            except BaseException as e:  # anything else fails the test
                with lock:
                    errors.append((st.sql(), repr(e)))
                return
            with lock:
                m = res.metrics or {}
                if m.get("numAddedFiles", 1) == 0 and m.get("numRemovedFiles", 0) == 0:
                    outcomes["noop"] += 1  # changed nothing: a read at its snapshot, not committed
                else:
                    assert res.version not in committed
                    committed[res.version] = st
                    outcomes["committed"] += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    latest = r.log("t").update().version
    # every version after the base is one of ours, no gaps
    assert sorted(committed) == list(range(base_version + 1, latest + 1))
    model = initial()
    for version in sorted(committed):
        committed[version].apply(model)
    got = {(i, d): v for i, d, v in r.rows("t", ["id", "date", "v"])}
    assert got == model
    print(f"\nstress: {outcomes}, conflicts by kind {conflict_kinds}, {latest - base_version} commits")
    assert outcomes["committed"] > 0
