"""Spark's S3A connector (``s3a://`` tables): its JARs, fetched once per machine, and its settings.

pyspark ships Hadoop's client (``hadoop-client-api-3.5.0.jar``) but not ``hadoop-aws``, the S3A
file system Spark needs to read and write data files on S3. ``fetch()`` resolves, with Maven (which
honours the machine's registry settings), ``org.apache.hadoop:hadoop-aws`` of the Hadoop version
inside pyspark plus the AWS SDK v2 modules S3A loads -- ``s3``, ``sts``, ``s3-transfer-manager`` and
``analyticsaccelerator-s3`` -- at the versions Hadoop's own build names (``hadoop-project``'s
``aws-java-sdk-v2.version``). Not the SDK's all-in-one ``bundle`` JAR that hadoop-aws declares:
that is ~600 MB; the modules are ~16 MB (measured: 35 JARs). JARs pyspark already ships (netty,
httpclient, commons-codec, slf4j) are left out: Spark's own classes win in its class loader anyway.

The JARs go to Maven's home cache (``~/.m2/repository`` or ``$ISOLDE_MAVEN_REPO``) and their list
to ``$ISOLDE_CACHE_DIR`` (``~/.cache/isolde/s3a-jars-hadoop-<version>.txt``): outside the clone,
reused by every clone on the machine. ``spark_jars()`` is that list when it is complete, and the
embedded Spark puts it on its class path (``executor/runtime/spark.py``); ``ISOLDE_S3A=0`` leaves
it off.

Endpoint and credentials: S3A reads the standard AWS chain (environment, profile, instance role)
by itself. For an S3-compatible server (MinIO, moto, ...) ``endpoint_settings`` gives the few
settings it needs, and ``environment_settings`` derives them from ``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL`` -- the same variables isolde's S3 log store (``executor/log/s3_store.py``)
reads, so Spark's data files and isolde's commits go to one server.

    python -m isolde.executor.runtime.s3a fetch     # once per machine (make s3a)
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Mapping, Optional
from xml.etree import ElementTree

from .jvm_archive import cache_dir

#: the SDK modules S3A loads (their own dependencies come with them), beyond hadoop-aws itself
SDK_MODULES = ("s3", "sts", "s3-transfer-manager")
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def enabled() -> bool:
    return os.environ.get("ISOLDE_S3A", "1").strip() not in ("0", "false", "no", "off")


def _pyspark_jars_dir() -> Optional[str]:
    try:
        import pyspark
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    return os.path.join(os.path.dirname(pyspark.__file__), "jars")


def hadoop_version() -> Optional[str]:
    """The Hadoop client version inside the installed pyspark (``hadoop-client-api-X.jar``)."""
    folder = _pyspark_jars_dir()
    for path in sorted(glob.glob(os.path.join(folder or "", "hadoop-client-api-*.jar"))):
        m = re.match(r"hadoop-client-api-(.+)\.jar$", os.path.basename(path))
        if m:
            return m.group(1)
    return None


def maven_repo() -> str:
    return os.environ.get("ISOLDE_MAVEN_REPO") or os.path.join(os.path.expanduser("~"), ".m2", "repository")


def jar_list_path(version: Optional[str] = None) -> Optional[str]:
    version = version or hadoop_version()
    return None if version is None else os.path.join(cache_dir(), f"s3a-jars-hadoop-{version}.txt")


def spark_jars() -> Optional[list[str]]:
    """The S3A JARs for this pyspark, when fetched and all still present (else None)."""
    listing = jar_list_path()
    if listing is None or not os.path.exists(listing):
        return None
    with open(listing, encoding="utf-8") as fh:
        jars = [line.strip() for line in fh if line.strip()]
    return jars if jars and all(os.path.exists(j) for j in jars) else None


def _artifact_name(jar: str) -> str:
    """``netty-codec-http-4.1.126.Final.jar`` -> ``netty-codec-http``."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)?\.jar$", "", os.path.basename(jar))


