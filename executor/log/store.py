"""Log stores: where commit files live, and the one atomic primitive commits need.

Optimistic concurrency rests on ``put_if_absent``: exactly one writer can create a
given ``NNNNNNNNNNNNNNNNNNNN.json``. ``LocalLogStore`` gets it from ``os.link``,
which fails with ``FileExistsError`` when the name exists; the body is fully written
and fsynced under a temporary name first, so a crash at any moment leaves either no
commit file or a complete one. An object-store implementation plugs in the same
interface with a conditional PUT (If-None-Match).
"""

from __future__ import annotations

import os
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class FileStatus:
    path: str
    size: int
    modification_time: int  # milliseconds since the epoch


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
        tmp = self._write_temp(path, data)
        try:
            os.link(tmp, path)
        finally:
            _unlink_quietly(tmp)
        if self.fsync_dir:
            _fsync_dir(os.path.dirname(path))

    def write(self, path: str, data: bytes) -> None:
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
    except FileNotFoundError:
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
