"""A location another CREATE ... AS SELECT is filling is not "a non-empty folder that is not a
Delta table": files under that writer's lease are its own, everything else stays foreign."""

from __future__ import annotations

import os

from isolde.executor.catalog import leases
from isolde.executor.catalog.warehouse import foreign_entries


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


def test_the_last_release_removes_the_lease_folder(tmp_path):
    table = str(tmp_path / "t")
    os.makedirs(os.path.join(table, "_delta_log"))
    first = leases.take([_touch(os.path.join(table, "a.parquet"))])
    second = leases.take([_touch(os.path.join(table, "b.parquet"))])
    folder = os.path.join(table, leases.LEASE_DIR)
    leases.release(first)
    assert os.listdir(folder) == [os.path.basename(second)]  # another writer's lease keeps it
    leases.release(second)
    assert not os.path.exists(folder)
    leases.release(second)  # twice: nothing to do


def test_leases_taken_and_released_concurrently_are_never_lost(tmp_path):
    """Writers racing on one table: a lease taken is on disk until its holder releases it,
    although other writers' releases remove the folder whenever it is empty."""
    import threading

    table = str(tmp_path / "t")
    os.makedirs(os.path.join(table, "_delta_log"))
    staged = _touch(os.path.join(table, "part-0.parquet"))
    errors = []

    def writer():
        try:
            for _ in range(200):
                lease = leases.take([staged])
                if not os.path.isfile(lease) or staged not in leases.leased_paths(table):
                    errors.append(f"lease {lease} not visible while held")
                leases.release(lease)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert not os.path.exists(os.path.join(table, leases.LEASE_DIR))
