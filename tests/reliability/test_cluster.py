"""isolde on a Spark standalone cluster (a master and two workers on 127.0.0.1, executors in
their own JVMs): DML, conflicts decided on the driver, and drivers killed mid-statement. The
drivers run as subprocesses (one SparkContext per process); the checks read the table with
isolde's log and delta-rs, no Spark."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pytest

from cluster import StandaloneCluster

pytestmark = pytest.mark.slow
NEEDS_SPARK = True  # a standalone Spark cluster: every test here is marked spark
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster_driver.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with StandaloneCluster(str(tmp_path_factory.mktemp("cluster")), workers=2) as c:
        yield c


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("ISOLDE_JVM", "startup")
    return env


def _rows(path: str, sql: str) -> list:
    from deltalake import DeltaTable, QueryBuilder

    return pa.table(QueryBuilder().register("t", DeltaTable(path)).execute(sql).read_all()).to_pylist()


def test_dml_and_conflicts_on_a_standalone_cluster(cluster, tmp_path):
    warehouse, out = str(tmp_path / "warehouse"), str(tmp_path / "out.json")
    done = subprocess.run([sys.executable, DRIVER, "scenarios", warehouse, cluster.url, out], env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out) as fh:
        got = json.load(fh)
    assert got["master"] == cluster.url and got["executors"] >= 2  # the work ran on the workers' executors
    assert got["update"] == 20 and got["delete"] == 10 and got["merge"] == [5, 5]
    assert got["conflicts"] == {"same row": "ConcurrentDeleteDeleteException", "different rows": "committed",
                                "metadata change": "MetadataChangedException"}
    # 2000 rows - 10 deleted + 5 inserted; ids 0..1980 step 100 'u' except ids 7 ('b'), 8 ('c'), 5 ('w')
    path = os.path.join(warehouse, "default", "t")
    by_delta_rs = {r["v"]: r["n"] for r in _rows(path, "SELECT v, count(*) AS n FROM t GROUP BY v")}
    assert by_delta_rs == {"x": 1962, "u": 20, "m": 10, "w": 1, "b": 1, "c": 1}
    assert sorted(by_delta_rs.items()) == sorted((v, n) for v, n in got["rows"])


def _churn(cluster, warehouse: str, out: str, seed: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, DRIVER, "churn", warehouse, cluster.url, out, str(seed)], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _lines(out: str) -> list:
    try:
        with open(out) as fh:
            return fh.read().splitlines()
    except FileNotFoundError:
        return []


def _kill_after_commits(proc: subprocess.Popen, out: str, commits: int, timeout: float = 300) -> None:
    """SIGKILL the driver (and its JVM) once it reported ``commits`` more commits, mid-statement."""
    start = sum(1 for ln in _lines(out) if ln.startswith("ok "))
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        lines = _lines(out)
        if sum(1 for ln in lines if ln.startswith("ok ")) >= start + commits and lines[-1].startswith("start "):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the driver ended before it was killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _check_table(path: str, out: str) -> int:
    """Replay the log's tagged commits into the counters model; the table must equal it, and
    every commit a driver reported must be in the log under its tag at its version."""
    from isolde.executor.log.delta_log import DeltaLog

    log = DeltaLog.for_table(path)
    latest = log.update().version
    model = {i: 0 for i in range(10)}
    tags = {}
    for entry in sorted(log.history(), key=lambda h: h["version"]):
        tag = entry.get("userMetadata")
        if entry["version"] <= 1:
            continue  # CREATE and the first INSERT
        assert tag, f"version {entry['version']} has no tag: {entry}"
        kind, key, _ = tag.split(":")
        tags[tag] = entry["version"]
        if kind == "inc":
            model[int(key)] += 1
        else:
            model[int(key)] = 0
    reported = [ln.split() for ln in _lines(out) if ln.startswith("ok ")]
    for _, tag, version in reported:
        assert tags.get(tag) == int(version), f"{tag} reported at version {version}, log has {tags.get(tag)}"
    rows = {r["id"]: r["n"] for r in _rows(path, "SELECT id, n FROM t")}
    assert rows == model
    return latest


def test_drivers_killed_mid_statement_leave_the_table_whole(cluster, tmp_path):
    _kill_rounds(cluster, tmp_path, 2)


@pytest.mark.torture
def test_drivers_killed_mid_statement_leave_the_table_whole_long(cluster, tmp_path):
    _kill_rounds(cluster, tmp_path, int(os.environ.get("ISOLDE_CLUSTER_KILLS", "12")))


def _kill_rounds(cluster, tmp_path, rounds: int) -> None:
    warehouse, out = str(tmp_path / "warehouse"), str(tmp_path / "churn.txt")
    path = os.path.join(warehouse, "default", "c")
    for seed in range(1, rounds + 1):
        proc = _churn(cluster, warehouse, out, seed)
        _kill_after_commits(proc, out, commits=2)
        latest = _check_table(path, out)  # after every kill: the table loads and equals the replay
        assert latest >= 1 + 2 * seed
