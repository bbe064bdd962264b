"""Small ONNX models the tests build in memory."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_onnx(offset: float = 1.0) -> onnx.ModelProto:
    """Y = X + W with W an initializer of four `offset`s."""
    weight = numpy_helper.from_array(np.full(4, offset, np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        "tiny",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def constant_weights_in_if_branches() -> onnx.ModelProto:
    """y = x @ w_a if flag else x @ w_b, each weight a Constant node inside its branch."""
    rng = np.random.default_rng(0)

    def branch(name: str) -> onnx.GraphProto:
        weight = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
        return helper.make_graph(
            [
                helper.make_node("Constant", [], [f"{name}_w"], value=weight),
                helper.make_node("MatMul", ["x", f"{name}_w"], [f"{name}_y"]),
            ],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [None, 3])],
        )

    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], then_branch=branch("a"), else_branch=branch("b"))],
        "branches",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
