"""The pruning methods, applied to the fp32 model in its own format (`workers.pruning` does
the work): magnitude zeroes single weights, structured removes whole channels so layers
shrink, 2:4 keeps two of every four weights for sparse tensor cores."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.errors import Unsupported
from workers.knobs.base import ENGINES, Pruning, Target, register

if TYPE_CHECKING:
    import torch

    from workers.config import TrialConfig
    from workers.variants import BuildContext, Variant


@register
class NoPruning(Pruning):
    name = "none"

    def prunes(self, config: TrialConfig) -> bool:
        return False

    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        return variant


@register
class Magnitude(Pruning):
    """Global unstructured L1 pruning of Conv/Linear (ONNX: Conv/Gemm/MatMul) weights."""

    name = "magnitude"
    takes_ratio = True

    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        from workers.pruning import prune_onnx, prune_torch
        from workers.variants import OnnxVariant, TorchVariant

        if isinstance(variant, OnnxVariant):
            return OnnxVariant(prune_onnx(variant.model_bytes, config.prune_ratio))
        module = prune_torch(variant.module, config.prune_ratio)
        return TorchVariant(module, variant.input_dtype)


class TorchOnlyPruning(Pruning):
    """A method that reshapes or masks torch modules (before any ONNX export)."""

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        if target.model_kind == "onnx":
            return f"{self.key}={self.name} needs a torch model; this model is ONNX"
        return super().supports(config, target)

    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        from workers.variants import TorchVariant

        if not isinstance(variant, TorchVariant):
            raise Unsupported(f"{self.key}={self.name} needs a torch model; this model is ONNX")
        return TorchVariant(self.prune_module(variant.module, config), variant.input_dtype)

    def prune_module(self, module: torch.nn.Module, config: TrialConfig) -> torch.nn.Module:
        raise NotImplementedError


@register
class Structured(TorchOnlyPruning):
    """Whole channels and neurons removed, layers shrink (torch models)."""

    name = "structured"
    takes_ratio = True

    def prune_module(self, module: torch.nn.Module, config: TrialConfig) -> torch.nn.Module:
        from workers.pruning import prune_structured

        return prune_structured(module, config.prune_ratio)


@register
class SemiStructured24(TorchOnlyPruning):
    """The 2:4 mask on fp32 weights; `finish` compresses them for the sparse kernels once the
    precision and device are final."""

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

    def prune_module(self, module: torch.nn.Module, config: TrialConfig) -> torch.nn.Module:
        from workers.pruning import apply_2_4_mask

        return apply_2_4_mask(module)

    def finish(self, variant: Variant, config: TrialConfig) -> Variant:
        from workers.pruning import sparsify_2_4
        from workers.variants import TorchVariant

        if not isinstance(variant, TorchVariant):
            return variant
        return TorchVariant(sparsify_2_4(variant.module), variant.input_dtype)
