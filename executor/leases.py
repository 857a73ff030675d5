"""Leases: a prepared write's staged files are the table's own, yet no commit names them yet.

VACUUM deletes only files no version within the retention references. A staged file is
young, which protects it against the default retention, but not against ``RETAIN 0 HOURS``
or against a copy that keeps its source's old modification time (DEEP CLONE once did). So
a prepared write holds a lease: ``<table>/.isolde-leases/<uuid>.json`` listing the paths it
staged (files, or folders whose files it staged). VACUUM keeps every leased path. The lease
goes when the write commits (its files are then referenced by the log) or is aborted (its
files are then deleted). A lease left by a killed process expires after ``LEASE_TTL_MS``, so
its orphans become garbage like any other; a prepared write held longer than that loses its
protection (its commit then verifies its files still exist, and fails clearly if not).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Iterable, Optional

LEASE_DIR = ".isolde-leases"
LEASE_TTL_MS = 7 * 24 * 3600 * 1000  # Delta's default retention


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


def take(paths: Iterable[str], root: Optional[str] = None) -> Optional[str]:
    """Lease ``paths`` (absolute, inside one table) against VACUUM; returns the lease file, or
    None when the paths lie in no table yet and no ``root`` is given. A CREATE ... AS SELECT
    names the folder of the table it creates: its lease also tells a concurrent creator of
    the same table that the files there are another writer's, not a stranger's."""
    paths = [os.path.abspath(p) for p in paths]
    if not paths:
        return None
    root = os.path.abspath(root) if root else table_root_of(paths[0])
    if root is None:
        return None
    folder = os.path.join(root, LEASE_DIR)
    os.makedirs(folder, exist_ok=True)
    lease = os.path.join(folder, f"{uuid.uuid4().hex}.json")
    tmp = lease + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"paths": [os.path.relpath(p, root) for p in paths], "pid": os.getpid()}, fh)
    os.replace(tmp, lease)
    return lease


def release(lease: Optional[str]) -> None:
    if lease:
        try:
            os.remove(lease)
        except FileNotFoundError:
            pass


def leased_paths(root: str, now_ms: Optional[int] = None) -> list[str]:
    """Absolute paths under live (unexpired) leases of the table at ``root``; expired leases
    are removed on the way."""
    folder = os.path.join(root, LEASE_DIR)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    out: list[str] = []
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
        except (OSError, ValueError):
            continue  # being written, or already gone: its paths are young anyway
        out += [os.path.normpath(os.path.join(root, p)) for p in data.get("paths", [])]
    return out


def is_leased(path: str, leased: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip(os.sep) + os.sep) for p in leased)
