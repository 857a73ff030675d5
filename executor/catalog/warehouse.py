"""The warehouse catalog: databases are folders, tables are folders with a ``_delta_log``.

Layout (documented choice)::

    <warehouse>/
      default/                 the `default` database (always exists, created on connect)
        t/_delta_log/...       managed table `default.t`
        ext.location.json      an external (LOCATION) table: {"location": "/abs/path"}
      sales/                   database `sales`
        orders/_delta_log/...

* Names are case-insensitive and stored lower-case (as Spark's session catalog does).
* A table or database name never resolves outside the warehouse: empty names, ``.``/``..``,
  names with path separators or NUL, names starting with ``.`` and names holding isolde's own
  catalog suffixes (``.location.json``, ``.view.json``) are rejected; a database or table folder
  that is a symbolic link leading out of the warehouse is refused for reads and writes (the
  error names the link and its target: use ``delta.`/target``` or ``LOCATION`` for data kept
  elsewhere). A link inside the warehouse is followed.
* ``delta.`/some/path``` addresses any path, absolute only (or a ``file:`` URI), as in Delta: a
  relative ``delta.`t``` would silently be a folder of the process's working directory.
* DROP TABLE of a managed table deletes its folder; of an external (LOCATION) table only
  removes the registration and keeps the data (Spark/Databricks semantics). A table or database
  folder that is a symbolic link loses the link only: DROP never deletes through a link.
* LOCATION never lies inside the warehouse (Unity Catalog's LOCATION_OVERLAP): a DROP of a
  managed table or a DROP DATABASE ... CASCADE would delete an external table's data there.
"""

from __future__ import annotations

import os
import re
import threading
import unicodedata
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

from isolde.errors import AnalysisError, DatabaseNotFoundError, TableAlreadyExistsError, TableNotFoundError


def local_location(text: str) -> str:
    """A table location as an absolute local path: a plain path (``~`` expanded) or a
    ``file:`` URI (``file:/x``, ``file:///x``, percent-encoded, as Spark and Hadoop print
    them); or an object-store URI, ``s3a://bucket/key`` (``s3://`` is spelled ``s3a://``, the
    file system Spark has for it). Other schemes are refused."""
    from urllib.parse import unquote, urlparse

    from ..log import table_files
    from ..log.s3_store import is_s3_uri

    if is_s3_uri(text):
        return "s3a://" + table_files.normpath(text).split("://", 1)[1]
    scheme = urlparse(text).scheme if ":" in text else ""
    if scheme.lower() == "file":
        parsed = urlparse(text)
        if parsed.netloc not in ("", "localhost"):
            raise AnalysisError(f"Location {text!r} names host {parsed.netloc!r}: only local paths are supported.",
                                error_class="UNSUPPORTED_LOCATION", sqlstate="0A000")
        return os.path.abspath(unquote(parsed.path))
    if len(scheme) > 1:  # (a one-letter scheme would be a Windows drive)
        raise AnalysisError(f"Location {text!r}: the {scheme}:// file system is not supported; isolde reads and "
                            "writes local paths (a path or a file: URI) and S3 (s3a://bucket/path).",
                            error_class="UNSUPPORTED_LOCATION", sqlstate="0A000")
    return os.path.abspath(os.path.expanduser(text))
from isolde.grammar import ast

from ..log.store import is_object_store_path

DEFAULT_DATABASE = "default"
_EXTERNAL_SUFFIX = ".location.json"
_BAD_NAME = re.compile(r"[/\\\x00]")
#: isolde's own files in a database folder: a name holding these would be misread as one of them
_RESERVED_SUFFIXES = (_EXTERNAL_SUFFIX, ".view.json")


_LOG_FILE = re.compile(r"^\d{20}\.(json|checkpoint.*)$")
_LOGS: dict = {}
_LOGS_LOCK = threading.Lock()


def _open_log(path: str):
    """One DeltaLog per table path per process, so snapshots update incrementally."""
    with _LOGS_LOCK:
        log = _LOGS.get(path)
        if log is not None and not _still_valid(log):
            log = None
        if log is None:
            log = _LOGS[path] = _new_log(path)
        return log


