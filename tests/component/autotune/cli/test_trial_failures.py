"""`autotune tune` on a replayed table whose model raises in one engine: each failed trial's
line gives its reason, the error is measured once per variant, the search ends with a
summary, and a study where most trials failed exits 5 saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.cli.shared import EXIT_TRIALS_FAILED
from tests.conftest import stored_trials
from tests.replay_tables import (
    config_of,
    recorded_rows,
    write_request,
    write_table,
)

REASON = "IndexError in fidelity: index 1 is out of bounds for axis 0 with size 1"


def failing_rows(failing: Any) -> list[dict[str, Any]]:
    """The recorded rows, those `failing` picks raising in fidelity."""
    rows = recorded_rows()
    for row in rows:
        if failing(row):
            row.update(status="error", reason=REASON)
            for metric in ("accuracy", "latency_p95_ms", "energy_per_sample_j"):
                row.pop(metric, None)
    return rows


def tune(directory: Path, rows: list[dict[str, Any]], trials: int) -> Any:
    table = write_table(directory / "table.csv", rows)
    request = write_request(directory, constraints={"max_accuracy_drop": 0.5})
    args = ["tune", str(request), "--replay", str(table)]
    args += ["--storage", f"sqlite:///{directory / 'study.db'}", "--study", "s"]
    args += ["--trials", str(trials), "--seed", "0"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(directory)
        return CliRunner().invoke(app, args)


@pytest.mark.slow
def test_an_engine_that_raises_is_told_with_its_reason_and_measured_once_a_variant(
    tmp_path: Path,
) -> None:
    result = tune(tmp_path, failing_rows(lambda row: row["runtime.engine"] == "onnxruntime"), 14)
    assert result.exit_code == 0, result.output
    trials = stored_trials(f"sqlite:///{tmp_path / 'study.db'}", "s")
    errors = [t for t in trials if t.status == "error"]
    assert errors
    for trial in errors:
        assert f"trial {trial.number}: error: {REASON}" in result.stderr
    variants = [(t.config["prune.method"], t.config.get("prune.ratio")) for t in errors]
    assert len(variants) == len(set(variants)), "an error measured twice for one variant"
    summary = next(line for line in result.stderr.splitlines() if line.startswith("study s: "))
    assert f"{len(errors)} error ({REASON})" in summary
    assert summary.startswith(f"study s: {sum(t.counted for t in trials)} trials: ")


@pytest.mark.slow
def test_a_study_where_most_trials_failed_exits_5_saying_why(tmp_path: Path) -> None:
    baseline = {"runtime.engine": "torch_eager", "batch.size": 1, "prune.method": "none"}
    result = tune(tmp_path, failing_rows(lambda row: config_of(row) != baseline), 4)
    assert result.exit_code == EXIT_TRIALS_FAILED, result.output
    assert "most trials failed: 3 of the 4 trials that ran failed" in result.stderr
    # The skipped trial (never run) does not use up the budget of 4.
    assert f"5 trials: 3 error ({REASON}), 1 ok, 1 skipped (" in result.stderr
