"""Support for the DML / conflict / stress tests (no tests here).

* ``dml_session(tmp_path)``: an isolde Session on the process's one SparkSession.
* ``parse_one(sql)``: the grammar's parser when present, else a small sqlglot-based
  stand-in that builds the same AST nodes for UPDATE / DELETE / MERGE / INSERT.
* ``make_table(...)``: a Delta table written straight through the log (pyarrow files), so
  tests do not depend on CREATE TABLE and a 1,000-file table takes well under a second.
* ``rows(session, name)``: the table's current rows, sorted, as tuples.
"""

from __future__ import annotations

import os
import uuid
from typing import Iterable, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot
import sqlglot.expressions as exp

from isolde.grammar import ast
from tests.helpers.oracle import spark_type


# --------------------------------------------------------------------------- parsing


def _expr(node: exp.Expression) -> ast.Expr:
    return ast.Expr(node.sql(dialect="databricks"), node)


def _ref(table: exp.Table) -> ast.TableRef:
    if table.db and table.db.lower() == "delta" and not table.catalog:
        return ast.TableRef(path=table.name)
    return ast.TableRef(parts=tuple(p for p in (table.catalog, table.db, table.name) if p))


def _query(node: exp.Expression) -> ast.Query:
    tables = tuple(_ref(t) for t in node.find_all(exp.Table))
    return ast.Query(node.sql(dialect="databricks"), node, tables)


def _path(col: exp.Expression) -> tuple[str, ...]:
    if isinstance(col, exp.Column):
        return tuple(p for p in (col.catalog, col.db, col.table) if p) + (col.name,)
    if isinstance(col, exp.Dot):
        return tuple(p.name for p in col.flatten())
    raise ValueError(f"not a column: {col.sql()}")


def _assignments(items, alias: Optional[str], table: Optional[str]) -> tuple[ast.Assignment, ...]:
    out = []
    for eq in items:
        path = _path(eq.this)
        if len(path) > 1 and path[0].lower() in {x.lower() for x in (alias, table) if x}:
            path = path[1:]
        out.append(ast.Assignment(path, _expr(eq.expression)))
    return tuple(out)


def _fallback_parse(sql: str) -> ast.Statement:
    tree = sqlglot.parse_one(sql, read="databricks")
    if isinstance(tree, exp.Update):
        table = tree.this
        alias = table.alias or None
        where = tree.args.get("where")
        return ast.Update(_ref(table), _assignments(tree.expressions, alias, table.name), alias=alias,
                          where=_expr(where.this) if where is not None else None, text=sql)
    if isinstance(tree, exp.Delete):
        table = tree.this
        where = tree.args.get("where")
        return ast.Delete(_ref(table), alias=table.alias or None,
                          where=_expr(where.this) if where is not None else None, text=sql)
    if isinstance(tree, exp.Merge):
        target = tree.this
        t_alias = target.alias or None
        using = tree.args["using"]
        s_alias = using.alias or None
        if isinstance(using, exp.Table):
            source = _ref(using)
        else:
            source = _query(using.this if isinstance(using, exp.Subquery) else using)
        clauses = []
        for w in tree.args["whens"].expressions:
            cond = _expr(w.args["condition"]) if w.args.get("condition") is not None else None
            then = w.args["then"]
            if isinstance(then, exp.Var):
                action = ast.DeleteAction()
            elif isinstance(then, exp.Update):
                if len(then.expressions) == 1 and isinstance(then.expressions[0], exp.Star):
                    action = ast.UpdateAction(star=True)
                else:
                    action = ast.UpdateAction(_assignments(then.expressions, t_alias, target.name))
            else:
                if isinstance(then.this, exp.Star):
                    action = ast.InsertAction(star=True)
                else:
                    cols = tuple(c.name for c in then.this.expressions)
                    vals = tuple(_expr(v) for v in then.expression.expressions)
                    action = ast.InsertAction(cols, vals)
            if w.args.get("matched"):
                clauses.append(ast.WhenMatched(action, cond))
            elif w.args.get("source"):
                clauses.append(ast.WhenNotMatchedBySource(action, cond))
            else:
                clauses.append(ast.WhenNotMatched(action, cond))
        evolution = False
        return ast.Merge(_ref(target), source, _expr(tree.args["on"]), tuple(clauses), target_alias=t_alias,
                         source_alias=s_alias, schema_evolution=evolution, text=sql)
    if isinstance(tree, exp.Insert):
        table = tree.this
        cols = ()
        if isinstance(table, exp.Schema):
            cols = tuple(c.name for c in table.expressions)
            table = table.this
        rw = tree.args.get("where")
        return ast.Insert(_ref(table), _query(tree.expression), overwrite=bool(tree.args.get("overwrite")),
                          columns=cols, replace_where=_expr(rw) if rw is not None else None, text=sql)
    raise ValueError(f"fallback parser cannot build {type(tree).__name__}")


