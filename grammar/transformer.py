"""Parser callbacks: each grammar rule's value, made as the LALR parser reduces it (no
parse tree is built), found by table lookup on the rule name.

Every child of a statement (and of a column definition, MERGE clause, identity spec) is
a :class:`Clause` naming the dataclass field it fills, so one builder makes every node:
``Node(**fields)``; a clause given twice is a ParseError (``REPEATED`` fields collect
instead). Rules that yield plain values (names, types, properties) are one-liners in
``VALUES``. Named terminals are converted by ``TOKENS``; keyword tokens only give their
rule its span and are then dropped.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from types import SimpleNamespace
from typing import Any, NamedTuple

from . import ast as a
from .ctes import Cte, inline
from .lexer import Tok
from .slots import construct, error_at, expression, query, span_at, table_ref

_SIMPLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# COPY INTO's SELECT reads the files through this placeholder table name.
COPY_SOURCE = "__copy_source"
_COPY_FROM = re.compile(r"\bFROM\s+(?P<path>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\s*$", re.I | re.S)


class Clause(NamedTuple):
    field: str
    value: Any
    meta: Any


# rule -> (node class, constant fields, renamed fields)
STATEMENTS = {
    "select": (a.Select, {}, {}),
    "insert": (a.Insert, {}, {}),
    "update": (a.Update, {}, {}),
    "delete": (a.Delete, {}, {}),
    "merge": (a.Merge, {}, {"table": "target"}),
    "create_table": (a.CreateTable, {}, {}),
    "replace_table": (a.CreateTable, {"replace": True}, {}),
    "clone": (a.CloneTable, {"shallow": False}, {}),  # bare CLONE is DEEP, as in Databricks
    "drop_table": (a.DropTable, {}, {}),
    "create_database": (a.CreateDatabase, {}, {}),
    "drop_database": (a.DropDatabase, {}, {}),
    "use": (a.Use, {}, {}),
    "begin_transaction": (a.BeginTransaction, {}, {}),
    "commit_transaction": (a.CommitTransaction, {}, {}),
    "rollback_transaction": (a.RollbackTransaction, {}, {}),
    "show_tables": (a.ShowTables, {}, {}),
    "set_tblproperties": (a.SetTblProperties, {}, {}),
    "unset_tblproperties": (a.UnsetTblProperties, {}, {}),
    "add_columns": (a.AddColumns, {}, {}),
    "drop_feature": (a.DropFeature, {}, {}),
    "alter_cluster_by": (a.AlterClusterBy, {}, {"cluster_by": "columns"}),
    "sync_identity": (a.SyncIdentity, {}, {}),
    "alter_column_type": (a.AlterColumnType, {}, {}),
    "rename_column": (a.RenameColumn, {}, {}),
    "drop_columns": (a.DropColumns, {}, {}),
    "add_constraint": (a.AddConstraint, {}, {}),
    "drop_constraint": (a.DropConstraint, {}, {}),
    "optimize": (a.Optimize, {}, {}),
    "reorg": (a.Reorg, {}, {}),
    "repair_table": (a.RepairTable, {}, {}),
    "vacuum": (a.Vacuum, {}, {}),
    "restore": (a.Restore, {}, {}),
    "describe_history": (a.DescribeHistory, {}, {}),
    "describe_detail": (a.DescribeDetail, {}, {}),
    "describe_table": (a.DescribeTable, {}, {}),
    "show_tblproperties": (a.ShowTblProperties, {}, {}),
    "convert": (a.ConvertToDelta, {}, {}),
    "set_config": (a.SetConfig, {}, {}),
    "reset_config": (a.ResetConfig, {}, {}),
    "explain": (a.Explain, {}, {}),
    "show_databases": (a.ShowDatabases, {}, {}),
    "show_views": (a.ShowViews, {}, {}),
    "show_columns": (a.ShowColumns, {}, {}),
    "show_create_table": (a.ShowCreateTable, {}, {}),
    "create_view": (a.CreateView, {}, {"table": "view"}),
    "drop_view": (a.DropView, {}, {"table": "view"}),
    "truncate_table": (a.TruncateTable, {}, {}),
    "create_table_like": (a.CreateTableLike, {}, {}),
    "copy_into": (a.CopyInto, {}, {}),
}

# rule -> (node class, constant fields, field of the parent it fills)
NODES = {
    "when_matched": (a.WhenMatched, {}, "clauses"),
    "when_not_matched": (a.WhenNotMatched, {}, "clauses"),
    "when_not_matched_by_source": (a.WhenNotMatchedBySource, {}, "clauses"),
    "update_star": (a.UpdateAction, {"star": True}, "action"),
    "update_set": (a.UpdateAction, {}, "action"),
    "delete_action": (a.DeleteAction, {}, "action"),
    "insert_star": (a.InsertAction, {"star": True}, "action"),
    "insert_values": (a.InsertAction, {}, "action"),
    "identity_always": (a.IdentitySpec, {"always": True}, "identity"),
    "identity_by_default": (a.IdentitySpec, {"always": False}, "identity"),
}

REPEATED = {"clauses"}

# rule -> (field, value from (builder, meta, children)); ``c`` is the children list
CLAUSES = {
    "query": ("query", lambda b, m, c: c[0]),
    "source": ("source", lambda b, m, c: c[0]),
    "source_query": ("source", lambda b, m, c: query(b.text, c[0])),
    "source_table": ("source", lambda b, m, c: b._time_travel(c)),
    "table": ("table", lambda b, m, c: table_ref(tuple(c), b.text[m.end_pos - 1] == "`", span=b._span(m))),
    "convert_source": ("table", lambda b, m, c: b._parquet_path(c[0].value, m)),
    "path": ("table", lambda b, m, c: a.TableRef(path=c[0], span=b._span(m))),
    "overwrite": ("overwrite", lambda b, m, c: True),
    "partition": ("partition", lambda b, m, c: tuple(c)),
    "insert_columns": ("columns", lambda b, m, c: tuple([".".join(p) for p in c])),
    "by_name": ("by_name", lambda b, m, c: True),
    "replace_where": ("replace_where", lambda b, m, c: b._expr(c[0])),
    "alias": ("alias", lambda b, m, c: c[0]),
    "target_alias": ("target_alias", lambda b, m, c: c[0]),
    "source_alias": ("source_alias", lambda b, m, c: (c[0], c[1]) if len(c) > 1 else c[0]),
    "table_source": ("source", lambda b, m, c: b._table_query(c[0].value)),
    "like_source": ("source", lambda b, m, c: c[0].value),
    "temporary": ("temporary", lambda b, m, c: True),
    "view_columns": ("columns", lambda b, m, c: tuple(c)),
    "copy_path": ("source", lambda b, m, c: c[0]),
    "copy_select": ("select", lambda b, m, c: b._copy_select(m, c[0])),
    "file_format": ("file_format", lambda b, m, c: c[0].upper()),
    "copy_files": ("files", lambda b, m, c: tuple(c)),
    "copy_pattern": ("pattern", lambda b, m, c: c[0]),
    "format_options": ("format_options", lambda b, m, c: c[0]),
    "copy_options": ("copy_options", lambda b, m, c: c[0]),
    "assignments": ("assignments", lambda b, m, c: tuple(c)),
    "where": ("where", lambda b, m, c: b._expr(c[0])),
    "optimize_where": ("where", lambda b, m, c: b._expr(c[0])),
    "reorg_where": ("where", lambda b, m, c: b._expr(c[0])),
    "sync_metadata": ("sync_metadata", lambda b, m, c: True),
    "repair_partitions": ("partitions", lambda b, m, c: True),
    "schema_evolution": ("schema_evolution", lambda b, m, c: True),
    "on": ("on", lambda b, m, c: b._expr(c[0])),
    "condition": ("condition", lambda b, m, c: b._expr(c[0])),
    "values": ("values", lambda b, m, c: tuple(map(b._expr, c))),
    "or_replace": ("or_replace", lambda b, m, c: True),
    "if_not_exists": ("if_not_exists", lambda b, m, c: True),
    "if_exists": ("if_exists", lambda b, m, c: True),
    "column_defs": ("columns", lambda b, m, c: tuple(c)),
    "new_columns": ("columns", lambda b, m, c: tuple(c)),
    "using": ("using", lambda b, m, c: c[0]),
    "partitioned_by": ("partitioned_by", lambda b, m, c: tuple(c)),
    "cluster_by": ("cluster_by", lambda b, m, c: tuple([".".join(p) for p in c])),
    "cluster_by_none": ("columns", lambda b, m, c: ()),
    "location": ("location", lambda b, m, c: c[0]),
    "comment": ("comment", lambda b, m, c: c[0]),
    "tblproperties": ("properties", lambda b, m, c: c[0]),
    "as_query": ("query", lambda b, m, c: c[0]),
    "not_null": ("nullable", lambda b, m, c: False),
    "generated_as": ("generated_as", lambda b, m, c: b._expr(c[0])),
    "default": ("default", lambda b, m, c: b._expr(c[0])),
    "start_with": ("start", lambda b, m, c: c[0]),
    "increment_by": ("increment", lambda b, m, c: c[0]),
    "shallow": ("shallow", lambda b, m, c: True),
    "deep": ("shallow", lambda b, m, c: False),
    "version_as_of": ("version", lambda b, m, c: int(c[0])),
    "timestamp_as_of": ("timestamp", lambda b, m, c: b._expr(c[0])),
    "name": ("name", lambda b, m, c: ".".join(c)),
    "cascade": ("cascade", lambda b, m, c: True),
    "restrict": ("cascade", lambda b, m, c: False),
    "in_database": ("database", lambda b, m, c: c[0].value),
    "like": ("pattern", lambda b, m, c: c[0]),
    "property_keys": ("keys", lambda b, m, c: tuple(c)),
    "feature_name": ("feature", lambda b, m, c: c[0]),
    "truncate_history": ("truncate_history", lambda b, m, c: True),
    "sync_column": ("column", lambda b, m, c: c[0]),
    "new_column_name": ("new_name", lambda b, m, c: c[0]),
    "type_column": ("column", lambda b, m, c: c[0]),
    "rename_from": ("column", lambda b, m, c: c[0]),
    "rename_to": ("new_name", lambda b, m, c: c[0]),
    "dropped_columns": ("columns", lambda b, m, c: tuple(c)),
    "new_type": ("data_type", lambda b, m, c: c[0]),
    "constraint_name": ("name", lambda b, m, c: c[0]),
    "check": ("check", lambda b, m, c: b._expr(c[0])),
    "full": ("full", lambda b, m, c: True),
    "zorder_by": ("zorder_by", lambda b, m, c: tuple([".".join(p) for p in c])),
    "purge": ("purge", lambda b, m, c: True),
    "iceberg_version": ("iceberg_compat_version", lambda b, m, c: int(c[0])),
    "retain": ("retain_hours", lambda b, m, c: float(c[0])),
    "dry_run": ("dry_run", lambda b, m, c: True),
    "vacuum_mode": ("mode", lambda b, m, c: b._source(m).upper()),
    "limit": ("limit", lambda b, m, c: int(c[0])),
    "extended": ("extended", lambda b, m, c: True),
    "shown_key": ("key", lambda b, m, c: c[0]),
    "no_statistics": ("no_statistics", lambda b, m, c: True),
    "convert_partitioned_by": ("partitioned_by", lambda b, m, c: tuple(c)),
    "config_key": ("key", lambda b, m, c: ".".join(c)),
    "config_value": ("value", lambda b, m, c: c[0]),
    "explain_mode": ("mode", lambda b, m, c: c[0].upper()),
}

# rule -> plain value from (builder, meta, children)
VALUES = {
    "identifier": lambda b, m, c: c[0],
    "non_reserved": lambda b, m, c: b._source(m),
    "column_path": lambda b, m, c: tuple(c),
    "partition_value": lambda b, m, c: a.PartitionValue(c[0], b._expr(c[1]) if len(c) > 1 else None, span=b._span(m)),
    "partition_column": lambda b, m, c: c[0],
    "assignment": lambda b, m, c: a.Assignment(c[0], b._expr(c[1]), span=b._span(m)),
    "column_def": lambda b, m, c: b._node(a.ColumnDef, m, c[2:], {"name": c[0], "data_type": c[1]}),
    "convert_column": lambda b, m, c: a.ColumnDef(c[0], c[1], span=b._span(m)),
    "column_aliases": lambda b, m, c: tuple(c),
    "cte": lambda b, m, c: Cte(c[0], c[1] if len(c) > 2 else (), query(b.text, c[-1])),
    "with_dml": lambda b, m, c: b._with_dml(m, c),
    "view_column": lambda b, m, c: (c[0], c[1].value if len(c) > 1 else None),
    "identity_options": lambda b, m, c: c,
    "signed_int": lambda b, m, c: int("".join(c)),
    "simple_type": lambda b, m, c: c[0].upper() + (f"({','.join(c[1:])})" if len(c) > 1 else ""),
    "generic_type": lambda b, m, c: f"{c[0].upper()}<{', '.join(c[1:])}>",
    "struct_type": lambda b, m, c: f"{c[0].upper()}<{', '.join(c[1:])}>",
    "struct_field": lambda b, m, c: b._struct_field(c),
    "properties": lambda b, m, c: tuple(c),
    "property": lambda b, m, c: a.Property(c[0], c[1] if len(c) > 1 else None, span=b._span(m)),
    "property_key": lambda b, m, c: c[0] if isinstance(c[0], str) else ".".join(c[0]),
    "property_value": lambda b, m, c: "".join(c),
}

_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "%": "\\%", "_": "\\_"}
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)


def unquote(literal: str) -> str:
    """A Spark string literal's value: quotes removed, backslash escapes applied
    (none in raw strings r'..')."""
    if literal[0] in "rR":
        return literal[2:-1]
    body = literal[1:-1]
    if "\\" not in body:
        return body
    return _ESCAPE.sub(lambda m: chr(int(m[1][1:], 16)) if len(m[1]) == 5 else _ESCAPES.get(m[1], m[1]), body)


class Pos:
    """A rule's value with its extent in the source (what lark's Meta holds, but cheaper:
    no parse tree is built, each rule's value is made as the parser reduces it)."""

    __slots__ = ("value", "start_pos", "end_pos")


