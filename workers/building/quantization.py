"""The longer precision routines the precision implementations call
(`workers.building.knobs.precisions`): torch int8 (dynamic) and fp8 (torchao), and ONNX int8
(dynamic, or static calibrated on the workload's calibration samples as `StaticSettings` say:
`workers.building.calibration`)
and float16. The int8 routines leave the nodes (torch: Linear modules) they are given in float
(`precision.fallback`, ranked by `workers.building.sensitivity` and
`workers.building.torch_sensitivity`) and name them: in an ONNX model's metadata
(FLOAT_NODES_KEY), in a torch variant's `float_modules`.

The precision declarations (`autotune.core.knobs.precisions`) decide beforehand which precision
runs where; the functions here build what they are asked for.
"""

from __future__ import annotations

import copy
import json
import logging
import tempfile
import warnings
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.errors import Unsupported
from autotune.core.int8_fallback import STATIC_OP_TYPES
from workers.building.calibration import (
    calibration_arguments,
    calibration_reader,
    calibration_subset,
)
from workers.building.cpu_flags import int8_sums_saturate
from workers.building.failures import is_out_of_memory
from workers.building.variants import TorchVariant
from workers.loading.onnx_normalize import subgraphs

if TYPE_CHECKING:
    import onnx
    import torch

logger = logging.getLogger(__name__)

# torch._scaled_mm, behind torchao's float8 linear, needs both weight dimensions divisible by 16.
FP8_DIVISOR = 16
FP8_MIN_CAPABILITY = (8, 9)


# --- torch --------------------------------------------------------------------------------------


def torch_int8_dynamic(variant: TorchVariant, float_modules: Sequence[str] = ()) -> TorchVariant:
    """int8 Linear weights, activations quantized per batch at run time (CPU kernels only);
    convolutions stay fp32 because torch's dynamic quantization has no conv kernels. The
    Linear modules named in `float_modules` (qualified names, `precision.fallback`) stay in
    float, and the variant names them."""
    import torch

    if not float_modules:
        return TorchVariant(
            quantize_linears(variant.module, {torch.nn.Linear}), variant.input_dtype
        )
    linears = quantizable_linears(variant.module)
    _refuse_float_modules(linears, float_modules)
    quantized = quantize_linears(variant.module, set(linears) - set(float_modules))
    return TorchVariant(quantized, variant.input_dtype, float_modules=tuple(float_modules))


