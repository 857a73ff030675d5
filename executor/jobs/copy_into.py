"""COPY INTO: Databricks' idempotent, retryable load of files into a Delta table.

    COPY INTO t FROM 'path' | (SELECT exprs FROM 'path')
      FILEFORMAT = CSV | JSON | PARQUET | ORC | TEXT | XML | BINARYFILE | AVRO
      [FILES = ('a.csv', ...) | PATTERN = 'glob']
      [FORMAT_OPTIONS ('k' = 'v', ...)]  [COPY_OPTIONS ('force' | 'mergeSchema' = 'true'|'false')]

Which files: every file under the source folder (recursively; names starting with ``_`` or
``.`` are skipped as Spark skips them), or the FILES listed (relative to the source; each must
exist), or those whose path relative to the source matches the PATTERN glob (Hadoop glob
syntax: ``*`` and ``?`` stay inside one folder level, ``[abc]``, ``[a-z]``, ``[^a]``,
``{x,y}``). A source that is one file loads that file. A missing source, an empty folder, an
unknown FILEFORMAT and unknown or malformed options are AnalysisErrors naming the thing.

Idempotence, remembered in the table: each loaded file becomes one Delta ``domainMetadata``
action, domain ``isolde.copyInto:<absolute path>``, configuration ``{"path", "size",
"modificationTime", "loadedAt"}`` (writer feature ``domainMetadata``, added to the protocol by
the first COPY INTO into a table without it). A re-run skips every file whose domain exists
-- by path, *even if the file changed since* (Databricks documents exactly that);
``COPY_OPTIONS ('force' = 'true')`` loads the selected files again. A run that finds nothing
new commits nothing and answers with zeros and a message saying so. Because each file is its
own domain, two concurrent runs that load the same file write the same domain and the
later one fails with ConcurrentTransactionException (the conflict checker's domain rule), while
runs over distinct files both commit, as Databricks promises for concurrent COPY INTO. The
commit itself is a blind append (it reads no table data), so a concurrent INSERT never
conflicts with it (except with the one COPY INTO that upgrades the protocol, which every
concurrent writer sees as a protocol change).

One commit per run: operation ``COPY INTO``, operationParameters ``source``, ``fileFormat``,
``files`` / ``pattern``, ``formatOptions``, ``copyOptions``; metrics numFiles, numOutputRows,
numOutputBytes (Delta's WRITE metrics), numSourceFiles, numSkippedCorruptFiles. The result
answers Databricks' row: ``num_affected_rows``, ``num_inserted_rows``,
``num_skipped_corrupt_files``.

Columns and types (no SELECT): source columns are matched to the table's by name
(case-insensitive); a headerless CSV (``_c0``, ``_c1``, ...) by position. Table columns the
files lack are NULL. Columns the table lacks are an error naming them, unless
``COPY_OPTIONS ('mergeSchema' = 'true')`` adds them (ALTER-ADD-COLUMNS semantics, the same
``properties.add_columns`` MERGE WITH SCHEMA EVOLUTION uses; a table created with no columns
gets its whole schema this way). Text formats (CSV, JSON, XML) are *parsed as the table's
types* by Spark's reader -- the read schema carries the target type of every matched column,
so ``'42'`` becomes INT 42 and ``'2024-01-02'`` a DATE with the reader's ``dateFormat`` etc.
A value that does not parse follows the reader's ``mode``: PERMISSIVE (the default) stores
NULL, DROPMALFORMED drops the row, FAILFAST fails the run with Spark's error naming the file.
Where a type was inferred (JSON and XML always, CSV with ``inferSchema``, the typed formats
Parquet, ORC, Avro) it must be storable in the table's type under Spark's ANSI store
assignment (any number into any number, anything into STRING, strings into dates and
timestamps, which the reader then parses); otherwise the run fails before reading data with
an error naming the column and both types (a JSON string where the table has a number is such
a mismatch, not a NULL). A CSV read without ``inferSchema`` is all text: every value is parsed
as the table's type, per ``mode``. SELECT form:
the query's output columns are matched by name and cast the same way (write the CASTs a text
column needs in the SELECT; ``_metadata`` -- file_path, file_name, file_size,
file_modification_time, ... -- is available as in Spark). Partitioning, NOT NULL, CHECK,
generated and identity columns behave as for INSERT (writer.conform).

``FORMAT_OPTIONS ('ignoreCorruptFiles' = 'true')`` skips files Spark cannot read; they are
counted in ``num_skipped_corrupt_files`` and not remembered (a later run tries them again).
Nothing is ever half-committed: every failure before the commit removes the staged files.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Optional

from pyspark.sql import types as T

from isolde.errors import AnalysisError, TableNotFoundError, did_you_mean
from ..rows import dml
from ..catalog import properties as P
from ..catalog import schema as S
from . import executes
from ..log.actions import DomainMetadata
from ..session.results import CommitResult, PreparedWrite
from ..rows.writer import can_store, conform, identity_metadata_update, remove_written, write_files
from isolde.grammar import ast

OPERATION = "COPY INTO"
DOMAIN_PREFIX = "isolde.copyInto:"
PLACEHOLDER = "__copy_source"

#: FILEFORMAT -> Spark data source name
FORMATS = {"CSV": "csv", "JSON": "json", "PARQUET": "parquet", "ORC": "orc", "TEXT": "text", "XML": "xml",
           "BINARYFILE": "binaryFile", "AVRO": "avro"}
TEXT_FORMATS = {"CSV", "JSON", "XML"}  # values are text: parsed as the table's types by the reader

_GENERIC_OPTIONS = {"ignorecorruptfiles", "ignoremissingfiles", "pathglobfilter", "recursivefilelookup",
                    "modifiedbefore", "modifiedafter", "mergeschema", "encoding", "charset", "timezone", "locale"}
_FORMAT_OPTIONS = {
    "CSV": {"sep", "delimiter", "quote", "escape", "escapequotes", "comment", "header", "enforceschema",
            "inferschema", "samplingratio", "preferdate", "ignoreleadingwhitespace", "ignoretrailingwhitespace",
            "nullvalue", "nanvalue", "positiveinf", "negativeinf", "dateformat", "timestampformat",
            "timestampntzformat", "enabledatetimeparsingfallback", "maxcolumns", "maxcharspercolumn", "mode",
            "columnnameofcorruptrecord", "multiline", "chartoescapequoteescaping", "emptyvalue", "linesep",
            "unescapedquotehandling"},
    "JSON": {"primitivesasstring", "prefersdecimal", "allowcomments", "allowunquotedfieldnames",
             "allowsinglequotes", "allownumericleadingzeros", "allowbackslashescapingallcharacter", "mode",
             "columnnameofcorruptrecord", "dateformat", "timestampformat", "timestampntzformat",
             "enabledatetimeparsingfallback", "multiline", "allowunquotedcontrolchars", "linesep",
             "samplingratio", "dropfieldifallnull", "allownonnumericnumbers", "inferschema"},
    "PARQUET": {"datetimerebasemode", "int96rebasemode"},
    "ORC": set(),
    "TEXT": {"wholetext", "linesep"},
    "XML": {"rowtag", "rowtag", "attributeprefix", "valuetag", "ignoresurroundingspaces", "ignorenamespace",
            "samplingratio", "excludeattribute", "mode", "columnnameofcorruptrecord", "inferschema",
            "dateformat", "timestampformat", "timestampntzformat", "wildcardcolname", "rowvalidationxsdpath",
            "nullvalue", "prefersdecimal"},
    "BINARYFILE": set(),
    "AVRO": {"avroschema", "ignoreextension", "datetimerebasemode", "positionalfieldmatching"},
}
_BOOLEAN_OPTIONS = {"header", "inferschema", "multiline", "mergeschema", "ignorecorruptfiles", "ignoremissingfiles",
                    "recursivefilelookup", "enforceschema", "primitivesasstring", "prefersdecimal", "wholetext",
                    "ignoreleadingwhitespace", "ignoretrailingwhitespace", "escapequotes", "allowcomments",
                    "allowsinglequotes", "allowunquotedfieldnames", "dropfieldifallnull", "preferdate",
                    "ignoresurroundingspaces", "ignorenamespace", "allownumericleadingzeros",
                    "allowbackslashescapingallcharacter", "allowunquotedcontrolchars", "allownonnumericnumbers",
                    "ignoreextension", "positionalfieldmatching", "enabledatetimeparsingfallback"}
_MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
_COPY_OPTIONS = {"force": "force", "mergeschema": "mergeSchema"}
_BAD_NAME = re.compile(r"[ ,;{}()\n\t=]")


# --------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class CopyIntoResult(CommitResult):
    """COPY INTO's commit (or its no-op), which also answers with Databricks' result row:
    ``execute("COPY INTO ...").first().num_inserted_rows``."""

    num_affected_rows: int = 0
    num_inserted_rows: int = 0
    num_skipped_corrupt_files: int = 0
    committed: bool = True
    message: str = ""
    loaded_files: tuple = ()

    @property
    def columns(self) -> list[str]:
        return ["num_affected_rows", "num_inserted_rows", "num_skipped_corrupt_files"]

    @property
    def rows(self) -> list:
        from pyspark.sql import Row

        return [Row(num_affected_rows=self.num_affected_rows, num_inserted_rows=self.num_inserted_rows,
                    num_skipped_corrupt_files=self.num_skipped_corrupt_files)]

    def collect(self) -> list:
        return list(self.rows)

    def first(self):
        return self.rows[0]

    def head(self, n: Optional[int] = None):
        return self.rows[0] if n is None else self.rows[:n]

    def count(self) -> int:
        return 1

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return 1

    def show(self, n: int = 20, truncate=True, vertical: bool = False) -> None:
        from ..session.results import show_string

        print(show_string(self.columns, self.rows, n, truncate, vertical))


# --------------------------------------------------------------------------- options


def _truthy(value: str, key: str, where: str) -> bool:
    v = str(value).strip().lower()
    if v not in ("true", "false"):
        raise AnalysisError(f"{where} option '{key}' must be 'true' or 'false', not {value!r}.",
                            error_class="COPY_INTO_INVALID_OPTION_VALUE", sqlstate="22023")
    return v == "true"


def format_options(fmt: str, props) -> dict:
    """FORMAT_OPTIONS as Spark reader options (validated; keys as the user spelt them)."""
    known = _GENERIC_OPTIONS | _FORMAT_OPTIONS[fmt]
    out: dict = {}
    seen: dict = {}
    for p in props:
        key = str(p.key)
        low = key.lower()
        if p.value is None:
            raise AnalysisError(f"FORMAT_OPTIONS '{key}' needs a value.", error_class="COPY_INTO_INVALID_OPTION_VALUE",
                                sqlstate="22023")
        if low not in known:
            raise AnalysisError(
                f"Unknown FORMAT_OPTIONS '{key}' for FILEFORMAT = {fmt}.{did_you_mean(key, sorted(known))}",
                error_class="COPY_INTO_UNKNOWN_FORMAT_OPTION", sqlstate="42K06")
        if low in seen:
            raise AnalysisError(f"FORMAT_OPTIONS '{key}' is given twice.", error_class="COPY_INTO_DUPLICATE_OPTION",
                                sqlstate="42K06")
        value = str(p.value)
        if low in _BOOLEAN_OPTIONS:
            value = str(_truthy(value, key, "FORMAT_OPTIONS")).lower()
        if low == "mode" and value.upper() not in _MODES:
            raise AnalysisError(f"FORMAT_OPTIONS 'mode' must be one of {', '.join(_MODES)}, not {value!r}.",
                                error_class="COPY_INTO_INVALID_OPTION_VALUE", sqlstate="22023")
        seen[low] = key
        out[key] = value
    return out


def copy_options(props) -> dict:
    out = {"force": False, "mergeSchema": False}
    seen = set()
    for p in props:
        key = str(p.key)
        name = _COPY_OPTIONS.get(key.lower())
        if name is None:
            raise AnalysisError(f"Unknown COPY_OPTIONS '{key}': COPY INTO takes 'force' and 'mergeSchema'."
                                f"{did_you_mean(key, ['force', 'mergeSchema'])}",
                                error_class="COPY_INTO_UNKNOWN_COPY_OPTION", sqlstate="42K06")
        if name in seen:
            raise AnalysisError(f"COPY_OPTIONS '{key}' is given twice.", error_class="COPY_INTO_DUPLICATE_OPTION",
                                sqlstate="42K06")
        seen.add(name)
        out[name] = _truthy(p.value if p.value is not None else "", key, "COPY_OPTIONS")
    return out


def _opt(options: dict, name: str, default=None):
    for k, v in options.items():
        if k.lower() == name.lower():
            return v
    return default


# --------------------------------------------------------------------------- source files


@dataclass(frozen=True)
class SourceFile:
    key: str          # absolute path (or URI): what the table remembers
    relative: str     # path under the source folder, '/'-separated
    size: int
    modification_time: int  # ms since the epoch
    read_path: str    # what the Spark reader is given (glob characters escaped)

    @property
    def domain(self) -> str:
        return DOMAIN_PREFIX + self.key


_GLOB_CHARS = re.compile(r"([\[\]{}*?\\])")


def _escape_glob(path: str) -> str:
    return _GLOB_CHARS.sub(r"\\\1", path)


def _is_local(source: str) -> bool:
    return "://" not in source and not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:/", source) or source.startswith("file:")


def _local_path(source: str) -> str:
    if source.startswith("file://"):
        source = source[len("file://"):]
    elif source.startswith("file:"):
        source = source[len("file:"):]
    return os.path.abspath(os.path.expanduser(source))


def _hidden(name: str) -> bool:
    return name.startswith("_") or name.startswith(".")


def list_source(ctx, source: str) -> tuple[str, list[SourceFile], bool]:
    """(root, every data file under it, the source is a folder). Missing source: AnalysisError."""
    if not source or not source.strip():
        raise AnalysisError("COPY INTO needs a source path: FROM '<folder or file>'.",
                            error_class="COPY_INTO_SOURCE_NOT_FOUND", sqlstate="42K03")
    if _is_local(source):
        root = _local_path(source)
        if os.path.isfile(root):
            st = os.stat(root)
            return root, [SourceFile(root, os.path.basename(root), st.st_size, int(st.st_mtime * 1000),
                                     _escape_glob(root))], False
        if not os.path.isdir(root):
            raise AnalysisError(f"COPY INTO source '{source}' does not exist (looked for {root}).",
                                error_class="COPY_INTO_SOURCE_NOT_FOUND", sqlstate="42K03")
        out = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not _hidden(d))
            for name in sorted(filenames):
                if _hidden(name):
                    continue
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except OSError:
                    continue
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                out.append(SourceFile(full, rel, st.st_size, int(st.st_mtime * 1000), _escape_glob(full)))
        return root, out, True
    return _list_hadoop(ctx, source)


def _list_hadoop(ctx, source: str) -> tuple[str, list[SourceFile], bool]:
    spark = ctx.spark
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(source)
    try:
        fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
        status = fs.getFileStatus(path)
    except Exception as e:
        raise AnalysisError(f"COPY INTO source '{source}' cannot be read: {str(e).splitlines()[0][:300]}",
                            error_class="COPY_INTO_SOURCE_NOT_FOUND", sqlstate="42K03") from None
    root = status.getPath().toString().rstrip("/")
    if status.isFile():
        return root, [SourceFile(root, root.rsplit("/", 1)[-1], status.getLen(), status.getModificationTime(),
                                 _escape_glob(root))], False
    out = []
    it = fs.listFiles(status.getPath(), True)
    while it.hasNext():
        st = it.next()
        full = st.getPath().toString()
        rel = full[len(root):].lstrip("/")
        if any(_hidden(part) for part in rel.split("/")):
            continue
        out.append(SourceFile(full, rel, st.getLen(), st.getModificationTime(), _escape_glob(full)))
    out.sort(key=lambda f: f.relative)
    return root, out, True


def glob_regex(pattern: str) -> "re.Pattern":
    """A Hadoop-style glob as a regex over '/'-separated relative paths: ``*`` and ``?`` do not
    cross '/', ``[abc]`` / ``[a-z]`` / ``[^a]`` / ``[!a]`` classes, ``{a,b}`` alternatives
    (nestable), ``\\`` escapes the next character."""
    out = []
    i = 0
    depth = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                raise AnalysisError(f"PATTERN '{pattern}' has an unclosed '['.", error_class="COPY_INTO_INVALID_PATTERN",
                                    sqlstate="22023")
            body = pattern[i + 1:j]
            if body.startswith(("^", "!")):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    if depth:
        raise AnalysisError(f"PATTERN '{pattern}' has an unclosed '{{'.", error_class="COPY_INTO_INVALID_PATTERN",
                            sqlstate="22023")
    try:
        return re.compile("".join(out) + r"\Z", re.DOTALL)
    except re.error as e:
        raise AnalysisError(f"PATTERN '{pattern}' is not a valid glob: {e}.", error_class="COPY_INTO_INVALID_PATTERN",
                            sqlstate="22023") from None


def select_files(stmt: ast.CopyInto, source: str, files: list[SourceFile], is_dir: bool) -> list[SourceFile]:
    """The files FILES / PATTERN pick (all of them without either)."""
    if stmt.files and stmt.pattern is not None:
        raise AnalysisError("COPY INTO takes FILES or PATTERN, not both.", error_class="COPY_INTO_FILES_AND_PATTERN",
                            sqlstate="42613")
    if stmt.files:
        if not is_dir:
            raise AnalysisError(f"FILES needs a folder as the source; '{source}' is a file.",
                                error_class="COPY_INTO_SOURCE_NOT_A_FOLDER", sqlstate="42K03")
        if len(stmt.files) > 1000:
            raise AnalysisError(f"FILES lists {len(stmt.files)} files; COPY INTO takes at most 1000. Use PATTERN.",
                                error_class="COPY_INTO_TOO_MANY_FILES", sqlstate="54000")
        by_rel = {f.relative: f for f in files}
        picked, missing = [], []
        for name in stmt.files:
            rel = str(name).replace("\\", "/").lstrip("/")
            while rel.startswith("./"):
                rel = rel[2:]
            f = by_rel.get(rel)
            if f is None:
                missing.append(str(name))
            elif f not in picked:
                picked.append(f)
        if missing:
            raise AnalysisError(
                f"FILES names {len(missing)} file(s) that are not in '{source}': {', '.join(missing[:5])}"
                f"{' ...' if len(missing) > 5 else ''}.{did_you_mean(missing[0], by_rel)}",
                error_class="COPY_INTO_SOURCE_FILE_NOT_FOUND", sqlstate="42K03")
        return picked
    if stmt.pattern is not None:
        rx = glob_regex(stmt.pattern)
        return [f for f in files if rx.match(f.relative)]
    return list(files)


def loaded_files(snapshot) -> dict:
    """{file key: its recorded load} from the table's ``isolde.copyInto:*`` domains."""
    out = {}
    for name, dm in snapshot.domain_metadata.items():
        if name.startswith(DOMAIN_PREFIX) and not dm.removed:
            try:
                out[name[len(DOMAIN_PREFIX):]] = json.loads(dm.configuration or "{}")
            except ValueError:
                out[name[len(DOMAIN_PREFIX):]] = {}
    return out


