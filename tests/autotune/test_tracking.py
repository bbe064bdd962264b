"""Where MLflow keeps a study's artifacts."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from autotune.tracking import Tracker, artifact_location


def test_a_sqlite_stores_artifacts_live_beside_it_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    tracker = Tracker(uri, "tests", "study")
    location = MlflowClient(uri).get_experiment(tracker.experiment_id).artifact_location
    assert location == (tmp_path / "store" / "mlruns").as_uri()
    assert not (elsewhere / "mlruns").exists()


def test_a_relative_sqlite_path_and_other_stores() -> None:
    assert artifact_location("sqlite:///mlflow.db") == (Path.cwd() / "mlruns").as_uri()
    assert artifact_location("postgresql+psycopg://u@h/db") is None
    assert artifact_location("http://127.0.0.1:5000") is None
