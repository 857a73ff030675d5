"""A Spark standalone cluster on 127.0.0.1 from the installed pyspark: one master and N workers,
each its own JVM (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``),
so executors run in separate JVMs from the driver while every process sees the same local
files. Started and stopped by the fixture in test_cluster.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


class StandaloneCluster:
    def __init__(self, workdir: str, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.workdir = workdir
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.logs: list[str] = []

    def _env(self) -> dict:
        env = dict(os.environ)
        env.update({"SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                    "SPARK_NO_DAEMONIZE": "1",
                    # no REST submission server (a fixed port 6066 that two clusters would share)
                    "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                    "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=false"})
        return env

    def _start(self, name: str, args: list[str], ready: str, timeout: float) -> None:
        log = os.path.join(self.workdir, f"{name}.log")
        self.logs.append(log)
        out = open(log, "w")
        self.procs.append(subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), *args], env=self._env(),
                                           stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(log) as fh:
                if ready in fh.read():
                    return
            if self.procs[-1].poll() is not None:
                break
            time.sleep(0.3)
        self.stop()
        with open(log) as fh:
            tail = fh.read()[-2000:]
        raise RuntimeError(f"{name} did not start ({ready!r} not in its log):\n{tail}")

    def start(self, timeout: float = 120) -> "StandaloneCluster":
        os.makedirs(self.workdir, exist_ok=True)
        self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                               str(self.port), "--webui-port", str(free_port())], "I have been elected leader", timeout)
        for n in range(self.workers):
            work = os.path.join(self.workdir, f"worker{n}")
            self._start(f"worker{n}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores",
                                       str(self.cores), "--memory", self.memory, "--work-dir", work,
                                       "--webui-port", str(free_port()), self.url],
                        "Successfully registered with master", timeout)
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs = []

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
