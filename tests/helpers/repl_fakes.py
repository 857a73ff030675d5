"""A tiny in-memory stand-in for isolde's Session, for REPL/CLI tests without Spark."""

from __future__ import annotations

import re
import threading
import time

from isolde import errors
from isolde.executor.session.results import CommitResult, QueryResult


class FakeSession:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.tables_ = {}  # name -> (columns, rows)
        self.versions = {}
        self.executed = []
        self.cancelled = threading.Event()
        self.sleeping = threading.Event()  # set while a `SELECT sleep(n)` runs
        self.current_database = "default"
        self.conf = {}
        self.closed = False

    def start(self):
        pass

    def wait_ready(self, timeout=None):
        return True

    def close(self):
        self.closed = True

    def cancel(self):
        self.cancelled.set()

    def tables(self, database=None):
        return sorted(self.tables_)

    def columns(self, table):
        return list(self.tables_[table][0])

    def _table(self, name):
        if name not in self.tables_:
            raise errors.TableNotFoundError(name, list(self.tables_))
        return self.tables_[name]

    def _commit(self, name, op, metrics):
        v = self.versions.get(name, -1) + 1
        self.versions[name] = v
        return CommitResult(v, op, metrics, name)

    def execute(self, sql):
        sql = sql.strip().rstrip(";").strip()
        self.executed.append(sql)
        m = re.match(r"(?is)create table (\w+)\s*\((.*)\)$", sql)
        if m:
            cols = [c.strip().split()[0] for c in m.group(2).split(",")]
            self.tables_[m.group(1)] = (cols, [])
            return self._commit(m.group(1), "CREATE TABLE", {})
        m = re.match(r"(?is)insert into (\w+) values\s*(.*)$", sql)
        if m:
            cols, rows = self._table(m.group(1))
            new = [tuple(eval(t)) if isinstance(eval(t), tuple) else (eval(t),)
                   for t in re.findall(r"\([^)]*\)", m.group(2))]
            rows.extend(new)
            return self._commit(m.group(1), "WRITE", {"numOutputRows": len(new)})
        m = re.match(r"(?is)select \* from (\w+)$", sql)
        if m:
            cols, rows = self._table(m.group(1))
            return QueryResult(cols, rows)
        m = re.match(r"(?is)delete from (\w+)$", sql)
        if m:
            cols, rows = self._table(m.group(1))
            n = len(rows)
            rows.clear()
            return self._commit(m.group(1), "DELETE", {"numDeletedRows": n})
        m = re.match(r"(?is)select sleep\((\d+(?:\.\d+)?)\)$", sql)
        if m:
            end = time.time() + float(m.group(1))
            self.sleeping.set()
            while time.time() < end:
                if self.cancelled.is_set():
                    raise errors.ExecutionError("Job cancelled")
                time.sleep(0.02)
            return QueryResult(["slept"], [(1,)])
        m = re.match(r"(?is)select\s+(\d+)$", sql)
        if m:
            return QueryResult([m.group(1)], [(int(m.group(1)),)])
        if sql.lower().startswith("boom"):
            raise RuntimeError("a bug")
        if sql.lower().startswith("conflict"):
            raise errors.ConcurrentAppendException(table="t", winning_version=12, winning_operation="MERGE")
        word = sql.split()[0] if sql.split() else ""
        text = sql
        line = 1
        col = 1
        raise errors.ParseError(f"unexpected '{word}'", line=line, column=col, token=word,
                                expected=("SELECT", "INSERT"), excerpt=errors.caret_excerpt(text, line, col, len(word)))
