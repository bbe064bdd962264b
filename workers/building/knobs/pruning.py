"""How each pruning method (`autotune.core.knobs.pruning`) prunes the fp32 model in its own
format; `workers.building.pruning` does the work."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core.errors import Unsupported
from autotune.core.knobs.pruning import Magnitude, NoPruning, SemiStructured24, Structured
from workers.building.knobs.base import PruningImplementation, implements

if TYPE_CHECKING:
    import torch

    from autotune.core.knobs.config import TrialConfig
    from workers.building.variants import BuildContext, Variant


@implements
class NoPruningImplementation(PruningImplementation, NoPruning):
    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        return variant


@implements
class MagnitudeImplementation(PruningImplementation, Magnitude):
    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        from workers.building.pruning import prune_onnx, prune_torch
        from workers.building.variants import OnnxVariant, TorchVariant

        if isinstance(variant, OnnxVariant):
            return OnnxVariant(prune_onnx(variant.model_bytes, config.prune_ratio))
        module = prune_torch(variant.module, config.prune_ratio)
        return TorchVariant(module, variant.input_dtype)


class TorchModulePruning(PruningImplementation):
    """Reshapes or masks a torch module."""

    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        from workers.building.variants import TorchVariant

        if not isinstance(variant, TorchVariant):
            raise Unsupported(f"{self.key}={self.name} needs a torch model; this model is ONNX")
        return TorchVariant(self.prune_module(variant.module, config), variant.input_dtype)

    def prune_module(self, module: torch.nn.Module, config: TrialConfig) -> torch.nn.Module:
        raise NotImplementedError


@implements
class StructuredImplementation(TorchModulePruning, Structured):
    def prune_module(self, module: torch.nn.Module, config: TrialConfig) -> torch.nn.Module:
        from workers.building.pruning import prune_structured

        return prune_structured(module, config.prune_ratio)


@implements
class SemiStructured24Implementation(TorchModulePruning, SemiStructured24):
    def prune_module(self, module: torch.nn.Module, config: TrialConfig) -> torch.nn.Module:
        from workers.building.pruning import apply_2_4_mask

        return apply_2_4_mask(module)

    def finish(self, variant: Variant, config: TrialConfig) -> Variant:
        from workers.building.pruning import sparsify_2_4
        from workers.building.variants import TorchVariant

        if not isinstance(variant, TorchVariant):
            return variant
        return TorchVariant(sparsify_2_4(variant.module), variant.input_dtype)