def parse_one(sql: str) -> ast.Statement:
    evolution = False
    text = sql
    if "WITH SCHEMA EVOLUTION" in sql.upper():
        idx = sql.upper().index("WITH SCHEMA EVOLUTION")
        evolution = True
        text = sql[:idx] + sql[idx + len("WITH SCHEMA EVOLUTION"):]
    try:
        from isolde.grammar.parser import parse

        stmts = parse(sql)
        assert len(stmts) == 1
        return stmts[0]
    except ImportError:
        pass
    stmt = _fallback_parse(text)
    if evolution and isinstance(stmt, ast.Merge):
        from dataclasses import replace

        stmt = replace(stmt, schema_evolution=True)
    return stmt


# --------------------------------------------------------------------------- sessions and tables


def get_spark():
    from isolde.executor.runtime.spark import get_spark as _get

    return _get("local[2]")


def dml_session(warehouse: str):
    from isolde.executor.session.session import Session

    return Session(warehouse=str(warehouse), spark=get_spark())


class Runner:
    """A Session plus helpers: ``run(sql)`` executes, ``prepare(sql)`` returns a PreparedWrite."""

    def __init__(self, warehouse):
        self.session = dml_session(warehouse)
        self.warehouse = str(warehouse)

    def run(self, sql: str):
        return self.session.execute(parse_one(sql))

    def prepare(self, sql: str):
        return self.session.prepare(parse_one(sql))

    def path(self, name: str) -> str:
        return os.path.join(self.warehouse, "default", name)

    def rows(self, name: str, columns: Optional[Sequence[str]] = None) -> list[tuple]:
        return table_rows(self.session.spark, self.path(name), columns)

    def log(self, name: str):
        from isolde.executor.log.delta_log import DeltaLog

        return DeltaLog.for_table(self.path(name))


def spy_outcomes(monkeypatch, module, name: str) -> list:
    """Replace ``module.name`` by a spy recording, per call, whether it returned something
    (True) or None (False: it refused and handed the work back)."""
    calls: list = []
    real = getattr(module, name)

    def spy(*a, **k):
        out = real(*a, **k)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(module, name, spy)
    return calls


def spy_slice_writes(monkeypatch) -> list:
    """Record every one-job partition rewrite (``writer.write_partition_slices``): True when it
    wrote, False when it handed the rewrite back to another plan."""
    from isolde.executor.rows import writer

    return spy_outcomes(monkeypatch, writer, "write_partition_slices")


# --------------------------------------------------------------------------- physical plans

# The executor picks a plan by size; small test tables never cross the thresholds, so tests
# force each plan through them. Every plan must give the same table and row counts.
PLANS = {
    # rows that stay in their partition: one job writes every touched partition's folder
    "default": {},
    # one partitionBy write of all touched files (rows found by their file path)
    "single_write": {"slice_writes": False},
    # a job per touched partition
    "per_partition_writes": {"group_min_bytes": 0, "slice_writes": False},
    # ... and each partition's join gets only the source rows that matched that partition
    "per_partition_sources": {"group_min_bytes": 0, "split_source_rows": 0, "slice_writes": False},
    "shuffled_source": {"broadcast_rows": -1},
    # MERGE's new rows written after the one-job rewrite, not beside it
    "inserts_after": {"inserts_beside": False},
    # the one-job rewrite reads a union of one scan per partition, not one scan with a task per file
    "union_of_scans": {"one_scan_max_files": 0},
}


