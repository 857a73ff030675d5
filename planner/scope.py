"""The conflict scope of a write (DESIGN.md section 5): which part of the target table a
statement reads, as SQL text the transaction records and the conflict checker evaluates.

    conflict_scope(stmt, table_columns, partition_columns, target_alias=None,
                   source_key_values=None, *, source_columns=None,
                   deletion_vectors=False, clustered=False) -> ConflictScope
    merge_join_keys(stmt, table_columns, ...) -> [JoinKey]   # what the executor evaluates
    ConflictScope.describe() -> EXPLAIN text

Rules (all err towards conflict: a wider scope is always safe, a narrower one never is):

* UPDATE / DELETE: the WHERE clause, column qualifiers stripped to target column names,
  split into partition-only conjuncts and data conjuncts (``read_predicate`` holds both,
  ``partition_predicate`` the partition-only ones). Conjuncts the planner cannot analyse
  (non-deterministic or unknown functions / UDFs, subqueries, struct/array/map conditions)
  are dropped, which only widens the conjunction; with nothing left the scope is the whole
  table. Such statements are never row-level eligible. A subquery that reads the *target*
  (in WHERE or in an assignment) makes the scope the whole table. Subqueries over other
  tables (``id IN (SELECT id FROM other)``) are not materialised for the scope: the
  conjunct is dropped (the rest of the WHERE still scopes the write).
* MERGE: conjuncts of ON over target columns and constants, plus, for each equality join
  ``<source expr> = t.k`` (or ``<=>``), a dynamic predicate from the source key values the
  executor computed (``k IN (...)``, or ``k BETWEEN min AND max`` when there are more than
  ``large_set_threshold`` values). Clause conditions narrow the scope only when every
  clause is a WHEN MATCHED clause with a target-only condition (then the not-matched
  decision cannot depend on other target rows). WHEN NOT MATCHED BY SOURCE clauses read
  every target row (minus their own target-only conditions). A source reading the target
  makes the scope the whole table.
* INSERT: blind unless it reads the target. A source query that reads the target is scoped
  by the WHERE of each simple ``SELECT ... FROM target [WHERE ...]`` (no joins), otherwise
  the whole table; REPLACE WHERE adds its condition; OVERWRITE reads the static partition
  of its PARTITION clause, or the whole table.
* ``row_level_eligible``: deletion vectors enabled, the table's ``isolde.rowLevelConcurrency``
  mode allows it (auto: no partition columns, or clustered; always: any; off: never), and every
  condition analysable (not widened to the whole table).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import sqlglot.expressions as exp

from isolde.grammar import ast

from .predicates import (
    Resolver,
    Side,
    Unrenderable,
    and_all,
    column_node,
    conjuncts,
    or_all,
    parse_condition,
    quote_ident,
    sql_literal,
    to_sql,
)

LARGE_SET_THRESHOLD = 1000


@dataclass(frozen=True)
class ConflictScope:
    read_predicate: Optional[str]
    partition_predicate: Optional[str]
    reads_whole_table: bool
    blind_append: bool
    row_level_eligible: bool
    notes: tuple[str, ...] = field(default=(), compare=False)

    def describe(self) -> str:
        """Plain text for EXPLAIN."""
        lines = ["Conflict scope:"]
        if self.blind_append:
            lines.append("  reads: nothing (blind append)")
        elif self.reads_whole_table or self.read_predicate is None:
            lines.append("  reads: the whole table")
        else:
            lines.append(f"  reads: rows where {self.read_predicate}")
        if not self.blind_append:
            lines.append(f"  partitions: {self.partition_predicate or 'all'}")
        if self.blind_append:
            lines.append("  conflicts: none (a blind append conflicts with nothing)")
        else:
            lines.append(f"  conflicts: {'checked per row' if self.row_level_eligible else 'checked per file'}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        return "\n".join(lines)


@dataclass(frozen=True)
class KeyRange:
    """Source key values summarised (when the executor did not collect them all)."""

    min: Any
    max: Any
    count: int = 0
    has_null: bool = False


@dataclass(frozen=True)
class JoinKey:
    """An equality join in MERGE ON: ``source_sql`` (over the source's own names) = target column."""

    target_column: str
    source_sql: str
    null_safe: bool = False
    #: the source column's name when ``source_sql`` is just that column (not nested): the
    #: comparison's type then follows from the two columns' types, with no query to analyse
    source_column: Optional[str] = field(default=None, compare=False)


KeyValues = Union[KeyRange, Sequence[Any]]


# --------------------------------------------------------------------------- helpers


def _columns(table_columns) -> tuple[dict[str, str], dict[str, Any]]:
    if isinstance(table_columns, Mapping):
        names = {str(k).lower(): str(k) for k in table_columns}
        types = {str(k): v for k, v in table_columns.items()}
    else:
        names, types = {}, {}
        for c in table_columns:
            if isinstance(c, tuple):
                names[str(c[0]).lower()] = str(c[0])
                types[str(c[0])] = c[1]
            else:
                names[str(c).lower()] = str(c)
    return names, types


def _qualifiers(ref: Optional[ast.TableRef], alias: Optional[str]) -> list[tuple[str, ...]]:
    quals: list[tuple[str, ...]] = []
    if alias:
        quals.append((alias.lower(),))
    if ref is not None and not alias:
        if ref.path is None and ref.parts:
            parts = tuple(p.lower() for p in ref.parts)
            for i in range(len(parts)):
                quals.append(parts[i:])
    # longest first so `db.t.col` resolves before `t.col`
    return sorted(set(quals), key=len, reverse=True)


def _table_key(ref: ast.TableRef) -> tuple[str, ...]:
    if ref.path is not None:
        return ("delta", ref.path.lower())
    return tuple(p.lower() for p in ref.parts)


def _same_table(a: ast.TableRef, b: ast.TableRef) -> bool:
    """Does ``a`` read the current rows of table ``b``? A reference with VERSION / TIMESTAMP AS OF
    reads an immutable version, never the rows a concurrent commit changes."""
    if a.version is not None or a.timestamp is not None:
        return False
    ka, kb = _table_key(a), _table_key(b)
    if ka[0] == "delta" or kb[0] == "delta":
        return ka == kb
    return ka[-1] == kb[-1]  # err towards conflict: same name in another database counts


def file_level_reason(deletion_vectors: bool, partitioned: bool, row_level_mode: str) -> Optional[str]:
    """Why a table's conflicts are checked per file whatever the statement; None when its
    statements may be checked per row (``row_level_eligible``, when their reads are analysable).
    ``partitioned``: partition columns and no CLUSTER BY."""
    if row_level_mode == "off":
        return "isolde.rowLevelConcurrency = off"
    if not deletion_vectors:
        return "deletion vectors are disabled"
    if partitioned and row_level_mode != "always":
        return "the table is partitioned (isolde.rowLevelConcurrency = always enables row level)"
    return None


class _Builder:
    def __init__(self, partition_columns: Iterable[str], deletion_vectors: bool, clustered: bool,
                 row_level_mode: str = "auto"):
        self.partition_columns = {p.lower() for p in partition_columns}
        self.notes: list[str] = []
        self.analysable = True
        self.whole = False
        self.flags_note = file_level_reason(deletion_vectors, bool(self.partition_columns) and not clustered,
                                            row_level_mode)
        self.flags_ok = self.flags_note is None

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def unanalysable(self, reasons: Iterable[str]) -> None:
        self.analysable = False
        for r in reasons:
            self.note(f"not analysable ({r}): widened")

    def finish(self, read_predicate: Optional[str], blind: bool = False) -> ConflictScope:
        if blind:
            return ConflictScope(None, None, False, True, False, tuple(self.notes))
        if self.whole:
            read_predicate = None
        partition = None
        if read_predicate is not None:
            read_predicate = to_sql(parse_condition(read_predicate))  # one canonical spelling
            parts = [c for c in conjuncts(parse_condition(read_predicate)) if self._partition_only(c)]
            partition = and_all(to_sql(c) for c in parts)
        eligible = self.flags_ok and self.analysable and not self.whole
        notes = list(self.notes)
        if self.flags_note and not self.flags_ok:
            notes.append(f"checked per file: {self.flags_note}")
        elif self.flags_ok and not eligible:
            notes.append("checked per file: the read is not analysable row by row")
        return ConflictScope(
            read_predicate=read_predicate,
            partition_predicate=partition,
            reads_whole_table=read_predicate is None,
            blind_append=False,
            row_level_eligible=eligible,
            notes=tuple(notes),
        )

    def _partition_only(self, tree: exp.Expression) -> bool:
        cols = list(tree.find_all(exp.Column))
        return bool(cols) and all(c.name.lower() in self.partition_columns and not c.table for c in cols)


def _factor_or(preds: Sequence[Optional[str]]) -> Optional[str]:
    """OR of conjunctions with their common conjuncts pulled out; None (= TRUE) absorbs."""
    if not preds or any(p is None for p in preds):
        return None
    lists = [[to_sql(c) for c in conjuncts(parse_condition(p))] for p in preds]
    common = [c for c in lists[0] if all(c in other for other in lists[1:])]
    rests = [[c for c in lst if c not in common] for lst in lists]
    if any(not r for r in rests):
        return and_all(common)
    unique_rests = list(dict.fromkeys(and_all(r) for r in rests))
    return and_all(common + [or_all(unique_rests)])


def _target_conjuncts(resolver: Resolver, tree: Optional[exp.Expression], b: _Builder) -> list[str]:
    """Analysable target-only conjuncts of ``tree`` as SQL; records widening and self-reads."""
    out = []
    for c in conjuncts(tree):
        a = resolver.analyse(c)
        if a.reads_target:
            b.whole = True
            b.note("a subquery reads the target table: whole table")
        if not a.analysable:
            b.unanalysable(a.reasons)
            continue
        if a.sides == {"target"}:
            out.append(resolver.render_target(c))
    return out


def _check_self_reads(resolver: Resolver, trees: Iterable[Optional[exp.Expression]], b: _Builder) -> None:
    for tree in trees:
        if tree is None:
            continue
        for node in tree.find_all(exp.Table):
            if resolver.is_target_table(node):
                b.whole = True
                b.note("a subquery reads the target table: whole table")
                return


# --------------------------------------------------------------------------- entry points


def conflict_scope(
    stmt,
    table_columns,
    partition_columns: Iterable[str] = (),
    target_alias: Optional[str] = None,
    source_key_values: Optional[Mapping[str, KeyValues]] = None,
    *,
    source_columns: Optional[Iterable[str]] = None,
    deletion_vectors: bool = False,
    clustered: bool = False,
    large_set_threshold: int = LARGE_SET_THRESHOLD,
    target_read: Optional[str] = None,
    row_level_mode: str = "auto",
) -> ConflictScope:
    """The conflict scope of an UPDATE / DELETE / MERGE / INSERT statement.

    ``table_columns``: target column names, or a mapping name -> type (Spark type string,
    Delta schema JSON type or pyspark DataType) so conditions on complex types are seen.
    ``source_key_values``: for MERGE, target join column -> the source's key values (a
    sequence, or a :class:`KeyRange`), as computed by the executor for
    :func:`merge_join_keys`. ``source_columns``: the MERGE source's column names (lets
    unqualified columns be attributed). ``target_read``: why the executor found that another
    part of the statement reads the target under another name (its path, a view over it);
    the scope is then the whole table, since which rows that read saw is not known here.
    """
    partition_columns = list(partition_columns)
    b = _Builder(partition_columns, deletion_vectors, clustered, row_level_mode)
    if target_read and not isinstance(stmt, ast.Insert):
        b.whole = True
        b.note(f"{target_read} (read elsewhere in the statement): whole table")
    names, types = _columns(table_columns)
    if isinstance(stmt, (ast.Update, ast.Delete)):
        alias = target_alias or stmt.alias
        resolver = Resolver(Side(_qualifiers(stmt.table, alias), names, types), None, _table_key(stmt.table))
        tree = stmt.where.tree if stmt.where is not None else None
        parts = _target_conjuncts(resolver, tree, b)
        if isinstance(stmt, ast.Update):
            _check_self_reads(resolver, (a.value.tree for a in stmt.assignments), b)
        if stmt.where is None:
            b.note("no WHERE clause: whole table")
        return b.finish(and_all(parts))
    if isinstance(stmt, ast.Merge):
        return _merge_scope(stmt, names, types, b, target_alias, source_key_values, source_columns,
                            large_set_threshold)
    if isinstance(stmt, ast.Insert):
        return _insert_scope(stmt, names, types, b, target_read)
    raise TypeError(f"no conflict scope for {type(stmt).__name__}")


def _merge_resolver(stmt: ast.Merge, names, types, target_alias, source_columns) -> Resolver:
    t_alias = target_alias or stmt.target_alias
    target = Side(_qualifiers(stmt.target, t_alias), names, types)
    source_ref = stmt.source if isinstance(stmt.source, ast.TableRef) else None
    s_quals = _qualifiers(source_ref, stmt.source_alias)
    s_cols = None if source_columns is None else {str(c).lower(): str(c) for c in source_columns}
    source = Side(s_quals, s_cols)
    return Resolver(target, source, _table_key(stmt.target))


def _join_key(resolver: Resolver, tree: exp.Expression) -> Optional[JoinKey]:
    node = tree
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, (exp.EQ, exp.NullSafeEQ)):
        return None
    for mine, other in ((node.this, node.expression), (node.expression, node.this)):
        if not isinstance(mine, exp.Column):
            continue
        side, name, nested = resolver.classify(mine)
        if side != "target" or name is None or nested:
            continue
        a = resolver.analyse(other)
        if a.analysable and a.sides == {"source"}:
            column = None
            if isinstance(other, exp.Column):
                other_side, other_name, other_nested = resolver.classify(other)
                column = other_name if other_side == "source" and not other_nested else None
            return JoinKey(name, to_sql(other), isinstance(node, exp.NullSafeEQ), column)
    return None


