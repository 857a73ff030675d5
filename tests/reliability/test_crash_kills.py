"""Crash safety (issue 25): writers in separate processes SIGKILLed at random moments.

Two loops, each on its own table:

* Python level: forked log-level writers (appends, rewrites, deletes through the transaction
  API; no Spark) killed every few hundred milliseconds -- cheap, so hundreds of kills.
* JVM level: isolde statement workers (each its own Spark JVM: INSERT / UPDATE / DELETE / MERGE
  / OPTIMIZE), two at a time, one killed at a random moment of a random statement (its whole
  process group, or sometimes only its JVM) and replaced.

After every kill: the table loads (isolde's log and delta-rs); the versions are contiguous and
every one parses; every version's JSON hashes as it did when first seen and as the worker that
reported it hashed it; each commit is one tagged statement, reported at that very version, or
else the last statement a killed worker started; no row carries the tag of a statement that is
not committed; the JVM table equals the serial replay of its commits in log order (isolde and
delta-rs). At the end VACUUM (retention check off, RETAIN 0 HOURS) deletes exactly the files
computed here from the log -- the data files no live version references, orphans of killed
writers included -- and nothing else.

Short runs (~30 + 3 kills) in ``make test``; ``make torture`` runs >= 500 kills
(ISOLDE_PY_KILLS, ISOLDE_JVM_KILLS change the numbers).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

import crash_worker as W

NEEDS_SPARK = True  # the whole module is marked spark (the crash runs start Spark)


WORKER = os.path.join(os.path.dirname(__file__), "crash_worker.py")
DAY_MS = 24 * 3600 * 1000


# ---------------------------------------------------------------- reports and the log
def report_lines(path: str) -> list[str]:
    """The complete lines a worker wrote (a line torn by the kill is not read)."""
    try:
        with open(path) as fh:
            return fh.read().split("\n")[:-1]
    except FileNotFoundError:
        return []


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.01)


class Reports:
    """What every worker said: statements started (in order) and outcomes, by tag."""

    def __init__(self):
        self.outs: dict[str, str] = {}  # worker name -> report file
        self.killed: set[str] = set()
        self.jvm_killed: set[str] = set()  # workers whose JVM alone was killed: errors allowed

    def read(self):
        started: dict[str, list[tuple[str, str]]] = {}
        outcomes: dict[str, list[str]] = {}
        for name, out in self.outs.items():
            started[name] = []
            for line in report_lines(out):
                kind, _, rest = line.partition(" ")
                if kind == "start":
                    tag, _, sql = rest.partition(" ")
                    started[name].append((tag, sql))
                elif kind in ("ok", "conflict", "error"):
                    tag, _, detail = rest.partition(" ")
                    outcomes[tag] = [kind] + detail.split(" ")
        return started, outcomes


def worker_of(tag: str) -> str:
    return tag.rsplit("-", 1)[0]


def log_versions(path: str) -> list[int]:
    names = os.listdir(os.path.join(path, "_delta_log"))
    return sorted(int(n[:20]) for n in names if n.endswith(".json") and n[:20].isdigit() and len(n) == 25)


def read_version(path: str, version: int) -> tuple[bytes, list[dict]]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), "rb") as fh:
        body = fh.read()
    assert body.endswith(b"\n"), f"version {version} is torn"
    return body, [json.loads(line) for line in body.split(b"\n") if line.strip()]


def check_log(path: str, base: int, reports: Reports, digests: dict, failures: list) -> list[tuple[int, str]]:
    """The checks after a kill that need no rows, on the versions listed now (surviving workers
    may commit meanwhile: reports are read after the listing, and only versions up to it are
    judged); returns the tagged commits after ``base`` in log order. ``digests`` (version ->
    sha256 when first seen) persists across checks."""
    import deltalake

    from isolde.executor.log import DeltaLog

    versions = log_versions(path)
    latest = versions[-1]
    if versions != list(range(latest + 1)):
        failures.append(f"versions are not contiguous: {versions[-10:]}")
    if DeltaLog.for_table(path).update().version < latest:
        failures.append(f"isolde loads a version before {latest}")
    if deltalake.DeltaTable(path).version() < latest:
        failures.append(f"delta-rs loads a version before {latest}")
    tagged: list[tuple[int, str]] = []
    for v in versions:
        body, actions = read_version(path, v)
        digest = hashlib.sha256(body).hexdigest()
        if digests.setdefault(v, digest) != digest:
            failures.append(f"version {v} changed after it was first seen")
        if v > base:
            info = [a["commitInfo"] for a in actions if "commitInfo" in a]
            tag = info[0].get("userMetadata") if len(info) == 1 else None
            if tag is None:
                failures.append(f"version {v} is not one tagged statement: {info}")
            tagged.append((v, tag))
    tags = [t for _, t in tagged]
    if len(set(tags)) != len(tags):
        failures.append("a statement committed twice")
    started, outcomes = reports.read()
    where = dict((t, v) for v, t in tagged)
    for v, tag in tagged:
        got = outcomes.get(tag)
        if got and got[0] == "ok":
            if int(got[1]) != v:
                failures.append(f"{tag} reported version {got[1]}, the log has it at {v}")
        else:  # committed, not reported: only the last statement a worker started (killed, or in flight)
            w = worker_of(tag)
            if not started.get(w) or started[w][-1][0] != tag:
                failures.append(f"{tag} committed version {v} unreported ({got}) and is not the last "
                                f"statement of its worker")
    for tag, got in outcomes.items():
        if got[0] == "ok" and int(got[1]) <= latest:
            v, digest = int(got[1]), got[2]
            if digests.get(v) != digest:
                failures.append(f"{tag} reported version {v} with hash {digest[:12]}, the log's is "
                                f"{str(digests.get(v))[:12]}")
            if tag not in where and int(got[3]) > 0:  # changed rows yet no commit of its own
                failures.append(f"{tag} reported {got[3]} rows changed at version {v} without a commit")
        elif got[0] == "error" and worker_of(tag) not in reports.jvm_killed:
            failures.append(f"{tag} failed: {' '.join(got[1:])}")
    return tagged


def conflict_counts(reports: Reports, counts, prefix: str) -> None:
    _, outcomes = reports.read()
    for got in outcomes.values():
        if got[0] == "conflict":
            counts[f"{prefix} conflicts: {got[1]}"] += 1
        elif got[0] == "ok":
            counts[f"{prefix} statements reported committed"] += 1


# ---------------------------------------------------------------- VACUUM against the log
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _z85_decode(text: str) -> bytes:
    out = b""
    for i in range(0, len(text), 5):
        n = 0
        for ch in text[i:i + 5]:
            n = n * 85 + _Z85.index(ch)
        out += n.to_bytes(4, "big")
    return out


def _files_of(path: str, action: dict) -> list[str]:
    """Absolute paths an add/remove action references: its data file and a file-backed DV."""
    from urllib.parse import unquote

    out = [os.path.join(path, unquote(action["path"]))]
    dv = action.get("deletionVector")
    if dv and dv["storageType"] == "u":
        enc = dv["pathOrInlineDv"]
        name = f"deletion_vector_{uuid.UUID(bytes=_z85_decode(enc[-20:]))}.bin"
        out.append(os.path.join(path, enc[:-20], name))
    return out


def log_files(path: str) -> tuple[set, set]:
    """(files of the latest version, files any version ever referenced), from the JSON log."""
    live: dict[tuple, list] = {}
    ever: set[str] = set()
    for v in log_versions(path):
        for a in read_version(path, v)[1]:
            for kind in ("add", "remove"):
                if kind in a:
                    dv = a[kind].get("deletionVector") or {}
                    key = (a[kind]["path"], dv.get("storageType", ""), dv.get("pathOrInlineDv", ""), dv.get("offset"))
                    files = _files_of(path, a[kind])
                    ever.update(files)
                    if kind == "add":
                        live[key] = files
                    else:
                        live.pop(key, None)
    return {f for fs in live.values() for f in fs}, ever


_DATA = re.compile(r"^[^._].*\.parquet$|^deletion_vector_[0-9a-f-]{36}\.bin$")


def disk_files(path: str) -> set[str]:
    """Every file under the table folder except the log and the leases."""
    out = set()
    for root, dirs, names in os.walk(path):
        rel = os.path.relpath(root, path)
        if rel.split(os.sep)[0] in ("_delta_log", ".isolde-leases"):
            continue
        out.update(os.path.join(root, n) for n in names)
    return out


def vacuum_candidates(path: str, files: set[str], keep: set[str]) -> set[str]:
    """What VACUUM RETAIN 0 HOURS may delete: data files and DVs not in ``keep``, everything in
    a writer's staging folder, and the .crc of a deleted data file."""
    out = set()
    for f in files - keep:
        rel = os.path.relpath(f, path)
        if rel.split(os.sep)[0].startswith((".isolde-staging-", "_temporary")) or _DATA.match(os.path.basename(f)):
            out.add(f)
    out |= {f for f in files if os.path.basename(f).startswith(".") and f.endswith(".crc") and
            os.path.join(os.path.dirname(f), os.path.basename(f)[1:-4]) in out}
    return out


