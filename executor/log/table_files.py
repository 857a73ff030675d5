"""The files of a table beside its log -- data files, deletion vectors, staging folders -- on a
local disk or on S3, behind one small interface.

The log has its own store (``store.py``: atomic commits). Data files need different verbs: walk a
folder Spark wrote, move a file into the table, stat it, read a Parquet footer, write a deletion
vector, delete what a failed statement left. ``LocalFiles`` does these with ``os``; ``S3Files``
with pyarrow's S3 file system (a move is a server-side copy and a delete: S3 has no rename).

Paths are what the rest of isolde passes around: absolute local paths, or ``s3a://bucket/key``
URIs (never ``os.path.abspath``-ed: that would turn ``s3a://b/t`` into ``<cwd>/s3a:/b/t``).
``join`` / ``normpath`` / ``dirname`` here keep a URI a URI.

S3 endpoint and credentials: the standard AWS environment, as for the log store and for Spark's
S3A (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_REGION``, ...).
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from typing import Iterator

from .s3_store import _ENV_KEYS, is_s3_uri


@dataclass(frozen=True)
class FileEntry:
    rel_dir: str  # '/'-separated, relative to the walked folder ('' at its top)
    name: str
    size: int
    modification_time: int  # ms


def is_remote(path) -> bool:
    return isinstance(path, str) and is_s3_uri(path)


def normpath(path: str) -> str:
    """``os.path.normpath`` for local paths; a URI keeps its scheme (no '//' or trailing '/')."""
    if is_remote(path):
        scheme, rest = path.split("://", 1)
        return f"{scheme}://" + "/".join(p for p in rest.split("/") if p and p != ".")
    return os.path.normpath(path)


def absolute(path: str) -> str:
    return normpath(path) if is_remote(path) else os.path.abspath(path)


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])
    return os.path.join(base, *parts)


def dirname(path: str) -> str:
    if is_remote(path):
        return normpath(path).rsplit("/", 1)[0]
    return os.path.dirname(path)


class LocalFiles:
    def walk(self, folder: str) -> Iterator[FileEntry]:
        for root, dirs, names in os.walk(folder):
            dirs.sort()
            rel = os.path.relpath(root, folder)
            rel = "" if rel == "." else rel.replace(os.sep, "/")
            for name in sorted(names):
                st = os.stat(os.path.join(root, name))
                yield FileEntry(rel, name, st.st_size, int(st.st_mtime * 1000))

    def move(self, src: str, dest: str) -> None:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.rename(src, dest)

    def stat(self, path: str) -> tuple[int, int]:
        st = os.stat(path)
        return st.st_size, int(st.st_mtime * 1000)

    def open_input(self, path: str):
        return open(path, "rb")

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as fh:
            return fh.read()

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def delete(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.remove(path)


    def copy(self, src: str, dest: str) -> None:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(src, dest)


class S3Files:
    """pyarrow's S3 file system on the AWS environment's endpoint and credentials."""

    def __init__(self):
        from pyarrow import fs as pafs

        env = os.environ
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        kwargs = {"region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
                  "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=5)}
        if endpoint:
            scheme, _, host = endpoint.partition("://")
            kwargs.update(endpoint_override=host or endpoint, scheme=scheme if host else "https")
        if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
            kwargs.update(access_key=env["AWS_ACCESS_KEY_ID"], secret_key=env["AWS_SECRET_ACCESS_KEY"],
                          session_token=env.get("AWS_SESSION_TOKEN"))
        self._pafs = pafs
        self.fs = pafs.S3FileSystem(**kwargs)

    @staticmethod
    def key(path: str) -> str:
        """``s3a://bucket/a/b`` -> ``bucket/a/b`` (pyarrow's spelling)."""
        return normpath(path).split("://", 1)[1]

    def walk(self, folder: str) -> Iterator[FileEntry]:
        base = self.key(folder)
        selector = self._pafs.FileSelector(base, recursive=True, allow_not_found=True)
        for info in sorted(self.fs.get_file_info(selector), key=lambda i: i.path):
            if info.type != self._pafs.FileType.File:
                continue
            rel = info.path[len(base):].lstrip("/")
            rel_dir, _, name = rel.rpartition("/")
            yield FileEntry(rel_dir, name, int(info.size), int(info.mtime.timestamp() * 1000) if info.mtime else 0)

    def names(self, folder: str) -> list[str]:
        """The names directly under ``folder`` (files and 'folders': common prefixes)."""
        selector = self._pafs.FileSelector(self.key(folder), recursive=False, allow_not_found=True)
        return sorted(info.base_name for info in self.fs.get_file_info(selector))

    def move(self, src: str, dest: str) -> None:
        self.fs.move(self.key(src), self.key(dest))

    def stat(self, path: str) -> tuple[int, int]:
        info = self.fs.get_file_info(self.key(path))
        if info.type == self._pafs.FileType.NotFound:
            raise FileNotFoundError(path)
        return int(info.size), int(info.mtime.timestamp() * 1000) if info.mtime else 0

    def open_input(self, path: str):
        return self.fs.open_input_file(self.key(path))

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(self.key(path)) as fh:
            return fh.read()

    def write_bytes(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(self.key(path)) as fh:
            fh.write(data)

    def copy(self, src: str, dest: str) -> None:
        self.fs.copy_file(self.key(src), self.key(dest))  # a server-side CopyObject

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(self.key(path)).type != self._pafs.FileType.NotFound

    def delete(self, path: str) -> None:
        key = self.key(path)
        kind = self.fs.get_file_info(key).type
        if kind == self._pafs.FileType.Directory:
            self.fs.delete_dir(key)
        elif kind == self._pafs.FileType.File:
            self.fs.delete_file(key)


LOCAL = LocalFiles()


#: a stream source's option prefix carrying the driver's AWS environment to Spark's Python workers
#: (which inherit the environment the JVM started with, not the driver's later one)
AWS_OPTION_PREFIX = "isolde.aws."


def aws_options() -> dict:
    """The driver's AWS settings as data source options (Spark redacts secret-looking keys in plans)."""
    return {AWS_OPTION_PREFIX + k.lower(): os.environ[k] for k in _ENV_KEYS if os.environ.get(k)}


def adopt_aws_options(options: dict) -> dict:
    """In a Python worker: take the AWS settings ``aws_options`` carried (keeping any the worker
    already has); returns the options without them."""
    rest = {}
    for key, value in options.items():
        if str(key).lower().startswith(AWS_OPTION_PREFIX):
            os.environ.setdefault(str(key)[len(AWS_OPTION_PREFIX):].upper(), str(value))
        else:
            rest[key] = value
    return rest


def parquet_file(path: str):
    """``pq.ParquetFile`` of a data file on either file system (footer reads, row counts)."""
    import pyarrow.parquet as pq

    if not is_remote(path):
        return pq.ParquetFile(path)
    return pq.ParquetFile(files_for(path).open_input(path))


def read_parquet(path: str, **options):
    """``pq.read_table`` of one data file on either file system."""
    import pyarrow.parquet as pq

    if not is_remote(path):
        return pq.read_table(path, **options)
    files = files_for(path)
    return pq.read_table(files.key(path), filesystem=files.fs, **options)


def exists(path: str) -> bool:
    return files_for(path).exists(path)


def delete(path: str) -> None:
    """Delete a file or a folder and everything in it (nothing when it is not there)."""
    files_for(path).delete(path)


def copy(src: str, dest: str) -> None:
    """Copy a file: within one file system natively (S3: server-side), else through this process."""
    if is_remote(src) == is_remote(dest):
        files_for(dest).copy(src, dest)
    else:
        data = files_for(src).read_bytes(src)
        if is_remote(dest):
            files_for(dest).write_bytes(dest, data)
        else:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as fh:
                fh.write(data)


def move(src: str, dest: str) -> None:
    """Move a file within one file system, or upload a local file to S3 (then remove it)."""
    if is_remote(src) == is_remote(dest):
        files_for(dest).move(src, dest)
        return
    if is_remote(src):
        raise ValueError(f"cannot move {src} from S3 to the local disk {dest}")
    remote = files_for(dest)
    with open(src, "rb") as fh:
        remote.write_bytes(dest, fh.read())
    os.remove(src)
_S3: dict = {}
_S3_LOCK = threading.Lock()


def files_for(path: str):
    """The file system of ``path``: one S3Files per process and AWS environment."""
    if not is_remote(path):
        return LOCAL
    key = (os.getpid(), *(os.environ.get(k) for k in _ENV_KEYS))
    with _S3_LOCK:
        found = _S3.get(key)
        if found is None:
            found = _S3[key] = S3Files()
        return found
