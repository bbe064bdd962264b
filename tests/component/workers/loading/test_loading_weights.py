"""Weights sent for a trusted architecture: loaded strictly from safetensors, then hashed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from autotune.core.contract import ModelRef
from autotune.core.errors import RequestError
from experiments.digits import model as digits_model
from tests.workers_support import REPO
from workers.loading.workloads import TorchModel, load_model, torch_sha256

ARCHITECTURE = "experiments.digits.model:architecture"


def load(weights: Path) -> TorchModel:
    loaded = load_model(ModelRef(entry_point=ARCHITECTURE, weights=str(weights)), [str(REPO)])
    assert isinstance(loaded, TorchModel)
    return loaded


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("weights") / "digits.safetensors"
    digits_model.main(["export-weights", str(path)])
    return path


def test_exported_weights_reproduce_the_trained_model(
    exported: Path, digits_module: torch.nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    loaded = load(exported)
    inputs = torch.from_numpy(digits[0])
    with torch.inference_mode():
        np.testing.assert_array_equal(loaded.module(inputs).numpy(), digits_module(inputs).numpy())
    assert loaded.sha256 == torch_sha256(digits_module)
    assert not loaded.module.training


def test_other_weights_give_another_sha256(exported: Path, tmp_path: Path) -> None:
    other = tmp_path / "seed1.safetensors"
    digits_model.main(["export-weights", str(other), "--seed", "1", "--epochs", "1"])
    assert load(other).sha256 != load(exported).sha256
    untrained = load_model(ModelRef(entry_point=ARCHITECTURE), [str(REPO)])
    assert untrained.sha256 not in (load(other).sha256, load(exported).sha256)


@pytest.mark.parametrize(
    ("change", "mismatch"),
    [
        (
            lambda s: {("renamed" if k == "features.0.bias" else k): v for k, v in s.items()},
            "renamed",
        ),
        (
            lambda s: {k: v.reshape(-1) if k == "features.0.weight" else v for k, v in s.items()},
            "size",
        ),
        (lambda s: {k: v for k, v in s.items() if k != "classifier.3.bias"}, "classifier.3.bias"),
    ],
    ids=["renamed", "reshaped", "missing"],
)
def test_mismatched_weights_are_refused(exported: Path, tmp_path: Path, change, mismatch) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.safetensors"
    save_file(change(load_file(exported)), str(path))
    with pytest.raises(RequestError) as info:
        load(path)
    assert (info.value.field, info.value.value) == ("model.weights", str(path))
    assert mismatch in info.value.rule


@pytest.mark.parametrize("content", [None, b"\x80\x04K\x01.", b"not safetensors at all"])
def test_missing_or_unreadable_weights_are_refused(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "w.safetensors"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(RequestError) as info:
        load(path)
    assert info.value.field == "model.weights"


def test_a_registered_model_must_be_resolved_before_loading() -> None:
    with pytest.raises(RequestError) as info:
        load_model(ModelRef(registered="models:/digits@tuned"), [str(REPO)])
    assert info.value.field == "model.registered"
