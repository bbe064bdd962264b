"""The longer precision routines the precision implementations call
(`workers.building.knobs.precisions`): torch int8 (dynamic) and fp8 (torchao), and ONNX int8
(dynamic, or static calibrated on the workload's calibration samples as `StaticSettings` say)
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
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.errors import Unsupported
from autotune.core.int8_fallback import STATIC_OP_TYPES
from workers.building.failures import is_out_of_memory
from workers.building.variants import TorchVariant
from workers.loading.feeds import feed, graph_inputs, model_fixed_batch
from workers.loading.onnx_normalize import subgraphs

if TYPE_CHECKING:
    import onnx
    import torch

logger = logging.getLogger(__name__)

# Static quantization calibrates on at most this many of the calibration samples (held out of
# the evaluation, `workers.loading.workloads.EvalData`), evenly spaced over them, fed in
# batches of CALIBRATION_BATCH (or the model's fixed batch size).
CALIBRATION_SAMPLES = 256
CALIBRATION_BATCH = 32
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
            calibration, infinite = _calibration(
                model, reader, settings.calibration, op_types, directory
            )
            quantize_static(
                model, output, quant_format=QuantFormat.QDQ,
                per_channel=per_channel and settings.per_channel,
                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
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


# quantize_static gives ONNX Runtime's entropy calibrator as many quantized bins as histogram
# bins (128 each), which leaves its KL-divergence search a single candidate, the full range
# (MinMax's). Calibrated apart, it histograms ENTROPY_BINS and searches ranges of
# ENTROPY_QUANTIZED_BINS to ENTROPY_BINS bins (TensorRT's method). The search's time grows with
# the square of the bins (about 1 s per activation at 1024 on a 2-core Xeon, 3 s at 2048).
ENTROPY_BINS = 1024
ENTROPY_QUANTIZED_BINS = 128


def _calibration(
    model: onnx.ModelProto,
    reader: Any,
    method: str,
    op_types: tuple[str, ...] | None,
    directory: str,
) -> tuple[dict[str, Any], set[str]]:
    """quantize_static's calibration arguments for `method` (the activation ranges calibrated
    apart, in the cache file it reads) and the nodes to keep in float: those that produce or
    read an activation that held infinities or NaN (an attention mask's -inf), which has no
    int8 range. Calibrated apart, every method sees each activation's finite values only
    (`FiniteOutputs`), and entropy searches ENTROPY_BINS."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator, save_tensors_data
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    calibrated = Path(directory) / "calibrated.onnx"
    # saving as external data rewrites the model it saves; the quantizer reads it after
    onnx.save_model(copy.deepcopy(model), str(calibrated), save_as_external_data=True)
    chosen, extra = CALIBRATIONS[method]
    calibrator = create_calibrator(
        calibrated,
        list(op_types or sorted({*QLinearOpsRegistry, *QDQRegistry})),
        augmented_model_path=str(Path(directory) / "augmented.onnx"),
        calibrate_method=getattr(CalibrationMethod, chosen),
        extra_options=extra,
    )
    session = FiniteOutputs(calibrator.infer_session)
    calibrator.infer_session = session
    calibrator.collect_data(reader)
    ranges = Path(directory) / "ranges.json"
    save_tensors_data(calibrator.compute_data(), ranges)
    arguments = {
        "calibration_data_reader": None,
        "calibrate_method": getattr(CalibrationMethod, chosen),
        "calibration_cache_path": ranges,
    }
    touching = {
        node.name
        for node in model.graph.node
        if session.non_finite.intersection([*node.input, *node.output])
    }
    return arguments, touching


# precision.calibration -> ONNX Runtime's calibration method and its options.
CALIBRATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "minmax": ("MinMax", {}),
    "percentile": ("Percentile", {}),  # its 99.999th percentile, of 2048 bins
    "entropy": (
        "Entropy",
        {"num_bins": ENTROPY_BINS, "num_quantized_bins": ENTROPY_QUANTIZED_BINS},
    ),
}


class FiniteOutputs:
    """A calibrator's inference session whose outputs hold finite values only: an activation's
    infinities (an attention mask's -inf added to the scores before a softmax) become its
    finite extremes and NaN 0, so a range is what the finite values span; with an infinity
    in it a min/max scale is infinite and a histogram cannot be built."""

    def __init__(self, session: Any) -> None:
        self._session = session
        # The tensors whose outputs held a non-finite value (MinMax's augmented model outputs
        # each tensor's `<name>_ReduceMin` and `<name>_ReduceMax`, the others the tensor).
        self.non_finite: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def run(self, output_names: Any, feeds: Any) -> list[Any]:
        names = output_names or [output.name for output in self._session.get_outputs()]
        outputs = []
        for name, output in zip(names, self._session.run(output_names, feeds), strict=True):
            cleaned = finite(output)
            if cleaned is not output:
                self.non_finite.add(name.removesuffix("_ReduceMin").removesuffix("_ReduceMax"))
            outputs.append(cleaned)
        return outputs


def finite(array: Any) -> Any:
    """`array` with its non-finite values replaced by its finite extremes (NaN by 0)."""
    if not isinstance(array, np.ndarray) or not np.issubdtype(array.dtype, np.floating):
        return array
    valid = np.isfinite(array)
    if valid.all():
        return array
    low, high = (array[valid].min(), array[valid].max()) if valid.any() else (0.0, 0.0)
    return np.nan_to_num(array, nan=0.0, posinf=high, neginf=low)


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


def calibration_subset(inputs: np.ndarray, limit: int = CALIBRATION_SAMPLES) -> np.ndarray:
    """At most `limit` samples, evenly spaced over `inputs` (so data sorted by class still
    contributes every class); always the same ones."""
    count = min(len(inputs), limit)
    return inputs[np.arange(count) * len(inputs) // count]


def calibration_feeds(
    model: onnx.ModelProto, samples: np.ndarray, mode: str = "int8_static"
) -> list[dict[str, np.ndarray]]:
    """`samples` as the model's feeds, in batches of one size: the model's fixed batch size,
    else at most CALIBRATION_BATCH and as even as the count allows; the few left over are left
    out (ONNX Runtime's histogram calibrators stack the batches' outputs, so they need one
    shape)."""
    inputs = graph_inputs(model)
    count = len(samples)
    size = model_fixed_batch(inputs) or count // max(1, -(-count // CALIBRATION_BATCH))
    if size == 0 or count < size:
        raise Unsupported(
            f"precision.mode={mode}: {count} calibration samples do not fill one batch"
            + (f" of {size}" if size else "")
        )
    stop = count - count % size
    return [feed(samples[start : start + size], inputs) for start in range(0, stop, size)]


def calibration_reader(model: onnx.ModelProto, samples: np.ndarray) -> Any:
    """An onnxruntime CalibrationDataReader feeding `calibration_feeds(model, samples)`."""
    from onnxruntime.quantization import CalibrationDataReader

    batches = calibration_feeds(model, samples)

    class Batches(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._batches: Iterator[dict[str, np.ndarray]] = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._batches, None)

    return Batches()


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
