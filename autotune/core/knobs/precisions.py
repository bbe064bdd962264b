"""The precision modes, declared: the hardware each mode needs on each device (the engines say
which modes they run, `Engine.precisions`). How a mode builds a variant is its implementation
in `workers.building.knobs.precisions`."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from autotune.core.knobs.base import ENGINES, Precision, Target, register

if TYPE_CHECKING:
    from autotune.core.knobs.config import TrialConfig


class DevicePrecision(Precision):
    """A mode whose hardware needs depend on the device it runs on."""

    needs_on: ClassVar[dict[str, tuple[str, ...]]] = {}

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        device = "cuda" if ENGINES[config.engine].on_cuda(config) else "cpu"
        unmet = target.unmet(self.needs_on.get(device, ()))
        if unmet is not None:
            return f"{self.key}={self.name} on {device} {unmet}"
        return super().supports(config, target)


@register
class Fp32(DevicePrecision):
    name = "fp32"


@register
class Bf16(DevicePrecision):
    name = "bf16"
    needs_on = {"cpu": ("cpu.bf16",), "cuda": ("cuda.bf16",)}


@register
class Fp16(DevicePrecision):
    name = "fp16"


@register
class Int8Dynamic(DevicePrecision):
    """On a CPU, AVX2 is what the int8 kernels of torch (fbgemm) and ONNX Runtime need; VNNI
    makes them faster, and where its absence costs accuracy (u8s8 saturation) the measured
    accuracy says so."""

    name = "int8_dynamic"
    needs_on = {"cpu": ("cpu.avx2",)}


@register
class Int8Static(DevicePrecision):
    """Calibrated on samples held out of the evaluation (a bounded, deterministic share of the
    request's data): ONNX Runtime's static quantizer for onnxruntime, NNCF's post-training
    quantization for openvino."""

    name = "int8_static"
    needs_on = {"cpu": ("cpu.avx2",)}


@register
class Fp8(DevicePrecision):
    """torchao's float8 Linear layers, on CUDA with compute capability >= 8.9."""

    name = "fp8"

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        if config.device != "cuda" or "cuda.fp8" not in target.capabilities:
            return "precision.mode=fp8 needs CUDA with compute capability >= 8.9"
        return super().supports(config, target)


@register
class Int4WeightOnly(DevicePrecision):
    """4-bit weights in blocks of 32 with a float scale each (ONNX Runtime's MatMulNBits),
    activations in fp32: MatMul weights a quarter of their int8 size, for models whose
    MatMul weights dominate (transformers). Not in the shipped spaces: a space names it."""

    name = "int4_weight_only"
