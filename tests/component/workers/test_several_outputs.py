"""Models that return several outputs: every engine returns all of them, each is judged, and
`predict` gives them back nested as the module returned them; declared output shapes that
disagree with the returned ones give way to them. An output without the batch on its first
axis is judged whole of a model of a batch of one, else left out and named (None in its place
in what `predict` gives)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from autotune.core.contract import ConfigValue, MetricRef, ModelRef
from autotune.core.errors import RequestError
from tests.several_outputs import (
    named_outputs,
    sequence_of_one,
    three_outputs,
    with_class_prior,
)
from tests.several_outputs_workloads import SEVERAL, several_outputs, stale_workload, summing_model
from tests.workers_support import digits_workload, skip_unless_runnable_here, spec_for
from workers import export_artifact, inspect_workload, run_trial
from workers.cache import WorkloadCache
from workers.measuring.evaluate import agreement, fidelity, resolve_metric
from workers.predictor import load_predictor

STORE = WorkloadCache()
ENGINES = ["torch_eager", "onnxruntime", "openvino"]
MODELS = {
    "tuple": ("three_outputs", ["output_0", "output_1", "output_2"]),
    "dict": ("named_outputs", ["logits", "probabilities", "best"]),
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("model", MODELS)
def test_every_engine_runs_and_judges_every_output(engine: str, model: str) -> None:
    entry, names = MODELS[model]
    config: dict[str, ConfigValue] = {"runtime.engine": engine, "batch.size": 4}
    skip_unless_runnable_here(config)
    result = run_trial(spec_for(several_outputs(entry), config), STORE)
    assert result.status == "ok", result.reason
    assert result.metrics is not None and result.metrics.accuracy > 0.99
    judged_by = result.metrics.accuracy_judged_by or ""
    assert "the worst of its outputs" in judged_by
    assert all(f"'{name}'" in judged_by for name in names), judged_by


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("model", MODELS)
def test_predict_returns_the_outputs_as_the_module_returned_them(
    tmp_path: Path, engine: str, model: str
) -> None:
    entry, _ = MODELS[model]
    config: dict[str, ConfigValue] = {"runtime.engine": engine, "batch.size": 4}
    skip_unless_runnable_here(config)
    workload = several_outputs(entry)
    artifact = export_artifact(spec_for(workload, config), str(tmp_path), STORE)
    inputs = STORE.get(workload).data.inputs[:10]
    module = three_outputs() if model == "tuple" else named_outputs()
    with torch.inference_mode():
        expected: Any = module(torch.from_numpy(inputs))
    with load_predictor(artifact.path, workload.python_path) as predictor:
        predicted = predictor.predict(inputs)
    assert type(predicted) is type(expected) and len(predicted) == 3
    if isinstance(expected, dict):
        assert list(predicted) == list(expected)
        predicted, expected = list(predicted.values()), list(expected.values())
    for got, want in zip(predicted, expected, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


def outputs_of_three(rng: np.random.Generator, third_noise: float = 0.0) -> tuple[Any, Any]:
    reference = {
        "boxes": rng.normal(size=(64, 4)),
        "landmarks": rng.normal(size=(64, 10)),
        "probabilities": rng.dirichlet(np.ones(2), size=64),
    }
    outputs = dict(reference)
    outputs["probabilities"] = reference["probabilities"] + third_noise * rng.normal(size=(64, 2))
    return pack(outputs), pack(reference)


def pack(arrays: dict[str, np.ndarray]) -> np.ndarray:
    from workers.loading.feeds import pack as packed

    return packed(arrays)


def test_fidelity_is_the_worst_outputs() -> None:
    outputs, reference = outputs_of_three(np.random.default_rng(0), third_noise=0.1)
    third = fidelity(outputs["probabilities"], reference["probabilities"])
    assert third < 0.97  # a variant that breaks only the third output is 3 points worse
    assert fidelity(outputs, reference) == third
    assert fidelity(reference, reference) == 1.0


def test_agreement_judges_each_output_of_class_scores_and_says_which() -> None:
    outputs, reference = outputs_of_three(np.random.default_rng(1), third_noise=1.0)
    assert agreement(outputs, reference) == agreement(
        outputs["probabilities"], reference["probabilities"]
    )
    assert agreement(outputs, reference) < 1.0
    judged_by = resolve_metric(MetricRef(kind="agreement"), []).judged_by(reference)
    assert "the worst of its outputs" in judged_by
    assert "'boxes' judged (class scores)" in judged_by
    assert "'probabilities' judged (class scores)" in judged_by


def test_fidelity_says_how_it_judged_each_output() -> None:
    _, reference = outputs_of_three(np.random.default_rng(2))
    judged_by = resolve_metric(MetricRef(kind="fidelity"), []).judged_by(reference)
    assert judged_by.startswith("fidelity to the unmodified model's outputs (the worst of")
    assert "'boxes' (4 values a sample)" in judged_by
    assert "'landmarks' (10 values a sample): cosine" in judged_by
    assert "'probabilities' (2 values a sample)" in judged_by


def stale_output_model(path: Path) -> Path:
    """Input `x` float [1, 4] (a fixed batch of one); output `logits` declared [1, seqlen]
    but returned [3, 1, 8] (three steps of the sample)."""
    nodes = [
        helper.make_node("Concat", ["x", "x"], ["wide"], axis=1),
        helper.make_node("Unsqueeze", ["wide", "zero"], ["step"]),
        helper.make_node("Mul", ["step", "two"], ["doubled"]),
        helper.make_node("Neg", ["step"], ["negated"]),
        helper.make_node("Concat", ["step", "doubled", "negated"], ["logits"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "stale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seqlen"])],
        initializer=[
            helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
            helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path / "stale.onnx"))
    np.savez(path / "data.npz", inputs=np.random.default_rng(0).normal(size=(6, 4)).astype("f4"))
    return path


def test_a_stale_declared_output_shape_gives_way_to_the_returned_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    workload = stale_workload(stale_output_model(tmp_path))
    with caplog.at_level(logging.WARNING):
        info = inspect_workload(workload, WorkloadCache())
    assert info.kind == "onnx"
    warnings = [r.getMessage() for r in caplog.records if "'logits'" in r.getMessage()]
    assert warnings == [
        "the model's output 'logits' (float32 [1, ?]) returns [3, 1, 8]: its returned shape "
        "is used, not its declared one"
    ]
    store = WorkloadCache()
    result = run_trial(spec_for(workload, {"runtime.engine": "onnxruntime"}), store)
    assert result.status == "ok", result.reason
    assert result.metrics is not None and result.metrics.accuracy == pytest.approx(1.0)
    assert "(24 values a sample): cosine" in (result.metrics.accuracy_judged_by or "")
    assert store.get(workload).reference_outputs().shape == (6, 3, 1, 8)


def steps_model(path: Path) -> Path:
    """Input `x` float [1, width] (a fixed batch of one); output `logits` declared
    [1, seqlen] (stale) and returned [width, 1, 2]: a step per input column, as an OCR
    returns [T, 1, classes]. A runtime that infers shapes itself reads it as [?, 1, 2]."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["columns"], perm=[1, 0]),
        helper.make_node("Unsqueeze", ["columns", "one"], ["step"]),
        helper.make_node("Concat", ["step", "step"], ["logits"], axis=2),
    ]
    graph = helper.make_graph(
        nodes,
        "steps",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "width"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seqlen"])],
        initializer=[helper.make_tensor("one", TensorProto.INT64, [1], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path / "stale.onnx"))
    np.savez(path / "data.npz", inputs=np.random.default_rng(0).normal(size=(6, 5)).astype("f4"))
    return path


@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_a_dynamic_first_axis_that_is_not_the_batch_of_one_is_judged_whole(
    tmp_path: Path, engine: str
) -> None:
    """Returned [5, 1, 2] for one sample: the first axis holds the steps, not the batch,
    whether the runtime reports the declared [1, ?] or infers [?, 1, 2]; the output belongs
    to the one sample."""
    workload = stale_workload(steps_model(tmp_path))
    result = run_trial(spec_for(workload, {"runtime.engine": engine}), WorkloadCache())
    assert result.status == "ok", result.reason
    assert result.metrics is not None and result.metrics.accuracy == pytest.approx(1.0)
    assert "(10 values a sample): cosine" in (result.metrics.accuracy_judged_by or "")


def test_an_output_left_out_is_named_with_why(tmp_path: Path) -> None:
    workload = stale_workload(summing_model(tmp_path, doubled=True))
    result = run_trial(spec_for(workload, {"runtime.engine": "onnxruntime"}), WorkloadCache())
    assert result.status == "ok", result.reason
    judged_by = result.metrics.accuracy_judged_by or ""  # type: ignore[union-attr]
    assert judged_by.endswith(
        "; left out: 'total' has no batch axis (declared 'total' (float32 []))"
    )


def test_an_output_without_a_batch_axis_is_blamed_on_the_model_not_the_data(
    tmp_path: Path,
) -> None:
    """Of a model whose batch is dynamic, an output of fixed shape has no batch axis."""
    with pytest.raises(RequestError) as caught:
        inspect_workload(stale_workload(summing_model(tmp_path, doubled=False)), WorkloadCache())
    assert caught.value.field == "model.onnx", caught.value
    assert "'total'" in caught.value.rule and "has no batch axis" in caught.value.rule
    assert "dtype" not in str(caught.value)


def test_a_torch_output_without_a_batch_axis_is_left_out_and_named() -> None:
    workload = several_outputs("with_class_prior")
    result = run_trial(spec_for(workload, {"runtime.engine": "torch_eager"}), STORE)
    assert result.status == "ok", result.reason
    assert result.metrics is not None and result.metrics.accuracy == pytest.approx(1.0)
    judged_by = result.metrics.accuracy_judged_by or ""
    left_out = r"; left out: 'output_1' is float32 \[10\] for a batch of \d+: its first axis is not"
    assert re.search(left_out + " the batch's$", judged_by), judged_by


@pytest.mark.parametrize("engine", ENGINES)
def test_predict_gives_none_in_the_place_of_an_output_left_out(tmp_path: Path, engine: str) -> None:
    config: dict[str, ConfigValue] = {"runtime.engine": engine, "batch.size": 4}
    skip_unless_runnable_here(config)
    workload = several_outputs("with_class_prior")
    artifact = export_artifact(spec_for(workload, config), str(tmp_path), STORE)
    inputs = STORE.get(workload).data.inputs[:10]
    with torch.inference_mode():
        logits, _ = with_class_prior()(torch.from_numpy(inputs))
    with load_predictor(artifact.path, workload.python_path) as predictor:
        predicted = predictor.predict(inputs)
    assert isinstance(predicted, tuple) and len(predicted) == 2 and predicted[1] is None
    np.testing.assert_allclose(predicted[0], logits.numpy(), rtol=1e-4, atol=1e-5)


def test_of_a_batch_of_one_a_torch_output_without_the_batch_first_is_judged_whole(
    tmp_path: Path,
) -> None:
    """[T, 1, C] (the batch on its second axis) belongs to the one sample: judged whole, and
    predict stacks it per sample, [N, T, 1, C]."""
    workload = several_outputs("sequence_of_one").model_copy(
        update={"model": ModelRef(entry_point=f"{SEVERAL}:sequence_of_one", fixed_batch=1)}
    )
    config: dict[str, ConfigValue] = {"runtime.engine": "torch_eager", "batch.size": 1}
    result = run_trial(spec_for(workload, config), STORE)
    assert result.status == "ok", result.reason
    judged_by = result.metrics.accuracy_judged_by or ""  # type: ignore[union-attr]
    assert "'sequence' (512 values a sample)" in judged_by and "left out" not in judged_by
    artifact = export_artifact(spec_for(workload, config), str(tmp_path), STORE)
    inputs = STORE.get(workload).data.inputs[:3]
    with load_predictor(artifact.path, workload.python_path) as predictor:
        predicted = predictor.predict(inputs)
    assert predicted["logits"].shape == (3, 10) and predicted["sequence"].shape == (3, 16, 1, 32)
    with torch.inference_mode():
        second = sequence_of_one()(torch.from_numpy(inputs[1:2]))["sequence"]
    np.testing.assert_allclose(predicted["sequence"][1], second.numpy(), rtol=1e-4, atol=1e-5)


def test_a_torch_model_with_no_output_to_judge_is_refused() -> None:
    """Without a fixed batch of one, a module whose only output has no batch axis."""
    prior_alone = ModelRef(entry_point=f"{SEVERAL}:class_prior_alone")
    with pytest.raises(RequestError) as caught:
        inspect_workload(digits_workload(model=prior_alone), WorkloadCache())
    assert caught.value.field == "model.entry_point"
    assert re.search(r"'output' is float32 \[10\] for a batch of \d+", caught.value.rule)