# --------------------------------------------------------------------------- reading


def _reader(ctx, fmt: str, options: dict, schema=None):
    r = ctx.spark.read.format(FORMATS[fmt]).options(**options)
    if schema is not None:
        r = r.schema(schema)
    return r


def _load(ctx, fmt: str, options: dict, paths: list[str], schema=None):
    from ..session.session import translate_exception

    try:
        return _reader(ctx, fmt, options, schema).load(paths)
    except Exception as e:
        text = str(e)
        if fmt == "AVRO" and ("avro" in text.lower() and ("not found" in text.lower() or "find" in text.lower())):
            raise AnalysisError("FILEFORMAT = AVRO needs Spark's external spark-avro module, which this Spark does "
                                "not have.", error_class="COPY_INTO_FORMAT_UNAVAILABLE", sqlstate="0A000") from None
        if "UNABLE_TO_INFER_SCHEMA" in text or "Unable to infer schema" in text:
            raise AnalysisError(f"Cannot infer a schema from the {len(paths)} {fmt} file(s) to load (they may be "
                                "empty).", error_class="UNABLE_TO_INFER_SCHEMA", sqlstate="42KD9") from None
        raise translate_exception(e, ctx) from e


def _sql_type(dt_: T.DataType) -> str:
    return dt_.simpleString().upper()


