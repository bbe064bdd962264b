"""The static int8 settings on OpenVINO's int8 (NNCF), read back from the quantized model: a
Conv, an Add and a MatMul calibrated on 128 samples whose range is not centred on zero (no ReLU
folds it onto the positives): matmul_only leaves the Conv and the Add without a quantized
input, per_channel=false gives one weight scale per tensor, symmetric activations zero points
of 0 and asymmetric ones not, percentile a narrower activation range than minmax where one
sample holds an outlier, and minmax the extremes of every calibration batch."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autotune.core.errors import Unsupported
from tests.workers_support import skip_unless_runnable_here
from workers.building.nncf_quantization import quantize_with_nncf
from workers.building.quantization import StaticSettings

CHANNELS = 3
SIDE = 8
CLASSES = 10
SAMPLES = 128
OUTLIER = 60.0


@pytest.fixture(scope="module", autouse=True)
def _int8_runs_here() -> None:
    skip_unless_runnable_here(
        {"runtime.engine": "openvino", "precision.mode": "int8_static"}, "onnx"
    )


@pytest.fixture(scope="module")
def model() -> bytes:
    """`y = flatten(conv(x) + x) @ W` on `x: [batch, CHANNELS, SIDE, SIDE]`."""
    rng = np.random.default_rng(0)
    kernel = rng.standard_normal((CHANNELS, CHANNELS, 3, 3)).astype(np.float32)
    weight = rng.standard_normal((CHANNELS * SIDE * SIDE, CLASSES)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "kernel"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "x"], ["a"], name="add"),
        helper.make_node("Flatten", ["a"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "weight"], ["y"], name="matmul"),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_add_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, CHANNELS, SIDE, SIDE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, CLASSES])],
        [numpy_helper.from_array(kernel, "kernel"), numpy_helper.from_array(weight, "weight")],
    )
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built.ir_version = 8
    onnx.checker.check_model(built)
    return built.SerializeToString()


@pytest.fixture(scope="module")
def inputs() -> np.ndarray:
    """Centred on 1, so an asymmetric range has a zero point other than 0."""
    rng = np.random.default_rng(1)
    return (rng.standard_normal((SAMPLES, CHANNELS, SIDE, SIDE)) + 1).astype(np.float32)


def quantized(model: bytes, inputs: np.ndarray, **settings: Any) -> onnx.ModelProto:
    built = quantize_with_nncf(model, inputs, (), StaticSettings(**settings))
    return onnx.load_model_from_string(built)


def dequantized_inputs(model: onnx.ModelProto) -> dict[str, list[bool]]:
    """Each float node, and which of its inputs a DequantizeLinear gives."""
    dequantized = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    return {
        node.name: [name in dequantized for name in node.input]
        for node in model.graph.node
        if node.op_type in ("Conv", "Add", "MatMul")
    }


def quantizer_of(model: onnx.ModelProto, node: str, index: int) -> tuple[np.ndarray, np.ndarray]:
    """The scale and zero point of the DequantizeLinear that gives `node` its input `index`."""
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    consumer = next(n for n in model.graph.node if n.name == node)
    source = next(n for n in model.graph.node if n.output[0] == consumer.input[index])
    assert source.op_type == "DequantizeLinear", source
    return constants[source.input[1]], constants[source.input[2]]


def activation_zero_points(model: onnx.ModelProto) -> list[int]:
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    return [
        int(constants[node.input[2]])
        for node in model.graph.node
        if node.op_type == "QuantizeLinear"
    ]


def test_matmul_only_quantizes_the_matmul_alone(model: bytes, inputs: np.ndarray) -> None:
    every_op = dequantized_inputs(quantized(model, inputs, op_types="all"))
    # the Add's output quantizer stands for the MatMul's input: Flatten moves no value
    assert every_op == {"conv": [True, True], "add": [True, True], "matmul": [False, True]}
    matmul_only = dequantized_inputs(quantized(model, inputs, op_types="matmul_only"))
    assert matmul_only == {"conv": [False, False], "add": [False, False], "matmul": [True, True]}


@pytest.mark.parametrize("per_channel", [True, False])
def test_per_channel_weight_scales(model: bytes, inputs: np.ndarray, per_channel: bool) -> None:
    built = quantized(model, inputs, per_channel=per_channel)
    for node, channels in (("conv", CHANNELS), ("matmul", CLASSES)):
        scale, zero_point = quantizer_of(built, node, 1)
        assert scale.shape == ((channels,) if per_channel else ()), node
        assert zero_point.dtype == np.int8 and not zero_point.any()  # symmetric weights


def test_symmetric_activations_have_zero_points_of_zero(model: bytes, inputs: np.ndarray) -> None:
    symmetric = activation_zero_points(quantized(model, inputs, symmetric_activations=True))
    assert len(symmetric) == 3 and set(symmetric) == {0}
    asymmetric = quantized(model, inputs, symmetric_activations=False)
    assert len(activation_zero_points(asymmetric)) == 3
    assert int(quantizer_of(asymmetric, "conv", 0)[1]) != 0


def test_minmax_spans_every_sample_and_percentile_leaves_an_outlier_out(
    model: bytes, inputs: np.ndarray
) -> None:
    with_outlier = inputs.copy()
    with_outlier[5, 0, 0, 0] = OUTLIER
    observed = float(OUTLIER - with_outlier.min())
    minmax, _ = quantizer_of(quantized(model, with_outlier, calibration="minmax"), "conv", 0)
    percentile, _ = quantizer_of(
        quantized(model, with_outlier, calibration="percentile"), "conv", 0
    )
    assert float(minmax) * 255 == pytest.approx(observed, rel=0.01)
    assert float(percentile) * 255 < 0.75 * observed


def test_entropy_is_refused_not_replaced(model: bytes, inputs: np.ndarray) -> None:
    with pytest.raises(Unsupported, match="NNCF has no KL-divergence") as refusal:
        quantized(model, inputs, calibration="entropy")
    assert str(refusal.value).startswith("precision.calibration=entropy: runtime.engine=openvino")
