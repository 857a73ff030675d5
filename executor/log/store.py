"""Log stores: where commit files live, and the one atomic primitive commits need.

Optimistic concurrency rests on ``put_if_absent``: exactly one writer can create a
given ``NNNNNNNNNNNNNNNNNNNN.json``. ``LocalLogStore`` gets it from ``os.link``,
which fails with ``FileExistsError`` when the name exists; the body is fully written
and fsynced under a temporary name first, so a crash at any moment leaves either no
commit file or a complete one. An object-store implementation plugs in the same
interface with a conditional PUT (If-None-Match).

A write the file system refuses (disk full, permission denied, read-only) raises
``StorageError``: an isolde error and an ``OSError`` with the same ``errno``, whose message
names the file, what it is (the commit of version N, a checkpoint...) and what was left
behind, instead of a bare ``[Errno 28]`` from deep inside.
"""

from __future__ import annotations

import errno as _errno
import os
import re
import uuid
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass

from isolde.errors import ExecutionError


@dataclass(frozen=True)
class FileStatus:
    path: str
    size: int
    modification_time: int  # milliseconds since the epoch


class StorageError(ExecutionError, OSError):
    """The file system refused to write a table's file. Also an ``OSError`` (``errno``,
    ``strerror``, ``filename``), so code that handles OS errors keeps working; ``what`` says
    which file it was ("the commit file of version 3")."""

    def __init__(self, message: str, *, errno: int | None = None, strerror: str | None = None,
                 filename: str | None = None, what: str | None = None,
                 error_class: str | None = None, sqlstate: str | None = None):
        super().__init__(message, error_class=error_class, sqlstate=sqlstate)
        self.errno, self.strerror, self.filename, self.what = errno, strerror, filename, what

    def __reduce__(self):  # picklable across processes despite the keyword-only fields
        fields = {"errno": self.errno, "strerror": self.strerror, "filename": self.filename}
        return (_rebuild_storage_error, (self.message, fields, dict(self.__dict__)))


def _rebuild_storage_error(message: str, fields: dict, state: dict) -> "StorageError":
    out = StorageError(message, **fields)
    out.__dict__.update(state)
    return out


#: errno -> (error class, SQLSTATE): disk full is SQL's 53100, missing privileges 42501
#: (Spark's INSUFFICIENT_PERMISSIONS), anything else an I/O error (58030, as Spark's TASK_WRITE_FAILED)
_ERROR_CLASSES = {
    _errno.ENOSPC: ("DISK_FULL", "53100"),
    _errno.EDQUOT: ("DISK_FULL", "53100"),
    _errno.EACCES: ("INSUFFICIENT_PERMISSIONS", "42501"),
    _errno.EPERM: ("INSUFFICIENT_PERMISSIONS", "42501"),
}

_COMMIT_NAME = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_NAME = re.compile(r"^(\d{20})\.checkpoint(\..+)?\.(parquet|json)$")
_CRC_NAME = re.compile(r"^(\d{20})\.crc$")


def describe_file(path: str) -> str:
    """What a table file is, from its name: 'the commit file of version 3', 'a deletion vector
    file', ... (for messages about a write that failed)."""
    name = os.path.basename(os.path.normpath(path))
    folder = os.path.basename(os.path.dirname(os.path.normpath(path)))
    if m := _COMMIT_NAME.match(name):
        return f"the commit file of version {int(m.group(1))}"
    if folder == "_sidecars":
        return f"a sidecar of the checkpoint of version {int(name[:20])}" if name[:20].isdigit() \
            else "a checkpoint sidecar file"
    if m := _CHECKPOINT_NAME.match(name):
        return f"the checkpoint of version {int(m.group(1))}"
    if m := _CRC_NAME.match(name):
        return f"the checksum file of version {int(m.group(1))}"
    if name == "_last_checkpoint":
        return "the _last_checkpoint pointer"
    if name == "_delta_log":
        return "the log folder"
    if name.startswith("deletion_vector_") and name.endswith(".bin"):
        return "a deletion vector file"
    return "the file"


def _what_was_left(path: str) -> str:
    name = os.path.basename(os.path.normpath(path))
    folder = os.path.basename(os.path.dirname(os.path.normpath(path)))
    if m := _COMMIT_NAME.match(name):
        return f"Version {int(m.group(1))} was not committed: the table is unchanged."
    if _CHECKPOINT_NAME.match(name) or name == "_last_checkpoint" or folder == "_sidecars":
        return "No checkpoint file was half-written; the log and the previous checkpoint are unchanged."
    return "Nothing was written under that name."


def _hint(code: int | None, path: str) -> str:
    if code in (_errno.ENOSPC, _errno.EDQUOT):
        return "The file system that holds the table is full: free space there and run the statement again."
    if code in (_errno.EACCES, _errno.EPERM):
        try:
            import pwd

            user = pwd.getpwuid(os.geteuid()).pw_name
        except (ImportError, KeyError, AttributeError):
            user = str(os.geteuid()) if hasattr(os, "geteuid") else "?"
        return (f"This process (user {user}) may not write in {os.path.dirname(os.path.normpath(path))}: give it "
                "write permission there, or run the statement as a user who has it.")
    if code == _errno.EROFS:
        return "The file system that holds the table is mounted read-only."
    return ""