def _mismatch(table: str, column: str, src: T.DataType, dst: T.DataType, fmt: str, select: bool) -> AnalysisError:
    hint = (f"CAST it in the SELECT: COPY INTO {table} FROM (SELECT CAST(`{column}` AS {_sql_type(dst)}) AS "
            f"`{column}`, ... FROM '<path>')" if not select else
            f"CAST it in the SELECT (... CAST(expr AS {_sql_type(dst)}) AS `{column}` ...)")
    return AnalysisError(
        f"COPY INTO {table}: column `{column}` is {_sql_type(src)} in the {fmt} source but {_sql_type(dst)} in the "
        f"table, and {_sql_type(src)} cannot be stored as {_sql_type(dst)}. {hint}.",
        error_class="DELTA_FAILED_TO_MERGE_FIELDS", sqlstate="22005")


def _new_fields(table: str, struct: T.StructType, src_fields, merge: bool, fmt: str) -> list:
    """Source fields the table lacks: the columns mergeSchema adds, or an error naming them."""
    have = {f.name.lower() for f in struct.fields}
    extra = [f for f in src_fields if f.name.lower() not in have]
    if not extra:
        return []
    if not merge:
        listed = ", ".join(f"`{f.name}` {_sql_type(f.dataType)}" for f in extra[:10])
        if not struct.fields:
            raise AnalysisError(
                f"COPY INTO {table}: the table has no columns yet. Add COPY_OPTIONS ('mergeSchema' = 'true') so "
                f"this load sets its schema ({listed}{' ...' if len(extra) > 10 else ''}).",
                error_class="DELTA_SCHEMA_NOT_SET", sqlstate="KD008")
        raise AnalysisError(
            f"COPY INTO {table}: the {fmt} source has column(s) the table does not have: {listed}"
            f"{' ...' if len(extra) > 10 else ''} (table columns: {', '.join(f.name for f in struct.fields)}). "
            "Add COPY_OPTIONS ('mergeSchema' = 'true') to add them, or pick columns with "
            f"COPY INTO {table} FROM (SELECT ... FROM '<path>').",
            error_class="DELTA_METADATA_MISMATCH", sqlstate="42KDG")
    out = []
    for f in extra:
        if _BAD_NAME.search(f.name) or not f.name:
            raise AnalysisError(
                f"COPY INTO {table}: cannot add column {f.name!r}: Delta column names cannot hold spaces or any of "
                "',;{}()\\n\\t='. Rename it in a SELECT (... AS new_name).",
                error_class="DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES", sqlstate="42K05")
        dt_ = T.StringType() if isinstance(f.dataType, T.NullType) else f.dataType
        out.append(T.StructField(f.name, dt_, True))
    lowered = [f.name.lower() for f in out]
    dupes = sorted({n for n in lowered if lowered.count(n) > 1})
    if dupes:
        raise AnalysisError(f"COPY INTO {table}: the source has duplicate column(s) {', '.join(dupes)}.",
                            error_class="COLUMN_ALREADY_EXISTS", sqlstate="42711")
    return out


