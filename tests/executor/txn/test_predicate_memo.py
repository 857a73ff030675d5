"""Data skipping over many files: each file's column summaries are built only for the columns a
predicate reads, and what a node resolves to (column, literal) is kept once per Predicate. Both
must leave every answer as it was: checked against a fresh Predicate per file (nothing shared)
and BETWEEN against its ``>= AND <=`` spelling, over random statistics."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from isolde.executor.log.actions import AddFile
from isolde.executor.txn.predicates import Predicate

SCHEMA = json.loads(json.dumps({"type": "struct", "fields": [
    {"name": n, "type": t, "nullable": True, "metadata": {}}
    for n, t in [("id", "long"), ("key", "long"), ("name", "string"), ("price", "double"), ("p", "string")]]}))

PREDICATES = [
    "id BETWEEN 5 AND 50", "id >= 5 AND id <= 50", "id BETWEEN 50 AND 5", "id BETWEEN NULL AND 5",
    "NOT (id BETWEEN 10 AND 20)", "key % 1000 = 7", "id = 15 OR name = 'carl'", "name BETWEEN 'b' AND 'd'",
    "price BETWEEN 1.5 AND 2", "id IN (1, 40, 90)", "p = 'x' AND id > 30", "id IS NULL", "key < 0",
    "id BETWEEN key AND 10", "5 BETWEEN id AND key",
]


def _file(i: int, lo, hi, nulls: int, n: int, name_lo: str, name_hi: str, part: str) -> AddFile:
    stats = {"numRecords": n, "minValues": {}, "maxValues": {}, "nullCount": {"id": nulls, "Key": 0}}
    if lo is not None:
        stats["minValues"].update({"id": lo, "Key": lo * 2, "name": name_lo, "price": lo / 4})
    if hi is not None:
        stats["maxValues"].update({"id": hi, "Key": hi * 2, "name": name_hi, "price": hi / 4})
    return AddFile(f"f{i}", {"p": part}, 1, 1, stats=json.dumps(stats))


files_strategy = st.lists(st.builds(
    lambda lo, width, nulls, n, a, b, part: (lo, None if lo is None else lo + width, min(nulls, n), n,
                                             min(a, b), max(a, b), part),
    st.one_of(st.none(), st.integers(-20, 100)), st.integers(0, 60), st.integers(0, 5), st.integers(1, 5),
    st.sampled_from("abcde"), st.sampled_from("abcde"), st.sampled_from("xy")), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(files_strategy)
def test_one_predicate_over_many_files_answers_as_a_fresh_one_per_file(specs):
    files = [_file(i, *spec) for i, spec in enumerate(specs)]
    for sql in PREDICATES:
        shared = Predicate(sql, SCHEMA, ["p"])
        got = [shared.file_may_match(f) for f in files]
        fresh = [Predicate(sql, SCHEMA, ["p"]).file_may_match(_file(i, *spec)) for i, spec in enumerate(specs)]
        assert got == fresh, sql
        assert shared.filter(files) == [f for f, keep in zip(files, got) if keep]


@settings(max_examples=150, deadline=None)
@given(files_strategy, st.integers(-30, 110), st.integers(-30, 110))
def test_between_answers_as_its_two_comparisons(specs, low, high):
    between = Predicate(f"id BETWEEN {low} AND {high}", SCHEMA, ["p"])
    spelled = Predicate(f"id >= {low} AND id <= {high}", SCHEMA, ["p"])
    negated = Predicate(f"NOT (id BETWEEN {low} AND {high})", SCHEMA, ["p"])
    spelled_not = Predicate(f"NOT (id >= {low} AND id <= {high})", SCHEMA, ["p"])
    for i, spec in enumerate(specs):
        f = _file(i, *spec)
        assert between.file_may_match(f) is spelled.file_may_match(f)
        assert negated.file_may_match(f) is spelled_not.file_may_match(f)


def test_summaries_are_built_for_the_columns_a_predicate_reads_only():
    f = _file(0, 10, 20, 0, 5, "a", "c", "x")
    assert Predicate("key % 1000 = 7", SCHEMA, ["p"]).file_may_match(f) is True
    assert f.__dict__["_summaries"][2]._built == {}  # an expression over a column reads no statistic
    assert Predicate("id > 25", SCHEMA, ["p"]).file_may_match(f) is False
    assert set(f.__dict__["_summaries"][2]._built) == {"id"}
    # the stats spell the column "Key": found case-insensitively, as before
    assert Predicate("key > 100", SCHEMA, ["p"]).file_may_match(f) is False
    assert Predicate("key >= 40", SCHEMA, ["p"]).file_may_match(f) is True


def test_a_partition_value_wins_over_statistics_of_the_same_name():
    stats = {"numRecords": 2, "minValues": {"p": "a"}, "maxValues": {"p": "b"}, "nullCount": {"p": 0}}
    f = AddFile("f", {"p": "z"}, 1, 1, stats=json.dumps(stats))
    assert Predicate("p = 'z'", SCHEMA, ["p"]).file_may_match(f) is True
    assert Predicate("p = 'a'", SCHEMA, ["p"]).file_may_match(f) is False