def always_one_scan(monkeypatch) -> None:
    """The one scan is chosen when a task per file makes no more tasks than a union would
    (``scan._few_tasks_per_file``, tested on its own): with one core small tables would take
    the union; tests about the reads themselves want the one scan wherever it applies."""
    from isolde.executor.rows import scan

    monkeypatch.setattr(scan, "_few_tasks_per_file", lambda spark, files, partitions: True)


def force_plan(monkeypatch, plan: str) -> None:
    """Set the thresholds so that ``plan`` (a key of PLANS) is the one taken."""
    from isolde.executor.rows import dml, routes

    cfg = PLANS[plan]
    if "group_min_bytes" in cfg:
        monkeypatch.setattr(routes, "GROUP_MIN_BYTES", cfg["group_min_bytes"])
    if "broadcast_rows" in cfg:
        monkeypatch.setattr(routes, "BROADCAST_ROWS", cfg["broadcast_rows"])
    monkeypatch.setattr(dml, "SLICE_WRITES", cfg.get("slice_writes", True))
    monkeypatch.setattr(dml, "INSERTS_BESIDE", cfg.get("inserts_beside", True))
    monkeypatch.setattr(routes, "ONE_SCAN_MAX_FILES", cfg.get("one_scan_max_files", 64))
    monkeypatch.setattr(routes, "SPLIT_SOURCE_ROWS", cfg.get("split_source_rows", 1 << 60))


def _sort_key(row):
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in row)


def table_rows(spark, path: str, columns: Optional[Sequence[str]] = None) -> list[tuple]:
    from isolde.executor.log.delta_log import DeltaLog
    from isolde.executor.rows.scan import scan

    snap = DeltaLog.for_table(path).update()
    df = scan(spark, snap, path)
    if columns:
        df = df.select(*columns)
    return sorted((tuple(r) for r in df.collect()), key=_sort_key)


def make_table(path: str, schema: pa.Schema, batches: Iterable[Sequence[dict]] = (), *,
               partition_by: Sequence[str] = (), properties: Optional[dict] = None) -> None:
    """Create a Delta table at ``path``: version 0 (metadata + protocol), then one commit
    holding one file per batch (rows as dicts). Partitioned tables get one file per batch and
    partition value."""

    from pyspark.sql import types as T

    from isolde.executor.catalog import schema as S
    from isolde.executor.log.actions import AddFile, Metadata
    from isolde.executor.log.delta_log import DeltaLog
    from isolde.executor.log.stats import file_stats

    os.makedirs(path, exist_ok=True)
    struct = T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in schema])
    config = {"delta.enableDeletionVectors": "false"}
    config.update(properties or {})
    metadata = Metadata(schema_string=S.struct_to_delta(struct), partition_columns=tuple(partition_by),
                        configuration=config)
    log = DeltaLog.for_table(path)
    txn = log.start_transaction()
    txn.commit([metadata], operation="CREATE TABLE")
    adds = []
    data_schema = pa.schema([f for f in schema if f.name not in partition_by])
    for batch in batches:
        groups: dict = {}
        for row in batch:
            key = tuple(row.get(p) for p in partition_by)
            groups.setdefault(key, []).append(row)
        for key, group in groups.items():
            sub = "/".join(f"{p}={'__HIVE_DEFAULT_PARTITION__' if v is None else v}" for p, v in zip(partition_by, key))
            name = f"part-{uuid.uuid4().hex}.snappy.parquet"
            rel = f"{sub}/{name}" if sub else name
            local = os.path.join(path, rel)
            os.makedirs(os.path.dirname(local), exist_ok=True)
            table = pa.Table.from_pylist([{k: v for k, v in r.items() if k not in partition_by} for r in group],
                                         schema=data_schema)
            pq.write_table(table, local, compression="snappy")
            num, stats = file_stats(local)
            st = os.stat(local)
            adds.append(AddFile(rel, {p: (None if v is None else str(v)) for p, v in zip(partition_by, key)},
                                st.st_size, int(st.st_mtime * 1000), True, stats))
    if adds:
        log.start_transaction().commit(adds, operation="WRITE", operation_parameters={"mode": "Append"})
