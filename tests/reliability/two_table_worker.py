"""One writer process of the two-table bank (test_two_table_bank.py): its own Spark JVM on the
shared warehouse, moving money between accounts of ``acc`` and recording each transfer in
``audit``, both coordinated tables, one multi-statement transaction per transfer, until the
stop file appears.

A transfer ``<writer>-<n>`` debits ``src``, credits ``dst`` and inserts its audit row, as
``BEGIN; ...; COMMIT``, ``BEGIN ATOMIC ... END`` or ``with s.transaction()`` (drawn from the
seed). It reports, one line appended, flushed and fsynced per event: ``ready``, ``begin <id>
<src> <dst> <amount>`` (before BEGIN), ``attempt <id>`` (before COMMIT), then ``committed <id>
<form> <ms since the attempt>`` or ``conflict <id> <exception class>``; anything else is
``error <id> <repr>`` and exit 1.

Once the arm file exists (checked before each transfer), the commit coordinator's AFTER_DECIDE
hook is set: the next decision writes ``decided <id> <seq>`` and the process sleeps, between
the coordinator's decision and the tables' publication, until the test SIGKILLs it.

    python two_table_worker.py WAREHOUSE WRITER SEED ACCOUNTS OUT_FILE STOP_FILE [ARM_FILE]
"""

from __future__ import annotations

import os
import random
import sys
import time


class Report:
    def __init__(self, path: str):
        self.fh = open(path, "a")

    def __call__(self, line: str) -> None:
        self.fh.write(line + "\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())


def transfer(session, form: str, src: int, dst: int, amount: int, tid: str, report) -> None:
    """One transfer as a transaction of ``form``; reports ``attempt`` right before its commit."""
    debit = f"UPDATE acc SET bal = bal - {amount} WHERE id = {src}"
    credit = f"UPDATE acc SET bal = bal + {amount} WHERE id = {dst}"
    record = f"INSERT INTO audit VALUES ('{tid}', {src}, {dst}, {amount})"
    if form == "atomic":  # one statement: BEGIN ATOMIC runs and commits it
        report(f"attempt {tid}")
        session.execute(f"BEGIN ATOMIC {debit}; {credit}; {record}; END")
    elif form == "block":  # the library's transaction: commits when the block ends
        with session.transaction() as tx:
            tx.execute(debit)
            tx.execute(credit)
            tx.execute(record)
            report(f"attempt {tid}")
    else:
        session.execute("BEGIN")
        session.execute(debit)
        session.execute(credit)
        session.execute(record)
        report(f"attempt {tid}")
        session.execute("COMMIT")


def main(warehouse: str, writer: str, seed: int, accounts: int, out_path: str, stop_path: str,
         arm_path: str | None = None) -> int:
    import isolde
    from isolde.errors import ConcurrentModificationException
    from isolde.executor.log import coordinator

    report = Report(out_path)
    session = isolde.connect(warehouse=warehouse, master="local[1]")
    session.execute("SELECT count(*) FROM acc")  # Spark is up before the race starts
    report("ready")
    rng = random.Random(seed)
    current = {"tid": None}

    def hang(seq: int) -> None:
        report(f"decided {current['tid']} {seq}")
        print(f"decided {current['tid']} {seq}", flush=True)
        time.sleep(600)  # the test SIGKILLs the process here

    n = 0
    while not os.path.exists(stop_path):
        if arm_path and coordinator.AFTER_DECIDE is None and os.path.exists(arm_path):
            coordinator.AFTER_DECIDE = hang
        n += 1
        tid = current["tid"] = f"{writer}-{n}"
        src, dst = rng.sample(range(accounts), 2)
        amount = rng.randint(1, 20)
        form = rng.choice(("begin", "atomic", "block"))
        report(f"begin {tid} {src} {dst} {amount}")
        attempted = {}

        def attempt(line: str) -> None:
            report(line)
            attempted["at"] = time.perf_counter()

        try:
            transfer(session, form, src, dst, amount, tid, attempt)
        except ConcurrentModificationException as e:
            report(f"conflict {tid} {type(e).__name__}")
            if session.active_transaction is not None:
                report(f"error {tid} the transaction is still open after {type(e).__name__}")
                return 1
            continue
        except Exception as e:  # the parent fails the run
            report(f"error {tid} {repr(e).replace(chr(10), ' ')[:2000]}")
            return 1
        report(f"committed {tid} {form} {(time.perf_counter() - attempted['at']) * 1000:.0f}")
    session.close()
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(args[0], args[1], int(args[2]), int(args[3]), args[4], args[5], args[6] if len(args) > 6 else None))