def storage_error(error: OSError, path: str, *, what: str | None = None,
                  consequence: str | None = None) -> StorageError:
    """A StorageError for ``error`` (raised while writing ``path``); ``what`` and
    ``consequence`` default to what the file name says and to 'nothing was written'."""
    if isinstance(error, StorageError):
        return error
    code = error.errno
    name = _errno.errorcode.get(code, str(code)) if code is not None else "no errno"
    reason = error.strerror or str(error)
    what = what or describe_file(path)
    error_class, sqlstate = _ERROR_CLASSES.get(code, ("FILE_WRITE_FAILED", "58030"))
    parts = [f"Cannot write {what} ({path}): {reason} [{name}].",
             consequence if consequence is not None else _what_was_left(path), _hint(code, path)]
    return StorageError(" ".join(p for p in parts if p), errno=code, strerror=error.strerror, filename=path,
                        what=what, error_class=error_class, sqlstate=sqlstate)


@contextmanager
def writing(path: str, *, what: str | None = None, consequence: str | None = None):
    """Turn an OSError raised inside into a StorageError about ``path``. FileExistsError (the
    put-if-absent race) and FileNotFoundError (a folder that went away) pass unchanged: callers
    branch on them."""
    try:
        yield
    except (FileExistsError, FileNotFoundError, StorageError):
        raise
    except OSError as e:
        raise storage_error(e, path, what=what, consequence=consequence) from e


class LogStore(ABC):
    """The operations the Delta log needs from storage; paths are absolute."""

    @abstractmethod
    def read(self, path: str) -> bytes:
        """The whole file; FileNotFoundError when it does not exist."""

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data`` atomically; FileExistsError when it already exists."""

    @abstractmethod
    def write(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` atomically (readers see the old or the new body)."""

    @abstractmethod
    def list_from(self, path: str) -> list[FileStatus]:
        """Files in ``path``'s directory whose names sort >= its name, sorted by name."""

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def status(self, path: str) -> FileStatus: ...

    def mkdirs(self, path: str) -> None:
        """Make sure a directory exists (a no-op for object stores)."""

    def delete(self, path: str) -> bool:
        """Delete one file (log cleanup); False when it did not exist."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete files")

    def identity(self, path: str) -> tuple:
        """Something that changes whenever the file at ``path`` is replaced (for caching)."""
        st = self.status(path)
        return (path, st.size, st.modification_time)


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class LocalLogStore(LogStore):
    """A POSIX file system: temp file + fsync + ``os.link`` gives atomic put-if-absent.

    ``durability``: "file" (default) fsyncs the body before it becomes visible, so
    not even a power loss can expose a torn commit; "full" also fsyncs the directory
    after the link, so a commit that returned survives a power loss; "none" skips
    both (a killed process still never leaves a torn commit: the link is atomic).
    """

    DURABILITY = ("none", "file", "full")

    def __init__(self, durability: str = "file"):
        if durability not in self.DURABILITY:
            raise ValueError(f"durability must be one of {self.DURABILITY}")
        self.durability = durability
        self.fsync = durability != "none"
        self.fsync_dir = durability == "full"

    def read(self, path: str) -> bytes:
        with open(path, "rb") as fh:
            return fh.read()

    def _write_temp(self, path: str, data: bytes) -> str:
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if self.fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        os.close(fd)
        return tmp

    def put_if_absent(self, path: str, data: bytes) -> None:
        with writing(path):
            tmp = self._write_temp(path, data)
            try:
                os.link(tmp, path)
            finally:
                _unlink_quietly(tmp)
        if self.fsync_dir:
            _fsync_dir(os.path.dirname(path))

    def write(self, path: str, data: bytes) -> None:
        with writing(path):
            tmp = self._write_temp(path, data)
            try:
                os.replace(tmp, path)
            except BaseException:
                _unlink_quietly(tmp)
                raise
        if self.fsync_dir:
            _fsync_dir(os.path.dirname(path))

    def list_from(self, path: str) -> list[FileStatus]:
        directory, start = os.path.split(path)
        out = []
        try:
            with os.scandir(directory) as it:
                for entry in it:
                    if entry.name >= start and not entry.name.startswith("."):
                        try:
                            st = entry.stat()
                        except FileNotFoundError:
                            continue
                        out.append(FileStatus(entry.path, st.st_size, int(st.st_mtime * 1000)))
        except FileNotFoundError:
            return []
        out.sort(key=lambda s: os.path.basename(s.path))
        return out

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def status(self, path: str) -> FileStatus:
        st = os.stat(path)
        return FileStatus(path, st.st_size, int(st.st_mtime * 1000))

    def mkdirs(self, path: str) -> None:
        what = describe_file(path)
        with writing(path, what="the folder" if what == "the file" else what):
            os.makedirs(path, exist_ok=True)

    def delete(self, path: str) -> bool:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    def identity(self, path: str) -> tuple:
        st = os.stat(path)
        return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:  # gone already, or a folder this process may no longer write in
        pass


def is_object_store_path(path) -> bool:
    """True for the object-store URIs isolde has a LogStore for (``s3://``, ``s3a://``)."""
    from .s3_store import is_s3_uri

    return is_s3_uri(path)


def store_for_path(path) -> LogStore:
    """The LogStore a table at ``path`` uses when none is given: S3LogStore (conditional PUT,
    endpoint and credentials from the AWS environment) for ``s3://`` / ``s3a://``, else a
    LocalLogStore."""
    from .s3_store import default_s3_store, is_s3_uri

    if is_s3_uri(path):
        return default_s3_store()
    return LocalLogStore()