def merge_join_keys(
    stmt: ast.Merge,
    table_columns,
    target_alias: Optional[str] = None,
    source_columns: Optional[Iterable[str]] = None,
) -> list[JoinKey]:
    """The equality joins of ON whose source side the executor evaluates over the source
    (``SELECT DISTINCT <source_sql> FROM source AS <source alias>``) to scope the merge."""
    names, types = _columns(table_columns)
    resolver = _merge_resolver(stmt, names, types, target_alias, source_columns)
    keys = []
    for c in conjuncts(stmt.on.tree):
        k = _join_key(resolver, c)
        if k is not None and all(k.target_column != other.target_column for other in keys):
            keys.append(k)
    return keys


def _spark_order(value: Any):
    """Sort key in Spark's order for one type: NaN after every other number."""
    if isinstance(value, float) and value != value:
        return (1, 0.0)
    return (0, value)


def key_predicate(column: str, values: KeyValues, null_safe: bool = False,
                  threshold: int = LARGE_SET_THRESHOLD) -> Optional[str]:
    """``col IN (...)`` / ``col = v`` / ``col BETWEEN lo AND hi`` for the source key values;
    None when the values cannot be written exactly (the caller then does not narrow)."""
    col = quote_ident(column)
    try:
        if isinstance(values, KeyRange):
            if values.count == 0 and values.min is None:
                pred = "FALSE"
            else:
                pred = f"{col} BETWEEN {sql_literal(values.min)} AND {sql_literal(values.max)}"
            has_null = values.has_null
        else:
            vals = list(values)
            has_null = any(v is None for v in vals)
            distinct = list(dict.fromkeys(v for v in vals if v is not None))
            try:
                distinct.sort(key=_spark_order)
            except TypeError:
                pass
            if not distinct:
                pred = "FALSE"
            elif len(distinct) > threshold:
                pred = f"{col} BETWEEN {sql_literal(distinct[0])} AND {sql_literal(distinct[-1])}"
            elif len(distinct) == 1:
                pred = f"{col} = {sql_literal(distinct[0])}"
            else:
                pred = f"{col} IN ({', '.join(sql_literal(v) for v in distinct)})"
    except (Unrenderable, TypeError):
        return None
    if null_safe and has_null:
        pred = f"{col} IS NULL" if pred == "FALSE" else f"({pred} OR {col} IS NULL)"
    return pred


