"""precision.fallback: the int8 model's most quantization-sensitive nodes stay in float. A
three-layer ONNX model whose first MatMul takes inputs with one huge channel (that the layer's
weights ignore) loses its fidelity when that layer's input is int8, and keeps it when that
layer alone stays in float."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from autotune.core.artifacts import VARIANT_FILE
from autotune.core.contract import DataRef, MetricRef, ModelRef, Workload
from autotune.core.errors import Unsupported
from autotune.core.knobs.config import parse_config
from tests.hostile_onnx import NODES, hostile_model, inputs
from tests.workers_support import digits_workload, spec_for
from workers import evaluate_artifact, export_artifact
from workers.building.quantization import float_nodes_of
from workers.building.sensitivity import Sensitivity, measure_sensitivity
from workers.building.transforms import build_variant
from workers.building.variants import BuildContext, OnnxVariant
from workers.cache import WorkloadCache, infidelity_to

BOUND = 0.01
MODES = ("int8_dynamic", "int8_static")


def infidelity(model_bytes: bytes, reference_bytes: bytes) -> float:
    return infidelity_to(reference_bytes, inputs())(model_bytes)


def sensitivity(model_bytes: bytes, mode: str) -> Sensitivity:
    return measure_sensitivity(model_bytes, mode, inputs(), infidelity_to(model_bytes, inputs()))


def build(mode: str, fallback: int) -> bytes:
    config = parse_config(
        {"runtime.engine": "onnxruntime", "precision.mode": mode, "precision.fallback": fallback},
        "onnx",
    )
    context = BuildContext(
        sample_inputs=inputs()[:2],
        calibration_inputs=inputs(),
        ranked_nodes=lambda model, m: sensitivity(model, m).ranked,
    )
    variant = build_variant(OnnxVariant(hostile_model()), config, context)
    assert isinstance(variant, OnnxVariant)
    return variant.model_bytes


def float_weighted_nodes(model_bytes: bytes) -> set[str]:
    """The nodes that still take a float weight initializer (second input) of their own: not
    replaced by an integer or QLinear node, no dequantized int8 weight (QDQ)."""
    graph = onnx.load_model_from_string(model_bytes).graph
    float_weights = {init.name for init in graph.initializer if init.data_type == TensorProto.FLOAT}
    return {
        n.name
        for n in graph.node
        if n.op_type in ("MatMul", "Gemm", "Conv") and n.input[1] in float_weights
    }


def quantized_nodes(model_bytes: bytes) -> set[str]:
    """The hostile model's MatMul nodes that are quantized."""
    return set(NODES) - float_weighted_nodes(model_bytes)


@pytest.mark.parametrize("mode", MODES)
def test_the_hostile_layer_ranks_first(mode: str) -> None:
    measured = sensitivity(hostile_model(), mode)
    assert measured.ranked[0] == "hostile"
    assert set(measured.ranked) == set(NODES)
    benign = max(measured.measured[name] for name in ("benign_mid", "benign_out"))
    assert measured.measured["hostile"] > BOUND > benign


@pytest.mark.parametrize("mode", MODES)
def test_fallback_one_meets_the_bound_that_whole_model_int8_breaks(mode: str) -> None:
    assert infidelity(build(mode, 0), hostile_model()) > BOUND
    assert infidelity(build(mode, 1), hostile_model()) <= BOUND


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fallback", [0, 1, 2])
def test_exactly_the_named_nodes_stay_in_float(mode: str, fallback: int) -> None:
    built = build(mode, fallback)
    kept = float_nodes_of(built)
    assert len(kept) == fallback
    assert quantized_nodes(built) == set(NODES) - set(kept)


def test_more_fallback_than_quantizable_nodes_is_refused() -> None:
    with pytest.raises(Unsupported, match="precision.fallback=4: the model has 3"):
        build("int8_dynamic", 4)


def test_the_exported_artifact_is_the_model_with_its_float_nodes(tmp_path: Path) -> None:
    model_path, data_path = tmp_path / "hostile.onnx", tmp_path / "data.npz"
    model_path.write_bytes(hostile_model())
    np.savez(data_path, inputs=inputs())
    workload = Workload(
        model=ModelRef(onnx=str(model_path)),
        data=DataRef(npz=str(data_path)),
        metric=MetricRef(kind="fidelity"),
    )
    config = {"runtime.engine": "onnxruntime", "precision.mode": "int8_dynamic",
              "precision.fallback": 1}  # fmt: skip
    store = WorkloadCache()
    artifact = export_artifact(spec_for(workload, config), str(tmp_path / "out"), store)
    exported = Path(artifact.path).read_bytes()
    assert float_nodes_of(exported) == ["hostile"]
    assert quantized_nodes(exported) == {"benign_mid", "benign_out"}
    description = json.loads((tmp_path / "out" / VARIANT_FILE).read_text())
    assert description["config"] == config and description["float_nodes"] == ["hostile"]
    assert evaluate_artifact(artifact.path, workload, store) >= 1.0 - BOUND
    loaded = store.get(workload)
    assert len(loaded.sensitivity_tables) == 1  # measured once for this model and mode
    loaded.variant_for(loaded.parse({**config, "precision.fallback": 2}))
    assert len(loaded.sensitivity_tables) == 1


def test_a_torch_models_export_keeps_its_most_sensitive_node_in_float() -> None:
    store = WorkloadCache()
    loaded = store.get(digits_workload())
    config = loaded.parse(
        {"runtime.engine": "onnxruntime", "precision.mode": "int8_static", "precision.fallback": 1}
    )
    variant = loaded.variant_for(config)
    assert isinstance(variant, OnnxVariant)
    ((_, ranking),) = loaded.sensitivity_tables.items()
    most_sensitive = ranking.nodes[0].node
    assert float_nodes_of(variant.model_bytes) == [most_sensitive]
    assert float_weighted_nodes(variant.model_bytes) == {most_sensitive}


def test_an_lstm_is_ranked_and_kept_in_float_by_dynamic_int8(tmp_path: Path) -> None:
    """ONNX Runtime's dynamic quantizer quantizes an LSTM's weights (DynamicQuantizeLSTM):
    the ranking must hold it, or no fallback could keep it in float."""
    import onnx
    import torch

    from workers.building.quantization import quantize_onnx_int8, with_node_names
    from workers.building.sensitivity import QUANTIZABLE_OPS, quantizable_nodes

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
            self.head = torch.nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.lstm(x)[0][:, -1])

    path = tmp_path / "lstm.onnx"
    torch.onnx.export(Encoder().eval(), (torch.zeros(2, 5, 8),), str(path), dynamo=False)
    model_bytes = path.read_bytes()
    model = with_node_names(model_bytes)
    lstm = next(node.name for node in model.graph.node if node.op_type == "LSTM")
    assert lstm in quantizable_nodes(model, QUANTIZABLE_OPS["int8_dynamic"])

    def op_types(quantized: bytes) -> set[str]:
        return {node.op_type for node in onnx.load_model_from_string(quantized).graph.node}

    assert "DynamicQuantizeLSTM" in op_types(quantize_onnx_int8(model_bytes))
    kept = op_types(quantize_onnx_int8(model_bytes, [lstm]))
    assert "LSTM" in kept and "DynamicQuantizeLSTM" not in kept
