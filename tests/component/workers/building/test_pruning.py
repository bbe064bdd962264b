"""Structured channel pruning and 2:4 semi-structured sparsity."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import cast

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from torch import nn

from autotune.core.contract import ConfigValue, ModelRef
from autotune.core.errors import Unsupported
from autotune.core.knobs.config import parse_config
from tests.workers_support import digits_workload, spec_for
from workers import evaluate_artifact, export_artifact, run_trial
from workers.building import transforms
from workers.building.pruning import (
    apply_2_4_mask,
    find_prunable_chains,
    mask_2_4,
    prune_structured,
    removed_count,
    sparsify_2_4,
)
from workers.building.variants import BuildContext, OnnxVariant, TorchVariant
from workers.cache import WorkloadCache

STORE = WorkloadCache(capacity=4)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(tensor.shape) for name, tensor in module.state_dict().items()}


def outputs(module: nn.Module, inputs: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return cast(np.ndarray, module(torch.from_numpy(inputs)).numpy())


def top1(module: nn.Module, digits: tuple[np.ndarray, np.ndarray]) -> float:
    return float(np.mean(outputs(module, digits[0]).argmax(axis=1) == digits[1]))


# --- structured ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "channels", "removed"),
    [(0.25, 16, 4), (0.5, 10, 5), (0.25, 10, 3), (0.1, 64, 6), (0.95, 2, 1), (0.95, 1, 0)],
)
def test_removed_count_rounds_half_up_and_keeps_a_channel(
    ratio: float, channels: int, removed: int
) -> None:
    assert removed_count(ratio, channels) == removed


def test_the_digits_cnn_has_three_chains(digits_module: nn.Module) -> None:
    chains = [(c.producer, c.consumer, c.block) for c in find_prunable_chains(digits_module)]
    assert chains == [
        ("features.0", "features.2", 1),
        ("features.2", "classifier.1", 16),  # across MaxPool and Flatten: 4 x 4 per channel
        ("classifier.1", "classifier.3", 1),
    ]


@pytest.mark.parametrize("ratio", [0.25, 0.5])
def test_structured_pruning_shrinks_the_digits_layers(
    digits_module: nn.Module, digits: tuple[np.ndarray, np.ndarray], ratio: float
) -> None:
    before = shapes(digits_module)
    pruned = prune_structured(digits_module, ratio)
    conv1, conv2, fc1 = (n - removed_count(ratio, n) for n in (16, 32, 64))
    assert shapes(pruned) == {
        "features.0.weight": (conv1, 1, 3, 3), "features.0.bias": (conv1,),
        "features.2.weight": (conv2, conv1, 3, 3), "features.2.bias": (conv2,),
        "classifier.1.weight": (fc1, conv2 * 16), "classifier.1.bias": (fc1,),
        "classifier.3.weight": (10, fc1), "classifier.3.bias": (10,),
    }  # fmt: skip
    assert shapes(digits_module) == before, "the original is untouched"
    assert type(pruned) is type(digits_module)
    assert outputs(pruned, digits[0][:5]).shape == (5, 10)


def test_structured_pruning_at_ratio_zero_is_the_identity(
    digits_module: nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    pruned = prune_structured(digits_module, 0.0)
    assert shapes(pruned) == shapes(digits_module)
    np.testing.assert_array_equal(outputs(pruned, digits[0]), outputs(digits_module, digits[0]))


def test_structured_pruning_removes_the_weakest_channels(
    digits_module: nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    """Channels whose weights and bias are zero output ReLU(0) = 0: removing exactly those (and
    the consumer's matching inputs, in blocks of 16 after the Flatten) changes no output."""
    model = copy.deepcopy(digits_module)
    with torch.no_grad():
        for name, count in (("features.0", 4), ("features.2", 8), ("classifier.1", 16)):
            layer = cast(nn.Conv2d | nn.Linear, model.get_submodule(name))
            dead = torch.arange(count) * (layer.weight.shape[0] // count) + 1
            layer.weight[dead] = 0
            cast(torch.Tensor, layer.bias)[dead] = 0
    pruned = prune_structured(model, 0.25)
    np.testing.assert_allclose(
        outputs(pruned, digits[0]), outputs(model, digits[0]), rtol=0, atol=1e-5
    )


def test_structured_pruning_keeps_the_digits_cnn_accurate(
    digits_module: nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    # Measured without fine-tuning: fp32 98.2 %, ratio 0.1: 98.4 %, 0.25: 93.8 %, 0.5: 84.4 %.
    baseline = top1(digits_module, digits)
    assert top1(prune_structured(digits_module, 0.1), digits) >= baseline - 0.01
    assert top1(prune_structured(digits_module, 0.25), digits) >= baseline - 0.06
    assert top1(prune_structured(digits_module, 0.5), digits) < baseline - 0.05


class FeedForwardBlock(nn.Module):
    """A transformer-style residual block: x + fc2(dropout(gelu(fc1(norm(x)))))."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.fc1 = nn.Linear(8, 32)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.drop(self.act(self.fc1(self.norm(x)))))


def test_a_feed_forward_block_prunes_its_hidden_layer_only() -> None:
    torch.manual_seed(0)
    block = FeedForwardBlock().eval()
    pruned = prune_structured(block, 0.5)
    assert shapes(pruned)["fc1.weight"] == (16, 8) and shapes(pruned)["fc2.weight"] == (8, 16)
    assert shapes(pruned)["fc2.bias"] == (8,), "fc2 feeds the residual add: kept whole"
    inputs = torch.randn(2, 5, 8)
    with torch.inference_mode():
        assert pruned(inputs).shape == (2, 5, 8)


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc_in = nn.Linear(8, 16)
        self.fc_a = nn.Linear(16, 16)
        self.fc_out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.fc_in(x))
        return self.fc_out(hidden + self.fc_a(hidden))


def test_layers_feeding_a_residual_add_are_not_pruned() -> None:
    assert find_prunable_chains(Residual()) == []
    with pytest.raises(Unsupported, match="prune.method=structured"):
        prune_structured(Residual(), 0.5)


class Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 4)
        self.fc2 = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(self.fc1(x))))


def test_a_layer_called_twice_is_not_pruned() -> None:
    assert find_prunable_chains(Shared()) == []


def test_batch_norm_between_convolutions_shrinks_with_them() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3)
    ).eval()
    with torch.no_grad():
        cast(torch.Tensor, model[1].running_mean).copy_(torch.arange(8.0))
    pruned = prune_structured(model, 0.5)
    (chain,) = find_prunable_chains(model)
    assert chain.norms == ("1",)
    assert shapes(pruned)["1.running_var"] == (4,) and shapes(pruned)["3.weight"] == (4, 4, 3, 3)
    norms = model[0].weight.detach().reshape(8, -1).norm(dim=1)
    kept = torch.argsort(-norms)[:4].sort().values
    torch.testing.assert_close(pruned[1].running_mean, kept.float())
    with torch.inference_mode():
        assert pruned(torch.randn(2, 3, 7, 7)).shape == (2, 4, 3, 3)


class Branching(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.fc(x)
        return x


def test_a_model_that_does_not_trace_is_unsupported() -> None:
    with pytest.raises(Unsupported, match="does not trace"):
        prune_structured(Branching(), 0.5)


def test_structured_pruning_of_an_onnx_model_is_unsupported(digits_onnx: Path) -> None:
    config = parse_config({"prune.method": "structured", "prune.ratio": 0.25}, "onnx")
    with pytest.raises(Unsupported, match="needs a torch model"):
        transforms.prune(OnnxVariant(digits_onnx.read_bytes()), config, BuildContext(np.empty(0)))


STRUCTURED: dict[str, ConfigValue] = {"prune.method": "structured", "prune.ratio": 0.25}


@pytest.mark.parametrize("engine", ["torch_eager", "onnxruntime"])
def test_a_structured_trial_runs(engine: str) -> None:
    result = run_trial(spec_for(digits_workload(), {**STRUCTURED, "runtime.engine": engine}), STORE)
    assert result.status == "ok", result.reason
    assert result.metrics is not None and result.metrics.accuracy >= 0.9


def test_a_structured_trial_on_an_onnx_model_is_unsupported(digits_onnx: Path) -> None:
    workload = digits_workload(model=ModelRef(onnx=str(digits_onnx)))
    result = run_trial(spec_for(workload, STRUCTURED), STORE)
    assert result.status == "unsupported" and "needs a torch model" in (result.reason or "")


@pytest.mark.parametrize("precision", ["fp32", "int8_dynamic"])
def test_a_structured_artifact_rebuilds_the_smaller_layers(tmp_path: Path, precision: str) -> None:
    config: dict[str, ConfigValue] = {**STRUCTURED, "precision.mode": precision}
    trial = run_trial(spec_for(digits_workload(), config), STORE)
    assert trial.status == "ok" and trial.metrics is not None, trial.reason
    artifact = export_artifact(spec_for(digits_workload(), config), str(tmp_path), STORE)
    assert load_file(artifact.path)["classifier.1.weight"].shape == (48, 24 * 16)
    accuracy = evaluate_artifact(artifact.path, digits_workload(), WorkloadCache())
    assert accuracy == trial.metrics.accuracy


# --- 2:4 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(8, 16), (6, 2, 2, 2), (3, 4, 1, 1)])
def test_the_2_4_mask_keeps_the_two_largest_of_every_four(shape: tuple[int, ...]) -> None:
    weight = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    mask = mask_2_4(weight)
    assert mask.shape == weight.shape and mask.dtype == torch.bool
    groups = weight.abs().reshape(shape[0], -1, 4)
    kept = mask.reshape(shape[0], -1, 4)
    assert (kept.sum(dim=-1) == 2).all()
    smallest_kept = torch.where(kept, groups, torch.inf).amin(dim=-1)
    largest_dropped = torch.where(kept, -torch.inf, groups).amax(dim=-1)
    assert (smallest_kept >= largest_dropped).all()


def test_the_2_4_mask_breaks_ties_deterministically() -> None:
    mask = mask_2_4(torch.ones(2, 8))
    assert mask.tolist() == [[True, True, False, False] * 2] * 2


def test_the_2_4_mask_needs_an_input_dimension_divisible_by_4() -> None:
    with pytest.raises(ValueError, match="multiple of 4"):
        mask_2_4(torch.ones(4, 6))


def test_2_4_masking_the_digits_cnn(digits_module: nn.Module) -> None:
    masked = apply_2_4_mask(digits_module)
    weights = {n: t for n, t in masked.state_dict().items() if n.endswith("weight")}
    torch.testing.assert_close(
        weights["features.0.weight"], digits_module.state_dict()["features.0.weight"]
    )  # 1 x 3 x 3 = 9 inputs: not a multiple of 4, left dense
    for name in ("features.2.weight", "classifier.1.weight", "classifier.3.weight"):
        zeros = (weights[name].reshape(weights[name].shape[0], -1, 4) == 0).sum(dim=-1)
        assert (zeros == 2).all(), name
    assert all(t.count_nonzero() == t.numel() for t in digits_module.state_dict().values())


def test_2_4_masking_a_model_without_fitting_layers_is_unsupported() -> None:
    with pytest.raises(Unsupported, match="multiple of 4"):
        apply_2_4_mask(nn.Sequential(nn.Linear(3, 8)))


def test_2_4_sparsity_on_the_cpu_is_unsupported() -> None:
    result = run_trial(spec_for(digits_workload(), {"prune.method": "semi_structured_2_4"}), STORE)
    assert result.status == "unsupported"
    assert "2:4 sparsity is accelerated only on CUDA (compute capability >= 8.0)" in (
        result.reason or ""
    )


def test_2_4_sparsify_without_a_fitting_cuda_layer_is_unsupported() -> None:
    with pytest.raises(Unsupported, match="out_features a multiple of 32"):
        sparsify_2_4(nn.Sequential(nn.Linear(64, 64)))  # on the CPU, in float32


@pytest.mark.gpu
@needs_cuda
def test_2_4_sparse_kernels_match_the_dense_masked_model() -> None:
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("2:4 kernels need compute capability >= 8.0")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 128)).eval()
    config = parse_config(
        {"prune.method": "semi_structured_2_4", "precision.mode": "fp16", "runtime.device": "cuda"},
        "torch",
    )
    variant = transforms.build_variant(TorchVariant(model), config, BuildContext(np.empty(0)))
    assert isinstance(variant, TorchVariant) and variant.input_dtype == torch.float16
    sparse_type = torch.sparse.SparseSemiStructuredTensor
    assert all(isinstance(variant.module[i].weight, sparse_type) for i in (0, 2))
    dense = apply_2_4_mask(model).to("cuda", torch.float16)
    inputs = torch.randn(64, 128, device="cuda", dtype=torch.float16)
    with torch.inference_mode():
        torch.testing.assert_close(variant.module(inputs), dense(inputs), rtol=1e-2, atol=1e-2)
