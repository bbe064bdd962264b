"""The same torch module gives the same `accuracy_judged_by` and the same `predict` shapes on
torch eager, ONNX Runtime and OpenVINO: its ONNX export carries how each output was judged
(its batch axis, judged whole, or left out), and the ONNX sessions honour it. An ONNX model
not exported by autotune keeps its declared dimensions' rules, alike on both ONNX engines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from autotune.core.contract import ConfigValue, ModelRef, Workload
from autotune.tuning import TuneOptions, run_tune
from tests.conftest import stored_trials
from tests.several_outputs import sequence_of_one
from tests.several_outputs_workloads import (
    SEVERAL,
    several_outputs,
    stale_workload,
    summing_model,
)
from tests.workers_support import skip_unless_runnable_here, spec_for
from workers import export_artifact, run_trial
from workers.cache import WorkloadCache
from workers.predictor import load_predictor

STORE = WorkloadCache()
ONNX_ENGINES = ["onnxruntime", "openvino"]


def of_a_batch_of_one() -> Workload:
    """Logits [1, 10] and a sequence [T, 1, C] (no batch axis: judged whole)."""
    fixed = ModelRef(entry_point=f"{SEVERAL}:sequence_of_one", fixed_batch=1)
    return several_outputs("sequence_of_one").model_copy(update={"model": fixed})


MODELS = {
    "left_out": (lambda: several_outputs("with_class_prior"), 4),
    "judged_whole": (of_a_batch_of_one, 1),
}


def judged_by(workload: Workload, engine: str, batch: int) -> str:
    config: dict[str, ConfigValue] = {"runtime.engine": engine, "batch.size": batch}
    skip_unless_runnable_here(config)
    result = run_trial(spec_for(workload, config), STORE)
    assert result.status == "ok", result.reason
    assert result.metrics is not None
    return result.metrics.accuracy_judged_by or ""


@pytest.mark.parametrize("engine", ONNX_ENGINES)
@pytest.mark.parametrize("model", MODELS)
def test_every_engine_says_the_same_of_how_it_judged(engine: str, model: str) -> None:
    make, batch = MODELS[model]
    on_torch = judged_by(make(), "torch_eager", batch)
    assert ("left out" in on_torch) is (model == "left_out"), on_torch
    assert judged_by(make(), engine, batch) == on_torch


def predicted(workload: Workload, engine: str, batch: int, directory: Path) -> Any:
    config: dict[str, ConfigValue] = {"runtime.engine": engine, "batch.size": batch}
    skip_unless_runnable_here(config)
    artifact = export_artifact(spec_for(workload, config), str(directory / engine), STORE)
    inputs = STORE.get(workload).data.inputs[:3]
    with load_predictor(artifact.path, workload.python_path) as predictor:
        return predictor.predict(inputs)


def shapes(outputs: Any) -> Any:
    """The nesting of `outputs` with each array's shape in its place (None kept)."""
    if isinstance(outputs, dict):
        return {name: shapes(value) for name, value in outputs.items()}
    if isinstance(outputs, tuple | list):
        return type(outputs)(shapes(value) for value in outputs)
    return None if outputs is None else np.shape(outputs)


@pytest.mark.parametrize("engine", ONNX_ENGINES)
@pytest.mark.parametrize("model", MODELS)
def test_predict_gives_the_same_shapes_on_every_engine(
    tmp_path: Path, engine: str, model: str
) -> None:
    make, batch = MODELS[model]
    on_torch = predicted(make(), "torch_eager", batch, tmp_path)
    on_onnx = predicted(make(), engine, batch, tmp_path)
    assert shapes(on_onnx) == shapes(on_torch)


@pytest.mark.parametrize("engine", ONNX_ENGINES)
def test_an_exported_output_judged_whole_is_each_samples_own(tmp_path: Path, engine: str) -> None:
    """[T, 1, C] of a batch of one, stacked per sample: [N, T, 1, C], as the module returns it
    for each sample."""
    outputs = predicted(of_a_batch_of_one(), engine, 1, tmp_path)
    assert outputs["sequence"].shape == (3, 16, 1, 32)
    inputs = STORE.get(of_a_batch_of_one()).data.inputs[1:2]
    with torch.inference_mode():
        second = sequence_of_one()(torch.from_numpy(inputs))["sequence"]
    np.testing.assert_allclose(outputs["sequence"][1], second.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("engine", ONNX_ENGINES)
def test_an_onnx_model_not_exported_by_autotune_names_its_output_left_out(
    tmp_path: Path, engine: str
) -> None:
    skip_unless_runnable_here({"runtime.engine": engine}, "onnx")
    workload = stale_workload(summing_model(tmp_path, doubled=True))
    result = run_trial(spec_for(workload, {"runtime.engine": engine}), WorkloadCache())
    assert result.status == "ok", result.reason
    told = result.metrics.accuracy_judged_by or ""  # type: ignore[union-attr]
    assert told.endswith("; left out: 'total' has no batch axis (declared 'total' (float32 []))")


def one_trial_an_engine(path: Path) -> Path:
    engines = ["torch_eager", *ONNX_ENGINES]
    dimensions = [
        {"name": "runtime.engine", "values": engines, "baseline": engines},
        {"name": "runtime.threads", "values": [1], "baseline": 1},
        {"name": "batch.size", "values": [4], "baseline": 4},
        {"name": "precision.mode", "values": ["fp32"], "baseline": "fp32"},
    ]
    path.write_text(yaml.safe_dump({"name": "engines", "dimensions": dimensions}))
    return path


@pytest.mark.slow
def test_tuned_on_every_engine_an_output_left_out_is_told_alike(
    write_request, tmp_path: Path
) -> None:
    skip_unless_runnable_here({"runtime.engine": "openvino"})
    request = write_request(
        model={"entry_point": f"{SEVERAL}:with_class_prior"},
        metric={"kind": "fidelity"},
        search_space=str(one_trial_an_engine(tmp_path / "engines.yaml")),
        budget={"trials": 3},
    )
    run_tune(request, TuneOptions(executor="inprocess", seed=0))
    trials = stored_trials(f"sqlite:///{tmp_path / 'study.db'}", "digits-test")
    told = {
        t.config["runtime.engine"]: t.metrics.get("accuracy_judged_by")
        for t in trials
        if t.metrics is not None
    }
    assert sorted(told) == ["onnxruntime", "openvino", "torch_eager"], told
    assert "left out: 'output_1'" in told["torch_eager"], told
    assert len(set(told.values())) == 1, told
