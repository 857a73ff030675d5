"""The Spark JVM's class-data-sharing archive (executor/runtime/jvm_archive.py).

Unit part (no JVM): the key follows what the JVM checks an archive against, the option is
given only for an existing archive of this install, archives of removed installs are pruned.
Spark part: ``build`` writes an archive that a JVM started by ``get_spark`` maps with
``-Xshare:on`` (which makes the JVM refuse to start rather than silently run without it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from isolde.executor.runtime import jvm_archive
from isolde.executor.runtime import spark as spark_module


@pytest.fixture
def install(tmp_path, monkeypatch):
    """A stand-in Java and Spark install, and an empty cache folder."""
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    (java_home / "bin" / "java").write_text("#!/bin/sh\n")
    spark_home = tmp_path / "spark"
    (spark_home / "jars").mkdir(parents=True)
    for name in ("spark-core.jar", "spark-sql.jar"):
        (spark_home / "jars" / name).write_bytes(b"x" * 10)
    monkeypatch.setenv("JAVA_HOME", str(java_home))
    monkeypatch.setenv("SPARK_HOME", str(spark_home))
    monkeypatch.setenv("ISOLDE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ISOLDE_JVM_ARCHIVE", raising=False)
    return tmp_path


def test_key_is_stable_and_follows_the_jars_and_the_java(install):
    first = jvm_archive.archive_key()
    assert first == jvm_archive.archive_key() and len(first) == 20
    jar = install / "spark" / "jars" / "spark-sql.jar"
    jar.write_bytes(b"y" * 11)  # another Spark build: another archive
    second = jvm_archive.archive_key()
    assert second != first
    java = install / "jdk" / "bin" / "java"
    os.utime(java, ns=(1, 1))  # another JDK install at the same place
    assert jvm_archive.archive_key() != second


def test_no_key_without_java_or_spark(install, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(install / "nowhere"))
    assert jvm_archive.archive_key() is None and jvm_archive.archive_option() == ""


@pytest.mark.parametrize("exists, setting, expected", [
    (False, None, False),   # not built yet
    (True, None, True),
    (True, "1", True),
    (True, "0", False),     # turned off
    (True, "off", False),
])
def test_option_only_for_an_existing_archive(install, monkeypatch, exists, setting, expected):
    path = jvm_archive.archive_path()
    if exists:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "wb").close()
    if setting is not None:
        monkeypatch.setenv("ISOLDE_JVM_ARCHIVE", setting)
    option = jvm_archive.archive_option()
    assert option == (f"-XX:SharedArchiveFile={path}" if expected else "")
    # and the embedded Spark's JVM flags carry it
    monkeypatch.setenv("ISOLDE_JVM", "throughput")
    flags = spark_module.java_options()
    assert (option in flags) if expected else ("SharedArchiveFile" not in flags)


def test_prune_removes_archives_of_installs_gone_or_changed(install):
    cache = install / "cache"
    cache.mkdir()
    here = str(install / "spark" / "jars")
    for key, jars in (("gone", str(install / "removed-clone" / "jars")), ("kept", here), ("older", here),
                      ("other", str(install / "jdk"))):
        (cache / f"spark-cds-{key}.jsa").write_bytes(b"a")
        (cache / f"spark-cds-{key}.jsa.json").write_text(json.dumps({"jars": jars}))
    current = jvm_archive.archive_path()  # this install's archive as it is now is "kept"
    os.replace(cache / "spark-cds-kept.jsa", current)
    os.replace(cache / "spark-cds-kept.jsa.json", current + ".json")
    kept = os.path.basename(current)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid no process has now: a killed build's leftover
    (cache / f"{kept}.{dead.pid}.tmp").write_bytes(b"half")
    (cache / f"{kept}.{os.getpid()}.tmp").write_bytes(b"being written")  # a live builder's
    jvm_archive._prune()
    # removed: the gone install's, this install's older one, the dead builder's half file
    assert sorted(os.listdir(cache)) == sorted([kept, f"{kept}.json", f"{kept}.{os.getpid()}.tmp",
                                                "spark-cds-other.jsa", "spark-cds-other.jsa.json"])


@pytest.mark.spark
@pytest.mark.slow
def test_a_built_archive_is_mapped_by_the_embedded_jvm(tmp_path):
    """~40 s: a JVM runs the warm-up's statements and writes the archive at its exit."""
    env = dict(os.environ, ISOLDE_CACHE_DIR=str(tmp_path / "cache"), ISOLDE_JVM="startup", ISOLDE_DRIVER_MEMORY="1g",
               SPARK_LOCAL_IP="127.0.0.1")
    env.pop("ISOLDE_JVM_ARCHIVE", None)
    built = subprocess.run([sys.executable, "-m", "isolde.executor.runtime.jvm_archive", "build"], env=env,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    archives = [f for f in os.listdir(tmp_path / "cache") if f.endswith(".jsa")]
    assert len(archives) == 1 and os.path.getsize(tmp_path / "cache" / archives[0]) > 20 << 20
    meta = json.loads((tmp_path / "cache" / (archives[0] + ".json")).read_text())
    assert meta["jars"] and os.path.isdir(meta["jars"])
    # a fresh JVM with -Xshare:on: it fails to start unless the archive maps
    code = textwrap.dedent("""
        from isolde.executor.runtime import spark as S
        opts = S.default_conf()["spark.driver.extraJavaOptions"] + " -Xshare:on"
        spark = S.get_spark(None, {"spark.driver.extraJavaOptions": opts})
        args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
        assert spark.range(3).count() == 3
        print([a for a in args if a.startswith("-XX:SharedArchiveFile=")])
    """)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert archives[0] in run.stdout
    # a second build finds it and does nothing
    again = subprocess.run([sys.executable, "-m", "isolde.executor.runtime.jvm_archive", "build"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and archives[0] in again.stdout
