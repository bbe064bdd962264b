"""`autotune report`: the front of a stored study with the chosen trial and the baseline
marked, every mark explained under the table, and no line or column left empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from autotune.cli import app, tables
from autotune.cli.study import _chosen
from autotune.results import StoredRevalidation
from tests.conftest import stored_trials
from tests.replay_tables import recorded_rows, write_request, write_table

runner = CliRunner()


class StoreWithAHeadToHead:
    """What `_chosen` reads of a store: its stored head-to-head and its counted trials."""

    def __init__(self, chose: int, decided_after: int, counted: int) -> None:
        self.stored = StoredRevalidation(
            report={"chosen": chose},
            basis={"n_trials": decided_after},
            chosen_metrics={},
            baseline_metrics={},
            headline={},
        )
        self.trials = counted

    def revalidation(self) -> StoredRevalidation:
        return self.stored

    def counted(self) -> int:
        return self.trials


def test_the_chosen_trial_is_the_head_to_heads_of_the_trials_held_now() -> None:
    store: Any = StoreWithAHeadToHead(chose=7, decided_after=12, counted=12)
    assert _chosen(store) == 7
    continued: Any = StoreWithAHeadToHead(chose=7, decided_after=12, counted=15)
    assert _chosen(continued) is None


def _headers_alone(lines: list[str], headers: tuple[str, ...]) -> list[str]:
    """Lines of a configuration cell that name a dimension and give it no value."""
    return [line for line in lines if any(line.rstrip().endswith(h) for h in headers)]


@pytest.mark.slow
def test_report_marks_the_chosen_trial_and_the_baseline_and_explains_the_marks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replayed study whose unpruned trials have no prune ratio: at 80 columns, the
    configuration cells list only what each trial sets."""
    table = write_table(tmp_path / "table.csv", recorded_rows())
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    args = ["tune", str(write_request(tmp_path)), "--replay", str(table), "--trials", "12"]
    args += ["--storage", storage, "--study", "s", "--sampler", "random", "--seed", "0"]
    monkeypatch.chdir(tmp_path)
    tuned = runner.invoke(app, [*args, "--json"])
    assert tuned.exit_code == 0, tuned.output
    baseline = next(t.number for t in stored_trials(storage, "s") if t.marks.baseline)

    monkeypatch.setattr(tables, "out", Console(width=80))
    result = runner.invoke(app, ["report", "s", "--storage", storage])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    marked = [line.split()[0] for line in lines if line.strip()[:1].isdigit()]
    assert sum(trial.endswith("*") for trial in marked) == 1
    assert any(trial.rstrip("*").rstrip("b") == str(baseline) and "b" in trial for trial in marked)
    legend = " ".join(" ".join(lines).split())
    assert "* chosen: the configuration the head-to-head returned" in legend
    assert "b baseline: the unmodified model" in legend
    assert _headers_alone(lines, ("prune ratio", "ratio")) == []
