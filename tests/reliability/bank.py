"""The bank workload: concurrent writers move money between accounts, open and close accounts,
and move accounts between branches, while readers check what no snapshot may ever show.

Accounts 0..BASE-1 start with START each and are never closed; transfers move money between
them only (so a transfer never meets a missing account); some transfers are two UPDATEs in one
``BEGIN ATOMIC ... END`` transaction (one commit, the whole transaction's reads checked). Accounts BASE..BASE+SPARE-1 are opened
with balance 0 (by MERGE or by INSERT ... WHERE NOT EXISTS, racing on the same ids) and closed by
DELETE ... WHERE balance = 0. Moves flip an account's branch (a partition move when the table is
partitioned by branch).

Invariants checked (a violation is a lost update, a duplicate, a torn read or a wrong commit):
- every statement committed (its version recorded) or raised a named conflict; nothing else;
- every version after the set-up is one of the committed statements (no phantom commit); a
  statement that changed no row committed nothing (a MERGE, a DELETE: the model at the version
  it read agrees) or an empty version of its own (an INSERT, as Delta's: the model agrees at
  some version before it);
- the final table equals the model replayed from the committed statements in log order, and
  delta-rs reads the same rows;
- every reader saw sum(balance) == BASE * START and no id twice, and a count of accounts that
  some committed version had.
"""

from __future__ import annotations

import random
import threading
import zlib
import time
from collections import Counter
from dataclasses import dataclass, field

from isolde.errors import CONFLICT_EXCEPTIONS, ConcurrentModificationException

BASE = 12
SPARE = 5
START = 100


@dataclass(frozen=True)
class BankConfig:
    partitioned: bool
    deletion_vectors: bool
    isolation: str  # Serializable | WriteSerializable
    row_level: str  # auto | always | off

    @property
    def name(self) -> str:
        return (f"{'parted' if self.partitioned else 'flat'}-{'dv' if self.deletion_vectors else 'cow'}-"
                f"{self.isolation}-rowlevel:{self.row_level}")

    def ddl(self, table: str, location: str | None = None) -> str:
        """``location``: an external table there (an ``s3a://`` URI for the S3 runs)."""
        parted = " PARTITIONED BY (branch)" if self.partitioned else ""
        props = {"delta.isolationLevel": self.isolation,
                 "delta.enableDeletionVectors": str(self.deletion_vectors).lower(),
                 "isolde.rowLevelConcurrency": self.row_level}
        text = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
        where = f" LOCATION '{location}'" if location else ""
        return (f"CREATE TABLE {table} (id BIGINT, branch INT, balance BIGINT) USING DELTA{parted}{where} "
                f"TBLPROPERTIES ({text})")


@dataclass(frozen=True)
class Op:
    """One statement: its kind and arguments (for the model) and its SQL."""

    kind: str  # transfer | move | open | close
    args: tuple
    sql: str


def random_op(rng: random.Random, table: str) -> Op:
    r = rng.random()
    if r < 0.55:
        a, b = rng.sample(range(BASE), 2)
        amount = rng.randint(1, 20)
        return Op("transfer", (a, b, amount),
                  f"MERGE INTO {table} t USING (SELECT * FROM VALUES ({a}, -{amount}), ({b}, {amount}) AS v(id, d)) s "
                  "ON t.id = s.id WHEN MATCHED THEN UPDATE SET balance = t.balance + s.d")
    if r < 0.65:
        a, b = rng.sample(range(BASE), 2)
        amount = rng.randint(1, 20)
        return Op("transfer", (a, b, amount),
                  f"UPDATE {table} SET balance = balance + CASE WHEN id = {a} THEN -{amount} ELSE {amount} END "
                  f"WHERE id IN ({a}, {b})")
    if r < 0.80:  # a multi-statement transaction: two UPDATEs, one commit
        a, b = rng.sample(range(BASE), 2)
        amount = rng.randint(1, 20)
        return Op("transfer", (a, b, amount),
                  f"BEGIN ATOMIC UPDATE {table} SET balance = balance - {amount} WHERE id = {a}; "
                  f"UPDATE {table} SET balance = balance + {amount} WHERE id = {b}; END")
    if r < 0.85:
        a = rng.randrange(BASE)
        return Op("move", (a,), f"UPDATE {table} SET branch = 1 - branch WHERE id = {a}")
    k = BASE + rng.randrange(SPARE)
    if r < 0.90:
        return Op("open", (k,), f"MERGE INTO {table} t USING (SELECT {k} AS id) s ON t.id = s.id "
                                f"WHEN NOT MATCHED THEN INSERT (id, branch, balance) VALUES (s.id, {k % 2}, 0)")
    if r < 0.94:
        return Op("open", (k,), f"INSERT INTO {table} SELECT {k}, {k % 2}, 0 "
                                f"WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE id = {k})")
    return Op("close", (k,), f"DELETE FROM {table} WHERE id = {k} AND balance = 0")


