"""A differential fuzzer: random tables and random statement sequences run on isolde and on
Delta Lake on Spark (the reference), compared after every statement.

    case = generate_case(seed)                  the table definition and the statements (pure)
    outcome = run_case(case, session, spark, workdir)
    outcome.difference                          None, or the first Difference found
    outcome.script()                            the seed, the table and the statements as SQL

A case is a ``TableDef`` (columns of INT, BIGINT, STRING, DOUBLE, DECIMAL, DATE, TIMESTAMP,
BOOLEAN and a STRUCT; partitioned or not; deletion vectors, column mapping, change data feed on
or off; a CHECK constraint, a generated, an identity and a DEFAULT column, each maybe) and a list
of ``Step`` templates: INSERT (VALUES and SELECT, with CTEs and time travel), INSERT OVERWRITE
(the whole table, or a static partition) and INSERT ... REPLACE WHERE, UPDATE, DELETE,
MERGE (matched update/delete with conditions, not matched insert, not matched by source), MERGE
whose source has columns (or struct fields) the table lacks -- WITH SCHEMA EVOLUTION, under
``autoMerge``, or neither -- and reads (time travel, temporary and permanent views, CTEs). A case may
start with session settings: ANSI off, ``autoMerge`` on, ``partitionOverwriteMode=dynamic``.
Templates name the target ``{t}``, the temp view ``{v}``, the permanent view ``{pv}`` and a
past version ``{ver:K}`` (the version each engine's table had after step K: the two logs need not
number their commits alike for the reads to compare). isolde runs a template with its table's
name, Delta with ``delta.`<path>```; both run in one SparkSession.

Compared after each step: the outcome (both succeed or both fail), the coarse error class
(``coarse_error``), the statement's answer (UPDATE / DELETE / MERGE counts, a query's rows; an
INSERT's counts only where Delta answers with rows -- Delta OSS answers INSERT with none), the
table's schema (names and types, nested ones included: schema evolution), the
table's rows (an identity column's values are left out: each engine allocates its own, both
only promise distinct values) and the table version each log reached. At the end: the change data
feed (``_change_type`` and the step that made each change, not commit versions or timestamps),
and Delta-Spark reading isolde's table must see isolde's rows.

Every generated statement is first parsed by ``isolde.parse`` in the test of the generator, so
the fuzzer explores semantics, not isolde's grammar gaps.
"""

from __future__ import annotations

import math
import os
import random
import re
from dataclasses import dataclass, field
from decimal import Decimal

# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Column:
    name: str
    type: str                   # SQL type text
    kind: str = "plain"         # plain | generated | identity | default
    expr: str = ""              # generation expression / identity spec / default value
    not_null: bool = False

    def ddl(self) -> str:
        text = f"{self.name} {self.type}"
        if self.not_null:
            text += " NOT NULL"
        if self.kind == "generated":
            text += f" GENERATED ALWAYS AS ({self.expr})"
        elif self.kind == "identity":
            text += f" GENERATED {self.expr} AS IDENTITY"
        elif self.kind == "default":
            text += f" DEFAULT {self.expr}"
        return text

    @property
    def writable(self) -> bool:
        """Given a value by INSERT's column list (BY DEFAULT identity columns are left to the engine)."""
        return self.kind in ("plain", "default")


@dataclass(frozen=True)
class TableDef:
    columns: tuple[Column, ...]
    partition: str | None = None
    dv: bool = True
    column_mapping: str = "none"
    cdf: bool = False
    check: str | None = None           # a CHECK constraint added by ALTER TABLE after CREATE

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def has(self, name: str) -> bool:
        return any(c.name == name for c in self.columns)

    @property
    def plain(self) -> list[Column]:
        return [c for c in self.columns if c.kind == "plain"]

    @property
    def compared(self) -> list[str]:
        """The columns whose values both engines must agree on (identity values are each engine's own)."""
        return [c.name for c in self.columns if c.kind != "identity"]

    def create_sql(self) -> str:
        props = {"delta.enableDeletionVectors": str(self.dv).lower()}
        if self.column_mapping != "none":
            props["delta.columnMapping.mode"] = self.column_mapping
        if self.cdf:
            props["delta.enableChangeDataFeed"] = "true"
        if any(c.kind == "default" for c in self.columns):
            props["delta.feature.allowColumnDefaults"] = "supported"
        cols = ", ".join(c.ddl() for c in self.columns)
        text = f"CREATE TABLE {{t}} ({cols}) USING DELTA"
        if self.partition:
            text += f" PARTITIONED BY ({self.partition})"
        text += " TBLPROPERTIES (" + ", ".join(f"'{k}' = '{v}'" for k, v in props.items()) + ")"
        return text

    def setup(self) -> list[str]:
        steps = [self.create_sql()]
        if self.check:
            steps.append(f"ALTER TABLE {{t}} ADD CONSTRAINT ck CHECK ({self.check})")
        return steps


# the optional columns: (name, type); id and b are always there
OPTIONAL = [("s", "STRING"), ("d", "DOUBLE"), ("dc", "DECIMAL(10,2)"), ("dt", "DATE"), ("ts", "TIMESTAMP"),
            ("f", "BOOLEAN"), ("st", "STRUCT<x: INT, y: STRING>")]
GENERATED = [("g", "BIGINT", "b * 2", "b"), ("gs", "STRING", "upper(s)", "s"), ("gd", "DATE", "CAST(ts AS DATE)", "ts")]
CHECKS = ["b IS NULL OR b > -1000", "id >= 0", "s IS NULL OR length(s) < 6", "b IS NULL OR b < 100000"]


