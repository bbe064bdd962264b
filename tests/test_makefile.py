"""What `make` runs, read with `make -n` (nothing is run): setup shows its progress, and the
MLflow UI starts with one worker and says where it listens."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO


def dry_run(*args: str) -> str:
    done = subprocess.run(
        ["make", "-n", *args], cwd=REPO, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_setup_lets_pip_show_its_progress() -> None:
    commands = dry_run("-B", "VENV=/nonexistent-venv", "/nonexistent-venv/.installed")
    installs = [line for line in commands.splitlines() if "pip install" in line]
    assert len(installs) == 2 and not any("--quiet" in line for line in installs)
    assert "setup: installing torch" in commands


def test_the_mlflow_ui_runs_one_worker_and_prints_its_url() -> None:
    commands = dry_run("-o", ".venv/.installed", "mlflow-ui", "MLFLOW_PORT=5123")
    assert "MLflow UI: http://127.0.0.1:5123" in commands
    [ui] = [line for line in commands.splitlines() if "mlflow ui" in line]
    assert "--workers 1" in ui and "--port 5123" in ui
