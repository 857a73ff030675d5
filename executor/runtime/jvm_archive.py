"""A class-data-sharing (AppCDS) archive of the Spark JVM, built once per machine and Spark.

A fresh Spark JVM spends most of its start loading, parsing and verifying some 15,000 classes
from the JARs of pyspark (the SQL engine, Parquet, Hadoop's file system): gateway, context,
session and first query took 6-7 s on an idle 2-core machine. A dynamic CDS archive (JDK 13+,
``-XX:ArchiveClassesAtExit``) records those classes, already parsed and verified, when a JVM
exits; a later JVM maps the file (``-XX:SharedArchiveFile``) instead: 3.5-4 s, measured by
``benchmarks/startup.py``.

    archive_option() -> "-XX:SharedArchiveFile=..." or ""   (used by runtime/spark.py)
    build(force=False) -> path | None       python -m isolde.executor.runtime.jvm_archive build

The archive lives in ``$ISOLDE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/isolde`` or
``~/.cache/isolde``), outside any clone, named by a key of what the JVM checks it against: the
``java`` binary and the JARs of pyspark (names, sizes, times). One archive serves both JVM
profiles (runtime/spark.py: another collector and JIT level map it as well). A stale or
foreign archive is never used: the key misses, and the JVM itself refuses an archive whose JDK
or class path differ (``-Xshare:auto``: it then loads classes as usual). ``ISOLDE_JVM_ARCHIVE=0``
turns it off.

Building runs the warm-up's statements (runtime/warmup.py) in a child process whose JVM writes
the archive to a temporary file when it exits; the file is renamed into place only after that
JVM has exited, so a reader never maps a half-written archive.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Optional

#: bump when what goes into an archive changes (the workload, the flags it is built with)
FORMAT = 1


def cache_dir() -> str:
    chosen = os.environ.get("ISOLDE_CACHE_DIR")
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "isolde")


def enabled() -> bool:
    return os.environ.get("ISOLDE_JVM_ARCHIVE", "1").strip() not in ("0", "false", "no", "off")


def java_binary() -> Optional[str]:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def spark_jars_dir() -> Optional[str]:
    home = os.environ.get("SPARK_HOME")
    if not home:
        import importlib.util

        spec = importlib.util.find_spec("pyspark")
        if spec is None or not spec.origin:
            return None
        home = os.path.dirname(spec.origin)
    jars = os.path.join(home, "jars")
    return jars if os.path.isdir(jars) else None


def archive_key() -> Optional[str]:
    """A digest of what a JVM checks an archive against, or None when Java or Spark is missing."""
    java, jars = java_binary(), spark_jars_dir()
    if java is None or jars is None:
        return None
    h = hashlib.sha256(f"{FORMAT}|{java}|{os.stat(java).st_mtime_ns}|{jars}".encode())
    for entry in sorted(os.scandir(jars), key=lambda e: e.name):
        st = entry.stat()
        h.update(f"|{entry.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def archive_path() -> Optional[str]:
    key = archive_key()
    return None if key is None else os.path.join(cache_dir(), f"spark-cds-{key}.jsa")


def archive_option() -> str:
    """The JVM option that maps this machine's archive, or "" when there is none (yet)."""
    if not enabled():
        return ""
    try:
        path = archive_path()
    except OSError:
        return ""
    return f"-XX:SharedArchiveFile={path}" if path and os.path.isfile(path) else ""


# ---------------------------------------------------------------------------------- building

def build(force: bool = False, timeout_s: float = 600.0, quiet: bool = False) -> Optional[str]:
    """Build the archive (skipped when it exists); its path, or None when Java / Spark are
    missing or the JVM wrote nothing."""
    from .spark import java_profile_name

    profile = java_profile_name()
    path = archive_path()
    if path is None:
        return None
    if os.path.isfile(path) and not force:
        return path
    os.makedirs(cache_dir(), exist_ok=True)
    _prune()
    began = time.perf_counter()
    tmp = f"{path}.{os.getpid()}.tmp"
    env = dict(os.environ, ISOLDE_JVM_ARCHIVE="0", ISOLDE_JVM=profile)
    try:
        subprocess.run([sys.executable, "-m", "isolde.executor.runtime.jvm_archive", "record", tmp],
                       env=env, check=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL if quiet else None)
        if not os.path.isfile(tmp) or os.path.getsize(tmp) == 0:
            return None
        os.replace(tmp, path)
        with open(f"{path}.json", "w") as fh:
            json.dump({"jars": spark_jars_dir(), "java": java_binary(), "profile": profile,
                       "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
                       "seconds": round(time.perf_counter() - began, 1)}, fh)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def _prune() -> None:
    """Archives of Spark installs that are gone (a removed clone's virtual environment) or
    changed (a clone made again at the same place), and the half-written files of builds that
    were killed (their builder process is gone)."""
    for tmp in glob.glob(os.path.join(cache_dir(), "spark-cds-*.jsa.*.tmp")):
        try:
            pid = int(tmp.rsplit(".", 2)[-2])
            os.kill(pid, 0)  # the builder still runs: its file is not ours to remove
        except ProcessLookupError:
            try:
                os.remove(tmp)
            except OSError:
                pass
        except (ValueError, OSError):
            continue
    current, here = archive_path(), spark_jars_dir()
    for meta in glob.glob(os.path.join(cache_dir(), "spark-cds-*.jsa.json")):
        try:
            with open(meta) as fh:
                jars = json.load(fh).get("jars")
        except (OSError, ValueError):
            continue
        # gone, or this install's own older archive (its JARs or its Java changed since)
        if jars and (not os.path.isdir(jars) or (jars == here and meta[: -len(".json")] != current)):
            for stale in (meta[: -len(".json")], meta):
                try:
                    os.remove(stale)
                except OSError:
                    pass


def _record(target: str) -> None:
    """The child of ``build``: a JVM that loads what isolde's statements load, then exits
    and writes the archive; this process waits for that JVM before it returns."""
    from . import spark as S
    from .warmup import WarmUp

    opts = f"{S.default_conf()['spark.driver.extraJavaOptions']} -XX:ArchiveClassesAtExit={target}"
    session = S.get_spark(None, {"spark.driver.extraJavaOptions": opts})
    warm = WarmUp(session).start()
    warm.wait()
    if warm.error is not None:
        raise SystemExit(f"isolde: the JVM archive's workload failed: {warm.error}")
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    session.stop()
    if proc is None:
        return
    gateway.shutdown()
    # the JVM exits when its stdin closes (PythonGatewayServer), writing the archive first
    if proc.stdin is not None:
        proc.stdin.close()
    proc.wait()


def main(argv: list[str]) -> int:
    if argv[:1] == ["record"] and len(argv) == 2:
        _record(argv[1])
        return 0
    if argv[:1] == ["build"]:
        began = time.perf_counter()
        if not enabled():
            print("isolde: JVM archive turned off (ISOLDE_JVM_ARCHIVE=0)")
            return 0
        path = build(force="--force" in argv, quiet=True)
        if path is None:
            print("isolde: no JVM archive (Java or pyspark not found, or the JVM wrote none)", file=sys.stderr)
            return 1
        print(f"isolde: JVM archive {path} ({os.path.getsize(path) >> 20} MB, {time.perf_counter() - began:.1f} s)")
        return 0
    if argv[:1] == ["path"]:
        print(archive_option() or "(none)")
        return 0
    print("usage: python -m isolde.executor.runtime.jvm_archive build [--force] | path", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
