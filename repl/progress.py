"""Spark job progress for the REPL: a pure renderer of stage/task counts and a poller over
``SparkContext.statusTracker()`` (only used on a terminal)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class StageProgress:
    stage_id: int
    name: str
    num_tasks: int
    completed: int
    active: int
    failed: int = 0


def render_progress(stages: Sequence[StageProgress], elapsed: float, width: int = 80) -> str:
    """'[=======>      ] 5/8 tasks · stage 3 (2 running) · 1.2 s' over all active stages."""
    if not stages:
        return f"running… {elapsed:.1f} s"
    total = sum(s.num_tasks for s in stages)
    done = sum(s.completed for s in stages)
    active = sum(s.active for s in stages)
    ids = ",".join(str(s.stage_id) for s in stages[:3]) + ("…" if len(stages) > 3 else "")
    label = "stage" if len(stages) == 1 else "stages"
    tail = f" {done}/{total} tasks · {label} {ids}"
    if active:
        tail += f" ({active} running)"
    failed = sum(s.failed for s in stages)
    if failed:
        tail += f" · {failed} failed"
    tail += f" · {elapsed:.1f} s"
    bar_width = max(10, min(40, width - len(tail) - 3))
    filled = int(bar_width * done / total) if total else 0
    bar = "=" * filled + (">" if filled < bar_width else "") + " " * max(bar_width - filled - 1, 0)
    return f"[{bar[:bar_width]}]{tail}"[: max(width - 1, 20)]


def spinner_frame(elapsed: float, text: str) -> str:
    frames = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    return f"{frames[int(elapsed * 10) % len(frames)]} {text} {elapsed:.1f} s"


def read_stages(spark: Any) -> list[StageProgress]:
    """Active stages from the status tracker (best effort: [] on any failure)."""
    try:
        tracker = spark.sparkContext.statusTracker()
        out = []
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is None:
                continue
            out.append(StageProgress(sid, info.name, info.numTasks, info.numCompletedTasks, info.numActiveTasks,
                                     info.numFailedTasks))
        return out
    except Exception:
        return []


class StatusLine:
    """One self-overwriting line on a terminal stream (stderr)."""

    def __init__(self, stream: Any, width: int = 80):
        self.stream = stream
        self.width = width
        self.shown = False
        self.started = time.perf_counter()

    def show(self, text: str) -> None:
        self.stream.write("\r\x1b[2K" + text[: self.width - 1])
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self.shown = False
