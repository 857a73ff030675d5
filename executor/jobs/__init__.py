"""One module per command. Each module registers its runner for the AST node types it
executes with ``@executes(ast.X)``; the session dispatches through ``EXECUTORS`` (a table,
never an isinstance ladder), so adding a command never edits a shared file.

A runner is ``run(ctx, stmt) -> QueryResult | PreparedWrite``: queries and metadata reads
return rows; writes return a PreparedWrite (data work done, files staged, not committed),
which ``Session.execute`` commits at once and ``Session.prepare`` hands to the caller.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from typing import Callable

EXECUTORS: dict[type, Callable] = {}


def executes(*node_types: type):
    def register(fn: Callable) -> Callable:
        for node_type in node_types:
            if node_type in EXECUTORS:
                raise RuntimeError(f"{node_type.__name__} already executed by {EXECUTORS[node_type].__module__}")
            EXECUTORS[node_type] = fn
        return fn

    return register


_LOAD_LOCK = threading.Lock()
_loaded = False


def load_all() -> dict[type, Callable]:
    """Import every command module once so their ``@executes`` registrations run. One thread
    imports them, the others wait: a REPL runs a log-only statement (DESCRIBE, ``\\dt``)
    while Spark's start thread is importing them too, and concurrent first imports of modules
    that import each other can deadlock Python's module locks."""
    global _loaded
    if not _loaded:
        with _LOAD_LOCK:
            if not _loaded:
                # pyspark's py4j argument converters import this (and pandas with it, 0.3 s) on
                # the first JVM call with arguments: here it is imported while the JVM boots
                importlib.import_module("pyspark.testing.utils")
                for info in pkgutil.iter_modules(__path__):
                    importlib.import_module(f"{__name__}.{info.name}")
                _loaded = True
    return EXECUTORS