def generate_table(rng: random.Random) -> TableDef:
    cols = [Column("id", "INT", not_null=rng.random() < 0.3), Column("b", "BIGINT")]
    for name, typ in OPTIONAL:
        if rng.random() < 0.55:
            cols.append(Column(name, typ))
    names = {c.name for c in cols}
    if rng.random() < 0.35:
        gens = [g for g in GENERATED if g[3] in names]
        if gens:
            name, typ, expr, _ = rng.choice(gens)
            cols.append(Column(name, typ, "generated", expr))
    if rng.random() < 0.25:
        cols.append(Column("rid", "BIGINT", "identity", rng.choice(["ALWAYS", "BY DEFAULT"])))
    if rng.random() < 0.3:
        cols.append(Column("c", "STRING", "default", "'dflt'"))
    candidates = [n for n in ("s", "dt", "f") if n in names]
    partition = rng.choice(candidates) if candidates and rng.random() < 0.4 else None
    checks = [c for c in CHECKS if c.split(" ")[0] in names or c.startswith("id")]
    check = rng.choice(checks) if rng.random() < 0.3 else None
    return TableDef(columns=tuple(cols), partition=partition, dv=rng.random() < 0.7,
                    column_mapping=rng.choice(["none", "none", "name"]), cdf=rng.random() < 0.5, check=check)


# --------------------------------------------------------------------------- values and expressions


def literal(rng: random.Random, typ: str, null_rate: float = 0.15) -> str:
    if rng.random() < null_rate:
        return "NULL"
    if typ == "INT":
        return str(rng.randint(0, 12))
    if typ == "BIGINT":
        return str(rng.choice([0, 1, 5, 10, 42, -3, 7, 100, -5000, 200000]) if rng.random() < 0.3 else rng.randint(-5, 50))
    if typ == "STRING":
        return rng.choice(["'a'", "'b'", "'c'", "''", "'abcdefgh'", "'12'", "'x y'"])
    if typ == "DOUBLE":
        return rng.choice(["1.5", "-0.25", "0.0", "1000.0", "CAST('NaN' AS DOUBLE)", "3.0", "-7.5"])
    if typ.startswith("DECIMAL"):
        return rng.choice(["1.25", "-3.50", "0.00", "12345.67", "99999999.99", "7"])
    if typ == "DATE":
        return rng.choice(["DATE'2024-01-01'", "DATE'2024-02-29'", "DATE'1999-12-31'"])
    if typ == "TIMESTAMP":
        return rng.choice(["TIMESTAMP'2024-01-01 10:00:00'", "TIMESTAMP'2024-03-10 23:30:00'",
                           "TIMESTAMP'2000-01-01 00:00:00'"])
    if typ == "BOOLEAN":
        return rng.choice(["true", "false"])
    if typ.startswith("STRUCT"):
        return f"named_struct('x', {rng.randint(0, 5)}, 'y', {literal(rng, 'STRING', 0.2)})"
    raise ValueError(typ)


def typed_literal(rng: random.Random, typ: str, null_rate: float = 0.15) -> str:
    """A literal that keeps its column's type in a source query (NULL and 7 typed alike)."""
    text = literal(rng, typ, null_rate)
    if typ in ("STRING", "DATE", "TIMESTAMP", "BOOLEAN") and text != "NULL":
        return text
    return f"CAST({text} AS {typ})"


SET_EXPRS = {
    "id": ["id + 1", "id * 2", "id - 1", "NULL"],
    "b": ["b + 1", "b * 2", "-b", "NULL", "coalesce(b, 0) + id", "b - 5000", "CAST(s AS BIGINT)", "b + 300000",
          "9223372036854775807 + b"],
    "s": ["concat(s, 'x')", "upper(s)", "NULL", "'z'", "CAST(id AS STRING)", "'toolongvalue'"],
    "d": ["d * 2", "d + 0.5", "NULL", "CAST(b AS DOUBLE)"],
    "dc": ["dc + 1.25", "dc * 100", "NULL", "CAST(b AS DECIMAL(10,2))", "dc * 1000000"],
    "dt": ["date_add(dt, 1)", "NULL", "DATE'2030-06-01'"],
    "ts": ["ts + INTERVAL 1 HOUR", "NULL", "CAST(dt AS TIMESTAMP)"],
    "f": ["NOT f", "NULL", "id % 2 = 0"],
    "st": ["named_struct('x', id, 'y', s)", "NULL", "named_struct('y', 'q', 'x', 3)"],
    "st.x": ["st.x + 1", "NULL", "id"],
    "st.y": ["concat(st.y, '!')", "'w'"],
    "g": ["1"], "gs": ["'X'"], "gd": ["DATE'2024-01-01'"], "rid": ["42"], "c": ["DEFAULT", "'cc'", "NULL"],
}


def predicate(rng: random.Random, table: TableDef, alias: str = "", depth: int = 0, lenient: bool = False) -> str:
    p = alias + "." if alias else ""
    names = {c.name for c in table.columns}
    atoms = [f"{p}id < {rng.randint(0, 12)}", f"{p}id = {rng.randint(0, 12)}",
             f"{p}id IN ({rng.randint(0, 12)}, {rng.randint(0, 12)})", f"{p}b IS NULL", f"{p}b > {rng.randint(-3, 30)}",
             f"{p}id % 2 = {rng.randint(0, 1)}"]
    if "s" in names:
        atoms += [f"{p}s = 'a'", f"{p}s IS NOT NULL", f"{p}s < 'b'"]
    if "f" in names:
        atoms += [f"{p}f", f"NOT {p}f", f"{p}f IS NULL"]
    if "dt" in names:
        atoms += [f"{p}dt >= DATE'2024-01-01'"]
    if "st" in names:
        atoms += [f"{p}st.x = {rng.randint(0, 5)}", f"{p}st IS NULL"]
    if "d" in names:
        atoms += [f"{p}d < 1.0", f"{p}d = d" if not p else f"{p}d = {p}d"]
    if "dc" in names:
        atoms += [f"{p}dc > 1"]
    if "c" in names:
        atoms += [f"{p}c = 'dflt'"]
    if any(c.kind == "generated" for c in table.columns):
        g = next(c for c in table.columns if c.kind == "generated")
        atoms += [f"{p}{g.name} IS NOT NULL"]
    if lenient:  # ANSI off: a failed cast is NULL, an overflow wraps (an error under ANSI)
        atoms += [f"{p}b + 9223372036854775800 < 0", f"CAST({p}id AS TINYINT) * 100 > 200"]
        if "s" in names:
            atoms += [f"CAST({p}s AS INT) = 12", f"CAST({p}s AS INT) IS NULL"]
    atom = rng.choice(atoms)
    if depth < 1 and rng.random() < 0.35:
        return f"({atom} {rng.choice(['AND', 'OR'])} {predicate(rng, table, alias, depth + 1, lenient)})"
    if rng.random() < 0.08:
        return f"NOT ({atom})"
    return atom


