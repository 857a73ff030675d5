"""The embedded Spark's JVM flags (no Spark is started): the throughput profile keeps the
optimising JIT, the start-up profile stops at C1, and a wrong name is refused by name."""

from __future__ import annotations

import pytest

from isolde.executor.runtime import spark


@pytest.mark.parametrize("profile, has, lacks", [
    (None, "-XX:+UseParallelGC", "TieredStopAtLevel"),
    ("throughput", "-XX:+UseParallelGC", "TieredStopAtLevel"),
    ("startup", "-XX:TieredStopAtLevel=1", "ParallelGC"),
    (" Startup ", "-XX:TieredStopAtLevel=1", "ParallelGC"),
])
def test_profile_flags_reach_driver_and_executor(monkeypatch, profile, has, lacks):
    if profile is None:
        monkeypatch.delenv("ISOLDE_JVM", raising=False)
    else:
        monkeypatch.setenv("ISOLDE_JVM", profile)
    conf = spark.default_conf("local[2]")
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        assert has in conf[key] and lacks not in conf[key] and "log4j2.configurationFile" in conf[key]


def test_unknown_profile_is_refused(monkeypatch):
    monkeypatch.setenv("ISOLDE_JVM", "turbo")
    with pytest.raises(ValueError, match="ISOLDE_JVM must be one of startup, throughput, not 'turbo'"):
        spark.default_conf()


@pytest.mark.parametrize("physical_gib, expected", [
    (2, "1024m"),   # a quarter would be 512 MiB: Spark's own default of 1 GiB is the floor
    (23, "5888m"),  # this project's machines
    (64, "8192m"),  # capped: a bigger heap only makes full collections longer
])
def test_heap_is_a_quarter_of_memory_within_bounds(monkeypatch, physical_gib, expected):
    monkeypatch.delenv("ISOLDE_DRIVER_MEMORY", raising=False)
    assert spark.driver_memory(physical_gib << 30) == expected


def test_heap_setting_from_the_environment_wins(monkeypatch):
    monkeypatch.setenv("ISOLDE_DRIVER_MEMORY", "3g")
    assert spark.driver_memory(64 << 30) == "3g"


@pytest.mark.parametrize("profile", ["startup", "throughput"])
def test_code_cache_holds_sparks_generated_code(monkeypatch, profile):
    """C1 alone defaults to a 48 MB code cache, which Spark's generated classes filled within a
    minute of OPTIMIZE and DML in a loop (the compiler turned off, then a VirtualMachineError).
    Both profiles get at least 240 MB, read from the JVM itself (no Spark)."""
    import re
    import shutil
    import subprocess

    java = shutil.which("java")
    if java is None:
        pytest.skip("no `java` on PATH to print the JVM's flags")
    monkeypatch.setenv("ISOLDE_JVM", profile)
    flags = spark.java_options().split()
    out = subprocess.run([java, *flags, "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True,
                         timeout=60).stdout
    size = int(re.search(r"\bReservedCodeCacheSize\s*=\s*(\d+)", out).group(1))
    assert size >= 240 << 20, f"{profile}: code cache {size >> 20} MB"