def affected(result) -> int:
    """Rows a statement changed; a BEGIN ATOMIC transfer answers with its commit, whose metrics
    add up its UPDATEs' rows."""
    if result.columns:
        return result.first().num_affected_rows
    return int((result.metrics or {}).get("numUpdatedRows", 0))


def initial_state() -> dict:
    """id -> (branch, balance)."""
    return {i: (i % 2, START) for i in range(BASE)}


def apply(state: dict, op: Op) -> None:
    """The model: what one committed statement does to the accounts."""
    if op.kind == "transfer":
        a, b, amount = op.args
        state[a] = (state[a][0], state[a][1] - amount)
        state[b] = (state[b][0], state[b][1] + amount)
    elif op.kind == "move":
        (a,) = op.args
        state[a] = (1 - state[a][0], state[a][1])
    elif op.kind == "open":
        (k,) = op.args
        state.setdefault(k, (k % 2, 0))
    elif op.kind == "close":
        (k,) = op.args
        if k in state and state[k][1] == 0:
            del state[k]


@dataclass
class History:
    """What one run saw: committed statements by version, conflicts, reader observations."""

    config: BankConfig
    base_version: int = -1
    committed: dict = field(default_factory=dict)  # version -> Op
    unchanged: list = field(default_factory=list)  # (version read, Op) of statements that changed no row
    conflicts: Counter = field(default_factory=Counter)
    errors: list = field(default_factory=list)
    reads: list = field(default_factory=list)  # (sum, count, distinct)
    violations: list = field(default_factory=list)

    def record(self, version: int, affected: int, op: Op) -> None:
        """A statement's reported success (the caller holds any lock): a commit of its own, or,
        having changed no row, the version it read (or an empty commit)."""
        if affected == 0:
            self.unchanged.append((version, op))
            return
        if version in self.committed:
            self.violations.append(f"two statements report version {version}")
        self.committed[version] = op

    def counts_by_version(self) -> dict:
        state = initial_state()
        out = {self.base_version: len(state)}
        for version in sorted(self.committed):
            apply(state, self.committed[version])
            out[version] = len(state)
        return out


def writer_seed(config: BankConfig, n: int) -> int:
    """The seed of writer ``n``'s statements (a thread or a process: the same sequence)."""
    return zlib.crc32(f"{config.name}/{n}".encode())


def set_up(session, config: BankConfig, table: str = "bank", location: str | None = None) -> int:
    """Create and fill the table; returns the version the history starts from."""
    session.execute(config.ddl(table, location))
    session.execute(f"INSERT INTO {table} VALUES " + ", ".join(f"({i}, {b}, {v})" for i, (b, v) in initial_state().items()))
    return session.execute(f"DESCRIBE HISTORY {table}").first().version


def read_balances(session, table: str = "bank") -> tuple:
    """One reader check: (sum of balances, rows, distinct ids) of one snapshot."""
    row = session.sql(f"SELECT sum(balance), count(*), count(DISTINCT id) FROM {table}").collect()[0]
    return int(row[0]), int(row[1]), int(row[2])