# --------------------------------------------------------------------------- statements


@dataclass(frozen=True)
class Step:
    kind: str       # create | alter | set | insert | insert_select | update | delete | merge | select | view | view_read | overwrite
    sql: str        # a template: {t} the table, {v} the temp view, {pv} the permanent view, {ver:K} the version after step K


VER = re.compile(r"\{ver:(\d+)\}")

# session settings a case may start with (both engines share one SparkSession: each runs the SET,
# isolde into its session settings, Delta into Spark's conf; run_case resets them at the end)
ANSI_OFF = "SET spark.sql.ansi.enabled = false"
AUTO_MERGE = "SET spark.databricks.delta.schema.autoMerge.enabled = true"
DYNAMIC_OVERWRITE = "SET spark.sql.sources.partitionOverwriteMode = dynamic"
SETTING_KEYS = ("spark.sql.ansi.enabled", "spark.databricks.delta.schema.autoMerge.enabled",
                "spark.sql.sources.partitionOverwriteMode")
# columns a MERGE source brings that the table lacks (added by schema evolution)
NEW_COLUMNS = [("nc", "INT", "CAST({i} * 3 AS INT)"), ("ns", "STRING", "concat('n', CAST({i} AS STRING))")]
REFS = re.compile(r"(?<![.'\w])(id|b|s|d|dc|dt|ts|f|st)\b(?!\s*')")


def render(template: str, table: str, view: str, versions: list[int]) -> str:
    text = VER.sub(lambda m: str(versions[int(m.group(1))]), template)
    return text.replace("{t}", table).replace("{v}", view).replace("{pv}", view.replace("_v_", "_pv_"))


