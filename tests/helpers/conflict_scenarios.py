"""The reference's own conflict suites as one table of scenarios, and the two drivers that run them.

Ported (the scenarios, not the code) from Delta Lake's OptimisticTransactionLegacyTests,
OptimizeConflictSuite, FeatureEnablementConcurrencySuite, RowTrackingConflictResolutionSuite and
IdentityColumnConflictSuite. A scenario is a table set-up, a transaction T1 that reads and will
write, the winners committed between T1's read and its commit, and the expected outcome (None:
committed, else the conflict class name) with the expected final rows.

    run_delta(spark, scenario, path)    Delta-Spark: T1 under Delta's phase-locking observer
                                        (tests/helpers/delta_interleave.py)
    run_isolde(session, scenario)       isolde: session.prepare(T1), the winners, prepared.commit()

Both return ``Result(error, rows)``. Statements name the table ``{t}``: ``delta.`/path``` on
Delta's side, ``t`` on isolde's. ``files`` are the data files the set-up writes, one batch of
rows per INSERT from a one-partition DataFrame, so "the same file" means the same on both engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tests.helpers.delta_interleave import run_interleaved
from tests.helpers.oracle import sorted_rows
from tests.helpers.reference import error_class, ref

SAME = object()  # isolde expects what Delta does

SER = {"delta.isolationLevel": "Serializable"}
NO_DV = {"delta.enableDeletionVectors": "false"}
DV = {"delta.enableDeletionVectors": "true"}


@dataclass(frozen=True)
class Scenario:
    name: str
    suite: str  # the Delta suite it comes from
    schema: str
    t1: str
    winners: tuple[str, ...]
    expect: str | None  # Delta-Spark's outcome: None = T1 committed
    rows: tuple  # the final rows, sorted tuples of ``cols``
    partitioned_by: str = ""
    props: dict = field(default_factory=dict)
    files: tuple = ()  # batches of rows, each written as its own file(s) by one INSERT
    setup: tuple[str, ...] = ()  # more statements after the files
    cols: str = "*"
    isolde_expect: object = SAME
    isolde_rows: object = SAME
    reason: str = ""  # why isolde's expectation differs (strictly more precise, documented)
    isolde_bug: str = ""  # isolde fails Delta's expectation: xfail(strict=True)
    long: bool = False  # torture only

    def isolde_outcome(self):
        return self.expect if self.isolde_expect is SAME else self.isolde_expect

    def isolde_final_rows(self):
        return self.rows if self.isolde_rows is SAME else self.isolde_rows


#: scenarios isolde cannot run, with the missing thing named (pytest skips them on isolde's side)
NOT_ON_ISOLDE = {f"identity_syncIdentity_vs_{win}": (
    "isolde's prepare() does not take ALTER TABLE ... SYNC IDENTITY (it commits at once), so it "
    "cannot be held between its read and its commit") for win in
    ("generatedId", "syncIdentity", "noMetadataUpdate", "rowTrackingEnablement", "otherMetadataUpdate")}


@dataclass
class Result:
    error: str | None
    rows: list


def _ddl(sc: Scenario, table: str, using: str) -> str:
    parts = [f"CREATE TABLE {table} ({sc.schema}){using}"]
    if sc.partitioned_by:
        parts.append(f"PARTITIONED BY ({sc.partitioned_by})")
    if sc.props:
        parts.append("TBLPROPERTIES (" + ", ".join(f"'{k}' = '{v}'" for k, v in sc.props.items()) + ")")
    return " ".join(parts)


def _data_columns(sc: Scenario) -> list[str]:
    cols = []
    for col in sc.schema.split(","):
        name = col.split()[0]
        if "IDENTITY" not in col.upper():
            cols.append(name)
    return cols


def _file_statements(spark, sc: Scenario, tag: str) -> list[str]:
    """One INSERT per batch, from a one-partition temp view (one file per partition value)."""
    cols = _data_columns(sc)
    out = []
    for i, batch in enumerate(sc.files):
        view = f"isolde_cs_{tag}_{i}"
        spark.createDataFrame(list(batch), ", ".join(f"{c} {t}" for c, t in _types(sc, cols))) \
            .coalesce(1).createOrReplaceTempView(view)
        out.append(f"INSERT INTO {{t}} ({', '.join(cols)}) SELECT * FROM {view}")
    return out


def _types(sc: Scenario, cols: list[str]):
    types = {c.split()[0]: c.split()[1] for c in sc.schema.split(",")}
    return [(c, types[c]) for c in cols]


def _delta_table(spark, sc: Scenario, path: str, tag: str) -> str:
    """The scenario's table made by Delta-Spark at ``path``; its name for Delta's statements."""
    t = ref(path)
    spark.sql(_ddl(sc, t, " USING delta")).collect()
    for stmt in _file_statements(spark, sc, tag) + list(sc.setup):
        spark.sql(stmt.format(t=t)).collect()
    return t


def run_delta(spark, sc: Scenario, path: str) -> Result:
    t = _delta_table(spark, sc, path, "d")

    def winners():
        for stmt in sc.winners:
            spark.sql(stmt.format(t=t)).collect()

    out = run_interleaved(spark, sc.t1.format(t=t), winners)
    assert out.reached_commit, f"Delta's T1 never reached its commit: {out.error}"
    rows = sorted_rows(spark.sql(f"SELECT {sc.cols} FROM {t}").collect())
    return Result(out.error, rows)


def run_isolde(session, spark, sc: Scenario, path_of=None) -> Result:
    """isolde's run. Row ids (``_metadata.row_id``, which isolde's reader does not expose) are read
    by Delta-Spark from isolde's table folder, ``path_of(session, "t")``."""
    session.execute(_ddl(sc, "t", ""))
    for stmt in _file_statements(spark, sc, "i") + list(sc.setup):
        session.execute(stmt.format(t="t"))
    prepared = session.prepare(sc.t1.format(t="t"))
    for stmt in sc.winners:
        session.execute(stmt.format(t="t"))
    error = None
    try:
        prepared.commit()
    except Exception as exc:  # the class name is the answer
        error = error_class(exc)
    if "_metadata" in sc.cols:
        rows = sorted_rows(spark.sql(f"SELECT {sc.cols} FROM {ref(path_of(session, 't'))}").collect())
    else:
        rows = sorted_rows(session.sql(f"SELECT {sc.cols} FROM t").collect())
    return Result(error, rows)


