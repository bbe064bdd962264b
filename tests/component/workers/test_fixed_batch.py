"""A model whose input (or the request's `model.fixed_batch`) fixes the batch size: the
inspection reports that size, an export's input example is one batch of it, and a reloaded
artifact answers any number of samples in calls of the model's size. A request that fixes
another size than an ONNX model declares is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from autotune.core.artifacts import INPUT_EXAMPLE_FILE, OUTPUT_EXAMPLE_FILE
from autotune.core.contract import ConfigValue, DataRef, ModelRef, Workload
from autotune.core.errors import RequestError
from tests.fixed_batch_models import (
    CLASSES,
    FEATURES,
    batch_of_one,
    fixed_batch_classifier,
    labelled_data,
)
from tests.workers_support import digits_workload, skip_unless_runnable_here, spec_for
from workers import export_artifact, inspect_workload, run_trial
from workers.cache import WorkloadCache
from workers.predictor import load_predictor
from workers.serving import _load_pyfunc


def workload(directory: Path, batch: int | None) -> Workload:
    model = fixed_batch_classifier(directory / "classifier.onnx", batch)
    dynamic = fixed_batch_classifier(directory / "dynamic.onnx", None)
    data = labelled_data(dynamic, directory / "data.npz")
    return Workload(model=ModelRef(onnx=str(model)), data=DataRef(npz=str(data)))


@pytest.mark.parametrize(("batch", "reported"), [(1, 1), (4, 4), (None, None)])
def test_the_inspection_reports_the_batch_the_inputs_fix(
    tmp_path: Path, batch: int | None, reported: int | None
) -> None:
    assert inspect_workload(workload(tmp_path, batch), WorkloadCache()).fixed_batch == reported


CONFIGS: list[dict[str, ConfigValue]] = [
    {"runtime.engine": "onnxruntime", "batch.size": 1},
    {"runtime.engine": "onnxruntime", "precision.mode": "int8_dynamic", "batch.size": 1},
    {"runtime.engine": "openvino", "batch.size": 1},
]


def config_id(config: dict[str, ConfigValue]) -> str:
    return f"{config['runtime.engine']}-{config.get('precision.mode', 'fp32')}"


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_a_batch_of_one_model_exports_one_sample_and_predicts_any_number(
    tmp_path: Path, config: dict[str, ConfigValue]
) -> None:
    skip_unless_runnable_here(config, "onnx")
    fixed = workload(tmp_path, batch=1)
    export_artifact(spec_for(fixed, config), str(tmp_path / "artifact"), WorkloadCache())
    with np.load(tmp_path / "artifact" / INPUT_EXAMPLE_FILE) as example:
        assert example["x"].shape == (1, FEATURES)
    with np.load(tmp_path / "artifact" / OUTPUT_EXAMPLE_FILE) as outputs:
        assert outputs["y"].shape == (1, CLASSES)
    inputs = np.load(tmp_path / "data.npz")["inputs"][:5]
    with load_predictor(str(tmp_path / "artifact")) as predictor:
        assert predictor.predict(inputs).shape == (5, CLASSES)
    served = _load_pyfunc(str(tmp_path / "artifact"))
    try:
        assert served.predict(inputs)["y"].shape == (5, CLASSES)
    finally:
        served.predictor.close()


def test_a_dynamic_batch_model_keeps_an_example_of_two_samples(tmp_path: Path) -> None:
    dynamic = workload(tmp_path, batch=None)
    export_artifact(spec_for(dynamic, {"runtime.engine": "onnxruntime"}), str(tmp_path / "a"))
    with np.load(tmp_path / "a" / INPUT_EXAMPLE_FILE) as example:
        assert example["x"].shape == (2, FEATURES)


def test_a_request_that_fixes_another_batch_than_the_model_declares_is_refused(
    tmp_path: Path,
) -> None:
    declared = workload(tmp_path, batch=4)
    fixed_at_one = declared.model_copy(
        update={"model": ModelRef(onnx=declared.model.onnx, fixed_batch=1)}
    )
    with pytest.raises(RequestError) as refused:
        inspect_workload(fixed_at_one, WorkloadCache())
    assert refused.value.field == "model.fixed_batch" and refused.value.value == 1
    assert "the ONNX model's inputs declare (4)" in str(refused.value)


def test_the_request_fixes_the_batch_of_a_dynamic_onnx_model(tmp_path: Path) -> None:
    dynamic = workload(tmp_path, batch=None)
    fixed = dynamic.model_copy(update={"model": ModelRef(onnx=dynamic.model.onnx, fixed_batch=3)})
    store = WorkloadCache()
    info = inspect_workload(fixed, store)
    assert (info.fixed_batch, info.fixed_batch_by) == (3, "request")
    refused = run_trial(spec_for(fixed, {"runtime.engine": "onnxruntime", "batch.size": 4}), store)
    assert refused.status == "unsupported" and "only takes batches of 3" in (refused.reason or "")
    export_artifact(spec_for(fixed, {"batch.size": 3}), str(tmp_path / "artifact"), store)
    with np.load(tmp_path / "artifact" / INPUT_EXAMPLE_FILE) as example:
        assert example["x"].shape == (3, FEATURES)
    inputs = np.load(tmp_path / "data.npz")["inputs"][:5]
    with load_predictor(str(tmp_path / "artifact")) as predictor:
        assert predictor.session.fixed_batch == 3
        assert predictor.predict(inputs).shape == (5, CLASSES)


BATCH_OF_ONE = ModelRef(entry_point="tests.fixed_batch_models:batch_of_one", fixed_batch=1)


def test_a_torch_module_fixed_at_one_by_the_request_runs_at_one_alone() -> None:
    fixed = digits_workload(model=BATCH_OF_ONE)
    store = WorkloadCache()
    info = inspect_workload(fixed, store)
    assert (info.fixed_batch, info.fixed_batch_by) == (1, "request")
    for engine in ("torch_eager", "torch_compile", "onnxruntime"):
        assert (
            run_trial(spec_for(fixed, {"runtime.engine": engine, "batch.size": 1}), store).status
            == "ok"
        )
        refused = run_trial(spec_for(fixed, {"runtime.engine": engine, "batch.size": 4}), store)
        assert "only takes batches of 1" in (refused.reason or ""), (engine, refused.reason)


def test_without_the_requests_fixed_batch_a_batch_of_one_module_is_refused() -> None:
    unfixed = digits_workload(model=ModelRef(entry_point=BATCH_OF_ONE.entry_point))
    with pytest.raises(RequestError, match="inputs must fit the model"):
        inspect_workload(unfixed, WorkloadCache())


@pytest.mark.parametrize("engine", ["torch_eager", "onnxruntime", "openvino"])
def test_a_torch_module_of_a_batch_of_one_exports_and_predicts_any_number(
    tmp_path: Path, engine: str
) -> None:
    config: dict[str, ConfigValue] = {"runtime.engine": engine, "batch.size": 1}
    skip_unless_runnable_here(config)
    fixed = digits_workload(model=BATCH_OF_ONE)
    store = WorkloadCache()
    artifact = export_artifact(spec_for(fixed, config), str(tmp_path), store)
    if engine != "torch_eager":  # the ONNX graph takes the batch of one alone, as the module
        with np.load(tmp_path / INPUT_EXAMPLE_FILE) as example:
            assert example["input"].shape == (1, 1, 8, 8)
    inputs = store.get(fixed).data.inputs[:5]
    with torch.inference_mode():
        expected = torch.cat(
            [batch_of_one()(torch.from_numpy(inputs[i : i + 1])) for i in range(5)]
        )
    with load_predictor(artifact.path, fixed.python_path) as predictor:
        assert predictor.session.fixed_batch == 1
        np.testing.assert_allclose(predictor.predict(inputs), expected.numpy(), atol=1e-4)
