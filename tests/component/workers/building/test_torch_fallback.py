"""precision.fallback on the torch engines: dynamic int8 keeps the model's Linear modules
most sensitive to it in float. A three-Linear torch model whose first Linear takes inputs with
one huge channel (that its weights ignore) loses its fidelity when that Linear's input is
int8, and keeps it when that Linear alone stays in float."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from autotune.core.artifacts import VARIANT_FILE
from autotune.core.contract import ConfigValue, DataRef, MetricRef, ModelRef, Workload
from autotune.core.errors import Unsupported
from autotune.core.knobs import Target, supports
from autotune.core.knobs.config import parse_config
from tests.workers_support import REPO, spec_for
from workers import evaluate_artifact, export_artifact
from workers.building.sensitivity import Sensitivity
from workers.building.torch_sensitivity import measure_module_sensitivity
from workers.building.transforms import build_variant
from workers.building.variants import BuildContext, TorchVariant
from workers.cache import WorkloadCache, torch_infidelity_to
from workers.runner import run_trial

WIDTH = 16
SAMPLES = 64
BOUND = 0.01
LINEARS = ("hostile", "benign_mid", "benign_out")
CPU = Target(frozenset({"cpu.avx2", "ort.cpu", "torch.compile"}), "torch")


class HostileLinears(torch.nn.Module):
    """benign_out(benign_mid(hostile(x))), where `hostile` ignores the inputs' channel 0
    (huge, `inputs`): in float that channel vanishes; an int8 input to `hostile` has a scale
    so coarse that every other channel rounds to zero."""

    def __init__(self) -> None:
        super().__init__()
        rng = np.random.default_rng(0)
        self.hostile, self.benign_mid, self.benign_out = (linear(rng) for _ in LINEARS)
        self.hostile.weight.data[:, 0] = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.benign_out(self.benign_mid(self.hostile(x)))


def linear(rng: np.random.Generator) -> torch.nn.Linear:
    layer = torch.nn.Linear(WIDTH, WIDTH, bias=False)
    layer.weight.data = torch.from_numpy(rng.normal(size=(WIDTH, WIDTH)).astype(np.float32))
    return layer


def hostile_module() -> torch.nn.Module:
    """The workload's entry point."""
    return HostileLinears().eval()


def inputs() -> np.ndarray:
    samples = np.random.default_rng(1).normal(size=(SAMPLES, WIDTH)).astype(np.float32)
    samples[:, 0] = 1e4
    return samples


def sensitivity(module: torch.nn.Module) -> Sensitivity:
    return measure_module_sensitivity(module, torch_infidelity_to(TorchVariant(module), inputs()))


def torch_config(fallback: int, mode: str = "int8_dynamic", engine: str = "torch_eager"):  # type: ignore[no-untyped-def]
    return parse_config(
        {"runtime.engine": engine, "precision.mode": mode, "precision.fallback": fallback},
        "torch",
    )


def build(fallback: int) -> TorchVariant:
    context = BuildContext(
        sample_inputs=inputs()[:2],
        ranked_modules=lambda module, mode: sensitivity(module).ranked,
    )
    variant = build_variant(TorchVariant(hostile_module()), torch_config(fallback), context)
    assert isinstance(variant, TorchVariant)
    return variant


def infidelity(variant: TorchVariant) -> float:
    return torch_infidelity_to(TorchVariant(hostile_module()), inputs())(variant.module)


def float_linears(module: torch.nn.Module) -> set[str]:
    """The modules still a float nn.Linear (not replaced by a dynamic quantized Linear)."""
    return {name for name, child in module.named_modules() if type(child) is torch.nn.Linear}


def dynamic_int8_linears(module: torch.nn.Module) -> set[str]:
    dynamic = torch.ao.nn.quantized.dynamic.Linear
    return {name for name, child in module.named_modules() if isinstance(child, dynamic)}


def test_the_hostile_linear_ranks_first() -> None:
    measured = sensitivity(hostile_module())
    assert measured.ranked[0] == "hostile"
    assert set(measured.ranked) == set(LINEARS)
    benign = max(measured.measured[name] for name in ("benign_mid", "benign_out"))
    assert measured.measured["hostile"] > BOUND > benign


def test_fallback_one_meets_the_bound_that_whole_model_int8_breaks() -> None:
    whole, kept = infidelity(build(0)), infidelity(build(1))
    assert whole > BOUND >= kept


@pytest.mark.parametrize("fallback", [0, 1, 2])
def test_exactly_the_most_sensitive_linears_stay_float(fallback: int) -> None:
    variant = build(fallback)
    kept = set(sensitivity(hostile_module()).ranked[:fallback])
    assert variant.float_modules == tuple(sensitivity(hostile_module()).ranked[:fallback])
    assert float_linears(variant.module) == kept
    assert dynamic_int8_linears(variant.module) == set(LINEARS) - kept