def _check_types(table: str, struct: T.StructType, src_fields, fmt: str, select: bool) -> None:
    for f in src_fields:
        target = S.field_named(struct, f.name)
        if target is not None and not can_store(f.dataType, target.dataType):
            raise _mismatch(table, target.name, f.dataType, target.dataType, fmt, select)


def _probe_options(fmt: str, options: dict) -> dict:
    out = dict(options)
    if fmt in ("PARQUET", "ORC") and str(_opt(options, "ignoreCorruptFiles", "false")).lower() == "true" \
            and _opt(options, "mergeSchema") is None:
        out["mergeSchema"] = "true"  # the schema from every footer, not from one that may be corrupt
    return out


def _file_source_df(ctx, fmt: str, options: dict, paths: list[str], struct: T.StructType, table: str,
                    merge: bool) -> tuple:
    """(DataFrame of the files, its columns named as the table's where they match; the new
    fields mergeSchema adds). Text formats are read a second time with the table's types."""
    probe = _load(ctx, fmt, _probe_options(fmt, options), paths)
    src = list(probe.schema.fields)
    corrupt = _opt(options, "columnNameOfCorruptRecord", "_corrupt_record")
    if S.field_named(struct, corrupt) is None:  # Spark's malformed-record column is not data
        src = [f for f in src if f.name != corrupt]
    header = str(_opt(options, "header", "false")).lower() == "true"
    if fmt == "CSV" and not header and src and all(re.fullmatch(r"_c\d+", f.name) for f in src):
        # headerless CSV: by position onto the table's writable columns
        writable = [f for f in struct.fields if not S.is_generated(f) and not S.is_identity(f)]
        src = [T.StructField(writable[i].name, f.dataType, True) if i < len(writable) else f
               for i, f in enumerate(src)]
    if fmt != "CSV" or str(_opt(options, "inferSchema", "false")).lower() == "true":
        # inferred types must fit the table's (strings fit dates and timestamps: parsed by the reader);
        # a CSV read without inferSchema is all text, parsed as the table's types
        _check_types(table, struct, src, fmt, False)
    new = _new_fields(table, struct, src, merge, fmt)
    if fmt not in TEXT_FORMATS:
        return probe, new
    read_fields = []
    for f in src:
        target = S.field_named(struct, f.name)
        read_fields.append(T.StructField(f.name, target.dataType if target is not None else f.dataType, True))
    if fmt != "CSV" and _opt(options, "columnNameOfCorruptRecord") is not None:
        read_fields.append(T.StructField(corrupt, T.StringType(), True))
    return _load(ctx, fmt, options, paths, T.StructType(read_fields)), new


