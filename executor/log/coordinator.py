"""The commit coordinator: one commit sequence for the tables that opt in.

A table opts in with ``isolde.coordinatedCommits = true``; ``isolde.coordinator`` names the
coordinator (a folder, or an ``s3a://`` prefix; the session's warehouse ``_isolde_coordinator``
unless given). From the commit after the opt-in on, every commit to the table is *decided* by
writing the next entry of the coordinator's log, ``<coordinator>/log/<seq>.json``, with
put-if-absent: the entry holds each table's commit (its version and body) and exists whole or
not at all, so a transaction over several tables is decided by one write. It is then
*published*: each commit is copied, put-if-absent, to its table's ``_delta_log/<version>.json``.

Whoever sees an entry first publishes it (the writer right after deciding, or any isolde
reader or writer after a crash: ``DeltaLog.update`` rolls the coordinator forward before it
reads a coordinated table), so a crash between decision and publication is rolled forward,
never half applied. Entries are published in sequence order, and a writer decides only after
publishing every earlier entry and finding its table's version free, so an entry's version
can never be taken by another commit. Each published commitInfo carries its sequence number
(``isoldeCoordinatorSeq``): a reader that fixed a sequence number reads every coordinated
table as of it (``version_at``), i.e. all tables at one coordinated point.

Other engines keep reading the published ``_delta_log`` (no reader feature); they cannot write
around the coordinator, because the table's protocol lists the writer feature
``isoldeCoordinatedCommits`` that they do not know (delta-rs and Delta-Spark refuse to write).
This is the managing-catalog side of Delta's ``catalogManaged`` RFC, done client-side over
put-if-absent, with isolde's own feature name (docs/TRANSACTIONS.md says why). It never
imports Spark.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from isolde.errors import InternalError, InvalidPropertyError

from .features import COORDINATED_PROPERTY
from .store import LogStore, is_object_store_path, store_for_path

_log = logging.getLogger(__name__)

LOCATION_PROPERTY = "isolde.coordinator"
FEATURE = "isoldeCoordinatedCommits"
#: commitInfo field of a published commit: the coordinator sequence number that decided it
SEQ_FIELD = "isoldeCoordinatorSeq"
#: the coordinator folder of a session's warehouse
FOLDER = "_isolde_coordinator"

#: the coordinator a table opting in without naming one gets (the session's warehouse's)
DEFAULT_LOCATION: contextvars.ContextVar = contextvars.ContextVar("isolde_coordinator", default=None)
#: a statement's read point: {coordinator location: seq}, filled at its first coordinated read.
#: Set for queries and transactions, so every coordinated table is read as of one sequence
#: number; None (writes outside transactions): the latest.
READ_POINT: contextvars.ContextVar = contextvars.ContextVar("isolde_read_point", default=None)

#: called with the sequence number right after a decision, before publication (crash tests)
AFTER_DECIDE: Optional[Callable[[int], None]] = None


def coordinator_location(metadata) -> Optional[str]:
    """The coordinator of a table whose metadata opts in, else None."""
    if metadata is None:
        return None
    conf = metadata.configuration or {}
    if str(conf.get(COORDINATED_PROPERTY, "false")).strip().lower() != "true":
        return None
    location = conf.get(LOCATION_PROPERTY)
    if not location:
        raise InvalidPropertyError(
            f"The table opts in to coordinated commits ({COORDINATED_PROPERTY} = true) but names no coordinator "
            f"({LOCATION_PROPERTY}).")
    return location


def with_location(configuration: dict) -> dict:
    """Table properties opting in get the default coordinator when they name none."""
    if str(configuration.get(COORDINATED_PROPERTY, "false")).strip().lower() != "true" \
            or configuration.get(LOCATION_PROPERTY):
        return configuration
    location = DEFAULT_LOCATION.get()
    if location is None:
        raise InvalidPropertyError(
            f"{COORDINATED_PROPERTY} = true needs a coordinator: set {LOCATION_PROPERTY} to a folder shared by "
            "every writer of the table (a session over a warehouse uses the warehouse's _isolde_coordinator).")
    return {**configuration, LOCATION_PROPERTY: location}


def normalize_location(location: str) -> str:
    if is_object_store_path(location):
        from .s3_store import normalize_s3_uri

        return normalize_s3_uri(location).rstrip("/")
    if location.startswith("file:"):
        location = location[len("file:"):]
    return os.path.abspath(location)


@dataclass(frozen=True)
class CoordinatedCommit:
    """One table's commit in an entry: its log folder, version and body (newline-delimited JSON)."""

    log_path: str
    version: int
    body: bytes

    @property
    def commit_path(self) -> str:
        return os.path.join(self.log_path, f"{self.version:020d}.json")


class VersionTaken(FileExistsError):
    """A table's version was published by another entry before this one was decided: the
    writer catches up on the winners and tries again (the ordinary optimistic loop)."""


def stamp(body: bytes, seq: int) -> bytes:
    """``body`` with the deciding sequence number in its commitInfo (the first action)."""
    first, _, rest = body.partition(b"\n")
    action = json.loads(first)
    if "commitInfo" not in action:
        raise InternalError("A coordinated commit must start with its commitInfo.")
    action["commitInfo"][SEQ_FIELD] = seq
    return json.dumps(action, separators=(",", ":")).encode("utf-8") + b"\n" + rest


