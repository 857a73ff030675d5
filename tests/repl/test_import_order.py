"""Modules are imported on one thread before others can import them at once.

CI once showed the REPL's first statement failing with ``_DeadlockError: deadlock detected by
_ModuleLock('lark.parsers.lalr_analysis')``: its syntax check (``isolde.parse`` on the main
thread) imported lark while the thread starting Spark was importing it too, in a fresh clone
whose modules were still being compiled. Python's per-module import locks raise that error
when two threads import modules that import each other. These tests check, each in a fresh
interpreter, that the imports happen first on one thread:

- ``SessionHolder.start_background`` imports the parser (lark, sqlglot) on the calling thread
  before the background thread starts;
- ``Session``'s Spark-start thread imports every statement module before the session is ready
  (so the warm-up's thread and the first statement's never import them at once).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_parser_is_imported_before_the_background_thread_starts():
    out = _run("""
        import sys, threading
        from isolde.repl.runner import SessionHolder
        seen = {}
        looked, release = threading.Event(), threading.Event()
        def factory(**kwargs):  # runs on the background thread: what is imported by then?
            seen["lark"] = "lark" in sys.modules and "lark.parsers.lalr_analysis" in sys.modules
            seen["parser"] = "isolde.grammar.parser" in sys.modules
            looked.set()
            release.wait(10)
            return None
        assert "lark" not in sys.modules, "the REPL's runner imported lark on its own: the test proves nothing"
        holder = SessionHolder({}, factory=factory)
        holder.start_background()
        assert looked.wait(60), "the background thread never called the session factory"
        release.set()
        print(seen["lark"], seen["parser"])
    """)
    assert out.split() == ["True", "True"]


def test_every_statement_module_is_imported_before_the_session_is_ready():
    out = _run("""
        import sys, tempfile
        import isolde.executor.runtime.spark as spark_module

        class FakeConf:
            def __init__(self):
                self.values = {}

            def set(self, key, value):
                self.values[key] = value

        class FakeSpark:  # no JVM: only the order of imports is under test
            conf = FakeConf()

        def fake_get_spark(master=None, conf=None, after_launch=None, on_phase=None):
            if after_launch is not None:
                after_launch()
            return FakeSpark()

        spark_module.get_spark = fake_get_spark
        from isolde.executor.session.session import Session
        import pkgutil, isolde.executor.jobs as jobs
        names = [f"isolde.executor.jobs.{m.name}" for m in pkgutil.iter_modules(jobs.__path__)]
        assert not all(n in sys.modules for n in names), "imported before the session started"
        s = Session(warehouse=tempfile.mkdtemp(), start=True)
        s.wait_ready(60)
        print(len(names), sum(n in sys.modules for n in names))
    """)
    total, imported = map(int, out.split())
    assert total > 20 and imported == total