LEASE_TTL_S = 7 * 86400  # a lease older than this protects nothing (executor/catalog/leases.py)


def leased(path: str) -> list[str]:
    """The paths under live leases: what VACUUM must keep although no version references it. A
    lease is live while young and while its holder process runs (leases._holder_gone)."""
    from isolde.executor.catalog.leases import _holder_gone

    folder = os.path.join(path, ".isolde-leases")
    out = []
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if os.stat(os.path.join(folder, name)).st_mtime < time.time() - LEASE_TTL_S:
            continue
        with open(os.path.join(folder, name)) as fh:
            data = json.load(fh)
        if not _holder_gone(data):
            out += [os.path.normpath(os.path.join(path, p)) for p in data["paths"]]
    return out


def is_leased(f: str, paths: list[str]) -> bool:
    return any(f == p or f.startswith(p + os.sep) for p in paths)


def vacuum_and_check(session, ref: str, path: str, failures: list) -> dict:
    """VACUUM RETAIN 0 HOURS; check it deleted exactly the expected files; figures."""
    with open(os.path.join(path, "NOTES.txt"), "w") as fh:  # a user's file: never VACUUM's
        fh.write("keep me\n")
    live, ever = log_files(path)
    before = disk_files(path)
    missing = live - before
    if missing:
        failures.append(f"live files missing before VACUUM: {sorted(missing)[:5]}")
    lease_paths = leased(path)
    candidates = vacuum_candidates(path, before, live)
    expected = {f for f in candidates if not is_leased(f, lease_paths)}
    orphans = {f for f in candidates if f not in ever and _DATA.match(os.path.basename(f))}
    session.execute("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    session.execute(f"VACUUM {ref} RETAIN 0 HOURS")
    after = disk_files(path)
    if before - after != expected:
        failures.append(f"VACUUM deleted {len(before - after)} files, expected {len(expected)}: not deleted "
                        f"{sorted(expected - (before - after))[:5]}, deleted wrongly {sorted((before - after) - expected)[:5]}")
    if not live <= after:
        failures.append(f"VACUUM deleted live files {sorted(live - after)[:5]}")
    return {"deleted": len(before - after), "orphans": len(orphans), "leased": len(candidates - expected),
            "orphan_files": orphans, "lease_paths": lease_paths}


def age_leases(path: str, days: float = 8) -> int:
    """Make the leases left by killed workers older than the lease TTL (7 days), as time would."""
    folder = os.path.join(path, ".isolde-leases")
    names = os.listdir(folder) if os.path.isdir(folder) else []
    old = time.time() - days * 86400
    for name in names:
        os.utime(os.path.join(folder, name), (old, old))
    return len(names)


# ---------------------------------------------------------------- Python level
def python_kill_loop(tmp_path, kills_wanted: int, counts, failures: list, writers: int = 3) -> tuple[str, Reports]:
    """Rounds of ``writers`` forked log-level writers, each SIGKILLed a random moment after it is
    ready; the log checks after every round, rows after every round."""
    import pyarrow.parquet as pq
    import deltalake

    from isolde.executor.log import DeltaLog
    from isolde.executor.log.actions import Metadata

    path = str(tmp_path / "logtable")
    DeltaLog.for_table(path).start_transaction().commit(
        [Metadata(W.LOG_SCHEMA, (), {"delta.checkpointInterval": "4"})], "CREATE TABLE", user_metadata="create")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(W.PRELOAD)
    reports, digests, rng = Reports(), {}, random.Random(11)
    kills = round_ = 0
    while kills < kills_wanted:
        round_ += 1
        procs = {}
        for w in range(writers):
            n = round_ * 10 + w
            out = str(tmp_path / f"p{n}.out")
            reports.outs[f"p{n}"] = out
            procs[f"p{n}"] = (ctx.Process(target=W.log_writer, args=(path, n, n, out), daemon=True), out)
        for proc, _ in procs.values():
            proc.start()
        wait_for(lambda: all("ready" in report_lines(o) for _, o in procs.values()), 60, "log writers")
        for name in rng.sample(sorted(procs), len(procs)):
            time.sleep(rng.uniform(0.0, 0.12))
            proc = procs[name][0]
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
            if proc.exitcode != -signal.SIGKILL:
                failures.append(f"{name} ended with {proc.exitcode}, not by the kill")
            reports.killed.add(name)
            kills += 1
            counts["kills: python"] += 1
            counts["kills: python, mid-statement"] += int(report_lines(procs[name][1])[-1].startswith("start "))
        tagged = check_log(path, 0, reports, digests, failures)
        committed = {t for _, t in tagged}
        # rows: no reader sees a row of a statement that is not committed; both readers agree
        theirs = deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()
        snap = DeltaLog.for_table(path).update()
        ours = [r for f in snap.all_files for r in pq.read_table(os.path.join(path, f.path)).to_pylist()]
        key = lambda r: (r["id"], r["tag"])  # noqa: E731
        if sorted(map(key, theirs)) != sorted(map(key, ours)):
            failures.append(f"round {round_}: delta-rs and isolde's snapshot read different rows")
        stray = {r["tag"] for r in ours} - committed
        if stray:
            failures.append(f"round {round_}: rows of uncommitted statements {sorted(stray)[:5]}")
        if len({r["id"] for r in ours}) != len(ours):
            failures.append(f"round {round_}: a row is in the table twice")
        if not failures:
            counts["kills survived"] += len(procs)
        else:
            break
    counts["python-level versions committed"] += len(log_versions(path)) - 1
    conflict_counts(reports, counts, "python-level")
    return path, reports


# ---------------------------------------------------------------- JVM level
def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, stack = [], [pid]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def _java_of(pid: int) -> list[int]:
    out = []
    for c in _descendants(pid):
        try:
            with open(f"/proc/{c}/comm") as fh:
                if fh.read().strip() == "java":
                    out.append(c)
        except OSError:
            pass
    return out


def _debug(text: str) -> None:
    if os.environ.get("ISOLDE_CRASH_DEBUG"):
        print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


class JvmWorkers:
    """Statement workers, each ``python crash_worker.py`` with its own Spark JVM."""

    def __init__(self, tmp_path, warehouse: str, reports: Reports):
        self.tmp_path, self.warehouse, self.reports = tmp_path, warehouse, reports
        self.procs: dict[str, subprocess.Popen] = {}
        self.next = 1
        self.env = dict(os.environ, ISOLDE_JVM="startup", ISOLDE_DRIVER_MEMORY="1g", PYTHONUNBUFFERED="1",
                        SPARK_LOCAL_IP="127.0.0.1")

    def start(self) -> str:
        n, self.next = self.next, self.next + 1
        name, out = f"j{n}", str(self.tmp_path / f"j{n}.out")
        self.reports.outs[name] = out
        self.procs[name] = subprocess.Popen(
            [sys.executable, WORKER, self.warehouse, str(n), out], env=self.env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=open(str(self.tmp_path / f"j{n}.err"), "w"))
        return name

    def kill(self, name: str, jvm_only: bool) -> None:
        proc = self.procs.pop(name)
        self.reports.killed.add(name)
        if jvm_only and _java_of(proc.pid):
            self.reports.jvm_killed.add(name)
            for pid in _java_of(proc.pid):
                os.kill(pid, signal.SIGKILL)
            try:  # the Python driver finds its JVM gone: it reports and exits, or is killed too
                proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything of its group left (the JVM)
        except ProcessLookupError:
            pass

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name, jvm_only=False)