def _source_view_df(ctx, fmt: str, options: dict, paths: list[str]):
    return _load(ctx, fmt, _probe_options(fmt, options), paths)


def _select_df(ctx, stmt: ast.CopyInto, fmt: str, options: dict, paths: list[str]):
    """The SELECT form's DataFrame: the query over the files (its FROM a private temp view)."""
    import sqlglot.expressions as exp

    from .query import bind_query

    src = _source_view_df(ctx, fmt, options, paths)
    if "_metadata" in stmt.select.sql.lower() and "_metadata" not in [c.lower() for c in src.columns]:
        # Spark's hidden file-metadata column does not pass through a view: hand it over as a column
        src = src.select("*", "_metadata")
    view = f"__isolde_copy_{uuid.uuid4().hex[:12]}"
    tree = stmt.select.tree.copy()
    found = False
    for t in list(tree.find_all(exp.Table)):
        if t.name.lower() == PLACEHOLDER and not t.args.get("db"):
            alias = t.args.get("alias")
            new = exp.Table(this=exp.to_identifier(view))
            if alias is not None:
                new.set("alias", alias.copy())
            t.replace(new)
            found = True
    if not found:
        raise AnalysisError("The SELECT of COPY INTO must read FROM the source path.",
                            error_class="COPY_INTO_SOURCE_NOT_IN_SELECT", sqlstate="42000")
    src.createOrReplaceTempView(view)
    try:
        bound = bind_query(ctx, tree)
        df = bound.df
        _ = df.schema  # analysed while the view exists
    finally:
        try:
            ctx.spark.catalog.dropTempView(view)
        except Exception:
            pass
    return df


