"""Generated SQL without Spark: 5,000 conditions parse and plan (no recursion per link of an
AND / OR chain), and nesting past the parser's limit is a ParseError that says so."""

from __future__ import annotations

import pytest

import isolde
from isolde import errors as E
from isolde.executor.txn.predicates import Predicate
from isolde.planner.scope import conflict_scope


def nested(condition: str, depth: int) -> str:
    return "(" * depth + condition + ")" * depth



@pytest.mark.parametrize("kind", ["SELECT * FROM t WHERE", "DELETE FROM t WHERE", "UPDATE t SET v = 1 WHERE"])
def test_too_deep_is_a_parse_error_with_a_position(kind):
    with pytest.raises(E.ParseError) as err:
        isolde.parse(f"{kind} {nested('id = 1', 5000)}")
    assert "nests too deeply" in str(err.value) and err.value.line == 1 and err.value.column >= 1


@pytest.mark.slow  # ~10 s: sqlglot parses about 5,000 conditions a second
@pytest.mark.parametrize("joiner", [" AND ", " OR "])
def test_planning_five_thousand_conditions(joiner):
    where = joiner.join(f"id <> {i}" if joiner == " AND " else f"id = {i}" for i in range(5000))
    for sql in (f"DELETE FROM t WHERE {where}", f"UPDATE t SET v = 1 WHERE {where}"):
        [stmt] = isolde.parse(sql)
        scope = conflict_scope(stmt, {"id": "int", "v": "int"}, [])
        assert not scope.reads_whole_table and scope.read_predicate.count("id") == 5000
        schema = {"fields": [{"name": "id", "type": "integer"}, {"name": "v", "type": "integer"}]}
        pred = Predicate(scope.read_predicate, schema)
        assert pred.partition_may_match({})


def test_recursion_past_the_limit_is_a_clear_error_not_a_recursion_error():
    from isolde.executor.session.session import translate_errors

    def deep(n):
        return deep(n + 1)

    with pytest.raises(E.ExecutionError) as err:
        translate_errors(lambda: deep(0))
    assert err.value.error_class == "STATEMENT_TOO_COMPLEX" and "too deeply nested" in str(err.value)
    with pytest.raises(E.ExecutionError) as err:
        translate_errors(lambda: (_ for _ in ()).throw(RuntimeError("py4j ... java.lang.StackOverflowError at ...")))
    assert err.value.error_class == "STATEMENT_TOO_COMPLEX" and "Spark's planner" in str(err.value)
