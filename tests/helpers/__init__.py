"""Shared test helpers, one place for every room (imported as ``tests.helpers.<module>``).

    oracle            delta-rs reads (the interop oracle), sorted rows, Spark types
    dml               DML / conflict / stress support: Runner, make_table, plan forcing
    meta              metadata-command support: new_session, make_table, snapshots
    log_tables        tiny schemas, file actions and table set-up for the log-level tests
    row_model         the model checker of the row-level conflict checks (txn/test_row_level_model)
    model_tally       what the model checkers share: verdicts, tallies, the tests' runs and reports
    dml_workload      the statement workload the concurrency tests race (threads and processes)
    dml_worker        worker process of txn/test_processes_dml (run by path)
    row_level_worker  worker process of txn/test_row_level_stress (run by path)
    worker_output     reading a worker's report, waiting on it, the workers' commitInfo
    skipping_cases    tables and predicates of txn/test_skipping_differential
    repl_fakes        a fake Session for the REPL tests
    planner_build     plan-building helpers of planner/test_scope

``DATA`` is tests/data, ``ENGINES`` the tables other engines wrote (tests/data/engines).
"""

from __future__ import annotations

import os

HELPERS = os.path.dirname(os.path.abspath(__file__))  # the worker scripts run by path live here
TESTS = os.path.dirname(HELPERS)
DATA = os.path.join(TESTS, "data")
ENGINES = os.path.join(DATA, "engines")
