"""A LogStore for S3 and S3-compatible object stores, with commits made by a conditional PUT.

Commits need one atomic primitive: exactly one writer may create ``NNNNNNNNNNNNNNNNNNNN.json``.
S3 provides it since August 2024: ``PutObject`` with ``If-None-Match: *`` creates the object only
when no object has that key, else fails with ``412 Precondition Failed``. ``put_if_absent`` maps
that 412 to ``FileExistsError``, the exception ``LocalLogStore`` raises for an existing file, so the
optimistic transaction retries at the next version (or raises a named conflict) exactly as it does
on a local disk -- and writers on different machines stay mutually exclusive without a lock
service (no DynamoDB table, no single-driver restriction). S3 is strongly consistent (read after
write, list after write), which gives the consistent listing Delta's LogStore contract asks for.

Mapping: ``read`` GetObject, ``write`` a plain PutObject (a PUT replaces a whole object
atomically), ``list_from`` ListObjectsV2 with the directory as prefix, ``/`` as delimiter and
``StartAfter`` just before the start name, ``exists`` / ``status`` HeadObject, ``delete``
DeleteObject, ``mkdirs`` nothing (object stores have no directories).

Ambiguous outcomes: a conditional PUT whose response was lost (a timeout, a reset connection, a
5xx) may have created the object anyway, and botocore retries such requests by itself; the retry
then sees the object this writer created and gets a 412. Whenever a 412 follows such a retry, the
store reads the object back and reports success when it holds exactly the bytes being written
(every commit body carries a fresh ``txnId``, so equal bytes mean this writer's own commit). A
``409 ConditionalRequestConflict`` (S3: a concurrent conditional write on the key is in flight)
is retried. Paths are ``s3://bucket/key`` or ``s3a://bucket/key`` (Hadoop's spelling).

Endpoint, region and credentials come from the standard AWS environment (``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL`` for an S3-compatible server such as MinIO or moto, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` / ``AWS_DEFAULT_REGION``,
``AWS_PROFILE``, instance roles ...) or from explicit arguments. Needs boto3
(``pip install 'isolde[s3]'``); it is imported only when an S3 store is made.
"""

from __future__ import annotations

import os
import threading
import time
from urllib.parse import urlparse

from .store import FileStatus, LogStore

SCHEMES = ("s3", "s3a")
#: How often a conditional PUT is re-sent after an ambiguous failure or a 409 before giving up.
PUT_ATTEMPTS = 8
_ENV_KEYS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
             "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE")


def is_s3_uri(path) -> bool:
    text = os.fspath(path) if not isinstance(path, str) else path
    return isinstance(text, str) and text.split("://", 1)[0].lower() in SCHEMES and "://" in text


def normalize_s3_uri(path) -> str:
    """``s3://bucket/a/b`` without a trailing slash (the scheme kept as given, lower-cased)."""
    text = os.fspath(path)
    scheme, rest = text.split("://", 1)
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"{text!r} names no bucket")
    key = "/".join(part for part in key.split("/") if part)
    return f"{scheme.lower()}://{bucket}" + (f"/{key}" if key else "")


def split_s3_uri(path: str) -> tuple[str, str]:
    """(bucket, key) of ``s3://bucket/key``."""
    parsed = urlparse(path)
    if parsed.scheme.lower() not in SCHEMES or not parsed.netloc:
        raise ValueError(f"not an S3 path: {path!r}")
    return parsed.netloc, parsed.path.lstrip("/")


def _import_boto3():
    try:
        import boto3
        import botocore
        import botocore.exceptions
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("S3 tables (s3://, s3a://) need boto3: pip install 'isolde[s3]'") from e
    return boto3, botocore


def _error_code(exc) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _http_status(exc) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _retried(exc) -> bool:
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts") or 0) > 0


