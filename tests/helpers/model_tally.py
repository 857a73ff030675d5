"""What the three model checkers of concurrent histories share (``row_model``: single
statements; ``transaction_model``: multi-statement transactions on one table;
``multi_table_model``: transactions over coordinated tables).

The checker side: ``Verdict``, the judgement of one history (its violations and whether its
refusals were needed), and ``Tally``, the count of many judged histories with the share of the
refused ones that were false conflicts; ``replay``, one history run and judged as text.

The test side (txn/test_row_level_model, test_transaction_model, test_multi_table_model):
``Tallies``, the judged histories of one model computed once per session per level, mode and
generator, and the failure reports naming each failing seed with the command that replays it;
``assert_false_conflicts``, the bound on row level's false conflicts.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterator, Optional

import pytest


def labels(items) -> list:
    return [x.label() for x in items]


def share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def outcome_lines(refused: dict, noop: list, label: Callable) -> list:
    """An outcome's lines for what was refused (-> "ExceptionClass: message") and what had
    nothing to commit."""
    lines = [f"    {label(t)} refused: {why}" for t, why in refused.items()]
    if noop:
        lines.append("    nothing to commit: " + ", ".join(label(t) for t in noop))
    return lines


# --------------------------------------------------------------------------- judging one history


@dataclass
class Verdict:
    violations: list = field(default_factory=list)  # text: the history must not happen
    refused: int = 0  # statements or transactions refused
    # a history with refusals: had everything been forced through, would it still be a serial
    # execution allowed by the level (rows and every statement's result)? ...
    false_conflict: Optional[bool] = None
    forced_order: Optional[list] = None
    false_conflict_rows_only: Optional[bool] = None  # ... comparing the final rows only
    false_refusals: int = 0  # refused ones that, forced through alone, left it serialisable
    false_refusals_rows_only: int = 0

    def compare_readers(self, out) -> None:
        """pyarrow with deletion vectors and delta-rs (when it read) read the same rows."""
        if out.delta_rs is not None and out.delta_rs != out.final:
            self.violations.append(f"delta-rs reads {out.delta_rs}, pyarrow + deletion vectors read {out.final}")

    def weigh_refusals(self, refused: Collection, simulate: Callable, committed: set, order_of: Callable) -> None:
        """Count the ``refused`` (statements or transactions) and judge whether they had to be.
        ``simulate(accepted=None)``: the model's run of the history with only ``accepted``
        committing (None: everything forced through); ``order_of(run, results)``: the serial
        order allowed by the level that the run equals, by its final rows and (``results``) every
        judged statement's result, or None."""
        self.refused = len(refused)
        if not refused:
            return
        forced = simulate()
        order = order_of(forced, True)
        self.false_conflict = order is not None
        self.forced_order = None if order is None else labels(order)
        self.false_conflict_rows_only = order_of(forced, False) is not None
        for t in refused:  # forcing through that one alone
            alone = simulate(committed | {t})
            self.false_refusals += order_of(alone, True) is not None
            self.false_refusals_rows_only += order_of(alone, False) is not None


def replay(generate: Callable, run: Callable, judge: Callable, seed: int, level: str, mode: str, where: str,
           **generator) -> str:
    """One history (``generate(seed, **generator)``), run under ``where`` and judged, as text."""
    history = generate(seed, **generator)
    out = run(history, level, mode, where)
    verdict = judge(history, level, out)
    return (f"{level} / rowLevelConcurrency={mode}\n{history.describe()}\n{out.describe(history)}\n"
            f"  verdict: {verdict}")


# --------------------------------------------------------------------------- counting many


