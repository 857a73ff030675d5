"""The bank checker itself, on made-up histories: it accepts a correct one (empty INSERT
commits included) and names each kind of anomaly. No Spark."""

from __future__ import annotations

import bank as B

NEEDS_SPARK = False
CFG = B.BankConfig(False, True, "Serializable", "auto")


def _history(ops: dict, unchanged=(), reads=()) -> B.History:
    h = B.History(CFG, base_version=1)
    h.committed.update(ops)
    h.unchanged.extend(unchanged)
    h.reads.extend(reads)
    return h


def _final(ops: dict) -> list:
    state = B.initial_state()
    for v in sorted(ops):
        B.apply(state, ops[v])
    return sorted((i, b, v) for i, (b, v) in state.items())


TRANSFER = B.Op("transfer", (0, 1, 5), "t")
OPEN = B.Op("open", (B.BASE,), "o")
CLOSE = B.Op("close", (B.BASE,), "c")
TOTAL = B.BASE * B.START


def test_a_correct_history_passes():
    ops = {2: TRANSFER, 3: OPEN, 5: CLOSE}
    # version 4: an INSERT ... WHERE NOT EXISTS that found the account (read version 3) and committed empty
    h = _history(ops, unchanged=[(4, OPEN), (3, OPEN)], reads=[(TOTAL, B.BASE, B.BASE), (TOTAL, B.BASE + 1, B.BASE + 1)])
    final = _final(ops)
    assert B.check(h, 5, final, final) == []


def test_each_anomaly_is_named():
    ops = {2: TRANSFER, 3: OPEN}
    final = _final(ops)
    lost = [r if r[0] != 0 else (0, r[1], r[2] + 5) for r in final]  # the transfer's debit lost
    assert any("serial replay" in m for m in B.check(_history(ops), 3, lost, lost))
    assert any("delta-rs reads" in m for m in B.check(_history(ops), 3, final, lost))
    assert any("versions committed" in m for m in B.check(_history(ops), 4, final, final))  # a phantom version
    torn = _history(ops, reads=[(TOTAL - 5, B.BASE, B.BASE)])
    assert any("total balance" in m for m in B.check(torn, 3, final, final))
    twice = _history(ops, reads=[(TOTAL, B.BASE + 1, B.BASE)])
    assert any("rows for" in m for m in B.check(twice, 3, final, final))
    wrong_noop = _history(ops, unchanged=[(2, OPEN)])  # "opened nothing" where the account did not exist
    assert any("changed no row" in m for m in B.check(wrong_noop, 3, final, final))
