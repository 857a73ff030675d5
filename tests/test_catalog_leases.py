"""A location another CREATE ... AS SELECT is filling is not "a non-empty folder that is not a
Delta table": files under that writer's lease are its own, everything else stays foreign."""

from __future__ import annotations

import os

from isolde.executor import leases
from isolde.executor.catalog import foreign_entries


def _touch(path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write("x")
    return path


def test_leased_files_of_a_concurrent_creator_are_not_foreign(tmp_path):
    table = str(tmp_path / "t")
    staged = [_touch(os.path.join(table, "part-0.parquet")), _touch(os.path.join(table, "p=1", "part-1.parquet"))]
    assert foreign_entries(table) == ["p=1", "part-0.parquet"]  # no lease: a stranger's files
    lease = leases.take(staged, root=table)
    assert lease is not None and lease.startswith(os.path.join(table, leases.LEASE_DIR))
    assert foreign_entries(table) == []
    _touch(os.path.join(table, "p=1", "mine.csv"))  # a folder holding more than the lease covers
    _touch(os.path.join(table, "notes.txt"))
    assert foreign_entries(table) == ["notes.txt", "p=1"]
    leases.release(lease)
    assert foreign_entries(table) == ["notes.txt", "p=1", "part-0.parquet"]


def test_without_a_root_a_path_outside_any_table_takes_no_lease(tmp_path):
    assert leases.take([_touch(str(tmp_path / "loose" / "part-0.parquet"))]) is None
