"""Hand-built statement ASTs for planner tests (no dependency on the grammar helper's parser)."""

from __future__ import annotations

import sqlglot
import sqlglot.expressions as exp

from isolde.grammar import ast


def E(sql: str) -> ast.Expr:
    return ast.Expr(sql, sqlglot.parse_one(sql, read="databricks", into=exp.Condition))


def V(sql: str) -> ast.Expr:
    return ast.Expr(sql, sqlglot.parse_one(sql, read="databricks"))


def T(name: str) -> ast.TableRef:
    if name.startswith("delta.`"):
        return ast.TableRef(path=name[len("delta.`"):-1])
    return ast.TableRef(parts=tuple(name.split(".")))


def Q(sql: str) -> ast.Query:
    tree = sqlglot.parse_one(sql, read="databricks")
    tables = tuple(ast.TableRef(parts=tuple(p for p in (t.db, t.name) if p)) for t in tree.find_all(exp.Table))
    return ast.Query(sql, tree, tables)


def update(table="t", where=None, alias=None, **sets) -> ast.Update:
    assigns = tuple(ast.Assignment(tuple(k.split("__")), V(v)) for k, v in (sets or {"v": "1"}).items())
    return ast.Update(T(table), assigns, alias=alias, where=E(where) if where else None)


def delete(table="t", where=None, alias=None) -> ast.Delete:
    return ast.Delete(T(table), alias=alias, where=E(where) if where else None)


def matched_update(cond=None, star=True, **sets):
    action = ast.UpdateAction(star=True) if star and not sets else ast.UpdateAction(
        tuple(ast.Assignment((k,), V(v)) for k, v in sets.items()))
    return ast.WhenMatched(action, E(cond) if cond else None)


def matched_delete(cond=None):
    return ast.WhenMatched(ast.DeleteAction(), E(cond) if cond else None)


def not_matched_insert(cond=None):
    return ast.WhenNotMatched(ast.InsertAction(star=True), E(cond) if cond else None)


def by_source_delete(cond=None):
    return ast.WhenNotMatchedBySource(ast.DeleteAction(), E(cond) if cond else None)


def by_source_update(cond=None, **sets):
    return ast.WhenNotMatchedBySource(
        ast.UpdateAction(tuple(ast.Assignment((k,), V(v)) for k, v in (sets or {"v": "0"}).items())),
        E(cond) if cond else None)


def merge(on, *clauses, target="t", source="s", t_alias="t", s_alias="s") -> ast.Merge:
    src = Q(source) if source.lower().startswith(("select", "with", "values")) else T(source)
    return ast.Merge(T(target), src, E(on), tuple(clauses) or (matched_update(), not_matched_insert()),
                     target_alias=t_alias, source_alias=s_alias)


def insert(table="t", source="SELECT * FROM src", overwrite=False, partition=(), replace_where=None):
    parts = tuple(ast.PartitionValue(c, V(v) if v is not None else None) for c, v in partition)
    return ast.Insert(T(table), Q(source), overwrite=overwrite, partition=parts,
                      replace_where=E(replace_where) if replace_where else None)
