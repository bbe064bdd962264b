"""What `make` runs, read with `make -n` (nothing is run): setup shows its progress, the demo
installs what running autotune needs and no development tool, the tests and the linters add
the development tools, and the MLflow UI starts with one worker and says where it listens."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO


def dry_run(*args: str) -> str:
    done = subprocess.run(
        ["make", "-n", *args], cwd=REPO, capture_output=True, text=True, check=True
    )
    return done.stdout


def installs(*targets: str) -> list[str]:
    """The pip installs `make TARGET` runs in a venv that does not exist yet."""
    commands = dry_run("-B", "VENV=/nonexistent-venv", *targets)
    return [line for line in commands.splitlines() if "pip install" in line]


def test_setup_lets_pip_show_its_progress() -> None:
    commands = dry_run("-B", "VENV=/nonexistent-venv", "/nonexistent-venv/.installed")
    setup = installs("/nonexistent-venv/.installed")
    assert len(setup) == 2 and not any("--quiet" in line for line in setup)
    assert "setup: installing torch" in commands


def test_the_demo_installs_the_runtime_extras_and_no_development_tool() -> None:
    torch, autotune = installs("demo")
    assert "torch==" in torch
    assert autotune.endswith('-e ".[cpu,hf]"') or autotune.endswith('-e ".[gpu,hf]"')


def test_tests_and_linters_add_the_development_tools() -> None:
    for target in ("test", "test-unit", "test-component", "test-system", "lint"):
        *runtime, dev = installs(target)
        assert runtime == installs("demo"), target
        assert dev.endswith(',hf,dev]"'), (target, dev)


def test_the_mlflow_ui_runs_one_worker_and_prints_its_url() -> None:
    commands = dry_run("-o", ".venv/.installed", "mlflow-ui", "MLFLOW_PORT=5123")
    assert "MLflow UI: http://127.0.0.1:5123" in commands
    [ui] = [line for line in commands.splitlines() if "mlflow ui" in line]
    assert "--workers 1" in ui and "--port 5123" in ui
