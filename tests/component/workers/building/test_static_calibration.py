"""The static int8 quantizer's chosen settings (`precision.calibration`, `precision.per_channel`,
`precision.symmetric_activations`, `precision.op_types`) each reach ONNX Runtime's quantizer,
and the defaults build the model it built before they could be chosen."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autotune.core.contract import ConfigValue
from autotune.core.knobs.config import parse_config
from tests.workers_support import digits_workload, spec_for
from workers import run_trial
from workers.building import quantization
from workers.building.calibration import calibration_reader, calibration_subset
from workers.building.cpu_flags import int8_sums_saturate
from workers.building.knobs import precision_of
from workers.building.knobs.precisions import most_sensitive, static_settings
from workers.building.quantization import (
    StaticSettings,
    quantize_onnx_int8_static,
    with_node_names,
)
from workers.building.variants import BuildContext, OnnxVariant
from workers.cache import WorkloadCache

CHANNELS = 4
ORT_STATIC: dict[str, ConfigValue] = {
    "runtime.engine": "onnxruntime",
    "precision.mode": "int8_static",
}
SIDE = 24  # enough values per input that one in 100,000 (percentile's cut) is under one sample


def conv_matmul_model() -> bytes:
    """x [N, 1, SIDE, SIDE] -> Conv (4 channels of weights on very different scales) -> Relu ->
    Flatten -> MatMul -> y [N, 3]: one Conv and one MatMul to quantize."""
    rng = np.random.default_rng(0)
    conv_w = rng.normal(size=(CHANNELS, 1, 3, 3)).astype(np.float32)
    conv_w *= np.array([1.0, 10.0, 0.1, 3.0], dtype=np.float32)[:, None, None, None]
    matmul_w = rng.normal(size=(CHANNELS * (SIDE - 2) ** 2, 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "conv_w"], ["c"], name="conv"),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
            helper.make_node("MatMul", ["f", "matmul_w"], ["y"], name="matmul"),
        ],
        "conv_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, SIDE, SIDE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(conv_w, "conv_w"), numpy_helper.from_array(matmul_w, "matmul_w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())


def samples() -> np.ndarray:
    """Inputs with one rare outlier: a calibration that leaves it out (entropy, percentile)
    picks a narrower range than min/max does."""
    rng = np.random.default_rng(1)
    data = rng.normal(size=(256, 1, SIDE, SIDE)).astype(np.float32)
    data[100, 0, 0, 0] = 40.0
    return data


def quantized(settings: StaticSettings | None = None) -> onnx.ModelProto:
    chosen = settings or StaticSettings()
    return onnx.load_model_from_string(
        quantize_onnx_int8_static(conv_matmul_model(), samples(), settings=chosen)
    )


def initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    found = {init.name: init for init in model.graph.initializer}
    return numpy_helper.to_array(found[name])


def weight_scale(model: onnx.ModelProto, weight: str) -> np.ndarray:
    """The scale of the DequantizeLinear that feeds the quantized `weight`."""
    node = next(
        n
        for n in model.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0].startswith(weight)
    )
    return initializer(model, node.input[1])


def activation_quantizers(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The QuantizeLinear nodes of activations (weights are stored quantized already)."""
    weights = {i.name for i in model.graph.initializer if i.data_type == TensorProto.FLOAT}
    return [
        n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in weights
    ]


