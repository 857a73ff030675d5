"""Broken and unexpected logs (issue 25): each corruption gives a precise error naming the file
and version, or is tolerated where the protocol allows it -- never a silently different table.

Each case damages a five-version table (files a.parquet, f1..f4.parquet; a checkpoint at 4
where the case needs one) and says what loading the latest version must do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

import pytest

from isolde.errors import ExecutionError, IsoldeError, VersionNotFoundError
from isolde.executor.log import DeltaLog

from tests.helpers.log_tables import add, create_table

ALL = ["a.parquet", "f1.parquet", "f2.parquet", "f3.parquet", "f4.parquet"]


def _log(path: str) -> str:
    return os.path.join(path, "_delta_log")


def _commit(path: str, version: int) -> str:
    return os.path.join(_log(path), f"{version:020d}.json")


def _truncate(version: int):
    def damage(path):
        text = open(_commit(path, version)).read()
        with open(_commit(path, version), "w") as fh:
            fh.write(text[: len(text) // 2])
    return damage


def _append(version: int, text: str):
    def damage(path):
        with open(_commit(path, version), "a") as fh:
            fh.write(text)
    return damage


def _checkpoint_files(path):
    return [os.path.join(_log(path), n) for n in os.listdir(_log(path)) if ".checkpoint." in n]


def _garbage_checkpoint(path):
    for f in _checkpoint_files(path):
        with open(f, "wb") as fh:
            fh.write(b"PAR1 not a parquet file")


def _garbage_checkpoint_and_no_commits(path):
    _garbage_checkpoint(path)
    for v in range(5):
        os.remove(_commit(path, v))


def _write(name: str, text: str):
    def damage(path):
        with open(os.path.join(_log(path), name), "w") as fh:
            fh.write(text)
    return damage


@dataclass(frozen=True)
class Case:
    damage: Callable[[str], None]
    checkpoint: bool = False
    files: Optional[list] = None  # tolerated: the files of the latest version
    error: Optional[type] = None  # refused: the exception class ...
    error_class: str = ""  # ... its error class ...
    says: tuple = ()  # ... and what its message names


CASES = {
    "truncated latest commit": Case(_truncate(4), error=ExecutionError, error_class="DELTA_STATE_RECOVER_ERROR",
                                    says=("version 4", "not a valid Delta commit")),
    "truncated middle commit": Case(_truncate(2), error=ExecutionError, error_class="DELTA_STATE_RECOVER_ERROR",
                                    says=("version 2", "not a valid Delta commit")),
    "a line that is no JSON object": Case(_append(3, "[1, 2]\n"), error=ExecutionError,
                                          error_class="DELTA_STATE_RECOVER_ERROR",
                                          says=("version 3", "not a JSON object")),
    "an add without a path": Case(_append(4, '{"add": {"size": 3}}\n'), error=ExecutionError,
                                  error_class="DELTA_STATE_RECOVER_ERROR", says=("version 4", "'path'")),
    "a missing version in the middle": Case(lambda p: os.remove(_commit(p, 2)), error=ExecutionError,
                                            error_class="DELTA_VERSIONS_NOT_CONTIGUOUS",
                                            says=("version 2 is missing", "00000000000000000002.json", "up to version 4")),
    # the checkpoint at 4 holds everything up to it: commits below it may go (log cleanup does so)
    "a commit below the checkpoint gone": Case(lambda p: os.remove(_commit(p, 3)), checkpoint=True, files=ALL),
    "version 0 gone, no checkpoint": Case(lambda p: os.remove(_commit(p, 0)), error=VersionNotFoundError,
                                          says=("starts at version 1",)),
    "an unreadable checkpoint, commits kept": Case(_garbage_checkpoint, checkpoint=True, files=ALL),
    "an unreadable checkpoint, commits gone": Case(_garbage_checkpoint_and_no_commits, checkpoint=True,
                                                   error=ExecutionError, error_class="DELTA_STATE_RECOVER_ERROR",
                                                   says=("version 4", "00000000000000000004.checkpoint.parquet",
                                                         "unreadable")),
    "_last_checkpoint is garbage": Case(_write("_last_checkpoint", "{{{ not json"), checkpoint=True, files=ALL),
    "_last_checkpoint names a missing checkpoint": Case(
        lambda p: [os.remove(f) for f in _checkpoint_files(p)], checkpoint=True, files=ALL),
    "an unknown action from a newer writer": Case(_append(4, '{"futureAction": {"x": 1}}\n'), files=ALL),
    "unknown fields in an add": Case(_append(4, '{"add": {"path": "g.parquet", "partitionValues": {}, "size": 1, '
                                               '"modificationTime": 1, "dataChange": true, "newField": [1]}}\n'),
                                     files=ALL + ["g.parquet"]),
    "blank lines": Case(_append(4, "\n\n"), files=ALL),
    "a stray temporary file of a failed writer": Case(_write(".00000000000000000005.json.tmp", "{"), files=ALL),
    "an empty latest commit (no actions)": Case(lambda p: open(_commit(p, 4), "w").close(), files=ALL[:-1]),
}


def _table(path: str, checkpoint: bool) -> None:
    create_table(path, files=[add("a.parquet")])
    for i in range(1, 5):
        DeltaLog.for_table(path).start_transaction().commit([add(f"f{i}.parquet")], "WRITE")
    if checkpoint:
        DeltaLog.for_table(path).checkpoint(cleanup=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_broken_log_is_refused_precisely_or_read_whole(tmp_path, name):
    case = CASES[name]
    path = str(tmp_path / "t")
    _table(path, case.checkpoint)
    case.damage(path)
    if case.error is None:
        snap = DeltaLog.for_table(path).update()
        assert sorted(a.path for a in snap.all_files) == sorted(case.files)
        return
    with pytest.raises(IsoldeError) as info:
        DeltaLog.for_table(path).update()
    error = info.value
    assert type(error) is case.error
    if case.error_class:
        assert error.error_class == case.error_class
    message = str(error)
    assert path in message
    for piece in case.says:
        assert piece in message


def test_a_hole_in_the_log_refuses_a_writer_too(tmp_path):
    """A writer never commits over a hole: re-creating version 2 would fork the table."""
    path = str(tmp_path / "t")
    _table(path, False)
    log = DeltaLog.for_table(path)
    log.update()  # cached at version 4
    os.remove(_commit(path, 2))
    with pytest.raises(ExecutionError) as info:
        DeltaLog.for_table(path).start_transaction()
    assert info.value.error_class == "DELTA_VERSIONS_NOT_CONTIGUOUS"
    assert not os.path.exists(_commit(path, 2)) and not os.path.exists(_commit(path, 5))


def test_an_incremental_update_sees_the_hole(tmp_path):
    path = str(tmp_path / "t")
    _table(path, False)
    log = DeltaLog.for_table(path)
    assert log.update().version == 4
    DeltaLog.for_table(path).start_transaction().commit([add("f5.parquet")], "WRITE")
    DeltaLog.for_table(path).start_transaction().commit([add("f6.parquet")], "WRITE")
    os.remove(_commit(path, 5))
    with pytest.raises(ExecutionError) as info:
        log.update()  # extends the cached version 4: must not stop silently at 4
    assert "version 5 is missing" in str(info.value)