def _still_valid(log) -> bool:
    """False when the table's folder was deleted (or recreated) behind the cached log's back."""
    latest = getattr(log, "_latest", None)
    if latest is None or latest.version < 0:
        return True
    try:
        if is_object_store_path(log.log_path):  # a HEAD per resolve would cost a round trip: trust it
            return True
        return os.path.exists(log.commit_path(latest.version)) or os.path.exists(
            os.path.join(log.log_path, "_last_checkpoint"))
    except Exception:
        return False


def forget_log(path: str) -> None:
    with _LOGS_LOCK:
        _LOGS.pop(path, None)


def _new_log(path: str):
    try:
        from ..log import DeltaLog  # the log helper's module
    except ImportError:
        from ..log.delta_log import DeltaLog

    return DeltaLog.for_table(path)


def has_commits(path: str) -> bool:
    """True when ``path`` holds a Delta table (a ``_delta_log`` with at least one commit or checkpoint)."""
    if is_object_store_path(path):
        from ..log.store import store_for_path

        listed = store_for_path(path).list_from(f"{path}/_delta_log/{0:020d}")
        return any(_LOG_FILE.match(os.path.basename(f.path)) for f in listed)
    log_dir = os.path.join(path, "_delta_log")
    try:
        names = os.listdir(log_dir)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return any(n.endswith(".json") and n[:20].isdigit() or ".checkpoint" in n for n in names)


@dataclass
class TableHandle:
    """A resolved table: display name, absolute path, and its DeltaLog (opened lazily)."""

    name: str
    path: str
    database: Optional[str] = None
    table: Optional[str] = None
    external: bool = False
    by_path: bool = False
    registration: Optional[str] = None  # the pointer file of an external table
    version: Optional[int] = None  # time travel asked for by the reference
    timestamp: Optional[object] = None

    @cached_property
    def log(self):
        from ..log.staged_log import ACTIVE_TRANSACTION

        transaction = ACTIVE_TRANSACTION.get()
        if transaction is not None:  # inside BEGIN ... COMMIT: the table as the transaction sees it
            if self.version is not None or self.timestamp is not None:
                from isolde.errors import TransactionStateError

                raise TransactionStateError(
                    f"Time travel ({self.name} VERSION / TIMESTAMP AS OF) is not supported inside a transaction, "
                    "as in Databricks: a transaction reads one snapshot of each table. Run the query outside "
                    "the transaction. The transaction is still open.", error_class="TIME_TRAVEL_QUERY_IN_TRANSACTION",
                    sqlstate="0A000")
            return transaction.log_for(self.name, _open_log(self.path))
        return _open_log(self.path)

    @property
    def exists(self) -> bool:
        return has_commits(self.path)

    @property
    def managed(self) -> bool:
        return not self.external and not self.by_path


#: a folder name (and so a table or database name) holds at most this many UTF-8 bytes (ext4, XFS,
#: APFS, NTFS: 255); a longer name was a raw OS error from deep inside a write
MAX_NAME_BYTES = 255


def unprintable(name: str) -> Optional[str]:
    """The first character a name must not hold, described: control characters (NUL, newline...),
    and format characters such as the bidirectional overrides that make a name display
    differently from what it is (U+202E shows `txt.exe` as `exe.txt`)."""
    for ch in name:
        category = unicodedata.category(ch)
        if category in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            return f"U+{ord(ch):04X} ({unicodedata.name(ch, category)})"
    return None


def check_identifier(name: str, what: str = "column") -> str:
    """A column (or other) name: printable characters only, as Spark's identifiers."""
    bad = unprintable(name)
    if bad is not None:
        raise AnalysisError(f"Invalid {what} name {name!r}: it holds the character {bad}; names may hold "
                            "printable characters only.", error_class="INVALID_IDENTIFIER", sqlstate="42602")
    return name