def run_delta_loses_to_isolde(spark, session, sc: Scenario, path: str) -> Result:
    """Delta's T1 (under its observer) with isolde's statements as the winners: Delta's checker
    judges the actions isolde wrote. The table is Delta's; isolde names it by its path."""
    t = _delta_table(spark, sc, path, "m")

    def winners():
        for stmt in sc.winners:
            session.execute(stmt.format(t=t))

    out = run_interleaved(spark, sc.t1.format(t=t), winners)
    assert out.reached_commit, f"Delta's T1 never reached its commit: {out.error}"
    rows = sorted_rows(spark.sql(f"SELECT {sc.cols} FROM {t}").collect())
    return Result(out.error, rows)


def run_isolde_loses_to_delta(session, spark, sc: Scenario, path_of) -> Result:
    """isolde's T1 (prepared) with Delta-Spark's statements as the winners: isolde's checker
    judges the actions Delta wrote. The table is isolde's; Delta names it by its path."""
    session.execute(_ddl(sc, "t", ""))
    for stmt in _file_statements(spark, sc, "n") + list(sc.setup):
        session.execute(stmt.format(t="t"))
    t = ref(path_of(session, "t"))
    prepared = session.prepare(sc.t1.format(t="t"))
    for stmt in sc.winners:
        spark.sql(stmt.format(t=t)).collect()
    error = None
    try:
        prepared.commit()
    except Exception as exc:  # the class name is the answer
        error = error_class(exc)
    rows = sorted_rows(spark.sql(f"SELECT {sc.cols} FROM {t}").collect()) if "_metadata" in sc.cols \
        else sorted_rows(session.sql(f"SELECT {sc.cols} FROM t").collect())
    return Result(error, rows)