def _read_error(ctx, e: Exception) -> Exception:
    """The isolde error of a failed load; a file Spark could not read is named with the reason
    (Spark's FAILED_READ_FILE names only the file; the malformed record and value are causes)."""
    from isolde.errors import IsoldeError
    from ..session.session import translate_exception

    err = e if isinstance(e, IsoldeError) else translate_exception(e, ctx)
    if not isinstance(err, IsoldeError) or not str(err.error_class or "").startswith("FAILED_READ_FILE"):
        return err
    text = str(e)
    cause = e.__cause__
    while cause is not None and len(text) < 200_000:
        text += "\n" + str(cause)
        cause = cause.__cause__
    reasons = []
    for line in re.findall(r"Caused by: [\w.$]+: (.*)", text):
        line = line.strip()
        if line and line not in reasons:
            reasons.append(line)
    if reasons:
        err.message = f"{err.message.rstrip()} {' '.join(reasons[:2])}"
        err.args = (err.message,)
    return err


# --------------------------------------------------------------------------- corrupt files


def _corrupt_files(ctx, fmt: str, options: dict, files: list[SourceFile]) -> list[SourceFile]:
    """With ignoreCorruptFiles: the non-empty files that yielded no row and that Spark cannot
    read on their own."""
    from pyspark.sql import functions as F

    seen = {r[0] for r in _load(ctx, fmt, _probe_options(fmt, options), [f.read_path for f in files])
            .select(F.col("_metadata.file_path")).distinct().collect()}
    jvm = ctx.spark._jvm

    def uri(f: SourceFile) -> str:
        p = f.key if "://" in f.key or f.key.startswith("file:") else "file:" + f.key
        try:
            return jvm.org.apache.hadoop.fs.Path(p).toUri().toString()
        except Exception:
            return p

    bad = []
    strict = {k: v for k, v in options.items() if k.lower() != "ignorecorruptfiles"}
    for f in files:
        if f.size == 0 or uri(f) in seen:
            continue
        try:
            _reader(ctx, fmt, strict).load([f.read_path]).limit(1).collect()
        except Exception:
            bad.append(f)
    return bad


