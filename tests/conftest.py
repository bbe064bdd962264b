"""Shared fixtures: a small, fast digits request that writes only under tmp_path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent

FAST_MEASUREMENT = {
    "warmup_iters": 2,
    "min_iters": 10,
    "max_iters": 200,
    "min_seconds": 0.02,
    "max_seconds": 0.3,
}


def digits_request(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "name": "digits-test",
        "model": {"entry_point": "experiments.digits.model:build_model"},
        "data": {"entry_point": "experiments.digits.model:eval_data"},
        "constraints": {"max_accuracy_drop": 0.01},
        "search_space": "cpu.yaml",
        "budget": {"trials": 6},
        "measurement": FAST_MEASUREMENT,
        "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "tests"},
        "storage": f"sqlite:///{tmp_path / 'study.db'}",
    }
    request.update(overrides)
    return request


@pytest.fixture
def write_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a digits request file; run from a tmp dir so nothing lands in the repo."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(REPO))

    def write(**overrides: Any) -> Path:
        path = tmp_path / "request.yaml"
        path.write_text(yaml.safe_dump(digits_request(tmp_path, **overrides)))
        return path

    return write