def test_the_defaults_build_the_model_the_quantizer_built_before() -> None:
    """The call as it was before the settings existed (MinMax, per channel, ORT's own
    activation symmetry, every op type), with 7-bit weights where this CPU's int8 sums
    saturate, gives the same bytes as the defaults."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    model = with_node_names(conv_matmul_model())
    subset = calibration_subset(samples())
    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "before.onnx"
        quantize_static(
            model, output, calibration_reader(model, subset), quant_format=QuantFormat.QDQ,
            per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax, nodes_to_quantize=None,
            nodes_to_exclude=[], reduce_range=int8_sums_saturate(),
        )  # fmt: skip
        before = output.read_bytes()
    assert quantize_onnx_int8_static(conv_matmul_model(), samples()) == before


@pytest.mark.parametrize(("saturate", "largest"), [(False, 127), (True, 64)])
def test_weights_take_seven_bits_where_the_cpus_int8_sums_saturate(
    monkeypatch: pytest.MonkeyPatch, saturate: bool, largest: int
) -> None:
    """On AVX2 or AVX-512 without VNNI, ONNX Runtime's int8 kernels add two products in 16
    bits, which full 8-bit weights can overflow: the quantizer then keeps weights in 7 bits
    (its reduce_range), dynamic and static alike."""
    monkeypatch.setattr(quantization, "int8_sums_saturate", lambda: saturate)

    def weights(model_bytes: bytes) -> list[int]:
        model = onnx.load_model_from_string(model_bytes)
        return [
            int(np.abs(numpy_helper.to_array(i).astype(np.int32)).max())
            for i in model.graph.initializer
            if i.name.endswith("_w_quantized")
        ]

    static = quantization.quantize_onnx_int8_static(conv_matmul_model(), samples())
    assert weights(static) == [largest, largest]
    dynamic = quantization.quantize_dynamic_nodes(conv_matmul_model(), ("MatMul",))
    assert weights(dynamic) == [largest]


def test_per_channel_false_gives_one_weight_scale_per_tensor() -> None:
    assert weight_scale(quantized(), "conv_w").shape == (CHANNELS,)
    assert weight_scale(quantized(StaticSettings(per_channel=False)), "conv_w").size == 1


def test_symmetric_activations_have_zero_points_of_zero() -> None:
    def zero_points(model: onnx.ModelProto) -> list[int]:
        return [int(initializer(model, n.input[2])) for n in activation_quantizers(model)]

    assert any(zero_points(quantized()))  # the Relu's output, all >= 0, is not centred
    symmetric = zero_points(quantized(StaticSettings(symmetric_activations=True)))
    assert symmetric and not any(symmetric)


@pytest.mark.parametrize("calibration", ["entropy", "percentile"])
def test_entropy_and_percentile_calibrate_other_ranges_than_minmax(calibration: str) -> None:
    def input_scale(model: onnx.ModelProto) -> float:
        node = next(n for n in activation_quantizers(model) if n.input[0] == "x")
        return float(initializer(model, node.input[1]))

    minmax = input_scale(quantized())
    other = input_scale(quantized(StaticSettings(calibration=calibration)))
    observed = float(samples().max() - samples().min())
    assert minmax == pytest.approx(observed / 255, rel=0.01)  # the outliers set its range
    assert other < minmax / 2  # a range that leaves the rare outliers out


def test_matmul_only_leaves_the_convolution_in_float() -> None:
    def dequantized_weights(model: onnx.ModelProto) -> set[str]:
        outputs = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
        return {n.op_type for n in model.graph.node if len(n.input) > 1 and n.input[1] in outputs}

    assert dequantized_weights(quantized()) == {"Conv", "MatMul"}
    assert dequantized_weights(quantized(StaticSettings(op_types="matmul_only"))) == {"MatMul"}


def test_the_configuration_reaches_the_quantizer() -> None:
    config = parse_config(
        {
            "runtime.engine": "onnxruntime",
            "precision.mode": "int8_static",
            "precision.per_channel": False,
            "precision.symmetric_activations": True,
        },
        "onnx",
    )
    built = precision_of("int8_static").build(
        OnnxVariant(conv_matmul_model()), config, BuildContext(samples()[:2], samples())
    )
    assert isinstance(built, OnnxVariant)
    model = onnx.load_model_from_string(built.model_bytes)
    assert weight_scale(model, "conv_w").size == 1
    assert not any(int(initializer(model, n.input[2])) for n in activation_quantizers(model))


def test_a_trial_with_chosen_settings_measures_its_own_variant() -> None:
    """The digits through onnxruntime's int8_static, calibrated by percentile with per-tensor
    weights: a trial of its own variant, as accurate as the default one within a point."""
    store = WorkloadCache(capacity=2)
    base: dict[str, ConfigValue] = {
        "runtime.engine": "onnxruntime",
        "precision.mode": "int8_static",
    }
    chosen: dict[str, ConfigValue] = {
        **base,
        "precision.calibration": "percentile",
        "precision.per_channel": False,
    }
    default = run_trial(spec_for(digits_workload(), base), store)
    trial = run_trial(spec_for(digits_workload(), chosen), store)
    assert trial.status == "ok" and trial.metrics and default.metrics, trial.reason
    assert trial.variant_key != default.variant_key
    assert "precision.calibration=percentile" in str(trial.variant_key)
    assert abs(trial.metrics.accuracy - default.metrics.accuracy) <= 0.01


def test_fallback_with_matmul_only_keeps_a_matmul_in_float_not_a_convolution() -> None:
    """The ranking puts the convolution first; matmul_only leaves it in float anyway, so the
    node fallback keeps in float is the most sensitive MatMul."""
    context = BuildContext(
        samples()[:2], samples(), ranked_nodes=lambda model_bytes, mode: ("conv", "matmul")
    )

    def kept_in_float(op_types: str) -> list[str]:
        config = parse_config(
            {**ORT_STATIC, "precision.op_types": op_types, "precision.fallback": 1}, "onnx"
        )
        return most_sensitive(conv_matmul_model(), config, context, static_settings(config))

    assert kept_in_float("all") == ["conv"]
    assert kept_in_float("matmul_only") == ["matmul"]


def masked_scores_model() -> bytes:
    """x [N, 8] -> MatMul -> Add(Where(keep, 0, -inf), as an exported attention mask) ->
    Softmax -> MatMul -> y [N, 4]: the mask and the masked scores hold -inf in every sample."""
    rng = np.random.default_rng(2)
    keep = np.array([[True] * 6 + [False] * 2])
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["scores"], name="scores"),
            helper.make_node("Where", ["keep", "zero", "minus_inf"], ["mask"], name="mask"),
            helper.make_node("Add", ["scores", "mask"], ["masked"], name="masked"),
            helper.make_node("Softmax", ["masked"], ["weights"], name="softmax", axis=-1),
            helper.make_node("MatMul", ["weights", "w2"], ["y"], name="out"),
        ],
        "masked_scores",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [
            numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "w1"),
            numpy_helper.from_array(keep, "keep"),
            numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
            numpy_helper.from_array(np.array(-np.inf, dtype=np.float32), "minus_inf"),
            numpy_helper.from_array(rng.normal(size=(8, 4)).astype(np.float32), "w2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())


@pytest.mark.parametrize("calibration", ["minmax", "percentile", "entropy"])
def test_a_masked_activation_stays_in_float_and_the_rest_calibrates(calibration: str) -> None:
    """-inf in an activation (an attention mask added to the scores) has no int8 range: the
    nodes that produce or read it stay in float, every quantized activation gets a finite
    range, and (by min/max or percentile, which keep the softmax's full range) the int8
    model stays close to the float one."""
    import onnxruntime

    inputs = np.random.default_rng(3).normal(size=(128, 8)).astype(np.float32)
    model_bytes = quantize_onnx_int8_static(
        masked_scores_model(), inputs, settings=StaticSettings(calibration=calibration)
    )
    model = onnx.load_model_from_string(model_bytes)
    scales = [initializer(model, q.input[1]) for q in activation_quantizers(model)]
    assert scales and all(np.isfinite(scale).all() and (scale > 0).all() for scale in scales)
    quantized = {n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    assert not quantized.intersection({"mask", "masked"}) and {"scores", "weights"} <= quantized
    if calibration == "entropy":
        return  # its KL search may clip the softmax's outputs: closeness is not its promise

    def run(model: bytes) -> np.ndarray:
        session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
        return np.asarray(session.run(None, {"x": inputs})[0])

    reference, int8 = run(masked_scores_model()), run(model_bytes)
    assert np.abs(int8 - reference).max() < 0.1 * np.abs(reference).max()
