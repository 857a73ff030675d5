"""Conflict scopes derived by the planner (DESIGN.md section 5): table-driven, no Spark."""

from __future__ import annotations

import datetime

import pytest

from tests.helpers.planner_build import (  # noqa: E402
    by_source_delete, by_source_update, delete, insert, matched_delete, matched_update, merge,
    not_matched_insert, update,
)

from isolde.planner.scope import (  # noqa: E402
    ConflictScope, JoinKey, KeyRange, conflict_scope, key_predicate, merge_join_keys,
)

COLS = {"id": "bigint", "date": "date", "country": "string", "v": "int", "name": "string",
        "info": "struct<city:string>", "tags": "array<string>", "attrs": "map<string,string>"}
PART = ["date", "country"]
D1 = datetime.date(2024, 1, 1)
D2 = datetime.date(2024, 1, 2)

WHOLE = (None, None)

# (statement, kwargs, read_predicate, partition_predicate, row_level_eligible)
CASES = [
    # ---- UPDATE / DELETE
    ("upd-partition+data", update(where="date = '2024-01-01' AND id > 5"), {},
     "date = '2024-01-01' AND id > 5", "date = '2024-01-01'", False),
    ("upd-alias-stripped", update(where="x.date = '2024-01-01' AND x.v = 1", alias="x"), {},
     "date = '2024-01-01' AND v = 1", "date = '2024-01-01'", False),
    ("upd-table-qualified", update(table="db.t", where="db.t.id = 1 AND t.v = 2"), {},
     "id = 1 AND v = 2", None, False),
    ("upd-no-where", update(), {}, *WHOLE, False),
    ("del-or-partition", delete(where="date = '2024-01-01' OR date = '2024-01-02'"), {},
     "date = '2024-01-01' OR date = '2024-01-02'", "date = '2024-01-01' OR date = '2024-01-02'", False),
    ("del-mixed-or-not-partition", delete(where="date = '2024-01-01' OR id = 3"), {},
     "date = '2024-01-01' OR id = 3", None, False),
    ("del-case-insensitive", delete(where="DATE = '2024-01-01' AND ID = 1"), {},
     "date = '2024-01-01' AND id = 1", "date = '2024-01-01'", False),
    ("del-functions-ok", delete(where="upper(name) = 'A' AND coalesce(v, 0) > 1 AND name LIKE 'a%'"), {},
     "UPPER(name) = 'A' AND COALESCE(v, 0) > 1 AND name LIKE 'a%'", None, False),
    ("del-rand-dropped", delete(where="date = '2024-01-01' AND rand() < 0.5"), {},
     "date = '2024-01-01'", "date = '2024-01-01'", False),
    ("del-rand-only", delete(where="rand() < 0.5"), {}, *WHOLE, False),
    ("del-uuid", delete(where="uuid() = name"), {}, *WHOLE, False),
    ("del-now", delete(where="date < current_date()"), {}, *WHOLE, False),
    ("del-udf", delete(where="my_udf(id) = 1 AND v = 2"), {}, "v = 2", None, False),
    ("del-struct", delete(where="info.city = 'Paris'"), {}, *WHOLE, False),
    ("del-struct-whole-column", delete(where="info IS NULL"), {}, *WHOLE, False),
    ("del-array", delete(where="tags[0] = 'a' AND id = 1"), {}, "id = 1", None, False),
    ("del-map", delete(where="attrs['k'] = 'a'"), {}, *WHOLE, False),
    ("del-subquery-other", delete(where="id IN (SELECT id FROM other) AND date = '2024-01-01'"), {},
     "date = '2024-01-01'", "date = '2024-01-01'", False),
    ("del-subquery-self", delete(where="id IN (SELECT id FROM t WHERE v > 1) AND date = '2024-01-01'"), {},
     *WHOLE, False),
    ("del-exists-self", delete(where="EXISTS (SELECT 1 FROM t AS u WHERE u.id = 1)"), {}, *WHOLE, False),
    ("upd-assignment-reads-self", update(where="id = 1", v="(SELECT max(v) FROM t)"), {}, *WHOLE, False),
    ("upd-unknown-column", update(where="nope = 1"), {}, *WHOLE, False),
    # ---- row-level eligibility flags
    ("rl-eligible", delete(where="id = 1"), {"partition_columns": [], "deletion_vectors": True},
     "id = 1", None, True),
    ("rl-no-dv", delete(where="id = 1"), {"partition_columns": [], "deletion_vectors": False},
     "id = 1", None, False),
    ("rl-partitioned", delete(where="id = 1"), {"deletion_vectors": True}, "id = 1", None, False),
    ("rl-clustered", delete(where="id = 1"), {"partition_columns": [], "deletion_vectors": True, "clustered": True},
     "id = 1", None, True),
    ("rl-rand", delete(where="id = 1 AND rand() < 0.1"), {"partition_columns": [], "deletion_vectors": True},
     "id = 1", None, False),
    ("rl-subquery", delete(where="id IN (SELECT id FROM o)"), {"partition_columns": [], "deletion_vectors": True},
     *WHOLE, False),
    ("rl-struct", delete(where="info.city = 'x'"), {"partition_columns": [], "deletion_vectors": True},
     *WHOLE, False),
    ("rl-whole-table-ok", delete(), {"partition_columns": [], "deletion_vectors": True}, *WHOLE, True),
    # ---- MERGE
    ("merge-reference-explicit",
     merge("s.user_id = t.id AND s.date = t.date AND s.country = t.country "
           "AND t.date = '2024-01-01' AND t.country = 'US'"), {},
     "date = '2024-01-01' AND country = 'US'", "date = '2024-01-01' AND country = 'US'", False),
    ("merge-reference-implicit-no-values", merge("s.id = t.id AND s.date = t.date AND s.country = t.country"), {},
     *WHOLE, False),
    ("merge-dynamic-date",
     merge("s.id = t.id AND s.date = t.date"), {"source_key_values": {"date": [D2, D2], "id": [3, 1, 2, None]}},
     "id IN (1, 2, 3) AND date = CAST('2024-01-02' AS DATE)", "date = CAST('2024-01-02' AS DATE)", False),
    ("merge-dynamic-two-dates",
     merge("t.date = s.date AND t.id = s.id"), {"source_key_values": {"date": [D1, D2], "id": [7]}},
     "date IN (CAST('2024-01-01' AS DATE), CAST('2024-01-02' AS DATE)) AND id = 7",
     "date IN (CAST('2024-01-01' AS DATE), CAST('2024-01-02' AS DATE))", False),
    ("merge-large-set-range", merge("s.id = t.id"), {"source_key_values": {"id": list(range(5000, 3000, -1))}},
     "id BETWEEN 3001 AND 5000", None, False),
    ("merge-key-range", merge("s.id = t.id"), {"source_key_values": {"id": KeyRange(1, 10**9, 10**7)}},
     "id BETWEEN 1 AND 1000000000", None, False),
    ("merge-empty-source", merge("s.id = t.id"), {"source_key_values": {"id": []}}, "FALSE", None, False),
    ("merge-null-safe", merge("s.id <=> t.id"), {"source_key_values": {"id": [1, None]}},
     "(id = 1 OR id IS NULL)", None, False),
    ("merge-null-keys-only", merge("s.id = t.id"), {"source_key_values": {"id": [None]}}, "FALSE", None, False),
    ("merge-string-escape", merge("s.name = t.name"), {"source_key_values": {"name": ["it's", "a"]}},
     "name IN ('a', 'it\\'s')", None, False),
    ("merge-timestamp-not-exact", merge("s.id = t.id"),
     {"source_key_values": {"id": [datetime.datetime(2024, 1, 1, 12)]}}, *WHOLE, False),
    ("merge-source-expr-key", merge("t.id = s.k + 1"), {"source_key_values": {"id": [5]}}, "id = 5", None, False),
    ("merge-unqualified-target-col", merge("s.id = t.id AND date = '2024-01-01'"),
     {"source_columns": ["id", "v"]}, "date = '2024-01-01'", "date = '2024-01-01'", False),
    ("merge-unqualified-ambiguous", merge("s.id = t.id AND v = 1"), {"source_columns": ["id", "v"]},
     *WHOLE, False),
    ("merge-source-only-conjunct", merge("s.id = t.id AND s.v > 0"), {"source_key_values": {"id": [1]}},
     "id = 1", None, False),
    ("merge-mixed-inequality", merge("s.id = t.id AND s.v > t.v"), {"source_key_values": {"id": [1]}},
     "id = 1", None, False),
    ("merge-rand-in-on", merge("s.id = t.id AND rand() > 0.5"), {"source_key_values": {"id": [1]}},
     "id = 1", None, False),
    ("merge-insert-only", merge("s.id = t.id", not_matched_insert("s.v > 1")), {"source_key_values": {"id": [1]}},
     "id = 1", None, False),
    ("merge-clauses-all-restricted",
     merge("s.id = t.id", matched_update("t.v > 1"), matched_delete("t.date = '2024-01-01' AND s.v = 0")),
     {"source_key_values": {"id": [1, 2]}}, "id IN (1, 2) AND (v > 1 OR date = '2024-01-01')", None, False),
    ("merge-clauses-one-unrestricted",
     merge("s.id = t.id", matched_update("t.v > 1"), matched_delete()), {"source_key_values": {"id": [1, 2]}},
     "id IN (1, 2)", None, False),
    ("merge-clauses-with-insert-not-narrowed",
     merge("s.id = t.id", matched_update("t.v > 1"), not_matched_insert()), {"source_key_values": {"id": [1]}},
     "id = 1", None, False),
    ("merge-clause-source-only-not-narrowed",
     merge("s.id = t.id", matched_update("s.v > 1")), {"source_key_values": {"id": [1]}}, "id = 1", None, False),
    ("merge-clause-narrow-partition",
     merge("s.id = t.id", matched_update("t.date = '2024-01-01'")), {},
     "date = '2024-01-01'", "date = '2024-01-01'", False),
    ("merge-by-source-whole", merge("s.id = t.id", matched_update(), by_source_delete()),
     {"source_key_values": {"id": [1]}}, *WHOLE, False),
    ("merge-by-source-conditioned",
     merge("s.id = t.id AND t.date = '2024-01-01'", matched_update(), by_source_delete("t.date = '2024-01-01'")),
     {"source_key_values": {"id": [1]}}, "date = '2024-01-01'", "date = '2024-01-01'", False),
    ("merge-by-source-other-partition",
     merge("s.id = t.id AND t.date = '2024-01-01'", matched_update(), by_source_update("t.date = '2024-01-02'")),
     {"source_key_values": {"id": [1]}}, "(date = '2024-01-01' AND id = 1) OR date = '2024-01-02'", None, False),
    ("merge-self-source", merge("s.id = t.id", source="t"), {"source_key_values": {"id": [1]}}, *WHOLE, False),
    ("merge-self-source-query", merge("s.id = t.id", source="SELECT id, v FROM t WHERE v > 1"),
     {"source_key_values": {"id": [1]}}, *WHOLE, False),
    ("merge-rl-eligible", merge("s.id = t.id"),
     {"source_key_values": {"id": [1]}, "partition_columns": [], "deletion_vectors": True}, "id = 1", None, True),
    # ---- INSERT
    ("ins-overwrite-whole", insert(overwrite=True), {}, *WHOLE, False),
    ("ins-overwrite-static", insert(overwrite=True, partition=[("date", "'2024-01-01'"), ("country", None)]), {},
     "date = '2024-01-01'", "date = '2024-01-01'", False),
    ("ins-replace-where", insert(replace_where="date >= '2024-01-01' AND v > 0"), {},
     "date >= '2024-01-01' AND v > 0", "date >= '2024-01-01'", False),
    ("ins-self-select-where", insert(source="SELECT * FROM t AS x WHERE x.date = '2024-01-01'"), {},
     "date = '2024-01-01'", "date = '2024-01-01'", False),
    ("ins-self-select-all", insert(source="SELECT * FROM t"), {}, *WHOLE, False),
    ("ins-self-join", insert(source="SELECT a.* FROM t AS a JOIN o ON a.id = o.id WHERE a.v = 1"), {},
     *WHOLE, False),
    ("ins-self-not-exists",
     insert(source="SELECT * FROM src WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.id = src.id)"), {}, *WHOLE, False),
]


