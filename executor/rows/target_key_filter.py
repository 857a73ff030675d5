"""A MERGE's join keys as a filter on its target scan, for the Parquet reader's statistics.

The source summary knows each equality key's values (a set, or a range past
``KEY_SET_LIMIT``). The file-level scope already skips the files they rule out; inside a kept
file, ``col IN (...)`` pushed into the reader skips the row groups as well (a point MERGE
into a file of 1 GB reads the row group holding its key). Only sets: a range is what a big
upsert has, whose keys span the files the scope kept, and a filter that skips nothing still
costs its evaluation on every row and the reader's per-file filter set-up.

The filter must drop no target row that ON could pair with a source row. It is written only
where Spark compares both the same way as ON:
- the target column is compared in its own type (``_comparison_types``: the source key is cast
  to it, the target column is not cast), and the summary's values are the source keys cast to
  that type, so ``col IN (values)`` holds exactly for the target values some source key equals;
- that type's equality is exact and has no collation: integers, DATE, BOOLEAN and plain STRING
  (no floats, where -0.0 / NaN differ between orders; no decimals or timestamps, whose literals
  would need their precision written out);
- a null-safe key keeps the NULL rows when the source has a NULL key (``key_predicate``);
- only for an inner join: NOT MATCHED BY SOURCE clauses act on the target rows no key selects.
Partition columns are left out: the files are already pruned by them.
"""

from __future__ import annotations

from typing import Optional

from isolde.planner.scope import KeyRange, key_predicate

EXACT_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT", "DATE", "BOOLEAN", "STRING")


def target_key_filter(keys, key_values: dict, comparison_types: dict, target_types: dict,
                      partition_columns) -> Optional[str]:
    """A SQL predicate over the target's columns every row ON can match satisfies, or None."""
    own = {name.lower(): t for name, t in target_types.items()}
    parts = {p.lower() for p in partition_columns}
    preds = []
    for k in keys:
        column = k.target_column
        compared = (comparison_types.get(column) or "").upper()
        values = key_values.get(column)
        if (values is None or isinstance(values, KeyRange) or compared not in EXACT_TYPES
                or column.lower() in parts or (own.get(column.lower()) or "").upper() != compared):
            continue
        pred = key_predicate(column, values, k.null_safe)
        if pred is not None:
            preds.append(f"({pred})")
    return " AND ".join(preds) or None
