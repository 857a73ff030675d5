"""Transfers as multi-statement transactions racing in threads (each its own session) on one
table: BEGIN; UPDATE debit; UPDATE credit; COMMIT. Every transfer either commits as exactly one
version of its own or raises a named conflict at COMMIT (and leaves nothing); the total never
changes in any snapshot a reader takes; the final balances equal the committed transfers
replayed; delta-rs reads the same rows."""

from __future__ import annotations

import random
import threading

import pytest

import isolde
from isolde.errors import ConcurrentModificationException
from isolde.executor.log import DeltaLog

ACCOUNTS, START, TRANSFERS = 8, 100, 6


@pytest.mark.parametrize("isolation, row_level", [("WriteSerializable", "always"), ("Serializable", "always"),
                                                  ("WriteSerializable", "off")])
def test_transfers_in_transactions_keep_the_total(spark, tmp_path, delta_rows, isolation, row_level):
    wh = str(tmp_path / "wh")
    setup = isolde.connect(warehouse=wh, spark=spark)
    setup.execute("CREATE TABLE acc (id INT, bal INT) USING DELTA TBLPROPERTIES ("
                  f"'delta.enableDeletionVectors' = 'true', 'delta.isolationLevel' = '{isolation}', "
                  f"'isolde.rowLevelConcurrency' = '{row_level}')")
    setup.execute("INSERT INTO acc VALUES " + ", ".join(f"({i}, {START})" for i in range(ACCOUNTS)))
    path = f"{wh}/default/acc"
    base = DeltaLog.for_table(path).update().version
    lock = threading.Lock()
    committed, conflicts, errors, totals = {}, [], [], []
    done = threading.Event()

    def writer(n):
        s = isolde.connect(warehouse=wh, spark=spark)
        rng = random.Random(n)
        for _ in range(TRANSFERS):
            a, b = rng.sample(range(ACCOUNTS), 2)
            amount = rng.randint(1, 9)
            try:
                s.execute("BEGIN")
                s.execute(f"UPDATE acc SET bal = bal - {amount} WHERE id = {a}")
                s.execute(f"UPDATE acc SET bal = bal + {amount} WHERE id = {b}")
                result = s.execute("COMMIT")
            except ConcurrentModificationException as e:
                with lock:
                    conflicts.append(type(e).__name__)
                assert s.active_transaction is None
                continue
            except BaseException as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(repr(e))
                return
            with lock:
                if result.version in committed:
                    errors.append(f"two transfers report version {result.version}")
                committed[result.version] = (a, b, amount)

    def reader():
        s = isolde.connect(warehouse=wh, spark=spark)
        while not done.is_set():
            totals.append(s.execute("SELECT sum(bal) FROM acc").rows[0][0])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    watcher = threading.Thread(target=reader)
    for t in threads + [watcher]:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    assert not errors, errors
    assert committed, "no transfer committed"
    log = DeltaLog.for_table(path)
    latest = log.update().version
    assert sorted(committed) == list(range(base + 1, latest + 1))  # one version per committed transfer
    model = {i: START for i in range(ACCOUNTS)}
    for version in sorted(committed):
        a, b, amount = committed[version]
        model[a] -= amount
        model[b] += amount
        operation = log.read_commit(version)[0].operation
        assert operation == "MULTI-STATEMENT TRANSACTION"
    rows = [tuple(r) for r in setup.execute("SELECT id, bal FROM acc ORDER BY id").rows]
    assert rows == sorted(model.items())
    assert delta_rows(path) == rows
    assert totals and set(totals) == {ACCOUNTS * START}
    assert all(c in ("ConcurrentDeleteDeleteException", "ConcurrentDeleteReadException",
                     "ConcurrentAppendException") for c in conflicts), conflicts