@pytest.mark.parametrize("name,stmt,kwargs,read,partition,eligible", CASES, ids=[c[0] for c in CASES])
def test_scope(name, stmt, kwargs, read, partition, eligible):
    kwargs = dict(kwargs)
    kwargs.setdefault("partition_columns", PART)
    scope = conflict_scope(stmt, COLS, **kwargs)
    assert scope.read_predicate == read
    assert scope.partition_predicate == partition
    assert scope.reads_whole_table == (read is None)
    assert scope.blind_append is False
    assert scope.row_level_eligible is eligible


def test_blind_insert():
    scope = conflict_scope(insert(), COLS, PART)
    assert scope == ConflictScope(None, None, False, True, False)
    assert scope.describe() == "Conflict scope:\n  reads: nothing (blind append)\n  conflicts: none (a blind append conflicts with nothing)"


def test_blind_insert_other_db_same_name_is_conservative():
    # `other.t` might be the target under another database name: err towards conflict
    scope = conflict_scope(insert(source="SELECT * FROM other.t"), COLS, PART)
    assert not scope.blind_append and scope.reads_whole_table


def test_merge_join_keys():
    stmt = merge("s.id = t.id AND t.date = s.date AND s.v > t.v AND t.country <=> s.c AND t.v = 1")
    keys = merge_join_keys(stmt, COLS)
    assert keys == [JoinKey("id", "s.id"), JoinKey("date", "s.date"), JoinKey("country", "s.c", True)]
    assert merge_join_keys(merge("t.id = s.k + 1"), COLS) == [JoinKey("id", "s.k + 1")]
    assert merge_join_keys(merge("t.id = t.v"), COLS) == []