def quantize_linears(
    module: torch.nn.Module, spec: AbstractSet[type[torch.nn.Module]] | AbstractSet[str]
) -> torch.nn.Module:
    """A dynamic int8 copy of `module`: the Linear modules of the types, or with the qualified
    names, in `spec` quantized, the module itself untouched."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensor types are deprecated, still work
        quantized = torch.ao.quantization.quantize_dynamic(
            module, spec, dtype=torch.qint8, inplace=False
        )
    return quantized.eval()


def quantizable_linears(module: torch.nn.Module) -> list[str]:
    """The qualified names of the modules that dynamic int8 quantizes: those of type
    nn.Linear exactly (a subclass, such as MultiheadAttention's out_proj, has no dynamic
    kernel and stays float), largest weight first (ties in module order)."""
    import torch
    from torch.nn.utils.parametrize import type_before_parametrizations

    linears = [
        (name, child.weight.numel())
        for name, child in module.named_modules()
        if type_before_parametrizations(child) is torch.nn.Linear
    ]
    return [name for name, _ in sorted(linears, key=lambda pair: -pair[1])]


def _refuse_float_modules(linears: Sequence[str], float_modules: Sequence[str]) -> None:
    """`Unsupported` where `float_modules` names a module dynamic int8 would not quantize
    (of `linears`, those it quantizes), or leaves none to quantize (a float model is not an
    int8 variant)."""
    unknown = sorted(set(float_modules) - set(linears))
    if unknown:
        raise Unsupported(f"precision.fallback: the model has no nn.Linear module named {unknown}")
    if set(linears) <= set(float_modules):
        raise Unsupported(
            f"precision.fallback={len(float_modules)} keeps every nn.Linear module of the "
            "model in float; an int8 model keeps some of them quantized"
        )


def torch_fp8(variant: TorchVariant, device: str) -> TorchVariant:
    """torchao float8 (e4m3) dynamic row-wise quantization of weights and activations for every
    Linear whose dimensions divide by 16; the rest of the model runs in bfloat16 on `device`."""
    import torch
    from torchao.quantization import (
        Float8DynamicActivationFloat8WeightConfig,
        PerRow,
        quantize_,
    )

    module = copy.deepcopy(variant.module).to(device=device, dtype=torch.bfloat16).eval()
    if not any(fp8_linear(child) for child in module.modules()):
        raise Unsupported(
            f"precision.mode=fp8: no Linear layer has both dimensions divisible by {FP8_DIVISOR}"
        )
    config = Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())
    quantize_(module, config, filter_fn=lambda child, name: fp8_linear(child))
    return TorchVariant(module, torch.bfloat16)


def fp8_linear(child: torch.nn.Module) -> bool:
    from torch import nn

    return (
        isinstance(child, nn.Linear)
        and child.in_features % FP8_DIVISOR == 0
        and child.out_features % FP8_DIVISOR == 0
    )


# --- ONNX ---------------------------------------------------------------------------------------

# Quantizing every supported op first; without Conv if this onnxruntime build has no
# ConvInteger kernel for int8 weights.
INT8_OP_TYPE_CHOICES: tuple[tuple[str, ...] | None, ...] = (None, ("MatMul", "Gemm"))


def quantize_onnx_int8(model_bytes: bytes, float_nodes: Sequence[str] = ()) -> bytes:
    """Dynamic quantization: int8 weights, activations quantized per batch at run time; the
    nodes named in `float_nodes` stay in float (and the model's metadata names them)."""
    failures = []
    for op_types in INT8_OP_TYPE_CHOICES:
        try:
            quantized = quantize_dynamic_nodes(model_bytes, op_types, exclude=float_nodes)
        except Exception as error:  # e.g. a weight the quantizer cannot read as a constant
            failures.append(f"op types {op_types or 'all'}: {type(error).__name__}: {error}")
            continue
        problem = cpu_load_problem(quantized)
        if problem is None:
            return with_float_nodes(refuse_unquantized(quantized, "int8_dynamic"), float_nodes)
        failures.append(f"op types {op_types or 'all'}: {problem}")
    raise Unsupported(
        "precision.mode=int8_dynamic: no quantized model loads on CPU; " + "; ".join(failures)
    )


def quantize_dynamic_nodes(
    model_bytes: bytes,
    op_types: tuple[str, ...] | None,
    exclude: Sequence[str] = (),
    only: Sequence[str] | None = None,
) -> bytes:
    """ONNX Runtime's dynamic quantizer over `op_types` (None: all it knows), leaving out the
    nodes named in `exclude`; with `only`, quantizing those nodes alone."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "quantized.onnx"
        quantize_dynamic(
            with_node_names(model_bytes),
            output,
            weight_type=QuantType.QInt8,
            reduce_range=int8_sums_saturate(),
            op_types_to_quantize=list(op_types) if op_types else None,
            nodes_to_quantize=list(only) if only is not None else None,
            nodes_to_exclude=list(exclude),
        )
        return output.read_bytes()


@dataclass(frozen=True)
class StaticSettings:
    """How the static quantizer works (`precision.calibration`, `precision.per_channel`,
    `precision.symmetric_activations`, `precision.op_types`): how activation ranges are
    calibrated (minmax: the observed min and max; entropy: the range that keeps the
    distribution's information, KL divergence; percentile: the observed 99.999th percentile),
    whether weights take a scale per output channel or one per tensor, whether activations
    are quantized symmetrically (zero point 0), and which ops are quantized (all it knows, or
    MatMul and Gemm alone, convolutions left in float). The defaults are what it always did."""

    calibration: str = "minmax"
    per_channel: bool = True
    symmetric_activations: bool = False
    op_types: str = "all"


def quantize_onnx_int8_static(
    model_bytes: bytes,
    inputs: np.ndarray,
    float_nodes: Sequence[str] = (),
    settings: StaticSettings = StaticSettings(),
) -> bytes:
    """Static quantization in QDQ format: int8 weights and int8 activations whose ranges were
    calibrated on `calibration_subset(inputs)` as `settings` say; the nodes named in
    `float_nodes` stay in float (and the model's metadata names them)."""
    samples = calibration_subset(inputs)
    quantized = quantize_static_nodes(model_bytes, samples, float_nodes, settings=settings)
    problem = cpu_load_problem(quantized)
    if problem is not None:
        raise Unsupported(
            f"precision.mode=int8_static: the quantized model does not load: {problem}"
        )
    return with_float_nodes(refuse_unquantized(quantized, "int8_static"), float_nodes)


def quantize_static_nodes(
    model_bytes: bytes,
    samples: np.ndarray,
    exclude: Sequence[str] = (),
    only: Sequence[str] | None = None,
    settings: StaticSettings = StaticSettings(),
) -> bytes:
    """ONNX Runtime's static QDQ quantizer calibrated on `samples` as `settings` say, leaving
    out the nodes named in `exclude`; with `only`, quantizing those nodes alone."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    model, per_channel = _with_per_channel_qdq(with_node_names(model_bytes))
    reader = calibration_reader(model, samples)
    op_types = STATIC_OP_TYPES[settings.op_types]
    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "quantized.onnx"
        try:
            calibration, infinite = calibration_arguments(
                model, reader, settings.calibration, op_types, directory
            )
            quantize_static(
                model, output, quant_format=QuantFormat.QDQ,
                per_channel=per_channel and settings.per_channel,
                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                reduce_range=int8_sums_saturate(),
                op_types_to_quantize=list(op_types) if op_types else None,
                nodes_to_quantize=list(only) if only is not None else None,
                nodes_to_exclude=[*exclude, *sorted(infinite - set(exclude))],
                extra_options={"ActivationSymmetric": settings.symmetric_activations},
                **calibration,
            )  # fmt: skip
        except Exception as error:  # the quantizer's own failure on this model
            if is_out_of_memory(error):
                raise
            first_line = (str(error).strip().splitlines() or [""])[0][:300]
            raise Unsupported(
                "precision.mode=int8_static: ONNX Runtime's static quantizer fails on this "
                f"model ({type(error).__name__}: {first_line})"
            ) from error
        return output.read_bytes()


# The model metadata key that lists, as JSON, the nodes an int8 model keeps in float.
FLOAT_NODES_KEY = "autotune.float_nodes"


def node_op_types(model_bytes: bytes) -> dict[str, str]:
    """Each top-level node's op type by name (unnamed nodes named as `with_node_names` does)."""
    return {node.name: node.op_type for node in with_node_names(model_bytes).graph.node}


def with_float_nodes(model_bytes: bytes, float_nodes: Sequence[str]) -> bytes:
    """The model with `float_nodes` named in its metadata (FLOAT_NODES_KEY), where any."""
    import onnx

    if not float_nodes:
        return model_bytes
    model = onnx.load_model_from_string(model_bytes)
    props = {p.key: p.value for p in model.metadata_props}
    onnx.helper.set_model_props(model, {**props, FLOAT_NODES_KEY: json.dumps(list(float_nodes))})
    return bytes(model.SerializeToString())


def float_nodes_of(model_bytes: bytes) -> list[str]:
    """The nodes an int8 model says it keeps in float (FLOAT_NODES_KEY)."""
    import onnx

    model = onnx.load_model_from_string(model_bytes)
    recorded = next((p.value for p in model.metadata_props if p.key == FLOAT_NODES_KEY), "[]")
    return [str(name) for name in json.loads(recorded)]


def with_node_names(model_bytes: bytes) -> onnx.ModelProto:
    """The model with every unnamed top-level node named `<op type>_<index>` (the quantizer
    leaves nodes out by name; the same model always gets the same names)."""
    import onnx

    model = onnx.load_model_from_string(model_bytes)
    for index, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{index}"
    return model


# What a quantizer puts where it quantized something, in either format.
QUANTIZED_OPS = frozenset(
    {"QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "QLinearConv",
     "QLinearMatMul", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}
)  # fmt: skip


def refuse_unquantized(model_bytes: bytes, mode: str) -> bytes:
    """`model_bytes` where the quantizer quantized at least one node; else `Unsupported`: a
    model it left in float (its weights inside If/Loop/Scan subgraphs, which it does not
    enter) is not an int8 variant, and measuring it as one would be a wrong answer."""
    import onnx

    model = onnx.load_model_from_string(model_bytes)
    if any(node.op_type in QUANTIZED_OPS for node in _all_nodes(model.graph)):
        return model_bytes
    nested = sum(1 for node in model.graph.node for _ in subgraphs(node))
    where = (
        f"; its {nested} If/Loop/Scan subgraphs, where its weights may be, are not quantized"
        if nested
        else ""
    )
    raise Unsupported(f"precision.mode={mode}: the quantizer left every node in float{where}")


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    nodes = list(graph.node)
    for node in graph.node:
        for subgraph in subgraphs(node):
            nodes += _all_nodes(subgraph)
    return nodes


# DequantizeLinear takes a per-channel axis from this opset on.
PER_CHANNEL_OPSET = 13


def _with_per_channel_qdq(model: onnx.ModelProto) -> tuple[onnx.ModelProto, bool]:
    """The model at an opset whose QDQ nodes take per-channel scales (older exports, such as
    Paddle's at opset 11 or 12, are converted), and whether they can: a model that does not
    convert is quantized per tensor."""
    from onnx import version_converter

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset >= PER_CHANNEL_OPSET:
        return model, True
    try:
        return version_converter.convert_version(model, PER_CHANNEL_OPSET), True
    except Exception:  # the converter lacks an adapter for one of its nodes
        logger.info(
            "opset %d could not be raised to %d: int8 weights per tensor, not per channel",
            opset,
            PER_CHANNEL_OPSET,
            exc_info=True,
        )
        return model, False


def convert_onnx_fp16(model_bytes: bytes) -> bytes:
    """Float16 weights and compute; inputs and outputs stay float32 (casts at the edges)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load_model_from_string(model_bytes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it warns about values it clamps to the fp16 range
        converted = convert_float_to_float16(model, keep_io_types=True)
    return converted.SerializeToString()


def cpu_load_problem(model_bytes: bytes) -> str | None:
    """Why onnxruntime's CPU execution provider cannot load this model, or None if it can."""
    import onnxruntime

    try:
        onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None
