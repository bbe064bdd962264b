"""The OpenVINO Runtime engine, declared: on the CPU plugin it runs the fp32 ONNX export and
applies fp32 and bf16 itself as INFERENCE_PRECISION_HINT (f32 or bf16) when it compiles the
model, so no bf16 copy of the model is built. int8_static is a variant built beforehand: NNCF's
post-training quantization of the fp32 export (an ONNX model in QDQ format, compiled with f32
for what stays in float), which keeps its `precision.fallback` most sensitive nodes in float.
It also applies runtime.threads (INFERENCE_NUM_THREADS), its own runtime.ov_performance_hint
(PERFORMANCE_HINT) and runtime.ov_streams (NUM_STREAMS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core.knobs.base import DEVICE_KEY, PRECISION_KEY, Engine, Option, Target, register
from autotune.core.knobs.engines import foreign_setting

if TYPE_CHECKING:
    from autotune.core.knobs.config import TrialConfig

OV_PERFORMANCE_HINT = Option("runtime.ov_performance_hint", ("latency", "throughput"), "latency")
OV_STREAMS = Option("runtime.ov_streams", None, 1)
# precision.mode -> the INFERENCE_PRECISION_HINT type name the model is compiled with (an
# int8_static model's float nodes run in f32, not in the plugin's default, bf16 where it can).
OV_PRECISIONS = {"fp32": "f32", "bf16": "bf16", "int8_static": "f32"}
# The modes the plugin applies to the fp32 export when it compiles it (no variant is built).
OV_HINTED_PRECISIONS = frozenset({"fp32", "bf16"})
OV_INT8 = "int8_static"


@register
class OpenVino(Engine):
    name = "openvino"
    model_format = "onnx"
    applies_precisions = OV_HINTED_PRECISIONS
    applies = frozenset({"fallback"})
    options = (OV_PERFORMANCE_HINT, OV_STREAMS)
    needs = ("openvino",)
    provides = ("openvino",)
    software = ("openvino",)
    concurrent_calls = True  # one compiled model, one infer request per calling thread
    served_as = "autotune"

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        reason = foreign_setting(self, config, {}) or super().supports(config, target)
        if reason is not None:
            return reason
        if config.device != "cpu":
            return f"{DEVICE_KEY}={config.device}: {self.key}={self.name} runs on the CPU only"
        if config.fallback and config.precision != OV_INT8:
            return (
                f"precision.fallback={config.fallback} keeps nodes of an int8 model in float; "
                f"{self.key}={self.name} quantizes with {PRECISION_KEY}={OV_INT8} only, not "
                f"{config.precision}"
            )
        streams = config.option(OV_STREAMS.key)
        if isinstance(streams, int) and streams > config.threads:
            return (
                f"{OV_STREAMS.key}={streams} exceeds runtime.threads={config.threads}: "
                "each OpenVINO stream needs a thread of its own"
            )
        return None