def _merge_scope(stmt: ast.Merge, names, types, b: _Builder, target_alias, source_key_values,
                 source_columns, threshold) -> ConflictScope:
    resolver = _merge_resolver(stmt, names, types, target_alias, source_columns)
    # the source reads the target?
    if isinstance(stmt.source, ast.TableRef):
        if _same_table(stmt.source, stmt.target):
            b.whole = True
            b.note("the source is the target table: whole table")
    else:
        if any(_same_table(t, stmt.target) for t in getattr(stmt.source, "tables", ())):
            b.whole = True
            b.note("the source query reads the target table: whole table")
        else:
            _check_self_reads(resolver, [stmt.source.tree], b)

    static: list[str] = []
    dynamic: list[str] = []
    for c in conjuncts(stmt.on.tree):
        a = resolver.analyse(c)
        if a.reads_target:
            b.whole = True
            b.note("a subquery reads the target table: whole table")
        key = _join_key(resolver, c)
        if key is not None:
            values = (source_key_values or {}).get(key.target_column)
            if values is None:
                b.note(f"join key {key.target_column}: narrowed at run time to the source's values")
                continue
            pred = key_predicate(key.target_column, values, key.null_safe, threshold)
            if pred is None:
                b.note(f"join key {key.target_column}: source values not exact literals")
            else:
                dynamic.append(pred)
            continue
        if not a.analysable:
            b.unanalysable(a.reasons)
            continue
        if a.sides == {"target"}:
            static.append(resolver.render_target(c))
    matched_scope = and_all(static + dynamic)

    by_source: list[Optional[str]] = []
    narrow: list[Optional[str]] = []
    only_matched = True
    for clause in stmt.clauses:
        cond = clause.condition.tree if clause.condition is not None else None
        parts = _target_conjuncts(resolver, cond, b)
        if isinstance(clause, ast.WhenNotMatchedBySource):
            by_source.append(and_all(parts))
            only_matched = False
        elif isinstance(clause, ast.WhenNotMatched):
            only_matched = False
        else:
            narrow.append(and_all(parts))
        action = clause.action
        exprs = [a.value.tree for a in getattr(action, "assignments", ())]
        exprs += [v.tree for v in getattr(action, "values", ())]
        _check_self_reads(resolver, exprs, b)

    if only_matched and narrow and all(n is not None for n in narrow):
        clause_scope = _factor_or(narrow)
        matched_scope = and_all([p for p in (matched_scope, clause_scope) if p])
        b.note("every clause is WHEN MATCHED with a target condition: narrowed by the clause conditions")
    if matched_scope is None:
        b.note("ON pins no target columns: whole table")
    scope = matched_scope
    if by_source:
        if any(p is None for p in by_source):
            b.note("WHEN NOT MATCHED BY SOURCE reads every target row: whole table")
        scope = _factor_or([matched_scope, _factor_or(by_source)])
    return b.finish(scope)


