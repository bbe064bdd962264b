"""precision.mode=int8_static on runtime.engine=openvino: NNCF quantizes the digits CNN's fp32
ONNX export, OpenVINO's CPU plugin runs its quantized nodes on int8 kernels (read back from the
compiled model), precision.fallback's nodes stay in float (of the op types the static int8
settings quantize), and the exported artifact serves the model the trial measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from autotune.core.contract import ConfigValue
from autotune.core.knobs.config import TrialConfig, parse_config
from tests.fixed_batch_models import CLASSES, FEATURES, fixed_batch_classifier
from tests.workers_support import digits_workload, skip_unless_runnable_here, spec_for
from workers import export_artifact, run_trial
from workers.building.knobs import engine_of
from workers.building.knobs.base import EngineImplementation
from workers.building.knobs.openvino import OpenVinoImplementation, OpenVinoSession
from workers.building.nncf_quantization import quantize_with_nncf
from workers.building.quantization import float_nodes_of, node_op_types
from workers.building.runtimes import opened
from workers.building.variants import OnnxVariant
from workers.cache import LoadedWorkload, WorkloadCache
from workers.measuring.evaluate import run_all
from workers.predictor import load_predictor

STORE = WorkloadCache()
ENGINE = engine_of("openvino")
INT8: dict[str, ConfigValue] = {
    "runtime.engine": "openvino",
    "precision.mode": "int8_static",
    "runtime.threads": 1,
}
WEIGHTED_OPS = ("Conv", "Gemm", "MatMul")
# The compiled model's layers that carry the digits CNN's weights.
WEIGHTED_LAYERS = ("Convolution", "FullyConnected")
INT8_TYPES = ("u8", "i8")
# The precision transform asks the engine to build the precision (OpenVINO's int8 by NNCF)
# once `EngineImplementation.build_precision` exists; before, ONNX Runtime's quantizer builds it.
engine_builds_precision = pytest.mark.skipif(
    not hasattr(EngineImplementation, "build_precision"),
    reason="the precision transform does not ask the engine to build the precision yet",
)


@pytest.fixture(scope="module", autouse=True)
def _int8_runs_here() -> None:
    skip_unless_runnable_here(INT8)


@pytest.fixture(scope="module")
def loaded() -> LoadedWorkload:
    return STORE.get(digits_workload())


@pytest.fixture(scope="module")
def fp32_onnx(loaded: LoadedWorkload) -> bytes:
    variant = loaded.variant_for(loaded.parse({"runtime.engine": "openvino"}))
    assert isinstance(variant, OnnxVariant)
    return variant.model_bytes


def int8_config(
    loaded: LoadedWorkload, fallback: int, settings: dict[str, ConfigValue] | None = None
) -> TrialConfig:
    return loaded.parse({**INT8, "precision.fallback": fallback, **(settings or {})})


def nncf_int8(
    loaded: LoadedWorkload,
    fp32_onnx: bytes,
    fallback: int,
    settings: dict[str, ConfigValue] | None = None,
) -> bytes:
    config = int8_config(loaded, fallback, settings)
    assert isinstance(ENGINE, OpenVinoImplementation)
    built = ENGINE.build_precision(OnnxVariant(fp32_onnx), config, loaded.build_context())
    assert isinstance(built, OnnxVariant)
    return built.model_bytes


def layer_precisions(model_bytes: bytes, config: TrialConfig) -> list[str]:
    """The precision the compiled model runs each weighted layer in."""
    session = ENGINE.session(OnnxVariant(model_bytes), config)
    assert isinstance(session, OpenVinoSession)
    assert session.applied["precision"] == "f32"  # what stays in float runs in f32
    layers = [op.get_rt_info() for op in session._compiled.get_runtime_model().get_ops()]
    return [
        str(info["runtimePrecision"].astype(str))
        for info in layers
        if info["layerType"].astype(str) in WEIGHTED_LAYERS
    ]


def weight_kinds(model_bytes: bytes) -> dict[str, str]:
    """Each weighted node of the model, and what its weight (second input) is: "int8" from a
    DequantizeLinear of an int8 initializer, "float" a float initializer and no input of the
    node dequantized."""
    graph = onnx.load_model_from_string(model_bytes).graph
    initializers = {init.name: init.data_type for init in graph.initializer}
    dequantized = {
        n.output[0]: initializers.get(n.input[0])
        for n in graph.node
        if n.op_type == "DequantizeLinear"
    }
    kinds = {}
    for node in graph.node:
        if node.op_type not in WEIGHTED_OPS:
            continue
        weight = node.input[1]
        if dequantized.get(weight) == onnx.TensorProto.INT8:
            kinds[node.name] = "int8"
        elif initializers.get(weight) == onnx.TensorProto.FLOAT and not any(
            name in dequantized for name in node.input
        ):
            kinds[node.name] = "float"
        else:
            kinds[node.name] = "other"
    return kinds


def outputs(model_bytes: bytes, loaded: LoadedWorkload, config: TrialConfig) -> np.ndarray:
    with opened(ENGINE.session(OnnxVariant(model_bytes), config)) as session:
        return run_all(session, loaded.data.inputs, config.batch_size)


def test_every_weighted_layer_runs_on_int8_kernels(
    loaded: LoadedWorkload, fp32_onnx: bytes
) -> None:
    quantized = nncf_int8(loaded, fp32_onnx, 0)
    assert set(weight_kinds(quantized).values()) == {"int8"}
    precisions = layer_precisions(quantized, int8_config(loaded, 0))
    assert len(precisions) == 4 and all(p in INT8_TYPES for p in precisions), precisions
    int8 = outputs(quantized, loaded, int8_config(loaded, 0))
    fp32 = outputs(fp32_onnx, loaded, loaded.parse({"runtime.engine": "openvino"}))
    assert not np.array_equal(int8, fp32), "int8 must change the arithmetic"
    assert np.mean(int8.argmax(axis=1) == fp32.argmax(axis=1)) >= 0.95


@pytest.mark.parametrize("fallback", [1, 2])
def test_fallback_nodes_stay_float(loaded: LoadedWorkload, fp32_onnx: bytes, fallback: int) -> None:
    quantized = nncf_int8(loaded, fp32_onnx, fallback)
    ranked = loaded.ranked_nodes(fp32_onnx, "int8_static")
    assert float_nodes_of(quantized) == list(ranked[:fallback])
    kinds = weight_kinds(quantized)
    assert {name for name, kind in kinds.items() if kind == "float"} == set(ranked[:fallback])
    assert {kinds[name] for name in ranked[fallback:]} == {"int8"}
    precisions = layer_precisions(quantized, int8_config(loaded, fallback))
    assert sorted(p in INT8_TYPES for p in precisions) == [False] * fallback + [True] * (
        4 - fallback
    ), precisions


def test_matmul_only_fallback_keeps_the_most_sensitive_gemm_in_float(
    loaded: LoadedWorkload, fp32_onnx: bytes
) -> None:
    """The ranking is filtered to the op types matmul_only quantizes: the float node is a
    Gemm or MatMul even where a Conv ranks above it, and every Conv stays float anyway."""
    matmul_only: dict[str, ConfigValue] = {"precision.op_types": "matmul_only"}
    quantized = nncf_int8(loaded, fp32_onnx, 1, matmul_only)
    types = node_op_types(fp32_onnx)
    ranked = loaded.ranked_nodes(fp32_onnx, "int8_static")
    matmuls = [name for name in ranked if types[name] in ("MatMul", "Gemm")]
    assert float_nodes_of(quantized) == matmuls[:1]
    kinds = weight_kinds(quantized)
    assert {name: kinds[name] for name in matmuls} == {
        name: "float" if name == matmuls[0] else "int8" for name in matmuls
    }
    assert {kinds[name] for name in kinds if types[name] == "Conv"} == {"float"}
    precisions = layer_precisions(quantized, int8_config(loaded, 1, matmul_only))
    assert sorted(p in INT8_TYPES for p in precisions) == [False] * 3 + [True], precisions


def test_a_node_the_model_lacks_is_refused(loaded: LoadedWorkload, fp32_onnx: bytes) -> None:
    from autotune.core.errors import Unsupported

    with pytest.raises(Unsupported, match="no node named"):
        quantize_with_nncf(fp32_onnx, loaded.data.inputs, ["/features/no_such/Conv"])


@pytest.mark.parametrize("fallback", [0, 1])
def test_the_trial_measures_what_the_artifact_serves(
    tmp_path: Path, loaded: LoadedWorkload, fp32_onnx: bytes, fallback: int
) -> None:
    config: dict[str, ConfigValue] = {**INT8, "precision.fallback": fallback, "batch.size": 8}
    result = run_trial(spec_for(digits_workload(), config), STORE)
    assert result.status == "ok", result.reason
    assert result.metrics is not None and result.metrics.accuracy >= 0.9
    parsed = loaded.parse(config)
    measured = loaded.onnx_by_variant[parsed.variant_id]
    artifact = export_artifact(spec_for(digits_workload(), config), str(tmp_path), STORE)
    assert Path(artifact.path).read_bytes() == measured
    ranked = loaded.ranked_nodes(fp32_onnx, "int8_static")
    assert float_nodes_of(measured) == list(ranked[:fallback])
    with load_predictor(str(tmp_path)) as predictor:
        assert isinstance(predictor.session, OpenVinoSession)
        assert predictor.config.precision == "int8_static"
        served = predictor.predict(loaded.data.inputs)
    np.testing.assert_array_equal(served, outputs(measured, loaded, parsed))


@engine_builds_precision
def test_the_trial_variant_is_nncfs(loaded: LoadedWorkload, fp32_onnx: bytes) -> None:
    parsed = int8_config(loaded, 1)
    trial_variant = loaded.variant_for(parsed)
    assert isinstance(trial_variant, OnnxVariant)
    assert trial_variant.model_bytes == nncf_int8(loaded, fp32_onnx, 1)


def test_a_fixed_batch_model_with_unnamed_nodes(tmp_path: Path) -> None:
    """Calibration feeds whole batches of the model's size; an unnamed node is named as the
    sensitivity ranking names it (`<op type>_<index>`) and stays in float by that name."""
    model = fixed_batch_classifier(tmp_path / "classifier.onnx", batch=4).read_bytes()
    inputs = np.random.default_rng(1).standard_normal((66, FEATURES)).astype(np.float32)
    quantized = quantize_with_nncf(model, inputs, ["MatMul_0"])
    assert float_nodes_of(quantized) == ["MatMul_0"]
    assert weight_kinds(quantized) == {"MatMul_0": "float", "MatMul_2": "int8"}
    config = parse_config({**INT8, "batch.size": 4}, "onnx")
    fp32_config = parse_config({**INT8, "precision.mode": "fp32", "batch.size": 4}, "onnx")
    int8 = run_all(ENGINE.session(OnnxVariant(quantized), config), inputs[:64], 4)
    fp32 = run_all(ENGINE.session(OnnxVariant(model), fp32_config), inputs[:64], 4)
    assert int8.shape == (64, CLASSES) and not np.array_equal(int8, fp32)
    assert np.mean(int8.argmax(axis=1) == fp32.argmax(axis=1)) >= 0.9
