"""A model that takes only batches of one is tuned as it comes: every trial runs at batch 1,
OpenVINO and int8 are measured, the export writes its example and the tuned file is written,
and the tuned model answers more samples than its batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from autotune.core.artifacts import INPUT_EXAMPLE_FILE
from autotune.tuning import TuneOptions, run_tune
from tests.conftest import stored_trials
from tests.fixed_batch_models import CLASSES, fixed_batch_classifier, labelled_data

INPROCESS = TuneOptions(executor="inprocess", seed=0)


@pytest.mark.slow
def test_a_batch_of_one_onnx_model_is_tuned_at_batch_one(write_request, tmp_path: Path) -> None:
    model = fixed_batch_classifier(tmp_path / "captcha.onnx", batch=1)
    data = labelled_data(model, tmp_path / "data.npz")
    request = write_request(
        name="fixed-batch",
        model={"onnx": model.name},
        data={"npz": data.name},
        constraints={"max_accuracy_drop": 0.05},
        search_space="cpu.yaml",
    )
    _, written = run_tune(request, INPROCESS)

    tuned = yaml.safe_load(written.read_text())
    assert tuned["config"]["batch.size"] == 1
    trials = stored_trials(f"sqlite:///{tmp_path / 'study.db'}", "fixed-batch")
    assert {t.config["batch.size"] for t in trials} == {1}
    measured = [t.config for t in trials if t.metrics is not None]
    assert len(measured) == len(trials)
    assert any(config["runtime.engine"] == "openvino" for config in measured)
    assert any(str(config["precision.mode"]).startswith("int8") for config in measured)

    artifact = Path(tuned["artifact"]).parent
    with np.load(artifact / INPUT_EXAMPLE_FILE) as example:
        assert example["x"].shape[0] == 1

    import autotune

    inputs = np.load(data)["inputs"][:5]
    with autotune.load(written) as predictor:
        assert predictor.predict(inputs).shape == (5, CLASSES)