def _statements(reports: Reports) -> dict:
    """tag -> Statement, regenerated from each worker's seed (and checked against its report)."""
    started, _ = reports.read()
    out = {}
    for name, lines in started.items():
        if not name.startswith("j"):
            continue
        n = int(name[1:])
        rng = random.Random(7919 * n + 1)
        for seq, (tag, sql) in enumerate(lines, start=1):
            st = W.Statement(rng, n, seq)
            assert (st.tag, st.sql()) == (tag, sql)
            out[tag] = st
    return out


def replay(path: str, base: int, tagged, statements: dict, serializable: bool, failures: list) -> dict:
    """The rows the log's commits make: each statement's effect computed on the snapshot it read
    (commitInfo.readVersion) and applied on the version before its own -- what an optimistic
    writer does, and under WriteSerializable the log order need not be the serial order (a
    DELETE that read before a concurrent UPDATE may serialise before it). Flags a lost update
    (a row the statement changed was changed since its read) and, under Serializable, a commit
    whose effect at the version before it differs from the one at its read (log order is then
    not a serial order)."""
    states = {base: W.initial_rows()}
    current = states[base]
    for v, tag in tagged:
        st = statements.get(tag)
        if st is None:
            failures.append(f"commit tagged {tag!r} was made by no statement a worker started")
            continue
        info = next(a["commitInfo"] for a in read_version(path, v)[1] if "commitInfo" in a)
        read = states.get(int(info.get("readVersion", v - 1)), current)
        written, deleted = st.effect(read)
        for i in sorted(set(written) | deleted):
            if read.get(i) != current.get(i):
                failures.append(f"{tag} (version {v}, read {info.get('readVersion')}) wrote row {i}, changed since "
                                f"its read: {read.get(i)} -> {current.get(i)}")
        if serializable and st.effect(current) != (written, deleted):
            failures.append(f"{tag} (version {v}, read {info.get('readVersion')}) commits under Serializable "
                            "yet the versions since its read change what it does")
        current = {i: r for i, r in current.items() if i not in deleted}
        current.update(written)
        states[v] = current
    return current


