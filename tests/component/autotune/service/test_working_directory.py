"""Service tests run in their own tmp_path (the autouse fixture of this directory's
conftest): where a tracking store defaults a new experiment's artifacts to ./mlruns, they
land there and not in the clone. The service itself never leaves them in its working
directory: a job's go under its data directory, whatever the database store."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from autotune.cli import app
from autotune.service.db import Database
from autotune.service.jobs import JobStore
from autotune.service.runner import JobRunner
from autotune.service.settings import ServiceSettings
from autotune.service.submission import prepare_job
from tests.conftest import postgres_databases
from tests.service_support import (
    principal,
    service_request,
    settings_for,
    sqlite_settings,
)


def test_a_new_experiments_artifacts_land_under_tmp_path(tmp_path: Path, mlflow_uri: str) -> None:
    from autotune.tracking import MlflowTracker

    settings = sqlite_settings(tmp_path)
    assert settings.tracking_uri == mlflow_uri  # the store is there, migrated and empty
    tracker = MlflowTracker(settings.tracking_uri, settings.experiment, "job-x")
    experiment = MlflowClient(settings.tracking_uri).get_experiment(tracker.experiment_id)
    location = Path(experiment.artifact_location.removeprefix("file://"))
    assert location.is_relative_to(tmp_path), location


@pytest.mark.slow
@pytest.mark.integration
def test_a_jobs_mlflow_artifacts_on_postgresql_land_under_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow puts a new experiment's artifacts on a database store in ./mlruns of the
    process, wherever it runs; the service's go under its data directory."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with postgres_databases(1) as (mlflow_db,):
        service = sqlite_settings(tmp_path)
        settings = settings_for(tmp_path, service.db, service.storage, mlflow_db)
        db = Database(settings.db)
        alice = principal(db)
        job, _ = JobStore(db).submit(prepare_job(service_request(trials=2), alice, settings))
        assert JobRunner(db, settings).run_once() == job.id
        done = JobStore(db).get_any(job.id)
        assert done is not None and done.state == "succeeded", done and done.error

        root = (tmp_path / "data" / "mlflow-artifacts").resolve()
        client = MlflowClient(settings.tracking_uri)
        experiment = client.get_experiment_by_name(settings.experiment)
        assert experiment is not None and experiment.artifact_location == root.as_uri()
        run = client.get_run(done.result["mlflow"]["run_id"])  # type: ignore[index]
        assert run.info.artifact_uri.startswith(root.as_uri())
        assert [p for p in root.rglob("*") if p.is_file()], "the run's artifacts are there"
        db.close()
    assert list(cwd.iterdir()) == []


def test_without_a_data_dir_the_service_keeps_its_files_in_the_user_s_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$XDG_DATA_HOME/autotune, else ~/.local/share/autotune (a relative XDG_DATA_HOME is
    ignored, as the XDG rules say): never the working directory, which `serve --help` says."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    settings = ServiceSettings()
    assert settings.data_dir == tmp_path / "xdg" / "autotune"
    assert settings.job_dir("j").is_relative_to(tmp_path / "xdg" / "autotune")
    assert Path(settings.mlflow_artifact_root).is_relative_to(tmp_path / "xdg" / "autotune")
    for unset in ("", "relative/data"):
        monkeypatch.setenv("XDG_DATA_HOME", unset)
        expected = tmp_path / "home" / ".local" / "share" / "autotune"
        assert ServiceSettings().data_dir == expected
    assert ServiceSettings().data_dir.is_absolute()
    assert not ServiceSettings().data_dir.is_relative_to(Path.cwd())
    shown = CliRunner().invoke(app, ["serve", "--help"]).output
    assert "(default: $XDG_DATA_HOME/autotune, ~/.local/share/autotune)" in " ".join(shown.split())
