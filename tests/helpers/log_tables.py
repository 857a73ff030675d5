"""Helpers for the log-level tests (executor/log, txn, streaming, rows): tiny schemas, file actions and
table set-up. The ``table_dir`` fixture (a fresh table folder) is in tests/conftest.py."""

from __future__ import annotations

import json

from isolde.executor.log import DeltaLog
from isolde.executor.log.actions import AddFile, Metadata, Protocol


def schema_string(**columns: str) -> str:
    return json.dumps(
        {
            "type": "struct",
            "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in columns.items()],
        }
    )


DEFAULT_SCHEMA = schema_string(id="long", value="string", date="string", country="string")


def stats(num_records: int = 10, **bounds: tuple) -> str:
    mins = {k: v[0] for k, v in bounds.items()}
    maxs = {k: v[1] for k, v in bounds.items()}
    nulls = {k: (v[2] if len(v) > 2 else 0) for k, v in bounds.items()}
    return json.dumps({"numRecords": num_records, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def add(path: str, data_change: bool = True, stats_json: str | None = None, **partition_values) -> AddFile:
    return AddFile(path, dict(partition_values), 100, 1_700_000_000_000, data_change=data_change, stats=stats_json)


def create_table(
    path,
    partition_columns=(),
    configuration=None,
    files=(),
    schema: str = DEFAULT_SCHEMA,
    protocol: Protocol | None = None,
) -> DeltaLog:
    log = DeltaLog.for_table(path)
    txn = log.start_transaction()
    actions = [Metadata(schema, tuple(partition_columns), dict(configuration or {})), *files]
    if protocol is not None:
        actions.insert(0, protocol)
    txn.commit(actions, "CREATE TABLE")
    return log