# --- the table -------------------------------------------------------------------------------

PART = dict(schema="id INT, p STRING, v INT", partitioned_by="p",
            files=(((1, "A", 0), (2, "A", 0)), ((3, "B", 0),)))
NESTED = dict(schema="id INT, p STRING, q STRING, v INT", partitioned_by="p, q",
              files=(((1, "A", "1", 0), (2, "A", "2", 0)), ((3, "B", "1", 0),)))
FLAT = dict(schema="id INT, v INT", files=(((1, 0), (2, 0)), ((3, 0),)))
WIDE = dict(schema="idCol BIGINT", files=(tuple((i,) for i in range(0, 5)), tuple((i,) for i in range(5, 10))))
IDENT = dict(schema="id BIGINT GENERATED BY DEFAULT AS IDENTITY (START WITH 1 INCREMENT BY 1), value INT",
             props={"delta.feature.rowTracking": "supported", "delta.enableRowTracking": "false"})
RT = dict(schema="id INT, v INT", files=(((1, 0), (2, 0)), ((3, 0),)), cols="id, v, _metadata.row_id")

L, O, F, R, I = ("OptimisticTransactionLegacyTests", "OptimizeConflictSuite", "FeatureEnablementConcurrencySuite",
                 "RowTrackingConflictResolutionSuite", "IdentityColumnConflictSuite")
INS_A = "INSERT INTO {t} VALUES (9, 'A', 0)"
INS_B = "INSERT INTO {t} VALUES (9, 'B', 0)"
UPD_A = "UPDATE {t} SET v = v + 1 WHERE p = 'A'"


def _sc(name, suite, base, t1, winners, expect, rows, props=(), **kw):
    spec = dict(base)
    spec["props"] = {**spec.get("props", {}), **dict(props)}
    spec.update(kw)
    return Scenario(name=name, suite=suite, t1=t1, winners=tuple(winners), expect=expect, rows=tuple(rows), **spec)


