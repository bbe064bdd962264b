"""The path a newcomer takes through MLflow's UI, walked in headless Chromium by
experiments/mlflow_review.py: the UI's root in a fresh profile, the experiment, its link to
the study's view of the runs, the charts, the study's run and the Pareto report. Every check
the script makes in the pages must pass. Skipped where Chromium is not installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
        reason="needs Chromium (Debian's chromium package) to walk the MLflow UI",
    ),
]


def test_a_newcomer_reaches_the_trials_and_the_trade_off(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(REPO / "experiments" / "mlflow_review.py"),
        *("--trials", "6", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["failed"] == []
    shots = {path.name for path in (tmp_path / "out").glob("*.png")}
    assert {"home.png", "experiment.png", "runs-table.png", "parent-run.png"} <= shots
