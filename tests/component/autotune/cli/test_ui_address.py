"""The MLflow UI command tune prints listens on a free port, and the review link names that
port and the experiment the store holds the study's run in: never a UI of another store
that already holds MLflow's port 5000."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from autotune.cli import tune


def test_a_taken_port_is_never_printed() -> None:
    first = tune.free_port()
    with socket.create_server((tune.UI_HOST, first)):
        second = tune.free_port()
    assert second != first
    with socket.create_server((tune.UI_HOST, second)):  # free: a UI can listen on it
        pass


def test_the_command_and_the_link_name_the_free_port_and_the_studys_experiment(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.create_experiment("another")  # the study's experiment is not the store's first
    experiment = client.create_experiment("tests")
    run = client.create_run(experiment).info.run_id
    with socket.create_server((tune.UI_HOST, 0)) as taken:  # another UI's port
        port = tune.free_port()
        assert port != taken.getsockname()[1]
    recorded = {"tracking_uri": uri, "experiment_id": experiment, "run_id": run}

    command = tune._ui_command(uri, port, tmp_path)
    assert (
        command
        == f"{Path(sys.executable).parent / 'mlflow'} ui --backend-store-uri {uri} --port {port}"
    )
    link = tune._review_address(recorded, "s", port)
    assert link.startswith(f"http://127.0.0.1:{port}/#/experiments/{experiment}/runs?")


def test_a_store_without_the_studys_run_gives_no_link(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    recorded = {"tracking_uri": uri, "experiment_id": "1", "run_id": "0" * 32}
    said = tune._review_address(recorded, "s", 5001)
    assert said.startswith(f"the study's run is not in {uri}")
