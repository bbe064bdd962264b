"""Service tests run in their own tmp_path (the autouse fixture of this directory's
conftest): where a tracking store defaults a new experiment's artifacts to ./mlruns, they
land there and not in the clone."""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient

from tests.autotune.service.support import sqlite_settings


def test_a_new_experiments_artifacts_land_under_tmp_path(tmp_path: Path, mlflow_uri: str) -> None:
    from autotune.tracking import MlflowTracker

    settings = sqlite_settings(tmp_path)
    assert settings.tracking_uri == mlflow_uri  # the store is there, migrated and empty
    tracker = MlflowTracker(settings.tracking_uri, settings.experiment, "job-x")
    experiment = MlflowClient(settings.tracking_uri).get_experiment(tracker.experiment_id)
    location = Path(experiment.artifact_location.removeprefix("file://"))
    assert location.is_relative_to(tmp_path), location
