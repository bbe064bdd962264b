"""Transforms: each takes a variant and the trial's settings and returns a new variant, or
raises `Unsupported` when it cannot build that configuration (the trial is pruned, not failed).

`build_variant` checks the configuration (`unsupported_reason`), then applies the transforms in
`PIPELINE` order: pruning works on fp32 weights, the ONNX export (only for the onnxruntime
engine on a torch model) sees the pruned fp32 model, precision comes next, in the variant's own
format, and moves torch weights to `config.device`; 2:4 sparse compression comes last because
its kernels need the final dtype and device.
"""

from __future__ import annotations

import importlib.util
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from autotune.errors import Unsupported
from workers import pruning, quantization
from workers.config import TrialConfig
from workers.variants import BuildContext, OnnxVariant, TorchVariant, Variant

if TYPE_CHECKING:
    import torch

Transform = Callable[[Variant, TrialConfig, BuildContext], Variant]

TRANSFORMS: dict[str, Transform] = {}
PIPELINE = ("prune", "export_onnx", "precision", "sparsify")
ONNX_OPSET = 17


def register_transform(name: str) -> Callable[[Transform], Transform]:
    def register(transform: Transform) -> Transform:
        if name in TRANSFORMS:
            raise ValueError(f"transform {name!r} is already registered")
        TRANSFORMS[name] = transform
        return transform

    return register


