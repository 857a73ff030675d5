"""Time travel by timestamp does not depend on the Python process's time zone (issue 17, point 4).

A TIMESTAMP AS OF / RESTORE ... TO TIMESTAMP AS OF literal is read as Spark reads it: without
an offset, as wall-clock time in the session time zone (``spark.sql.session.timeZone``, isolde's
default UTC, changed with SET); with an offset, as that instant. The version picked is the
latest one committed at or before that instant -- whatever TZ the Python process (and its JVM)
runs in. The commits get fixed, known timestamps (commitInfo.timestamp rewritten) so every
expectation is exact: each version's own commit instant, 1 ms before it, between commits, before
the first commit (an error) and after the last (an error).

Run directly (``python test_time_travel_zones.py WAREHOUSE ZONE...``) it prints the observations
of the scenario as JSON: the subprocess test runs it under other TZ settings.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import os
import subprocess
import sys
import time
import zoneinfo
from contextlib import contextmanager

import pytest

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def ms_of(*parts) -> int:
    return (dt.datetime(*parts, tzinfo=UTC) - EPOCH) // dt.timedelta(milliseconds=1)


# New York switches to daylight time at 2024-03-10 07:00:00 UTC: versions 1 and 2 straddle it.
COMMITS = [ms_of(2024, 3, 10, 6, 30, 0, 0), ms_of(2024, 3, 10, 6, 59, 59, 123000),
           ms_of(2024, 3, 10, 7, 0, 0, 456000), ms_of(2024, 6, 1, 12, 0, 0, 789000)]
ROWS = [[], [1], [1, 2], [1, 2, 3]]


def instant(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


def wall(ms: int, zone: str) -> str:
    """The literal without an offset that means ``ms`` in ``zone``."""
    return instant(ms).astimezone(zoneinfo.ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def with_offset(ms: int, hours: float) -> str:
    zone = dt.timezone(dt.timedelta(hours=hours))
    return instant(ms).astimezone(zone).isoformat(sep=" ", timespec="milliseconds")


def expected_for(ms: int):
    if ms < COMMITS[0]:
        return "before"
    if ms > COMMITS[-1]:
        return "after"
    return ROWS[bisect.bisect_right(COMMITS, ms) - 1]


def build(session) -> str:
    """Table t at versions 0..3 (rows ROWS[v]) whose commits carry the COMMITS timestamps."""
    session.execute("CREATE TABLE t (a INT)")
    for a in (1, 2, 3):
        session.execute(f"INSERT INTO t VALUES ({a})")
    from isolde.grammar import ast

    handle = session.catalog.resolve(ast.TableRef(parts=("t",)), session.current_database)
    for version, ms in enumerate(COMMITS):
        path = handle.log.commit_path(version)
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
        out = []
        for line in lines:
            action = json.loads(line)
            if "commitInfo" in action:
                action["commitInfo"]["timestamp"] = ms
                if "inCommitTimestamp" in action["commitInfo"]:
                    action["commitInfo"]["inCommitTimestamp"] = ms
                line = json.dumps(action, separators=(",", ":"))
            out.append(line)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(out) + "\n")
        assert handle.log.commit_timestamp(version) == ms
    return handle.path


def cases(zone: str) -> list[tuple[str, str, object]]:
    """(label, time-travel clause, expected rows or 'before'/'after') in session zone ``zone``."""
    out = []
    for v, ms in enumerate(COMMITS):
        out += [
            (f"v{v} exact, session-zone literal", f"TIMESTAMP AS OF '{wall(ms, zone)}'", ROWS[v]),
            (f"v{v} exact, typed literal", f"TIMESTAMP AS OF TIMESTAMP'{wall(ms, zone)}'", ROWS[v]),
            (f"v{v} exact, +09:00 literal", f"TIMESTAMP AS OF '{with_offset(ms, 9)}'", ROWS[v]),
            (f"v{v} exact, -03:30 literal", f"TIMESTAMP AS OF '{with_offset(ms, -3.5)}'", ROWS[v]),
            (f"v{v} exact, Z literal", f"TIMESTAMP AS OF '{instant(ms).strftime('%Y-%m-%dT%H:%M:%S.%f')[:-3]}Z'",
             ROWS[v]),
            (f"v{v} exact, timestamp_millis", f"TIMESTAMP AS OF timestamp_millis({ms})", ROWS[v]),
            (f"v{v} VERSION AS OF", f"VERSION AS OF {v}", ROWS[v]),
        ]
        if v > 0:
            out.append((f"v{v} minus 1 ms", f"TIMESTAMP AS OF '{wall(ms - 1, zone)}'", ROWS[v - 1]))
        if v + 1 < len(COMMITS):
            mid = (ms + COMMITS[v + 1]) // 2
            out.append((f"between v{v} and v{v + 1}", f"TIMESTAMP AS OF '{wall(mid, zone)}'", ROWS[v]))
            out.append((f"between v{v} and v{v + 1}, +05:45 literal", f"TIMESTAMP AS OF '{with_offset(mid, 5.75)}'",
                        ROWS[v]))
    midnight = dt.datetime(2024, 3, 10, tzinfo=zoneinfo.ZoneInfo(zone))
    out += [
        ("1 ms before the first commit", f"TIMESTAMP AS OF '{wall(COMMITS[0] - 1, zone)}'", "before"),
        ("before the first commit, +00:00", f"TIMESTAMP AS OF '{with_offset(COMMITS[0] - 1000, 0)}'", "before"),
        ("a day after the last commit", f"TIMESTAMP AS OF '{wall(COMMITS[-1] + 86_400_000, zone)}'", "after"),
        ("a date (midnight in the session zone)", "TIMESTAMP AS OF '2024-03-10'",
         expected_for((midnight - EPOCH) // dt.timedelta(milliseconds=1))),
        ("an expression", f"TIMESTAMP AS OF timestamp_millis({COMMITS[2]}) - INTERVAL 1 MILLISECOND", ROWS[1]),
    ]
    return out


def outcome(fn):
    from isolde import errors as E

    try:
        return fn()
    except E.VersionNotFoundError as e:
        return "before" if "before the earliest" in e.message else "after" if "after the latest" in e.message \
            else f"VersionNotFoundError: {e.message}"
    except E.IsoldeError as e:
        return f"{type(e).__name__}: {e.message}"


def select(session, clause: str):
    return [r.a for r in session.execute(f"SELECT a FROM t {clause} ORDER BY a").collect()]


def observe_queries(session, zone: str) -> dict:
    got = {}
    for label, clause, _ in cases(zone):
        got[label] = outcome(lambda: select(session, clause))
    got["sql() DataFrame, v2 exact"] = outcome(
        lambda: [r.a for r in session.sql(f"SELECT a FROM t TIMESTAMP AS OF '{wall(COMMITS[2], zone)}' "
                                          "ORDER BY a").collect()])
    return got


def restore_cases(zone: str) -> list[tuple[str, str, object]]:
    mid = (COMMITS[2] + COMMITS[3]) // 2
    return [
        ("RESTORE to v1's exact commit time", f"'{wall(COMMITS[1], zone)}'", ROWS[1]),
        ("RESTORE between v2 and v3, -08:00 literal", f"'{with_offset(mid, -8)}'", ROWS[2]),
        ("RESTORE to 1 ms before v1", f"'{wall(COMMITS[1] - 1, zone)}'", ROWS[0]),
        ("RESTORE before the first commit", f"'{wall(COMMITS[0] - 1, zone)}'", "before"),
    ]


def observe_restores(session, zone: str) -> dict:
    got = {}
    for label, literal, _ in restore_cases(zone):
        def run():
            result = session.execute(f"RESTORE TABLE t TO TIMESTAMP AS OF {literal}")
            assert result.operation == "RESTORE"
            return select(session, "")
        got[label] = outcome(run)
    got["versions after the restores"] = [r.version for r in session.execute("DESCRIBE HISTORY t")]
    return got


def expected_queries(zone: str) -> dict:
    want = {label: expected for label, _, expected in cases(zone)}
    want["sql() DataFrame, v2 exact"] = ROWS[2]
    return want


def expected_restores(zone: str) -> dict:
    want = {label: expected for label, _, expected in restore_cases(zone)}
    want["versions after the restores"] = [6, 5, 4, 3, 2, 1, 0]  # three restores committed, one refused
    return want


@contextmanager
def process_zone(name: str):
    """The Python process's local time zone (what PySpark's collected datetimes use)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