class Generator:
    def __init__(self, rng: random.Random, table: TableDef, start: int):
        self.rng, self.table = rng, table
        self.index = start          # the number of steps before the next one
        self.views: list[str] = []  # the views that exist ({v} temporary, {pv} permanent)
        self.settings: set[str] = set()

    def pred(self, alias: str = "") -> str:
        return predicate(self.rng, self.table, alias, lenient=ANSI_OFF in self.settings)

    def past(self) -> str:
        """A version some earlier step produced (step 0 is CREATE TABLE: an empty table)."""
        return "{ver:%d}" % self.rng.randint(0, self.index - 1)

    def writable(self) -> list[Column]:
        return [c for c in self.table.columns if c.writable]

    def insert_values(self) -> str:
        rng = self.rng
        cols = [c for c in self.writable() if c.name in ("id", "b") or c.kind == "plain" and rng.random() < 0.75]
        if any(c.kind == "identity" and c.expr == "BY DEFAULT" for c in self.table.columns) and rng.random() < 0.3:
            cols.append(self.table.column("rid"))
        rows = []
        for _ in range(rng.randint(1, 4)):
            vals = []
            for c in cols:
                if c.kind == "default" and rng.random() < 0.3:
                    vals.append("DEFAULT")
                elif c.name == "id":
                    vals.append(literal(rng, "INT", 0.03))
                elif c.name == "rid":
                    vals.append(str(rng.randint(100, 200)))
                else:
                    vals.append(literal(rng, c.type))
            rows.append("(" + ", ".join(vals) + ")")
        if rng.random() < 0.05:    # a value of the wrong type: a cast error, or an analysis error
            rows[0] = "(" + ", ".join(["'abc'"] + rows[0][1:-1].split(", ")[1:]) + ")"
        return f"INSERT INTO {{t}} ({', '.join(c.name for c in cols)}) VALUES {', '.join(rows)}"

    def insert_select(self) -> str:
        rng = self.rng
        cols = [c for c in self.table.plain if c.name in ("id", "b") or rng.random() < 0.6]
        exprs = [f"id + {rng.randint(1, 20)}" if c.name == "id" else c.name for c in cols]
        source = "{t}" + (f" VERSION AS OF {self.past()}" if rng.random() < 0.5 else "")
        where = f" WHERE {self.pred()}" if rng.random() < 0.7 else ""
        names = ", ".join(c.name for c in cols)
        if rng.random() < 0.3:
            return (f"INSERT INTO {{t}} ({names}) WITH cte AS (SELECT {', '.join(exprs)} FROM {source}{where}) "
                    f"SELECT * FROM cte")
        return f"INSERT INTO {{t}} ({names}) SELECT {', '.join(exprs)} FROM {source}{where}"

    def overwrite(self) -> str:
        """INSERT OVERWRITE of the whole table or of one partition, and INSERT ... REPLACE WHERE;
        the rows come from the table itself at a past version (so there are rows to write), with
        the key shifted now and then (so they differ from what they replace)."""
        rng = self.rng
        t = self.table
        cols = [c for c in t.plain if c.name in ("id", "b") or rng.random() < 0.6]
        source = "{t}" + (f" VERSION AS OF {self.past()}" if rng.random() < 0.7 else "")
        shift = rng.choice([0, 0, 1, 5])
        r = rng.random()
        if r < 0.4 and t.partition and rng.random() < 0.7:  # one partition, static
            part = t.column(t.partition)
            value = literal(rng, part.type, 0.0)
            cols = [c for c in cols if c.name != part.name]
            exprs = [f"id + {shift}" if c.name == "id" else c.name for c in cols]
            where = f" WHERE {self.pred()}" if rng.random() < 0.6 else ""
            return (f"INSERT OVERWRITE {{t}} PARTITION ({part.name} = {value}) ({', '.join(c.name for c in cols)}) "
                    f"SELECT {', '.join(exprs)} FROM {source}{where}")
        if r < 0.6 or any(c.kind == "identity" for c in t.columns):
            exprs = [f"id + {shift}" if c.name == "id" else c.name for c in cols]
            where = f" WHERE {self.pred()}" if rng.random() < 0.8 else ""
            return (f"INSERT OVERWRITE {{t}} ({', '.join(c.name for c in cols)}) "
                    f"SELECT {', '.join(exprs)} FROM {source}{where}")
        # REPLACE WHERE names no columns: every column, in the table's order; the source mostly
        # keeps to the condition (a row outside it fails both engines' check)
        # (no `%` or CAST in the condition: Delta-Spark 4.4 on Spark 4.2 cannot run such a
        # REPLACE WHERE -- test_departure_replace_where_spark_cannot_translate)
        cond = self.pred()
        while "%" in cond or "CAST(" in cond:
            cond = self.pred()
        keep = cond if rng.random() < 0.8 else self.pred()
        exprs = [f"id + {shift} AS id" if c.name == "id" else c.name for c in t.columns]
        return (f"INSERT INTO {{t}} REPLACE WHERE {cond} "
                f"SELECT * FROM (SELECT {', '.join(exprs)} FROM {source}) WHERE {keep}")

    def assignments(self, alias: str = "", source: str | None = None, source_cols=()) -> str:
        rng = self.rng
        names = [c.name for c in self.table.columns]
        options = [n for n in names if n != "rid" or rng.random() < 0.3]
        if "st" in names:
            options += ["st.x", "st.y"]
        if any(c.kind == "generated" for c in self.table.columns) and rng.random() > 0.1:
            options = [n for n in options if self.table.column(n.split(".")[0]).kind != "generated"]
        chosen = rng.sample(options, k=min(len(options), rng.randint(1, 3)))
        if "st" in chosen and ("st.x" in chosen or "st.y" in chosen):
            chosen.remove("st")
        if "st.x" in chosen and "st.y" in chosen:
            chosen.remove("st.y")
        p = alias + "." if alias else ""
        parts = []
        for name in chosen:
            if source and name in source_cols and rng.random() < 0.6:
                expr = f"{source}.{name}"
            else:
                present = {c.name for c in self.table.columns}
                fits = [e for e in SET_EXPRS[name] if set(REFS.findall(e.replace("'", " '"))) <= present
                        and not (source and e == "DEFAULT")]  # DEFAULT in MERGE: see merge()
                expr = rng.choice(fits or ["NULL"])
                if alias:  # qualify the target's columns in the expression
                    expr = re.sub(r"\b(id|b|s|d|dc|dt|ts|f|st)\b(?!')", lambda m: p + m.group(1), expr)
                    expr = expr.replace(p + p, p)
            parts.append(f"{p}{name} = {expr}")
        return ", ".join(parts)

    def update(self) -> str:
        where = f" WHERE {self.pred()}" if self.rng.random() < 0.85 else ""
        return f"UPDATE {{t}} SET {self.assignments()}{where}"

    def delete(self) -> str:
        rng = self.rng
        r = rng.random()
        # no subqueries in DELETE / UPDATE conditions: Delta OSS refuses them (test_departure_subquery_in_delete)
        if r < 0.06:
            return "DELETE FROM {t}"
        return f"DELETE FROM {{t}} WHERE {self.pred()}"

    def merge_source(self) -> tuple[str, list[str]]:
        rng = self.rng
        if rng.random() < 0.6:   # every column INSERT * / UPDATE SET * need (a partial source is refused by Delta)
            cols = self.writable()
        else:
            cols = [c for c in self.table.plain if c.name in ("id", "b") or rng.random() < 0.6]
        names = [c.name for c in cols]
        r = rng.random()
        if r < 0.25:
            cols = [c for c in cols if c.kind == "plain"]
            names = [c.name for c in cols]
            src = "{t}" + (f" VERSION AS OF {self.past()}" if rng.random() < 0.6 else "")
            exprs = [f"id + {rng.randint(0, 3)} AS id" if n == "id" else n for n in names]
            sql = f"(SELECT {', '.join(exprs)} FROM {src} WHERE {self.pred()})"
        elif r < 0.32 and self.views:
            return self.rng.choice(self.views), ["id", "b"]
        else:
            rows = []
            ids = [rng.randint(0, 12) for _ in range(rng.randint(1, 4))]
            if rng.random() < 0.15:
                ids.append(ids[0])                      # a duplicate key: a cardinality violation if matched
            for i in ids:
                vals = [f"{i}" if c.name == "id" else typed_literal(rng, c.type) for c in cols]
                rows.append("SELECT " + ", ".join(f"{v} AS {n}" for v, n in zip(vals, names)))
            body = " UNION ALL ".join(rows)
            if rng.random() < 0.2:
                sql = f"(WITH src AS ({body}) SELECT * FROM src)"
            else:
                sql = f"({body})"
        return sql, names

    def merge(self) -> str:
        rng = self.rng
        source, names = self.merge_source()
        on = "tg.id = sr.id" + (f" AND {self.pred('tg')}" if rng.random() < 0.15 else "")
        clauses = []
        for _ in range(rng.choice([0, 1, 1, 2])):
            cond = f" AND {self.pred('tg')}" if rng.random() < 0.5 else ""
            r = rng.random()
            if r < 0.3:
                clauses.append(f"WHEN MATCHED{cond} THEN DELETE")
            elif r < 0.4:
                clauses.append(f"WHEN MATCHED{cond} THEN UPDATE SET *")
            else:
                clauses.append(f"WHEN MATCHED{cond} THEN UPDATE SET {self.assignments('tg', 'sr', names)}")
        for _ in range(rng.choice([0, 1, 1, 2])):
            cond = f" AND sr.id < {rng.randint(0, 12)}" if rng.random() < 0.4 else ""
            if rng.random() < 0.25:
                clauses.append(f"WHEN NOT MATCHED{cond} THEN INSERT *")
            else:
                cols = [n for n in names if n == "id" or rng.random() < 0.7]
                vals = [f"sr.{n}" for n in cols]
                if self.table.has("c") and rng.random() < 0.3:
                    # (never DEFAULT: Delta 4.4 refuses DEFAULT in MERGE clauses, isolde takes it as
                    # Databricks does -- test_departure_default_in_merge_clauses; and "c" may be in the
                    # list already: both engines refuse the duplicate)
                    cols.append("c")
                    vals.append("'m'")
                clauses.append(f"WHEN NOT MATCHED{cond} THEN INSERT ({', '.join(cols)}) VALUES ({', '.join(vals)})")
        for _ in range(rng.choice([0, 0, 1, 2])):
            cond = f" AND {self.pred('tg')}" if rng.random() < 0.5 else ""
            if rng.random() < 0.4:
                clauses.append(f"WHEN NOT MATCHED BY SOURCE{cond} THEN DELETE")
            else:
                clauses.append(f"WHEN NOT MATCHED BY SOURCE{cond} THEN UPDATE SET tg.b = coalesce(tg.b, 0) + 100")
        clauses = self.conditioned(clauses)
        if not clauses:
            clauses.append("WHEN NOT MATCHED THEN INSERT (id) VALUES (sr.id)")
        return f"MERGE INTO {{t}} AS tg USING {source} AS sr ON {on} " + " ".join(clauses)

    def conditioned(self, clauses: list[str]) -> list[str]:
        """Every WHEN clause but the last of its kind carries a condition (both engines require it)."""
        out = []
        for i, clause in enumerate(clauses):
            kind = clause.split(" AND ")[0].split(" THEN ")[0]
            later = any(c.split(" AND ")[0].split(" THEN ")[0] == kind for c in clauses[i + 1:])
            if later and " AND " not in clause.split(" THEN ")[0]:
                cond = f"sr.id < {self.rng.randint(0, 12)}" if "BY SOURCE" not in kind and "NOT MATCHED" in kind \
                    else self.pred("tg")
                clause = clause.replace(f"{kind} THEN", f"{kind} AND {cond} THEN", 1)
            out.append(clause)
        return out

    def select(self) -> str:
        rng = self.rng
        cols = ", ".join(self.table.compared)
        r = rng.random()
        if r < 0.4:
            return f"SELECT {cols} FROM {{t}} VERSION AS OF {self.past()}"
        if r < 0.6:
            return (f"SELECT count(*) AS n, count(b) AS nb, min(id) AS lo, max(b) AS hi FROM {{t}} "
                    f"VERSION AS OF {self.past()} WHERE {self.pred()}")
        if r < 0.8:
            return f"WITH cte AS (SELECT {cols} FROM {{t}} WHERE {self.pred()}) SELECT * FROM cte"
        return f"SELECT {cols} FROM {{t}} WHERE {self.pred()}"

    def view_step(self) -> Step:
        """A temporary or a permanent view of the table (which reads the table's latest version
        whenever it is read, or a fixed one through time travel), or a read of one."""
        rng = self.rng
        if self.views and rng.random() < 0.5:
            view = rng.choice(self.views)
            where = f" WHERE id < {rng.randint(0, 12)}" if rng.random() < 0.3 else ""
            return Step("view_read", f"SELECT * FROM {view}{where}")
        view = rng.choice(["{v}", "{pv}"])
        if view not in self.views:
            self.views.append(view)
        source = "{t}" + (f" VERSION AS OF {self.past()}" if rng.random() < 0.2 else "")
        temp = " TEMP" if view == "{v}" else ""
        return Step("view", f"CREATE OR REPLACE{temp} VIEW {view} AS SELECT id, b FROM {source} WHERE {self.pred()}")

    def evolve(self) -> str:
        """A MERGE whose source brings a column the table lacks (or a struct field it lacks): WITH
        SCHEMA EVOLUTION, plain under autoMerge, or plain without it (the extra column is then
        ignored by ``*`` and refused by a named assignment)."""
        rng = self.rng
        cols = self.writable()
        name, typ, expr = rng.choice(NEW_COLUMNS)
        rows = []
        ids = [rng.randint(0, 12) for _ in range(rng.randint(1, 3))]
        widen_struct = self.table.has("st") and rng.random() < 0.4
        for i in sorted(set(ids)):
            vals = []
            for c in cols:
                if c.name == "id":
                    vals.append(f"{i} AS id")
                elif c.name == "st" and widen_struct:
                    vals.append(f"named_struct('x', {rng.randint(0, 5)}, 'y', 'w', 'z', {i}L) AS st")
                else:
                    vals.append(f"{typed_literal(rng, c.type)} AS {c.name}")
            vals.append(f"{expr.format(i=i)} AS {name}")
            rows.append("SELECT " + ", ".join(vals))
        source = "(" + " UNION ALL ".join(rows) + ")"
        evolution = " WITH SCHEMA EVOLUTION" if rng.random() < 0.5 else ""
        matched = rng.choice(["UPDATE SET *", "UPDATE SET *", f"UPDATE SET tg.b = sr.b, tg.{name} = sr.{name}",
                              "DELETE"])
        inserted = rng.choice(["INSERT *", "INSERT *", f"INSERT (id, {name}) VALUES (sr.id, sr.{name})"])
        clauses = [f"WHEN MATCHED THEN {matched}", f"WHEN NOT MATCHED THEN {inserted}"]
        if rng.random() < 0.3:
            clauses = [clauses[rng.randint(0, 1)]]
        return f"MERGE{evolution} INTO {{t}} AS tg USING {source} AS sr ON tg.id = sr.id " + " ".join(clauses)

    def next(self) -> Step:
        rng = self.rng
        kind = rng.choices(["insert", "insert_select", "update", "delete", "merge", "select", "view", "overwrite",
                            "evolve"], weights=[14, 6, 18, 10, 22, 7, 6, 5, 5])[0]
        step = {"insert": lambda: Step("insert", self.insert_values()),
                "insert_select": lambda: Step("insert_select", self.insert_select()),
                "update": lambda: Step("update", self.update()),
                "delete": lambda: Step("delete", self.delete()),
                "merge": lambda: Step("merge", self.merge()),
                "select": lambda: Step("select", self.select()),
                "view": self.view_step,
                "overwrite": lambda: Step("overwrite", self.overwrite()),
                "evolve": lambda: Step("merge", self.evolve())}[kind]()
        self.index += 1
        return step


