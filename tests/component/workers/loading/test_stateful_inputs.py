"""A recurrent model as voice-activity detectors ship: a batched input, a state `[2, B, 8]`
batched on its second axis, a scalar sample rate, and two outputs, a probability `[B, 1]`
and the next state `[2, B, 8]`. Batch axes come from the declared dimensions, never from a
size that happens to equal the batch; a constant is given once; a state the data leaves out
starts at zeros; and fidelity sees a change of the one-value output."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from autotune.core.contract import DataRef, MetricRef, ModelRef, Workload
from autotune.core.errors import RequestError
from tests.workers_support import REPO, spec_for
from workers import run_trial
from workers.artifacts import export_artifact
from workers.building.ort_session import OnnxRuntimeSession
from workers.cache import WorkloadCache
from workers.measuring.evaluate import run_all
from workers.predictor import load_predictor

SAMPLES = 10
FEATURES = 16
HIDDEN = 8
RATE = 16000


def stateful_model(path: Path, declared: bool = True) -> Path:
    """probability = sigmoid(((input @ w) + sum(state, axis 0)) * sr / 16000 @ v);
    stateN = that mix, twice, stacked on a new first axis, declared `[2, batch, 8]` or not at
    all."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((FEATURES, HIDDEN)).astype(np.float32), "w")
    v = numpy_helper.from_array(rng.standard_normal((HIDDEN, 1)).astype(np.float32), "v")
    rate = numpy_helper.from_array(np.array(RATE, dtype=np.float32), "rate")
    axes = numpy_helper.from_array(np.array([0], dtype=np.int64), "axes")
    nodes = [
        helper.make_node("MatMul", ["input", "w"], ["projected"]),
        helper.make_node("ReduceSum", ["state", "axes"], ["carried"], keepdims=0),
        helper.make_node("Add", ["projected", "carried"], ["mixed"]),
        helper.make_node("Cast", ["sr"], ["sr_float"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["sr_float", "rate"], ["scale"]),
        helper.make_node("Mul", ["mixed", "scale"], ["scaled"]),
        helper.make_node("MatMul", ["scaled", "v"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["output"]),
        helper.make_node("Unsqueeze", ["scaled", "axes"], ["layer"]),
        helper.make_node("Concat", ["layer", "layer"], ["stacked"], axis=0),
        # through the state's runtime shape, which shape inference cannot follow
        helper.make_node("Shape", ["state"], ["state_shape"]),
        helper.make_node("Reshape", ["stacked", "state_shape"], ["stateN"]),
    ]
    graph = helper.make_graph(
        nodes,
        "stateful",
        [
            helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", FEATURES]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", HIDDEN]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1]),
            helper.make_tensor_value_info(
                "stateN", TensorProto.FLOAT, [2, "batch", HIDDEN] if declared else [None] * 3
            ),
        ],
        [w, v, rate, axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save_model(model, str(path))
    return path


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "input": rng.standard_normal((SAMPLES, FEATURES)).astype(np.float32),
        "state": rng.standard_normal((2, SAMPLES, HIDDEN)).astype(np.float32) * 0.1,
    }


def direct(model: Path, given: dict[str, np.ndarray], sr: int = RATE) -> list[np.ndarray]:
    """ONNX Runtime on the whole data at once, outside autotune's feeding."""
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run(None, {**given, "sr": np.array(sr, dtype=np.int64)})


