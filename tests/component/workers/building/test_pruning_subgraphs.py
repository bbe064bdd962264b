"""Magnitude pruning of an ONNX model whose weights are used inside control flow (If branches):
the weights of a branch, its own initializers and those it names from the main graph, are
pruned with the rest, and the model still runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autotune.core.errors import Unsupported
from workers.building.ort_session import OnnxRuntimeSession
from workers.building.pruning import onnx_weight_initializers, prune_onnx

RNG = np.random.default_rng(0)
WEIGHTS = {
    "w_main": RNG.standard_normal((4, 4)).astype(np.float32),  # main graph
    "w_shared": RNG.standard_normal((4, 3)).astype(np.float32),  # main graph's, both branches
    "w_inner": RNG.standard_normal((4, 3)).astype(np.float32),  # the else branch's own
}


def branch(name: str, nodes: list[onnx.NodeProto], initializers: list[str]) -> onnx.GraphProto:
    output = helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [None, 3])
    tensors = [numpy_helper.from_array(WEIGHTS[n], n) for n in initializers]
    return helper.make_graph(nodes, name, [], [output], tensors)


def model_with_weights_in_branches() -> onnx.ModelProto:
    """y = h @ w_shared where sum(h) > 0, else h @ w_inner + h @ w_shared; h = x @ w_main."""
    then_branch = branch("then", [helper.make_node("MatMul", ["h", "w_shared"], ["then_y"])], [])
    else_branch = branch(
        "else",
        [
            helper.make_node("MatMul", ["h", "w_inner"], ["inner"]),
            helper.make_node("MatMul", ["h", "w_shared"], ["shared"]),
            helper.make_node("Add", ["inner", "shared"], ["else_y"]),
        ],
        ["w_inner"],
    )
    nodes = [
        helper.make_node("MatMul", ["x", "w_main"], ["h"]),
        helper.make_node("ReduceSum", ["h"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
        helper.make_node(
            "If", ["positive"], ["y"], then_branch=then_branch, else_branch=else_branch
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "branches",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
        [
            numpy_helper.from_array(WEIGHTS["w_main"], "w_main"),
            numpy_helper.from_array(WEIGHTS["w_shared"], "w_shared"),
            numpy_helper.from_array(np.zeros((), np.float32), "zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def pruned_weights(model_bytes: bytes) -> dict[str, np.ndarray]:
    model = onnx.load_model_from_string(model_bytes)
    return {t.name: numpy_helper.to_array(t) for t in onnx_weight_initializers(model)}


def expected(weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    h = x @ weights["w_main"]
    if h.sum() > 0:
        return h @ weights["w_shared"]
    return h @ weights["w_inner"] + h @ weights["w_shared"]


@pytest.mark.parametrize("ratio", [0.3, 0.5])
def test_weights_inside_if_branches_are_pruned_to_the_ratio(ratio: float) -> None:
    original = model_with_weights_in_branches().SerializeToString()
    assert set(pruned_weights(original)) == set(WEIGHTS), "each weight once, the shared one too"
    weights = pruned_weights(prune_onnx(original, ratio))
    before = np.concatenate([WEIGHTS[name].ravel() for name in weights])
    after = np.concatenate([array.ravel() for array in weights.values()])
    assert np.count_nonzero(after == 0) == round(ratio * before.size)
    kept = after != 0
    assert np.abs(before[~kept]).max() <= np.abs(before[kept]).min()
    assert all(np.count_nonzero(w == 0) for w in weights.values()), "every scope is pruned"


def test_a_pruned_model_with_branches_runs_both_branches() -> None:
    pruned = prune_onnx(model_with_weights_in_branches().SerializeToString(), 0.5)
    weights = pruned_weights(pruned)
    session = OnnxRuntimeSession(pruned, threads=1)
    taken = set()
    for x in RNG.standard_normal((16, 1, 4)).astype(np.float32):
        taken.add(bool((x @ weights["w_main"]).sum() > 0))
        np.testing.assert_allclose(session.run(x), expected(weights, x), rtol=1e-5, atol=1e-5)
    assert taken == {True, False}


def test_a_model_without_weights_anywhere_says_subgraphs_were_searched() -> None:
    model = model_with_weights_in_branches()
    for node in model.graph.node:
        for attribute in node.attribute:
            for inner in attribute.g.node:
                inner.op_type = "Add" if inner.op_type == "MatMul" else inner.op_type
    model.graph.node[0].op_type = "Add"
    with pytest.raises(Unsupported, match="no Conv/Gemm/MatMul weights, in its main graph or"):
        prune_onnx(model.SerializeToString(), 0.5)