@dataclass(frozen=True)
class Case:
    seed: int
    table: TableDef
    steps: tuple[Step, ...]      # the setup (CREATE, ALTER, the first INSERT) included


def generate_case(seed: int, length: int = 8) -> Case:
    rng = random.Random(seed)
    table = generate_table(rng)
    setup = [Step("create", table.setup()[0])] + [Step("alter", s) for s in table.setup()[1:]]
    settings = random.Random(seed * 7919 + 17)  # a stream of its own
    chosen = [sql for sql, p in ((ANSI_OFF, 0.2), (AUTO_MERGE, 0.2), (DYNAMIC_OVERWRITE, 0.4 if table.partition else 0))
              if settings.random() < p]
    setup += [Step("set", sql) for sql in chosen]
    gen = Generator(rng, table, len(setup))
    gen.settings = set(chosen)
    steps = list(setup)
    first = gen.insert_values()
    while "'abc'" in first:
        first = gen.insert_values()
    steps.append(Step("insert", first))
    gen.index += 1
    steps += [gen.next() for _ in range(length)]
    return Case(seed, table, tuple(steps))


# --------------------------------------------------------------------------- comparing


def norm(value):
    """A value both engines' rows compare by: structs as tuples, NaN as a marker, -0.0 as 0.0."""
    if isinstance(value, tuple):   # pyspark Row
        return tuple(norm(v) for v in value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return 0.0 if value == 0 else value
    if isinstance(value, Decimal):
        return value.normalize() if value == value else "NaN"
    return value


def norm_rows(rows) -> list[tuple]:
    return sorted((tuple(norm(v) for v in r) for r in rows), key=repr)


def coarse_error(exc: BaseException) -> str:
    """parse / analysis / constraint / cardinality / cast / other, for an error of either engine.

    isolde's errors by their class; Delta-Spark's by the JVM classes in the cause chain, the error
    condition and the SQLSTATE. Two refinements keep the classes semantic: Spark checks an inline
    table's types (INVALID_INLINE_TABLE) in its parser, which is an analysis error here; Delta 4.4
    on Spark 4.2 lacks some of its error texts ("Cannot find main error class 'X'"): X names it; Delta
    raises a written row outside INSERT ... REPLACE WHERE (DELTA_REPLACE_WHERE_MISMATCH, SQLSTATE
    44000) as an AnalysisException, though the rows show it, not the plan: a constraint here,
    as isolde's (the same error condition) is."""
    from isolde import errors as E

    if isinstance(exc, E.IsoldeError):
        for cls, name in ((E.ParseError, "parse"), (E.MergeCardinalityError, "cardinality"),
                          (E.ConstraintViolationError, "constraint"), (E.StoreAssignmentError, "cast"),
                          (E.AnalysisError, "analysis")):
            if isinstance(exc, cls):
                return name
        state = exc.sqlstate or ""
        text = f"{exc.error_class} {str(exc)[:400]}"
        if "MULTIPLE_SOURCE_ROW" in text:
            return "cardinality"
        if state.startswith("23"):
            return "constraint"
        if state.startswith("22") or "CAST" in exc.error_class or "OVERFLOW" in exc.error_class:
            return "cast"
        if state.startswith("42"):
            return "analysis"
        return "other"
    names, java = [type(exc).__name__], getattr(exc, "java_exception", None) or getattr(exc, "_java_exception", None)
    while java is not None:
        try:
            names.append(java.getClass().getName().rsplit(".", 1)[-1])
            java = java.getCause()
        except Exception:
            break
    state = cond = None
    for getter in ("getSqlState", "getCondition"):
        try:
            value = getattr(exc, getter)()
        except Exception:
            value = None
        if getter == "getSqlState":
            state = value
        else:
            cond = value
    text = " ".join(names) + f" {cond} " + str(exc)[:600]
    missing = re.search(r"Cannot find main error class '(\w+)'", text)
    if missing:
        cond, state = missing.group(1), ""
        text += " " + cond
    state, cond = state or "", cond or ""
    if "MULTIPLE_SOURCE_ROW" in text or state == "21506":
        return "cardinality"
    if cond == "DELTA_REPLACE_WHERE_MISMATCH":  # an AnalysisException, though found in the written rows
        return "constraint"
    if "InvariantViolation" in text or state.startswith("23") or "CONSTRAINT" in cond or "NOT_NULL" in cond:
        return "constraint"
    arithmetic = any("Arithmetic" in n or "NumberFormat" in n or "DateTimeException" in n for n in names[1:])
    if arithmetic or state.startswith("22") or "CAST" in cond or "OVERFLOW" in cond:
        return "cast"
    if ("ParseException" in names or (state == "42601" and not cond.startswith("DELTA_"))) \
            and not cond.startswith("INVALID_INLINE_TABLE"):
        return "parse"
    if missing or state.startswith("42") or any("AnalysisException" in n for n in names):
        return "analysis"
    return "other"


@dataclass
class Difference:
    kind: str          # rows | schema | answer | outcome | error_class | version | cdf | interop
    step: int          # the index of the step (-1: at the end)
    isolde: object
    delta: object

    def __str__(self) -> str:
        return f"{self.kind} at step {self.step}:\n  isolde: {self.isolde!r}\n  delta:  {self.delta!r}"


@dataclass
class Outcome:
    case: Case
    difference: Difference | None = None
    log: list[str] = field(default_factory=list)        # per step: what each engine answered
    notes: list = field(default_factory=list)           # soft differences (commit numbering): reported, not fatal
    versions: dict = field(default_factory=dict)        # engine -> version after each step
    steps_run: int = 0

    def script(self, upto: int | None = None) -> str:
        last = len(self.case.steps) if upto is None else upto + 1
        lines = [f"-- differential fuzz case, seed {self.case.seed}",
                 f"-- table: {self.case.table}",
                 "-- isolde runs it with {t} = its table's name, Delta with delta.`<folder>`; "
                 "{ver:K} is the version after step K"]
        for i, step in enumerate(self.case.steps[:last]):
            lines.append(f"/* {i} {step.kind} */ {step.sql};")
        if self.difference:
            lines.append(f"-- {self.difference}")
        return "\n".join(lines)


def log_version(path: str) -> int:
    names = [n for n in os.listdir(os.path.join(path, "_delta_log")) if re.fullmatch(r"\d{20}\.json", n)]
    return max(int(n[:20]) for n in names)


def _answer(kind: str, rows) -> object:
    if rows is None:
        return None
    return norm_rows(rows) if kind in ("select", "view_read") else [tuple(norm(v) for v in r) for r in rows]


class Engines:
    """isolde and Delta-Spark on one SparkSession, one table each."""

    def __init__(self, session, spark, workdir: str, tag: str):
        from tests.helpers.reference import ref

        self.session, self.spark = session, spark
        self.iso_name, self.iso_view = f"fz_{tag}", f"fz_iso_v_{tag}"
        self.ref_path = os.path.join(workdir, f"ref_{tag}")
        self.ref_name, self.ref_view = ref(self.ref_path), f"fz_ref_v_{tag}"
        self.iso_path: str | None = None
        self.saved = {key: spark.conf.get(key, None) for key in SETTING_KEYS}

    def iso(self, template: str, versions: list[int]):
        sql = render(template, self.iso_name, self.iso_view, versions)
        result = self.session.execute(sql)
        return list(result.rows) if result.rows is not None else []

    def ref(self, template: str, versions: list[int]):
        sql = render(template, self.ref_name, self.ref_view, versions)
        return self.spark.sql(sql).collect()

    def locate(self):
        from isolde.grammar import ast

        self.iso_path = self.session.catalog.resolve(ast.TableRef(parts=(self.iso_name,)),
                                                     self.session.current_database).path

    def schemas(self) -> tuple[list, list]:
        """Each table's columns as (name, type), nested types spelled out: what schema evolution changed."""
        iso = self.session.sql(f"SELECT * FROM {self.iso_name}").schema
        ref = self.spark.sql(f"SELECT * FROM {self.ref_name}").schema
        return ([(f.name, f.dataType.simpleString()) for f in iso.fields],
                [(f.name, f.dataType.simpleString()) for f in ref.fields])

    def rows(self, columns: list[str]):
        cols = ", ".join(f"`{c}`" for c in columns)
        iso = norm_rows(self.session.sql(f"SELECT {cols} FROM {self.iso_name}").collect())
        ref = norm_rows(self.spark.sql(f"SELECT {cols} FROM {self.ref_name}").collect())
        return iso, ref

    def cleanup(self):
        """Drop both engines' views and undo the case's settings (the session outlives the case)."""
        iso_pview, ref_pview = (v.replace("_v_", "_pv_") for v in (self.iso_view, self.ref_view))
        for run, sql in ((self.spark.sql, f"DROP VIEW IF EXISTS {self.iso_view}"),
                         (self.spark.sql, f"DROP VIEW IF EXISTS {self.ref_view}"),
                         (self.session.execute, f"DROP VIEW IF EXISTS {iso_pview}"),
                         (self.spark.sql, f"DROP VIEW IF EXISTS {ref_pview}"),
                         *((self.session.execute, f"RESET {key}") for key in SETTING_KEYS)):
            try:
                run(sql)
            except Exception:  # cleanup of what may not exist
                pass
        for key, value in self.saved.items():
            if value is None:
                self.spark.conf.unset(key)
            else:
                self.spark.conf.set(key, value)


def _attempt(run):
    try:
        return run(), None
    except Exception as exc:  # the coarse class is the answer
        return None, exc


def run_case(case: Case, session, spark, workdir: str, tag: str | None = None, check_cdf: bool = True) -> Outcome:
    """Run every step on both engines, stopping at the first difference."""
    eng = Engines(session, spark, workdir, tag or str(case.seed))
    out = Outcome(case, versions={"isolde": [], "delta": []})
    table = case.table
    try:
        for i, step in enumerate(case.steps):
            iso, iso_err = _attempt(lambda: eng.iso(step.sql, out.versions["isolde"]))
            ref, ref_err = _attempt(lambda: eng.ref(step.sql, out.versions["delta"]))
            if i == 0 and iso_err is None:
                eng.locate()
            out.steps_run = i + 1
            iso_c = coarse_error(iso_err) if iso_err else None
            ref_c = coarse_error(ref_err) if ref_err else None
            out.log.append(f"{i} {step.kind}: isolde {iso_c or _answer(step.kind, iso)} | delta {ref_c or _answer(step.kind, ref)}")
            if i == 0 and (iso_err or ref_err):
                raise AssertionError(f"CREATE TABLE failed: isolde {iso_err!r} delta {ref_err!r}")
            if (iso_err is None) != (ref_err is None):
                out.difference = Difference("outcome", i, iso_c and f"{iso_c}: {str(iso_err)[:300]}" or "ok",
                                            ref_c and f"{ref_c}: {str(ref_err)[:300]}" or "ok")
                return out
            if iso_err is not None and iso_c != ref_c:
                out.difference = Difference("error_class", i, f"{iso_c}: {str(iso_err)[:300]}",
                                            f"{ref_c}: {str(ref_err)[:300]}")
                return out
            if iso_err is None:
                a, b = _answer(step.kind, iso), _answer(step.kind, ref)
                compare = step.kind in ("select", "view_read", "update", "delete", "merge") or (
                    (step.kind.startswith("insert") or step.kind == "overwrite") and b)
                if compare and a != b:
                    out.difference = Difference("answer", i, a, b)
                    return out
            out.versions["isolde"].append(log_version(eng.iso_path))
            out.versions["delta"].append(log_version(eng.ref_path))
            vi, vd = out.versions["isolde"], out.versions["delta"]
            if len(vi) > 1 and (vi[-1] - vi[-2]) != (vd[-1] - vd[-2]):
                out.notes.append(Difference("version", i, vi[-1] - vi[-2], vd[-1] - vd[-2]))
            if step.kind in ("view", "view_read", "select", "create", "alter", "set"):
                continue
            a, b = eng.schemas()
            if a != b:
                out.difference = Difference("schema", i, a, b)
                return out
            evolved = [name for name, _ in a if not table.has(name)]
            a, b = eng.rows(table.compared + evolved)
            if a != b:
                out.difference = Difference("rows", i, a, b)
                return out
        if table.cdf and check_cdf:
            diff = compare_cdf(eng, table, out)
            if diff:
                out.difference = diff
                return out
        # the reference reads isolde's table with isolde's rows
        from tests.helpers.reference import error_class, ref as ref_name

        iso_rows, _ = eng.rows(table.compared)
        read, err = _attempt(lambda: norm_rows(
            spark.sql(f"SELECT {', '.join(table.compared)} FROM {ref_name(eng.iso_path)}").collect()))
        if err is not None:
            out.difference = Difference("interop", -1, iso_rows, f"{error_class(err)}: {str(err)[:300]}")
        elif read != iso_rows:
            out.difference = Difference("interop", -1, iso_rows, read)
        return out
    finally:
        eng.cleanup()


def compare_cdf(eng: Engines, table: TableDef, out: Outcome) -> Difference | None:
    """The change feeds from the first version, each change named by the step that made it."""
    cols = ", ".join(table.compared)

    def by_step(rows, versions):
        step_of = {}
        for i, v in enumerate(versions):
            step_of.setdefault(v, i)
        return norm_rows(tuple(r[:-2]) + (r[-2], step_of.get(r[-1], f"v{r[-1]}")) for r in rows)

    iso = eng.session.sql(f"SELECT {cols}, _change_type, _commit_version FROM table_changes('{eng.iso_name}', 0)").collect()
    ref = eng.spark.sql(f"SELECT {cols}, _change_type, _commit_version FROM table_changes_by_path('{eng.ref_path}', 0)").collect()
    a, b = by_step(iso, out.versions["isolde"]), by_step(ref, out.versions["delta"])
    if a != b:
        return Difference("cdf", -1, [r for r in a if r not in b], [r for r in b if r not in a])
    return None


# Differences already known as isolde bugs, each with its regression test in
# tests/reference/test_differential_fuzz.py: (name, test) -> does this outcome show it?


def _cardinality_without_matched_clause(out: Outcome, d: Difference) -> bool:
    sql = out.case.steps[d.step].sql if d.step >= 0 else ""
    return d.kind == "outcome" and d.isolde == "ok" and str(d.delta).startswith("cardinality") and "MERGE" in sql


KNOWN_BUGS = {
    "departure: cardinality-without-matched-clause (test_departure_duplicate_matches_without_a_matched_clause)":
        _cardinality_without_matched_clause,
}


def known_bug(out: Outcome) -> str | None:
    for name, shows in KNOWN_BUGS.items():
        if out.difference is not None and shows(out, out.difference):
            return name
    return None


def shrink(case: Case, still_differs, budget: int = 12) -> Case:
    """Drop single steps (never the CREATE, never one a later {ver:K} names) while the difference stays."""
    steps = list(case.steps)
    tries = 0
    i = len(steps) - 2
    while i >= 1 and tries < budget:
        referenced = any(f"{{ver:{i}}}" in s.sql for s in steps[i + 1:]) or steps[i].kind in ("create", "alter")
        if not referenced:
            candidate = steps[:i] + steps[i + 1:]
            renum = [Step(s.kind, VER.sub(lambda m: "{ver:%d}" % (int(m.group(1)) - (int(m.group(1)) > i)), s.sql))
                     for s in candidate]
            tries += 1
            trial = Case(case.seed, case.table, tuple(renum))
            if still_differs(trial):
                steps = renum
        i -= 1
    return Case(case.seed, case.table, tuple(steps))