SCENARIOS: list[Scenario] = [
    # OptimisticTransactionLegacyTests
    _sc("append_vs_metadata_change", L, PART, "INSERT INTO {t} VALUES (8, 'A', 0)",
        ["ALTER TABLE {t} ADD COLUMNS (w INT)"], "MetadataChangedException", ((1, 'A', 0, None), (2, 'A', 0, None), (3, 'B', 0, None)), {**SER, **NO_DV}),
    _sc("read_append_vs_append", L, PART, "INSERT INTO {t} SELECT id + 10, p, v FROM {t} WHERE p = 'A'",
        [INS_A], "ConcurrentAppendException", ((1, 'A', 0), (2, 'A', 0), (3, 'B', 0), (9, 'A', 0)), {**SER, **NO_DV}),
    _sc("blind_append_vs_delete", L, PART, "INSERT INTO {t} VALUES (8, 'A', 0)",
        ["DELETE FROM {t} WHERE p = 'A'"], None, ((3, 'B', 0), (8, 'A', 0)), {**SER, **NO_DV}),
    _sc("delete_vs_optimize_other_partition", L, PART, "DELETE FROM {t} WHERE p = 'A'",
        ["INSERT INTO {t} VALUES (4, 'B', 0)", "OPTIMIZE {t} WHERE p = 'B'"], None, ((3, 'B', 0), (4, 'B', 0)),
        {**SER, **NO_DV}),
    _sc("disjoint_partitions", L, PART, UPD_A, [INS_B], None, ((1, 'A', 1), (2, 'A', 1), (3, 'B', 0), (9, 'B', 0)), {**SER, **NO_DV}),
    _sc("read_partition_appended_serializable", L, PART, UPD_A, [INS_A], "ConcurrentAppendException", ((1, 'A', 0), (2, 'A', 0), (3, 'B', 0), (9, 'A', 0)),
        {**SER, **NO_DV}),
    _sc("read_partition_appended_default_level", L, PART, UPD_A, [INS_A], "ConcurrentAppendException", ((1, 'A', 0), (2, 'A', 0), (3, 'B', 0), (9, 'A', 0)), NO_DV),
    _sc("full_scan_vs_append_other_partition", L, PART, "UPDATE {t} SET v = v + 1 WHERE v = 0", [INS_B],
        "ConcurrentAppendException", ((1, 'A', 0), (2, 'A', 0), (3, 'B', 0), (9, 'B', 0)), {**SER, **NO_DV}),
    _sc("nested_disjoint_lvl2", L, NESTED, "UPDATE {t} SET v = 1 WHERE p = 'A' AND q = '1'",
        ["INSERT INTO {t} VALUES (9, 'A', '2', 0)"], None, ((1, 'A', '1', 1), (2, 'A', '2', 0), (3, 'B', '1', 0), (9, 'A', '2', 0)), {**SER, **NO_DV}),
    _sc("nested_lvl1_read_lvl2_deleted", L, NESTED, "UPDATE {t} SET v = 1 WHERE p = 'A'",
        ["DELETE FROM {t} WHERE p = 'A' AND q = '2'"], "ConcurrentDeleteReadException", ((1, 'A', '1', 0), (3, 'B', '1', 0)), {**SER, **NO_DV}),
    _sc("nested_lvl1_disjoint_write_lvl2", L, NESTED, "UPDATE {t} SET v = 1 WHERE p = 'A'",
        ["INSERT INTO {t} VALUES (9, 'B', '2', 0)"], None, ((1, 'A', '1', 1), (2, 'A', '2', 1), (3, 'B', '1', 0), (9, 'B', '2', 0)), {**SER, **NO_DV}),
    _sc("same_file_removes", L, FLAT, "DELETE FROM {t} WHERE id = 1", ["DELETE FROM {t} WHERE id = 2"], 'ConcurrentAppendException', ((1, 0), (3, 0)), {**SER, **NO_DV}),
    _sc("same_file_removes_dv", L, FLAT, "DELETE FROM {t} WHERE id = 1", ["DELETE FROM {t} WHERE id = 2"], 'ConcurrentAppendException', ((1, 0), (3, 0)), {**SER, **DV}),
    _sc("same_row_updates_dv", L, FLAT, "UPDATE {t} SET v = 1 WHERE id = 1", ["UPDATE {t} SET v = 2 WHERE id = 1"], 'ConcurrentAppendException', ((1, 2), (2, 0), (3, 0)), DV),
    _sc("full_read_vs_delete_any_partition", L, PART, "UPDATE {t} SET v = v + 1 WHERE v = 0",
        ["DELETE FROM {t} WHERE p = 'B'"], "ConcurrentDeleteReadException", ((1, 'A', 0), (2, 'A', 0)), {**SER, **NO_DV}),
    _sc("replace_where_vs_append_same_partition", L, PART,
        "INSERT INTO {t} REPLACE WHERE p = 'A' VALUES (5, 'A', 5)", [INS_A], "ConcurrentAppendException", ((1, 'A', 0), (2, 'A', 0), (3, 'B', 0), (9, 'A', 0)),
        {**SER, **NO_DV}),
    _sc("replace_where_vs_append_other_partition", L, PART,
        "INSERT INTO {t} REPLACE WHERE p = 'A' VALUES (5, 'A', 5)", [INS_B], None, ((3, 'B', 0), (5, 'A', 5), (9, 'B', 0)), {**SER, **NO_DV}),
    _sc("two_replace_where_same_partition", L, PART,
        "INSERT INTO {t} REPLACE WHERE p = 'A' VALUES (5, 'A', 5)",
        ["INSERT INTO {t} REPLACE WHERE p = 'A' VALUES (6, 'A', 6)"], 'ConcurrentAppendException', ((3, 'B', 0), (6, 'A', 6)),
        {**SER, **NO_DV}),
    _sc("optimize_vs_concurrent_append", L, FLAT, "OPTIMIZE {t}", ["INSERT INTO {t} VALUES (9, 0)"], None, ((1, 0), (2, 0), (3, 0), (9, 0)),
        NO_DV),
    _sc("optimize_vs_delete_same_file", L, FLAT, "OPTIMIZE {t}", ["DELETE FROM {t} WHERE id = 1"],
        "ConcurrentDeleteReadException", ((2, 0), (3, 0)), NO_DV),
    # a protocol that only gained a feature fails no writer (Delta 4.4: conflictChecker.
    # enforceConcurrentFeatureEnablement is off); a metadata-changing loser still fails
    _sc("update_vs_protocol_change", L, FLAT, "UPDATE {t} SET v = 1 WHERE id = 3",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.feature.checkConstraints' = 'supported')"],
        None, ((1, 0), (2, 0), (3, 1)), NO_DV),
    _sc("alter_vs_blind_append", L, FLAT, "ALTER TABLE {t} SET TBLPROPERTIES ('team' = 'x')",
        ["INSERT INTO {t} VALUES (9, 0)"], None, ((1, 0), (2, 0), (3, 0), (9, 0)), NO_DV),
    _sc("add_column_vs_set_property", L, FLAT, "ALTER TABLE {t} ADD COLUMNS (w INT)",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('team' = 'x')"], "MetadataChangedException", ((1, 0), (2, 0), (3, 0)), NO_DV),
    # OptimizeConflictSuite
    _sc("optimize_vs_dv_delete", O, FLAT, "OPTIMIZE {t}", ["DELETE FROM {t} WHERE id % 2 = 0"],
        "ConcurrentDeleteReadException", ((1, 0), (3, 0)), DV),
    _sc("dv_delete_vs_optimize", O, FLAT, "DELETE FROM {t} WHERE id % 2 = 0", ["OPTIMIZE {t}"], 'ConcurrentAppendException', ((1, 0), (2, 0), (3, 0)), DV),
    _sc("optimize_vs_optimize", O, FLAT, "OPTIMIZE {t}", ["OPTIMIZE {t}"], "ConcurrentDeleteReadException", ((1, 0), (2, 0), (3, 0)),
        DV),
    # FeatureEnablementConcurrencySuite: a DML loser against a feature enablement winner
    _sc("delete_vs_enable_dvs", F, WIDE, "DELETE FROM {t} WHERE idCol = 9",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"], None, ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,)), NO_DV),
    _sc("update_vs_enable_column_mapping", F, WIDE, "UPDATE {t} SET idCol = -1 WHERE idCol = 9",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"], None, ((-1,), (0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,)), NO_DV),
    _sc("delete_vs_enable_row_tracking", F, WIDE, "DELETE FROM {t} WHERE idCol = 9",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')"], None, ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,)), NO_DV),
    _sc("delete_vs_enable_v2_checkpoints", F, WIDE, "DELETE FROM {t} WHERE idCol = 9",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.checkpointPolicy' = 'v2')"], None, ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,)), NO_DV),
    _sc("delete_vs_enable_ict", F, WIDE, "DELETE FROM {t} WHERE idCol = 9",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')"], None, ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,)), NO_DV),
    _sc("insert_vs_enable_ict", F, WIDE, "INSERT INTO {t} VALUES (100)",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')"], None, ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,), (9,), (100,)), NO_DV),
    _sc("delete_vs_ict_and_other_property", F, WIDE, "DELETE FROM {t} WHERE idCol = 9",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true', "
         "'delta.checkpointInterval' = '20')"], "MetadataChangedException", ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,), (9,)), NO_DV),
    _sc("metadata_loser_vs_enable_ict", F, WIDE, "ALTER TABLE {t} SET TBLPROPERTIES ('delta.checkpointInterval' = '20')",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')"],
        "MetadataChangedException", ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,), (9,)), NO_DV),
    _sc("protocol_loser_vs_enable_ict", F, WIDE,
        "ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')"],
        "ProtocolChangedException", ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,), (9,)), NO_DV),
    _sc("delete_vs_disable_dvs", F, WIDE, "DELETE FROM {t} WHERE idCol = 9",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')"],
        "MetadataChangedException", ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,), (9,)), DV),
    # RowTrackingConflictResolutionSuite
    _sc("rt_insert_vs_insert", R, RT, "INSERT INTO {t} VALUES (8, 0)", ["INSERT INTO {t} VALUES (9, 0), (10, 0)"],
        None, ((1, 0, 0), (2, 0, 1), (3, 0, 2), (8, 0, 5), (9, 0, 3), (10, 0, 4)), {"delta.enableRowTracking": "true", **NO_DV}),
    _sc("rt_insert_vs_enable_row_tracking", R, RT, "INSERT INTO {t} VALUES (8, 0)",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')"], None, ((1, 0, 0), (2, 0, 1), (3, 0, 2), (8, 0, 3)),
        {"delta.feature.rowTracking": "supported", **NO_DV}),
    _sc("rt_metadata_loser_vs_enable_row_tracking", R, RT, "ALTER TABLE {t} SET TBLPROPERTIES ('team' = 'x')",
        ["ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')"], "MetadataChangedException",
        ((1, 0, 0), (2, 0, 1), (3, 0, 2)), {"delta.feature.rowTracking": "supported", **NO_DV}),
    _sc("rt_optimize_vs_insert", R, RT, "OPTIMIZE {t}", ["INSERT INTO {t} VALUES (9, 0)"], None, ((1, 0, 0), (2, 0, 1), (3, 0, 2), (9, 0, 3)),
        {"delta.enableRowTracking": "true", **NO_DV}),
    _sc("rt_optimize_vs_dv_delete", R, RT, "OPTIMIZE {t}", ["DELETE FROM {t} WHERE id = 1"],
        "ConcurrentDeleteReadException", ((2, 0, 1), (3, 0, 2)), {"delta.enableRowTracking": "true", **DV}),
    _sc("rt_update_vs_optimize", R, RT, "UPDATE {t} SET v = 5 WHERE id = 1", ["OPTIMIZE {t}"], 'ConcurrentAppendException', ((1, 0, 0), (2, 0, 1), (3, 0, 2)), {"delta.enableRowTracking": "true", **DV}),
    _sc("rt_update_vs_optimize_no_dv", R, RT, "UPDATE {t} SET v = 5 WHERE id = 1", ["OPTIMIZE {t}"], 'ConcurrentAppendException', ((1, 0, 0), (2, 0, 1), (3, 0, 2)), {"delta.enableRowTracking": "true", **NO_DV}),
]

