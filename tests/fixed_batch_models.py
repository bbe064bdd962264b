"""A small ONNX classifier whose input declares a fixed batch size, and data for it whose
labels are its own top-1 classes, so the unmodified model scores an accuracy of 1; a torch
module that takes a batch of one alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

FEATURES = 32
CLASSES = 10


def fixed_batch_classifier(path: Path, batch: int | None = 1) -> Path:
    """`y = relu(x @ W1) @ W2` on `x: [batch, FEATURES]` (batch None: a dynamic batch)."""
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((FEATURES, 64)).astype(np.float32)
    scores = rng.standard_normal((64, CLASSES)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fixed_batch_classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, CLASSES])],
        [numpy_helper.from_array(hidden, "w1"), numpy_helper.from_array(scores, "w2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def labelled_data(model: Path, path: Path, samples: int = 64) -> Path:
    """Inputs and the model's own top-1 classes for them, computed one sample at a time."""
    import onnxruntime

    inputs = np.random.default_rng(1).standard_normal((samples, FEATURES)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    labels = [session.run(None, {"x": inputs[i : i + 1]})[0].argmax() for i in range(samples)]
    np.savez(path, inputs=inputs, labels=np.asarray(labels, np.int64))
    return path


class BatchOfOne(torch.nn.Module):
    """The digits model behind a reshape that hard-codes a batch of one (`x.reshape(1, -1)`):
    it fails on any other batch size."""

    def __init__(self) -> None:
        super().__init__()
        from experiments.digits.model import build_model

        self.model = build_model()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = self.model.features(x).reshape(1, -1)
        return self.model.classifier[1:](flat)  # type: ignore[no-any-return]


def batch_of_one() -> torch.nn.Module:
    return BatchOfOne().eval()