def check_name(name: str, what: str = "table") -> str:
    if not name or name in (".", "..") or name.startswith(".") or _BAD_NAME.search(name):
        raise AnalysisError(f"Invalid {what} name `{name}`: names cannot be empty, start with '.', or contain "
                            "path separators.", error_class="INVALID_IDENTIFIER", sqlstate="42602")
    check_identifier(name, what)
    lowered = name.lower()  # what lands on disk: lower() may lengthen a name (U+0130 -> 'i' + U+0307)
    if len(lowered.encode("utf-8")) > MAX_NAME_BYTES:
        raise AnalysisError(f"Invalid {what} name `{name[:40]}...`: {len(lowered.encode('utf-8'))} bytes long; a "
                            f"{what} name is a folder name and may hold at most {MAX_NAME_BYTES} bytes.",
                            error_class="INVALID_IDENTIFIER", sqlstate="42602")
    reserved = next((r for r in _RESERVED_SUFFIXES if r in lowered), None)
    if reserved is not None:
        raise AnalysisError(f"Invalid {what} name `{name}`: names cannot contain '{reserved}', the suffix of "
                            "isolde's own catalog files.", error_class="INVALID_IDENTIFIER", sqlstate="42602")
    return lowered


_AT_VERSION = re.compile(r"^(?P<path>.*)@[vV](?P<version>\d+)$")
_AT_TIMESTAMP = re.compile(r"^(?P<path>.*)@(?P<ts>\d{17})$")


def path_time_travel(text: str) -> Optional[tuple]:
    """Delta's ``@`` syntax on a path that is not itself a table: ``/p@v12`` is version 12 of
    ``/p``, ``/p@20240102030405678`` (yyyyMMddHHmmssSSS, session time zone) its version as of
    that instant. (real path, version, timestamp text) or None."""
    m = _AT_VERSION.match(text)
    if m:
        return m.group("path"), int(m.group("version")), None
    m = _AT_TIMESTAMP.match(text)
    if m:
        t = m.group("ts")
        return m.group("path"), None, f"'{t[:4]}-{t[4:6]}-{t[6:8]} {t[8:10]}:{t[10:12]}:{t[12:14]}.{t[14:]}'"
    return None


def _absolute_location(text: str) -> bool:
    """Is a ``delta.`...``` path absolute: ``/x``, ``~/x``, ``file:/x`` (other schemes are judged,
    and refused, by local_location)?"""
    from urllib.parse import urlparse

    scheme = urlparse(text).scheme if ":" in text else ""
    if scheme.lower() == "file":
        return urlparse(text).path.startswith("/")
    if len(scheme) > 1:
        return True
    return text.startswith(("/", "~"))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def table_location_real(path: str) -> str:
    """A location with symbolic links resolved (an S3 location is what it says)."""
    from ..log import table_files

    return table_files.normpath(path) if table_files.is_remote(path) else os.path.realpath(path)


