"""The precision modes. Torch variants are cast or quantized by `workers.quantization`'s torch
path (which also moves the weights to the trial's device); ONNX variants are rewritten by its
ONNX functions. Which engine runs which mode is the engine's `precisions`; what hardware a
mode needs on each device is here."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, ClassVar

from autotune.errors import Unsupported
from workers.knobs.base import ENGINES, Precision, Target, register

if TYPE_CHECKING:
    from workers.config import TrialConfig
    from workers.variants import BuildContext, Variant


class DevicePrecision(Precision):
    """A mode whose hardware needs depend on the device it runs on."""

    needs_on: ClassVar[dict[str, tuple[str, ...]]] = {}

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        device = "cuda" if ENGINES[config.engine].on_cuda(config) else "cpu"
        unmet = target.unmet(self.needs_on.get(device, ()))
        if unmet is not None:
            return f"{self.key}={self.name} on {device} {unmet}"
        return super().supports(config, target)

    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        from workers.quantization import torch_precision
        from workers.variants import OnnxVariant, TorchVariant

        if isinstance(variant, TorchVariant):
            return torch_precision(variant, config)
        assert isinstance(variant, OnnxVariant)
        return OnnxVariant(self.build_onnx(variant.model_bytes, context))

    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        raise Unsupported(f"{self.key}={self.name} has no ONNX rewrite")


@register
class Fp32(DevicePrecision):
    name = "fp32"

    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        return model_bytes


@register
class Bf16(DevicePrecision):
    name = "bf16"
    needs_on = {"cpu": ("cpu.bf16",), "cuda": ("cuda.bf16",)}


@register
class Fp16(DevicePrecision):
    name = "fp16"

    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        from workers.quantization import convert_onnx_fp16

        return convert_onnx_fp16(model_bytes)


@register
class Int8Dynamic(DevicePrecision):
    """On a CPU, AVX2 is what the int8 kernels of torch (fbgemm) and ONNX Runtime need; VNNI
    makes them faster, and where its absence costs accuracy (u8s8 saturation) the measured
    accuracy says so."""

    name = "int8_dynamic"
    needs_on = {"cpu": ("cpu.avx2",)}

    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        from workers.quantization import quantize_onnx_int8

        return quantize_onnx_int8(model_bytes)


@register
class Int8Static(DevicePrecision):
    """Calibrated on the evaluation inputs (a bounded, deterministic subset)."""

    name = "int8_static"
    needs_on = {"cpu": ("cpu.avx2",)}

    def build_onnx(self, model_bytes: bytes, context: BuildContext) -> bytes:
        from workers.quantization import quantize_onnx_int8_static

        if context.calibration_inputs is None:
            raise Unsupported("precision.mode=int8_static needs calibration inputs")
        return quantize_onnx_int8_static(model_bytes, context.calibration_inputs)


@register
class Fp8(DevicePrecision):
    """torchao's float8 Linear layers, on CUDA with compute capability >= 8.9."""

    name = "fp8"

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        if config.device != "cuda" or "cuda.fp8" not in target.capabilities:
            return "precision.mode=fp8 needs CUDA with compute capability >= 8.9"
        return super().supports(config, target)

    def build(self, variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
        if importlib.util.find_spec("torchao") is None:
            raise Unsupported(
                "precision.mode=fp8 needs the package 'torchao' (pip install torchao)"
            )
        return super().build(variant, config, context)
