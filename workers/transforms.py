"""Transforms: each takes a variant and the trial's settings and returns a new variant, or
raises `Unsupported` when it cannot build that configuration (the trial is pruned, not failed).

`build_variant` applies them in `PIPELINE` order: pruning works on fp32 weights, the ONNX export
(only for the onnxruntime engine on a torch model) sees the pruned fp32 model, and precision
comes last, in the variant's own format.
"""

from __future__ import annotations

import copy
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from autotune.errors import Unsupported
from workers.config import TrialConfig
from workers.variants import BuildContext, OnnxVariant, TorchVariant, Variant

if TYPE_CHECKING:
    import onnx
    import torch

Transform = Callable[[Variant, TrialConfig, BuildContext], Variant]

TRANSFORMS: dict[str, Transform] = {}
PIPELINE = ("prune", "export_onnx", "precision")
ONNX_OPSET = 17
# Per ONNX op, the inputs that are weights when they are initializers (not activations).
_ONNX_WEIGHT_INPUTS = {"Conv": (1,), "ConvTranspose": (1,), "Gemm": (0, 1), "MatMul": (0, 1)}


def register_transform(name: str) -> Callable[[Transform], Transform]:
    def register(transform: Transform) -> Transform:
        if name in TRANSFORMS:
            raise ValueError(f"transform {name!r} is already registered")
        TRANSFORMS[name] = transform
        return transform

    return register


def build_variant(original: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    check_precision(config)  # before pruning and exporting, which may take a while
    variant = original
    for name in PIPELINE:
        variant = TRANSFORMS[name](variant, config, context)
    return variant


@register_transform("prune")
def prune(variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    """Global unstructured L1-magnitude pruning over every Conv/Linear (ONNX: Conv/Gemm/MatMul)
    weight: exactly round(ratio * n_weights) of them become zero, permanently."""
    if not config.prunes:
        return variant
    if isinstance(variant, TorchVariant):
        return TorchVariant(prune_torch(variant.module, config.prune_ratio), variant.input_dtype)
    return OnnxVariant(prune_onnx(variant.model_bytes, config.prune_ratio))


def prunable_torch_modules(module: torch.nn.Module) -> list[torch.nn.Module]:
    from torch import nn

    kinds = (
        nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d,
        nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
    )  # fmt: skip
    return [child for child in module.modules() if isinstance(child, kinds)]


def prune_torch(module: torch.nn.Module, ratio: float) -> torch.nn.Module:
    from torch.nn.utils import prune as torch_prune

    pruned = copy.deepcopy(module)
    targets = [(child, "weight") for child in prunable_torch_modules(pruned)]
    if not targets:
        raise Unsupported("prune.method=magnitude: the model has no Conv/Linear weights")
    torch_prune.global_unstructured(
        targets, pruning_method=torch_prune.L1Unstructured, amount=ratio
    )
    for child, name in targets:
        torch_prune.remove(child, name)
    return pruned.eval()


def prune_onnx(model_bytes: bytes, ratio: float) -> bytes:
    import onnx
    from onnx import numpy_helper

    model = onnx.load_model_from_string(model_bytes)
    weights = onnx_weight_initializers(model)
    if not weights:
        raise Unsupported("prune.method=magnitude: the model has no Conv/Gemm/MatMul weights")
    arrays = [numpy_helper.to_array(tensor) for tensor in weights]
    for tensor, pruned in zip(weights, _zero_smallest(arrays, ratio), strict=True):
        tensor.CopyFrom(numpy_helper.from_array(pruned, tensor.name))
    return model.SerializeToString()


def onnx_weight_initializers(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Floating-point initializers used as the weight of a Conv/Gemm/MatMul node."""
    from onnx import TensorProto

    floating = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    names: dict[str, None] = {}
    for node in model.graph.node:
        for index in _ONNX_WEIGHT_INPUTS.get(node.op_type, ()):
            if index < len(node.input) and node.input[index] in initializers:
                names[node.input[index]] = None
    return [initializers[n] for n in names if initializers[n].data_type in floating]


def _zero_smallest(arrays: list[np.ndarray], ratio: float) -> list[np.ndarray]:
    magnitudes = np.concatenate([np.abs(a.astype(np.float64)).ravel() for a in arrays])
    count = round(ratio * magnitudes.size)  # the same rounding as torch's global pruning
    mask = np.zeros(magnitudes.size, dtype=bool)
    if count > 0:
        mask[np.argpartition(magnitudes, count - 1)[:count]] = True
    pruned, offset = [], 0
    for array in arrays:
        keep = ~mask[offset : offset + array.size].reshape(array.shape)
        pruned.append(np.where(keep, array, np.zeros((), dtype=array.dtype)))
        offset += array.size
    return pruned


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


# Precisions each engine can run here, on the CPU, and why the others cannot.
ENGINE_PRECISIONS = {
    "torch_eager": (
        {"fp32", "bf16", "int8_dynamic"},
        "needs CUDA; the torch_eager runtime here runs on CPU",
    ),
    "onnxruntime": (
        {"fp32", "int8_dynamic"},
        "is not supported by onnxruntime's CPUExecutionProvider",
    ),
}


def check_precision(config: TrialConfig) -> None:
    supported, why_not = ENGINE_PRECISIONS[config.engine]
    if config.precision not in supported:
        raise Unsupported(f"precision.mode={config.precision} {why_not}")


@register_transform("precision")
def precision(variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    check_precision(config)
    if config.precision == "fp32":
        return variant
    if isinstance(variant, TorchVariant):
        return _torch_precision(variant, config.precision)
    return OnnxVariant(quantize_onnx_int8(variant.model_bytes))


def _torch_precision(variant: TorchVariant, mode: str) -> TorchVariant:
    """bf16 casts weights and inputs (outputs come back as float32). int8_dynamic quantizes the
    Linear layers' weights to int8 with activations quantized per batch at run time; convolutions
    stay fp32 because torch's dynamic quantization has no conv kernels."""
    import torch

    if mode == "bf16":
        return TorchVariant(copy.deepcopy(variant.module).to(torch.bfloat16), torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensor types are deprecated, still work
        quantized = torch.ao.quantization.quantize_dynamic(
            variant.module, {torch.nn.Linear}, dtype=torch.qint8, inplace=False
        )
    return TorchVariant(quantized.eval(), variant.input_dtype)


# Quantizing every supported op first; without Conv if this onnxruntime build has no
# ConvInteger kernel for int8 weights.
INT8_OP_TYPE_CHOICES: tuple[tuple[str, ...] | None, ...] = (None, ("MatMul", "Gemm"))


def quantize_onnx_int8(model_bytes: bytes) -> bytes:
    """Dynamic quantization: int8 weights, activations quantized per batch at run time."""
    failures = []
    for op_types in INT8_OP_TYPE_CHOICES:
        quantized = _quantize_dynamic(model_bytes, op_types)
        problem = cpu_load_problem(quantized)
        if problem is None:
            return quantized
        failures.append(f"op types {op_types or 'all'}: {problem}")
    raise Unsupported(
        "precision.mode=int8_dynamic: no quantized model loads on CPU; " + "; ".join(failures)
    )


def _quantize_dynamic(model_bytes: bytes, op_types: tuple[str, ...] | None) -> bytes:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "quantized.onnx"
        quantize_dynamic(
            onnx.load_model_from_string(model_bytes),
            output,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=list(op_types) if op_types else None,
        )
        return output.read_bytes()


def cpu_load_problem(model_bytes: bytes) -> str | None:
    """Why onnxruntime's CPU execution provider cannot load this model, or None if it can."""
    import onnxruntime

    try:
        onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None
