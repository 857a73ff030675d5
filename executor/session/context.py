"""What a command runner gets: ``run(ctx, stmt)``.

    ctx.session            the Session
    ctx.spark              the SparkSession (waits for start-up)
    ctx.catalog            the warehouse Catalog
    ctx.conf               the session's SET/RESET store (ConfStore)
    ctx.current_database   the USE'd database
    ctx.statement          the statement being run
    ctx.resolve(ref, must_exist=True, location=None) -> TableHandle
    ctx.snapshot(handle_or_ref) -> Snapshot     (honours VERSION / TIMESTAMP AS OF of the ref)
    ctx.eval_timestamp(expr) -> aware UTC datetime of a TIMESTAMP AS OF expression (session time zone)
    ctx.table_defaults() -> {'delta.x': value} from spark.databricks.delta.properties.defaults.x
    ctx.table_candidates() -> names a misspelt table may have meant (tables, temp views)
    ctx.start_transaction(log) -> the write's transaction (carries the session's userMetadata)
    ctx.metrics            a dict the runner may fill (shown by EXPLAIN / on results)
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

from isolde.errors import AnalysisError, VersionNotFoundError
from isolde.grammar import ast

DEFAULTS_PREFIX = "spark.databricks.delta.properties.defaults."
USER_METADATA_KEY = "spark.databricks.delta.commitInfo.userMetadata"


class ConfStore:
    """SET/RESET settings layered over the Spark conf.

    ``set`` records the value and, for Spark SQL settings (``spark.sql.*``), applies it to the
    Spark session too; ``get`` returns the session value, else Spark's; ``reset`` forgets
    one key (or all) and restores Spark's value from before the first SET.
    """

    def __init__(self, session, initial: Optional[dict] = None):
        self._session = session
        self._values: dict[str, str] = {}
        self._saved: dict[str, Optional[str]] = {}
        for key, value in (initial or {}).items():
            if not key.startswith("spark.") or key.startswith(DEFAULTS_PREFIX):
                self._values[key] = str(value)

    def _spark(self):
        return self._session.engine if self._session is not None else None

    def set(self, key: str, value) -> None:
        value = str(value)
        self._values[key] = value
        if key.startswith("spark.sql.") and self._session is not None:
            spark = self._spark()
            if key not in self._saved:
                try:
                    self._saved[key] = spark.conf.get(key, None)
                except Exception:
                    self._saved[key] = None
            try:
                spark.conf.set(key, value)
            except Exception as e:  # static conf, or a bad value
                self._values.pop(key, None)
                raise AnalysisError(f"Cannot set `{key}`: {str(e).splitlines()[0]}",
                                    error_class="CANNOT_MODIFY_CONFIG", sqlstate="46110")

    def get(self, key: str, default: Any = None):
        if key in self._values:
            return self._values[key]
        if self._session is not None and self._session.ready and key.startswith("spark."):
            try:
                value = self._spark().conf.get(key, None)
            except Exception:
                value = None
            if value is not None:
                return value
        return default

    def __getitem__(self, key: str):
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value) -> None:
        self.set(key, value)

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def reset(self, key: Optional[str] = None) -> None:
        keys = [key] if key is not None else list(self._values)
        for k in keys:
            self._values.pop(k, None)
            if k in self._saved and self._session is not None:
                old = self._saved.pop(k)
                spark = self._spark()
                try:
                    if old is None:
                        spark.conf.unset(k)
                    else:
                        spark.conf.set(k, old)
                except Exception:
                    pass

    def items(self) -> list[tuple[str, str]]:
        return sorted(self._values.items())

    def table_defaults(self) -> dict[str, str]:
        """``spark.databricks.delta.properties.defaults.X`` -> ``{'delta.X': value}``."""
        out = {}
        for key, value in self._values.items():
            if key.startswith(DEFAULTS_PREFIX):
                out["delta." + key[len(DEFAULTS_PREFIX):]] = value
        if self._session is not None and self._session.ready:
            try:
                for key, value in self._spark().sparkContext.getConf().getAll():
                    if key.startswith(DEFAULTS_PREFIX):
                        out.setdefault("delta." + key[len(DEFAULTS_PREFIX):], value)
            except Exception:
                pass
        return out


def _is_idempotent(stmt) -> bool:
    """The statements Delta makes idempotent with txnAppId / txnVersion: its data writes
    (INSERT, UPDATE, DELETE, MERGE, CREATE TABLE AS SELECT)."""
    if isinstance(stmt, ast.CreateTable):
        return stmt.query is not None
    return isinstance(stmt, (ast.Insert, ast.Update, ast.Delete, ast.Merge))


class ExecutionContext:
    def __init__(self, session, statement=None):
        self.session = session
        self.statement = statement
        self.metrics: dict = {}
        self.write_options: dict = {}  # a DataFrame writer's options (txnAppId, txnVersion)
        # False when the statement runs without Spark (its runner's ``needs_spark``, decided once)
        self.needs_spark = True

    @property
    def spark(self):
        return self.session.engine

    @property
    def catalog(self):
        return self.session.catalog

    @property
    def conf(self) -> ConfStore:
        return self.session.conf

    @property
    def current_database(self) -> str:
        return self.session.current_database

    def resolve(self, ref: ast.TableRef, must_exist: bool = True, location: Optional[str] = None):
        return self.catalog.resolve(ref, self.current_database, must_exist=must_exist, location=location)

    def table_defaults(self) -> dict[str, str]:
        return self.conf.table_defaults()

    def table_candidates(self) -> list[str]:
        """Names a misspelt table may have meant: the warehouse's tables and the Spark temp
        views the library user registered (not isolde's own)."""
        names = self.catalog.candidates(self.current_database, self.current_database)
        if not self.session.ready:
            return names  # no Spark yet, so no temp view either
        try:
            tables = self.spark.catalog.listTables()
        except Exception:  # a suggestion must never hide the error it decorates
            return names
        return names + [t.name for t in tables if t.isTemporary and not t.name.startswith("__isolde")]

    def start_transaction(self, log, snapshot=None):
        """A transaction on ``log`` (reading ``snapshot``, by default the latest) whose commit
        carries the session's commit message (``SET spark.databricks.delta.commitInfo.userMetadata
        = ...``), as Delta's does."""
        from ..txn.transaction import session_user_name

        txn = log.start_transaction(snapshot)
        txn.user_metadata = self.conf.get(USER_METADATA_KEY)
        txn.user_name = session_user_name(self.conf) or txn.user_name  # SET isolde.userName, else the OS user
        txn.verify_files = True  # the files a statement staged must still exist at its commit
        options = getattr(self, "write_options", None) or {}
        if options.get("usermetadata") is not None:  # a DataFrame writer's userMetadata option
            txn.user_metadata = str(options["usermetadata"])
        if _is_idempotent(getattr(self, "statement", None)):  # txnAppId / txnVersion (executor/session/idempotency.py)
            from . import idempotency

            if not hasattr(self, "_write_identity"):  # read once: autoReset unsets the setting it reads
                self._write_identity = idempotency.session_identity(self.conf, options)
            identity = self._write_identity
            target = getattr(self.statement, "table", None) or getattr(self.statement, "target", None)
            idempotency.bind(txn, identity, getattr(target, "name", ""))
        return txn

    def eval_timestamp(self, expr) -> dt.datetime:
        """The value of a TIMESTAMP AS OF expression (text or ast.Expr), as an aware UTC datetime.

        Spark evaluates it as Spark SQL would: a literal without an offset is wall-clock time in the
        session time zone (``spark.sql.session.timeZone``), one with an offset is that instant.
        The instant comes back as epoch microseconds computed inside Spark, never through a
        collected Python datetime (PySpark turns those into naive wall-clock times of the
        *Python process's* zone, which is neither UTC nor, in general, the session zone)."""
        text = getattr(expr, "sql", expr)
        if isinstance(text, (dt.datetime, dt.date)):
            return text
        return timestamp_from_spark(self.spark, text)

    def snapshot(self, handle_or_ref, version: Optional[int] = None, timestamp=None):
        """The snapshot a reference reads: its VERSION/TIMESTAMP AS OF, else the latest."""
        handle = handle_or_ref
        if isinstance(handle_or_ref, ast.TableRef):
            handle = self.resolve(handle_or_ref)
        version = version if version is not None else handle.version
        timestamp = timestamp if timestamp is not None else handle.timestamp
        if timestamp is not None and not isinstance(timestamp, (dt.datetime, dt.date, int, float, str)):
            timestamp = self.eval_timestamp(timestamp)
        elif isinstance(timestamp, str):
            timestamp = self.eval_timestamp(timestamp if timestamp.startswith("'") else f"'{timestamp}'")
        if version is not None:
            latest = handle.log.snapshot().version
            if version > latest or version < 0:
                raise VersionNotFoundError(
                    f"Cannot time travel {handle.name} to version {version}: available versions are 0 to {latest}.")
        snap = handle.log.snapshot(version=version, timestamp=timestamp)
        if snap.version < 0:
            from isolde.errors import TableNotFoundError

            raise TableNotFoundError(handle.name)
        return snap


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def timestamp_from_spark(spark, text: str) -> dt.datetime:
    """``text`` (a Spark SQL expression) evaluated by Spark as a TIMESTAMP in the session time
    zone, returned as an aware UTC datetime, exact to the microsecond (computed as epoch
    microseconds inside Spark)."""
    try:
        row = spark.sql(f"SELECT unix_micros(CAST(({text}) AS TIMESTAMP_LTZ)) AS us").collect()[0]
    except Exception as e:
        from .session import clean_message

        reason = (clean_message(getattr(e, "desc", None) or str(e)).splitlines() or [type(e).__name__])[0]
        raise AnalysisError(f"Invalid TIMESTAMP AS OF expression `{text}`: {reason}",
                            error_class="DELTA_TIMESTAMP_INVALID", sqlstate="42816") from e
    micros = row[0]
    if micros is None:
        raise AnalysisError(f"TIMESTAMP AS OF `{text}` is not a valid timestamp.",
                            error_class="DELTA_TIMESTAMP_INVALID", sqlstate="42816")
    return EPOCH + dt.timedelta(microseconds=int(micros))
