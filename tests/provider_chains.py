"""What ONNX Runtime is given for an execution provider, as the tests expect it."""

from __future__ import annotations

# For TensorRT, where a configuration leaves its options out.
TENSORRT_DEFAULTS = {
    "trt_builder_optimization_level": "3",
    "trt_fp16_enable": "false",
    "trt_engine_cache_enable": "false",
}