class Builder(threading.local):
    """Per-thread state of the parse in progress: ``text`` is the whole input (spans and
    slot slices are offsets into it)."""

    text = ""

    # ------------------------------------------------------------------ helpers

    def _source(self, meta) -> str:
        return self.text[meta.start_pos : meta.end_pos]

    def _span(self, meta) -> a.Span:
        return span_at(self.text, meta.start_pos, meta.end_pos)

    def _fields(self, cls, clauses, constants, renames=None) -> dict:
        """Clauses -> keyword arguments; a clause given twice is a ParseError."""
        out = dict(constants)
        seen = {}
        repeated: dict[str, list] = {}  # lists, made tuples once: linear in the clause count
        for clause in clauses:
            name = renames.get(clause.field, clause.field) if renames else clause.field
            if name in REPEATED:
                repeated.setdefault(name, list(out.get(name, ()))).append(clause.value)
            elif name in seen:
                raise self._error(clause.meta, f"{self._keyword(clause.meta)} is given twice")
            else:
                seen[name] = clause
                out[name] = clause.value
        for name, values in repeated.items():
            out[name] = tuple(values)
        return out

    def _node(self, cls, meta, clauses, constants):
        flat = [c for item in clauses for c in (item if isinstance(item, list) else [item])]
        values = self._fields(cls, flat, constants)
        values["span"] = self._span(meta)
        return construct(cls, values)

    def _keyword(self, meta) -> str:
        """The leading keyword(s) of a clause, for messages: 'PARTITIONED BY', 'LOCATION'."""
        words = re.match(r"[A-Za-z_]+(?:\s+(?:BY|RUN|AS|NULL|HISTORY)\b)?", self._source(meta), re.I)
        return " ".join(words.group().upper().split()) if words else self._source(meta)

    def _error(self, meta, description: str):
        return error_at(self.text, meta.start_pos, description, self._keyword(meta))

    def _expr(self, token) -> a.Expr:
        return expression(self.text, token)

    def _with_dml(self, meta, children):
        """``WITH ... <write>``: the named queries inlined into the write (ctes.py), which keeps
        the whole text and span."""
        *named, stmt = children
        names = [c.name.lower() for c in named]
        if len(set(names)) != len(names):
            raise self._error(meta, "a WITH clause names the same query twice")
        return dataclasses.replace(inline(named, stmt), span=self._span(meta), text=self._source(meta))

    def _time_travel(self, children):
        table, *travel = children
        fields = {c.field: c.value for c in travel}
        return a.TableRef(table.value.parts, table.value.path, span=table.value.span, **fields)

    def _parquet_path(self, table: a.TableRef, meta) -> a.TableRef:
        """CONVERT TO DELTA parquet.`/path` names files, not a table."""
        parts = table.parts
        if len(parts) == 2 and parts[0].lower() == "parquet" and self.text[meta.end_pos - 1] == "`":
            return a.TableRef(path=parts[1], span=table.span)
        return table

    def _derived_query(self, text: str, span) -> a.Query:
        """A query isolde writes for the user (``TABLE src``, a MERGE source with column
        aliases), parsed like any query and given the span of what the user wrote."""
        q = query(text, Tok("QUERY", text, 0, len(text)))
        return construct(a.Query, {"sql": text, "tree": q.tree, "tables": q.tables, "span": span})

    def _table_query(self, table: a.TableRef) -> a.Query:
        """``INSERT INTO t TABLE src`` reads ``SELECT * FROM src``."""
        return self._derived_query("SELECT * FROM " + self.text[table.span.start : table.span.end], table.span)

    def _copy_select(self, meta, soup) -> tuple:
        """``(SELECT exprs FROM 'path')`` of COPY INTO -> (query over ``__copy_source``, path)."""
        tail = _COPY_FROM.search(soup.value)
        if tail is None:
            raise error_at(self.text, soup.end_pos, "COPY INTO's SELECT must end with FROM 'path'", None)
        start = meta.start_pos + 1  # after '('
        while self.text[start].isspace():
            start += 1
        text = self.text[start : soup.start_pos + tail.start()].rstrip() + " FROM " + COPY_SOURCE
        q = query(text, Tok("QUERY", text, 0, len(text)))
        return construct(a.Query, {"sql": text, "tree": q.tree, "tables": (), "span": self._span(meta)}), \
            unquote(tail.group("path"))

    def _struct_field(self, c) -> str:
        name, data_type, *options = c
        if not _SIMPLE_NAME.match(name):  # `y z`, `a.b`: the type text must keep the quotes
            name = "`" + name.replace("`", "``") + "`"
        text = f"{name}: {data_type}"
        for option in options:
            if option.field == "nullable":
                text += " NOT NULL"
            else:
                text += " COMMENT '" + option.value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return text