def final_state(session, table_path: str, table: str = "bank", storage_options: dict | None = None) -> tuple:
    """(latest version, rows read by isolde, rows read by delta-rs) once the writers are done.
    ``storage_options``: delta-rs's, for a table on S3 (``table_path`` an s3:// URI)."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    latest = session.execute(f"DESCRIBE HISTORY {table}").first().version
    final = sorted(tuple(int(x) for x in r) for r in session.sql(f"SELECT id, branch, balance FROM {table}").collect())
    theirs = pa.table(QueryBuilder().register("t", DeltaTable(table_path, storage_options=storage_options)).execute(
        "SELECT id, branch, balance FROM t").read_all()).to_pylist()
    return latest, final, sorted((r["id"], r["branch"], r["balance"]) for r in theirs)


def run(connect, config: BankConfig, seconds: float, writers: int = 4, readers: int = 1,
        table: str = "bank") -> History:
    """Race ``writers`` threads (each its own isolde session on one warehouse) and ``readers``
    for ``seconds``; return the history. ``connect()`` opens a session."""
    setup = connect()
    history = History(config, base_version=set_up(setup, config, table))
    lock = threading.Lock()
    deadline = time.time() + seconds
    stop_readers = threading.Event()

    def writer(n: int):
        s = connect()
        rng = random.Random(writer_seed(config, n))
        try:
            while time.time() < deadline:
                op = random_op(rng, table)
                try:
                    result = s.execute(op.sql)
                except ConcurrentModificationException as e:
                    with lock:
                        if isinstance(e, CONFLICT_EXCEPTIONS):
                            history.conflicts[type(e).__name__] += 1
                        else:
                            history.errors.append((op.sql, f"unnamed conflict {e!r}"))
                    continue
                except BaseException as e:  # anything else is a failure of the run
                    with lock:
                        history.errors.append((op.sql, repr(e)))
                    return
                with lock:
                    history.record(result.version, affected(result), op)
        finally:
            s.close()

    def reader():
        s = connect()
        try:
            while not stop_readers.is_set():
                observed = read_balances(s, table)
                with lock:
                    history.reads.append(observed)
        except BaseException as e:
            with lock:
                history.errors.append(("reader", repr(e)))
        finally:
            s.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    watchers = [threading.Thread(target=reader) for _ in range(readers)]
    for t in threads + watchers:
        t.start()
    for t in threads:
        t.join()
    stop_readers.set()
    for t in watchers:
        t.join()
    setup.close()
    return history


def check(history: History, latest_version: int, final_rows: list, other_reader_rows: list) -> list:
    """Every invariant violation of the run (empty when the history is correct)."""
    bad = list(history.violations)
    bad += [f"{sql}: {err}" for sql, err in history.errors]
    # a statement that changed no row either committed nothing (its result names the version it
    # read) or, as an INSERT does, an empty commit of its own (a version nobody else committed)
    empty = {v for v, _ in history.unchanged if v not in history.committed and v != history.base_version}
    expected_versions = list(range(history.base_version + 1, latest_version + 1))
    if sorted(set(history.committed) | empty) != expected_versions:
        bad.append(f"versions committed by the writers {sorted(history.committed)} (and empty commits "
                   f"{sorted(empty)}) are not the log's {expected_versions}")
    states = {history.base_version: initial_state()}
    state = dict(states[history.base_version])
    for version in sorted(history.committed):
        apply(state, history.committed[version])
        states[version] = dict(state)

    def changes_nothing(op: Op, at: dict) -> bool:
        after = dict(at)
        apply(after, op)
        return after == at

    for version, op in history.unchanged:
        if version in empty:  # it wrote nothing: it serialises at the version it read, some version below
            if not any(changes_nothing(op, st) for v, st in states.items() if v < version):
                bad.append(f"{op.sql} committed version {version} without a row, yet it changes rows at "
                           "every earlier version")
        elif version not in states or not changes_nothing(op, states[version]):
            bad.append(f"{op.sql} changed no row reading version {version}, where the model says it would")
    model = sorted((i, b, v) for i, (b, v) in state.items())
    if final_rows != model:
        bad.append(f"the table {final_rows} differs from the serial replay in log order {model}")
    if other_reader_rows != final_rows:
        bad.append(f"delta-rs reads {other_reader_rows}, isolde {final_rows}")
    counts = set(history.counts_by_version().values())
    for total, count, distinct in history.reads:
        if total != BASE * START:
            bad.append(f"a reader saw a total balance of {total}, not {BASE * START}")
        if count != distinct:
            bad.append(f"a reader saw {count} rows for {distinct} accounts")
        if count not in counts:
            bad.append(f"a reader saw {count} accounts, which no committed version had ({sorted(counts)})")
    return bad