def _mvn(args: list[str], what: str) -> None:
    cmd = ["mvn", "-q", "-B", *args]
    if "ISOLDE_MAVEN_REPO" in os.environ:
        cmd.append(f"-Dmaven.repo.local={maven_repo()}")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [ln for ln in (done.stdout + done.stderr).splitlines() if "ERROR" in ln]
        raise RuntimeError(f"Could not fetch {what}: `{' '.join(cmd)}` failed: "
                           f"{lines[0] if lines else 'exit ' + str(done.returncode)}")


def _pom(group: str, artifact: str, version: str) -> ElementTree.Element:
    _mvn(["dependency:get", f"-Dartifact={group}:{artifact}:{version}:pom", "-Dtransitive=false"],
         f"{group}:{artifact}:{version}")
    path = os.path.join(maven_repo(), *group.split("."), artifact, version, f"{artifact}-{version}.pom")
    return ElementTree.parse(path).getroot()


def sdk_versions(hadoop: str) -> dict[str, str]:
    """The AWS SDK v2 and analytics-accelerator versions Hadoop ``hadoop`` is built against."""
    props = _pom("org.apache.hadoop", "hadoop-project", hadoop).find("m:properties", _POM_NS)
    wanted = {"sdk": "aws-java-sdk-v2.version", "accelerator": "amazon-s3-analyticsaccelerator-s3.version"}
    out = {}
    for key, name in wanted.items():
        node = props.find(f"m:{name}", _POM_NS) if props is not None else None
        if node is None or not (node.text or "").strip():
            raise RuntimeError(f"hadoop-project {hadoop} names no {name}")
        out[key] = node.text.strip()
    return out


def resolution_pom(hadoop: str, sdk: str, accelerator: str) -> str:
    """A pom whose dependencies are exactly the S3A JARs (hadoop-aws without its bundle)."""
    none = "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
    deps = [f"<dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-aws</artifactId>"
            f"<version>{hadoop}</version>{none}</dependency>",
            f"<dependency><groupId>software.amazon.s3.analyticsaccelerator</groupId>"
            f"<artifactId>analyticsaccelerator-s3</artifactId><version>{accelerator}</version>{none}</dependency>"]
    deps += [f"<dependency><groupId>software.amazon.awssdk</groupId><artifactId>{m}</artifactId>"
             f"<version>{sdk}</version></dependency>" for m in SDK_MODULES]
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            '<groupId>isolde</groupId><artifactId>s3a-jars</artifactId><version>1</version>'
            f'<packaging>pom</packaging><dependencies>{"".join(deps)}</dependencies></project>\n')


def fetch() -> list[str]:
    """Fetch the S3A JARs into Maven's cache (once per machine) and record their list."""
    jars = spark_jars()
    if jars:
        return jars
    hadoop = hadoop_version()
    if hadoop is None:
        raise RuntimeError("No hadoop-client-api JAR in pyspark's jars folder: cannot tell which hadoop-aws fits")
    versions = sdk_versions(hadoop)
    shipped = {_artifact_name(j) for j in glob.glob(os.path.join(_pyspark_jars_dir(), "*.jar"))}
    with tempfile.TemporaryDirectory(prefix="isolde-s3a-") as work:
        with open(os.path.join(work, "pom.xml"), "w", encoding="utf-8") as fh:
            fh.write(resolution_pom(hadoop, versions["sdk"], versions["accelerator"]))
        out = os.path.join(work, "classpath.txt")
        _mvn(["-f", os.path.join(work, "pom.xml"), "dependency:build-classpath", f"-Dmdep.outputFile={out}"],
             f"hadoop-aws {hadoop} and AWS SDK {versions['sdk']}")
        with open(out, encoding="utf-8") as fh:
            resolved = [p for p in fh.read().strip().split(os.pathsep) if p]
    if "jcl-over-slf4j" in shipped:  # pyspark's bridge provides commons-logging's classes
        shipped.add("commons-logging")
    jars = [p for p in resolved if _artifact_name(p) not in shipped]
    listing = jar_list_path(hadoop)
    os.makedirs(os.path.dirname(listing), exist_ok=True)
    tmp = f"{listing}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("\n".join(jars) + "\n")
    os.replace(tmp, listing)
    return jars