@pytest.fixture(scope="module", params=["declared", "undeclared"])
def model_file(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The state output declared `[2, batch, 8]`, or with every dimension dynamic (as an
    exporter that cannot follow an If leaves it; a voice-activity detector ships so)."""
    declared = request.param == "declared"
    return stateful_model(tmp_path_factory.mktemp("stateful") / "model.onnx", declared)


def workload(model: Path, data: DataRef, metric: str = "fidelity") -> Workload:
    return Workload(
        model=ModelRef(onnx=str(model)),
        data=data,
        metric=MetricRef(kind=metric),  # type: ignore[arg-type]
        python_path=[str(REPO)],
    )


def npz(tmp_path: Path, **given: np.ndarray) -> DataRef:
    path = tmp_path / f"data-{len(list(tmp_path.glob('*.npz')))}.npz"
    np.savez(path, **given)
    return DataRef(npz=str(path))


@pytest.mark.parametrize("batch", [1, 2, 3, 4])
def test_every_batch_size_splits_the_state_on_its_own_axis(
    model_file: Path, tmp_path: Path, batch: int
) -> None:
    """At batch 2 the state's first dimension (2) equals the batch: it must not be split
    there; at batch 1 and 4 it must not be dropped."""
    given = arrays()
    data = npz(tmp_path, **given, sr=np.array(RATE))
    loaded = WorkloadCache().get(workload(model_file, data))
    assert loaded.data.n_samples == SAMPLES
    session = OnnxRuntimeSession(model_file.read_bytes(), threads=1)
    outputs = run_all(session, loaded.data.inputs, batch)
    probability, state = direct(model_file, given)
    assert outputs.dtype.names == ("output", "stateN")
    np.testing.assert_allclose(outputs["output"], probability, rtol=1e-5)
    np.testing.assert_allclose(outputs["stateN"], np.moveaxis(state, 1, 0), rtol=1e-5)


def test_a_constant_is_given_once_and_a_missing_state_starts_at_zeros(
    model_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    given = arrays()
    data = npz(tmp_path, input=given["input"]).model_copy(update={"constants": {"sr": 8000}})
    with caplog.at_level(logging.WARNING, logger="workers.loading.feeds"):
        loaded = WorkloadCache().get(workload(model_file, data))
    assert "'state'" in caplog.text and "fed zeros" in caplog.text and "'stateN'" in caplog.text
    session = OnnxRuntimeSession(model_file.read_bytes(), threads=1)
    outputs = run_all(session, loaded.data.inputs, 4)
    zeros = np.zeros_like(given["state"])
    probability, _ = direct(model_file, {"input": given["input"], "state": zeros}, sr=8000)
    np.testing.assert_allclose(outputs["output"], probability, rtol=1e-5)


def test_data_that_does_not_fit_the_declared_layout_is_refused(
    model_file: Path, tmp_path: Path
) -> None:
    given = arrays()
    samples_first = np.moveaxis(given["state"], 1, 0)  # [N, 2, 8]: not the model's layout
    cases = {
        "same number of samples": npz(
            tmp_path, input=given["input"], state=samples_first, sr=np.array(RATE)
        ),
        "takes one value": npz(tmp_path, **given, sr=np.array([RATE, RATE])),
        "not an input": npz(tmp_path, **given, rate=np.array(RATE)),
    }
    for message, data in cases.items():
        with pytest.raises(RequestError, match=message) as raised:
            WorkloadCache().get(workload(model_file, data))
        assert raised.value.field == "data.npz"
    with pytest.raises(RequestError, match="'input' .* is missing from the data"):
        WorkloadCache().get(workload(model_file, npz(tmp_path, state=given["state"])))


def test_a_trial_judges_the_one_value_output_and_says_how(model_file: Path, tmp_path: Path) -> None:
    data = npz(tmp_path, **arrays(), sr=np.array(RATE))
    store = WorkloadCache()
    spec = spec_for(workload(model_file, data), {"batch.size": 2})
    result = run_trial(spec, store)
    assert result.status == "ok", result.reason
    assert result.metrics is not None and result.metrics.accuracy == pytest.approx(1.0)
    judged_by = result.metrics.accuracy_judged_by or ""
    assert "'output' (1 value a sample): 1 - squared error" in judged_by
    assert "'stateN' (16 values a sample): cosine" in judged_by
    assert result.metrics.top1_agreement is None  # a probability is not class scores


def test_the_tuned_artifact_predicts_in_the_model_s_own_layout(
    model_file: Path, tmp_path: Path
) -> None:
    given = arrays()
    data = npz(tmp_path, **given, sr=np.array(RATE))
    store = WorkloadCache()
    spec = spec_for(workload(model_file, data), {"batch.size": 4}).model_copy(
        update={"purpose": "export"}
    )
    artifact = export_artifact(spec, str(tmp_path / "artifact"), store)
    with load_predictor(artifact.path) as predictor:
        outputs = predictor.predict({**given, "sr": np.array(RATE)})
    probability, state = direct(model_file, given)
    np.testing.assert_allclose(outputs["output"], probability, rtol=1e-5)
    np.testing.assert_allclose(outputs["stateN"], np.moveaxis(state, 1, 0), rtol=1e-5)
