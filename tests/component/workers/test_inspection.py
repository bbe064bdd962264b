"""inspect_workload: the good case for each model kind, and one RequestError per bad input."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from autotune.core.contract import DataRef, MetricRef, ModelRef, Workload
from autotune.core.errors import RequestError
from tests.workers_support import digits_workload
from workers import inspect_workload
from workers.cache import WorkloadCache
from workers.loading.workloads import calibration_count

# The digits' 450 samples less those held out to calibrate static int8 on.
EVALUATED = 450 - calibration_count(450)


def inspect(workload: Workload):  # type: ignore[no-untyped-def]
    return inspect_workload(workload, WorkloadCache())


def assert_rejected(workload: Workload, field: str, rule_part: str) -> RequestError:
    with pytest.raises(RequestError) as caught:
        inspect(workload)
    assert caught.value.field == field, caught.value
    assert rule_part in caught.value.rule, caught.value
    return caught.value


def test_torch_entry_points() -> None:
    info = inspect(digits_workload())
    assert info.kind == "torch"
    assert (info.n_samples, info.input_shape, info.has_labels) == (EVALUATED, [1, 8, 8], True)
    assert len(info.sha256) == 64
    assert inspect(digits_workload()).sha256 == info.sha256


def test_onnx_file_and_npz(digits_onnx: Path, digits_npz: Path) -> None:
    workload = digits_workload(
        model=ModelRef(onnx=str(digits_onnx)), data=DataRef(npz=str(digits_npz))
    )
    info = inspect(workload)
    assert info.kind == "onnx"
    assert info.sha256 == hashlib.sha256(digits_onnx.read_bytes()).hexdigest()
    assert (info.n_samples, info.input_shape) == (EVALUATED, [1, 8, 8])


def test_fidelity_needs_no_labels(tmp_path: Path, digits: tuple[np.ndarray, np.ndarray]) -> None:
    np.savez(tmp_path / "unlabelled.npz", inputs=digits[0][:10])
    workload = digits_workload(
        data=DataRef(npz=str(tmp_path / "unlabelled.npz")), metric=MetricRef(kind="fidelity")
    )
    assert inspect(workload).has_labels is False


def test_onnx_external_data_inside_its_directory_loads(tmp_path: Path, digits_onnx: Path) -> None:
    model = onnx.load(str(digits_onnx))
    onnx.save_model(
        model, str(tmp_path / "m.onnx"), save_as_external_data=True,
        location="weights.bin", size_threshold=0,
    )  # fmt: skip
    info = inspect(digits_workload(model=ModelRef(onnx=str(tmp_path / "m.onnx"))))
    assert info.kind == "onnx"


def test_missing_onnx_file(tmp_path: Path) -> None:
    workload = digits_workload(model=ModelRef(onnx=str(tmp_path / "absent.onnx")))
    assert_rejected(workload, "model.onnx", "must exist")


def test_corrupt_onnx_file(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(b"\x00\xffthis is not a protobuf" * 10)
    assert_rejected(digits_workload(model=ModelRef(onnx=str(path))), "model.onnx", "ONNX")


def test_onnx_external_data_outside_its_directory(tmp_path: Path, digits_onnx: Path) -> None:
    inner = tmp_path / "upload"
    inner.mkdir()
    model = onnx.load(str(digits_onnx))
    onnx.save_model(
        model, str(inner / "m.onnx"), save_as_external_data=True,
        location="weights.bin", size_threshold=0,
    )  # fmt: skip
    (inner / "weights.bin").rename(tmp_path / "weights.bin")
    escaping = onnx.load(str(inner / "m.onnx"), load_external_data=False)
    for tensor in escaping.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../weights.bin"
    onnx.save_model(escaping, str(inner / "m.onnx"))
    error = assert_rejected(
        digits_workload(model=ModelRef(onnx=str(inner / "m.onnx"))), "model.onnx", "inside"
    )
    assert error.value == "../weights.bin"


def test_model_module_that_does_not_import(
    tmp_path: Path, make_module: Callable[[str], str]
) -> None:
    name = make_module("import a_package_that_does_not_exist\n")
    workload = digits_workload(model=ModelRef(entry_point=f"{name}:build"), extra_path=[tmp_path])
    assert_rejected(workload, "model.entry_point", "must import")


def test_model_entry_point_without_that_attribute() -> None:
    workload = digits_workload(model=ModelRef(entry_point="experiments.digits.model:no_such"))
    assert_rejected(workload, "model.entry_point", "no attribute")


def test_model_entry_point_returning_no_module(
    tmp_path: Path, make_module: Callable[[str], str]
) -> None:
    name = make_module("def build():\n    return {'weights': 1}\n")
    workload = digits_workload(model=ModelRef(entry_point=f"{name}:build"), extra_path=[tmp_path])
    error = assert_rejected(workload, "model.entry_point", "torch.nn.Module")
    assert error.value == "dict"


def test_model_entry_point_that_raises(tmp_path: Path, make_module: Callable[[str], str]) -> None:
    name = make_module("def build():\n    raise RuntimeError('no weights')\n")
    workload = digits_workload(model=ModelRef(entry_point=f"{name}:build"), extra_path=[tmp_path])
    assert_rejected(workload, "model.entry_point", "no weights")


def test_data_entry_point_returning_no_arrays(
    tmp_path: Path, make_module: Callable[[str], str]
) -> None:
    name = make_module("def data():\n    return [[0.0] * 64], [1]\n")
    workload = digits_workload(data=DataRef(entry_point=f"{name}:data"), extra_path=[tmp_path])
    assert_rejected(workload, "data.entry_point", "numpy array")


def test_data_entry_point_returning_no_pair(
    tmp_path: Path, make_module: Callable[[str], str]
) -> None:
    name = make_module("import numpy as np\ndef data():\n    return np.zeros((4, 1, 8, 8))\n")
    workload = digits_workload(data=DataRef(entry_point=f"{name}:data"), extra_path=[tmp_path])
    assert_rejected(workload, "data.entry_point", "tuple (inputs, labels)")


def test_missing_npz(tmp_path: Path) -> None:
    workload = digits_workload(data=DataRef(npz=str(tmp_path / "absent.npz")))
    assert_rejected(workload, "data.npz", "must exist")


def test_npz_without_inputs(tmp_path: Path) -> None:
    """A torch model takes the array named 'inputs'; named arrays are an ONNX model's inputs."""
    np.savez(tmp_path / "d.npz", images=np.zeros((3, 1, 8, 8)))
    workload = digits_workload(
        data=DataRef(npz=str(tmp_path / "d.npz")), metric=MetricRef(kind="fidelity")
    )
    assert_rejected(workload, "data.npz", "'inputs'")
    np.savez(tmp_path / "labels-only.npz", labels=np.zeros(3))
    assert_rejected(
        digits_workload(data=DataRef(npz=str(tmp_path / "labels-only.npz"))), "data.npz", "'inputs'"
    )


