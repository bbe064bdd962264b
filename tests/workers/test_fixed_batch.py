"""A model whose input fixes the batch size: the inspection reports that size, an export's
input example is one batch of it, and a reloaded artifact answers any number of samples in
calls of the model's size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.core.artifacts import INPUT_EXAMPLE_FILE, OUTPUT_EXAMPLE_FILE
from autotune.core.contract import ConfigValue, DataRef, ModelRef, Workload
from tests.workers.conftest import skip_unless_runnable_here, spec_for
from tests.workers.fixed_batch_models import (
    CLASSES,
    FEATURES,
    fixed_batch_classifier,
    labelled_data,
)
from workers import export_artifact, inspect_workload
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
