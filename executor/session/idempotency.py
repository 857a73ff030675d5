"""Idempotent batch writes: Delta's ``txnAppId`` / ``txnVersion``.

A job that may be retried after a crash names itself (an application id) and numbers its
writes (a version that only grows). The commit carries a ``txn`` action (SetTransaction) with
both; a later write whose version is not above the one the table recorded for that
application is skipped, so a retry after an unknown outcome never writes twice.

Where the pair comes from, as in Delta:

    SET spark.databricks.delta.write.txnAppId = 'nightly'    INSERT / UPDATE / DELETE / MERGE
    SET spark.databricks.delta.write.txnVersion = 7          (SQL: the session's settings)
    s.write(df).option("txnAppId", ...).option("txnVersion", ...)   (a writer's options win)

``spark.databricks.delta.write.txnVersion.autoReset.enabled = true`` unsets txnVersion after
each write that used it, so a forgotten setting cannot silently skip the next statement
(Delta leaves it set by default, and so does isolde).

Two writers with the same application id racing: the loser's commit meets the winner's txn
action and fails with ConcurrentTransactionException (the id is read through the transaction).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from isolde.errors import AnalysisError

TXN_APP_ID_KEY = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_KEY = "spark.databricks.delta.write.txnVersion"
AUTO_RESET_KEY = "spark.databricks.delta.write.txnVersion.autoReset.enabled"


@dataclass(frozen=True)
class WriteIdentity:
    app_id: str
    version: int


class WriteAlreadyCommitted(Exception):
    """The write's (app id, version) is not above what the table recorded: skip it."""

    def __init__(self, table: str, identity: WriteIdentity, recorded: int, read_version: int):
        super().__init__(f"{table} already has version {recorded} of application {identity.app_id!r}; "
                         f"write {identity.version} skipped")
        self.table, self.identity, self.recorded, self.read_version = table, identity, recorded, read_version


def _invalid(message: str) -> AnalysisError:
    return AnalysisError(f"Invalid options for idempotent writes: {message}",
                         error_class="DELTA_INVALID_IDEMPOTENT_WRITES_OPTIONS", sqlstate="42616")


def parse_identity(app_id, version) -> Optional[WriteIdentity]:
    """Both or neither: one without the other is refused (the write could not be idempotent)."""
    if app_id is None and version is None:
        return None
    if app_id is None or version is None:
        raise _invalid("both txnAppId and txnVersion must be specified")
    text = str(version).strip()
    if not text.lstrip("-").isdigit() or int(text) < 0:
        raise _invalid(f"txnVersion must be a non-negative whole number, not {version!r}")
    if not str(app_id).strip():
        raise _invalid("txnAppId must not be empty")
    return WriteIdentity(str(app_id), int(text))


def session_identity(conf, options: Optional[dict] = None) -> Optional[WriteIdentity]:
    """The write's identity: the writer's options when it gave any, else the session's settings.
    With autoReset on, the session's txnVersion is unset once read."""
    options = {str(k).lower(): v for k, v in (options or {}).items()}
    if "txnappid" in options or "txnversion" in options:
        return parse_identity(options.get("txnappid"), options.get("txnversion"))
    identity = parse_identity(conf.get(TXN_APP_ID_KEY), conf.get(TXN_VERSION_KEY))
    if identity is not None and str(conf.get(AUTO_RESET_KEY, "false")).strip().lower() == "true":
        conf.reset(TXN_VERSION_KEY)
    return identity


def bind(txn, identity: Optional[WriteIdentity], table: str) -> None:
    """Make ``txn`` carry ``identity``'s txn action, or raise WriteAlreadyCommitted when the
    table already has that version (or a later one) of the application."""
    if identity is None:
        return
    recorded = txn.txn_version(identity.app_id)  # recorded as a read: a racing same-id commit conflicts
    if recorded >= identity.version:
        raise WriteAlreadyCommitted(table, identity, recorded, txn.read_version)
    txn.write_identity = identity