# ---------------------------------------------------------------------- Spark's rules


def _check_merge(builder: Builder, children, meta):
    """At least one WHEN; only the last clause of each kind may omit its condition; no
    ``*`` actions for WHEN NOT MATCHED BY SOURCE."""
    whens = [c for c in children if c.field == "clauses"]
    if not whens:
        raise error_at(builder.text, meta.end_pos, "MERGE needs at least one WHEN clause", None, ("'WHEN'",))
    last_of_kind = {type(c.value): c for c in whens}
    for clause in whens:
        node = clause.value
        if node.condition is None and last_of_kind[type(node)] is not clause:
            raise builder._error(
                clause.meta, "only the last WHEN clause of each kind may omit its condition (add AND <condition>)"
            )
        if isinstance(node, a.WhenNotMatchedBySource) and getattr(node.action, "star", False):
            raise error_at(
                builder.text, node.action.span.start, "WHEN NOT MATCHED BY SOURCE cannot use UPDATE SET *", "UPDATE"
            )


def _check_create(builder: Builder, children, meta):
    """A table is partitioned or clustered, not both; OR REPLACE contradicts IF NOT EXISTS."""
    layout = [c for c in children if c.field in ("partitioned_by", "cluster_by")]
    if len({c.field for c in layout}) == 2:
        raise builder._error(layout[-1].meta, "PARTITIONED BY and CLUSTER BY cannot be used together")
    flags = {c.field: c for c in children if c.field in ("or_replace", "if_not_exists")}
    if len(flags) == 2:
        raise builder._error(flags["if_not_exists"].meta, "OR REPLACE and IF NOT EXISTS cannot be used together")


