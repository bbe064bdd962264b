"""autotune's own ONNX Runtime execution providers (`providers.py` declares what a provider
is): the CPU provider, CUDA's and TensorRT's, and OpenVINO's inside ONNX Runtime. Registered
through autotune's `autotune.providers` entry point, in this order."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from autotune.core.knobs.base import Package
from autotune.core.knobs.providers import ExecutionProvider, ProviderOptions, register_provider

# No option names a device: a trial's slot sees only the GPUs it was given, and a session
# runs on the first of them (ONNX Runtime's device_id 0).


class CudaOptions(ProviderOptions):
    # How cuDNN picks each convolution's algorithm: timing every one, its heuristics, or none.
    cudnn_conv_algo_search: Literal["EXHAUSTIVE", "HEURISTIC", "DEFAULT"] = "EXHAUSTIVE"


class TensorrtOptions(ProviderOptions):
    # How long TensorRT's builder searches for kernels; below 3 it may build slower engines.
    trt_builder_optimization_level: int = Field(default=3, ge=0, le=5)
    # fp16 kernels for an fp32 model change its numerics: off, as ONNX Runtime has it.
    trt_fp16_enable: bool = False
    trt_engine_cache_enable: bool = False


class OpenVinoOptions(ProviderOptions):
    device_type: str = "CPU"  # an OpenVINO device: CPU, GPU, NPU, GPU.0, ...


@register_provider
class Cpu(ExecutionProvider):
    name = "cpu"
    ort_name = "CPUExecutionProvider"
    refuses = frozenset({"fp16"})


@register_provider
class Cuda(ExecutionProvider):
    name = "cuda"
    ort_name = "CUDAExecutionProvider"
    fallbacks = ("cpu",)
    device = "cuda"
    needs = ("cuda",)
    options = CudaOptions()


@register_provider
class Tensorrt(ExecutionProvider):
    name = "tensorrt"
    ort_name = "TensorrtExecutionProvider"
    fallbacks = ("cuda", "cpu")
    device = "cuda"
    needs = ("cuda",)
    options = TensorrtOptions()


@register_provider
class OpenVino(ExecutionProvider):
    """OpenVINO's provider inside ONNX Runtime (the onnxruntime-openvino build). fp16 on it is
    not verified, so it is not offered."""

    name = "openvino"
    ort_name = "OpenVINOExecutionProvider"
    fallbacks = ("cpu",)
    refuses = frozenset({"fp16"})
    package = Package("onnxruntime", ("ort-openvino",))
    options = OpenVinoOptions()