@contextmanager
def session_zone(session, name):
    if name is not None:
        session.execute(f"SET spark.sql.session.timeZone = {name}")
    try:
        yield name or "UTC"
    finally:
        if name is not None:
            session.execute("RESET spark.sql.session.timeZone")


def scenario(session, zone_name) -> dict:
    with session_zone(session, zone_name) as zone:
        assert session.spark.conf.get("spark.sql.session.timeZone") == zone
        return {"queries": observe_queries(session, zone), "restores": observe_restores(session, zone)}


# --------------------------------------------------------------------------- the tests

COMBINATIONS = [  # (Python process TZ, session time zone set with SET; None = isolde's default UTC)
    ("UTC", None),
    ("America/New_York", None),
    ("Asia/Kolkata", None),
    ("Pacific/Kiritimati", None),
    ("America/New_York", "America/New_York"),
    ("UTC", "Asia/Tokyo"),
    ("Asia/Kolkata", "America/Los_Angeles"),
    ("Pacific/Kiritimati", "Pacific/Chatham"),
]


@pytest.mark.spark
@pytest.mark.parametrize("process_tz,session_tz", COMBINATIONS)
def test_time_travel_by_timestamp_in_any_zone(session, process_tz, session_tz):
    build(session)
    with process_zone(process_tz):
        assert time.localtime().tm_zone != "UTC" or process_tz == "UTC"
        got = scenario(session, session_tz)
    zone = session_tz or "UTC"
    assert got["queries"] == expected_queries(zone)
    assert got["restores"] == expected_restores(zone)


