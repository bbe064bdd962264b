from pathlib import Path

import pytest

from autotune.errors import RequestError
from autotune.request import load_request, parse_request

VALID = {
    "name": "demo",
    "model": {"entry_point": "experiments.digits.model:build_model"},
    "data": {"entry_point": "experiments.digits.model:eval_data"},
}


def test_defaults_fill_a_minimal_request() -> None:
    request = parse_request(VALID)
    assert request.objectives == ["accuracy", "latency", "energy"]
    assert request.metric.kind == "accuracy"
    assert request.storage.startswith("sqlite:///")
    assert request.budget.trials == 30


@pytest.mark.parametrize(
    ("patch", "field", "rule_fragment"),
    [
        ({"modle": {}}, "modle", "Extra inputs"),
        ({"constraints": {"max_latency_p95_ms": -1}}, "constraints.max_latency_p95_ms", "greater"),
        ({"constraints": {"max_accuracy_drop": -0.1}}, "constraints.max_accuracy_drop", "greater"),
        ({"constraints": {"max_latncy": 3}}, "constraints.max_latncy", "Extra inputs"),
        ({"objectives": ["accuracy", "speed"]}, "objectives.1", "'latency_per_sample'"),
        ({"objectives": []}, "objectives", "at least 1"),
        ({"objectives": ["latency", "latency"]}, "objectives", "must not repeat"),
        ({"objectives": ["throughput", "latency_per_sample"]}, "objectives", "one measure"),
        ({"selection": {"strategy": "fastest"}}, "selection.strategy", "'highest_throughput'"),
        (
            {"selection": {"strategy": "weighted", "weights": {"speed": 1.0}}},
            "selection.weights.speed.[key]",
            "'throughput'",
        ),
        (
            {"constraints": {"max_latency_per_sample_ms": 0}},
            "constraints.max_latency_per_sample_ms",
            "greater",
        ),
        ({"model": {"entry_point": "not an entry point"}}, "model.entry_point", "package.module"),
        ({"model": {}}, "model", "exactly one"),
        ({"model": {"onnx": "m.onnx", "registered": "models:/m/1"}}, "model", "exactly one"),
        ({"model": {"onnx": "m.onnx", "weights": "w.safetensors"}}, "model", "'entry_point'"),
        ({"model": {"registered": "models:/m"}}, "model.registered", "models:/NAME/VERSION"),
        ({"model": {"registered": "models:/m/v1"}}, "model.registered", "models:/NAME@ALIAS"),
        ({"model": {"registered": "runs:/abc/m"}}, "model.registered", "models:/NAME/VERSION"),
        ({"budget": {"trials": 0}}, "budget.trials", "greater"),
        ({"selection": {"strategy": "weighted"}}, "selection", "weights"),
        ({"metric": {"kind": "custom"}}, "metric", "entry_point"),
        ({"measurement": {"min_iters": 100, "max_iters": 10}}, "measurement", "max_iters"),
    ],
)
def test_bad_input_names_field_rule_and_value(patch: dict, field: str, rule_fragment: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_request({**VALID, **patch})
    assert info.value.field == field
    assert rule_fragment in info.value.rule


def test_both_views_of_latency_are_accepted() -> None:
    request = parse_request(
        {
            **VALID,
            "objectives": ["accuracy", "latency", "throughput"],
            "constraints": {"max_latency_p95_ms": 5.0, "max_latency_per_sample_ms": 0.5},
            "selection": {
                "strategy": "weighted",
                "weights": {"latency_per_sample": 1.0, "throughput": 0.5, "latency": 0.1},
            },
        }
    )
    assert request.objectives == ["accuracy", "latency", "throughput"]
    assert request.constraints.max_latency_per_sample_ms == 0.5
    assert request.selection.weights == {
        "latency_per_sample": 1.0,
        "throughput": 0.5,
        "latency": 0.1,
    }
    request = parse_request({**VALID, "selection": {"strategy": "highest_throughput"}})
    assert request.selection.strategy == "highest_throughput"


def test_load_request_takes_name_from_file_and_applies_overrides(tmp_path: Path) -> None:
    path = tmp_path / "my-model.yaml"
    path.write_text("model: {onnx: m.onnx}\ndata: {npz: d.npz}\nbudget: {trials: 5}\n")
    request = load_request(path, {"budget.trials": 9, "tracking.uri": "sqlite:///x.db"})
    assert request.name == "my-model"
    assert request.budget.trials == 9
    assert request.tracking.uri == "sqlite:///x.db"
    workload = request.workload(tmp_path)
    assert workload.model.onnx == str(tmp_path / "m.onnx")
    assert workload.data.npz == str(tmp_path / "d.npz")


def test_workload_resolves_weights_and_refuses_an_unresolved_registered_model(
    tmp_path: Path,
) -> None:
    model = {"entry_point": "experiments.digits.model:architecture", "weights": "w.safetensors"}
    workload = parse_request({**VALID, "model": model}).workload(tmp_path)
    assert workload.model.weights == str(tmp_path / "w.safetensors")
    assert workload.model.entry_point == model["entry_point"]
    for uri in ("models:/digits/3", "models:/digits@tuned"):
        request = parse_request({**VALID, "model": {"registered": uri}})
        with pytest.raises(RequestError) as info:
            request.workload(tmp_path)
        assert (info.value.field, info.value.value) == ("model.registered", uri)


@pytest.mark.parametrize(
    ("text", "rule_fragment"),
    [("model: [unclosed", "valid YAML"), ("- a\n- b\n", "mapping")],
)
def test_unreadable_request_file(tmp_path: Path, text: str, rule_fragment: str) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(RequestError) as info:
        load_request(path)
    assert rule_fragment in info.value.rule


def test_missing_request_file(tmp_path: Path) -> None:
    with pytest.raises(RequestError, match="existing YAML file"):
        load_request(tmp_path / "absent.yaml")
