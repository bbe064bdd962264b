"""OpenVINO's int8 (`precision.mode=int8_static` on `runtime.engine=openvino`): NNCF's
post-training quantization of the fp32 ONNX model, calibrated on the workload's inputs.

NNCF's ONNX backend returns an ONNX model in QDQ format that keeps the model's node names, so
the nodes `precision.fallback` keeps in float are named as the sensitivity ranking names them
(`workers.building.sensitivity`, on the model with every node named by `with_node_names`)
and go into NNCF's IgnoredScope; the model's metadata names them (FLOAT_NODES_KEY). OpenVINO's
ONNX frontend reads the QDQ pairs as FakeQuantize and runs the quantized nodes on int8 kernels;
the exported artifact is this very ONNX model.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.errors import Unsupported
from workers.building.failures import is_out_of_memory
from workers.building.quantization import (
    calibration_feeds,
    calibration_subset,
    refuse_unquantized,
    with_float_nodes,
    with_node_names,
)

if TYPE_CHECKING:
    import onnx

MODE = "int8_static"
# NNCF's ONNX backend quantizes models of this opset or later (per-channel DequantizeLinear).
NNCF_MIN_OPSET = 13


def require_nncf() -> None:
    if importlib.util.find_spec("nncf") is None:
        raise Unsupported(
            f"precision.mode={MODE} on runtime.engine=openvino needs the package 'nncf' "
            "(pip install nncf)"
        )


def quantize_with_nncf(
    model_bytes: bytes, inputs: np.ndarray, float_nodes: Sequence[str] = ()
) -> bytes:
    """int8 weights (per output channel) and activations whose ranges NNCF observed on
    `calibration_subset(inputs)`; the nodes named in `float_nodes` stay in float (and the
    model's metadata names them)."""
    require_nncf()
    # NNCF sends usage telemetry unless told it runs in CI: a tuning worker never phones home.
    os.environ.setdefault("NNCF_CI", "1")
    import nncf

    model = _at_least_opset(with_node_names(model_bytes))
    _refuse_unknown(model, float_nodes)
    batches = calibration_feeds(model, calibration_subset(inputs), MODE)
    nncf.set_log_level(logging.WARNING)  # its INFO lines name every node it leaves out
    try:
        quantized = nncf.quantize(
            model,
            nncf.Dataset(batches),
            subset_size=len(batches),
            ignored_scope=nncf.IgnoredScope(names=list(float_nodes)),
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