def _insert_scope(stmt: ast.Insert, names, types, b: _Builder, target_read: Optional[str] = None) -> ConflictScope:
    target_key = _table_key(stmt.table)
    reads: list[Optional[str]] = []
    source_tree = stmt.source.tree if stmt.source is not None else None
    resolver_t = Resolver(Side([], names, types), None, target_key)
    refs = []
    if source_tree is not None:
        refs = [t for t in source_tree.find_all(exp.Table) if resolver_t.is_target_table(t)]
    if not refs and any(_same_table(t, stmt.table) for t in getattr(stmt.source, "tables", ())):
        refs = [None]
    if target_read:  # the target read under another name (its path, a view): rows unknown here
        b.note(f"{target_read}: whole table")
        refs = [None]
    for table in refs:
        reads.append(_self_select_scope(table, names, types, b, target_key))
    if stmt.replace_where is not None:
        resolver = Resolver(Side(_qualifiers(stmt.table, None), names, types), None, target_key)
        parts = _target_conjuncts(resolver, stmt.replace_where.tree, b)
        reads.append(and_all(parts))
    elif stmt.overwrite:
        static = []
        for pv in stmt.partition:
            if pv.value is None:
                continue
            col = names.get(pv.column.lower(), pv.column)
            static.append(to_sql(exp.EQ(this=column_node(col), expression=pv.value.tree.copy())))
        if not static:
            b.note("INSERT OVERWRITE without a static partition: whole table")
        reads.append(and_all(static))
    if not reads:
        return b.finish(None, blind=True)
    if refs:
        b.note("the source query reads the target table")
    return b.finish(_factor_or(reads))


def _self_select_scope(table: Optional[exp.Table], names, types, b: _Builder, target_key) -> Optional[str]:
    """Scope of one read of the target inside an INSERT's query: the WHERE of a simple
    ``SELECT ... FROM target [AS a] [WHERE ...]``; None (whole table) otherwise."""
    if table is None:
        return None
    frm = table.parent
    select = frm.parent if isinstance(frm, exp.From) else None
    if not isinstance(select, exp.Select) or select.args.get("joins") or select.args.get("laterals"):
        b.note("the target is read by a join or a complex query: whole table")
        return None
    alias = table.alias_or_name
    quals = [(alias.lower(),)] if alias else []
    resolver = Resolver(Side(quals, names, types), None, target_key)
    where = select.args.get("where")
    if where is None:
        return None
    parts = _target_conjuncts(resolver, where.this, b)
    return and_all(parts)
