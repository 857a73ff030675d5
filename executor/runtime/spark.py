"""SparkSession start-up: one session per process, started with the fast, quiet flags that
NOTES.md measured (cold start ~3.5-4 s instead of ~7-8 s).

    get_spark(master=None, conf=None) -> SparkSession

``master`` defaults to ``$ISOLDE_SPARK_MASTER`` or ``local[*]``. ``conf`` entries override
the defaults. A second call returns the same session (its ``conf`` is applied to the
runtime SQL conf where Spark allows it). Set ``ISOLDE_SPARK_STDERR=1`` to keep the JVM's
stderr on the terminal (by default it goes to a log file, which hides the
"Using incubator modules" line and any start-up noise; see ``jvm_log_path()``).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import sys
import tempfile
import threading
from typing import Callable, Mapping, Optional

from . import s3a

_LOCK = threading.Lock()
_SPARK = None
_JVM_LOG: Optional[str] = None

LOG4J2_PROPERTIES = """\
# isolde: quiet Spark logs (root level warn; chatty loggers at error)
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativeloader.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativeloader.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.hadoopparquet.name = parquet
logger.hadoopparquet.level = error
logger.shutdown.name = org.apache.spark.util.ShutdownHookManager
logger.shutdown.level = error
logger.blockmgr.name = org.apache.spark.storage.BlockManager
logger.blockmgr.level = error
logger.sparkenv.name = org.apache.spark.SparkEnv
logger.sparkenv.level = error
logger.taskset.name = org.apache.spark.scheduler.TaskSetManager
logger.taskset.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = error
logger.sqlconf.name = org.apache.spark.sql.internal.SQLConf
logger.sqlconf.level = error
# "RDD n was locally checkpointed, its lineage has been truncated": a MERGE checkpoints its
# first pass on purpose, and the line came once per MERGE
logger.mappartitions.name = org.apache.spark.rdd.MapPartitionsRDD
logger.mappartitions.level = error
"""

# The JVM flags of the embedded Spark. "throughput" (the default) keeps the optimising JIT
# (C2) and a parallel collector: a 10M-row rewrite takes 5 s instead of 10 s, for ~0.7 s
# more start-up. "startup" stops at the quick C1 JIT with a serial collector: a session and
# its first query ~1 s sooner, for the test suite and short scripts (ISOLDE_JVM=startup).
# C1 alone gets a 48 MB code cache by default, which Spark's generated classes filled within a
# minute of OPTIMIZE / DML in a loop ("CodeCache is full. Compiler has been disabled", then
# now and then a VirtualMachineError that stopped the SparkContext): the startup profile
# reserves the 240 MB the optimising JIT gets (address space; committed as it is used).
JAVA_PROFILES = {
    "throughput": "-XX:+UseParallelGC -XX:-UsePerfData",
    "startup": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:-UsePerfData",
}
#: Catalyst analyses and optimises plans recursively: a generated predicate of thousands of
#: conditions overflowed the default 1 MB thread stack (StackOverflowError, and once the whole
#: JVM). 64 MB is address space reserved per thread, used only as deep as a plan goes.
THREAD_STACK = "-Xss64m"
#: Spark's whole-stage code generation can emit one Java method over HotSpot's 8,000-byte limit
#: for JIT compilation (a Project chain such as OPTIMIZE ZORDER's range ids and curve keys);
#: such a method then runs interpreted, 10-25x slower. Compile them anyway.
JIT_HUGE_METHODS = "-XX:-DontCompileHugeMethods"


def java_profile_name() -> str:
    profile = os.environ.get("ISOLDE_JVM", "throughput").strip().lower()
    if profile not in JAVA_PROFILES:
        raise ValueError(f"ISOLDE_JVM must be one of {', '.join(sorted(JAVA_PROFILES))}, not {profile!r}.")
    return profile


def java_options() -> str:
    """The profile's flags, and the class archive of this Spark install once built
    (executor/runtime/jvm_archive.py: a cold JVM ~40% sooner up)."""
    from .jvm_archive import archive_option

    return f"{JAVA_PROFILES[java_profile_name()]} {archive_option()}".rstrip()


# The embedded JVM's heap. Spark's default (1 GiB) made a 10M-row MERGE spend ~1.1 s of its
# 7 s in stop-the-world collections (5 full GCs: each writing task buffers a row group of up
# to 128 MB); at 4 GiB 0.5 s, and a plain rewrite 0.8 -> 0.3 s. So: a quarter of the
# machine's memory, between 1 and 8 GiB. ISOLDE_DRIVER_MEMORY, SPARK_DRIVER_MEMORY or a
# spark.driver.memory setting (spark-defaults.conf, or ``conf=``) decide instead.
DRIVER_MEMORY_MIN_MB, DRIVER_MEMORY_MAX_MB = 1024, 8192


def driver_memory(physical_bytes: Optional[int] = None) -> str:
    """``spark.driver.memory`` for the embedded JVM, e.g. ``"5888m"``."""
    chosen = os.environ.get("ISOLDE_DRIVER_MEMORY", "").strip()
    if chosen:
        return chosen
    if physical_bytes is None:
        try:
            physical_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, OSError, ValueError):
            physical_bytes = 0
    quarter_mb = (physical_bytes // 4) >> 20
    return f"{min(max(quarter_mb, DRIVER_MEMORY_MIN_MB), DRIVER_MEMORY_MAX_MB)}m"


def log4j2_config_path() -> str:
    """Write (once) the log4j2 properties file to the temp dir and return its path."""
    digest = hashlib.sha1(LOG4J2_PROPERTIES.encode()).hexdigest()[:10]
    path = os.path.join(tempfile.gettempdir(), f"isolde-log4j2-{digest}.properties")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(LOG4J2_PROPERTIES)
        os.replace(tmp, path)
    return path


#: Spark's own catalog folder inside an isolde warehouse (a hidden name: never a database)
SPARK_WAREHOUSE_DIR = ".spark-catalog"


def default_conf(master: Optional[str] = None) -> dict:
    java_opts = f"{java_options()} {THREAD_STACK} {JIT_HUGE_METHODS} -Dlog4j2.configurationFile=file:{log4j2_config_path()}"
    return {
        "spark.master": master or os.environ.get("ISOLDE_SPARK_MASTER") or "local[*]",
        "spark.app.name": "isolde",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        # scans split into at least 4 tasks per core: Spark packs two 50 MB files into one
        # 128 MB split, so 10 files made 5 tasks and the last wave ran on one core of two
        # (a 10M-row UPDATE's scan stage 1.77 -> 1.56 s, DELETE 0.60 -> 0.44 s)
        "spark.sql.files.minPartitionNum": str(4 * max(1, os.cpu_count() or 1)),
        "spark.default.parallelism": "2",
        # Spark sizes its sort / shuffle / aggregation pages from the heap: 64 MB here, taken by
        # every task that sorts even 9k rows (a MERGE's bitmap pass: 11 tasks, 700 MB). Freed
        # large arrays filled the old generation: a full collection every few statements. With
        # 2 MB pages, six rounds of the 10M-row UPDATE / DELETE / MERGE spent 0.95-1.09 s in
        # collections per six MERGEs, now 0.34-0.50 s; mean UPDATE 1.65 -> 1.52 s, MERGE 2.06
        # -> 1.91 s. (A record larger than a page still gets a page of its own size.)
        "spark.buffer.pageSize": "2m",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "static",
        # isolde writes Parquet itself: no _SUCCESS markers in table folders
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "spark.sql.parquet.compression.codec": "snappy",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        # VARIANT written unshredded: Delta's format without the variantShredding feature
        "spark.sql.variant.writeShredding.enabled": "false",
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
        # PySpark 4 records the Python call site of every DataFrame / Column call for its error
        # messages: ~5 py4j round trips each (session, conf, origin set and clear), ~1,500
        # calls in a MERGE's planning. isolde reports errors against the SQL text instead.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Without a session's warehouse (a bare get_spark()), Spark's catalog folder goes to the
        # temp dir rather than spark-warehouse/ in the working directory.
        "spark.sql.warehouse.dir": os.path.join(tempfile.gettempdir(), f"isolde-spark-catalog-{os.getuid()}"),
    }


def jvm_log_path() -> Optional[str]:
    return _JVM_LOG


def _remove_jvm_log(path: str) -> None:
    """A normal exit removes the JVM's log: every start made one (1.3 MB after a test run) and
    they piled up in the temp dir. A process that is killed or crashes leaves it to read;
    ISOLDE_KEEP_JVM_LOG=1 keeps it always."""
    if os.environ.get("ISOLDE_KEEP_JVM_LOG") == "1":
        return
    with contextlib.suppress(OSError):
        os.remove(path)


def quiet_python_loggers() -> None:
    """PySpark logs every SQL error it raises (with the JVM stack) on these loggers; isolde
    translates the error itself, so they only add noise."""
    import logging

    if os.environ.get("ISOLDE_SPARK_STDERR") == "1":
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger", "py4j", "py4j.clientserver",
                 "py4j.java_gateway"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _environment() -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


#: what a start is doing, in order (``on_phase``; the REPL's spinner shows it)
START_PHASES = ("launching the JVM", "creating the SparkContext", "creating the SparkSession")


def get_spark(master: Optional[str] = None, conf: Optional[Mapping[str, str]] = None,
              after_launch: Optional[Callable[[], None]] = None,
              on_phase: Optional[Callable[[str], None]] = None):
    """The process's SparkSession, started on first use. ``after_launch`` is called once the
    JVM is up, before the SparkContext is made (the session joins its import thread there);
    ``on_phase`` with each of START_PHASES as a start reaches it."""
    global _SPARK, _JVM_LOG
    phase = on_phase or (lambda _name: None)
    quiet_python_loggers()
    with _LOCK:
        if _SPARK is not None and _alive(_SPARK):
            _apply_runtime_conf(_SPARK, conf)
            return with_kept_lookups(_SPARK)
        _environment()
        from pyspark import SparkConf, SparkContext
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            _SPARK = active
            _apply_runtime_conf(active, conf)
            return with_kept_lookups(active)

        settings = default_conf(master)
        for key, value in (conf or {}).items():
            settings[key] = str(value)
        settings.update(s3a.spark_conf(settings))
        spark_conf = SparkConf(loadDefaults=True)
        for key, value in settings.items():
            spark_conf.set(key, value)
        if not spark_conf.contains("spark.driver.memory") and not os.environ.get("SPARK_DRIVER_MEMORY"):
            spark_conf.set("spark.driver.memory", driver_memory())

        gateway = None
        phase(START_PHASES[0])
        if os.environ.get("ISOLDE_SPARK_STDERR") != "1" and SparkContext._gateway is None:
            from pyspark.java_gateway import launch_gateway

            fd, _JVM_LOG = tempfile.mkstemp(prefix="isolde-jvm-", suffix=".log")
            atexit.register(_remove_jvm_log, _JVM_LOG)
            fh = os.fdopen(fd, "w")
            try:
                gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": fh})
            except Exception:
                gateway = None
        if after_launch is not None:
            after_launch()
        phase(START_PHASES[1])
        sc = SparkContext(conf=spark_conf, gateway=gateway) if gateway is not None else SparkContext(conf=spark_conf)
        sc.setLogLevel("WARN")
        phase(START_PHASES[2])
        _SPARK = SparkSession(sc)
        return with_kept_lookups(_SPARK)


def with_kept_lookups(spark):
    """``spark`` with py4j's class and method look-ups remembered (executor/runtime/jvm_lookups.py):
    isolde's sessions, and a user's SparkSession handed to ``connect``."""
    from . import jvm_lookups

    with contextlib.suppress(Exception):  # a speed-up only: py4j works without it
        jvm_lookups.install(spark.sparkContext._jvm)
    return spark


def _alive(spark) -> bool:
    try:
        return spark.sparkContext._jsc is not None
    except Exception:
        return False


def _apply_runtime_conf(spark, conf) -> None:
    for key, value in (conf or {}).items():
        try:
            spark.conf.set(key, str(value))
        except Exception:
            pass  # static confs cannot change on a running session


def stop_spark() -> None:
    global _SPARK
    with _LOCK:
        if _SPARK is not None:
            _SPARK.stop()
            _SPARK = None


# Settings of a plan evaluated without generated code (``without_adaptive(interpreted=True)``)
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def without_adaptive(df, interpreted: bool = False):
    """``df`` planned without adaptive query execution, in a clone of its session (same
    settings, views and functions; ~1 ms). For small aggregates the driver collects: AQE runs
    a shuffle's map stage as a job of its own and re-plans after it (+60 ms on a point UPDATE's
    bitmaps, +130 ms on a point MERGE's) where nothing needs re-planning. Falls back to ``df``
    where the JVM classes differ (a Spark without ``sql.classic``).

    ``interpreted``: also without generated code, for a plan over few rows. Spark writes integer
    and date literals into the Java it compiles, so its cache of compiled classes misses
    whenever a point statement names another key, or the table's files changed (their sizes
    are literals of the scan's file lookup): two or three classes compiled per point statement,
    20-85 ms, more than interpreting a point statement's 100k-row file cost (measured there;
    the bound is ``routes.INTERPRETED_ROWS``)."""
    from pyspark.sql import DataFrame

    try:
        jsession = df.sparkSession._jsparkSession.cloneSession()
        jsession.conf().set("spark.sql.adaptive.enabled", "false")
        for key, value in (INTERPRETED.items() if interpreted else ()):
            jsession.conf().set(key, value)
        plan = df._jdf.queryExecution().analyzed()
        jdf = df.sparkSession._jvm.org.apache.spark.sql.classic.Dataset.ofRows(jsession, plan)
    except Exception:  # noqa: BLE001 - a planning convenience, never needed for correctness
        return df
    return DataFrame(jdf, df.sparkSession)