def _fold_source_columns(builder: Builder, children, meta):
    """``USING (VALUES ...) AS s(a, b)`` / ``USING src AS s(a, b)``: the source becomes
    ``SELECT * FROM <source> AS s(a, b)``, so the executor sees an ordinary query source."""
    for i, clause in enumerate(children):
        if clause.field == "source_alias" and isinstance(clause.value, tuple):
            alias, columns = clause.value
            j, source = next((j, c) for j, c in enumerate(children) if c.field == "source")
            start = source.meta.start_pos
            text = builder.text[start : clause.meta.end_pos]
            body = builder.text[start : source.meta.end_pos]
            quoted = [f"`{n.replace('`', '``')}`" for n in columns]
            wrapped = f"SELECT * FROM {body} AS `{alias.replace('`', '``')}`({', '.join(quoted)})"
            children[j] = Clause("source", builder._derived_query(wrapped, span_at(builder.text, start, len(text) + start)),
                                 source.meta)
            children[i] = Clause("source_alias", alias, clause.meta)


def _split_view_columns(builder: Builder, children, meta):
    for i, clause in enumerate(children):
        if clause.field == "columns":
            names = tuple(n for n, _ in clause.value)
            comments = tuple(c for _, c in clause.value)
            children[i] = Clause("columns", names, clause.meta)
            if any(c is not None for c in comments):
                children.append(Clause("column_comments", comments, clause.meta))


