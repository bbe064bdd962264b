"""OpenVINO's int8 (`precision.mode=int8_static` on `runtime.engine=openvino`): NNCF's
post-training quantization of the fp32 ONNX model, calibrated on the workload's inputs.

NNCF's ONNX backend returns an ONNX model in QDQ format that keeps the model's node names, so
the nodes `precision.fallback` keeps in float are named as the sensitivity ranking names them
(`workers.building.sensitivity`, on the model with every node named by `with_node_names`)
and go into NNCF's IgnoredScope; the model's metadata names them (FLOAT_NODES_KEY). OpenVINO's
ONNX frontend reads the QDQ pairs as FakeQuantize and runs the quantized nodes on int8 kernels;
the exported artifact is this very ONNX model.

The static int8 settings ONNX Runtime's quantizer searches (`StaticSettings`) go to NNCF's own
parameters (`nncf_arguments`):
- precision.calibration: minmax is NNCF's MINMAX range estimator (the least and greatest value
  seen over every calibration batch, as ONNX Runtime's MinMax calibrator takes them);
  percentile is NNCF's quantile estimator cutting, off each end, the share ONNX Runtime's
  percentile calibration cuts (it keeps the central ORT_PERCENTILE % of the values). NNCF takes
  that quantile of each calibration batch and averages the batches' (its MEAN_QUANTILE), where
  ONNX Runtime takes it of one histogram of all of them: on an activation of fewer than
  1 / OUTLIER_SHARE values a batch, each batch's quantile is about its extreme, and the range is
  the batches' mean extremes. entropy (KL divergence) NNCF does not have: refused, never
  replaced by another method.
- precision.per_channel: the weights' QuantizationParameters(per_channel=...).
- precision.symmetric_activations: preset PERFORMANCE (symmetric activations, zero point 0) or
  MIXED (asymmetric activations); weights are symmetric in both, as ONNX Runtime's are.
- precision.op_types=matmul_only: every other op type of the model in the IgnoredScope, so
  NNCF quantizes the inputs of MatMul and Gemm alone, as ONNX Runtime's matmul_only does (its
  convolutions and elementwise ops stay in float); all is every op NNCF's CPU configuration
  quantizes.
The defaults (minmax, per channel, asymmetric activations, all ops) differ from NNCF's own
default for a model of no model_type in two ways: its preset PERFORMANCE quantizes activations
symmetrically, and its activation ranges average each batch's min and max (MEAN_MINMAX) rather
than take the extremes over all of them. NNCF's fast bias correction (of the quantized nodes'
biases), which ONNX Runtime's quantizer does not apply, stays on for every setting.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.errors import Unsupported
from autotune.core.int8_fallback import STATIC_OP_TYPES
from autotune.core.knobs.openvino import nncf_calibration_refusal
from workers.building.calibration import calibration_feeds, calibration_subset
from workers.building.failures import is_out_of_memory
from workers.building.quantization import (
    StaticSettings,
    refuse_unquantized,
    with_float_nodes,
    with_node_names,
)

if TYPE_CHECKING:
    import onnx

MODE = "int8_static"
# NNCF's ONNX backend quantizes models of this opset or later (per-channel DequantizeLinear).
NNCF_MIN_OPSET = 13
# ONNX Runtime's percentile calibration keeps the central 99.999 % of the values it saw, cutting
# half of the rest off each end; NNCF's quantile estimator cuts OUTLIER_SHARE off each end.
ORT_PERCENTILE = 99.999
OUTLIER_SHARE = (100 - ORT_PERCENTILE) / 200
# Every setting at its default.
BASELINE = StaticSettings()


def require_nncf() -> None:
    if importlib.util.find_spec("nncf") is None:
        raise Unsupported(
            f"precision.mode={MODE} on runtime.engine=openvino needs the package 'nncf' "
            "(pip install nncf)"
        )


def quantize_with_nncf(
    model_bytes: bytes,
    inputs: np.ndarray,
    float_nodes: Sequence[str] = (),
    settings: StaticSettings = BASELINE,
) -> bytes:
    """int8 weights and activations whose ranges NNCF observed on `calibration_subset(inputs)`,
    quantized as `settings` say; the nodes named in `float_nodes` stay in float (and the
    model's metadata names them)."""
    require_nncf()
    # NNCF sends usage telemetry unless told it runs in CI: a tuning worker never phones home.
    os.environ.setdefault("NNCF_CI", "1")
    import nncf

    model = _at_least_opset(with_node_names(model_bytes))
    _refuse_unknown(model, float_nodes)
    arguments = nncf_arguments(model, float_nodes, settings)
    batches = calibration_feeds(model, calibration_subset(inputs), MODE)
    nncf.set_log_level(logging.WARNING)  # its INFO lines name every node it leaves out
    try:
        quantized = nncf.quantize(
            model,
            nncf.Dataset(batches),
            subset_size=len(batches),
            **arguments,
        )
    except Exception as error:  # NNCF's own failure on this model
        if is_out_of_memory(error):
            raise
        first_line = (str(error).strip().splitlines() or [""])[0][:300]
        raise Unsupported(
            f"precision.mode={MODE}: NNCF's post-training quantization fails on this model "
            f"({type(error).__name__}: {first_line})"
        ) from error
    return with_float_nodes(refuse_unquantized(quantized.SerializeToString(), MODE), float_nodes)


def nncf_arguments(
    model: onnx.ModelProto, float_nodes: Sequence[str], settings: StaticSettings
) -> dict[str, Any]:
    """`nncf.quantize`'s preset, ignored scope and advanced parameters that quantize as
    `settings` say and leave `float_nodes` in float (the module's docstring says how)."""
    import nncf
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        QuantizationParameters,
    )

    presets = nncf.QuantizationPreset
    return {
        "preset": presets.PERFORMANCE if settings.symmetric_activations else presets.MIXED,
        "ignored_scope": nncf.IgnoredScope(
            names=list(float_nodes), types=unquantized_types(model, settings.op_types)
        ),
        "advanced_parameters": AdvancedQuantizationParameters(
            activations_range_estimator_params=activation_ranges(settings.calibration),
            weights_quantization_params=QuantizationParameters(per_channel=settings.per_channel),
        ),
    }