def test_npz_with_pickled_objects_is_refused(tmp_path: Path) -> None:
    objects = np.empty(2, dtype=object)
    objects[:] = [{"a": 1}, {"b": 2}]
    np.savez(tmp_path / "d.npz", inputs=objects)
    assert_rejected(
        digits_workload(data=DataRef(npz=str(tmp_path / "d.npz"))), "data.npz", "pickle"
    )


def test_empty_data(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", inputs=np.zeros((0, 1, 8, 8)), labels=np.zeros(0, np.int64))
    assert_rejected(
        digits_workload(data=DataRef(npz=str(tmp_path / "d.npz"))), "data.npz", "at least one"
    )


def test_inputs_and_labels_of_different_lengths(
    tmp_path: Path, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    np.savez(tmp_path / "d.npz", inputs=digits[0][:10], labels=digits[1][:9])
    error = assert_rejected(
        digits_workload(data=DataRef(npz=str(tmp_path / "d.npz"))), "data.npz", "same length"
    )
    assert error.value == (10, 9)


def test_accuracy_without_labels(tmp_path: Path, digits: tuple[np.ndarray, np.ndarray]) -> None:
    np.savez(tmp_path / "d.npz", inputs=digits[0][:10])
    workload = digits_workload(data=DataRef(npz=str(tmp_path / "d.npz")))
    assert_rejected(workload, "metric.kind", "needs labels")


def test_inputs_of_the_wrong_shape(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", inputs=np.zeros((6, 1, 5, 5), np.float32), labels=np.zeros(6, int))
    error = assert_rejected(
        digits_workload(data=DataRef(npz=str(tmp_path / "d.npz"))), "data.npz", "fit the model"
    )
    assert "[1, 5, 5]" in error.value


def test_onnx_model_and_inputs_of_the_wrong_shape(tmp_path: Path, digits_onnx: Path) -> None:
    np.savez(tmp_path / "d.npz", inputs=np.zeros((6, 64), np.float32), labels=np.zeros(6, int))
    workload = digits_workload(
        model=ModelRef(onnx=str(digits_onnx)), data=DataRef(npz=str(tmp_path / "d.npz"))
    )
    assert_rejected(workload, "data.npz", "fit the model")


def test_custom_metric_that_does_not_resolve() -> None:
    metric = MetricRef(kind="custom", entry_point="experiments.digits.model:no_metric")
    assert_rejected(digits_workload(metric=metric), "metric.entry_point", "no attribute")
