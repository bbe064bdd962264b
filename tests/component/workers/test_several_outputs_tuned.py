"""A torch model that returns several outputs tunes on torch eager, ONNX Runtime and OpenVINO
with no trial in error or refused (the in-process executor, one trial an engine; a trial the
search screens out for its speed is fine)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.tuning import TuneOptions, run_tune
from tests.conftest import stored_trials
from tests.workers_support import skip_unless_runnable_here

ENGINES = ["torch_eager", "onnxruntime", "openvino"]


def one_trial_an_engine(path: Path) -> Path:
    dimensions = [
        {"name": "runtime.engine", "values": ENGINES, "baseline": ENGINES},
        {"name": "runtime.threads", "values": [1], "baseline": 1},
        {"name": "batch.size", "values": [4], "baseline": 4},
        {"name": "precision.mode", "values": ["fp32"], "baseline": "fp32"},
    ]
    path.write_text(yaml.safe_dump({"name": "engines", "dimensions": dimensions}))
    return path


@pytest.mark.parametrize("entry", ["three_outputs", "named_outputs"])
def test_a_model_of_several_outputs_tunes_on_every_engine(
    write_request, tmp_path: Path, entry: str
) -> None:
    skip_unless_runnable_here({"runtime.engine": "openvino"})
    request = write_request(
        model={"entry_point": f"tests.several_outputs:{entry}"},
        metric={"kind": "fidelity"},
        search_space=str(one_trial_an_engine(tmp_path / "engines.yaml")),
        budget={"trials": len(ENGINES)},
    )
    _, written = run_tune(request, TuneOptions(executor="inprocess", seed=0))
    trials = stored_trials(f"sqlite:///{tmp_path / 'study.db'}", "digits-test")
    engines = {t.config["runtime.engine"]: t.status for t in trials}
    assert sorted(engines) == sorted(ENGINES)
    failed = [(t.config["runtime.engine"], t.status, t.reason) for t in trials]
    assert not set(engines.values()) & {"error", "unsupported"}, failed
    judged_by = yaml.safe_load(written.read_text())["metrics"]["accuracy_judged_by"]
    assert "the worst of its outputs" in judged_by