# IdentityColumnConflictSuite: the current x winning matrix, expectations by Delta's rule table
# (IdentityColumnConflictSuiteBase.expectedExceptionClass): a winner that changes other metadata
# fails everyone; an identity-only or row-tracking-enablement-only winner fails only a T1 that
# changes metadata itself; a T1 that only syncs identity fails on a concurrent append.
IDENTITY_TXNS = {
    "generatedId": "INSERT INTO {t} (value) VALUES (1)",
    "syncIdentity": "ALTER TABLE {t} ALTER COLUMN id SYNC IDENTITY",
    "noMetadataUpdate": "INSERT INTO {t} VALUES (1, 1)",
    "rowTrackingEnablement": "ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')",
    "otherMetadataUpdate": "ALTER TABLE {t} ADD COLUMN value2 STRING",
}
_INSERTS = {"generatedId", "noMetadataUpdate"}
_IDENTITY_CORE = {("noMetadataUpdate", "generatedId"), ("generatedId", "otherMetadataUpdate")}


def _identity_expect(cur: str, win: str) -> str | None:
    cur_changes_metadata = cur != "noMetadataUpdate"
    if win == "otherMetadataUpdate" or (win in ("generatedId", "syncIdentity", "rowTrackingEnablement")
                                        and cur_changes_metadata):
        return "MetadataChangedException"
    if cur == "syncIdentity" and win in _INSERTS:
        return "ConcurrentAppendException"
    return None


