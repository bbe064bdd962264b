"""How each precision mode (`autotune.core.knobs.precisions`) builds its variants: a torch
variant cast or quantized, with its weights on the trial's device (`build_torch`); an ONNX
variant rewritten (`build_onnx`). With `precision.fallback`, an int8 mode keeps the nodes
(torch: Linear modules) most sensitive to it in float (`build_onnx_with_fallback`,
`build_torch_with_fallback`). `workers.building.quantization` holds the longer routines."""

from __future__ import annotations

import copy
import importlib.util
from typing import TYPE_CHECKING, ClassVar

from autotune.core.errors import Unsupported
from autotune.core.knobs.precisions import (
    Bf16,
    Fp8,
    Fp16,
    Fp32,
    Int4WeightOnly,
    Int8Dynamic,
    Int8Static,
)
from workers.building.knobs.base import PrecisionImplementation, implements

if TYPE_CHECKING:
    import numpy as np

    from autotune.core.knobs.config import TrialConfig
    from workers.building.quantization import StaticSettings
    from workers.building.variants import BuildContext, TorchVariant, Variant


class DevicePrecisionImplementation(PrecisionImplementation):
    # The torch dtype a torch variant is cast to (None: its weights stay fp32).
    torch_dtype: ClassVar[str | None] = None

    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        from workers.building.variants import OnnxVariant, TorchVariant

        if isinstance(variant, TorchVariant):
            if config.fallback:
                return self.build_torch_with_fallback(variant, config, context)
            return self.build_torch(variant, config)
        assert isinstance(variant, OnnxVariant)
        if config.fallback:
            return OnnxVariant(self.build_onnx_with_fallback(variant.model_bytes, config, context))
        return OnnxVariant(self.build_onnx(variant.model_bytes, context))

    def build_torch(self, variant: TorchVariant, config: TrialConfig) -> TorchVariant:
        """The module cast to `torch_dtype` (weights and inputs) on `config.device`; an fp32
        module on the CPU is the variant itself."""
        import torch

        from workers.building.variants import TorchVariant

        dtype = None if self.torch_dtype is None else getattr(torch, self.torch_dtype)
        if dtype is None and config.device == "cpu":
            return variant
        module = copy.deepcopy(variant.module).to(device=config.device, dtype=dtype)
        return TorchVariant(module.eval(), dtype or variant.input_dtype)

    def build_torch_with_fallback(
        self, variant: TorchVariant, config: TrialConfig, context: BuildContext
    ) -> TorchVariant:
        raise Unsupported(f"precision.fallback: {self.key}={self.name} keeps no module in float")

    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        raise Unsupported(f"{self.key}={self.name} has no ONNX rewrite")

    def build_onnx_with_fallback(
        self, model_bytes: bytes, config: TrialConfig, context: BuildContext
    ) -> bytes:
        raise Unsupported(f"precision.fallback: {self.key}={self.name} keeps no node in float")


@implements
class Fp32Implementation(DevicePrecisionImplementation, Fp32):
    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        return model_bytes


@implements
class Bf16Implementation(DevicePrecisionImplementation, Bf16):
    torch_dtype = "bfloat16"


@implements
class Fp16Implementation(DevicePrecisionImplementation, Fp16):
    torch_dtype = "float16"

    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        from workers.building.quantization import convert_onnx_fp16

        return convert_onnx_fp16(model_bytes)


@implements
class Int8DynamicImplementation(DevicePrecisionImplementation, Int8Dynamic):
    def build_torch(self, variant: TorchVariant, config: TrialConfig) -> TorchVariant:
        from workers.building.quantization import torch_int8_dynamic

        return torch_int8_dynamic(variant)

    def build_torch_with_fallback(
        self, variant: TorchVariant, config: TrialConfig, context: BuildContext
    ) -> TorchVariant:
        from workers.building.quantization import torch_int8_dynamic

        return torch_int8_dynamic(variant, most_sensitive_modules(variant, config, context))

    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        from workers.building.quantization import quantize_onnx_int8

        return quantize_onnx_int8(model_bytes)

    def build_onnx_with_fallback(
        self, model_bytes: bytes, config: TrialConfig, context: BuildContext
    ) -> bytes:
        from workers.building.quantization import quantize_onnx_int8

        return quantize_onnx_int8(model_bytes, most_sensitive(model_bytes, config, context))


@implements
class Int8StaticImplementation(DevicePrecisionImplementation, Int8Static):
    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        from workers.building.quantization import quantize_onnx_int8_static
        from workers.building.variants import OnnxVariant

        if not isinstance(variant, OnnxVariant):
            return super().build(variant, config, context)
        samples = calibration_samples(context)
        settings = static_settings(config)
        float_nodes: list[str] = []
        if config.fallback:
            float_nodes = most_sensitive(variant.model_bytes, config, context, settings)
        return OnnxVariant(
            quantize_onnx_int8_static(variant.model_bytes, samples, float_nodes, settings)
        )


