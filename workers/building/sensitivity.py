"""How much each quantizable node of an ONNX model costs in fidelity when it alone is int8:
the ranking `precision.fallback` keeps the most sensitive nodes of an int8 model in float by.

A node's sensitivity is how far the model with that node alone quantized (in the precision
mode asked for) strays from the float model: the caller's `infidelity` of it (the workload
cache judges 1 - `workers.measuring.evaluate.fidelity` on SENSITIVITY_SAMPLES evaluation
inputs). Static quantization calibrates here on the `samples` given, which are to be
calibration samples (`workers.loading.workloads.EvalData.calibration_inputs`), never the
ones judged. Only the MAX_MEASURED_NODES largest nodes (by weight size) are measured; the
rest count as insensitive and follow them, largest first (`rank_by_sensitivity`, which ranks
a torch model's Linear modules too: `workers.building.torch_sensitivity`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from workers.building.quantization import (
    quantize_dynamic_nodes,
    quantize_static_nodes,
    with_node_names,
)

if TYPE_CHECKING:
    import onnx

logger = logging.getLogger(__name__)

SENSITIVITY_SAMPLES = 32
MAX_MEASURED_NODES = 16
# By mode, the node types with a constant weight (second input) that ONNX Runtime's quantizer
# quantizes: its dynamic (integer) quantizer has no Gemm or ConvTranspose, and quantizes the
# weights of recurrent (LSTM) and fused attention nodes.
QUANTIZABLE_OPS = {
    "int8_dynamic": frozenset({"MatMul", "Conv", "LSTM", "Attention"}),
    "int8_static": frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"}),
}


@dataclass(frozen=True)
class Sensitivity:
    """A model's quantizable nodes, most sensitive first (`ranked`), and the measured ones'
    sensitivity (1 - fidelity, `measured`); unmeasured nodes follow the measured ones."""

    ranked: tuple[str, ...]
    measured: dict[str, float]


# 1 - fidelity of a quantized model to the float one it was quantized from.
Infidelity = Callable[[bytes], float]


def measure_sensitivity(
    model_bytes: bytes, mode: str, samples: np.ndarray, infidelity: Infidelity
) -> Sensitivity:
    """Each of the model's largest quantizable nodes quantized alone in `mode` (int8_dynamic
    or int8_static; static calibrates on `samples`, calibration samples apart from those
    `infidelity` judges on), judged by `infidelity`."""
    nodes = quantizable_nodes(with_node_names(model_bytes), QUANTIZABLE_OPS[mode])

    def node_sensitivity(name: str) -> float:
        if mode == "int8_static":
            return infidelity(quantize_static_nodes(model_bytes, samples, only=[name]))
        return infidelity(quantize_dynamic_nodes(model_bytes, None, only=[name]))

    return rank_by_sensitivity(nodes, mode, node_sensitivity)


def rank_by_sensitivity(
    candidates: Sequence[str], mode: str, sensitivity: Callable[[str], float]
) -> Sensitivity:
    """The `candidates` (largest first) ranked: the MAX_MEASURED_NODES largest by their
    `sensitivity` to `mode`, most sensitive first, then the rest, largest first. One the
    quantizer or a kernel refuses (it raises) is left unmeasured, with a log line; the rest
    still rank."""
    measured_nodes = candidates[:MAX_MEASURED_NODES]
    if len(candidates) > len(measured_nodes):
        logger.info(
            "%s sensitivity: %d quantizable nodes; the %d largest measured, the other %d "
            "treated as insensitive",
            mode, len(candidates), len(measured_nodes), len(candidates) - len(measured_nodes),
        )  # fmt: skip
    measured: dict[str, float] = {}
    for name in measured_nodes:
        try:
            measured[name] = sensitivity(name)
        except Exception as error:  # one node refused; the rest still rank
            logger.info("%s sensitivity of node %s not measured: %s", mode, name, error)
    ranked = sorted(measured, key=lambda name: -measured[name])
    ranked += [name for name in candidates if name not in measured]
    return Sensitivity(tuple(ranked), measured)


def quantizable_nodes(model: onnx.ModelProto, op_types: frozenset[str]) -> list[str]:
    """The top-level nodes of `op_types` whose weight (second input) is a constant, largest
    weight first (ties in graph order)."""
    sizes = {init.name: math.prod(init.dims) for init in model.graph.initializer}
    weighted = [
        (node.name, sizes[node.input[1]])
        for node in model.graph.node
        if node.op_type in op_types and len(node.input) > 1 and node.input[1] in sizes
    ]
    return [name for name, _ in sorted(weighted, key=lambda pair: -pair[1])]
