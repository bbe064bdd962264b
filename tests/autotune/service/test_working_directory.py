"""Service tests run in their own tmp_path (the autouse fixture of this directory's
conftest): where a tracking store defaults a new experiment's artifacts to ./mlruns, they
land there and not in the clone. The service itself never leaves them in its working
directory: a job's go under its data directory, whatever the database store."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from autotune.service.db import Database
from autotune.service.jobs import JobStore
from autotune.service.runner import JobRunner
from autotune.service.submission import prepare_job
from tests.autotune.service.support import (
    principal,
    service_request,
    settings_for,
    sqlite_settings,
)
from tests.conftest import postgres_databases


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