def foreign_entries(path: str) -> list[str]:
    """What a folder that is not a Delta table already holds (hidden names left out: a failed
    write's staging folder, a file manager's .DS_Store). CREATE TABLE / CTAS / CLONE refuse such a
    location, as Delta does: a later VACUUM would take those files for the table's garbage.
    Files a concurrent CREATE ... AS SELECT staged under its lease are not foreign: that writer
    and this one race to create the table, and the commit decides (ProtocolChangedException)."""
    from . import leases

    if is_object_store_path(path):
        from ..log import table_files

        names = [n for n in table_files.files_for(path).names(path) if not n.startswith(".")]
        return [n for n in names if not (n == "_delta_log" and not has_commits(path))]
    try:
        names = sorted(n for n in os.listdir(path) if not n.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []
    names = [n for n in names if not (n == "_delta_log" and _empty_log(os.path.join(path, n)))]
    leased = leases.leased_paths(path) if names else []
    return [n for n in names if not _only_leased(os.path.join(os.path.abspath(path), n), leased)]


def _empty_log(folder: str) -> bool:
    """A ``_delta_log`` without a single visible file: what a CREATE whose version 0 could not be
    written (full disk, no permission) leaves; it holds no table and nobody's data."""
    try:
        return os.path.isdir(folder) and not os.path.islink(folder) and \
            not any(not n.startswith(".") for n in os.listdir(folder))
    except OSError:
        return False


def _only_leased(full: str, leased: list) -> bool:
    """Is ``full`` a leased path, or a folder holding nothing else (a partition folder a
    concurrent CTAS staged into)?"""
    from . import leases

    if not leased:
        return False
    if leases.is_leased(full, leased):
        return True
    if not os.path.isdir(full) or os.path.islink(full):
        return False
    children = os.listdir(full)
    return bool(children) and all(_only_leased(os.path.join(full, c), leased) for c in children)


class Catalog:
    def __init__(self, warehouse: str):
        from .catalog_files import folder_for

        #: where the catalog's folders and files live: a local disk, or S3 (an s3a:// warehouse)
        self.files = folder_for(warehouse)
        if self.files.remote:
            warehouse = local_location(warehouse)
        self.warehouse = self.files.absolute(warehouse)
        self.files.makedirs(self.database_path(DEFAULT_DATABASE), exist_ok=True)

    # ------------------------------------------------------------------ containment

    def inside(self, path: str) -> bool:
        """Does ``path``, symbolic links resolved, lie in the warehouse (itself resolved: a
        warehouse that is a link to another disk is fine)?"""
        return _inside(self.files.realpath(path), self.files.realpath(self.warehouse))

    def check_inside(self, path: str, what: str, name: str) -> None:
        """Refuse a database or table folder (or a catalog file) that a symbolic link takes out
        of the warehouse: a name reads, writes and deletes inside the warehouse only."""
        if self.files.remote or not os.path.lexists(path) or self.inside(path):
            return  # (S3 has no links: nothing leads out)
        target = os.path.realpath(path)
        raise AnalysisError(
            f"The {what} `{name}` leads out of the warehouse: {path} is a symbolic link to {target}. isolde "
            f"never follows a {what} name out of {self.warehouse}; address the data by path "
            f"(delta.`{target}`) or register it (CREATE TABLE name LOCATION '{target}').",
            error_class="NAME_OUTSIDE_WAREHOUSE", sqlstate="42K05")

    def check_location(self, path: str, name: str, text: Optional[str] = None) -> None:
        """An external table's LOCATION lies outside the warehouse: managed folders inside it are
        deleted by DROP TABLE / DROP DATABASE ... CASCADE, and would take the external data along.
        ``text``: the LOCATION as the statement spelt it."""
        real = table_location_real(path)
        if _inside(real, self.files.realpath(self.warehouse)):
            raise AnalysisError(
                f"Cannot use LOCATION '{text or path}' for `{name}`: it lies inside the warehouse {self.warehouse}, "
                "where isolde keeps managed tables (a DROP there deletes folders). Create a managed table instead "
                "(no LOCATION), or choose a location outside the warehouse.",
                error_class="INVALID_PARAMETER_VALUE.LOCATION_OVERLAP", sqlstate="22023")

    def is_link(self, path: str) -> bool:
        return self.files.islink(path.rstrip(os.sep))

    # ------------------------------------------------------------------ databases

    def database_path(self, database: str) -> str:
        return self.files.join(self.warehouse, check_name(database, "database"))

    def database_exists(self, database: str) -> bool:
        return self.files.isdir(self.database_path(database))

    def list_databases(self) -> list[str]:
        names = []
        for entry in sorted(self.files.listdir(self.warehouse)):
            full = self.files.join(self.warehouse, entry)
            if not entry.startswith((".", "_")) and self.files.isdir(full) and not has_commits(full):
                names.append(entry)
        if DEFAULT_DATABASE not in names:
            names.insert(0, DEFAULT_DATABASE)
        return names

    def require_database(self, database: str) -> str:
        path = self.database_path(database)
        self.check_inside(path, "database", check_name(database, "database"))
        if not self.files.isdir(path):
            raise DatabaseNotFoundError(database, self.list_databases())
        return path

    def create_database(self, database: str, if_not_exists: bool = False) -> bool:
        path = self.database_path(database)
        self.check_inside(path, "database", check_name(database, "database"))
        if self.files.lexists(path) and not self.files.isdir(path):
            raise AnalysisError(f"Cannot create database `{database}`: {path} exists and is not a folder.",
                                error_class="SCHEMA_ALREADY_EXISTS", sqlstate="42P06")
        if self.files.isdir(path):
            if if_not_exists:
                return False
            raise AnalysisError(f"Cannot create database `{database}`: it already exists.",
                                error_class="SCHEMA_ALREADY_EXISTS", sqlstate="42P06")
        self.files.makedirs(path)
        return True

    def drop_database(self, database: str, if_exists: bool = False, cascade: bool = False) -> bool:
        name = check_name(database, "database")
        if name == DEFAULT_DATABASE:
            raise AnalysisError("Cannot drop the `default` database.", error_class="UNSUPPORTED_FEATURE.DROP_DATABASE")
        path = self.database_path(name)
        if self.is_link(path):  # the link is the database's only tie to the warehouse: drop it, nothing under it
            self.files.unlink(path)
            return True
        if not self.files.isdir(path):
            if if_exists:
                return False
            raise DatabaseNotFoundError(database, self.list_databases())
        tables = self.list_tables(name)
        if tables and not cascade:
            raise AnalysisError(f"Cannot drop database `{name}` because it contains tables ({', '.join(tables)}). "
                                "Use DROP DATABASE ... CASCADE.", error_class="SCHEMA_NOT_EMPTY", sqlstate="2BP01")
        for table in tables:
            self.drop_table(self.resolve(ast.TableRef(parts=(name, table)), name, must_exist=False, links=True))
        self.files.rmtree(path)
        return True

    # ------------------------------------------------------------------ tables

    def list_tables(self, database: str = DEFAULT_DATABASE) -> list[str]:
        path = self.require_database(database)
        names = set()
        for entry in self.files.listdir(path):
            full = self.files.join(path, entry)
            if entry.endswith(_EXTERNAL_SUFFIX):
                names.add(entry[: -len(_EXTERNAL_SUFFIX)])
            elif not entry.startswith(".") and self.files.isdir(full) and has_commits(full):
                names.add(entry)
        return sorted(names)

    def split(self, ref: ast.TableRef, current_database: str) -> tuple[str, str]:
        parts = tuple(ref.parts)
        if len(parts) == 1:
            return check_name(current_database, "database"), check_name(parts[0])
        if len(parts) == 2:
            return check_name(parts[0], "database"), check_name(parts[1])
        if len(parts) == 3 and parts[0].lower() in ("spark_catalog", "isolde"):
            return check_name(parts[1], "database"), check_name(parts[2])
        raise AnalysisError(f"Invalid table name `{'.'.join(parts)}`: use `table` or `database.table`.",
                            error_class="REQUIRES_SINGLE_PART_NAMESPACE", sqlstate="42K05")

    def resolve(self, ref: ast.TableRef, current_database: str = DEFAULT_DATABASE, must_exist: bool = True,
                location: Optional[str] = None, links: bool = False) -> TableHandle:
        """Resolve a reference to a TableHandle.

        ``must_exist=True`` raises TableNotFoundError (with did-you-mean) unless the table has a
        committed version; ``must_exist=False`` resolves the name for CREATE (``location``: the
        LOCATION clause of a CREATE, which makes the handle external). ``links=True`` (DROP)
        accepts a table folder that is a symbolic link out of the warehouse: DROP removes the link.
        """
        if ref.path is not None:
            if not _absolute_location(ref.path):
                raise AnalysisError(
                    f"delta.`{ref.path}` is not an absolute path: a table is addressed by path only with an "
                    "absolute path or a file: URI (delta.`/data/events`), as in Delta; a name without delta. "
                    "(`events`, `db.events`) is a table of the warehouse.",
                    error_class="INVALID_TABLE_PATH", sqlstate="42K05")
            path = local_location(ref.path)
            handle = TableHandle(name=f"delta.`{ref.path}`", path=path, by_path=True,
                                 version=ref.version, timestamp=ref.timestamp)
            if not handle.exists:
                travelled = path_time_travel(ref.path)
                if travelled is not None and must_exist:
                    if ref.version is not None or ref.timestamp is not None:
                        raise AnalysisError(f"delta.`{ref.path}` names a version with @ and with AS OF: use one.",
                                            error_class="DELTA_TIME_TRAVEL_MULTIPLE_SPECIFICATIONS",
                                            sqlstate="42613")
                    real, version, timestamp = travelled
                    handle = TableHandle(name=f"delta.`{real}`", path=local_location(real), by_path=True,
                                         version=version, timestamp=timestamp)
            if must_exist and not handle.exists:
                raise TableNotFoundError(handle.name)
            return handle
        database, table = self.split(ref, current_database)
        db_path = self.database_path(database)
        self.check_inside(db_path, "database", database)
        if not self.files.isdir(db_path):
            raise DatabaseNotFoundError(database, self.list_databases())
        display = table if database == check_name(current_database, "database") else f"{database}.{table}"
        pointer = self.files.join(db_path, table + _EXTERNAL_SUFFIX)
        self.check_inside(pointer, "table", display)
        if self.files.isfile(pointer):
            target = self.files.read_json(pointer)["location"]
            handle = TableHandle(name=display, path=target, database=database, table=table, external=True,
                                 registration=pointer, version=ref.version, timestamp=ref.timestamp)
        elif location is not None and not must_exist:
            path = local_location(location)
            self.check_location(path, display, location)
            handle = TableHandle(name=display, path=path, database=database,
                                 table=table, external=True, registration=pointer, version=ref.version,
                                 timestamp=ref.timestamp)
        else:
            handle = TableHandle(name=display, path=self.files.join(db_path, table), database=database, table=table,
                                 version=ref.version, timestamp=ref.timestamp)
            if not (links and self.is_link(handle.path)):
                self.check_inside(handle.path, "table", display)
                self.check_inside(self.files.join(handle.path, "_delta_log"), "table", display)
        if must_exist and not handle.exists:
            raise TableNotFoundError(display, self.candidates(database, current_database))
        if not must_exist:
            self.ensure_not_view(handle)
        return handle

    def candidates(self, database: str, current_database: str) -> list[str]:
        """Names near which a misspelt table may be: tables of the database, qualified ones of the others."""
        out = []
        try:
            out.extend(self.list_tables(database))
        except AnalysisError:  # not found, or a link out of the warehouse: nothing to suggest there
            pass
        for db in self.list_databases():
            if db != database:
                try:
                    out.extend(f"{db}.{t}" for t in self.list_tables(db))
                except AnalysisError:
                    pass
        return out

    def exists(self, handle: TableHandle) -> bool:
        """Whether the name is taken: a registered external table, or a table folder with commits."""
        if handle.registration is not None:
            return self.files.isfile(handle.registration)
        return handle.exists

    def register_external(self, handle: TableHandle) -> None:
        """Write the pointer file of an external (LOCATION) table."""
        if handle.registration is None:
            return
        self.files.write_json(handle.registration, {"location": handle.path})

    def ensure_absent(self, handle: TableHandle) -> None:
        if self.exists(handle):
            raise TableAlreadyExistsError(handle.name)

    def ensure_not_view(self, handle: TableHandle) -> None:
        """A name about to become a table is not a view's (they share a database's namespace)."""
        from .views import view_exists

        if handle.database and handle.table and view_exists(self, handle.database, handle.table):
            raise AnalysisError(f"Cannot create table `{handle.name}`: a view of that name exists. Drop the view "
                                "(DROP VIEW) or choose another name.", error_class="TABLE_OR_VIEW_ALREADY_EXISTS",
                                sqlstate="42P07")

    def drop_table(self, handle: TableHandle) -> None:
        """Managed: delete the folder. External: forget the registration, keep the data.
        Path tables (delta.`/p`): refused (there is no registration to drop)."""
        if handle.by_path:
            raise AnalysisError(f"Cannot DROP {handle.name}: a table addressed by path is not registered in the "
                                "catalog; delete its folder instead.", error_class="UNSUPPORTED_FEATURE.DROP_PATH")
        if handle.external:
            if handle.registration and self.files.isfile(handle.registration):
                self.files.remove(handle.registration)
            return
        if self.is_link(handle.path):  # the name was a link: forget it, never delete what it points at
            self.files.unlink(handle.path.rstrip(os.sep))
        else:
            self.check_inside(handle.path, "table", handle.name)  # (never rmtree through a linked ancestor)
            self.files.rmtree(handle.path)
        forget_log(handle.path)
