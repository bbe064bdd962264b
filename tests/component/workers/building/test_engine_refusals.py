"""An engine that cannot convert or compile the model refuses it as `Unsupported`, in one line
that names what it lacks, not as an error; one that runs out of memory does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from onnx import TensorProto, helper

from autotune.core.contract import ModelRef, Workload
from autotune.core.errors import CannotConvert, Unsupported, engine_that_cannot_convert
from tests.unconvertible import digits_through_det
from tests.workers_support import digits_workload, spec_for
from workers import run_trial
from workers.building.knobs import engine_of
from workers.building.knobs.openvino import OpenVinoSession, read_onnx
from workers.building.ort_session import OnnxRuntimeSession
from workers.cache import WorkloadCache
from workers.inspection import inspect_workload

OPENVINO = {"runtime.engine": "openvino", "runtime.threads": 1, "batch.size": 4}


@pytest.fixture(scope="module")
def det_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return digits_through_det(tmp_path_factory.mktemp("det") / "digits-det.onnx")


@pytest.fixture(scope="module")
def det_workload(det_model: Path) -> Workload:
    return digits_workload(model=ModelRef(onnx=str(det_model)))


def test_openvino_cannot_convert_an_op_it_lacks_and_says_so_in_one_line(det_model: Path) -> None:
    with pytest.raises(CannotConvert) as refused:
        OpenVinoSession(det_model.read_bytes(), 1, "fp32", "latency", 1)
    reason = str(refused.value)
    assert reason.startswith("runtime.engine=openvino: OpenVINO cannot convert this model (")
    assert "No conversion rule found for operations: Det-" in reason
    assert "\n" not in reason and "src/" not in reason
    assert engine_that_cannot_convert(reason) == "openvino"


def test_an_openvino_trial_of_such_a_model_is_unsupported(det_workload: Workload) -> None:
    result = run_trial(spec_for(det_workload, OPENVINO), WorkloadCache())
    assert result.status == "unsupported", result.reason
    assert result.reason is not None and "\n" not in result.reason
    assert engine_that_cannot_convert(result.reason) == "openvino"


def test_onnxruntime_still_runs_such_a_model(det_workload: Workload) -> None:
    config = {**OPENVINO, "runtime.engine": "onnxruntime"}
    result = run_trial(spec_for(det_workload, config), WorkloadCache())
    assert result.status == "ok", result.reason


def test_inspecting_such_a_model_finds_what_openvino_cannot_convert(
    det_workload: Workload, digits_onnx: Path
) -> None:
    refusals = inspect_workload(det_workload, WorkloadCache()).engine_refusals
    assert set(refusals) == {"openvino"}
    assert "Det-" in refusals["openvino"] and "\n" not in refusals["openvino"]
    convertible = digits_workload(model=ModelRef(onnx=str(digits_onnx)))
    assert inspect_workload(convertible, WorkloadCache()).engine_refusals == {}
    assert engine_of("openvino").conversion_problem(digits_onnx.read_bytes()) is None


class OutOfMemoryCore:
    def read_model(self, model: Any) -> None:
        raise RuntimeError("Exception from src/inference/src/cpp/core.cpp:105:\nstd::bad_alloc")


def test_running_out_of_memory_while_converting_is_not_a_refusal() -> None:
    with pytest.raises(RuntimeError, match="bad_alloc") as raised:
        read_onnx(OutOfMemoryCore(), b"")
    assert not isinstance(raised.value, Unsupported)


def test_onnxruntime_without_a_kernel_for_a_node_is_unsupported_in_one_line() -> None:
    """onnxruntime implements Det for float only: a double one has no kernel on the CPU."""
    value = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [None, 2, 2])
    out = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [None])
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "det", [value], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(Unsupported) as refused:
        OnnxRuntimeSession(model.SerializeToString(), threads=1)
    reason = str(refused.value)
    assert reason.startswith("runtime.engine=onnxruntime: no kernel of CPUExecutionProvider")
    assert "Could not find an implementation for Det" in reason and "\n" not in reason
    assert engine_that_cannot_convert(reason) is None, "its options may decide it"
