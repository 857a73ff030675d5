"""``s.read``: Delta's DataFrame-reader spelling of a table read, for people who write
``spark.read.format("delta").option("versionAsOf", 3).load(path)``.

Each read becomes the isolde query it means, so it binds a snapshot exactly as SQL does:

    load(path) / table(name)                  SELECT * FROM delta.`path` / name
    versionAsOf / timestampAsOf               ... VERSION AS OF v / TIMESTAMP AS OF 'ts'
    readChangeFeed + startingVersion | startingTimestamp [+ endingVersion | endingTimestamp]
                                              SELECT * FROM table_changes('t', start[, end])

Options Delta's batch reader does not know are refused (a typo must not read the wrong data).
"""

from __future__ import annotations

from typing import Optional

from isolde.errors import AnalysisError

FORMATS = ("delta", "isolde")
OPTIONS = ("versionasof", "timestampasof", "readchangefeed", "readchangedata", "startingversion",
           "startingtimestamp", "endingversion", "endingtimestamp")


def check_format(source: str, verb: str) -> None:
    """``format(...)`` of a reader or writer: Delta (or isolde) only."""
    if str(source).lower() not in FORMATS:
        raise AnalysisError(f"isolde {verb} Delta tables only: format({source!r}) is not one of "
                            f"{', '.join(FORMATS)}.", error_class="UNSUPPORTED_DATA_SOURCE", sqlstate="0A000")


def _quote_path(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def _literal(value: str) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


class TableReader:
    """A builder like pyspark's DataFrameReader: ``format``, ``option``, ``options``, then
    ``load(path)`` or ``table(name)`` returning the query's pyspark DataFrame."""

    def __init__(self, session):
        self._session = session
        self._options: dict[str, str] = {}

    def format(self, source: str) -> "TableReader":
        check_format(source, "reads")
        return self

    def option(self, key: str, value) -> "TableReader":
        if str(key).lower() not in OPTIONS:
            raise AnalysisError(f"Unknown option {key!r} for reading a Delta table (known: versionAsOf, timestampAsOf, "
                                "readChangeFeed, startingVersion, startingTimestamp, endingVersion, "
                                "endingTimestamp).", error_class="DELTA_UNKNOWN_READ_OPTION", sqlstate="42616")
        self._options[str(key).lower()] = str(value).lower() if isinstance(value, bool) else str(value)
        return self

    def options(self, **options) -> "TableReader":
        for key, value in options.items():
            self.option(key, value)
        return self

    def load(self, path: str):
        return self._read(_quote_path(path), path)

    def table(self, name: str):
        return self._read(name, name)

    # ------------------------------------------------------------------ the query
    def _get(self, key: str) -> Optional[str]:
        return self._options.get(key)

    def _read(self, relation: str, name: str):
        if (self._get("readchangefeed") or self._get("readchangedata") or "false").lower() == "true":
            return self._session.sql(self._changes_sql(name))
        version, timestamp = self._get("versionasof"), self._get("timestampasof")
        if version is not None and timestamp is not None:
            raise AnalysisError("Cannot specify both versionAsOf and timestampAsOf.",
                                error_class="DELTA_CANNOT_SPECIFY_BOTH_VERSION_AND_TIMESTAMP", sqlstate="42613")
        travel = ""
        if version is not None:
            if not version.strip().isdigit():
                raise AnalysisError(f"versionAsOf must be a version number, not {version!r}.",
                                    error_class="DELTA_UNSUPPORTED_TIME_TRAVEL_VIEWS", sqlstate="42601")
            travel = f" VERSION AS OF {int(version)}"
        elif timestamp is not None:
            travel = f" TIMESTAMP AS OF {_literal(timestamp)}"
        return self._session.sql(f"SELECT * FROM {relation}{travel}")

    def _changes_sql(self, name: str) -> str:
        from .table_functions import table_changes_sql

        start = self._get("startingversion")
        start = int(start) if start is not None and start.strip().isdigit() else start
        if start is None:
            start = self._get("startingtimestamp")
        if start is None:
            raise AnalysisError("No startingVersion or startingTimestamp provided for a change data feed read.",
                                error_class="DELTA_NO_START_FOR_CDC_READ", sqlstate="42601")
        end = self._get("endingversion")
        end = int(end) if end is not None and end.strip().isdigit() else end
        if end is None:
            end = self._get("endingtimestamp")
        return table_changes_sql(name, start, end)
