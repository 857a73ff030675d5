"""Row tracking (PROTOCOL.md "Row IDs" / "Row Commit Versions"), assigned at commit time.

When a table's protocol has the ``rowTracking`` writer feature, every ``add`` a commit makes
carries ``baseRowId`` (fresh row ids above the table's high-water mark, kept in the
``delta.rowTracking`` domain) and ``defaultRowCommitVersion`` (the version it commits at);
recommits of a live file (a new deletion vector) and removes keep the values of the add they
replace. Ids depend on the version a commit lands at, so they are assigned per attempt: a
writer that loses the race re-assigns from the winner's high-water mark instead of
conflicting (Delta resolves the domain the same way).

When row tracking is *enabled* (``delta.enableRowTracking``) rewrites may also preserve a
row's stable id and commit version in the materialised columns the configuration names;
OPTIMIZE ZORDER and clustering do (jobs/optimize.py), which is what lets a concurrent
deletion vector follow rows through those rewrites (compaction.py).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Iterable, Mapping

from isolde.errors import InternalError
from ..log.actions import Action, AddFile, DomainMetadata, RemoveFile

DOMAIN = "delta.rowTracking"
ENABLE = "delta.enableRowTracking"
ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
COMMIT_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"
PRESERVED_TAG = "delta.rowTracking.preserved"


def supported(writer_features: Iterable[str]) -> bool:
    return "rowTracking" in set(writer_features)


def enabled(metadata) -> bool:
    conf = metadata.configuration if metadata is not None else {}
    return str(conf.get(ENABLE, "false")).strip().lower() == "true"


def materialized_columns(metadata) -> tuple[str, str] | None:
    """(row id column, row commit version column) of a table with row tracking enabled, else None."""
    if not enabled(metadata):
        return None
    conf = metadata.configuration
    row_id, version = conf.get(ROW_ID_COLUMN), conf.get(COMMIT_VERSION_COLUMN)
    return (row_id, version) if row_id and version else None


def with_materialized_column_names(configuration: Mapping[str, str]) -> dict:
    """The configuration with the materialised column names a table enabling row tracking needs
    (unique names that no schema column can take, as Delta chooses them)."""
    conf = dict(configuration)
    if str(conf.get(ENABLE, "false")).strip().lower() == "true":
        conf.setdefault(ROW_ID_COLUMN, f"_row-id-col-{uuid.uuid4()}")
        conf.setdefault(COMMIT_VERSION_COLUMN, f"_row-commit-version-col-{uuid.uuid4()}")
    return conf


def high_water_mark(domains: Mapping[str, DomainMetadata]) -> int:
    """The highest row id assigned so far (-1: none)."""
    dm = domains.get(DOMAIN)
    if dm is None or dm.removed:
        return -1
    try:
        conf = json.loads(dm.configuration or "{}")
        # PROTOCOL.md's key is rowIdHighWaterMark; isolde wrote highWaterMark until session 14, so both are read
        return max(int(conf.get("rowIdHighWaterMark", -1)), int(conf.get("highWaterMark", -1)))
    except (ValueError, TypeError, AttributeError):
        raise InternalError(f"The {DOMAIN} domain metadata is not readable: {dm.configuration!r}.")


def winner_high_water_mark(actions: Iterable[Action]) -> int:
    return high_water_mark({a.domain: a for a in actions if isinstance(a, DomainMetadata) and a.domain == DOMAIN})


def backfill(live_files: Iterable[AddFile]) -> list[AddFile]:
    """Recommits (dataChange=false) of the live files that have no ``baseRowId`` yet: the
    commit that turns row tracking on must leave every live file with one (PROTOCOL.md)."""
    return [replace(f, data_change=False, extra=dict(f.extra)) for f in live_files if f.base_row_id is None]


class RowIdAssigner:
    """Assigns ``baseRowId`` / ``defaultRowCommitVersion`` to one transaction's actions, once
    per commit attempt; the files it numbered are renumbered on the next attempt."""

    def __init__(self, live_files: Mapping[str, AddFile], high_water_mark: int):
        self.known = dict(live_files)  # path -> the add that last committed it
        self.high_water_mark = high_water_mark
        self.fresh: set[str] = set()  # paths this transaction numbered

    def saw_winner(self, actions: Iterable[Action]) -> None:
        """A winning commit: its adds become known files, its high-water mark the floor."""
        actions = list(actions)
        for a in actions:
            if isinstance(a, AddFile):
                self.known[a.path] = a
            elif isinstance(a, RemoveFile):
                self.known.pop(a.path, None)
        self.high_water_mark = max(self.high_water_mark, winner_high_water_mark(actions))

    def assign(self, actions: list[Action], version: int) -> list[Action]:
        """The actions to write at ``version``, numbered; plus the new high-water mark if it moved."""
        actions = [a for a in actions if not (isinstance(a, DomainMetadata) and a.domain == DOMAIN)]
        hwm = self.high_water_mark
        for a in actions:  # ids a commit keeps (restored or cloned files) raise the floor
            if isinstance(a, AddFile) and a.base_row_id is not None and a.path not in self.fresh:
                hwm = max(hwm, a.base_row_id + max(_records(a), 1) - 1)
        next_id = hwm + 1
        out: list[Action] = []
        fresh: set[str] = set()
        for a in actions:
            if isinstance(a, AddFile):
                before = self.known.get(a.path)
                if a.path in self.fresh or (a.base_row_id is None and (before is None or before.base_row_id is None)):
                    a = replace(a, base_row_id=next_id, default_row_commit_version=version, extra=dict(a.extra))
                    next_id += max(_records(a), 1)
                    fresh.add(a.path)
                elif a.base_row_id is None or a.default_row_commit_version is None:
                    a = replace(a, base_row_id=a.base_row_id if a.base_row_id is not None else before.base_row_id,
                                default_row_commit_version=(a.default_row_commit_version
                                                            if a.default_row_commit_version is not None
                                                            else before.default_row_commit_version),
                                extra=dict(a.extra))
            elif isinstance(a, RemoveFile) and a.base_row_id is None:
                before = self.known.get(a.path)
                if before is not None and before.base_row_id is not None:
                    a = replace(a, base_row_id=before.base_row_id,
                                default_row_commit_version=before.default_row_commit_version, extra=dict(a.extra))
            out.append(a)
        self.fresh = fresh
        if next_id - 1 > self.high_water_mark:
            out.append(DomainMetadata(DOMAIN, json.dumps({"rowIdHighWaterMark": next_id - 1}, separators=(",", ":"))))
        return out


def _records(add: AddFile) -> int:
    n = add.num_records
    if n is None:
        raise InternalError(f"Cannot assign row ids to {add.path}: its stats have no numRecords.")
    return n


def preserved(actions: Iterable[Action], declared: bool | None) -> bool:
    """commitInfo's ``delta.rowTracking.preserved``: true when no row was updated or copied
    without keeping its ids (``declared`` by a writer that materialises them, e.g. OPTIMIZE)."""
    if declared is not None:
        return declared
    actions = list(actions)
    added = {a.path for a in actions if isinstance(a, AddFile)}
    removed = {a.path for a in actions if isinstance(a, RemoveFile)}
    # rows left files (a file removed, or re-added with a deletion vector) and new files took
    # rows: an update or a copy gave them fresh ids, unless the writer declared otherwise. (An
    # insert beside a delete looks the same: false is the safe answer.)
    return not (removed and (added - removed))
