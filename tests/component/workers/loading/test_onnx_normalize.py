"""ONNX models whose weights are Constant nodes (as Paddle, TensorFlow and some PyTorch
exporters write them) are pruned and quantized like any other once loaded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

from autotune.core.contract import ConfigValue, ModelRef
from autotune.core.errors import Unsupported
from tests.onnx_models import constant_weights_in_if_branches
from tests.workers_support import digits_workload, export_digits_onnx, spec_for
from workers import run_trial
from workers.building.ort_session import OnnxRuntimeSession
from workers.building.pruning import onnx_weight_initializers, prune_onnx
from workers.building.quantization import quantize_onnx_int8
from workers.cache import WorkloadCache
from workers.loading.onnx_normalize import constants_to_initializers, normalize_onnx
from workers.loading.workloads import load_onnx


def with_constant_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same model with every initializer turned into a Constant node, as such exporters
    write it."""
    constants = [
        helper.make_node("Constant", [], [tensor.name], value=tensor)
        for tensor in model.graph.initializer
    ]
    del model.graph.initializer[:]
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend([*constants, *nodes])
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def constant_weights_file(
    tmp_path_factory: pytest.TempPathFactory, digits_module: torch.nn.Module
) -> Path:
    directory = tmp_path_factory.mktemp("paddle-like")
    exported = export_digits_onnx(digits_module, directory / "exported.onnx")
    path = directory / "constant-weights.onnx"
    onnx.save_model(with_constant_weights(onnx.load_model(str(exported))), str(path))
    return path


def test_constant_weights_defeat_the_transforms_until_normalized(
    constant_weights_file: Path,
) -> None:
    raw = onnx.load_model(str(constant_weights_file))
    assert not onnx_weight_initializers(raw)
    with pytest.raises(Unsupported, match="no Conv/Gemm/MatMul weights"):
        prune_onnx(raw.SerializeToString(), 0.5)
    normalized = normalize_onnx(raw)
    assert onnx_weight_initializers(normalized)
    assert not any(node.op_type == "Constant" for node in normalized.graph.node)


def test_normalizing_keeps_the_outputs(constant_weights_file: Path) -> None:
    raw = constant_weights_file.read_bytes()
    normalized = normalize_onnx(onnx.load_model_from_string(raw)).SerializeToString()
    inputs = np.random.default_rng(0).standard_normal((5, 1, 8, 8)).astype(np.float32)
    before = OnnxRuntimeSession(raw, threads=1).run(inputs)
    after = OnnxRuntimeSession(normalized, threads=1).run(inputs)
    np.testing.assert_array_equal(before, after)


def test_a_loaded_model_with_constant_weights_prunes_and_quantizes(
    constant_weights_file: Path,
) -> None:
    model_bytes = load_onnx(str(constant_weights_file), "model.onnx").model_bytes
    pruned = onnx.load_model_from_string(prune_onnx(model_bytes, 0.5))
    weights = [onnx.numpy_helper.to_array(t) for t in onnx_weight_initializers(pruned)]
    zeros = sum(int((w == 0).sum()) for w in weights) / sum(w.size for w in weights)
    assert zeros >= 0.49
    quantized = onnx.load_model_from_string(quantize_onnx_int8(model_bytes))
    assert any("Integer" in n.op_type or "Quant" in n.op_type for n in quantized.graph.node)


def test_trials_on_such_a_model_are_measured(constant_weights_file: Path) -> None:
    workload = digits_workload(model=ModelRef(onnx=str(constant_weights_file)))
    store = WorkloadCache()
    configs: list[dict[str, ConfigValue]] = [
        {"prune.method": "magnitude", "prune.ratio": 0.3},
        {"precision.mode": "int8_dynamic"},
    ]
    for config in configs:
        result = run_trial(spec_for(workload, config), store)
        assert result.status == "ok", result.reason


def test_an_old_ir_version_is_left_as_it_is() -> None:
    tensor = onnx.numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["w"], value=tensor)],
        "g",
        [],
        [helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [2, 2])],
    )
    model = helper.make_model(graph)
    model.ir_version = 3
    assert constants_to_initializers(model) == 0
    assert len(model.graph.node) == 1


def test_constant_weights_inside_if_branches_are_pruned_once_normalized() -> None:
    """A voice model's Conv and MatMul weights are Constant nodes inside If branches (one per
    sample rate): normalized, each branch holds them as its own initializers, and pruning
    finds and zeroes them; the model still runs both branches."""
    model = constant_weights_in_if_branches()
    assert not onnx_weight_initializers(model)
    normalized = normalize_onnx(model)
    assert len(onnx_weight_initializers(normalized)) == 2
    pruned = onnx.load_model_from_string(prune_onnx(normalized.SerializeToString(), 0.5))
    zeroed = [np.mean(numpy_helper.to_array(t) == 0) for t in onnx_weight_initializers(pruned)]
    assert sum(zeroed) == pytest.approx(1.0)  # half of the 24 weights, wherever the smallest
    import onnxruntime

    session = onnxruntime.InferenceSession(pruned.SerializeToString())
    for flag in (True, False):
        (y,) = session.run(None, {"x": np.ones((2, 4), np.float32), "flag": np.array(flag)})
        assert y.shape == (2, 3)
