"""The bank workload (bank.py) under every table setup: threads in one JVM, each with its own
isolde session, racing transfers, openings, closings and branch moves while readers check
the invariants. Short histories here; ``make torture`` runs longer ones over every setup."""

from __future__ import annotations

import itertools
import os
import time

import pytest

import bank as B

pytestmark = pytest.mark.slow

SHORT = [
    B.BankConfig(partitioned=False, deletion_vectors=True, isolation="WriteSerializable", row_level="auto"),
    B.BankConfig(partitioned=True, deletion_vectors=True, isolation="Serializable", row_level="always"),
    B.BankConfig(partitioned=False, deletion_vectors=False, isolation="Serializable", row_level="off"),
    B.BankConfig(partitioned=True, deletion_vectors=False, isolation="WriteSerializable", row_level="auto"),
]
EVERY = [B.BankConfig(p, dv, iso, rl) for p, dv, iso, rl in itertools.product(
    (False, True), (True, False), ("WriteSerializable", "Serializable"), ("auto", "off"))]


def _run_and_check(spark, tmp_path, config, seconds, writers, summary):
    import isolde

    warehouse = str(tmp_path / "warehouse")
    started = time.time()
    history = B.run(lambda: isolde.connect(warehouse=warehouse, spark=spark), config, seconds, writers=writers)
    s = isolde.connect(warehouse=warehouse, spark=spark)
    try:
        latest, final, other = B.final_state(s, os.path.join(warehouse, "default", "bank"))
    finally:
        s.close()
    violations = B.check(history, latest, final, other)
    summary.append({"name": config.name, "seconds": time.time() - started, "committed": len(history.committed),
                    "conflicts": history.conflicts, "reads": len(history.reads), "violations": violations})
    assert not violations, "\n".join(violations[:20])
    # the run was a race, not a queue: statements committed and readers ran throughout
    assert len(history.committed) >= writers and history.reads


@pytest.mark.parametrize("config", SHORT, ids=lambda c: c.name)
def test_bank_invariants_hold(spark, tmp_path, config, summary):
    _run_and_check(spark, tmp_path, config, float(os.environ.get("ISOLDE_BANK_SECONDS", "12")), 4, summary)


@pytest.mark.torture
@pytest.mark.parametrize("config", EVERY, ids=lambda c: c.name)
def test_bank_invariants_hold_long(spark, tmp_path, config, summary):
    _run_and_check(spark, tmp_path, config, float(os.environ.get("ISOLDE_TORTURE_SECONDS", "120")), 6, summary)