@dataclass
class Tally:
    level: str
    mode: str
    histories: int = 0
    accepted: int = 0  # histories where nothing was refused
    refused: int = 0  # histories with at least one refusal
    false_conflicts: int = 0  # ... where forcing everything through was still serialisable
    false_conflicts_rows_only: int = 0  # ... comparing the final rows only
    false_examples: list = field(default_factory=list)  # (seed, text)
    violations: list = field(default_factory=list)  # (seed, text)
    exceptions: Counter = field(default_factory=Counter)  # exception class -> refusals
    false_refusals: int = 0  # refused statements or transactions that, forced through alone, left it serialisable
    false_refusals_rows_only: int = 0
    seconds: float = 0.0

    @property
    def ratio(self) -> float:
        return share(self.false_conflicts, self.refused)

    @property
    def ratio_rows_only(self) -> float:
        return share(self.false_conflicts_rows_only, self.refused)

    @contextmanager
    def timed(self) -> Iterator[Tally]:
        began = time.time()
        yield self
        self.seconds = time.time() - began

    def refusals_line(self) -> str:
        return f"\n    refusals: {', '.join(f'{k} {n}' for k, n in sorted(self.exceptions.items())) or 'none'}"

    def add(self, seed: int, text: str, verdict: Verdict, refused: dict, where: str, folder: str,
            keep_examples: int) -> None:
        """One judged history: ``text`` describes it and its outcome, ``refused`` maps what was
        refused to "ExceptionClass: message". With violations the text names ``where`` its tables
        are kept; else their ``folder`` is removed."""
        for why in refused.values():
            self.exceptions[why.split(":", 1)[0]] += 1
        self.false_refusals += verdict.false_refusals
        self.false_refusals_rows_only += verdict.false_refusals_rows_only
        if verdict.violations:
            self.violations.append((seed, text + f"\n  {where}\n  VIOLATION: "
                                    + "\n  VIOLATION: ".join(verdict.violations)))
        else:
            shutil.rmtree(folder, ignore_errors=True)
        if not refused:
            self.accepted += 1
            return
        self.refused += 1
        self.false_conflicts_rows_only += bool(verdict.false_conflict_rows_only)
        if verdict.false_conflict:
            self.false_conflicts += 1
            if len(self.false_examples) < keep_examples:
                self.false_examples.append(
                    (seed, text + f"\n  forced through, equals the serial order {verdict.forced_order}"))


# --------------------------------------------------------------------------- the tests' side


class Tallies:
    """The judged histories of one model (the module ``model``: ``check_histories``, ``seeds``,
    ``replay``) per level, mode and generator, each computed once per session; ``title`` names
    them in the summary printed then (``pytest -s``), with the generator's arguments when
    ``note``; ``folder`` begins their work folders' names."""

    def __init__(self, model, title: str, folder: str, *, note: bool = True):
        self.model, self.title, self.folder, self.note = model, title, folder, note
        self._tallies: dict = {}

    def __call__(self, tmp_path_factory, level: str, mode: str, count: int, base: int, name: str = "",
                 **generator):
        """``name``: the generator's name, for models whose summaries say it."""
        key = (level, mode, count, base, tuple(sorted(generator.items())))
        if key not in self._tallies:
            workdir = str(tmp_path_factory.mktemp(f"{self.folder}-{level}-{mode}"))
            named = {"name": name} if name else {}
            tally = self._tallies[key] = self.model.check_histories(level, mode, self.model.seeds(count, base),
                                                                    workdir, **named, **generator)
            note = f" ({', '.join(f'{k}={v}' for k, v in generator.items())})" if generator and self.note else ""
            print(f"\n[{self.title}, seeds {base}xxxxxx{note}] {tally.summary()}")
        return self._tallies[key]

    def replay_hint(self, tally: Tally, seed: int, generator: dict) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in generator.items())
        return (f"replay: python -c \"from {self.model.__name__} import replay; "
                f"print(replay({seed}, {tally.level!r}, {tally.mode!r}, '/tmp'{extra}))\"")

    def first(self, tally: Tally, examples: list, generator: dict) -> str:
        """The first three (seed, text) of ``examples``, each with its replay command."""
        return "\n\n".join(f"{text}\n  {self.replay_hint(tally, seed, generator)}" for seed, text in examples[:3])

    def assert_no_violations(self, tally: Tally, generator: dict, what: str = "are not serialisable") -> None:
        if tally.violations:
            pytest.fail(f"{len(tally.violations)} of {tally.histories} histories under {tally.level}, "
                        f"isolde.rowLevelConcurrency={tally.mode} {what} (first {min(3, len(tally.violations))}):"
                        f"\n\n{self.first(tally, tally.violations, generator)}", pytrace=False)


def assert_false_conflicts(row: Tally, file: Tally, max_row_level_false: float, min_refused: int) -> None:
    """Row level (``row``) refused needlessly in at most ``max_row_level_false`` of its refused
    histories, file level (``file``) more often; each refused ``min_refused`` at least."""
    assert row.refused >= min_refused and file.refused >= min_refused, (
        f"too few refused histories to measure false conflicts: {row.summary()}\n{file.summary()}")
    examples = "\n\n".join(text for _, text in row.false_examples)
    assert row.ratio <= max_row_level_false, (
        f"row level refused {row.false_conflicts} of {row.refused} histories needlessly ({row.ratio:.1%}; at most "
        f"{max_row_level_false:.0%} allowed):\n{row.summary()}\n\n{examples}")
    # the measurement discriminates: the file-level rules refuse needlessly more often
    assert file.ratio > row.ratio, f"file level is not worse than row level?\n{row.summary()}\n{file.summary()}"