def test_merge_join_keys_name_a_plain_source_column():
    """``source_column`` says which keys are a source column as it is (their comparison type
    follows from the schemas); an expression, or a source whose columns are unknown, has none."""
    src = ["ID", "k", "st"]
    cases = [("t.id = s.id", "ID"), ("t.id = s.k + 1", None), ("t.id = upper(s.k)", None), ("s.k <=> t.id", "k"),
             ("t.id = k", "k")]
    for on, want in cases:
        (key,) = merge_join_keys(merge(on), COLS, source_columns=src)
        assert key.source_column == want, on
    (key,) = merge_join_keys(merge("t.id = s.id"), COLS)  # the source's columns unknown: no name
    assert key.source_column is None


def test_key_predicate_literals():
    assert key_predicate("id", [2.5]) == "id = 2.5D"
    # NaN is a value Spark joins on (NaN = NaN) and orders last: written as a typed literal
    assert key_predicate("id", [float("nan")]) == "id = CAST('NaN' AS DOUBLE)"
    assert key_predicate("id", [float("nan"), 1.5, -2.0], threshold=2) == "id BETWEEN -2.0D AND CAST('NaN' AS DOUBLE)"
    assert key_predicate("weird col", [1]) == "`weird col` = 1"
    assert key_predicate("b", [b"\x01\xff"]) == "b = X'01FF'"
    assert key_predicate("flag", [True, False]) == "flag IN (FALSE, TRUE)"
    assert key_predicate("id", list(range(10)), threshold=5) == "id BETWEEN 0 AND 9"


