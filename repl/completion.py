"""Context-aware completion: a pure function ``suggest(text_before_cursor, catalog)`` plus a
thin prompt-toolkit ``Completer`` and a background-refreshed catalog snapshot.

Contexts (decided on the current statement only, from the text before the cursor):
statement keywords at the start; tables after FROM / JOIN / INTO / UPDATE / TABLE /
MERGE INTO / USING / OPTIMIZE / VACUUM / DESCRIBE [HISTORY|DETAIL]; columns of the
statement's tables after SELECT / WHERE / SET / ON / AND / OR / ZORDER BY / ORDER BY /
GROUP BY (``alias.`` narrows to one table); table property keys inside
TBLPROPERTIES (...) and their allowed values (isolation level names for
``delta.isolationLevel``); databases after USE / IN; meta-command names after ``\\``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from .sqlscan import Token, significant, tokenize

# --------------------------------------------------------------------------- vocabulary

START_KEYWORDS = [
    "SELECT", "INSERT INTO", "INSERT OVERWRITE", "UPDATE", "DELETE FROM", "MERGE INTO",
    "CREATE TABLE", "CREATE OR REPLACE TABLE", "CREATE TABLE IF NOT EXISTS", "CREATE DATABASE",
    "DROP TABLE", "DROP DATABASE", "ALTER TABLE", "OPTIMIZE", "REORG TABLE", "VACUUM",
    "RESTORE TABLE", "DESCRIBE HISTORY", "DESCRIBE DETAIL", "DESCRIBE TABLE", "SHOW TABLES",
    "SHOW TBLPROPERTIES", "USE", "SET", "RESET", "EXPLAIN", "WITH", "CONVERT TO DELTA",
    "VALUES",
]

ISOLATION_LEVELS = ["Serializable", "WriteSerializable"]

TABLE_PROPERTIES: dict[str, list[str]] = {
    "delta.isolationLevel": ISOLATION_LEVELS,
    "delta.enableDeletionVectors": ["true", "false"],
    "delta.checkpointInterval": ["10", "100"],
    "delta.appendOnly": ["true", "false"],
    "delta.targetFileSize": ["134217728", "268435456", "1073741824"],
    "delta.logRetentionDuration": ["interval 30 days", "interval 7 days"],
    "delta.deletedFileRetentionDuration": ["interval 7 days", "interval 1 days"],
    "delta.enableRowTracking": ["true", "false"],
    "delta.enableChangeDataFeed": ["true", "false"],
    "delta.columnMapping.mode": ["none", "name", "id"],
    "delta.enableIcebergCompatV2": ["true", "false"],
    "delta.universalFormat.enabledFormats": ["iceberg"],
    "delta.dataSkippingNumIndexedCols": ["32"],
    "delta.checkpoint.writeStatsAsStruct": ["true", "false"],
    "delta.minReaderVersion": ["1", "2", "3"],
    "delta.minWriterVersion": ["2", "5", "7"],
    "delta.feature.deletionVectors": ["supported"],
    "delta.feature.rowTracking": ["supported"],
    "delta.feature.domainMetadata": ["supported"],
    "delta.feature.appendOnly": ["supported"],
}

SESSION_CONF_KEYS = [
    "spark.databricks.delta.properties.defaults.enableDeletionVectors",
    "spark.databricks.delta.properties.defaults.isolationLevel",
    "spark.databricks.delta.properties.defaults.checkpointInterval",
    "spark.databricks.delta.properties.defaults.appendOnly",
    "spark.databricks.delta.retentionDurationCheck.enabled",
    "spark.databricks.delta.optimize.maxFileSize",
    "spark.sql.shuffle.partitions",
    "spark.sql.session.timeZone",
]

META_COMMANDS = ["\\?", "\\dt", "\\d", "\\history", "\\i", "\\timing", "\\format", "\\x", "\\conf", "\\q"]
OUTPUT_FORMATS = ["table", "csv", "json", "vertical", "markdown"]

# words after which a table name comes
TABLE_ANCHORS = {"FROM", "JOIN", "INTO", "UPDATE", "TABLE", "USING", "OPTIMIZE", "VACUUM", "HISTORY",
                 "DETAIL", "DESCRIBE", "DESC", "TBLPROPERTIES", "CLONE"}
# words after which a column (expression) comes
COLUMN_ANCHORS = {"SELECT", "WHERE", "ON", "AND", "OR", "SET", "BY", "HAVING", "NOT", "DISTINCT", "CASE", "WHEN",
                  "THEN", "ELSE"}
# every keyword the anchor scan stops at
CLAUSE_WORDS = TABLE_ANCHORS | COLUMN_ANCHORS | {
    "MERGE", "INSERT", "DELETE", "CREATE", "ALTER", "DROP", "REORG", "RESTORE", "SHOW", "USE", "WITH",
    "GROUP", "ORDER", "ZORDER", "PARTITIONED", "CLUSTER", "LIMIT", "AS", "MATCHED", "VALUES", "APPLY",
    "RETAIN", "DRY", "RUN", "IN", "EXPLAIN", "CONVERT", "PARTITION", "VERSION", "TIMESTAMP", "OF", "LIKE",
    "IS", "NULL", "BETWEEN", "LEFT", "RIGHT", "INNER", "OUTER", "FULL", "CROSS", "UNION", "EXCEPT",
    "INTERSECT", "END", "OVERWRITE", "REPLACE", "IF", "EXISTS", "DATABASE", "SCHEMA", "TABLES", "COLUMNS",
    "ADD", "UNSET", "FEATURE", "SOURCE", "TARGET", "USING", "RESET", "LOCATION", "COMMENT", "ASC", "DESC",
}
NOT_ALIAS = CLAUSE_WORDS | {"VERSION", "TIMESTAMP", "TBLPROPERTIES", "FULL", "LIMIT"}

FUNCTIONS = ["count(", "sum(", "avg(", "min(", "max(", "coalesce(", "concat(", "current_date()",
             "current_timestamp()", "date_format(", "lower(", "upper(", "length(", "cast("]

# what may follow a complete table reference, per statement kind
AFTER_TABLE = {
    "SELECT": ["WHERE", "JOIN", "LEFT JOIN", "GROUP BY", "ORDER BY", "LIMIT", "VERSION AS OF", "TIMESTAMP AS OF",
               "AS"],
    "DELETE": ["WHERE"],
    "UPDATE": ["SET"],
    "MERGE_TARGET": ["USING", "AS"],
    "MERGE_SOURCE": ["ON", "AS"],
    "INSERT": ["SELECT", "VALUES", "REPLACE WHERE", "BY NAME", "TABLE"],
    "OPTIMIZE": ["WHERE", "ZORDER BY", "FULL"],
    "REORG": ["APPLY (PURGE)", "APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2))", "WHERE"],
    "VACUUM": ["RETAIN", "DRY RUN", "LITE", "FULL"],
    "HISTORY": ["LIMIT"],
    "ALTER": ["SET TBLPROPERTIES (", "UNSET TBLPROPERTIES (", "ADD COLUMNS (", "CLUSTER BY (", "DROP FEATURE",
              "ADD CONSTRAINT", "DROP CONSTRAINT", "ALTER COLUMN"],
    "CREATE": ["USING DELTA", "PARTITIONED BY (", "CLUSTER BY (", "TBLPROPERTIES (", "COMMENT", "LOCATION",
               "AS SELECT", "SHALLOW CLONE", "DEEP CLONE"],
    "RESTORE": ["TO VERSION AS OF", "TO TIMESTAMP AS OF"],
}
AFTER_EXPR = {
    "SELECT_LIST": ["FROM", "AS"],
    "WHERE": ["AND", "OR", "IS NULL", "IS NOT NULL", "IN", "LIKE", "BETWEEN", "ORDER BY", "GROUP BY", "LIMIT"],
    "MERGE_ON": ["WHEN MATCHED", "WHEN NOT MATCHED", "WHEN NOT MATCHED BY SOURCE", "AND"],
}
MERGE_WHEN = ["MATCHED", "NOT MATCHED", "NOT MATCHED BY SOURCE", "NOT MATCHED BY TARGET"]
MERGE_THEN = ["UPDATE SET *", "UPDATE SET", "DELETE", "INSERT *", "INSERT"]


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Catalog:
    """What completion knows: table name -> column names, the databases, the current one.

    Names are as a user types them (``t`` for the current database, ``db.t`` otherwise)."""

    tables: Mapping[str, Sequence[str]] = field(default_factory=dict)
    databases: Sequence[str] = ()
    current_database: str = "default"

    def columns_of(self, name: str) -> list[str]:
        key = _norm(name)
        for table, cols in self.tables.items():
            t = _norm(table)
            if t == key or t == f"{_norm(self.current_database)}.{key}" or key == f"{_norm(self.current_database)}.{t}":
                return list(cols)
        return []

    def has_database(self, name: str) -> bool:
        return _norm(name) in {_norm(d) for d in self.databases}


def _norm(name: str) -> str:
    return name.replace("`", "").lower()


@dataclass(frozen=True)
class Suggestion:
    text: str
    kind: str  # keyword | table | column | property | value | database | meta | function | format | conf
    start: int  # where the replaced word starts, relative to the cursor (<= 0)
    meta: str = ""


# --------------------------------------------------------------------------- the pure function


def suggest(before: str, catalog: Catalog | None = None, after: str = "") -> list[Suggestion]:
    """Completion candidates for the cursor at the end of ``before`` (``after`` is the text
    after the cursor, used only to find the statement's tables, e.g. ``SELECT | FROM t``)."""
    catalog = catalog or Catalog()
    stripped = before.lstrip()
    if stripped.startswith("\\"):
        return _meta(stripped, catalog)

    tokens = tokenize(before)
    # the current statement: tokens after the last top-level ';'
    for i in range(len(tokens) - 1, -1, -1):
        if tokens[i].kind == "punct" and tokens[i].value == ";":
            tokens = tokens[i + 1:]
            break
    statement_after = after.split(";", 1)[0]
    last = tokens[-1] if tokens else None

    # inside a string: only TBLPROPERTIES keys/values complete there
    if last is not None and last.kind == "string" and not last.closed:
        return _in_string(tokens, last, catalog)
    if last is not None and last.kind in ("comment", "string", "qident"):
        return []  # the cursor is in a comment, or right after a string / quoted name

    word, qualifier = "", None
    sig = significant(tokens)
    if last is not None and last.kind == "word" and last.start + len(last.value) == len(before):
        word = last.value
        sig = sig[:-1]
    if len(sig) >= 2 and sig[-1].value == "." and sig[-2].kind in ("word", "qident") and \
            sig[-1].start + 1 + len(word) == len(before):
        qualifier = sig[-2].value.strip("`")
        sig = sig[:-2]
    start = -len(word)
    lower = bool(word) and word.islower()

    def kw(items: Iterable[str], kind: str = "keyword") -> list[Suggestion]:
        return _match([(k.lower() if lower else k) for k in items], word, kind, start)

    stmt_tables = _statement_tables(significant(tokenize(_join(tokens) + " " + statement_after)))

    if qualifier is not None:
        table = stmt_tables.get(_norm(qualifier), qualifier)
        cols = catalog.columns_of(table)
        if cols:
            return _match(cols, word, "column", start, meta=table)
        if catalog.has_database(qualifier):
            names = [t.split(".", 1)[1] for t in catalog.tables if _norm(t).startswith(_norm(qualifier) + ".")]
            return _match(names, word, "table", start)
        return []

    if not sig:
        return kw(START_KEYWORDS)

    props = _tblproperties_state(sig)
    if props is not None:
        state, key = props
        if state == "key":
            return _match([f"'{k}'" for k in TABLE_PROPERTIES], word, "property", start, quoted_match=True)
        if state == "value":
            return _match([f"'{v}'" for v in TABLE_PROPERTIES.get(key, [])], word, "value", start, quoted_match=True)
        return []

    first = sig[0].upper
    prev = sig[-1]
    pu = prev.upper if prev.kind == "word" else prev.value

    # SET key at statement start: session configuration
    if first in ("SET", "RESET") and len(sig) == 1:
        return _match(SESSION_CONF_KEYS, word, "conf", start)
    if first == "SET" and pu == "=" and len(sig) >= 2 and _join(sig[1:-1]).endswith("isolationLevel"):
        return _match(ISOLATION_LEVELS, word, "value", start)
    if pu in ("USE",) or (pu == "IN" and first == "SHOW") or (pu == "DATABASE" and first in ("DROP", "USE")):
        return _match(list(catalog.databases), word, "database", start)
    if pu == "WHEN" and first == "MERGE":
        return kw(MERGE_WHEN)
    if pu == "THEN" and first == "MERGE":
        return kw(MERGE_THEN)
    if pu == "MATCHED" or (pu == "SOURCE" and first == "MERGE") or (pu == "TARGET" and first == "MERGE"):
        return kw(["THEN", "AND"])
    if pu == "APPLY":
        return kw(["(PURGE)", "(UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2))"])
    if pu == "FEATURE":
        return _match(["deletionVectors", "rowTracking", "appendOnly", "domainMetadata", "columnMapping"], word,
                      "keyword", start)

    anchor_index = _anchor(sig)
    anchor = sig[anchor_index].upper if anchor_index is not None else ""
    anchor_prev = sig[anchor_index - 1].upper if anchor_index else ""
    tail = sig[anchor_index + 1:] if anchor_index is not None else sig

    # ---- table position
    if anchor in TABLE_ANCHORS:
        creating = anchor == "TABLE" and (first in ("CREATE", "REPLACE") and "CLONE" not in {t.upper for t in sig})
        if anchor == "USING" and first != "MERGE":
            creating = True  # CREATE ... USING DELTA
        if not tail or (prev.kind == "punct" and prev.value == ","):
            if creating:
                return kw(["DELTA"]) if anchor == "USING" else []
            tables = _table_names(catalog)
            extra = ["HISTORY", "DETAIL", "TABLE", "EXTENDED"] if anchor in ("DESCRIBE", "DESC") else []
            extra += ["TABLE"] if anchor == "OPTIMIZE" and not tables else []
            return _match(tables, word, "table", start) + kw(extra)
        kind = _statement_kind(sig, anchor, anchor_prev)
        options = AFTER_TABLE.get(kind, [])
        if _ends_with_alias_keyword(tail):
            return []
        return kw(options)

    # ---- column position
    if anchor in COLUMN_ANCHORS or (anchor == "" and first == "SELECT"):
        if anchor == "SET" and first == "ALTER":
            return kw(["TBLPROPERTIES ("])
        if anchor == "BY" and anchor_prev in ("PARTITIONED", "CLUSTER") and first == "CREATE":
            return _match(_defined_columns(sig), word, "column", start)
        expecting_operand = not tail or prev.kind in ("op", "punct") and prev.value in ("=", "<", ">", "<=", ">=",
                                                                                      "<>", "!=", ",", "(", "+",
                                                                                      "-", "*", "/")
        if prev.kind == "punct" and prev.value == "*" and anchor == "SELECT":
            expecting_operand = False
        if expecting_operand:
            cols = _statement_columns(stmt_tables, catalog)
            out = [Suggestion(c, "column", start, t) for c, t in cols if _prefix(c, word)]
            if anchor == "SELECT":
                out += kw(["DISTINCT", "*"]) if not tail else []
                out += _match(FUNCTIONS, word, "function", start)
            if anchor in ("WHERE", "AND", "OR", "ON", "NOT"):
                out += kw(["NOT", "EXISTS"]) if not tail else []
            return _dedupe(out)
        if anchor in ("SELECT", "DISTINCT"):
            return kw(AFTER_EXPR["SELECT_LIST"])
        if anchor in ("ON",) or (first == "MERGE" and anchor in ("AND", "OR") and "WHEN" not in {t.upper for t in sig}):
            return kw(AFTER_EXPR["MERGE_ON"])
        if anchor in ("WHERE", "AND", "OR", "HAVING", "NOT"):
            return kw(AFTER_EXPR["WHERE"])
        if anchor == "SET" and first == "UPDATE":
            return kw(["WHERE"])
        if anchor == "SET" and first == "MERGE":
            return kw(["WHEN MATCHED", "WHEN NOT MATCHED", "WHEN NOT MATCHED BY SOURCE"])
        if anchor == "BY":
            return kw(["ASC", "DESC", "LIMIT"]) if anchor_prev == "ORDER" else []
        return []
    return []


# --------------------------------------------------------------------------- helpers


def _join(tokens: Sequence[Token]) -> str:
    return "".join(t.value if t.kind != "space" else " " for t in tokens)


def _prefix(candidate: str, word: str) -> bool:
    return candidate.lower().startswith(word.lower())


def _match(items: Iterable[str], word: str, kind: str, start: int, meta: str = "",
           quoted_match: bool = False) -> list[Suggestion]:
    out = []
    w = word.lower()
    for item in items:
        text = item.lower()
        probe = text.strip("'") if quoted_match else text
        if text.startswith(w) or (quoted_match and probe.startswith(w)):
            out.append(Suggestion(item, kind, start, meta or kind))
        elif "." in text and not quoted_match and text.split(".", 1)[1].startswith(w) and w:
            out.append(Suggestion(item, kind, start, meta or kind))
    return _dedupe(out)


def _dedupe(items: list[Suggestion]) -> list[Suggestion]:
    seen, out = set(), []
    for s in items:
        if s.text not in seen:
            seen.add(s.text)
            out.append(s)
    return out


def _table_names(catalog: Catalog) -> list[str]:
    cur = _norm(catalog.current_database) + "."
    names = []
    for t in catalog.tables:
        names.append(t[len(cur):] if _norm(t).startswith(cur) else t)
    return sorted(dict.fromkeys(names), key=str.lower)


def _anchor(sig: Sequence[Token]) -> int | None:
    """Index of the last clause keyword at the cursor's parenthesis depth (or shallower)."""
    depth = 0
    for i in range(len(sig) - 1, -1, -1):
        t = sig[i]
        if t.kind == "punct" and t.value == ")":
            depth += 1
        elif t.kind == "punct" and t.value == "(":
            if depth == 0:
                continue  # we are inside this paren: keep looking outward
            depth -= 1
        elif depth == 0 and t.kind == "word" and t.upper in CLAUSE_WORDS:
            # connective words never decide the context on their own (NOT does right after
            # WHERE / AND / OR: a condition follows)
            if t.upper in ("AS", "OF", "VERSION", "TIMESTAMP", "IF", "EXISTS", "NOT") and i > 0:
                if t.upper == "NOT" and sig[i - 1].upper in ("WHERE", "AND", "OR"):
                    return i
                continue
            return i
    return None


def _statement_kind(sig: Sequence[Token], anchor: str, anchor_prev: str) -> str:
    first = sig[0].upper
    words = [t.upper for t in sig if t.kind == "word"]
    if first == "MERGE":
        return "MERGE_SOURCE" if anchor == "USING" else "MERGE_TARGET"
    if first in ("SELECT", "WITH") or anchor in ("FROM", "JOIN") and first not in ("DELETE",):
        return "SELECT"
    if first == "DELETE":
        return "DELETE"
    if first == "UPDATE":
        return "UPDATE"
    if first == "INSERT":
        return "INSERT"
    if first == "OPTIMIZE":
        return "OPTIMIZE"
    if first == "REORG":
        return "REORG"
    if first == "VACUUM":
        return "VACUUM"
    if first in ("DESCRIBE", "DESC") and "HISTORY" in words:
        return "HISTORY"
    if first == "ALTER":
        return "ALTER"
    if first in ("CREATE", "REPLACE"):
        return "CREATE"
    if first == "RESTORE":
        return "RESTORE"
    return ""


def _ends_with_alias_keyword(tail: Sequence[Token]) -> bool:
    return bool(tail) and tail[-1].kind == "word" and tail[-1].upper == "AS"


def _tblproperties_state(sig: Sequence[Token]) -> tuple[str, str] | None:
    """('key', '') / ('value', key) / ('other', '') when inside TBLPROPERTIES ( ... ), else None."""
    for i in range(len(sig) - 1, -1, -1):
        t = sig[i]
        if t.kind == "word" and t.upper in ("TBLPROPERTIES", "OPTIONS"):
            if i + 1 >= len(sig) or sig[i + 1].value != "(":
                return None
            inner = sig[i + 2:]
            depth = 0
            for x in inner:
                if x.value == "(":
                    depth += 1
                elif x.value == ")":
                    if depth == 0:
                        return None  # closed
                    depth -= 1
            if not inner or inner[-1].value == ",":
                return "key", ""
            if inner[-1].value == "=" and len(inner) >= 2:
                return "value", inner[-2].value.strip("'\"`")
            return "other", ""
    return None


def _in_string(tokens: Sequence[Token], last: Token, catalog: Catalog) -> list[Suggestion]:
    sig = significant(list(tokens[:-1]))
    props = _tblproperties_state(sig)
    content = last.value[1:]
    quote = last.value[0]
    start = -len(content)
    if props is None:
        return []
    state, key = props
    if state == "key":
        items = list(TABLE_PROPERTIES)
        kind = "property"
    elif state == "value":
        items = TABLE_PROPERTIES.get(key, [])
        kind = "value"
    else:
        return []
    return [Suggestion(k + quote, kind, start, kind) for k in items if k.lower().startswith(content.lower())]


def _statement_tables(sig: Sequence[Token]) -> dict[str, str]:
    """alias-or-name (normalised) -> table name, for every table reference of the statement."""
    out: dict[str, str] = {}
    i = 0
    n = len(sig)
    while i < n:
        t = sig[i]
        if t.kind == "word" and t.upper in ("FROM", "JOIN", "INTO", "UPDATE", "TABLE", "USING", "OPTIMIZE",
                                            "HISTORY", "DETAIL", "VACUUM"):
            j = i + 1
            if j < n and sig[j].kind == "word" and sig[j].upper in ("TABLE",) and t.upper != "TABLE":
                j += 1
            parts, k = [], j
            while k < n and sig[k].kind in ("word", "qident") and (not parts or sig[k - 1].value == "."):
                if sig[k].kind == "word" and sig[k].upper in NOT_ALIAS and not parts:
                    break
                parts.append(sig[k].value.strip("`"))
                k += 1
                if k < n and sig[k].value == ".":
                    k += 1
                else:
                    break
            if parts:
                name = ".".join(parts)
                out.setdefault(_norm(name), name)
                out.setdefault(_norm(parts[-1]), name)
                if k < n and sig[k].kind == "word" and sig[k].upper == "AS":
                    k += 1
                if k < n and sig[k].kind == "word" and sig[k].upper not in NOT_ALIAS:
                    out[_norm(sig[k].value)] = name
                    k += 1
                i = k
                continue
        i += 1
    return out


def _statement_columns(tables: Mapping[str, str], catalog: Catalog) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    seen_tables = []
    for name in tables.values():
        if name not in seen_tables:
            seen_tables.append(name)
    for name in seen_tables:
        for col in catalog.columns_of(name):
            out.append((col, name))
    return out


def _defined_columns(sig: Sequence[Token]) -> list[str]:
    """Column names defined in ``CREATE TABLE t (a INT, b STRING ...)``."""
    cols: list[str] = []
    depth = 0
    expect_name = False
    for t in sig:
        if t.value == "(":
            depth += 1
            expect_name = depth == 1 and not cols and t is not None
            if depth == 1 and cols:
                return cols
            continue
        if t.value == ")":
            depth -= 1
            if depth == 0 and cols:
                return cols
            continue
        if depth == 1 and t.value == ",":
            expect_name = True
            continue
        if depth == 1 and expect_name and t.kind in ("word", "qident"):
            cols.append(t.value.strip("`"))
            expect_name = False
    return cols


# --------------------------------------------------------------------------- meta-commands


def _meta(text: str, catalog: Catalog) -> list[Suggestion]:
    if " " not in text:
        return [Suggestion(m, "meta", -len(text), "meta-command") for m in META_COMMANDS if m.startswith(text)]
    command, rest = text.split(" ", 1)
    word = rest.split(" ")[-1]
    start = -len(word)
    if " " in rest.strip() and command != "\\conf":
        return []
    if command in ("\\d", "\\history", "\\dt"):
        return _match(_table_names(catalog), word, "table", start)
    if command == "\\format":
        return _match(OUTPUT_FORMATS, word, "format", start)
    if command == "\\conf":
        return _match(SESSION_CONF_KEYS, word, "conf", start) if " " not in rest.strip() else []
    return []


# --------------------------------------------------------------------------- prompt-toolkit glue


class CatalogCache:
    """A catalog snapshot, refreshed in a background thread from a session's
    ``tables()`` / ``columns(table)`` / ``current_database``. Reads never block."""

    def __init__(self, session_getter: Callable[[], Any]):
        self._get = session_getter
        self.snapshot = Catalog()
        self._lock = threading.Lock()
        self._pending = False
        self.refreshes = 0

    def refresh(self, wait: bool = False) -> None:
        with self._lock:
            if self._pending:
                return
            self._pending = True
        thread = threading.Thread(target=self._run, name="isolde-catalog", daemon=True)
        thread.start()
        if wait:
            thread.join(10)

    def _run(self) -> None:
        try:
            session = self._get()
            if session is None:
                return
            self.snapshot = load_catalog(session)
            self.refreshes += 1
        except Exception:
            pass  # completion is best effort
        finally:
            with self._lock:
                self._pending = False


def _name_of(item: Any) -> str:
    if isinstance(item, str):
        return item
    for attr in ("name", "tableName", "col_name", "column"):
        if hasattr(item, attr):
            return str(getattr(item, attr))
    if isinstance(item, (tuple, list)) and item:
        return str(item[0])
    return str(item)


def load_catalog(session: Any) -> Catalog:
    current = str(getattr(session, "current_database", None) or "default")
    tables: dict[str, list[str]] = {}
    for item in session.tables() or []:
        name = _name_of(item)
        try:
            cols = [_name_of(c) for c in (session.columns(name) or [])]
        except Exception:
            cols = []
        tables[name] = cols
    databases: list[str] = []
    lister = getattr(session, "databases", None)
    if callable(lister):
        try:
            databases = [_name_of(d) for d in lister() or []]
        except Exception:
            databases = []
    if current not in databases:
        databases.append(current)
    return Catalog(tables=tables, databases=databases, current_database=current)


def make_completer(cache: CatalogCache):
    from prompt_toolkit.completion import Completer, Completion

    class IsoldeCompleter(Completer):
        def get_completions(self, document, complete_event):
            try:
                items = suggest(document.text_before_cursor, cache.snapshot, document.text_after_cursor)
            except Exception:
                return
            for s in items:
                yield Completion(s.text, start_position=s.start, display_meta=s.meta)

    return IsoldeCompleter()
