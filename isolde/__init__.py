"""isolde: Databricks-style SQL for ACID Delta Lake tables on Apache Spark.

    import isolde
    isolde.parse("DELETE FROM t WHERE id = 1")      # -> [Delete(...)], no Spark needed
    s = isolde.connect(warehouse="./warehouse")     # embedded local Spark
    s.execute("UPDATE t SET x = 1 WHERE id = 2")    # -> CommitResult(version, operation, metrics)
"""

from __future__ import annotations

from isolde import errors
from isolde.errors import IsoldeError

__version__ = "0.1.0"


_grammar_parse = None  # isolde.grammar.parser.parse, imported on first use (startup time)


def parse(sql: str, *, max_statement_bytes: int | None = None):
    """Parse SQL text (one or many ';'-separated statements) into statement ASTs. A statement
    over ``max_statement_bytes`` (default 1 MiB) is a ParseError (STATEMENT_TOO_LONG)."""
    global _grammar_parse
    if _grammar_parse is None:
        from isolde.grammar.parser import parse as _parse

        _grammar_parse = _parse
    return _grammar_parse(sql, max_statement_bytes=max_statement_bytes)


def split_statements(text: str):
    """Split a script into statements (';' inside strings and comments never splits)."""
    from isolde.grammar.splitter import split_statements as _split

    return _split(text)


def is_complete(text: str) -> bool:
    """True when ``text`` ends with a complete ';'-terminated statement (the REPL's Enter rule)."""
    from isolde.grammar.splitter import is_complete as _is_complete

    return _is_complete(text)


def connect(warehouse: str = "./warehouse", spark=None, master: str | None = None, conf: dict | None = None,
            warm_up: bool = False):
    """Open a Session on the embedded local Spark (or ``spark=`` / ``master=`` / ISOLDE_SPARK_MASTER).

    ``warm_up``: once Spark is up, run isolde's DML path on a throwaway table in the background
    so the first real statement runs at warm speed (executor/runtime/warmup.py; the REPL does this)."""
    from isolde.executor.session.session import connect as _connect

    return _connect(warehouse=warehouse, spark=spark, master=master, conf=conf, warm_up=warm_up)


def __getattr__(name: str):
    """``isolde.streaming`` (read_stream, write_batches, ...), imported on first use."""
    if name == "streaming":
        import importlib

        return importlib.import_module("isolde.executor.streaming")
    raise AttributeError(f"module 'isolde' has no attribute {name!r}")


__all__ = ["parse", "split_statements", "is_complete", "connect", "errors", "IsoldeError", "streaming",
           "__version__"]