def test_dynamic_scoping_keeps_different_dates_disjoint():
    stmt = merge("s.id = t.id AND s.date = t.date")
    a = conflict_scope(stmt, COLS, PART, source_key_values={"date": [D1], "id": [1]})
    b = conflict_scope(stmt, COLS, PART, source_key_values={"date": [D2], "id": [1]})
    assert a.partition_predicate != b.partition_predicate
    assert "2024-01-01" in a.partition_predicate and "2024-01-02" in b.partition_predicate


GOLDEN = {
    "upd": (update(where="date = '2024-01-01' AND id > 5"), {}, """\
Conflict scope:
  reads: rows where date = '2024-01-01' AND id > 5
  partitions: date = '2024-01-01'
  conflicts: checked per file
  note: checked per file: deletion vectors are disabled"""),
    "del-rand": (delete(where="rand() < 0.5"), {"partition_columns": [], "deletion_vectors": True}, """\
Conflict scope:
  reads: the whole table
  partitions: all
  conflicts: checked per file
  note: not analysable (non-deterministic rand()): widened
  note: checked per file: the read is not analysable row by row"""),
    "merge-dynamic": (merge("s.id = t.id AND s.date = t.date"),
                      {"source_key_values": {"date": [D1], "id": [1, 2]}}, """\
Conflict scope:
  reads: rows where id IN (1, 2) AND date = CAST('2024-01-01' AS DATE)
  partitions: date = CAST('2024-01-01' AS DATE)
  conflicts: checked per file
  note: checked per file: deletion vectors are disabled"""),
    "merge-rl": (merge("s.id = t.id", matched_update(), by_source_delete()),
                 {"source_key_values": {"id": [1]}, "partition_columns": [], "deletion_vectors": True}, """\
Conflict scope:
  reads: the whole table
  partitions: all
  conflicts: checked per row
  note: WHEN NOT MATCHED BY SOURCE reads every target row: whole table"""),
}


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_golden_describe(key):
    stmt, kwargs, text = GOLDEN[key]
    kwargs = dict(kwargs)
    kwargs.setdefault("partition_columns", PART)
    assert conflict_scope(stmt, COLS, **kwargs).describe() == text