@pytest.mark.parametrize(("fallback", "refusal"), [(3, "keeps every nn.Linear"), (4, "has 3")])
def test_fallback_leaving_nothing_quantized_is_refused(fallback: int, refusal: str) -> None:
    with pytest.raises(Unsupported, match=f"precision.fallback={fallback}.*{refusal}"):
        build(fallback)


def test_named_float_modules_are_used_without_a_ranking() -> None:
    context = BuildContext(inputs()[:2], float_modules=["benign_out"])
    variant = build_variant(TorchVariant(hostile_module()), torch_config(1), context)
    assert isinstance(variant, TorchVariant)
    assert float_linears(variant.module) == {"benign_out"}
    unknown = BuildContext(inputs()[:2], float_modules=["nowhere"])
    with pytest.raises(Unsupported, match=r"no nn.Linear module named \['nowhere'\]"):
        build_variant(TorchVariant(hostile_module()), torch_config(1), unknown)


@pytest.mark.parametrize("engine", ["torch_eager", "torch_compile"])
def test_the_torch_engines_take_fallback_for_dynamic_int8_alone(engine: str) -> None:
    assert supports(torch_config(2, engine=engine), CPU) is None
    refusal = supports(torch_config(1, mode="fp32", engine=engine), CPU)
    assert refusal is not None
    assert (
        "precision.fallback=1" in refusal and "precision.mode=fp32 is not int8_dynamic" in refusal
    )


def test_fallback_with_tensor_parallelism_is_refused() -> None:
    config: dict[str, ConfigValue] = {
        "runtime.engine": "torch_eager",
        "precision.mode": "int8_dynamic",
        "precision.fallback": 1,
        "shard.tensor_parallel": 2,
    }
    refusal = supports(parse_config(config, "torch"), CPU)
    assert refusal is not None and "shard.tensor_parallel=2" in refusal


def hostile_workload(directory: Path) -> Workload:
    data_path = directory / "data.npz"
    np.savez(data_path, inputs=inputs())
    return Workload(
        model=ModelRef(entry_point=f"{__name__}:hostile_module"),
        data=DataRef(npz=str(data_path)),
        metric=MetricRef(kind="fidelity"),
        python_path=[str(REPO)],
    )


INT8: dict[str, ConfigValue] = {"runtime.engine": "torch_eager", "precision.mode": "int8_dynamic"}


def test_a_torch_fallback_trial_carries_its_module_ranking(tmp_path: Path) -> None:
    workload, store = hostile_workload(tmp_path), WorkloadCache()
    first = run_trial(spec_for(workload, {**INT8, "precision.fallback": 1}), store)
    again = run_trial(spec_for(workload, {**INT8, "precision.fallback": 2}), store)
    plain = run_trial(spec_for(workload, INT8), store)
    assert first.status == "ok", first.reason
    assert first.provenance is not None
    (table,) = first.sensitivity
    assert table.key == (first.provenance.model_sha256, "int8_dynamic", "torch")
    assert table.computed and table.seconds > 0
    assert [n.node for n in table.nodes][0] == "hostile"
    assert {n.node for n in table.nodes} == set(LINEARS)
    assert {n.op_type for n in table.nodes} == {"Linear"}
    assert [n.node for n in table.carrying()] == ["hostile"]
    (reused,) = again.sensitivity
    assert not reused.computed and reused.nodes == table.nodes
    assert plain.sensitivity == []
    assert plain.metrics is not None and first.metrics is not None
    assert plain.metrics.accuracy < 1.0 - BOUND <= first.metrics.accuracy


def test_the_exported_artifact_rebuilds_the_measured_variant(tmp_path: Path) -> None:
    workload, store = hostile_workload(tmp_path), WorkloadCache()
    config = {**INT8, "precision.fallback": 1}
    artifact = export_artifact(spec_for(workload, config), str(tmp_path / "out"), store)
    description = json.loads((tmp_path / "out" / VARIANT_FILE).read_text())
    assert description["config"] == config and description["float_nodes"] == ["hostile"]
    assert evaluate_artifact(artifact.path, workload, store) >= 1.0 - BOUND
    plain = export_artifact(spec_for(workload, INT8), str(tmp_path / "plain"), store)
    assert "float_nodes" not in json.loads((tmp_path / "plain" / VARIANT_FILE).read_text())
    assert evaluate_artifact(plain.path, workload, store) < 1.0 - BOUND