def calibration_samples(context: BuildContext) -> np.ndarray:
    """The samples static int8 calibrates on: those held out of the evaluation data."""
    samples = context.calibration_inputs
    if samples is None or len(samples) == 0:
        raise Unsupported(
            "precision.mode=int8_static needs calibration inputs (samples held out of the "
            "evaluation data, which needs at least 64 samples); this workload has none"
        )
    return samples


def static_settings(config: TrialConfig) -> StaticSettings:
    """The static quantizer's settings the configuration chooses (its defaults where it
    leaves them out)."""
    from autotune.core.knobs.engines import (
        CALIBRATION,
        OP_TYPES,
        PER_CHANNEL,
        SYMMETRIC_ACTIVATIONS,
    )
    from workers.building.quantization import StaticSettings

    return StaticSettings(
        calibration=str(config.option(CALIBRATION.key)),
        per_channel=bool(config.option(PER_CHANNEL.key)),
        symmetric_activations=bool(config.option(SYMMETRIC_ACTIVATIONS.key)),
        op_types=str(config.option(OP_TYPES.key)),
    )


def most_sensitive(
    model_bytes: bytes,
    config: TrialConfig,
    context: BuildContext,
    settings: StaticSettings | None = None,
) -> list[str]:
    """The `config.fallback` quantizable nodes of the model most sensitive to its int8 mode
    (of the op types `settings` quantize, where given)."""
    from autotune.core.int8_fallback import STATIC_OP_TYPES
    from workers.building.quantization import node_op_types

    if context.ranked_nodes is None or context.calibration_inputs is None:
        raise Unsupported(
            f"precision.fallback={config.fallback} needs the workload's data to rank nodes by"
        )
    ranked = list(context.ranked_nodes(model_bytes, config.precision))
    op_types = None if settings is None else STATIC_OP_TYPES[settings.op_types]
    if op_types is not None:
        types = node_op_types(model_bytes)
        ranked = [name for name in ranked if types.get(name) in op_types]
    return _first(ranked, config.fallback, "nodes")


def most_sensitive_modules(
    variant: TorchVariant, config: TrialConfig, context: BuildContext
) -> list[str]:
    """The `config.fallback` Linear modules of the torch model most sensitive to its int8
    mode, by qualified name; those the context names instead where it knows them (an
    exported artifact rebuilt as its trial measured it)."""
    if context.float_modules is not None:
        if len(context.float_modules) != config.fallback:
            raise Unsupported(
                f"precision.fallback={config.fallback}: the artifact names "
                f"{len(context.float_modules)} float modules ({list(context.float_modules)})"
            )
        return list(context.float_modules)
    if context.ranked_modules is None:
        raise Unsupported(
            f"precision.fallback={config.fallback} needs the workload's data to rank modules by"
        )
    ranked = list(context.ranked_modules(variant.module, config.precision))
    return _first(ranked, config.fallback, "nn.Linear modules")


def _first(ranked: list[str], fallback: int, what: str) -> list[str]:
    """The `fallback` first of `ranked`; `Unsupported` where it holds fewer."""
    if fallback > len(ranked):
        raise Unsupported(
            f"precision.fallback={fallback}: the model has {len(ranked)} quantizable "
            f"{what}, and an int8 model keeps some of them quantized"
        )
    return ranked[:fallback]


@implements
class Fp8Implementation(DevicePrecisionImplementation, Fp8):
    def build_torch(self, variant: TorchVariant, config: TrialConfig) -> TorchVariant:
        if importlib.util.find_spec("torchao") is None:
            raise Unsupported(
                "precision.mode=fp8 needs the package 'torchao' (pip install torchao)"
            )
        from workers.building.quantization import torch_fp8

        return torch_fp8(variant, config.device)


@implements
class Int4WeightOnlyImplementation(DevicePrecisionImplementation, Int4WeightOnly):
    block_size: ClassVar[int] = 32

    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        """Every MatMul with a constant weight as MatMulNBits (symmetric, 4 bits per weight,
        one scale per block of `block_size` along the input dimension)."""
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quantizer = MatMulNBitsQuantizer(
            onnx.load_model_from_string(model_bytes),
            block_size=self.block_size,
            is_symmetric=True,
            bits=4,
        )
        quantizer.process()
        model = quantizer.model.model
        if not any(node.op_type == "MatMulNBits" for node in model.graph.node):
            raise Unsupported(
                f"{self.key}={self.name}: the model has no MatMul with a constant weight"
            )
        return bytes(model.SerializeToString())