def test_scopes_parse_back():
    """Every read predicate is valid Spark SQL text the checker can parse."""
    from isolde.planner.predicates import parse_condition

    for _, stmt, kwargs, *_ in CASES:
        kwargs = dict(kwargs)
        kwargs.setdefault("partition_columns", PART)
        scope = conflict_scope(stmt, COLS, **kwargs)
        for text in (scope.read_predicate, scope.partition_predicate):
            if text:
                parse_condition(text)


def test_columns_as_spark_types_and_real_parser():
    """The forms the executor passes: (name, pyspark DataType) pairs; statements from the grammar."""
    import isolde
    from pyspark.sql import types as T

    cols = [("id", T.LongType()), ("date", T.DateType()), ("info", T.StructType([T.StructField("c", T.StringType())]))]
    (stmt,) = isolde.parse("DELETE FROM db.t AS x WHERE x.date = DATE'2024-01-01' AND x.info.c = 'a'")
    scope = conflict_scope(stmt, cols, ["date"])
    assert scope.read_predicate == "date = CAST('2024-01-01' AS DATE)"
    assert scope.partition_predicate == scope.read_predicate and not scope.row_level_eligible
    (stmt,) = isolde.parse("MERGE INTO t USING (SELECT * FROM src) AS s ON s.id = t.id AND t.date = s.date "
                           "WHEN MATCHED THEN UPDATE SET t.id = s.id WHEN NOT MATCHED THEN INSERT *")
    assert [k.target_column for k in merge_join_keys(stmt, cols)] == ["id", "date"]
    scope = conflict_scope(stmt, cols, ["date"], source_key_values={"id": [1], "date": [D1]})
    assert scope.partition_predicate == "date = CAST('2024-01-01' AS DATE)"
    (stmt,) = isolde.parse("INSERT INTO t SELECT * FROM t WHERE date = DATE'2024-01-01'")
    assert conflict_scope(stmt, cols, ["date"]).read_predicate == "date = CAST('2024-01-01' AS DATE)"
    (stmt,) = isolde.parse("INSERT INTO t SELECT * FROM src")
    assert conflict_scope(stmt, cols, ["date"]).blind_append
