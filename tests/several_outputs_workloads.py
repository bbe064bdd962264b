"""Workloads of models with several outputs: the digits workload on a model of
tests/several_outputs.py, and ONNX models written to a directory with the data to run them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from autotune.core.contract import DataRef, MetricRef, ModelRef, Workload
from tests.workers_support import digits_workload

SEVERAL = "tests.several_outputs"


def several_outputs(entry: str, kind: str = "fidelity") -> Workload:
    return digits_workload(
        model=ModelRef(entry_point=f"{SEVERAL}:{entry}"),
        metric=MetricRef(kind=kind),  # type: ignore[arg-type]
    )


def stale_workload(path: Path) -> Workload:
    return Workload(
        model=ModelRef(onnx=str(path / "stale.onnx")),
        data=DataRef(npz=str(path / "data.npz")),
        metric=MetricRef(kind="fidelity"),
    )


def summing_model(path: Path, doubled: bool) -> Path:
    """Input `x` float [batch, 4]; outputs `total` (a scalar: no batch axis) and, where
    `doubled`, `twice` [batch, 4]."""
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0)]
    outputs = [helper.make_tensor_value_info("total", TensorProto.FLOAT, [])]
    if doubled:
        nodes.append(helper.make_node("Add", ["x", "x"], ["twice"]))
        outputs.append(helper.make_tensor_value_info("twice", TensorProto.FLOAT, ["batch", 4]))
    graph = helper.make_graph(
        nodes, "summed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        outputs,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path / "stale.onnx"))
    np.savez(path / "data.npz", inputs=np.random.default_rng(0).normal(size=(6, 4)).astype("f4"))
    return path
