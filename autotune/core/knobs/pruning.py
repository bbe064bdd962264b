"""The pruning methods, declared: magnitude zeroes single weights, structured removes whole
channels so layers shrink, 2:4 keeps two of every four weights for sparse tensor cores. Their
implementations are in `workers.building.knobs.pruning`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core.knobs.base import ENGINES, Pruning, Target, register

if TYPE_CHECKING:
    from autotune.core.knobs.config import TrialConfig


@register
class NoPruning(Pruning):
    name = "none"

    def prunes(self, config: TrialConfig) -> bool:
        return False


@register
class Magnitude(Pruning):
    """Global unstructured L1 pruning of Conv/Linear (ONNX: Conv/Gemm/MatMul) weights."""

    name = "magnitude"
    takes_ratio = True


class TorchOnlyPruning(Pruning):
    """A method that reshapes or masks torch modules (before any ONNX export)."""

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        if target.model_kind == "onnx":
            return f"{self.key}={self.name} needs a torch model; this model is ONNX"
        return super().supports(config, target)


@register
class Structured(TorchOnlyPruning):
    """Whole channels and neurons removed, layers shrink (torch models)."""

    name = "structured"
    takes_ratio = True


@register
class SemiStructured24(TorchOnlyPruning):
    """The 2:4 mask on fp32 weights, compressed for the sparse kernels once the precision and
    device are final."""

    name = "semi_structured_2_4"

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        if ENGINES[config.engine].model_format != "torch":
            return f"{self.key}={self.name} is accelerated only by the torch engines on CUDA"
        if config.device != "cuda" or "cuda.sparse24" not in target.capabilities:
            return (
                f"{self.key}={self.name}: 2:4 sparsity is accelerated only on CUDA "
                "(compute capability >= 8.0)"
            )
        if config.precision not in ("fp16", "bf16"):
            return (
                f"{self.key}={self.name} needs precision.mode fp16 or bf16 "
                "(the dtypes of its sparse kernels)"
            )
        return super().supports(config, target)
