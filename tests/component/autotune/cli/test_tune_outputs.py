"""Where `autotune tune` writes: the optimized model beside the tuned file (`--out`) unless
`--artifacts DIR` says otherwise, autotune-out/<study>/ with neither; on a database MLflow
store that is not a SQLite file, a new experiment's artifacts beside the tuned output, never
in the working directory. Replayed tunings: their model is the chosen row's config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from autotune.cli import app
from tests.conftest import postgres_databases
from tests.replay_tables import recorded_rows, write_request, write_table

runner = CliRunner()


def _tune(directory: Path, *options: str, tracking: str | None = None) -> None:
    """A replayed tune of twelve trials, run from the empty directory `directory/cwd`
    (seeded: some trial meets the constraints)."""
    cwd = directory / "cwd"
    cwd.mkdir()
    table = write_table(directory / "table.csv", recorded_rows())
    overrides = {"tracking": {"uri": tracking, "experiment": "tests"}} if tracking else {}
    request = write_request(directory, **overrides)
    args = ["tune", str(request), "--replay", str(table), "--trials", "12", "--seed", "0"]
    args += ["--storage", f"sqlite:///{directory / 'study.db'}", "--sampler", "random", *options]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output


def _written(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


@pytest.mark.slow
def test_the_model_goes_beside_the_tuned_file(tmp_path: Path) -> None:
    out = tmp_path / "elsewhere" / "tuned.yaml"
    _tune(tmp_path, "--out", str(out))
    tuned = yaml.safe_load(out.read_text())
    assert Path(tuned["artifact"]) == (out.parent / "model" / "config.json").resolve()
    assert _written(tmp_path / "cwd") == []  # no autotune-out/ where the command ran


@pytest.mark.slow
def test_artifacts_option_chooses_the_models_directory(tmp_path: Path) -> None:
    out = tmp_path / "elsewhere" / "tuned.yaml"
    _tune(tmp_path, "--out", str(out), "--artifacts", str(tmp_path / "kept"))
    tuned = yaml.safe_load(out.read_text())
    assert Path(tuned["artifact"]) == (tmp_path / "kept" / "model" / "config.json").resolve()
    assert _written(out.parent) == ["tuned.yaml"]
    assert _written(tmp_path / "cwd") == []


@pytest.mark.slow
def test_without_out_or_artifacts_the_outputs_go_to_autotune_out(tmp_path: Path) -> None:
    _tune(tmp_path, "--study", "s")
    assert _written(tmp_path / "cwd") == [
        "autotune-out/s/model/config.json",
        "autotune-out/s/tuned.yaml",
    ]


@pytest.mark.slow
@pytest.mark.integration
def test_mlflow_artifacts_on_postgresql_go_beside_the_tuned_output(tmp_path: Path) -> None:
    """MLflow's own default for a database store is ./mlruns of the working directory."""
    out = tmp_path / "elsewhere" / "tuned.yaml"
    with postgres_databases(1) as (mlflow_db,):
        _tune(tmp_path, "--out", str(out), tracking=mlflow_db)
        tuned = yaml.safe_load(out.read_text())
        client = MlflowClient(mlflow_db)
        experiment = client.get_experiment(tuned["mlflow"]["experiment_id"])
        assert experiment.artifact_location == (out.parent / "mlruns").resolve().as_uri()
        run = client.get_run(tuned["mlflow"]["run_id"])
        assert run.info.artifact_uri.startswith(experiment.artifact_location)
    assert [p for p in (out.parent / "mlruns").rglob("*") if p.is_file()]
    assert _written(tmp_path / "cwd") == []


def test_a_jsonl_tracker_writes_the_study_s_events_beside_the_tuned_file(tmp_path: Path) -> None:
    out = tmp_path / "elsewhere" / "tuned.yaml"
    _tune(tmp_path, "--out", str(out), "--tracker", "jsonl")
    lines = [json.loads(line) for line in (out.parent / "events.jsonl").read_text().splitlines()]
    trials = [line for line in lines if line["event"] == "trial"]
    assert len(trials) == 12 and trials[-1]["done"] == 12
    assert {line["study"] for line in lines} == {"replayed"}  # the replay request's name
    phases = [line["phase"] for line in lines if line["event"] == "phase"]
    assert [phase.split(":")[0] for phase in phases] == ["head to head", "export"], phases


def test_an_unknown_tracker_exits_2_naming_it(tmp_path: Path) -> None:
    request = write_request(tmp_path)
    result = runner.invoke(app, ["tune", str(request), "--tracker", "nonesuch"])
    assert result.exit_code == 2, result.output
    assert "tracker:" in result.output and "nonesuch" in result.output
