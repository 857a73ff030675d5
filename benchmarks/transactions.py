"""Multi-statement transactions: what committing several statements as ONE Delta version (parts
1-3, one table) or as ONE commit-coordinator entry (part 4, two tables) costs and buys, against
the same statements committed one by one (all Delta-Spark and delta-rs offer), in one run.

    .venv/bin/python benchmarks/transactions.py            # 20 rounds, 4 writers x 30 s per configuration
    .venv/bin/python benchmarks/transactions.py --quick    # a smoke run (a few rounds, 5 s races)
    .venv/bin/python benchmarks/transactions.py --parts 4  # part 4 only (or 4a, 4b, 4c)

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
4. Two tables through the commit coordinator (executor/log/coordinator.py): accounts tables as
   above and ``audit (transfer_id STRING, src BIGINT, dst BIGINT, amount BIGINT)``, empty at the
   start. Coordinated tables opt in with ``'isolde.coordinatedCommits' = 'true'`` (accounts by
   the ALTER setting their concurrency level, audit in CREATE TABLE's TBLPROPERTIES); every
   commit to them, one statement's or a transaction's, is an entry of the warehouse's
   coordinator log (``<warehouse>/_isolde_coordinator/log/<seq>.json``) written by put-if-absent,
   then published to each table's ``_delta_log``.

   a. A two-table transfer: debit and credit UPDATEs on the accounts table, one INSERT of the
      transfer's audit row, run four ways in each round (in a random order; fresh ids each):
      one transaction (``s.transaction()`` and ``BEGIN ATOMIC ... END``) and the three statements
      separately, all on a coordinated pair (``acct_coord``, ``audit_coord``), and the three
      statements separately on a pair that is not coordinated (``acct_plain``, ``audit_plain``:
      what plain Delta allows; no transaction can span them). Latency p50 / p99 of --rounds
      rounds (after --warmup), the ratios, and per round the new versions of each table (commit
      files in its ``_delta_log`` before / after, listed directly so that nothing untimed
      publishes or caches for the next transfer: a transaction writes acct +1 and audit +1,
      separately acct +2 and audit +1) and the new coordinator entries (files in the coordinator
      log: a transaction 1, three coordinated statements 3, the pair not coordinated 0); then
      sum(bal) unchanged and an audit row per transfer, on each pair.
   b. The coordinator's per-commit cost: a one-row INSERT into an audit-shaped table, coordinated
      (``ins_coord``) or not (``ins_plain``), 5 x --rounds rounds (the statement is short; 100 by
      default, so p99 is not the maximum) after --warmup, interleaved (which goes first
      alternates): latency p50 / p99, the ratio, and the median of the statement's commit phase
      (``result.phases["commit"]``: the decision, i.e. listing the coordinator log, the entry's
      put-if-absent and its publication; the statement's read of the table rolls the coordinator
      forward too, which only the latency includes); also printed, the coordinator log's size
      then (a roll-forward lists the entries after the last published one).
   c. --writers processes as in part 3 (same barriers, seeds and loop) running two-table
      transfers between random accounts as transactions (``s.transaction()``: debit, credit, an
      audit row with a unique transfer_id) for --seconds on a fresh coordinated pair per
      configuration: ``isolde.rowLevelConcurrency`` = 'always' (row level) or 'off' (file level)
      on both tables. A transaction that loses a race is rolled back and the writer draws the
      next transfer. Printed: committed transfers/s, the conflict rate (lost commits / commit
      attempts) and its exception classes, latency p50 / p99 of committed transfers, the ratio
      row level / file level; then the invariants: sum(bal) unchanged; the audit rows exactly the
      committed transfers' ids (none of a rolled-back one); one new coordinator entry per
      committed transfer, each holding one commit of the accounts table and one of the audit
      table; and one new version of each table per committed transfer.

Warm-up rounds (and each writer's first transfers) are not timed.
"""

from __future__ import annotations

import argparse
import json
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
AUDIT_COLUMNS = "transfer_id STRING, src BIGINT, dst BIGINT, amount BIGINT"
COORDINATOR_LOG = os.path.join("_isolde_coordinator", "log")  # under the warehouse (executor/log/coordinator.py)
#: part 4a: how the two-table transfer runs (the first three on coordinated tables)
TWO_TABLE = ("transaction", "atomic", "separate", "plain")
#: part 4c: two-table transfers as transactions, row level and file level
RACES4 = (("two_table", "always"), ("two_table", "off"))
INSERT_ROUNDS = 5  # part 4b times INSERT_ROUNDS x --rounds rounds: a short statement, so a p99 that is not the max


