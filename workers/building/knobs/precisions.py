"""How each precision mode (`autotune.core.knobs.precisions`) builds its variants. Torch
variants are cast or quantized by `workers.building.quantization`'s torch path (which also moves
the weights to the trial's device); ONNX variants are rewritten by its ONNX functions."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from autotune.core.errors import Unsupported
from autotune.core.knobs.precisions import Bf16, Fp8, Fp16, Fp32, Int8Dynamic, Int8Static
from workers.building.knobs.base import PrecisionImplementation, implements

if TYPE_CHECKING:
    from autotune.core.knobs.config import TrialConfig
    from workers.building.variants import BuildContext, Variant


class DevicePrecisionImplementation(PrecisionImplementation):
    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        from workers.building.quantization import torch_precision
        from workers.building.variants import OnnxVariant, TorchVariant

        if isinstance(variant, TorchVariant):
            return torch_precision(variant, config)
        assert isinstance(variant, OnnxVariant)
        return OnnxVariant(self.build_onnx(variant.model_bytes, context))

    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        raise Unsupported(f"{self.key}={self.name} has no ONNX rewrite")


@implements
class Fp32Implementation(DevicePrecisionImplementation, Fp32):
    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        return model_bytes


@implements
class Bf16Implementation(DevicePrecisionImplementation, Bf16):
    pass


@implements
class Fp16Implementation(DevicePrecisionImplementation, Fp16):
    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        from workers.building.quantization import convert_onnx_fp16

        return convert_onnx_fp16(model_bytes)


@implements
class Int8DynamicImplementation(DevicePrecisionImplementation, Int8Dynamic):
    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        from workers.building.quantization import quantize_onnx_int8

        return quantize_onnx_int8(model_bytes)


@implements
class Int8StaticImplementation(DevicePrecisionImplementation, Int8Static):
    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        from workers.building.quantization import quantize_onnx_int8_static

        if context.calibration_inputs is None:
            raise Unsupported("precision.mode=int8_static needs calibration inputs")
        return quantize_onnx_int8_static(model_bytes, context.calibration_inputs)


@implements
class Fp8Implementation(DevicePrecisionImplementation, Fp8):
    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        if importlib.util.find_spec("torchao") is None:
            raise Unsupported(
                "precision.mode=fp8 needs the package 'torchao' (pip install torchao)"
            )
        return super().build(variant, config, context)