# ---------------------------------------------------------------------------- settings
def endpoint_settings(endpoint: str, *, region: Optional[str] = None, access_key: Optional[str] = None,
                      secret_key: Optional[str] = None, bucket: Optional[str] = None) -> dict[str, str]:
    """Hadoop settings (``fs.s3a.*``) for an S3-compatible server at ``endpoint``: path-style
    addressing, TLS as the URL says, a region (the SDK signs with one), static keys when given.
    ``bucket``: scope them to that bucket (``fs.s3a.bucket.<bucket>.*``), leaving others on AWS."""
    prefix = f"fs.s3a.bucket.{bucket}." if bucket else "fs.s3a."
    out = {
        "endpoint": endpoint,
        "endpoint.region": region or "us-east-1",
        "path.style.access": "true",
        "connection.ssl.enabled": "true" if endpoint.lower().startswith("https://") else "false",
        # S3-compatible servers often lack the SDK's newer integrity headers (CRC32 checksums)
        "checksum.validation": "false",
        # a refused or unreachable server fails the statement in seconds, not after minutes
        "attempts.maximum": "3",
        "retry.limit": "3",
    }
    if access_key and secret_key:
        out.update({"access.key": access_key, "secret.key": secret_key,
                    "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"})
    return {prefix + k: v for k, v in out.items()}


def environment_settings(env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """``endpoint_settings`` from ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (nothing when
    neither is set: S3A then talks to AWS). Never the keys: S3A's default credential chain reads
    ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` from the environment itself, and a key in
    Spark's settings would be one more place a secret can be printed from."""
    env = os.environ if env is None else env
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if not endpoint:
        return {}
    return endpoint_settings(endpoint, region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"))


def spark_conf(user_conf: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """What the embedded Spark adds for S3A: the JARs (beside any ``spark.jars`` the user gave)
    and the environment's endpoint settings (the user's ``spark.hadoop.fs.s3a.*`` win)."""
    user_conf = user_conf or {}
    jars = spark_jars() if enabled() else None
    if not jars:
        return {}
    given = [j for j in str(user_conf.get("spark.jars") or "").split(",") if j]
    out = {"spark.jars": ",".join(given + [j for j in jars if j not in given])}
    for key, value in environment_settings().items():
        if f"spark.hadoop.{key}" not in user_conf:
            out[f"spark.hadoop.{key}"] = value
    return out


def apply_hadoop_settings(spark, settings: Mapping[str, str]) -> None:
    """Set ``fs.s3a.*`` settings on a running session (they take effect for file systems made
    afterwards: per bucket, S3A caches its client)."""
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in settings.items():
        hadoop_conf.set(key, value)


def missing_connector_message(path: str) -> str:
    return (f"{path}: Spark has no S3A connector (hadoop-aws) on its class path. Fetch it once per "
            "machine with `make s3a` (or `python -m isolde.executor.runtime.s3a fetch`) and start isolde "
            "again; ISOLDE_S3A=0 turns it off.")


if __name__ == "__main__":
    if sys.argv[1:] == ["fetch"]:
        t0 = time.monotonic()
        fetched = fetch()
        size = sum(os.path.getsize(j) for j in fetched)
        print(f"S3A for Hadoop {hadoop_version()}: {len(fetched)} JARs, {size / 1e6:.1f} MB, "
              f"listed in {jar_list_path()} ({time.monotonic() - t0:.1f} s)")
    elif sys.argv[1:] == ["path"]:
        print("\n".join(spark_jars() or []))
    else:
        sys.exit("usage: python -m isolde.executor.runtime.s3a fetch|path")
