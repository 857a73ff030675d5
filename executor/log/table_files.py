"""The files of a table beside its log -- data files, deletion vectors, staging folders -- on a
local disk or on S3, behind one small interface.

The log has its own store (``store.py``: atomic commits). Data files need different verbs: walk a
folder Spark wrote, move a file into the table, stat it, read a Parquet footer, write a deletion
vector, delete what a failed statement left. ``LocalFiles`` does these with ``os``; ``S3Files``
with the S3 log store's boto3 client (one endpoint, credential chain and retry policy for commits
and files; a move is a server-side copy and a delete: S3 has no rename).

Paths are what the rest of isolde passes around: absolute local paths, or ``s3a://bucket/key``
URIs (never ``os.path.abspath``-ed: that would turn ``s3a://b/t`` into ``<cwd>/s3a:/b/t``).
``join`` / ``normpath`` / ``dirname`` here keep a URI a URI.

S3 endpoint and credentials: the standard AWS environment, as for the log store and for Spark's
S3A (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_REGION``, ...).
"""

from __future__ import annotations

import io
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


class _RangedObject(io.RawIOBase):
    """A seekable, read-only file over one S3 object, read by ranged GETs (Parquet footers and
    column chunks, a deletion vector at its offset): only the bytes asked for cross the network."""

    def __init__(self, client, bucket: str, key: str, size: int):
        self._client, self._bucket, self._key, self._size, self._pos = client, bucket, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self._size - self._pos)
        if want <= 0:
            return 0
        end = self._pos + want - 1
        body = self._client.get_object(Bucket=self._bucket, Key=self._key,
                                       Range=f"bytes={self._pos}-{end}")["Body"].read()
        buffer[: len(body)] = body
        self._pos += len(body)
        return len(body)


class S3Files:
    """The same verbs on S3 through the boto3 client of isolde's S3 log store (one endpoint,
    credential chain and retry policy -- botocore's standard mode retries 503 SlowDown and lost
    connections -- for commits and table files alike)."""

    def __init__(self, store=None):
        from .s3_store import default_s3_store

        store = store if store is not None else default_s3_store()
        self.client = store.client
        self._not_found = store._not_found
        self._errors = store._botocore.exceptions.ClientError

    @staticmethod
    def key(path: str) -> str:
        """``s3a://bucket/a/b`` -> ``bucket/a/b``."""
        return normpath(path).split("://", 1)[1]

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, _, key = normpath(path).split("://", 1)[1].partition("/")
        return bucket, key

    def _list(self, folder: str, delimiter: bool):
        bucket, prefix = self._split(folder)
        prefix = prefix + "/" if prefix else ""
        kwargs = {"Bucket": bucket, "Prefix": prefix, **({"Delimiter": "/"} if delimiter else {})}
        for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
            yield prefix, page

    def walk(self, folder: str) -> Iterator[FileEntry]:
        for prefix, page in self._list(folder, delimiter=False):
            for obj in page.get("Contents", ()):
                rel = obj["Key"][len(prefix):]
                if not rel or rel.endswith("/"):  # a folder marker (S3A writes some)
                    continue
                rel_dir, _, name = rel.rpartition("/")
                yield FileEntry(rel_dir, name, int(obj["Size"]), int(obj["LastModified"].timestamp() * 1000))

    def names(self, folder: str) -> list[str]:
        """The names directly under ``folder`` (objects and 'folders': common prefixes)."""
        out = set()
        for prefix, page in self._list(folder, delimiter=True):
            out.update(c["Prefix"][len(prefix):].rstrip("/") for c in page.get("CommonPrefixes", ()))
            out.update(o["Key"][len(prefix):] for o in page.get("Contents", ()))
        return sorted(n for n in out if n)

    def _head(self, path: str) -> dict:
        bucket, key = self._split(path)
        try:
            return self.client.head_object(Bucket=bucket, Key=key)
        except self._errors as e:
            if self._not_found(e):
                raise FileNotFoundError(path) from e
            raise

    def stat(self, path: str) -> tuple[int, int]:
        head = self._head(path)
        return int(head["ContentLength"]), int(head["LastModified"].timestamp() * 1000)

    def exists(self, path: str) -> bool:
        try:
            self._head(path)
            return True
        except FileNotFoundError:
            return False

    def open_input(self, path: str):
        bucket, key = self._split(path)
        size, _ = self.stat(path)
        return io.BufferedReader(_RangedObject(self.client, bucket, key, size), buffer_size=1 << 20)

    def read_bytes(self, path: str) -> bytes:
        bucket, key = self._split(path)
        try:
            return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self._errors as e:
            if self._not_found(e):
                raise FileNotFoundError(path) from e
            raise

    def write_bytes(self, path: str, data: bytes) -> None:
        bucket, key = self._split(path)
        self.client.put_object(Bucket=bucket, Key=key, Body=data)  # one PUT: the object appears whole

    def copy(self, src: str, dest: str) -> None:
        (sb, sk), (db, dk) = self._split(src), self._split(dest)
        self.client.copy({"Bucket": sb, "Key": sk}, db, dk)  # server-side (multipart past 8 MB)

    def move(self, src: str, dest: str) -> None:
        self.copy(src, dest)
        self.delete(src)

    def delete(self, path: str) -> None:
        """Delete an object, or every object under ``path/`` (a 'folder')."""
        bucket, key = self._split(path)
        keys = [key] if key else []
        keys += [f"{key}/{e.rel_dir + '/' if e.rel_dir else ''}{e.name}".lstrip("/") for e in self.walk(path)]
        for start in range(0, len(keys), 1000):  # DeleteObjects takes 1,000 keys a call
            batch = [{"Key": k} for k in keys[start:start + 1000]]
            failed = self.client.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True}).get("Errors")
            if failed:
                raise OSError(f"S3 refused to delete {len(failed)} object(s) under {path}, "
                              f"such as {failed[0].get('Key')}: {failed[0].get('Code')} {failed[0].get('Message')}")


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
    return pq.ParquetFile(files_for(path).open_input(path))  # (the footer is read here)


def read_parquet(path: str, **options):
    """``pq.read_table`` of one data file on either file system."""
    import pyarrow.parquet as pq

    if not is_remote(path):
        return pq.read_table(path, **options)
    with files_for(path).open_input(path) as fh:
        return pq.read_table(fh, **options)


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
_S3_LOCK = threading.Lock()


def files_for(path: str):
    """The file system of ``path``: on S3, one S3Files per log store (per process and AWS
    environment, as ``default_s3_store`` keeps them)."""
    if not is_remote(path):
        return LOCAL
    from .s3_store import default_s3_store

    store = default_s3_store()
    found = getattr(store, "table_files", None)
    if found is None:
        with _S3_LOCK:
            found = getattr(store, "table_files", None)
            if found is None:
                found = store.table_files = S3Files(store)
    return found
