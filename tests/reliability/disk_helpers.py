"""Disk-full and permission-error helpers for test_disk_errors.py (issue 25, crash safety).

    mount_problem()           why a tmpfs cannot be mounted here (None when it can)
    tmpfs(path, size)         a small tmpfs mounted at ``path``; always unmounted on exit
    Filler(mount).fill(leave) takes every free byte of the tmpfs but ``leave`` (whole pages),
                              so the next write of more than ``leave`` bytes fails with ENOSPC
    unprivileged_problem()    why statements cannot be run as ``nobody`` here (None when they can)
    run_unprivileged(steps)   runs isolde statements in a child process as ``nobody``; one result
                              dict per step (version, or the error's class, errno and message)
    as_unprivileged(fn, *a)   calls ``fn(*a)`` in a forked child as ``nobody`` (no Spark there);
                              returns its result or raises its exception in the parent
    table_files(path)         every file under a table folder, relative, for "nothing left over"
    wait_for_idle_spark(spark) waits (bounded) until no Spark stage runs: the tasks of a failed
                              job may still be writing into its staging folder

The child is this file run as a script (``python disk_helpers.py``): the steps arrive as JSON
on stdin, one JSON result per step leaves on stdout. Root ignores file permissions, so a
permission error needs a process that is not root; one child runs all its steps on one JVM.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager

PAGE = 4096  # tmpfs allocates whole pages: "leave" is rounded to them
UNPRIVILEGED = ("nobody", "nogroup")


def mount_problem() -> str | None:
    """None when a tmpfs can be mounted here, else the missing thing (for a skip reason)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to mount a tmpfs"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "needs the mount and umount commands to mount a tmpfs"
    return None


def _unmount(path: str) -> None:
    """Unmount, retrying while a Spark task that was being cancelled still holds a file there;
    a lazy unmount as the last resort (the mount is gone from the tree at once)."""
    for _ in range(20):
        if subprocess.run(["umount", path], capture_output=True).returncode == 0:
            return
        time.sleep(0.25)
    subprocess.run(["umount", "-l", path], capture_output=True, check=True)