@pytest.mark.spark
def test_restore_records_the_instant_it_resolved(session):
    build(session)
    with process_zone("America/New_York"), session_zone(session, "Asia/Tokyo"):
        session.execute(f"RESTORE TABLE t TO TIMESTAMP AS OF '{wall(COMMITS[2], 'Asia/Tokyo')}'")
    params = session.execute("DESCRIBE HISTORY t").first().operationParameters
    assert dt.datetime.fromisoformat(params["timestamp"]) == instant(COMMITS[2])


@pytest.mark.spark
def test_a_bad_timestamp_is_an_analysis_error(session):
    from isolde import errors as E

    build(session)
    for text in ("'not a time'", "'2024-13-45 00:00:00'"):
        with pytest.raises(E.AnalysisError) as info:
            session.execute(f"SELECT * FROM t TIMESTAMP AS OF {text}")
        assert info.value.error_class == "DELTA_TIMESTAMP_INVALID"
        assert "Py4J" not in info.value.message and "JVM" not in info.value.message


@pytest.mark.spark
def test_stand_in_context_reads_literals_in_the_session_zone(spark):
    """properties.eval_timestamp without a real ExecutionContext (log-level callers): literals
    are wall-clock time in the context's session zone, offsets honoured, expressions by Spark."""
    import sqlglot
    import sqlglot.expressions as exp

    from isolde.executor.catalog.properties import eval_timestamp
    from isolde.grammar import ast

    class StandIn:
        def __init__(self, zone):
            self.conf = {"spark.sql.session.timeZone": zone}
            self.spark = spark

    def expr(text):
        return ast.Expr(text, sqlglot.parse_one(text, read="databricks"))

    with process_zone("America/New_York"):
        kolkata = StandIn("Asia/Kolkata")
        assert eval_timestamp(kolkata, expr("'2024-03-10 12:29:59.123'")) == instant(COMMITS[1])
        assert eval_timestamp(kolkata, expr("'2024-03-10 15:59:59.123+09:00'")) == instant(COMMITS[1])
        assert eval_timestamp(StandIn("UTC"), expr("'2024-03-10 06:59:59.123'")) == instant(COMMITS[1])
        assert eval_timestamp(StandIn("UTC"), expr(f"timestamp_millis({COMMITS[1]})")) == instant(COMMITS[1])
        assert isinstance(expr("'x'").tree, exp.Literal)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("process_tz", ["America/Los_Angeles", "Asia/Kathmandu"])
def test_time_travel_in_a_process_started_in_another_zone(tmp_path, process_tz):
    """A fresh Python + JVM started with TZ set (the JVM's default zone follows TZ too)."""
    env = dict(os.environ, TZ=process_tz, PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, __file__, str(tmp_path / "wh"), "-", "Australia/Adelaide"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["process_tz"] == process_tz and got["jvm_zone"] == process_tz
    for zone_name, observed in zip([None, "Australia/Adelaide"], got["runs"]):
        zone = zone_name or "UTC"
        assert observed["queries"] == expected_queries(zone)
        assert observed["restores"] == expected_restores(zone)


def _main(argv: list[str]) -> None:
    import isolde

    warehouse, zones = argv[0], [None if z == "-" else z for z in argv[1:]]
    runs = []
    for n, zone in enumerate(zones):
        s = isolde.connect(warehouse=os.path.join(warehouse, f"run{n}"))
        build(s)
        runs.append(scenario(s, zone))
    jvm_zone = s.spark.sparkContext._jvm.java.util.TimeZone.getDefault().getID()
    print(json.dumps({"process_tz": os.environ.get("TZ"), "jvm_zone": jvm_zone, "runs": runs}))


if __name__ == "__main__":
    _main(sys.argv[1:])
