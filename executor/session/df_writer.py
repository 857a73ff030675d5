"""``s.write(df)``: Delta's DataFrame-writer spelling of a batch write, for people who write
``df.write.format("delta").mode("append").option("txnAppId", ...).saveAsTable(name)``.

Each write becomes the isolde statement it means, over the DataFrame registered as a
temporary view, so it takes the same path (schema enforcement, constraints, conflicts) as SQL:

    mode append          INSERT INTO t BY NAME SELECT * FROM df      (CTAS when t is missing)
    mode overwrite       INSERT OVERWRITE t BY NAME ...  (+ replaceWhere: INSERT ... REPLACE WHERE)
    mode error (default) CREATE TABLE t AS SELECT * FROM df, refused when t exists
    mode ignore          CTAS when t is missing, else nothing

Options: ``txnAppId`` / ``txnVersion`` (idempotent writes, executor/session/idempotency.py; they win
over the session's settings), ``userMetadata``, ``replaceWhere``, ``mergeSchema`` (the data's new
columns and struct fields join the table's schema, as the autoMerge setting does for SQL:
executor/catalog/schema_evolution.py). Unknown options are refused.
"""

from __future__ import annotations

import uuid

from isolde.errors import AnalysisError, TableNotFoundError
from .reader import _quote_path, check_format

MODES = {"append": "append", "overwrite": "overwrite", "error": "error", "errorifexists": "error",
         "default": "error", "ignore": "ignore"}
OPTIONS = ("txnappid", "txnversion", "usermetadata", "replacewhere", "mergeschema")


class TableWriter:
    """A builder like pyspark's DataFrameWriter: ``format``, ``mode``, ``option``, ``options``,
    then ``saveAsTable(name)`` / ``save(path)``; returns the statement's result."""

    def __init__(self, session, df):
        self._session = session
        self._df = df
        self._mode = "error"
        self._options: dict[str, str] = {}

    def format(self, source: str) -> "TableWriter":
        check_format(source, "writes")
        return self

    def mode(self, mode: str) -> "TableWriter":
        key = str(mode).lower()
        if key not in MODES:
            raise AnalysisError(f"Unknown save mode {mode!r}: use append, overwrite, error / errorifexists or ignore.",
                                error_class="INVALID_SAVE_MODE", sqlstate="42000")
        self._mode = MODES[key]
        return self

    def option(self, key: str, value) -> "TableWriter":
        if str(key).lower() not in OPTIONS:
            raise AnalysisError(f"Unknown option {key!r} for writing a Delta table (known: txnAppId, txnVersion, "
                                "userMetadata, replaceWhere, mergeSchema).", error_class="DELTA_UNKNOWN_WRITE_OPTION",
                                sqlstate="42616")
        self._options[str(key).lower()] = str(value)
        return self

    def options(self, **options) -> "TableWriter":
        for key, value in options.items():
            self.option(key, value)
        return self

    def saveAsTable(self, name: str):  # noqa: N802 - pyspark's spelling
        return self._write(name)

    save_as_table = saveAsTable

    def save(self, path: str):
        return self._write(_quote_path(path))

    # ------------------------------------------------------------------ the statement
    def _exists(self, relation: str) -> bool:
        from .session import _ref_from_name

        try:
            handle = self._session.catalog.resolve(_ref_from_name(relation), self._session.current_database,
                                                   must_exist=True)
        except TableNotFoundError:
            return False
        return handle.log.snapshot().version >= 0

    def _session_columns(self, relation: str) -> list[str]:
        from ..catalog import schema as S
        from .session import _ref_from_name

        handle = self._session.catalog.resolve(_ref_from_name(relation), self._session.current_database)
        return [f.name for f in S.metadata_schema(handle.log.snapshot().metadata).fields]

    def _write(self, relation: str):
        if "replacewhere" in self._options and self._mode != "overwrite":
            raise AnalysisError("replaceWhere needs mode('overwrite').", error_class="DELTA_REPLACE_WHERE_IN_APPEND",
                                sqlstate="42613")
        exists = self._exists(relation)
        if exists and self._mode == "error":
            raise AnalysisError(f"Table {relation} already exists; use mode('append') or mode('overwrite').",
                                error_class="TABLE_OR_VIEW_ALREADY_EXISTS", sqlstate="42P07")
        if exists and self._mode == "ignore":
            return None
        view = f"__isolde_write_{uuid.uuid4().hex[:12]}"
        self._df.createOrReplaceTempView(view)
        try:
            if not exists:
                sql = f"CREATE TABLE {relation} AS SELECT * FROM {view}"
            elif self._mode == "overwrite" and "replacewhere" in self._options:  # by name: the table's column order
                columns = ", ".join("`" + c.replace("`", "``") + "`" for c in self._session_columns(relation))
                sql = f"INSERT INTO {relation} REPLACE WHERE {self._options['replacewhere']} SELECT {columns} FROM {view}"
            elif self._mode == "overwrite":
                sql = f"INSERT OVERWRITE {relation} BY NAME SELECT * FROM {view}"
            else:
                sql = f"INSERT INTO {relation} BY NAME SELECT * FROM {view}"
            (stmt,) = self._session._parse(sql)
            return self._session._run(stmt, write_options=dict(self._options))
        finally:
            self._session.engine.catalog.dropTempView(view)