for _cur, _cur_sql in IDENTITY_TXNS.items():
    for _win, _win_sql in IDENTITY_TXNS.items():
        _exp = _identity_expect(_cur, _win)
        _rows = [(1, 1)] * ((_win in _INSERTS) + (_cur in _INSERTS and _exp is None))
        SCENARIOS.append(_sc(f"identity_{_cur}_vs_{_win}", I, IDENT, _cur_sql, [_win_sql], _exp, _rows,
                             cols="id, value", long=(_cur, _win) not in _IDENTITY_CORE))

# --- where isolde answers differently --------------------------------------------------------

_ROW_LEVEL = ("row level (DESIGN.md, row-level concurrency): isolde sees the two statements touched "
              "different rows of the one file and commits with the union of the deletion vectors; "
              "Delta's file-level check counts the re-added file against T1's read")
_CARRY = ("DV carry-over (DESIGN.md, OPTIMIZE and REORG): isolde maps the concurrent deletion vector onto "
          "the compacted file and commits; Delta fails the compaction")
DIFFERENCES = {
    "same_file_removes_dv": dict(isolde_expect=None, isolde_rows=((3, 0),), reason=_ROW_LEVEL),
    "optimize_vs_dv_delete": dict(isolde_expect=None, reason=_CARRY),
    "dv_delete_vs_optimize": dict(isolde_expect=None, isolde_rows=((1, 0), (3, 0)), reason=_CARRY + " (as winner)"),
    "same_row_updates_dv": dict(isolde_expect="ConcurrentDeleteDeleteException", reason=(
        "row level: isolde knows both updated the same row and names it ConcurrentDeleteDeleteException; "
        "Delta's file-level check meets the re-added file first (ConcurrentAppendException)")),
    "optimize_vs_optimize": dict(isolde_expect="ConcurrentDeleteDeleteException", reason=(
        "DESIGN.md rule 5 counts only dataChange=true removes, so two compactions of the same files meet "
        "at rule 6 (ConcurrentDeleteDeleteException); Delta counts the compaction's removes as reads "
        "deleted (ConcurrentDeleteReadException)")),
    "rt_optimize_vs_dv_delete": dict(isolde_expect=None, reason=_CARRY + "; row ids stay those of the rows"),
    "rt_update_vs_optimize": dict(isolde_expect=None, isolde_rows=((1, 5, 0), (2, 0, 1), (3, 0, 2)),
                                  reason=_CARRY + " (as winner); the updated row keeps its row id"),
    "rt_update_vs_optimize_no_dv": dict(isolde_expect="ConcurrentDeleteDeleteException", reason=(
        "both fail: the OPTIMIZE removed the file the UPDATE rewrote; isolde counts a compaction's "
        "dataChange=false adds as no append (DESIGN.md rule 4) and meets the shared remove at rule 6, "
        "Delta meets the compaction's adds first (ConcurrentAppendException)")),
    **{f"identity_{cur}_vs_syncIdentity": dict(isolde_expect=None, isolde_rows=rows, reason=(
        "a SYNC IDENTITY that does not move the high-water mark (no rows) commits nothing on isolde, so "
        "there is no winner; Delta writes a metadata commit anyway, which fails T1"))
       for cur, rows in (("generatedId", ((1, 1),)), ("rowTrackingEnablement", ()),
                         ("otherMetadataUpdate", ()))},
    "read_partition_appended_default_level": dict(
        isolde_expect=None, isolde_rows=((1, "A", 1), (2, "A", 1), (3, "B", 0), (9, "A", 0)), reason=(
            "default isolation level: open-source Delta accepts only delta.isolationLevel = Serializable and "
            "defaults to it; isolde defaults to WriteSerializable (DESIGN.md §4), under which a blind append "
            "into the partition an UPDATE read does not conflict")),
}
# scenarios where isolde is stricter than Delta (xfail(strict=True) with the reason); none today
BUGS: dict[str, str] = {}
# make test runs these (about 2 minutes on a loaded 2-core machine); the rest run under torture
CORE = {"disjoint_partitions", "read_partition_appended_default_level", "same_file_removes_dv",
        "optimize_vs_dv_delete", "delete_vs_enable_dvs", "identity_noMetadataUpdate_vs_generatedId"}