def activation_ranges(calibration: str) -> Any:
    """NNCF's RangeEstimatorParameters for `precision.calibration`; `Unsupported` for a method
    NNCF does not have."""
    from nncf.quantization.range_estimator import RangeEstimatorParameters as Ranges
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet as Sets

    refusal = nncf_calibration_refusal(calibration)
    if refusal is not None:
        raise Unsupported(refusal)
    if calibration == "minmax":
        return Sets.MINMAX
    if calibration == "percentile":
        quantile = Sets.MEAN_QUANTILE
        return Ranges(
            min=replace(quantile.min, quantile_outlier_prob=OUTLIER_SHARE),
            max=replace(quantile.max, quantile_outlier_prob=OUTLIER_SHARE),
        )
    raise Unsupported(
        f"precision.calibration={calibration} is not one of ['minmax', 'entropy', 'percentile']"
    )


def unquantized_types(model: onnx.ModelProto, op_types: str) -> list[str]:
    """The op types of the model's nodes that `precision.op_types` leaves in float: none for
    all; for matmul_only every type but MatMul and Gemm (NNCF refuses a type the model lacks,
    so only those it has)."""
    quantized = STATIC_OP_TYPES[op_types]
    if quantized is None:
        return []
    return sorted({node.op_type for node in model.graph.node} - set(quantized))


def _refuse_unknown(model: onnx.ModelProto, float_nodes: Sequence[str]) -> None:
    """NNCF refuses an IgnoredScope name it cannot find only with its own message; the
    ranking names top-level nodes, so any other name is a mismatch worth saying plainly."""
    names = {node.name for node in model.graph.node}
    unknown = [name for name in float_nodes if name not in names]
    if unknown:
        raise Unsupported(f"precision.fallback: the model has no node named {unknown}")


def _at_least_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnx import version_converter

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset >= NNCF_MIN_OPSET:
        return model
    try:
        return version_converter.convert_version(model, NNCF_MIN_OPSET)
    except Exception as error:  # the converter lacks an adapter for one of its nodes
        raise Unsupported(
            f"precision.mode={MODE} on openvino: NNCF quantizes ONNX opset {NNCF_MIN_OPSET} or "
            f"later, and this model's opset {opset} does not convert ({error})"
        ) from error
