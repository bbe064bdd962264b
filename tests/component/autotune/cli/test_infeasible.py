"""A bound no configuration can meet is named as soon as the baseline shows it, after each
trial while none meets it, and in the final message with the best reached and the bound that
would be met."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.cli.shared import EXIT_INFEASIBLE
from tests.conftest import stored_trials
from tests.replay_tables import recorded_rows, write_request, write_table

# The recorded table's best throughput is 1,981 samples/s; its baseline's 400.
IMPOSSIBLE = {"min_throughput_per_s": 84000.0, "max_accuracy_drop": 0.02}


@pytest.mark.slow
def test_an_impossible_bound_is_named_from_the_baseline_on(tmp_path: Path) -> None:
    table = write_table(tmp_path / "table.csv", recorded_rows())
    request = write_request(tmp_path, constraints=IMPOSSIBLE)
    args = ["tune", str(request), "--replay", str(table), "--trials", "6", "--seed", "0"]
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    args += ["--storage", storage, "--study", "s", "--sampler", "random"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        result = CliRunner().invoke(app, args)
    assert result.exit_code == EXIT_INFEASIBLE, result.output
    lines = result.stderr.splitlines()
    told = [i for i, line in enumerate(lines) if line.startswith("tuning ")]
    assert len(told) == 6
    notes = [lines[i + 1] for i in told]
    assert notes[0] == (
        "note: min_throughput_per_s 84,000 is met by no configuration so far: the best "
        "reached is 400 samples/s (trial 0), 210× below the bound"
    )
    assert all(note.startswith("note: min_throughput_per_s 84,000 is met by no") for note in notes)
    (final,) = [line for line in lines if line.startswith("no tuned configuration:")]
    said = re.fullmatch(
        r"no tuned configuration: none of (\d+) measured configurations meets the constraints: "
        r"min_throughput_per_s 84,000 is met by none of them: the best reached is ([\d,]+) "
        r"samples/s \(trial \d+\), [\d.]+× below the bound; "
        r"constraints\.min_throughput_per_s: (\d+) would be met",
        final,
    )
    assert said is not None, final
    measured = {str(sorted(t.config.items())) for t in stored_trials(storage, "s") if t.measured}
    assert int(said[1]) == len(measured)  # each configuration once, repeats aside
    assert int(said[3]) <= int(said[2].replace(",", "")) < 84000
