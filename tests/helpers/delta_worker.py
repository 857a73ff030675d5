"""A writer process of one engine for the mixed-engine races (tests/reference/test_mixed_writers.py):
``delta`` runs Delta-Spark statements on its own JVM (``tests.helpers.delta_spark.delta_session()``),
``isolde`` runs isolde statements on its own JVM (``isolde.connect``) -- one process of each, as
when a Delta pipeline keeps running while isolde is introduced beside it.

The JVM starts once; the worker then answers commands, one JSON object a line on stdin, with
one JSON reply a line on stdout (anything else the process prints goes to stderr):

    {"cmd": "sql", "sql": ..., "tag": ...}   run a statement (its commit tagged through
                                             commitInfo.userMetadata); reply {"ok": true,
                                             "rows": [...], "version": v or null} or
                                             {"ok": false, "error": <class name>, "message": ...}
    {"cmd": "prepare", "sql": ..., "tag": ...}  isolde only: the statement's reads and data work
                                             now (session.prepare), its commit at "commit"
    {"cmd": "commit"}                        commit the prepared write
    {"cmd": "bank", ...}                     the bank race (tests/helpers/mixed_workload.py)
    {"cmd": "quit"}

Delta-Spark has no two-phase API, so a Delta statement is held between its read snapshot and
its commit by a gate: the Python UDF ``gate(value, dir, column)`` (``gate_s`` for strings; returns ``value``)
creates ``dir/entered`` and waits for ``dir/open``. Put it in a SET expression, a DELETE
condition or a MERGE source, and the test commits the other engine's write while Delta waits.

    PYTHONPATH=<repo> python tests/helpers/delta_worker.py ENGINE WAREHOUSE
"""

from __future__ import annotations

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def gate(value, folder, *anchor):
    """Hold the statement until ``folder/open`` exists (created by the test); say it arrived.
    ``anchor``: a column of the row, so Spark evaluates the UDF per row inside the job."""
    import time

    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, "entered"), "a").close()
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(folder, "open")):
        if time.time() > deadline:
            raise TimeoutError(f"the gate {folder} was never opened")
        time.sleep(0.02)
    return value


def _plain(value):
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


class Engine:
    """One engine's statements: ``run(sql, tag)`` -> (rows, version or None)."""

    name = ""

    def tag(self, tag: str | None) -> None:
        raise NotImplementedError

    def run(self, sql: str):
        raise NotImplementedError


class DeltaEngine(Engine):
    name = "delta"

    def __init__(self):
        from pyspark.sql.types import StringType, LongType

        from tests.helpers.delta_spark import delta_session

        self.spark = delta_session()
        for typ, name in ((LongType(), "gate"), (StringType(), "gate_s")):
            self.spark.udf.register(name, gate, typ)
        self.spark.sql("SELECT 1").collect()

    def tag(self, tag):
        if tag:
            self.spark.conf.set(USER_METADATA, tag)
        else:
            self.spark.conf.unset(USER_METADATA)

    def run(self, sql):
        rows = self.spark.sql(sql).collect()
        return [[_plain(v) for v in r] for r in rows], None


class IsoldeEngine(Engine):
    name = "isolde"

    def __init__(self, warehouse: str):
        import isolde

        self.session = isolde.connect(warehouse=warehouse)
        self.session.sql("SELECT 1").collect()
        self.prepared = None

    def tag(self, tag):
        # an empty userMetadata is not written (isolde, as Delta, leaves the field out)
        self.session.execute(f"SET {USER_METADATA} = '{tag or ''}'")

    def run(self, sql):
        result = self.session.execute(sql)
        version = getattr(result, "version", None)
        rows = [[_plain(v) for v in r] for r in result.collect()] if getattr(result, "columns", None) else []
        return rows, version

    def prepare(self, sql):
        self.prepared = self.session.prepare(sql)

    def commit(self):
        prepared, self.prepared = self.prepared, None
        result = prepared.commit()
        return [], result.version


def error_reply(exc: BaseException) -> dict:
    from tests.helpers.mixed_workload import message_of
    from tests.helpers.reference import error_class

    return {"ok": False, "error": error_class(exc), "message": message_of(exc)[:500]}


def handle(engine: Engine, command: dict) -> dict:
    cmd = command["cmd"]
    try:
        if cmd == "sql":
            engine.tag(command.get("tag"))
            rows, version = engine.run(command["sql"])
            return {"ok": True, "rows": rows, "version": version}
        if cmd == "prepare":
            engine.tag(command.get("tag"))
            engine.prepare(command["sql"])
            return {"ok": True}
        if cmd == "commit":
            rows, version = engine.commit()
            return {"ok": True, "rows": rows, "version": version}
        if cmd == "bank":
            from tests.helpers.mixed_workload import bank_writer

            return {"ok": True, "counts": bank_writer(engine, **command["args"])}
        return {"ok": False, "error": "UnknownCommand", "message": cmd}
    except Exception as exc:  # the reply names it; the test decides
        traceback.print_exc(file=sys.stderr)
        return error_reply(exc)


def main(engine_name: str, warehouse: str) -> int:
    # the replies own the real stdout; the JVM and everything else print to stderr
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        engine = DeltaEngine() if engine_name == "delta" else IsoldeEngine(warehouse)
    except Exception as exc:
        replies.write(json.dumps(error_reply(exc)) + "\n")
        return 1
    replies.write(json.dumps({"ok": True, "ready": engine.name}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        if command["cmd"] == "quit":
            break
        replies.write(json.dumps(handle(engine, command)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