SCENARIOS = [replace(sc, **DIFFERENCES.get(sc.name, {}), isolde_bug=BUGS.get(sc.name, ""),
                     long=sc.name not in CORE) for sc in SCENARIOS]


# --- the engines mixed (tests/reference/test_mixed_conflicts.py) ------------------------------

@dataclass(frozen=True)
class MixedExpectations:
    """Where a mixed run's answer is not the loser engine's answer against its own winners
    (each with its reason), which scenarios run in make test, and which cannot run."""

    delta_t1: dict  # name -> (outcome, rows) of Delta's T1 against isolde's winners
    isolde_t1: dict  # name -> (outcome, rows) of isolde's T1 against Delta's winners
    reasons: dict  # name -> why
    core: frozenset
    isolde_winner_not_run: dict  # name -> the missing thing


_NO_OP_SYNC = ("isolde's SYNC IDENTITY that moves no high-water mark commits nothing (see DIFFERENCES): "
               "there is no winner, so Delta's T1 commits")
_DELTA_SYNC = ("Delta's SYNC IDENTITY writes its metadata commit even when the mark does not move; isolde, "
               "as the loser, answers what Delta answers against it (a T1 that changes metadata itself fails)")
_FOREIGN_COMPACTION = ("isolde carries a concurrent deletion vector over only through its own compaction, "
                       "whose layout tag maps rows to their new places; a Delta OPTIMIZE that rewrote the file "
                       "T1 changes is a conflict (both removed it), as Delta itself answers (with another class)")