# --------------------------------------------------------------------------- the command


@executes(ast.CopyInto)
def run_copy_into(ctx, stmt: ast.CopyInto) -> PreparedWrite:
    started = time.perf_counter()
    fmt = str(stmt.file_format or "").upper()
    if fmt not in FORMATS:
        raise AnalysisError(f"Unknown FILEFORMAT = {stmt.file_format}: COPY INTO reads "
                            f"{', '.join(sorted(FORMATS))}.{did_you_mean(fmt, FORMATS)}",
                            error_class="COPY_INTO_UNSUPPORTED_FILE_FORMAT", sqlstate="0A000")
    options = format_options(fmt, stmt.format_options)
    copts = copy_options(stmt.copy_options)
    if stmt.table.version is not None or stmt.table.timestamp is not None:
        raise AnalysisError("The target of COPY INTO cannot have a VERSION / TIMESTAMP AS OF.",
                            error_class="COPY_INTO_TARGET_TIME_TRAVEL", sqlstate="42000")
    handle = ctx.resolve(stmt.table)
    txn = dml.start_transaction(ctx, handle.log)
    snap = txn.snapshot
    if snap.version < 0:
        raise TableNotFoundError(handle.name)
    metadata = snap.metadata
    struct = S.metadata_schema(metadata)
    config = S.configuration(metadata)

    root, all_files, is_dir = list_source(ctx, stmt.source)
    if is_dir and not all_files:
        raise AnalysisError(f"COPY INTO source '{stmt.source}' is an empty folder: there are no files to load.",
                            error_class="COPY_INTO_SOURCE_EMPTY", sqlstate="42K03")
    picked = select_files(stmt, stmt.source, all_files, is_dir)
    done = loaded_files(snap)
    todo = picked if copts["force"] else [f for f in picked if f.key not in done]

    params: dict = {"source": root, "fileFormat": fmt}
    if stmt.files:
        params["files"] = json.dumps(list(stmt.files))
    if stmt.pattern is not None:
        params["pattern"] = stmt.pattern
    params["formatOptions"] = json.dumps(options)
    params["copyOptions"] = json.dumps(copts)

    if not todo:
        if not picked:
            what = (f"no file matches PATTERN '{stmt.pattern}'" if stmt.pattern is not None else "no file to load")
        else:
            what = f"all {len(picked)} file(s) were loaded before (COPY_OPTIONS ('force' = 'true') loads them again)"
        message = f"COPY INTO {handle.name}: nothing to load, {what}; nothing committed (version {snap.version})."

        def nothing() -> CommitResult:
            return CopyIntoResult(version=snap.version, operation=OPERATION, metrics={}, table=handle.name,
                                  elapsed_s=time.perf_counter() - started, committed=False, message=message)

        return PreparedWrite(operation=OPERATION, table=handle.name, commit_fn=nothing)

    # ---- the data, shaped to the table (evolving it with mergeSchema)
    paths = [f.read_path for f in todo]
    merge = copts["mergeSchema"]
    new_metadata = new_protocol = None
    if stmt.select is None:
        df, new = _file_source_df(ctx, fmt, options, paths, struct, handle.name, merge)
    else:
        df = _select_df(ctx, stmt, fmt, options, paths)
        src_fields = list(df.schema.fields)
        _check_types(handle.name, struct, src_fields, fmt, True)
        new = _new_fields(handle.name, struct, src_fields, merge, fmt)
    protocol = snap.protocol
    if new:
        new_metadata, new_protocol = P.add_columns(metadata, snap.protocol, new)
        struct = S.metadata_schema(new_metadata)
        protocol = new_protocol
    names = {f.name.lower() for f in struct.fields}
    keep = [c for c in df.columns if c.lower() in names]
    if not keep:
        raise AnalysisError(f"COPY INTO {handle.name}: none of the source columns "
                            f"({', '.join(df.columns[:10])}) is a column of the table.",
                            error_class="DELTA_METADATA_MISMATCH", sqlstate="42KDG")
    df = df.select(*[f"`{c.replace('`', '``')}`" for c in keep])
    conformed = conform(df, struct, by_name=True, table_name=handle.name, configuration=config)

    corrupt: list = []
    if str(_opt(options, "ignoreCorruptFiles", "false")).lower() == "true":
        corrupt = _corrupt_files(ctx, fmt, options, todo)
    loaded = [f for f in todo if f not in corrupt]

    try:
        written = write_files(ctx, conformed, handle.path, new_metadata or metadata)
    except Exception as e:
        raise _read_error(ctx, e) from e
    try:
        protocol = P.protocol_with(protocol, writer={"domainMetadata"})
        actions: list = []
        if not P.same_protocol(protocol, snap.protocol):
            actions.append(protocol)
        meta = new_metadata
        updated = identity_metadata_update(new_metadata or metadata, written, conformed)
        if updated is not None:
            meta = updated
        if meta is not None:
            actions.append(meta)
        actions.extend(written.adds)
        now = int(time.time() * 1000)
        for f in loaded:
            actions.append(DomainMetadata(f.domain, json.dumps(
                {"path": f.key, "size": f.size, "modificationTime": f.modification_time, "loadedAt": now},
                separators=(",", ":")), False))
    except BaseException:
        remove_written(written)
        raise
    metrics = {
        "numFiles": len(written.adds),
        "numOutputRows": written.num_rows,
        "numOutputBytes": written.num_bytes,
        "numSourceFiles": len(loaded),
        "numSkippedCorruptFiles": len(corrupt),
    }

    def commit() -> CommitResult:
        version = txn.commit(actions, operation=OPERATION, operation_parameters=params, metrics=metrics)
        return CopyIntoResult(version=version, operation=OPERATION, metrics=dict(metrics), table=handle.name,
                              elapsed_s=time.perf_counter() - started, num_affected_rows=written.num_rows,
                              num_inserted_rows=written.num_rows, num_skipped_corrupt_files=len(corrupt),
                              message=f"Loaded {written.num_rows} row(s) from {len(loaded)} file(s) into "
                                      f"{handle.name} (version {version}).",
                              loaded_files=tuple(f.key for f in loaded))

    return PreparedWrite(operation=OPERATION, table=handle.name, commit_fn=commit,
                         staged_paths=list(written.staged_paths), metrics=dict(metrics))
