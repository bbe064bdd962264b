"""The OpenVINO Runtime engine, declared: on the CPU plugin it runs the fp32 ONNX export and
applies the precision itself as INFERENCE_PRECISION_HINT (f32 or bf16) when it compiles the
model, so no bf16 copy of the model is built. It also applies runtime.threads
(INFERENCE_NUM_THREADS), its own runtime.ov_performance_hint (PERFORMANCE_HINT) and
runtime.ov_streams (NUM_STREAMS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core.knobs.base import DEVICE_KEY, Engine, Option, Target, register
from autotune.core.knobs.engines import foreign_setting

if TYPE_CHECKING:
    from autotune.core.knobs.config import TrialConfig

OV_PERFORMANCE_HINT = Option("runtime.ov_performance_hint", ("latency", "throughput"), "latency")
OV_STREAMS = Option("runtime.ov_streams", None, 1)
# precision.mode -> the INFERENCE_PRECISION_HINT type name that applies it.
OV_PRECISIONS = {"fp32": "f32", "bf16": "bf16"}


@register
class OpenVino(Engine):
    name = "openvino"
    model_format = "onnx"
    applies_precisions = frozenset(OV_PRECISIONS)
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
        streams = config.option(OV_STREAMS.key)
        if isinstance(streams, int) and streams > config.threads:
            return (
                f"{OV_STREAMS.key}={streams} exceeds runtime.threads={config.threads}: "
                "each OpenVINO stream needs a thread of its own"
            )
        return None
