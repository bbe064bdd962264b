"""The MLflow writer process is spawned without running the caller's script again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
print("script body ran", flush=True)
from autotune.tracking import MlflowTracker
tracker = MlflowTracker("sqlite:///{tmp}/mlflow.db", "e", "s")
tracker.log_trial(0, 0, {{"batch.size": 1}}, {{"accuracy": 1.0}}, {{}})
tracker.finish("FINISHED")
"""


@pytest.mark.slow
def test_a_script_without_a_main_guard_runs_once(tmp_path: Path) -> None:
    script = tmp_path / "no_guard.py"
    script.write_text(SCRIPT.format(repo=str(REPO), tmp=tmp_path))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("script body ran") == 1
