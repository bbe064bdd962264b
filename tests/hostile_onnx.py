"""A three-layer ONNX model hostile to int8: its first MatMul takes inputs with one huge
channel (that the layer's weights ignore), so it loses its fidelity when that layer's input is
int8 and keeps it when that layer alone stays in float; and the inputs that do it."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

WIDTH = 16
SAMPLES = 64  # the fewest a workload holds calibration samples out of
NODES = ("hostile", "benign_mid", "benign_out")


def hostile_model() -> bytes:
    """input @ W1 @ W2 @ W3, where W1 ignores the inputs' channel 0 (huge, `inputs`): in float
    that channel vanishes; an int8 input to `hostile` has a scale so coarse that every other
    channel rounds to zero."""
    rng = np.random.default_rng(0)
    weights = {name: rng.normal(size=(WIDTH, WIDTH)).astype(np.float32) for name in NODES}
    weights["hostile"][0, :] = 0.0
    layers = [
        ("input", "hostile", "h1"),
        ("h1", "benign_mid", "h2"),
        ("h2", "benign_out", "output"),
    ]
    graph = helper.make_graph(
        [helper.make_node("MatMul", [x, f"{name}_w"], [y], name=name) for x, name, y in layers],
        "hostile",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", WIDTH])],
        [numpy_helper.from_array(value, f"{name}_w") for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def inputs() -> np.ndarray:
    samples = np.random.default_rng(1).normal(size=(SAMPLES, WIDTH)).astype(np.float32)
    samples[:, 0] = 1e4
    return samples
