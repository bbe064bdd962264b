"""The search benchmark's figures: measurements to 90/95/99% of the true hypervolume, skips
and screens counted beside measurements, earlier runs kept in the results file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.core.contract import TrialStatus
from autotune.results import TrialRecord
from tests.strategy_support import load_benchmark


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_benchmark()


def record(number: int, status: TrialStatus, measured: bool) -> TrialRecord:
    return TrialRecord(number=number, state="pruned", config={}, status=status, measured=measured)


def test_skips_and_screens_are_counted_apart(bench: Any) -> None:
    trials = [
        record(0, "ok", True),
        record(1, "skipped", False),
        record(2, "screened", True),
        record(3, "screened", True),
        record(4, "skipped", False),
        record(5, "skipped", False),
        TrialRecord(number=6, state="running", config={}),
    ]
    assert bench.trial_counts(trials) == (3, 2)


def test_the_summary_reads_each_fraction_and_the_counts(bench: Any) -> None:
    runs = [
        bench.Run("x", 0, [0.5, 0.91, 0.96, 0.995], [1.0, 2.0, 3.0, 4.0], 2, 1),
        bench.Run("x", 1, [0.92, 0.93, 0.97], [1.0, 2.0, 3.0], 4, 3),
        bench.Run("x", 2, [0.2, 0.3], [1.0, 2.0], 0, 0),
    ]
    assert runs[0].to_target(10, 0.99) == (4, 4.0)
    assert runs[1].to_target(10, 0.99) == (11, None)
    stats = bench.summary(runs, 10)
    assert stats["to"] == {0.90: 2, 0.95: 3, 0.99: 11}
    assert (stats["skipped"], stats["screened"]) == (2, 1)
    assert stats["median"] == 3 and stats["not_reached"] == 1
    assert stats["final"] == 0.97 and stats["measurements"] == 3


def test_a_new_report_keeps_the_earlier_runs(bench: Any, tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    assert bench.earlier_runs(out) == ""
    out.write_text("# Latest\n\nold figures\n\n# Earlier runs\n\n## 2026-11-30\n\n| a |\n")
    assert bench.earlier_runs(out) == "\n# Earlier runs\n\n## 2026-11-30\n\n| a |\n"
    out.write_text("# Latest\n\nno history\n")
    assert bench.earlier_runs(out) == ""