def _split_copy_select(builder: Builder, children, meta):
    for i, clause in enumerate(children):
        if clause.field == "select":
            select, path = clause.value
            children[i] = Clause("select", select, clause.meta)
            children.append(Clause("source", path, clause.meta))
    if not any(c.field == "file_format" for c in children):
        raise error_at(builder.text, meta.end_pos, "COPY INTO needs FILEFORMAT = CSV | JSON | PARQUET | ...", None,
                       ("'FILEFORMAT'",))


REWRITES = {"merge": _fold_source_columns, "create_view": _split_view_columns, "copy_into": _split_copy_select}

#: EXPLAIN EXPLAIN ... is accepted (as Spark's grammar does) up to this depth: each level keeps
#: its own statement text, so memory grows with the square of the depth (10,000 levels: 430 MB).
MAX_EXPLAIN_NESTING = 16


def _check_explain(b, c, m):
    inner, depth = next(v.value for v in c if v.field == "statement"), 1
    while isinstance(inner, a.Explain):
        inner, depth = inner.statement, depth + 1
    if depth > MAX_EXPLAIN_NESTING:
        raise b._error(m, f"EXPLAIN nests more than {MAX_EXPLAIN_NESTING} levels deep")


CHECKS = {"merge": _check_merge, "create_table": _check_create, "replace_table": _check_create, "clone": _check_create,
          "explain": _check_explain}