def check_jvm_rows(session, path: str, base: int, tagged, reports: Reports, failures: list) -> None:
    """The table at the last version of ``tagged`` (isolde, delta-rs) equals the replay of its
    commits (``replay``)."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    metadata = next(a["metaData"] for a in read_version(path, 0)[1] if "metaData" in a)
    serializable = metadata["configuration"].get("delta.isolationLevel") == "Serializable"
    model = replay(path, base, tagged, _statements(reports), serializable, failures)
    want = sorted((i, g, t, v) for i, (g, t, v) in model.items())
    version = tagged[-1][0] if tagged else base
    ours = sorted(tuple(r) for r in session.sql(f"SELECT id, grp, tag, v FROM t VERSION AS OF {version}").collect())
    theirs = sorted((r["id"], r["grp"], r["tag"], r["v"]) for r in pa.table(
        QueryBuilder().register("t", DeltaTable(path, version=version)).execute("SELECT id, grp, tag, v FROM t").read_all()).to_pylist())
    if ours != want:
        failures.append(f"isolde reads {len(ours)} rows that are not the replay of the log ({len(want)} rows): "
                        f"extra {sorted(set(ours) - set(want))[:4]}, missing {sorted(set(want) - set(ours))[:4]}")
    if theirs != want:
        failures.append(f"delta-rs reads rows that are not the replay of the log: extra "
                        f"{sorted(set(theirs) - set(want))[:4]}, missing {sorted(set(want) - set(theirs))[:4]}")


JVM_CONFIGS = {
    "dv-WriteSerializable": ("", {"delta.enableDeletionVectors": "true", "delta.isolationLevel": "WriteSerializable",
                                  "delta.checkpointInterval": "5"}),
    "cow-parted-Serializable": (" PARTITIONED BY (grp)", {"delta.enableDeletionVectors": "false",
                                                          "delta.isolationLevel": "Serializable",
                                                          "delta.checkpointInterval": "5"}),
}


def jvm_kill_loop(spark, tmp_path, kills_wanted: int, counts, failures: list, config: str = "dv-WriteSerializable",
                  concurrent: int = 2) -> tuple:
    import isolde

    warehouse = str(tmp_path / "warehouse")
    session = isolde.connect(warehouse=warehouse, spark=spark)
    parted, props = JVM_CONFIGS[config]
    session.execute(W.JVM_DDL.format(parted=parted, props=", ".join(f"'{k}' = '{v}'" for k, v in props.items())))
    session.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, {g}, '{t}', {v})" for i, (g, t, v) in
                                                         W.initial_rows().items()))
    path = os.path.join(warehouse, "default", "t")
    base = log_versions(path)[-1]
    reports, digests, rng = Reports(), {}, random.Random(13)
    workers = JvmWorkers(tmp_path, warehouse, reports)
    kills = 0
    try:
        for _ in range(concurrent):
            workers.start()
        while kills < kills_wanted and not failures:
            name = rng.choice(sorted(workers.procs))
            out = reports.outs[name]
            after = rng.randint(1, 3)

            def started_next():
                lines = report_lines(out)
                if any(line.startswith("error ") for line in lines) or workers.procs[name].poll() is not None:
                    return True
                done = sum(1 for line in lines if line.split(" ", 1)[0] in ("ok", "conflict"))
                return done >= after and lines[-1].startswith("start ")

            wait_for(started_next, 300, f"worker {name} to start statement {after + 1}")
            if workers.procs[name].poll() is not None:
                failures.append(f"{name} exited by itself: {open(str(tmp_path / f'{name}.err')).read()[-2000:]}")
                break
            time.sleep(rng.uniform(0.0, 1.5))
            jvm_only = rng.random() < 0.25
            t0 = time.time()
            workers.kill(name, jvm_only)
            _debug(f"killed {name} (jvm only {jvm_only}) in {time.time() - t0:.1f} s")
            kills += 1
            counts["kills: jvm"] += 1
            mid = report_lines(out)[-1].startswith("start ")
            counts["kills: jvm, mid-statement"] += int(mid)
            counts["kills: jvm, the JVM alone"] += int(name in reports.jvm_killed)
            tagged = check_log(path, base, reports, digests, failures)
            check_jvm_rows(session, path, base, tagged, reports, failures)
            if failures:
                break
            counts["kills survived"] += 1
            _debug(f"checked in {time.time() - t0:.1f} s")
            workers.start()
    finally:
        workers.stop_all()
    counts["jvm-level versions committed"] += log_versions(path)[-1] - base
    conflict_counts(reports, counts, "jvm-level")
    return session, path, base, reports


# ---------------------------------------------------------------- the tests
def _kills(env: str, default: int) -> int:
    return int(os.environ.get(env, default))


def _python_run(spark, tmp_path, counts, kills: int):
    import isolde

    failures: list = []
    path, reports = python_kill_loop(tmp_path, kills, counts, failures)
    assert not failures, "\n".join(failures[:20])
    session = isolde.connect(warehouse=str(tmp_path / "wh"), spark=spark)
    try:
        figures = vacuum_and_check(session, f"delta.`{path}`", path, failures)
    finally:
        session.close()
    # every orphan is a killed writer's last statement (its tag is in the file name)
    started, _ = reports.read()
    for f in figures["orphan_files"]:
        tag = os.path.basename(f).split("-")[0] + "-" + os.path.basename(f).split("-")[1]
        if started.get(worker_of(tag), [("", "")])[-1][0] != tag:
            failures.append(f"orphan {f} is not a killed writer's last statement")
    counts["python-level orphans VACUUM removed"] += figures["orphans"]
    counts["python-level files VACUUM deleted"] += figures["deleted"]
    assert not failures, "\n".join(failures[:20])
    assert figures["leased"] == 0 and os.path.exists(os.path.join(path, "NOTES.txt"))


def _jvm_run(spark, tmp_path, counts, kills: int, config: str):
    failures: list = []
    session, path, base, reports = jvm_kill_loop(spark, tmp_path, kills, counts, failures, config)
    try:
        assert not failures, "\n".join(failures[:20])
        first = vacuum_and_check(session, "t", path, failures)
        # a killed writer's lease is dead with its process (executor/catalog/leases.py), so the first VACUUM
        # takes its orphans; a lease still alive would be kept until it expires (7 days), after
        # which the next VACUUM takes exactly what it protected
        aged = age_leases(path)
        second = vacuum_and_check(session, "t", path, failures)
        counts["jvm-level files VACUUM deleted"] += first["deleted"] + second["deleted"]
        counts["jvm-level orphans (never in the log)"] += first["orphans"]
        counts["jvm-level files kept by dead writers' leases"] += first["leased"]
        counts["jvm-level leases left by killed writers"] += aged
        assert not failures, "\n".join(failures[:20])
        assert second["leased"] == 0 and second["deleted"] == first["leased"]
        check_jvm_rows(session, path, base, _tagged_before_vacuum(path, base), reports, failures)
        assert not failures, "\n".join(failures[:20])
    finally:
        session.close()


def _tagged_before_vacuum(path: str, base: int) -> list[tuple[int, str]]:
    """The statements' commits (VACUUM's own START / END commits carry no statement tag)."""
    out = []
    for v in log_versions(path):
        if v > base:
            info = next(a["commitInfo"] for a in read_version(path, v)[1] if "commitInfo" in a)
            if not info["operation"].startswith("VACUUM"):
                out.append((v, info.get("userMetadata")))
    return out


@pytest.mark.spark
@pytest.mark.slow
def test_python_writers_killed(spark, tmp_path, counts):
    _python_run(spark, tmp_path, counts, _kills("ISOLDE_PY_KILLS", 30))


@pytest.mark.spark
@pytest.mark.slow
def test_jvm_writers_killed(spark, tmp_path, counts):
    _jvm_run(spark, tmp_path, counts, _kills("ISOLDE_JVM_KILLS", 3), "dv-WriteSerializable")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.torture
def test_python_writers_killed_long(spark, tmp_path, counts):
    _python_run(spark, tmp_path, counts, _kills("ISOLDE_PY_KILLS", 480))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.torture
@pytest.mark.parametrize("config", sorted(JVM_CONFIGS))
def test_jvm_writers_killed_long(spark, tmp_path, counts, config):
    _jvm_run(spark, tmp_path, counts, _kills("ISOLDE_JVM_KILLS", 15), config)


@pytest.mark.spark
@pytest.mark.slow
def test_writer_killed_between_prepare_and_commit(spark, tmp_path):
    """A statement whose files are staged (and leased) when it is killed: the table is as before,
    and the dead writer's lease (its process is gone: executor/catalog/leases.py) protects nothing, so
    the next VACUUM takes exactly its orphans."""
    import isolde

    warehouse = str(tmp_path / "warehouse")
    s = isolde.connect(warehouse=warehouse, spark=spark)
    try:
        s.execute(W.JVM_DDL.format(parted="", props="'delta.enableDeletionVectors' = 'true'"))
        s.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, {g}, '{t}', {v})" for i, (g, t, v) in
                                                     W.initial_rows().items()))
        path = os.path.join(warehouse, "default", "t")
        before_log = {v: read_version(path, v)[0] for v in log_versions(path)}
        env = dict(os.environ, ISOLDE_JVM="startup", ISOLDE_DRIVER_MEMORY="1g", SPARK_LOCAL_IP="127.0.0.1")
        sql = "UPDATE t SET v = v + 1, tag = 'killed' WHERE grp = 1"  # a data file and a deletion vector
        proc = subprocess.Popen([sys.executable, WORKER, "--prepare-and-die", warehouse, sql], env=env,
                                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
        assert {v: read_version(path, v)[0] for v in log_versions(path)} == before_log
        want = sorted((i, g, t, v) for i, (g, t, v) in W.initial_rows().items())
        assert sorted(tuple(r) for r in s.sql("SELECT id, grp, tag, v FROM t").collect()) == want
        live, ever = log_files(path)
        orphans = {f for f in disk_files(path) - ever if _DATA.match(os.path.basename(f))}
        assert orphans and os.listdir(os.path.join(path, ".isolde-leases"))  # staged files and a lease left
        assert not leased(path)  # ... whose holder is dead
        failures: list = []
        first = vacuum_and_check(s, "t", path, failures)
        assert not failures, failures
        assert first["leased"] == 0 and first["deleted"] == len(orphans) and first["orphan_files"] == orphans
        assert not leased(path)  # the dead lease itself is gone too
        assert sorted(tuple(r) for r in s.sql("SELECT id, grp, tag, v FROM t").collect()) == want
    finally:
        s.close()


# ---------------------------------------------------------------- the checker itself (no Spark)
def _fake_run(tmp_path):
    """A log with three tagged commits by workers p1 (killed) and p2, and their reports."""
    from isolde.executor.log import DeltaLog
    from isolde.executor.log.actions import Metadata

    path = str(tmp_path / "t")
    log = DeltaLog.for_table(path)
    log.start_transaction().commit([Metadata(W.LOG_SCHEMA, (), {})], "CREATE TABLE", user_metadata="create")
    reports = Reports()
    lines = {"p1": ["ready", "start p1-1"], "p2": ["ready", "start p2-1", "start p2-2"]}
    for tag in ("p2-1", "p1-1", "p2-2"):
        _, add = W._write_parquet(path, tag, [len(lines[worker_of(tag)])])
        v = log.start_transaction().commit([add], "WRITE", user_metadata=tag)
        if tag != "p1-1":  # p1 was killed before it reported
            lines[worker_of(tag)].insert(lines[worker_of(tag)].index(f"start {tag}") + 1,
                                         f"ok {tag} {v} {W.version_digest(path, v)} 1")
    for name, text in lines.items():
        reports.outs[name] = str(tmp_path / f"{name}.out")
        with open(reports.outs[name], "w") as fh:
            fh.write("\n".join(text) + "\n")
    reports.killed.add("p1")
    return path, reports


def _rewrite(path: str, old: str, new: str) -> None:
    with open(path) as fh:
        text = fh.read()
    with open(path, "w") as fh:
        fh.write(text.replace(old, new))


def test_the_log_checker_accepts_a_correct_run_and_names_each_anomaly(tmp_path):
    path, reports = _fake_run(tmp_path)
    failures: list = []
    digests: dict = {}
    assert [t for _, t in check_log(path, 0, reports, digests, failures)] == ["p2-1", "p1-1", "p2-2"]
    assert failures == []
    # a committed version that changes afterwards
    _rewrite(os.path.join(path, "_delta_log", f"{1:020d}.json"), '"WRITE"', '"WRITE" ')
    check_log(path, 0, reports, digests, failures)
    assert any("changed after it was first seen" in f for f in failures)
    failures = []  # changed before this parent first saw it: the worker's own hash tells
    check_log(path, 0, reports, {}, failures)
    assert any("reported version 1 with hash" in f for f in failures)
    # an unreported commit that is not the last statement its worker started
    path, reports = _fake_run(tmp_path / "b")
    _rewrite(reports.outs["p1"], "start p1-1\n", "start p1-1\nstart p1-2\n")
    failures = []
    check_log(path, 0, reports, {}, failures)
    assert any("p1-1 committed version 2 unreported" in f for f in failures)
    # a statement that reports a version other than the one its commit has
    path, reports = _fake_run(tmp_path / "c")
    _rewrite(reports.outs["p2"], "ok p2-2 3", "ok p2-2 2")
    failures = []
    check_log(path, 0, reports, {}, failures)
    assert any("p2-2 reported version 2, the log has it at 3" in f for f in failures)
