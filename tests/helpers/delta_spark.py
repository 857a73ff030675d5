"""The reference engine: Delta Lake on Spark (``delta-spark``), set up for the tests and benchmarks.

isolde is checked against the engine its users already run. The reference lives in a second
virtual environment (``make reference``: ``.venv-ref`` with ``pyspark==4.2.0``, ``delta-spark``
and isolde itself); its JARs are fetched once per machine with Maven into Maven's home cache
(``~/.m2/repository``, or ``$ISOLDE_MAVEN_REPO``), outside the clone, so every fresh clone on the
machine reuses them. Spark's own Ivy resolution is not used: it does not honour the machine's
Maven settings, and ``mvn`` does.

    python -m tests.helpers.delta_spark fetch      # mvn dependency:get, newest served version
    delta_jars() -> [delta-spark jar, delta-storage jar]
    delta_conf() -> the Spark settings of a session with Delta's SQL extension and catalog

Version: the pip package is ``delta-spark==4.4.1``, whose ``configure_spark_with_delta_pip`` asks
for ``io.delta:delta-spark_4.2_2.13:4.4.1``. Maven Central did not serve 4.4.1 when this was
written (``Could not find artifact io.delta:delta-spark_4.2_2.13:jar:4.4.1 in central``), so
the nearest served version, 4.4.0, is taken; the Python package only wraps the JVM classes.
"""

from __future__ import annotations

import os
import subprocess
import sys

#: newest first: the pip package's own version, then the nearest one Maven Central serves
DELTA_VERSIONS = ("4.4.1", "4.4.0")
SCALA = "2.13"


def spark_minor() -> str:
    import pyspark

    return ".".join(pyspark.__version__.split(".")[:2])


def maven_repo() -> str:
    return os.environ.get("ISOLDE_MAVEN_REPO") or os.path.join(os.path.expanduser("~"), ".m2", "repository")


def _artifacts(version: str) -> list[tuple[str, str, str]]:
    return [("io.delta", f"delta-spark_{spark_minor()}_{SCALA}", version), ("io.delta", "delta-storage", version)]


def _jar_path(group: str, artifact: str, version: str) -> str:
    return os.path.join(maven_repo(), *group.split("."), artifact, version, f"{artifact}-{version}.jar")


def _cached(version: str) -> list[str] | None:
    paths = [_jar_path(*a) for a in _artifacts(version)]
    return paths if all(os.path.exists(p) for p in paths) else None


def delta_version() -> str | None:
    """The newest Delta version whose JARs are in the cache (None: run ``make reference``)."""
    for version in DELTA_VERSIONS:
        if _cached(version):
            return version
    return None


def delta_jars() -> list[str]:
    version = delta_version()
    if version is None:
        raise RuntimeError(f"The Delta Lake JARs are not in {maven_repo()}: run `make reference` "
                           "(it fetches them with `python -m tests.helpers.delta_spark fetch`).")
    return _cached(version)


def fetch() -> str:
    """Fetch the JARs of the newest served version into the Maven cache; return the version."""
    errors = []
    for version in DELTA_VERSIONS:
        if _cached(version):
            return version
        failed = None
        for group, artifact, v in _artifacts(version):
            if os.path.exists(_jar_path(group, artifact, v)):
                continue
            cmd = ["mvn", "-q", "-B", "dependency:get", f"-Dartifact={group}:{artifact}:{v}", "-Dtransitive=false"]
            if "ISOLDE_MAVEN_REPO" in os.environ:
                cmd.append(f"-Dmaven.repo.local={maven_repo()}")
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                lines = [ln for ln in (done.stdout + done.stderr).splitlines() if "ERROR" in ln]
                failed = f"{' '.join(cmd)}: {lines[0] if lines else done.returncode}"
                break
        if failed is None and _cached(version):
            return version
        errors.append(failed)
    raise RuntimeError("Could not fetch the Delta Lake JARs:\n  " + "\n  ".join(e for e in errors if e))


def delta_conf() -> dict:
    """Spark settings for a session that is Delta's (extension + catalog) and isolde's at once."""
    return {
        "spark.jars": ",".join(delta_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Delta replays a log in 50 tasks by default; the tests' logs are small
        "spark.databricks.delta.snapshotPartitions": "2",
    }


def delta_session(conf: dict | None = None):
    """The process's SparkSession with Delta's extension (isolde's start-up flags as well)."""
    from isolde.executor.runtime.spark import get_spark

    return get_spark(conf={**delta_conf(), **(conf or {})})


if __name__ == "__main__":
    if sys.argv[1:] == ["fetch"]:
        chosen = fetch()
        note = "" if chosen == DELTA_VERSIONS[0] else f" ({DELTA_VERSIONS[0]} is not served: nearest taken)"
        print(f"Delta Lake {chosen} for Spark {spark_minor()}{note}: {', '.join(delta_jars())}")
    else:
        sys.exit("usage: python -m tests.helpers.delta_spark fetch")
