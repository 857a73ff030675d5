"""The bank workload (bank.py) with its writers in separate OS processes, each its own Spark JVM
(bank_process.py), and a reader in this process reading all along; the history is checked by
the same checker as the thread version, plus the log's own word: every version after the
set-up is one tagged statement that reported exactly that version.

Processes are heavy on 2 cores: 3 writers for ~20 s in ``make test`` (ISOLDE_BANK_SECONDS);
``make torture`` races 4 for ISOLDE_TORTURE_SECONDS (120) under four table setups.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import bank as B
from isolde.errors import CONFLICT_EXCEPTIONS

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WORKER = os.path.join(os.path.dirname(__file__), "bank_process.py")
CONFLICT_NAMES = {cls.__name__ for cls in CONFLICT_EXCEPTIONS}
SHORT = B.BankConfig(partitioned=False, deletion_vectors=True, isolation="WriteSerializable", row_level="auto")
LONG = [
    B.BankConfig(partitioned=False, deletion_vectors=True, isolation="Serializable", row_level="auto"),
    B.BankConfig(partitioned=True, deletion_vectors=True, isolation="WriteSerializable", row_level="always"),
    B.BankConfig(partitioned=False, deletion_vectors=False, isolation="WriteSerializable", row_level="off"),
    B.BankConfig(partitioned=True, deletion_vectors=False, isolation="Serializable", row_level="auto"),
]


def _lines(path: str) -> list[str]:
    try:
        with open(path) as fh:
            return fh.read().split("\n")[:-1]
    except FileNotFoundError:
        return []


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def _tags_by_version(path: str, base: int) -> dict:
    """version -> the userMetadata tag of its commit, read through the table's log store (a
    local folder or S3)."""
    from isolde.executor.log.store import store_for_path

    store = store_for_path(path)
    out = {}
    for status in store.list_from(f"{path}/_delta_log/{base + 1:020d}"):
        name = status.path.rsplit("/", 1)[1]
        if name.endswith(".json") and name[:20].isdigit() and int(name[:20]) > base:
            lines = store.read(status.path).decode().splitlines()
            info = [json.loads(line)["commitInfo"] for line in lines if '"commitInfo"' in line]
            out[int(name[:20])] = info[0].get("userMetadata") if len(info) == 1 else None
    return out


def history_from_reports(config: B.BankConfig, base: int, outs: list[str], tags: dict) -> B.History:
    """The History the checker reads, from the workers' reports: each worker's statements are
    regenerated from its seed (and must be the SQL it reported running)."""
    history = B.History(config, base_version=base)
    reported: dict[str, int] = {}
    for n, out in enumerate(outs):
        rng = random.Random(B.writer_seed(config, n))
        ops = {}
        for line in _lines(out):
            kind, _, rest = line.partition(" ")
            if kind == "start":
                tag, _, sql = rest.partition(" ")
                op = B.random_op(rng, "bank")
                if op.sql != sql:
                    history.violations.append(f"worker {n} ran {sql}, its seed says {op.sql}")
                ops[tag] = op
            elif kind == "ok":
                tag, version, affected = rest.split(" ")
                history.record(int(version), int(affected), ops[tag])
                reported[tag] = int(version)
            elif kind == "conflict":
                tag, name = rest.split(" ")
                if name in CONFLICT_NAMES:
                    history.conflicts[name] += 1
                else:
                    history.errors.append((ops[tag].sql, f"unnamed conflict {name}"))
            elif kind == "error":
                tag, _, err = rest.partition(" ")
                history.errors.append((ops[tag].sql, err))
    for version, tag in tags.items():  # the log's word: the statement tagged there reported it
        if tag is None or reported.get(tag) != version:
            history.violations.append(f"version {version} is tagged {tag!r}, which reported "
                                      f"{reported.get(tag)}")
    return history


def run_processes(spark, tmp_path, config: B.BankConfig, seconds: float, writers: int,
                  location: str | None = None, storage_options: dict | None = None) -> tuple:
    """Race ``writers`` processes for ``seconds`` with a reader here; returns (history, latest,
    isolde's rows, delta-rs's rows). ``location``: the table lives there (``s3a://...``; the
    writers find it through the shared warehouse's registration and reach S3 through the AWS
    environment they inherit)."""
    import isolde

    warehouse = str(tmp_path / "warehouse")
    s = isolde.connect(warehouse=warehouse, spark=spark)
    base = B.set_up(s, config, location=location)
    env = dict(os.environ, ISOLDE_JVM="startup", ISOLDE_DRIVER_MEMORY="1g", PYTHONUNBUFFERED="1",
               SPARK_LOCAL_IP="127.0.0.1")
    stop = str(tmp_path / "stop")
    outs = [str(tmp_path / f"writer{n}.out") for n in range(writers)]
    procs = [subprocess.Popen([sys.executable, WORKER, warehouse, config.name, str(n), outs[n], stop], env=env,
                              start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=open(str(tmp_path / f"writer{n}.err"), "w")) for n in range(writers)]
    reads: list = []
    reader_errors: list = []
    done = threading.Event()

    def reader():
        try:
            while not done.is_set():
                reads.append(B.read_balances(s))
        except BaseException as e:  # noqa: BLE001 - a failed read is a violation of the run
            reader_errors.append(("reader", repr(e)))

    watcher = threading.Thread(target=reader)
    try:
        _wait(lambda: all("ready" in _lines(o) or p.poll() is not None for o, p in zip(outs, procs)), 300,
              "the writers' Spark sessions")
        watcher.start()
        time.sleep(seconds)
        open(stop, "w").close()
        for n, proc in enumerate(procs):
            code = proc.wait(300)
            assert code == 0, open(str(tmp_path / f"writer{n}.err")).read()[-3000:] + "\n".join(_lines(outs[n])[-3:])
    finally:
        done.set()
        if watcher.is_alive():
            watcher.join()
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
    path = location or os.path.join(warehouse, "default", "bank")
    history = history_from_reports(config, base, outs, _tags_by_version(path, base))
    history.reads.extend(reads)
    history.errors.extend(reader_errors)
    try:
        latest, final, other = B.final_state(s, path.replace("s3a://", "s3://"), storage_options=storage_options)
    finally:
        s.close()
    return history, latest, final, other


def _run_and_check(spark, tmp_path, config, seconds, writers, summary, **where):
    started = time.time()
    history, latest, final, other = run_processes(spark, tmp_path, config, seconds, writers, **where)
    violations = B.check(history, latest, final, other)
    on = " on S3" if where.get("location") else ""
    summary.append({"name": f"processes x{writers} {config.name}{on}", "seconds": time.time() - started,
                    "committed": len(history.committed), "conflicts": history.conflicts,
                    "reads": len(history.reads), "violations": violations})
    assert not violations, "\n".join(violations[:20])
    # the run was a race: statements committed and the reader read throughout
    assert len(history.committed) >= writers and history.reads


def test_bank_processes_invariants_hold(spark, tmp_path, summary):
    _run_and_check(spark, tmp_path, SHORT, float(os.environ.get("ISOLDE_BANK_SECONDS", "20")), 3, summary)


@pytest.mark.torture
@pytest.mark.parametrize("config", LONG, ids=lambda c: c.name)
def test_bank_processes_invariants_hold_long(spark, tmp_path, config, summary):
    _run_and_check(spark, tmp_path, config, float(os.environ.get("ISOLDE_TORTURE_SECONDS", "120")), 4, summary)


# ------------------------------------------------------------------ the same race on S3
@pytest.fixture(scope="module")
def s3_bank():
    """A moto S3 server (tests/helpers/s3_server.py) and the S3A connector, or a skip naming what
    is missing (a failure under ISOLDE_S3A_REQUIRED=1)."""
    from isolde.executor.runtime import s3a
    from tests.helpers.s3_server import moto_s3

    if not s3a.spark_jars():
        if os.environ.get("ISOLDE_S3A_REQUIRED") == "1":
            pytest.fail("The S3A connector's JARs are not fetched (make s3a) although ISOLDE_S3A_REQUIRED=1")
        pytest.skip("the S3A connector's JARs (hadoop-aws + AWS SDK v2) are not fetched: run `make s3a`")
    with moto_s3("bank") as env:
        yield env


def _on_s3(spark, env) -> dict:
    """The table's S3 location, delta-rs's options for it; this process's Spark pointed at the server."""
    import uuid

    from isolde.executor.runtime import s3a

    from tests.helpers.s3_server import require_s3a_spark

    require_s3a_spark(spark)
    s3a.apply_hadoop_settings(spark, s3a.endpoint_settings(
        env["AWS_ENDPOINT_URL"], access_key=env["AWS_ACCESS_KEY_ID"], secret_key=env["AWS_SECRET_ACCESS_KEY"],
        bucket="bank"))
    options = {"AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"], "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
               "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"], "AWS_REGION": "us-east-1",
               "AWS_ALLOW_HTTP": "true"}
    return {"location": f"s3a://bank/{uuid.uuid4().hex[:8]}/bank", "storage_options": options}


def test_bank_processes_on_s3_invariants_hold(spark, tmp_path, s3_bank, summary):
    """Writers in separate processes (each its own JVM) racing on one s3a table: every commit goes
    through S3's conditional PUT, none is lost or doubled, the balances add up in every read."""
    _run_and_check(spark, tmp_path, SHORT, float(os.environ.get("ISOLDE_BANK_SECONDS", "20")), 3, summary,
                   **_on_s3(spark, s3_bank))


@pytest.mark.torture
def test_bank_processes_on_s3_invariants_hold_long(spark, tmp_path, s3_bank, summary):
    _run_and_check(spark, tmp_path, LONG[1], float(os.environ.get("ISOLDE_TORTURE_SECONDS", "120")), 4, summary,
                   **_on_s3(spark, s3_bank))
