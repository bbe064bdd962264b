"""A torch module that takes only batches of one, tuned as the request says
(`model.fixed_batch: 1`): its space holds batch 1 alone, every trial (torch eager, ONNX
Runtime and OpenVINO, through an ONNX export of the batch of one) is measured at batch 1 with
none in error, and the tuned file is written (the in-process executor, one trial an engine)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.tuning import TuneOptions, run_tune
from tests.conftest import stored_trials
from tests.workers_support import skip_unless_runnable_here

ENGINES = ["torch_eager", "onnxruntime", "openvino"]


def engines_at_two_batch_sizes(path: Path) -> Path:
    dimensions = [
        {"name": "runtime.engine", "values": ENGINES, "baseline": ENGINES},
        {"name": "runtime.threads", "values": [1], "baseline": 1},
        {"name": "batch.size", "values": [1, 4], "baseline": 4},
        {"name": "precision.mode", "values": ["fp32"], "baseline": "fp32"},
    ]
    path.write_text(yaml.safe_dump({"name": "engines", "dimensions": dimensions}))
    return path


@pytest.mark.slow
def test_a_torch_module_of_a_batch_of_one_is_tuned_at_one(write_request, tmp_path: Path) -> None:
    skip_unless_runnable_here({"runtime.engine": "openvino"})
    request = write_request(
        model={"entry_point": "tests.fixed_batch_models:batch_of_one", "fixed_batch": 1},
        search_space=str(engines_at_two_batch_sizes(tmp_path / "engines.yaml")),
        budget={"trials": len(ENGINES)},
    )
    _, written = run_tune(request, TuneOptions(executor="inprocess", seed=0))
    trials = stored_trials(f"sqlite:///{tmp_path / 'study.db'}", "digits-test")
    statuses = {t.config["runtime.engine"]: (t.status, t.reason) for t in trials}
    assert sorted(statuses) == sorted(ENGINES), statuses
    assert {t.config["batch.size"] for t in trials} == {1}
    assert all(t.status != "error" for t in trials), statuses
    measured = {t.config["runtime.engine"] for t in trials if t.metrics is not None}
    assert {"onnxruntime", "openvino"} <= measured, statuses
    tuned = yaml.safe_load(written.read_text())
    assert tuned["config"]["batch.size"] == 1