_BY_NAME = {sc.name: sc for sc in SCENARIOS}
MIXED = MixedExpectations(
    delta_t1={
        **{name: (None, rows) for name, rows in (
            ("identity_generatedId_vs_syncIdentity", ((1, 1),)), ("identity_syncIdentity_vs_syncIdentity", ()),
            ("identity_rowTrackingEnablement_vs_syncIdentity", ()),
            ("identity_otherMetadataUpdate_vs_syncIdentity", ()))},
    },
    isolde_t1={
        **{name: (_BY_NAME[name].expect, _BY_NAME[name].rows) for name in (
            "identity_generatedId_vs_syncIdentity", "identity_rowTrackingEnablement_vs_syncIdentity",
            "identity_otherMetadataUpdate_vs_syncIdentity")},
        "dv_delete_vs_optimize": ("ConcurrentDeleteDeleteException", ((1, 0), (2, 0), (3, 0))),
        "rt_update_vs_optimize": ("ConcurrentDeleteDeleteException", ((1, 0, 0), (2, 0, 1), (3, 0, 2))),
    },
    reasons={
        **{f"delta_t1/identity_{cur}_vs_syncIdentity": _NO_OP_SYNC
           for cur in ("generatedId", "syncIdentity", "rowTrackingEnablement", "otherMetadataUpdate")},
        **{f"isolde_t1/identity_{cur}_vs_syncIdentity": _DELTA_SYNC
           for cur in ("generatedId", "rowTrackingEnablement", "otherMetadataUpdate")},
        "isolde_t1/dv_delete_vs_optimize": _FOREIGN_COMPACTION,
        "isolde_t1/rt_update_vs_optimize": _FOREIGN_COMPACTION,
    },
    core=frozenset(CORE | {"optimize_vs_concurrent_append", "optimize_vs_delete_same_file", "optimize_vs_optimize",
                           "rt_optimize_vs_dv_delete", "dv_delete_vs_optimize", "delete_vs_enable_row_tracking",
                           "identity_noMetadataUpdate_vs_generatedId"}),
    isolde_winner_not_run={})
