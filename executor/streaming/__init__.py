"""Structured Streaming on isolde tables: a Delta streaming source and an exactly-once sink.

    read_stream(session, "events", startingVersion=3)  -> streaming DataFrame (format "isolde")
    write_batches(session, "copy", checkpoint=ckpt)     -> foreachBatch function (txn-idempotent)
    await_termination(query)                            -> raises the isolde error that stopped it
"""

from __future__ import annotations

import re
from typing import Optional

from .plan import (
    StreamChangeCommitError,
    StreamMetadataChangedError,
    StreamSourceError,
)
from .sink import BatchWriter, prepare_batch, write_batches

__all__ = ["read_stream", "register", "write_batches", "prepare_batch", "BatchWriter", "await_termination",
           "source_error", "StreamSourceError", "StreamChangeCommitError", "StreamMetadataChangedError"]


def register(spark) -> None:
    """Make ``spark.readStream.format("isolde")`` available on ``spark``."""
    from .source import register as _register

    _register(spark)


def read_stream(session, table: str, **options):
    """A streaming DataFrame over ``table`` (a name, or ``delta.`/path```) of an isolde Session."""
    from ..session.session import _ref_from_name

    from ..log import table_files
    from .plan import StreamOptions

    StreamOptions.parse({k: str(v) for k, v in options.items()})  # refused here, not at the first batch
    handle = session.catalog.resolve(_ref_from_name(table), session.current_database)
    register(session.spark)
    reader = session.spark.readStream.format("isolde")
    for key, value in options.items():
        reader = reader.option(key, str(value).lower() if isinstance(value, bool) else str(value))
    if table_files.is_remote(handle.path):  # Spark's Python workers read the log and files too
        for key, value in table_files.aws_options().items():
            reader = reader.option(key, value)
    return reader.load(handle.path)


_CLASSES = {cls.__name__: cls for cls in (StreamSourceError, StreamChangeCommitError, StreamMetadataChangedError)}
_RAISED = re.compile(r"isolde\.executor\.streaming\.plan\.(\w+): \[([A-Z0-9_]+)\] ([^\n]*)")


def source_error(exc: BaseException) -> Optional[StreamSourceError]:
    """The stream-source error inside a StreamingQueryException's text, rebuilt; else None."""
    m = _RAISED.search(str(exc))
    if m is None or m.group(1) not in _CLASSES:
        return None
    cls = _CLASSES[m.group(1)]
    err = cls(m.group(3), error_class=m.group(2))
    return err


def await_termination(query, timeout: Optional[float] = None):
    """``query.awaitTermination(timeout)``, raising the isolde error that failed the query
    (StreamChangeCommitError, StreamMetadataChangedError, ...) instead of Spark's wrapper."""
    try:
        return query.awaitTermination(timeout) if timeout is not None else query.awaitTermination()
    except Exception as e:
        err = source_error(e)
        if err is not None:
            raise err from e
        raise
