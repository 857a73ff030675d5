"""What the process tests share: reading a worker's line-by-line report, waiting on it, and
the commitInfo of every version the workers made (from the raw JSON, so a torn commit fails)."""

from __future__ import annotations

import json
import os
import time


def report_lines(path: str) -> list[str]:
    """The complete lines a worker has written so far (a torn last line is not read)."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    return text.split("\n")[:-1]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def commit_infos(path: str, first: int) -> list[dict]:
    """commitInfo (with its ``version``) of every commit from ``first`` on; every line must parse."""
    log_dir = os.path.join(path, "_delta_log")
    versions = sorted(int(n[:20]) for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit())
    out = []
    for v in versions:
        if v >= first:
            with open(os.path.join(log_dir, f"{v:020d}.json")) as f:
                actions = [json.loads(line) for line in f if line.strip()]
            out.append(dict(next(a["commitInfo"] for a in actions if "commitInfo" in a), version=v))
    return out
