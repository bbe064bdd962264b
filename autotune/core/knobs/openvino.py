"""The OpenVINO Runtime engine, declared: on the CPU plugin it runs the fp32 ONNX export and
applies fp32 and bf16 itself as INFERENCE_PRECISION_HINT (f32 or bf16) when it compiles the
model, so no bf16 copy of the model is built. int8_static is a variant built beforehand: NNCF's
post-training quantization of the fp32 export (an ONNX model in QDQ format, compiled with f32
for what stays in float), which keeps its `precision.fallback` most sensitive nodes in float
and applies the static int8 quantizer settings ONNX Runtime's int8_static searches
(precision.calibration minmax or percentile, precision.per_channel,
precision.symmetric_activations, precision.op_types) through NNCF's own parameters; NNCF has no
entropy (KL-divergence) calibration, so precision.calibration=entropy is refused. It also
applies runtime.threads (INFERENCE_NUM_THREADS), its own runtime.ov_performance_hint
(PERFORMANCE_HINT) and runtime.ov_streams (NUM_STREAMS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core.knobs.base import (
    DEVICE_KEY,
    PRECISION_KEY,
    Engine,
    Option,
    Package,
    Target,
    register,
)
from autotune.core.knobs.engines import (
    CALIBRATION,
    STATIC_INT8_OPTIONS,
    foreign_setting,
    static_int8_setting,
)

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
# precision.calibration values NNCF has no range estimator for, and why.
NNCF_LACKS_CALIBRATION = {
    "entropy": "NNCF has no KL-divergence (entropy) calibration, and no other method stands in "
    "for it",
}


@register
class OpenVino(Engine):
    name = "openvino"
    model_format = "onnx"
    precisions = frozenset(OV_PRECISIONS)
    applies_precisions = OV_HINTED_PRECISIONS
    applies = frozenset({"fallback"})
    options = (OV_PERFORMANCE_HINT, OV_STREAMS, *STATIC_INT8_OPTIONS)
    needs = ("openvino",)
    package = Package("openvino", ("openvino",))
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
        reason = self._quantization_reason(config)
        if reason is not None:
            return reason
        streams = config.option(OV_STREAMS.key)
        if isinstance(streams, int) and streams > config.threads:
            return (
                f"{OV_STREAMS.key}={streams} exceeds runtime.threads={config.threads}: "
                "each OpenVINO stream needs a thread of its own"
            )
        return None

    def _quantization_reason(self, config: TrialConfig) -> str | None:
        """Why the configuration's int8 settings cannot apply here: a fallback or a static
        int8 setting on a mode other than int8_static, or a calibration NNCF lacks."""
        if config.precision != OV_INT8:
            if config.fallback:
                return (
                    f"precision.fallback={config.fallback} keeps nodes of an int8 model in "
                    f"float; {self.key}={self.name} quantizes with {PRECISION_KEY}={OV_INT8} "
                    f"only, not {config.precision}"
                )
            return static_int8_setting(config)
        return nncf_calibration_refusal(str(config.option(CALIBRATION.key)))


def nncf_calibration_refusal(calibration: str) -> str | None:
    """Why NNCF, which builds OpenVINO's int8_static, cannot calibrate as `calibration` says
    (None where it can)."""
    why = NNCF_LACKS_CALIBRATION.get(calibration)
    if why is None:
        return None
    return (
        f"{CALIBRATION.key}={calibration}: {OpenVino.key}={OpenVino.name} quantizes "
        f"{PRECISION_KEY}={OV_INT8} with NNCF; {why}"
    )