class S3LogStore(LogStore):
    """The Delta log on S3 (or an S3-compatible server); see the module docstring.

    ``client``: a ready boto3 S3 client; otherwise one is made from the arguments and the standard
    AWS environment. ``addressing_style``: "path" by default when an endpoint is given (what
    S3-compatible servers expect), botocore's choice otherwise.
    """

    def __init__(
        self,
        client=None,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        profile_name: str | None = None,
        addressing_style: str | None = None,
        max_attempts: int = 5,
    ):
        boto3, botocore = _import_boto3()
        from botocore.config import Config

        self._botocore = botocore
        if client is None:
            endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            session = boto3.session.Session(
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
                aws_session_token=aws_session_token,
                region_name=region_name,
                profile_name=profile_name,
            )
            region = region_name or session.region_name or "us-east-1"
            style = addressing_style or ("path" if endpoint_url else None)
            config = Config(
                retries={"mode": "standard", "max_attempts": max_attempts},
                s3={"addressing_style": style} if style else None,
            )
            client = session.client("s3", endpoint_url=endpoint_url, region_name=region, config=config)
        self.client = client
        #: Keys per ListObjectsV2 page (None: the server's default, 1000 on S3).
        self.list_page_size: int | None = None

    def __repr__(self) -> str:
        return f"S3LogStore({self.client.meta.endpoint_url!r})"

    # ------------------------------------------------------------------ helpers
    def _not_found(self, exc) -> bool:
        return _http_status(exc) == 404 or _error_code(exc) in ("NoSuchKey", "NoSuchBucket", "404", "NotFound")

    def _os_error(self, exc, path: str) -> OSError:
        code, status = _error_code(exc), _http_status(exc)
        if code == "NoSuchBucket":
            return FileNotFoundError(f"{path}: the bucket does not exist ({exc})")
        if status == 403 or code in ("AccessDenied", "403", "Forbidden"):
            return PermissionError(f"{path}: access denied ({exc})")
        return OSError(f"{path}: {exc}")

    # ------------------------------------------------------------------ LogStore
    def read(self, path: str) -> bytes:
        bucket, key = split_s3_uri(path)
        try:
            response = self.client.get_object(Bucket=bucket, Key=key)
        except self._botocore.exceptions.ClientError as e:
            if self._not_found(e):
                raise FileNotFoundError(path) from e
            raise self._os_error(e, path) from e
        with response["Body"] as body:
            return body.read()

    def put_if_absent(self, path: str, data: bytes) -> None:
        bucket, key = split_s3_uri(path)
        exceptions = self._botocore.exceptions
        ambiguous = False  # an earlier attempt may have created the object
        for attempt in range(PUT_ATTEMPTS):
            try:
                self.client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
                return
            except exceptions.ClientError as e:
                code, status = _error_code(e), _http_status(e)
                if status == 412 or code == "PreconditionFailed":
                    if (ambiguous or _retried(e)) and self._holds(bucket, key, data):
                        return  # our own earlier attempt created it
                    raise FileExistsError(path) from e
                if status == 409 or code == "ConditionalRequestConflict":
                    pass  # a concurrent conditional write on this key: ask again
                elif status >= 500 or code in ("SlowDown", "InternalError", "ServiceUnavailable"):
                    ambiguous = True
                else:
                    raise self._os_error(e, path) from e
                last = e
            except (exceptions.ConnectionError, exceptions.HTTPClientError) as e:
                ambiguous, last = True, e
            time.sleep(min(0.05 * 2**attempt, 1.0))
        if ambiguous and self._holds(bucket, key, data):
            return
        raise OSError(f"{path}: the conditional PUT failed {PUT_ATTEMPTS} times ({last})") from last

    def _holds(self, bucket: str, key: str, data: bytes) -> bool:
        try:
            return self.read(f"s3://{bucket}/{key}") == data
        except FileNotFoundError:
            return False

    def write(self, path: str, data: bytes) -> None:
        bucket, key = split_s3_uri(path)
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=data)
        except self._botocore.exceptions.ClientError as e:
            raise self._os_error(e, path) from e

    def list_from(self, path: str) -> list[FileStatus]:
        directory, start = path.rsplit("/", 1)
        bucket, prefix = split_s3_uri(directory + "/")
        kwargs = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
        if start:
            # StartAfter is exclusive: start just before ``start`` and drop what sorts below it
            kwargs["StartAfter"] = prefix + start[:-1]
        out = []
        try:
            if self.list_page_size:
                kwargs["PaginationConfig"] = {"PageSize": self.list_page_size}
            for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
                for obj in page.get("Contents", ()):
                    name = obj["Key"][len(prefix):]
                    if name >= start and name and not name.startswith(".") and "/" not in name:
                        out.append(FileStatus(f"{directory}/{name}", int(obj["Size"]),
                                              int(obj["LastModified"].timestamp() * 1000)))
        except self._botocore.exceptions.ClientError as e:
            if _error_code(e) == "NoSuchBucket":
                return []
            raise self._os_error(e, path) from e
        out.sort(key=lambda s: s.path.rsplit("/", 1)[1])
        return out

    def _head(self, path: str) -> dict:
        bucket, key = split_s3_uri(path)
        try:
            return self.client.head_object(Bucket=bucket, Key=key)
        except self._botocore.exceptions.ClientError as e:
            if self._not_found(e):
                raise FileNotFoundError(path) from e
            raise self._os_error(e, path) from e

    def exists(self, path: str) -> bool:
        try:
            self._head(path)
        except FileNotFoundError:
            return False
        return True

    def status(self, path: str) -> FileStatus:
        head = self._head(path)
        return FileStatus(path, int(head["ContentLength"]), int(head["LastModified"].timestamp() * 1000))

    def mkdirs(self, path: str) -> None:
        """Object stores have no directories."""

    def delete(self, path: str) -> bool:
        if not self.exists(path):  # DeleteObject succeeds either way
            return False
        bucket, key = split_s3_uri(path)
        try:
            self.client.delete_object(Bucket=bucket, Key=key)
        except self._botocore.exceptions.ClientError as e:
            if self._not_found(e):
                return False
            raise self._os_error(e, path) from e
        return True

    def identity(self, path: str) -> tuple:
        head = self._head(path)
        return (path, head.get("ETag"), int(head["ContentLength"]), head["LastModified"].timestamp())


_default_stores: dict[tuple, S3LogStore] = {}
_default_lock = threading.Lock()


def default_s3_store() -> S3LogStore:
    """One S3LogStore per process and AWS environment (boto3 clients are thread-safe but costly
    to make, and must not cross a fork)."""
    key = (os.getpid(), *(os.environ.get(k) for k in _ENV_KEYS))
    with _default_lock:
        store = _default_stores.get(key)
        if store is None:
            store = _default_stores[key] = S3LogStore()
        return store
