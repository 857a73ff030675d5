"""The embedded Spark's JVM flags (no Spark is started): the throughput profile keeps the
optimising JIT, the start-up profile stops at C1, and a wrong name is refused by name."""

from __future__ import annotations

import pytest

from isolde.executor import spark


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