def build_variant(original: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    check_config(config)  # before pruning and exporting, which may take a while
    variant = original
    for name in PIPELINE:
        variant = TRANSFORMS[name](variant, config, context)
    return variant


@register_transform("prune")
def prune(variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    """magnitude: global unstructured L1 pruning of Conv/Linear (ONNX: Conv/Gemm/MatMul)
    weights. structured: whole channels removed, layers shrink (torch models). 2:4: the
    semi-structured mask on fp32 weights (torch models); `sparsify` compresses them later."""
    if not config.prunes:
        return variant
    method, ratio = config.prune_method, config.prune_ratio
    if isinstance(variant, OnnxVariant):
        if method != "magnitude":
            raise Unsupported(f"prune.method={method} needs a torch model; this model is ONNX")
        return OnnxVariant(pruning.prune_onnx(variant.model_bytes, ratio))
    if method == "magnitude":
        module = pruning.prune_torch(variant.module, ratio)
    elif method == "structured":
        module = pruning.prune_structured(variant.module, ratio)
    else:
        module = pruning.apply_2_4_mask(variant.module)
    return TorchVariant(module, variant.input_dtype)


@register_transform("export_onnx")
def export_onnx(variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    """For the onnxruntime engine, export a (pruned, fp32) torch model to ONNX with a dynamic
    batch axis."""
    if config.engine != "onnxruntime" or isinstance(variant, OnnxVariant):
        return variant
    return OnnxVariant(torch_to_onnx(variant.module, context.sample_inputs))


def torch_to_onnx(module: torch.nn.Module, sample_inputs: np.ndarray) -> bytes:
    """TorchScript-based export first (fast, still shipped), the torch.export-based one if the
    former is gone or cannot trace the model."""
    import torch

    example = (torch.from_numpy(np.ascontiguousarray(sample_inputs)),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return _export_torchscript(module, example)
        except Exception as torchscript_error:
            try:
                return _export_dynamo(module, example)
            except Exception as dynamo_error:
                raise Unsupported(
                    "runtime.engine=onnxruntime: the model does not export to ONNX "
                    f"(TorchScript exporter: {torchscript_error}; dynamo exporter: {dynamo_error})"
                ) from dynamo_error


_DYNAMIC_BATCH = {"input": {0: "batch"}, "output": {0: "batch"}}


def _export_torchscript(module: torch.nn.Module, example: tuple[torch.Tensor]) -> bytes:
    import torch

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.onnx"
        torch.onnx.export(
            module, example, str(path), dynamo=False, opset_version=ONNX_OPSET,
            input_names=["input"], output_names=["output"], dynamic_axes=_DYNAMIC_BATCH,
        )  # fmt: skip
        return path.read_bytes()


def _export_dynamo(module: torch.nn.Module, example: tuple[torch.Tensor]) -> bytes:
    import torch

    program = torch.onnx.export(
        module, example, dynamo=True, input_names=["input"], output_names=["output"],
        dynamic_axes=_DYNAMIC_BATCH,
    )  # fmt: skip
    if program is None:
        raise RuntimeError("the exporter returned no program")
    return program.model_proto.SerializeToString()


TORCH_ENGINES = ("torch_eager", "torch_compile")
SPARSE_2_4_MIN_CAPABILITY = (8, 0)


def check_config(config: TrialConfig) -> None:
    reason = unsupported_reason(config)
    if reason is not None:
        raise Unsupported(reason)


def unsupported_reason(config: TrialConfig) -> str | None:
    """Why the transforms cannot build this configuration on this machine, or None."""
    if config.engine in TORCH_ENGINES:
        return _torch_device_reason(config) or _torch_reason(config)
    return _onnxruntime_reason(config)


def _torch_device_reason(config: TrialConfig) -> str | None:
    if config.device == "cuda" and not _cuda_available():
        return "runtime.device=cuda but no CUDA device is visible"
    return None


def _torch_reason(config: TrialConfig) -> str | None:
    precision, on_cuda = config.precision, config.device == "cuda"
    if precision == "fp16" and not on_cuda:
        return "precision.mode=fp16 needs CUDA (runtime.device=cuda)"
    if precision == "int8_dynamic" and on_cuda:
        return "precision.mode=int8_dynamic: torch's dynamic int8 quantization has CPU kernels only"
    if precision == "int8_static":
        return (
            "precision.mode=int8_static runs on runtime.engine=onnxruntime only (torch's static "
            "int8 flows, FX and PT2E, are deprecated)"
        )
    if precision == "fp8":
        reason = _fp8_reason(on_cuda)
        if reason is not None:
            return reason
    if config.prune_method == "semi_structured_2_4":
        return _sparse_2_4_reason(config)
    return None


def _fp8_reason(on_cuda: bool) -> str | None:
    wanted = _version(quantization.FP8_MIN_CAPABILITY)
    if not on_cuda:
        return f"precision.mode=fp8 needs CUDA with compute capability >= {wanted}"
    capability = _cuda_capability()
    if capability < quantization.FP8_MIN_CAPABILITY:
        return (
            f"precision.mode=fp8 needs compute capability >= {wanted}; "
            f"this GPU has {_version(capability)}"
        )
    if not _has_torchao():
        return "precision.mode=fp8 needs the package 'torchao' (pip install torchao)"
    return None


def _sparse_2_4_reason(config: TrialConfig) -> str | None:
    wanted = _version(SPARSE_2_4_MIN_CAPABILITY)
    not_accelerated = (
        "prune.method=semi_structured_2_4: 2:4 sparsity is accelerated only on CUDA "
        f"(compute capability >= {wanted})"
    )
    if config.device != "cuda":
        return not_accelerated
    capability = _cuda_capability()
    if capability < SPARSE_2_4_MIN_CAPABILITY:
        return f"{not_accelerated}; this GPU has {_version(capability)}"
    if config.precision not in ("fp16", "bf16"):
        return (
            "prune.method=semi_structured_2_4 needs precision.mode fp16 or bf16 "
            "(the dtypes of its sparse kernels)"
        )
    return None


def _onnxruntime_reason(config: TrialConfig) -> str | None:
    precision, provider = config.precision, config.ort_provider
    if config.prune_method == "semi_structured_2_4":
        return "prune.method=semi_structured_2_4 is accelerated only by the torch engines on CUDA"
    if precision == "fp8":
        return "precision.mode=fp8 is built with torchao, for the torch engines on CUDA only"
    if precision in ("fp16", "bf16") and provider == "cpu":
        return (
            f"precision.mode={precision} is not supported by onnxruntime's CPUExecutionProvider"
            + ("; it needs runtime.provider=cuda or tensorrt" if precision == "fp16" else "")
        )
    if precision == "bf16":
        return "precision.mode=bf16: onnxruntime's CUDA/TensorRT providers run float16; use fp16"
    return None


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _has_torchao() -> bool:
    return importlib.util.find_spec("torchao") is not None


def _cuda_capability() -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability()


def _version(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


@register_transform("precision")
def precision(variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    """Torch: cast (bf16/fp16) or quantize (int8_dynamic, fp8) and move the weights to
    `config.device`. ONNX: int8 dynamic or static (calibrated on `context.calibration_inputs`)
    quantization, or float16."""
    check_config(config)
    if isinstance(variant, TorchVariant):
        return quantization.torch_precision(variant, config)
    if config.precision == "int8_dynamic":
        return OnnxVariant(quantization.quantize_onnx_int8(variant.model_bytes))
    if config.precision == "int8_static":
        if context.calibration_inputs is None:
            raise Unsupported("precision.mode=int8_static needs calibration inputs")
        inputs = context.calibration_inputs
        return OnnxVariant(quantization.quantize_onnx_int8_static(variant.model_bytes, inputs))
    if config.precision == "fp16":
        return OnnxVariant(quantization.convert_onnx_fp16(variant.model_bytes))
    return variant


@register_transform("sparsify")
def sparsify(variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    """2:4 pruning on CUDA: compress the masked weights for the sparse kernels."""
    if config.prune_method != "semi_structured_2_4" or not isinstance(variant, TorchVariant):
        return variant
    return TorchVariant(pruning.sparsify_2_4(variant.module), variant.input_dtype)