def pct(values: list, p: float) -> float:
    """The p-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def create_accounts(s, name: str, row_level: str = "auto", coordinated: bool = False) -> str:
    """CREATE ``name`` with deletion vectors, 1,000 accounts; returns its folder. ``coordinated``:
    the ALTER that sets the concurrency level also opts the table in to the commit coordinator."""
    s.execute(f"CREATE TABLE {name} (id BIGINT, bal BIGINT) "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    s.execute(f"INSERT INTO {name} SELECT id, {BALANCE} AS bal FROM range({ACCOUNTS})")
    s.execute(f"ALTER TABLE {name} SET TBLPROPERTIES ('isolde.rowLevelConcurrency' = '{row_level}'"
              + (", 'isolde.coordinatedCommits' = 'true')" if coordinated else ")"))
    return location_of(s, name)


def create_audit(s, name: str, coordinated: bool, row_level: str = "auto") -> str:
    """CREATE the empty audit table ``name`` (coordinated: opted in by CREATE's TBLPROPERTIES);
    returns its folder."""
    s.execute(f"CREATE TABLE {name} ({AUDIT_COLUMNS}) TBLPROPERTIES ('isolde.rowLevelConcurrency' = '{row_level}'"
              + (", 'isolde.coordinatedCommits' = 'true')" if coordinated else ")"))
    return location_of(s, name)


def location_of(s, name: str) -> str:
    location = s.execute(f"DESCRIBE DETAIL {name}").first().location
    return location[5:] if location.startswith("file:") else location


def version(path: str) -> int:
    from isolde.executor.log import DeltaLog

    return DeltaLog.for_table(path).update().version


def published_version(path: str) -> int:
    """The newest commit file in the table's ``_delta_log``, by listing it: no DeltaLog, so neither
    the coordinator's roll-forward nor anything else a statement would do runs between timed ones."""
    names = os.listdir(os.path.join(path, "_delta_log"))
    return max((int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()), default=-1)


def coordinator_entries(warehouse: str) -> set:
    """The entries (file names) of the warehouse's commit coordinator log."""
    try:
        return {n for n in os.listdir(os.path.join(warehouse, COORDINATOR_LOG))
                if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()}
    except FileNotFoundError:
        return set()


def transfer(s, table: str, a: int, b: int, amount: int, how: str, audit: str = None, tid: str = None):
    """One transfer of ``amount`` from ``a`` to ``b``: ``how`` is transaction, atomic or separate.
    With ``audit``, a third statement inserts the row (``tid``, a, b, amount) into that table."""
    statements = [f"UPDATE {table} SET bal = bal - {amount} WHERE id = {a}",
                  f"UPDATE {table} SET bal = bal + {amount} WHERE id = {b}"]
    if audit is not None:
        statements.append(f"INSERT INTO {audit} VALUES ('{tid}', {a}, {b}, {amount})")
    if how == "transaction":
        with s.transaction() as tx:
            for q in statements:
                tx.execute(q)
    elif how == "atomic":
        s.execute(f"BEGIN ATOMIC {'; '.join(statements)}; END")
    else:
        for q in statements:
            s.execute(q)


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


# --------------------------------------------------------------------------- parts 3 and 4c: the writers

def race_tables(how: str, mode: str) -> tuple:
    """A race's accounts table and its audit table (None: the transfers write no audit row)."""
    if how == "two_table":
        return f"race_acct_{mode}", f"race_audit_{mode}"
    return f"race_{how}_{mode}", None


def writer(index: int, warehouse: str, seconds: float, configs: tuple, barrier, results) -> None:
    """A writer process: warms up, then for each (how, mode) of ``configs`` (RACES or RACES4)
    waits at the barrier, runs transfers on that race's tables for ``seconds`` and sends its
    counts (two-table transfers: also the ids of the committed ones)."""
    sys.path.insert(0, ROOT)
    import isolde
    from isolde.errors import ConcurrentModificationException as Conflict

    s = isolde.connect(warehouse=warehouse, master="local[1]")
    rng = random.Random(1000 + index)
    for how in dict.fromkeys(how for how, _ in configs):  # warm-up, on tables of its own
        for i in range(2):
            try:
                if how == "two_table":
                    transfer(s, "warm_acct", *rng.sample(range(ACCOUNTS), 2), 1, "transaction", "warm_audit",
                             f"warm-w{index}-{i}")
                else:
                    transfer(s, "warm", *rng.sample(range(ACCOUNTS), 2), 1, how)
            except Conflict:
                pass
    barrier.wait()  # everyone is warm
    for how, mode in configs:
        table, audit = race_tables(how, mode)
        out = {"index": index, "transfers": 0, "attempts": 0, "conflicts": {}, "credit_retries": 0,
               "latencies": [], "errors": [], "ids": []}

        def lost(e):
            out["conflicts"][type(e).__name__] = out["conflicts"].get(type(e).__name__, 0) + 1

        barrier.wait()  # the parent read the tables' versions
        stop = time.time() + seconds
        while time.time() < stop:
            a, b = rng.sample(range(ACCOUNTS), 2)
            amount = rng.randint(1, 100)
            tid = None
            t = time.perf_counter()
            try:
                if how == "transaction":
                    out["attempts"] += 1
                    transfer(s, table, a, b, amount, "transaction")
                elif how == "two_table":
                    out["attempts"] += 1
                    tid = f"w{index}-{mode}-{out['attempts']}"
                    transfer(s, table, a, b, amount, "transaction", audit, tid)
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
            if tid is not None:
                out["ids"].append(tid)
        out["ended"] = time.time()
        results.put(out)
        barrier.wait()  # the parent checks the invariants
    s.close()


def start_writers(warehouse: str, args, configs: tuple) -> tuple:
    """--writers spawned writer processes running ``configs``; returns (processes, barrier, queue)."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(args.writers + 1), ctx.Queue()
    os.environ.setdefault("ISOLDE_DRIVER_MEMORY", "1g")  # inherited by the writers
    procs = [ctx.Process(target=writer, args=(w, warehouse, args.seconds, configs, barrier, results), daemon=True)
             for w in range(args.writers)]
    for p in procs:
        p.start()
    return procs, barrier, results


def stop_writers(procs: list) -> None:
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()


def race_outcome(outs: list, start: float, seconds: float) -> dict:
    """The writers' counts of one race, summed: transfers, attempts, conflicts by class,
    latencies, errors, credit retries and the elapsed time (until the last writer ended)."""
    conflicts: dict = {}
    for o in outs:
        for k, n in o["conflicts"].items():
            conflicts[k] = conflicts.get(k, 0) + n
    return {"done": sum(o["transfers"] for o in outs), "attempts": sum(o["attempts"] for o in outs),
            "conflicts": conflicts, "lat": [x for o in outs for x in o["latencies"]],
            "errors": [e for o in outs for e in o["errors"]],
            "credit_retries": sum(o["credit_retries"] for o in outs),
            "elapsed": max([o["ended"] for o in outs] + [start + seconds]) - start}


def describe_race(m: dict, credits: bool = False) -> str:
    """'N transfers (x/s), conflict rate ...[, credits retried], latency ...' of a race_outcome."""
    done, conflicts, lat = m["done"], m["conflicts"], m["lat"]
    return (f"{done:4d} transfers ({done / m['elapsed']:5.2f}/s), "
            f"conflict rate {sum(conflicts.values()) / max(m['attempts'], 1):4.0%} of {m['attempts']} commits"
            + (f" {dict(sorted(conflicts.items()))}" if conflicts else "")
            + (f", {m['credit_retries']} credits retried" if credits else "")
            + (f", latency p50 {pct(lat, 50):.2f} s p99 {pct(lat, 99):.2f} s" if lat else ""))


def races(s, warehouse: str, args) -> None:
    paths = {(how, mode): create_accounts(s, f"race_{how}_{mode}", mode) for how, mode in RACES}
    create_accounts(s, "warm")
    t = time.perf_counter()
    procs, barrier, results = start_writers(warehouse, args, RACES)
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
            m = race_outcome(outs, start, args.seconds)
            done, errors = m["done"], m["errors"]
            tps[(how, mode)] = done / m["elapsed"]
            want_versions = done if how == "transaction" else 2 * done
            level = "row level " if mode == "always" else "file level"
            print(f"   {how:<11} {level} ({mode:>6}): {describe_race(m, credits=how == 'separate')}")
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
        stop_writers(procs)


# --------------------------------------------------------------------------- part 4: two tables, coordinated

def entry_tables(warehouse: str, name: str) -> list:
    """The table folders one coordinator entry commits to, sorted (one per commit)."""
    with open(os.path.join(warehouse, COORDINATOR_LOG, name)) as f:
        entry = json.load(f)
    return sorted(os.path.realpath(os.path.dirname(c["log"].rstrip("/"))) for c in entry["commits"])


def two_table_transfers(s, warehouse: str, args) -> None:
    """4a: debit + credit + audit row, as one coordinated transaction or as three statements."""
    groups = {"coord": (create_accounts(s, "acct_coord", coordinated=True), create_audit(s, "audit_coord", True)),
              "plain": (create_accounts(s, "acct_plain"), create_audit(s, "audit_plain", False))}
    rng = random.Random(args.seed + 4)
    times = {k: [] for k in TWO_TABLE}
    written = {k: [] for k in TWO_TABLE}  # (acct versions, audit versions, coordinator entries) per round
    for r in range(args.warmup + args.rounds):
        order = list(TWO_TABLE)
        rng.shuffle(order)
        for how in order:
            group = "plain" if how == "plain" else "coord"
            paths = groups[group]
            a, b = rng.sample(range(ACCOUNTS), 2)
            v0, e0 = [published_version(p) for p in paths], len(coordinator_entries(warehouse))
            t = time.perf_counter()
            transfer(s, f"acct_{group}", a, b, rng.randint(1, 100), "separate" if how == "plain" else how,
                     f"audit_{group}", f"{how}-{r}")
            dt = time.perf_counter() - t
            if r >= args.warmup:
                times[how].append(dt)
                written[how].append((published_version(paths[0]) - v0[0], published_version(paths[1]) - v0[1],
                                     len(coordinator_entries(warehouse)) - e0))
    print(f"4a. a two-table transfer: debit + credit UPDATEs on acct, INSERT of one audit row; latency over "
          f"{args.rounds} rounds")
    labels = {"transaction": ("s.transaction()", "coordinated"), "atomic": ("BEGIN ATOMIC ... END", "coordinated"),
              "separate": ("3 statements", "coordinated"), "plain": ("3 statements", "not coordinated")}
    for how in TWO_TABLE:
        label, tables = labels[how]
        acct_v, audit_v, entries = (",".join(str(v) for v in sorted({w[i] for w in written[how]})) for i in range(3))
        print(f"   {label:<21} {tables:<16} p50 {pct(times[how], 50) * 1000:7.1f} ms  "
              f"p99 {pct(times[how], 99) * 1000:7.1f} ms   per round: versions acct +{acct_v} audit +{audit_v}, "
              f"coordinator entries +{entries}")
    p50 = {how: pct(times[how], 50) for how in TWO_TABLE}
    print(f"   ratio p50 s.transaction() / 3 statements not coordinated: {p50['transaction'] / p50['plain']:.2f}x; "
          f"BEGIN ATOMIC / not coordinated: {p50['atomic'] / p50['plain']:.2f}x")
    print(f"   ratio p50 s.transaction() / 3 statements coordinated: {p50['transaction'] / p50['separate']:.2f}x; "
          f"3 statements coordinated / not coordinated: {p50['separate'] / p50['plain']:.2f}x")
    checks = []
    for group, coordinated in (("coord", "coordinated"), ("plain", "not coordinated")):
        total = s.execute(f"SELECT sum(bal) FROM acct_{group}").rows[0][0]
        rows = s.execute(f"SELECT count(*) FROM audit_{group}").rows[0][0]
        want = (args.warmup + args.rounds) * (3 if group == "coord" else 1)
        checks.append(f"{coordinated}: sum(bal) {total:,} ({'unchanged' if total == ACCOUNTS * BALANCE else 'CHANGED'}), "
                      f"{rows} audit rows for {want} transfers ({'OK' if rows == want else 'MISMATCH'})")
    print("   " + "; ".join(checks))


def coordinated_insert(s, warehouse: str, args) -> None:
    """4b: the coordinator's per-commit cost: a one-row INSERT, coordinated table or not."""
    create_audit(s, "ins_coord", True)
    create_audit(s, "ins_plain", False)
    kinds = ("coord", "plain")
    times = {k: [] for k in kinds}
    commits = {k: [] for k in kinds}  # result.phases["commit"], ms
    rounds = INSERT_ROUNDS * args.rounds
    for r in range(args.warmup + rounds):
        for group in (kinds if r % 2 == 0 else kinds[::-1]):
            t = time.perf_counter()
            result = s.execute(f"INSERT INTO ins_{group} VALUES ('i{r}', {r}, {r + 1}, 1)")
            dt = time.perf_counter() - t
            if r >= args.warmup:
                times[group].append(dt)
                commits[group].append(result.phases.get("commit", 0.0))
    print(f"4b. a one-row INSERT (into an audit-shaped table), latency over {rounds} rounds; the coordinator "
          f"log holds {len(coordinator_entries(warehouse))} entries at the end")
    for group, label in (("coord", "coordinated"), ("plain", "not coordinated")):
        print(f"   {label:<16} p50 {pct(times[group], 50) * 1000:7.1f} ms  p99 {pct(times[group], 99) * 1000:7.1f} ms"
              f"   commit phase median {statistics.median(commits[group]):6.1f} ms")
    print(f"   ratio p50 coordinated / not coordinated: {pct(times['coord'], 50) / pct(times['plain'], 50):.2f}x; "
          f"commit phase {statistics.median(commits['coord']) - statistics.median(commits['plain']):+.1f} ms")


def coordinated_races(s, warehouse: str, args) -> None:
    """4c: --writers processes racing two-table transfers as transactions."""
    paths = {}
    for how, mode in RACES4:
        table, audit = race_tables(how, mode)
        paths[mode] = (create_accounts(s, table, mode, coordinated=True), create_audit(s, audit, True, mode))
    create_accounts(s, "warm_acct", coordinated=True)
    create_audit(s, "warm_audit", True)
    t = time.perf_counter()
    procs, barrier, results = start_writers(warehouse, args, RACES4)
    timeout = args.seconds + 600
    try:
        barrier.wait(timeout)
        print(f"4c. {args.writers} writer processes (started and warm in {time.perf_counter() - t:.0f} s), "
              f"two-table transfers as transactions (coordinated acct + audit) between random accounts for "
              f"{args.seconds:g} s per configuration")
        tps = {}
        for how, mode in RACES4:
            table, audit = race_tables(how, mode)
            acct_path, audit_path = paths[mode]
            v0, e0 = (version(acct_path), version(audit_path)), coordinator_entries(warehouse)
            start = time.time()
            barrier.wait(timeout)
            outs = [results.get(timeout=timeout) for _ in procs]
            barrier.wait(timeout)
            m = race_outcome(outs, start, args.seconds)
            done, errors = m["done"], m["errors"]
            tps[mode] = done / m["elapsed"]
            total, rows = s.execute(f"SELECT sum(bal), count(*) FROM {table}").rows[0]
            ids = [r[0] for r in s.execute(f"SELECT transfer_id FROM {audit}").rows]
            committed = [i for o in outs for i in o["ids"]]
            new_versions = (version(acct_path) - v0[0], version(audit_path) - v0[1])
            entries = sorted(coordinator_entries(warehouse) - e0)
            both = sorted(os.path.realpath(p) for p in (acct_path, audit_path))
            whole = sum(entry_tables(warehouse, e) == both for e in entries)
            level = "row level " if mode == "always" else "file level"
            ids_ok = sorted(ids) == sorted(committed) and len(committed) == done
            print(f"   {level} ({mode:>6}): {describe_race(m)}")
            print(f"   {'':<19} sum(bal) {total:,} ({'unchanged' if total == ACCOUNTS * BALANCE else 'CHANGED'}), "
                  f"{rows} rows; audit {len(ids)} rows for {done} committed transfers "
                  f"({'OK: exactly their ids' if ids_ok else 'MISMATCH'}); {len(entries)} coordinator entries, "
                  f"{whole} of them one acct + one audit commit "
                  f"({'OK' if len(entries) == whole == done else 'MISMATCH'}); new versions acct {new_versions[0]}, "
                  f"audit {new_versions[1]} ({'OK' if new_versions == (done, done) else 'MISMATCH'})"
                  + (f"; {len(errors)} errors, first: {errors[0]}" if errors else ""))
        if tps["off"]:
            print(f"   ratio transfers/s row level / file level: {tps['always'] / tps['off']:.2f}x")
    finally:
        stop_writers(procs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0, help="each race's length (parts 3 and 4c)")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--parts", default="1,2,3,4", help="comma-separated subset of 1,2,3,4 (or 4a,4b,4c)")
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
        if parts & {"4", "4a"}:
            two_table_transfers(s, warehouse, args)
        if parts & {"4", "4b"}:
            coordinated_insert(s, warehouse, args)
        if parts & {"4", "4c"}:
            coordinated_races(s, warehouse, args)
        s.close()
        return 0
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
