"""Leases: a prepared write's staged files are the table's own, yet no commit names them yet.

VACUUM deletes only files no version within the retention references. A staged file is
young, which protects it against the default retention, but not against ``RETAIN 0 HOURS``
or against a copy that keeps its source's old modification time (DEEP CLONE once did). So
a prepared write holds a lease: ``<table>/.isolde-leases/<uuid>.json`` listing the paths it
staged (files, or folders whose files it staged). VACUUM keeps every leased path. The lease
goes when the write commits (its files are then referenced by the log) or is aborted (its
files are then deleted). A lease names its holder (host, pid, the process's start time): on
the same host, a lease whose process is gone (or whose pid now belongs to another process) is
dead at once, so a killed writer's orphans are garbage for the next VACUUM. A lease of another
host (which this one cannot check) expires after ``LEASE_TTL_MS``; a prepared write held longer
than that loses its protection (its commit then verifies its files still exist, and fails
clearly if not).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from typing import Iterable, Optional

LEASE_DIR = ".isolde-leases"
LEASE_TTL_MS = 7 * 24 * 3600 * 1000  # Delta's default retention


def _start_time(pid: int) -> Optional[str]:
    """The start time of process ``pid`` (``/proc/<pid>/stat`` field 22, in clock ticks since
    boot), or None when there is no such process or no /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None


def _holder() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": _start_time(os.getpid())}


def _holder_gone(data: dict) -> bool:
    """Is the process that took this lease known to be dead? Only decidable on its own host,
    with /proc, for a lease that recorded its start time."""
    if data.get("host") != socket.gethostname() or not data.get("started") or not os.path.isdir("/proc"):
        return False
    return _start_time(int(data.get("pid", -1))) != data["started"]


def table_root_of(path: str) -> Optional[str]:
    """The table folder a staged path lies in: the nearest ancestor holding ``_delta_log``."""
    current = os.path.dirname(os.path.abspath(path))
    while True:
        if os.path.isdir(os.path.join(current, "_delta_log")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _remote(path: str) -> bool:
    return isinstance(path, str) and path.lower().startswith(("s3a://", "s3://"))


def take(paths: Iterable[str], root: Optional[str] = None) -> Optional[str]:
    """Lease ``paths`` (absolute, inside one table) against VACUUM; returns the lease file, or
    None when the paths lie in no table yet and no ``root`` is given. A CREATE ... AS SELECT
    names the folder of the table it creates: its lease also tells a concurrent creator of
    the same table that the files there are another writer's, not a stranger's."""
    paths = list(paths)
    if not paths or any(_remote(p) for p in [*paths, root or ""]):
        return None  # S3: no lease files yet; the commit still verifies its staged files exist
    paths = [os.path.abspath(p) for p in paths]
    root = os.path.abspath(root) if root else table_root_of(paths[0])
    if root is None:
        return None
    folder = os.path.join(root, LEASE_DIR)
    lease = os.path.join(folder, f"{uuid.uuid4().hex}.json")
    tmp = lease + ".tmp"
    text = json.dumps({"paths": [os.path.relpath(p, root) for p in paths], **_holder()})
    for attempt in range(100):
        try:
            os.makedirs(folder, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
            break
        except (FileNotFoundError, FileExistsError):
            # another writer's release removed the empty folder meanwhile: after our write
            # failed, or inside makedirs (its mkdir found the folder, its check then did not)
            if attempt == 99:
                raise
    os.replace(tmp, lease)  # (the folder holds tmp: no release can remove it now)
    return lease


def release(lease: Optional[str]) -> None:
    """Remove the lease, and the lease folder once it is empty (no empty ``.isolde-leases``
    is left in the table's folder; ``rmdir`` fails while another lease or its temporary file
    is there, and a taker that finds the folder gone makes it again)."""
    if lease:
        try:
            os.remove(lease)
        except FileNotFoundError:
            pass
        with contextlib.suppress(OSError):  # another writer's lease is there, or no folder
            os.rmdir(os.path.dirname(lease))


def leased_paths(root: str, now_ms: Optional[int] = None) -> list[str]:
    """Absolute paths under live (unexpired) leases of the table at ``root``; expired leases
    are removed on the way."""
    folder = os.path.join(root, LEASE_DIR)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    out: list[str] = []
    if _remote(root):
        return out
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return out
    for name in names:
        path = os.path.join(folder, name)
        try:
            if os.stat(path).st_mtime * 1000 < now_ms - LEASE_TTL_MS:
                os.remove(path)
                continue
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            if _holder_gone(data):  # a killed writer: its staged files are orphans now
                os.remove(path)
                continue
        except (OSError, ValueError):
            continue  # being written, or already gone: its paths are young anyway
        out += [os.path.normpath(os.path.join(root, p)) for p in data.get("paths", [])]
    return out


def is_leased(path: str, leased: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip(os.sep) + os.sep) for p in leased)