def commit_seq(body: bytes) -> Optional[int]:
    """The sequence number that decided a published commit (None: committed directly)."""
    first = body.partition(b"\n")[0]
    if SEQ_FIELD.encode() not in first:
        return None
    try:
        return json.loads(first).get("commitInfo", {}).get(SEQ_FIELD)
    except ValueError:
        return None


class Coordinator:
    """One coordinator's log. Thread-safe; one instance per location per process."""

    _instances: dict = {}
    _instances_lock = threading.Lock()

    @classmethod
    def at(cls, location: str, store: Optional[LogStore] = None) -> "Coordinator":
        location = normalize_location(location)
        with cls._instances_lock:
            found = cls._instances.get(location)
            if found is None:
                found = cls._instances[location] = cls(location, store)
            return found

    def __init__(self, location: str, store: Optional[LogStore] = None):
        self.location = location
        self.store = store or store_for_path(location)
        self.log_path = os.path.join(location, "log")
        self.hint_path = os.path.join(location, "_published")
        self._published = 0  # every entry up to here is published (known to this process)
        self._lock = threading.Lock()

    def entry_path(self, seq: int) -> str:
        return os.path.join(self.log_path, f"{seq:020d}.json")

    # ------------------------------------------------------------------ reading
    def _hint(self) -> int:
        try:
            return int(self.store.read(self.hint_path).decode().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def entries_after(self, seq: int) -> list[int]:
        names = (os.path.basename(s.path) for s in self.store.list_from(self.entry_path(seq + 1)))
        return sorted(int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit())

    def read_entry(self, seq: int) -> dict:
        return json.loads(self.store.read(self.entry_path(seq)))

    def roll_forward(self) -> int:
        """Publish every decided entry; returns the newest sequence number (0: none yet)."""
        hint = self._hint()
        if hint == 0 and self._published and not self.store.exists(self.hint_path):
            self._published = 0  # the coordinator folder was replaced: trust nothing remembered
        start = max(self._published, hint)
        pending = self.entries_after(start)
        for seq in pending:
            if seq <= self._published:
                continue
            self._publish(self.read_entry(seq))
        head = pending[-1] if pending else start
        with self._lock:
            if head > self._published:
                self._published = head
                try:
                    self.store.write(self.hint_path, str(head).encode())  # a hint: stale is only slower
                except OSError:
                    pass
        return head

    def _publish(self, entry: dict) -> None:
        for commit in entry["commits"]:
            path = os.path.join(commit["log"], f"{int(commit['version']):020d}.json")
            body = commit["body"].encode("utf-8")
            try:
                self.store.put_if_absent(path, body)
            except FileExistsError:
                if self.store.read(path) != body:
                    raise InternalError(
                        f"Coordinator entry {entry['seq']} decided version {commit['version']} of the table at "
                        f"{os.path.dirname(commit['log'])}, but another commit is in {path}: something wrote the "
                        "table without its coordinator. The coordinated log is inconsistent; stop every writer.")
            except FileNotFoundError:  # the table folder is gone (dropped): nothing to publish into
                pass

    def version_at(self, log, latest_version: int, seq: int) -> int:
        """The version of ``log``'s table as of sequence number ``seq``: the newest published
        commit decided at or before it (or committed directly, before the table opted in)."""
        version = latest_version
        while version >= 0:
            data = log._read_commit_bytes(version)
            decided = commit_seq(data) if data is not None else None
            if decided is None or decided <= seq:
                return version
            version -= 1
        return version

    # ------------------------------------------------------------------ deciding
    def decide(self, commits: Iterable[CoordinatedCommit], validate: Optional[Callable[[], None]] = None) -> tuple:
        """Decide ``commits`` together as the next entry; returns (sequence number, stamped bodies).

        Raises ``VersionTaken`` when a table's version was published meanwhile (catch up, retry),
        or whatever ``validate`` raises; ``validate`` runs with every earlier entry published,
        just before the decision, so nothing can commit between it and the decision."""
        commits = list(commits)
        self.store.mkdirs(self.log_path)
        while True:
            head = self.roll_forward()
            for commit in commits:
                if self.store.exists(commit.commit_path):
                    raise VersionTaken(commit.commit_path)
            if validate is not None:
                validate()
            seq = head + 1
            bodies = [stamp(c.body, seq) for c in commits]
            entry = {"seq": seq, "timestamp": int(time.time() * 1000),
                     "commits": [{"log": c.log_path, "version": c.version, "body": b.decode("utf-8")}
                                 for c, b in zip(commits, bodies)]}
            data = json.dumps(entry, separators=(",", ":")).encode("utf-8")
            try:
                self.store.put_if_absent(self.entry_path(seq), data)
            except FileExistsError:
                continue  # another entry took this sequence number: publish it, then try the next
            except OSError:
                if not self._holds(seq, data):  # the write may have landed before the error
                    raise
            # decided: from here on the transaction stands, whatever fails
            if AFTER_DECIDE is not None:
                AFTER_DECIDE(seq)
            try:
                self._publish(entry)
            except Exception:  # the next reader or writer of these tables publishes it
                _log.warning("coordinator entry %d is decided but was not published; the next access publishes "
                             "it", seq, exc_info=True)
            return seq, bodies

    def _holds(self, seq: int, data: bytes) -> bool:
        try:
            return self.store.read(self.entry_path(seq)) == data
        except OSError:
            return False
