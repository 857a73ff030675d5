"""Talking to the reference engine (Delta Lake on Spark) from the tests, and comparing answers.

    Delta(spark).sql(text)          rows of a Delta-Spark statement (collected)
    Delta(spark).rows(path, cols)   a table's rows as Delta-Spark reads them, sorted tuples
    Delta(spark).attempt(text)      (rows, None) or (None, error class name) -- never raises
    Delta(spark).history(path)      DESCRIBE HISTORY as dicts, oldest first
    ref(path)                       the SQL name of a table folder for Delta: delta.`path`
    error_class(exc)                the short class name of an error from either engine
    conflict_names                  Delta's conflict class names (the same as isolde's)

A table folder is named by path on the Delta side (``delta.`/path```): isolde's warehouse is a
folder of table folders, not a metastore Delta knows.
"""

from __future__ import annotations

from tests.helpers.oracle import sorted_rows

conflict_names = ("ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException",
                  "MetadataChangedException", "ConcurrentTransactionException", "ProtocolChangedException",
                  "ConcurrentWriteException")


def ref(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def error_class(exc: BaseException) -> str:
    """``ConcurrentAppendException`` whether isolde raised it or Delta's JVM did.

    Delta-Spark's errors reach Python as pyspark's captured exceptions (or delta.exceptions'
    classes) wrapping a JVM throwable: the innermost ``io.delta`` / ``org.apache.spark.sql.delta``
    class in the cause chain names it; otherwise the JVM error class, otherwise the Python type."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_java_exception", None)
    names = []
    while java is not None:
        try:
            names.append(java.getClass().getName())
            java = java.getCause()
        except Exception:
            break
    for name in names:
        short = name.rsplit(".", 1)[-1].split("$")[0]
        if short in conflict_names:
            return short
    for name in names:
        if ".delta." in name:
            return name.rsplit(".", 1)[-1].split("$")[0]
    if names:
        return names[0].rsplit(".", 1)[-1]
    return type(exc).__name__


class Delta:
    """Delta-Spark statements on the shared session (DeltaSparkSessionExtension + DeltaCatalog)."""

    def __init__(self, spark):
        self.spark = spark

    def sql(self, text: str) -> list:
        return self.spark.sql(text).collect()

    def rows(self, path: str, columns=None) -> list[tuple]:
        cols = ", ".join(f"`{c}`" for c in columns) if columns else "*"
        return sorted_rows(self.spark.sql(f"SELECT {cols} FROM {ref(path)}").collect())

    def attempt(self, text: str):
        try:
            return self.sql(text), None
        except Exception as exc:  # the class name is the answer
            return None, error_class(exc)

    def history(self, path: str) -> list[dict]:
        rows = self.spark.sql(f"DESCRIBE HISTORY {ref(path)}").collect()
        return [r.asDict(recursive=True) for r in sorted(rows, key=lambda r: r["version"])]

    def version(self, path: str) -> int:
        return self.history(path)[-1]["version"]
