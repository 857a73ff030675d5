"""A DML statement run again over materialised live rows when it failed where a row a deletion
vector deletes may have been evaluated.

Deletion vectors are applied late, to keep the scans cheap: a DELETE finds positions over every
row of its files and takes the deleted ones out on the driver (``bounded_rows``); a MERGE joins
its target rows before their vectors are applied (``scan.scan_for_join``); and Spark pushes a
WHERE below the broadcast join that applies many vectors. So a condition, ON or SET expression
may be evaluated on a deleted row. That only matters when the evaluation raises (ANSI overflow,
a bad cast, division by zero, ``raise_error``): the statement must not fail for a row it cannot
see. Then it runs once more with every scan's deleted rows dropped first and materialised (a
local checkpoint: nothing planned above it reaches a deleted row). An error of that second run
is the statement's own. Nothing is committed by a failed run; files it wrote are not in the log.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.base import AnalysisException
from pyspark.errors.exceptions.captured import CapturedException


def has_deleted_rows(snapshot) -> bool:
    """Does some file of the snapshot carry a deletion vector?"""
    return any(a.deletion_vector is not None for a in snapshot.all_files)


def retried(target, run: Callable):
    """``run(target)``; when Spark fails it (a job's error, not a plan's, not a cancellation)
    and some file of the target has a deletion vector, ``run`` again with the target's scans
    reading live rows first."""
    try:
        return run(target)
    except (CapturedException, Py4JJavaError) as e:
        if isinstance(e, AnalysisException) or _cancelled(e) or target.live_rows_first \
                or not has_deleted_rows(target.snapshot):
            raise
    return run(replace(target, live_rows_first=True))


def _cancelled(error: Exception) -> bool:
    """Was the job cancelled (Ctrl-C, ``Session.cancel``, a stopped context)? Never run again."""
    text = str(error).lower()
    return "cancel" in text or "sparkcontext was shut down" in text or "interrupted" in text
