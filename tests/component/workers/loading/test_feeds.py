"""Models with several named inputs and outputs, and integer inputs: data named like the
model's inputs, every input fed by name on each ONNX engine, a clear error before any trial
where the data does not fit, and outputs judged all together or by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autotune.core.contract import ConfigValue, DataRef, MetricRef, ModelRef, Workload
from autotune.core.errors import RequestError, Unsupported
from tests.workers_support import REPO, digits_workload, spec_for
from workers import run_trial
from workers.building.ort_session import OnnxRuntimeSession
from workers.cache import WorkloadCache
from workers.inspection import inspect_workload
from workers.loading.feeds import InputSpec, feed, pack, packed_outputs
from workers.loading.workloads import calibration_count
from workers.measuring.evaluate import fidelity

SAMPLES = 64  # the fewest that hold calibration samples out of the evaluation
FEATURES = 6
TOKENS = 5
VOCABULARY = 20


def two_in_two_out(path: Path) -> Path:
    """features float [N, 6] and token_ids int64 [N, 5] in; scores [N, 3] (a Gemm of the
    features plus the mean embedding of the tokens) and norm [N, 1] out."""
    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.standard_normal((FEATURES, 3)).astype(np.float32), "w")
    table = rng.standard_normal((VOCABULARY, 3)).astype(np.float32)
    embedding = numpy_helper.from_array(table, "embedding")
    nodes = [
        helper.make_node("MatMul", ["features", "w"], ["projected"]),
        helper.make_node("Gather", ["embedding", "token_ids"], ["embedded"]),
        helper.make_node("ReduceMean", ["embedded"], ["pooled"], axes=[1], keepdims=0),
        helper.make_node("Add", ["projected", "pooled"], ["scores"]),
        helper.make_node("ReduceL2", ["scores"], ["norm"], axes=[1], keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "two-in-two-out",
        [
            helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", FEATURES]),
            helper.make_tensor_value_info("token_ids", TensorProto.INT64, ["n", TOKENS]),
        ],
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 3]),
            helper.make_tensor_value_info("norm", TensorProto.FLOAT, ["n", 1]),
        ],
        [weights, embedding],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save_model(model, str(path))
    return path


def named_data(path: Path, **replace: np.ndarray) -> Path:
    rng = np.random.default_rng(1)
    arrays = {
        "features": rng.standard_normal((SAMPLES, FEATURES)),  # float64, as numpy makes it
        "token_ids": rng.integers(0, VOCABULARY, (SAMPLES, TOKENS)),
        "labels": rng.integers(0, 3, SAMPLES),
    }
    np.savez(path, **{**arrays, **replace})
    return path


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_in_two_out(tmp_path_factory.mktemp("two-inputs") / "model.onnx")


def workload(model: Path, data: Path, metric: MetricRef | None = None) -> Workload:
    return digits_workload(
        ModelRef(onnx=str(model)), DataRef(npz=str(data)), metric or MetricRef(kind="fidelity")
    )


def test_named_arrays_are_packed_and_fed_by_name() -> None:
    features = np.arange(12, dtype=np.float64).reshape(4, 3)
    ids = np.arange(8).reshape(4, 2)
    packed = pack({"features": features, "ids": ids})
    assert packed.shape == (4,) and packed.dtype.names == ("features", "ids")
    specs = [
        InputSpec("ids", np.int64, (None, 2)),
        InputSpec("features", np.float32, (None, 3)),
    ]
    fed = feed(packed[1:3], specs)
    assert list(fed) == ["ids", "features"]
    np.testing.assert_array_equal(fed["features"], features[1:3].astype(np.float32))
    assert fed["features"].dtype == np.float32 and fed["ids"].dtype == np.int64
    with pytest.raises(ValueError, match="same number of samples"):
        pack({"features": features, "ids": ids[:3]})


def test_what_does_not_fit_names_the_input_its_shape_and_type() -> None:
    packed = pack({"features": np.zeros((2, 3), np.float32)})
    specs = [InputSpec("features", np.float32, (None, 3)), InputSpec("mask", np.bool_, (None, 3))]
    with pytest.raises(Unsupported, match=r"'mask' \(bool \[\?, 3\]\) is missing"):
        feed(packed, specs)
    with pytest.raises(Unsupported, match=r"'features' \(float32 \[\?, 4\]\) does not fit"):
        feed(packed, [InputSpec("features", np.float32, (None, 4))])
    extra = pack({"features": np.zeros((2, 3), np.float32), "mask": np.ones((2, 3), bool)})
    with pytest.raises(Unsupported, match="'mask' is not an input"):
        feed(extra, [InputSpec("features", np.float32, None)])
    with pytest.raises(Unsupported, match="takes 2 inputs"):
        feed(np.zeros((2, 3), np.float32), specs)
    with pytest.raises(Unsupported, match="cannot take the data's float32"):
        feed(packed, [InputSpec("features", np.int64, (None, 3))])


def test_several_outputs_come_back_as_one_array_by_name() -> None:
    declared = [InputSpec("a", np.float32, (None, 2)), InputSpec("b", np.float32, (None, 1))]
    both = packed_outputs(declared, [np.ones((4, 2)), np.zeros((4, 1))], rows=4)
    assert both.dtype.names == ("a", "b") and both.shape == (4,)
    # an output without the samples on its batch axis is left out
    only = packed_outputs(declared, [np.ones((4, 2)), np.zeros(7)], rows=4)
    assert only.dtype.names is None and only.shape == (4, 2)


def test_fidelity_over_several_outputs_is_the_worst() -> None:
    reference = pack({"a": np.ones((3, 8)), "b": np.ones((3, 8))})
    half = pack({"a": np.ones((3, 8)), "b": np.tile([1.0, -1.0], (3, 4))})  # cosine 0 for b
    assert fidelity(reference, reference) == pytest.approx(1.0)
    assert fidelity(half, reference) == pytest.approx(0.0)


def test_the_model_runs_on_onnx_runtime_with_every_output(model_file: Path, tmp_path: Path) -> None:
    session = OnnxRuntimeSession(model_file.read_bytes(), threads=1)
    assert [spec.name for spec in session.inputs] == ["features", "token_ids"]
    data = np.load(named_data(tmp_path / "data.npz"))
    batch = pack({"features": data["features"][:4], "token_ids": data["token_ids"][:4]})
    outputs = session.run(batch)
    assert outputs.dtype.names == ("scores", "norm")
    np.testing.assert_allclose(
        outputs["norm"][:, 0], np.linalg.norm(outputs["scores"], axis=1), rtol=1e-5
    )


CONFIGS: list[dict[str, ConfigValue]] = [
    {"runtime.engine": "onnxruntime"},
    {"runtime.engine": "onnxruntime", "precision.mode": "int8_dynamic"},
    {"runtime.engine": "onnxruntime", "precision.mode": "int8_static"},
    {"runtime.engine": "onnxruntime", "prune.method": "magnitude", "prune.ratio": 0.3},
    {"runtime.engine": "openvino"},
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_trials_feed_every_input_by_name(
    model_file: Path, tmp_path: Path, config: dict[str, ConfigValue]
) -> None:
    if config["runtime.engine"] == "openvino":
        pytest.importorskip("openvino")
    result = run_trial(spec_for(workload(model_file, named_data(tmp_path / "d.npz")), config))
    assert result.status == "ok", result.reason
    assert result.metrics is not None and result.metrics.accuracy > 0.9  # fidelity, both outputs


def test_data_that_does_not_fit_is_refused_before_any_trial(
    model_file: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.npz"
    np.savez(missing, features=np.zeros((8, FEATURES)))
    with pytest.raises(RequestError) as raised:
        inspect_workload(workload(model_file, missing), WorkloadCache())
    assert raised.value.field == "data.npz"
    assert "'token_ids' (int64 [?, 5]) is missing from the data" in str(raised.value)

    misshaped = named_data(tmp_path / "misshaped.npz", token_ids=np.zeros((SAMPLES, 7), np.int64))
    with pytest.raises(RequestError, match=r"'token_ids' \(int64 \[\?, 5\]\) does not fit"):
        inspect_workload(workload(model_file, misshaped), WorkloadCache())


def test_accuracy_judges_the_output_the_request_names(model_file: Path, tmp_path: Path) -> None:
    data = named_data(tmp_path / "d.npz")
    with pytest.raises(RequestError, match="name the one that accuracy judges as metric.output"):
        inspect_workload(workload(model_file, data, MetricRef(kind="accuracy")), WorkloadCache())
    with pytest.raises(RequestError, match="'logits' is not an output of the model"):
        named = MetricRef(kind="accuracy", output="logits")
        inspect_workload(workload(model_file, data, named), WorkloadCache())
    scores = MetricRef(kind="accuracy", output="scores")
    info = inspect_workload(workload(model_file, data, scores), WorkloadCache())
    assert info.has_labels
    result = run_trial(spec_for(workload(model_file, data, scores), {}))
    assert result.status == "ok", result.reason


def test_an_embedding_of_int64_token_ids_is_tuned_in_int8(tmp_path: Path) -> None:
    """One int64 input of token ids (a Gather of an embedding table, then a projection)."""
    rng = np.random.default_rng(2)
    table = numpy_helper.from_array(rng.standard_normal((VOCABULARY, 8)).astype(np.float32), "t")
    projection = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "p")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["t", "ids"], ["embedded"]),
            helper.make_node("ReduceMean", ["embedded"], ["pooled"], axes=[1], keepdims=0),
            helper.make_node("MatMul", ["pooled", "p"], ["out"]),
        ],
        "ids",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n", TOKENS])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 4])],
        [table, projection],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "ids.onnx"
    onnx.save_model(model, str(path))
    data = tmp_path / "ids.npz"
    np.savez(data, inputs=rng.integers(0, VOCABULARY, (SAMPLES, TOKENS)))
    for config in ({}, {"precision.mode": "int8_dynamic"}):
        result = run_trial(spec_for(workload(path, data), config))
        assert result.status == "ok", result.reason
        assert result.metrics is not None and result.metrics.accuracy > 0.9


def test_an_entry_point_may_return_a_dict_of_named_inputs(
    model_file: Path, tmp_path: Path, make_module: Callable[[str], str]
) -> None:
    data = named_data(tmp_path / "d.npz")
    module = make_module(
        "import numpy as np\n"
        f"def data():\n    a = np.load({str(data)!r})\n"
        "    return {'features': a['features'], 'token_ids': a['token_ids']}, None\n"
    )
    loaded = Workload(
        model=ModelRef(onnx=str(model_file)),
        data=DataRef(entry_point=f"{module}:data"),
        metric=MetricRef(kind="fidelity"),
        python_path=[str(REPO), str(tmp_path)],
    )
    evaluated = SAMPLES - calibration_count(SAMPLES)  # the rest calibrate static int8
    assert inspect_workload(loaded, WorkloadCache()).n_samples == evaluated


def test_a_tuned_artifact_of_such_a_model_predicts_from_named_arrays(
    model_file: Path, tmp_path: Path
) -> None:
    from workers.artifacts import export_artifact
    from workers.predictor import load_predictor

    data = np.load(named_data(tmp_path / "d.npz"))
    config: dict[str, ConfigValue] = {"runtime.engine": "onnxruntime", "batch.size": 8}
    spec = spec_for(workload(model_file, tmp_path / "d.npz"), config)
    info = export_artifact(spec, str(tmp_path / "artifact"), WorkloadCache())
    inputs = {"features": data["features"], "token_ids": data["token_ids"]}
    with load_predictor(info.path) as predictor:
        outputs = predictor.predict(inputs)
    expected = OnnxRuntimeSession(model_file.read_bytes(), threads=1).run(pack(inputs))
    assert outputs.dtype.names == ("scores", "norm")
    np.testing.assert_allclose(outputs["scores"], expected["scores"], rtol=1e-5)

    # The MLflow model of the artifact names both inputs and both outputs in its signature.
    from autotune.tracking.mlflow_model import model_directory

    with np.load(Path(info.path).parent / "input_example.npz") as example:
        assert example.files == ["features", "token_ids"]
        assert all(len(example[name]) == 2 for name in example.files)
    with np.load(Path(info.path).parent / "output_example.npz") as outputs:
        assert outputs.files == ["scores", "norm"]
        np.testing.assert_allclose(outputs["scores"], expected["scores"][:2], rtol=1e-5)
    model = model_directory(Path(info.path).parent, tmp_path / "mlflow-model")
    signature = (model / "MLmodel").read_text()
    assert all(name in signature for name in ("features", "token_ids", "scores", "norm"))


def test_a_dimension_written_as_minus_one_is_dynamic() -> None:
    """Paddle2ONNX writes a dynamic batch as the value -1: no fixed batch, so static int8's
    calibration feeds are the samples' own batches (a batch of -1 fed nothing)."""
    from workers.building.calibration import calibration_feeds
    from workers.loading.feeds import graph_inputs, model_fixed_batch

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "h", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, "h", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph)
    assert model_fixed_batch(graph_inputs(model)) is None
    assert graph_inputs(model)[0].shape == (None, 3, None, 4)
    feeds = calibration_feeds(model, np.zeros((8, 3, 2, 4), np.float32))
    assert [f["x"].shape for f in feeds] == [(8, 3, 2, 4)]