@contextmanager
def tmpfs(path: str, size: str = "4m"):
    """A tmpfs of ``size`` at ``path`` (created if missing), unmounted on the way out, failures
    included. Skips (pytest) when the mount is refused: the reason names what is missing."""
    import pytest

    problem = mount_problem()
    if problem:
        pytest.skip(problem)
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", path],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"needs CAP_SYS_ADMIN to mount a tmpfs (mount said: {done.stderr.strip()})")
    try:
        yield path
    finally:
        _unmount(path)


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class Filler:
    """One filler file on a mount: ``fill(leave)`` grows it until the file system is full, then
    gives back ``leave`` bytes (rounded up to whole pages); ``release()`` deletes it."""

    def __init__(self, mount: str, name: str = "filler.bin"):
        self.path = os.path.join(mount, name)
        self.mount = mount

    def fill(self, leave: int = 0) -> int:
        """Fill; returns the bytes left free (``leave`` rounded up to pages)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for chunk in (1 << 16, PAGE):
                block = b"\xa5" * chunk
                try:
                    while True:
                        os.write(fd, block)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
        finally:
            os.close(fd)
        pages = -(-leave // PAGE)
        if pages:
            os.truncate(self.path, max(os.path.getsize(self.path) - pages * PAGE, 0))
        left = free_bytes(self.mount)
        assert left == pages * PAGE, f"filled {self.mount} to leave {pages * PAGE} bytes, {left} are free"
        return left

    def release(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def table_files(path: str) -> set[str]:
    """Every file under a table folder, relative to it (log, data, DVs, hidden leftovers)."""
    out = set()
    for folder, _, names in os.walk(path):
        for n in names:
            out.add(os.path.relpath(os.path.join(folder, n), path))
    return out


def wait_for_idle_spark(spark, limit_s: float = 60) -> None:
    """Return once no stage is active (a failed job's other tasks run on after the error);
    an AssertionError after ``limit_s`` seconds (a bound on a hang, not a speed target)."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + limit_s
    while tracker.getActiveStageIds() or tracker.getActiveJobsIds():
        assert time.monotonic() < deadline, f"Spark still runs stages {tracker.getActiveStageIds()}"
        time.sleep(0.1)


# --------------------------------------------------------------------------- the unprivileged child


def as_unprivileged(fn, *args):
    """``fn(*args)`` in a forked child that dropped to nobody:nogroup (for log-level code that
    needs no Spark: the fork copies no JVM threads it would use); its return value, or its
    exception raised here (both pickled)."""
    import grp
    import pickle
    import pwd

    uid, gid = pwd.getpwnam(UNPRIVILEGED[0]).pw_uid, grp.getgrnam(UNPRIVILEGED[1]).gr_gid
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            try:
                payload = ("ok", fn(*args))
            except BaseException as e:  # noqa: BLE001 - sent to the parent
                payload = ("error", e)
            try:
                data = pickle.dumps(payload)
            except Exception as e:  # noqa: BLE001
                data = pickle.dumps(("error", RuntimeError(f"unpicklable result: {e!r}: {payload!r}")))
            with os.fdopen(write_end, "wb") as fh:
                fh.write(data)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data, "the unprivileged child died"
    kind, value = pickle.loads(data)
    if kind == "error":
        raise value
    return value


def unprivileged_problem() -> str | None:
    """None when a child can run as ``nobody`` here, else the missing thing (for a skip reason)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to start a writer as the unprivileged user nobody"
    if shutil.which("setpriv") is None:
        return "needs setpriv (util-linux) to start a writer as nobody"
    try:
        import grp
        import pwd

        pwd.getpwnam(UNPRIVILEGED[0])
        grp.getgrnam(UNPRIVILEGED[1])
    except (ImportError, KeyError):
        return "needs the user nobody and the group nogroup"
    return None


def run_unprivileged(steps: list[dict], home: str, timeout: float = 600) -> list[dict]:
    """Run ``steps`` ({"warehouse": ..., "sql": ...} or {"prepare": sql, ...}) in one child
    process as nobody:nogroup; ``home`` is a folder nobody may write in (its HOME and cwd)."""
    env = dict(os.environ, HOME=home, ISOLDE_JVM="startup", SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PYTHONDONTWRITEBYTECODE="1")
    cmd = ["setpriv", f"--reuid={UNPRIVILEGED[0]}", f"--regid={UNPRIVILEGED[1]}", "--clear-groups",
           sys.executable, os.path.abspath(__file__)]
    done = subprocess.run(cmd, input=json.dumps(steps), capture_output=True, text=True, cwd=home, env=env,
                          timeout=timeout)
    results = [json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or len(results) != len(steps):
        raise AssertionError(f"the unprivileged child failed (rc {done.returncode}):\n{done.stdout[-3000:]}\n"
                             f"{done.stderr[-5000:]}")
    return results


class _Warnings:
    """A logging handler that keeps the warnings a step logged (a failed checkpoint says so)."""

    def __init__(self):
        import logging

        class Handler(logging.Handler):
            def emit(inner, record):
                text = record.getMessage()
                if record.exc_info and record.exc_info[1] is not None:
                    text += f" | {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
                self.messages.append(text)

        self.messages: list[str] = []
        self.handler = Handler(level=logging.WARNING)
        logging.getLogger("isolde").addHandler(self.handler)


def _child_main() -> None:
    import isolde

    steps = json.loads(sys.stdin.read())
    warnings = _Warnings()
    sessions = {}
    for step in steps:
        warnings.messages.clear()
        s = sessions.get(step["warehouse"])
        if s is None:
            s = sessions[step["warehouse"]] = isolde.connect(warehouse=step["warehouse"])
        out = {"uid": os.geteuid(), "sql": step.get("sql") or step.get("prepare")}
        try:
            if "prepare" in step:
                prepared = s.prepare(step["prepare"])
                out["staged"] = list(prepared.staged_paths)
                result = prepared.commit()
            else:
                result = s.execute(step["sql"])
            out.update(ok=True, version=getattr(result, "version", None))
        except Exception as e:  # noqa: BLE001 - reported to the parent, which asserts on it
            out.update(ok=False, type=type(e).__name__, module=type(e).__module__,
                       isolde=isinstance(e, isolde.errors.IsoldeError), error_class=getattr(e, "error_class", None),
                       sqlstate=getattr(e, "sqlstate", None), errno=getattr(e, "errno", None),
                       filename=getattr(e, "filename", None), message=str(e))
        out["warnings"] = list(warnings.messages)
        print("RESULT " + json.dumps(out), flush=True)
    for s in sessions.values():
        s.close()


if __name__ == "__main__":
    _child_main()
