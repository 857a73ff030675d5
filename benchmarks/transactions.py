"""Multi-statement transactions on one table: what committing several statements as ONE Delta
version costs and buys, against the same statements committed one by one (all Delta-Spark and
delta-rs offer), in one run.

    .venv/bin/python benchmarks/transactions.py            # 20 rounds, 4 writers x 30 s per configuration
    .venv/bin/python benchmarks/transactions.py --quick    # a smoke run (a few rounds, 5 s races)

Table: ``acct (id BIGINT, bal BIGINT)``, 1,000 accounts of balance 1,000, deletion vectors on,
on a local warehouse (``isolde.connect(warehouse=tempdir)``). Measured:

1. Ten single-row UPDATEs (``SET bal = bal + 1``, ten different ids) as one transaction
   (``with s.transaction() as tx``) against the same ten as separate statements, rounds
   interleaved (which goes first alternates; fresh ids each): median round time, the ratio,
   the Delta versions each round wrote (DeltaLog before / after), and where the time goes:
   the median of each phase (``result.phases``, ms) of the statements in a transaction against
   the separate ones ("rest": a statement's wall time its phases do not cover), plus the
   transaction's COMMIT.
2. A transfer (debit one id, credit another): two UPDATEs as a transaction (the library's
   ``s.transaction()`` and SQL's ``BEGIN ATOMIC ... END``) against two separate statements:
   latency p50 / p99 of --rounds rounds (after --warmup).
3. --writers processes (multiprocessing spawn; each its own isolde session and Spark JVM,
   local[1]) running transfers between random accounts for --seconds on a fresh table per
   configuration: transactions or separate statements x ``isolde.rowLevelConcurrency`` =
   'always' (row level; 'auto', the default, is row level on this table too) or 'off' (file
   level, as open-source Delta). A transaction that loses a race (a ConcurrentModificationException
   subclass) is rolled back and the writer draws the next transfer. Separately, a lost debit
   abandons the transfer; a lost credit (the debit already committed) is retried until it
   commits, or the money would vanish: those retries are windows in which readers see the
   table with the debit only. Printed: committed transfers/s,
   the conflict rate (lost commits / commit attempts) and its exception classes, latency p50 /
   p99 of committed transfers; then the invariants: sum(bal) unchanged, and the new versions
   equal to the committed transactions (separately: two per transfer).

Warm-up rounds (and each writer's first transfers) are not timed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ACCOUNTS, BALANCE = 1000, 1000
PHASES = ("plan", "find", "dv", "write", "stats", "commit")  # result.phases; "rest": the wall time they miss
RACES = (("transaction", "always"), ("transaction", "off"), ("separate", "always"), ("separate", "off"))


def pct(values: list, p: float) -> float:
    """The p-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def create_accounts(s, name: str, row_level: str = "auto") -> str:
    """CREATE ``name`` with deletion vectors, 1,000 accounts; returns its folder."""
    s.execute(f"CREATE TABLE {name} (id BIGINT, bal BIGINT) "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    s.execute(f"INSERT INTO {name} SELECT id, {BALANCE} AS bal FROM range({ACCOUNTS})")
    s.execute(f"ALTER TABLE {name} SET TBLPROPERTIES ('isolde.rowLevelConcurrency' = '{row_level}')")
    location = s.execute(f"DESCRIBE DETAIL {name}").first().location
    return location[5:] if location.startswith("file:") else location


def version(path: str) -> int:
    from isolde.executor.log import DeltaLog

    return DeltaLog.for_table(path).update().version


def transfer(s, table: str, a: int, b: int, amount: int, how: str):
    """One transfer of ``amount`` from ``a`` to ``b``: ``how`` is transaction, atomic or separate."""
    debit = f"UPDATE {table} SET bal = bal - {amount} WHERE id = {a}"
    credit = f"UPDATE {table} SET bal = bal + {amount} WHERE id = {b}"
    if how == "transaction":
        with s.transaction() as tx:
            tx.execute(debit)
            tx.execute(credit)
    elif how == "atomic":
        s.execute(f"BEGIN ATOMIC {debit}; {credit}; END")
    else:
        s.execute(debit)
        s.execute(credit)


# --------------------------------------------------------------------------- parts 1 and 2

def timed(run, statement: str) -> tuple:
    """``run(statement)``'s result and its wall time in ms."""
    t = time.perf_counter()
    result = run(statement)
    return result, (time.perf_counter() - t) * 1000


def ten_updates(s, path: str, args) -> None:
    rng = random.Random(args.seed)
    times = {"transaction": [], "separate": []}
    versions = {"transaction": [], "separate": []}
    phases = {"transaction": {}, "separate": {}}
    commits = []  # the transaction's COMMIT, seconds
    for r in range(args.warmup + args.rounds):
        order = ("transaction", "separate") if r % 2 == 0 else ("separate", "transaction")
        for how in order:
            ids = rng.sample(range(ACCOUNTS), 10)
            statements = [f"UPDATE acct SET bal = bal + 1 WHERE id = {i}" for i in ids]
            v0, t = version(path), time.perf_counter()
            if how == "transaction":
                with s.transaction() as tx:
                    results = [timed(tx.execute, q) for q in statements]
                    c = time.perf_counter()
                    tx.commit()
                    commit_s = time.perf_counter() - c
            else:
                results = [timed(s.execute, q) for q in statements]
            dt = time.perf_counter() - t
            if r < args.warmup:
                continue
            times[how].append(dt)
            versions[how].append(version(path) - v0)
            for res, wall_ms in results:
                for k, ms in res.phases.items():
                    phases[how].setdefault(k, []).append(ms)
                phases[how].setdefault("rest", []).append(wall_ms - sum(res.phases.values()))
            if how == "transaction":
                commits.append(commit_s)

    in_txn, sep = statistics.median(times["transaction"]), statistics.median(times["separate"])
    print(f"1. ten single-row UPDATEs (median of {args.rounds} rounds)")
    for how, label in (("transaction", "one transaction"), ("separate", "10 statements")):
        print(f"   {label:<16} {statistics.median(times[how]):6.3f} s  p99 {pct(times[how], 99):6.3f} s  "
              f"versions per round {sorted(set(versions[how]))}")
    print(f"   ratio transaction / separate: {in_txn / sep:.2f}x")
    print(f"   median ms per statement, by phase   {'in txn':>8} {'separate':>9}")
    for k in PHASES + ("rest",):
        a, b = phases["transaction"].get(k), phases["separate"].get(k)
        if a or b:
            print(f"     {k:<34}{statistics.median(a) if a else 0:>8.1f} {statistics.median(b) if b else 0:>9.1f}")
    per_tx = sum(statistics.median(v) for v in phases["transaction"].values())
    per_sep = sum(statistics.median(v) for v in phases["separate"].values())
    print(f"     {'sum of the medians':<34}{per_tx:>8.1f} {per_sep:>9.1f}")
    print(f"     COMMIT of the transaction (once)  {statistics.median(commits) * 1000:>8.1f} ms median, "
          f"p99 {pct(commits, 99) * 1000:.1f} ms; the 10 separate commit phases sum to "
          f"{10 * statistics.median(phases['separate'].get('commit', [0])):.1f} ms")


def transfers(s, args) -> None:
    rng = random.Random(args.seed + 1)
    kinds = ("transaction", "atomic", "separate")
    times = {k: [] for k in kinds}
    for r in range(args.warmup + args.rounds):
        order = list(kinds)
        rng.shuffle(order)
        for how in order:
            a, b = rng.sample(range(ACCOUNTS), 2)
            t = time.perf_counter()
            transfer(s, "acct", a, b, rng.randint(1, 100), how)
            if r >= args.warmup:
                times[how].append(time.perf_counter() - t)
    print(f"2. a transfer: two UPDATEs, latency over {args.rounds} rounds")
    labels = {"transaction": "s.transaction()", "atomic": "BEGIN ATOMIC ... END", "separate": "2 statements"}
    for how in kinds:
        p50, p99 = pct(times[how], 50) * 1000, pct(times[how], 99) * 1000
        print(f"   {labels[how]:<21} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms")
    sep = pct(times["separate"], 50)
    print(f"   ratio p50 s.transaction() / separate: {pct(times['transaction'], 50) / sep:.2f}x; "
          f"BEGIN ATOMIC / separate: {pct(times['atomic'], 50) / sep:.2f}x")


# --------------------------------------------------------------------------- part 3: the writers

def writer(index: int, warehouse: str, seconds: float, barrier, results) -> None:
    """A writer process: warms up, then for each of RACES waits at the barrier, runs transfers on
    that race's table for ``seconds`` and sends its counts."""
    sys.path.insert(0, ROOT)
    import isolde
    from isolde.errors import ConcurrentModificationException as Conflict

    s = isolde.connect(warehouse=warehouse, master="local[1]")
    rng = random.Random(1000 + index)
    for how in ("transaction", "separate"):  # warm-up, on a table of its own
        for _ in range(2):
            try:
                transfer(s, "warm", *rng.sample(range(ACCOUNTS), 2), 1, how)
            except Conflict:
                pass
    barrier.wait()  # everyone is warm
    for how, mode in RACES:
        table = f"race_{how}_{mode}"
        out = {"index": index, "transfers": 0, "attempts": 0, "conflicts": {}, "credit_retries": 0,
               "latencies": [], "errors": []}

        def lost(e):
            out["conflicts"][type(e).__name__] = out["conflicts"].get(type(e).__name__, 0) + 1

        barrier.wait()  # the parent read the table's version
        stop = time.time() + seconds
        while time.time() < stop:
            a, b = rng.sample(range(ACCOUNTS), 2)
            amount = rng.randint(1, 100)
            t = time.perf_counter()
            try:
                if how == "transaction":
                    out["attempts"] += 1
                    transfer(s, table, a, b, amount, "transaction")
                else:
                    out["attempts"] += 1
                    s.execute(f"UPDATE {table} SET bal = bal - {amount} WHERE id = {a}")
                    while True:  # the debit is committed: the credit must follow
                        out["attempts"] += 1
                        try:
                            s.execute(f"UPDATE {table} SET bal = bal + {amount} WHERE id = {b}")
                            break
                        except Conflict as e:
                            lost(e)
                            out["credit_retries"] += 1
            except Conflict as e:
                lost(e)
                continue
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                out["errors"].append(f"{type(e).__name__}: {str(e)[:300]}")
                continue
            out["transfers"] += 1
            out["latencies"].append(time.perf_counter() - t)
        out["ended"] = time.time()
        results.put(out)
        barrier.wait()  # the parent checks the invariants
    s.close()


def races(s, warehouse: str, args) -> None:
    paths = {(how, mode): create_accounts(s, f"race_{how}_{mode}", mode) for how, mode in RACES}
    create_accounts(s, "warm")
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(args.writers + 1), ctx.Queue()
    os.environ.setdefault("ISOLDE_DRIVER_MEMORY", "1g")  # inherited by the writers
    procs = [ctx.Process(target=writer, args=(w, warehouse, args.seconds, barrier, results), daemon=True)
             for w in range(args.writers)]
    t = time.perf_counter()
    for p in procs:
        p.start()
    timeout = args.seconds + 600
    try:
        barrier.wait(timeout)
        print(f"3. {args.writers} writer processes (started and warm in {time.perf_counter() - t:.0f} s), "
              f"transfers between random accounts for {args.seconds:g} s per configuration")
        tps = {}
        for how, mode in RACES:
            path, table = paths[(how, mode)], f"race_{how}_{mode}"
            v0 = version(path)
            start = time.time()
            barrier.wait(timeout)
            outs = [results.get(timeout=timeout) for _ in procs]
            barrier.wait(timeout)
            total, rows = s.execute(f"SELECT sum(bal), count(*) FROM {table}").rows[0]
            new_versions = version(path) - v0
            done = sum(o["transfers"] for o in outs)
            attempts = sum(o["attempts"] for o in outs)
            conflicts: dict = {}
            for o in outs:
                for k, n in o["conflicts"].items():
                    conflicts[k] = conflicts.get(k, 0) + n
            lat = [x for o in outs for x in o["latencies"]]
            errors = [e for o in outs for e in o["errors"]]
            elapsed = max([o["ended"] for o in outs] + [start + args.seconds]) - start
            tps[(how, mode)] = done / elapsed
            want_versions = done if how == "transaction" else 2 * done
            level = "row level " if mode == "always" else "file level"
            print(f"   {how:<11} {level} ({mode:>6}): {done:4d} transfers ({done / elapsed:5.2f}/s), "
                  f"conflict rate {sum(conflicts.values()) / max(attempts, 1):4.0%} of {attempts} commits"
                  + (f" {dict(sorted(conflicts.items()))}" if conflicts else "")
                  + (f", {sum(o['credit_retries'] for o in outs)} credits retried" if how == "separate" else "")
                  + (f", latency p50 {pct(lat, 50):.2f} s p99 {pct(lat, 99):.2f} s" if lat else ""))
            print(f"   {'':<11} sum(bal) {total:,} ({'unchanged' if total == ACCOUNTS * BALANCE else 'CHANGED'}), "
                  f"{rows} rows; {new_versions} new versions for {want_versions} expected "
                  f"({'OK' if new_versions == want_versions else 'MISMATCH'})"
                  + (f"; {len(errors)} errors, first: {errors[0]}" if errors else ""))
        for mode in ("always", "off"):
            if tps[("separate", mode)]:
                print(f"   ratio transfers/s transaction / separate, {mode}: "
                      f"{tps[('transaction', mode)] / tps[('separate', mode)]:.2f}x")
        if tps[("transaction", "off")]:
            print(f"   ratio transfers/s transaction row level / file level: "
                  f"{tps[('transaction', 'always')] / tps[('transaction', 'off')]:.2f}x")
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0, help="each race's length (part 3)")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--parts", default="1,2,3", help="comma-separated subset of 1,2,3")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 3 rounds, 1 warm-up, 5 s races")
    ap.add_argument("--dir", help="scratch folder (default: a temp dir, removed after)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup, args.seconds = 3, 1, 5.0
    parts = {p.strip() for p in args.parts.split(",")}

    sys.path.insert(0, ROOT)
    import isolde

    scratch = args.dir or tempfile.mkdtemp(prefix="isolde-bench-txn-")
    warehouse = os.path.join(scratch, "warehouse")
    try:
        s = isolde.connect(warehouse=warehouse)
        path = create_accounts(s, "acct")
        print(f"table: {ACCOUNTS:,} accounts (id BIGINT, bal BIGINT), deletion vectors on, local disk; "
              f"{args.rounds} timed rounds after {args.warmup} warm-up; {os.cpu_count()} CPUs; "
              f"Spark {s.spark.version}")
        if "1" in parts:
            ten_updates(s, path, args)
        if "2" in parts:
            transfers(s, args)
        if "3" in parts:
            races(s, warehouse, args)
        s.close()
        return 0
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