TOKENS = {  # named terminals kept as values (keywords and punctuation are dropped)
    "SOUP": lambda t: t,  # parsed by the rule that knows the slot: _expr() or query()
    "QUERY": lambda t: query(BUILDER.text, t),
    "RAW": lambda t: t.value,
    "IDENT": lambda t: t.value,
    "BQUOTED": lambda t: t.value[1:-1].replace("``", "`"),
    "STRING": lambda t: unquote(t.value),
    "NUMBER": lambda t: t.value,
    "MINUS": lambda t: t.value,
    "EXPLAIN_MODE": lambda t: t.value,
}

BUILDER = Builder()


def _statement(rule):
    cls, constants, renames = STATEMENTS[rule]
    check = CHECKS.get(rule)
    rewrite = REWRITES.get(rule)

    def build(b, m, c):
        if rule == "explain":
            c = [v if isinstance(v, Clause) else Clause("statement", v, m) for v in c]
        if check:
            check(b, c, m)
        if rewrite:
            rewrite(b, c, m)
        values = b._fields(cls, c, constants, renames)
        values["span"] = b._span(m)
        values["text"] = b._source(m)
        return construct(cls, values)

    return build


def _clause(field, value):
    return lambda b, m, c: Clause(field, value(b, m, c), m)


def _node(cls, constants, field):
    return lambda b, m, c: Clause(field, b._node(cls, m, c, constants), m)


HANDLERS = {
    "start": lambda b, m, c: c[0],
    **VALUES,
    **{rule: _clause(*spec) for rule, spec in CLAUSES.items()},
    **{rule: _node(*spec) for rule, spec in NODES.items()},
    **{rule: _statement(rule) for rule in STATEMENTS},
}


def _callback(handler):
    def callback(children):
        pos = Pos()
        pos.start_pos = children[0].start_pos
        pos.end_pos = children[-1].end_pos
        values = []
        for child in children:
            if type(child) is Pos:
                values.append(child.value)
            else:
                convert = TOKENS.get(child.type)
                if convert is not None:
                    values.append(convert(child))
        pos.value = handler(BUILDER, pos, values)
        return pos

    return callback


def callbacks() -> SimpleNamespace:
    """The parser's reduce callbacks (lark ``transformer=``), one per rule."""
    return SimpleNamespace(**{rule: _callback(handler) for rule, handler in HANDLERS.items()})
