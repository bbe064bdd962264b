from pathlib import Path
from typing import Any

import pytest

from autotune.core.errors import RequestError
from autotune.requests.request import load_request, parse_request

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
    ("patch", "field", "meant"),
    [
        (
            {"constraints": {"max_acuracy_drop": 0.01}},
            "constraints.max_acuracy_drop",
            "max_accuracy_drop",
        ),
        ({"constraints": {"max_latncy": 3}}, "constraints.max_latncy", "max_latency_p95_ms"),
        ({"modle": {}}, "modle", "model"),
        ({"model": {"entry_pont": "a.b:c"}}, "model.entry_pont", "entry_point"),
        ({"budget": {"trails": 3}}, "budget.trails", "trials"),
        ({"measurement": {"min_iter": 3}}, "measurement.min_iter", "min_iters"),
    ],
)
def test_an_unknown_key_is_answered_with_the_closest_key_valid_there(
    patch: dict[str, Any], field: str, meant: str
) -> None:
    with pytest.raises(RequestError) as info:
        parse_request({**VALID, **patch})
    assert info.value.field == field
    assert info.value.rule == f"Extra inputs are not permitted; did you mean {meant}?"


def test_an_unknown_key_like_none_valid_there_gets_no_guess() -> None:
    with pytest.raises(RequestError) as info:
        parse_request({**VALID, "colour": "red"})
    assert info.value.rule == "Extra inputs are not permitted"


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
        ({"model": {"hf": "dir"}}, "model", "'task' is required with 'hf'"),
        ({"model": {"hf": "dir", "task": "translation"}}, "model.task", "'feature-extraction'"),
        ({"model": {"onnx": "m.onnx", "task": "text-classification"}}, "model", "only with it"),
        ({"data": {"text": "t.txt", "npz": "d.npz"}}, "data", "exactly one"),
        ({"data": {"npz": "d.npz", "sequence_length": 32}}, "data", "together with 'text'"),
        ({"data": {"npz": "d.npz", "labels": "l.txt"}}, "data", "'text' or 'images'"),
        ({"data": {"text": "t.txt", "sequence_length": 0}}, "data.sequence_length", "greater"),
        ({"budget": {"trials": True}}, "budget.trials", "must be a number, not a boolean"),
        ({"measurement": {"min_iters": False}}, "measurement.min_iters", "not a boolean"),
        ({"validation": {"rounds": True}}, "validation.rounds", "not a boolean"),
        (
            {"constraints": {"max_latency_p95_ms": float("nan")}},
            "constraints.max_latency_p95_ms",
            "finite number",
        ),
        ({"cost": {"price_per_hour": float("inf")}}, "cost.price_per_hour", "finite number"),
        ({"cluster": {"node_wait_s": -1}}, "cluster.node_wait_s", "greater than or equal"),
        ({"cluster": {"node_wait": 60}}, "cluster.node_wait", "Extra inputs"),
        ({"model": {"onnx": "m.onnx", "fixed_batch": 0}}, "model.fixed_batch", "greater"),
        ({"model": {"onnx": "m.onnx", "fixed_batch": True}}, "model.fixed_batch", "boolean"),
    ],
)
def test_bad_input_names_field_rule_and_value(patch: dict, field: str, rule_fragment: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_request({**VALID, **patch})
    assert info.value.field == field
    assert rule_fragment in info.value.rule


# Every number of a request has a finite maximum, named in the error.
TOO_LARGE = [
    ({"budget": {"trials": 3_000_000_000}}, "budget.trials", 100000),
    ({"budget": {"trials": 10**18}}, "budget.trials", 100000),
    ({"budget": {"timeout_s": 1e18}}, "budget.timeout_s", 604800),
    ({"budget": {"trial_timeout_s": 1e9}}, "budget.trial_timeout_s", 604800),
    ({"constraints": {"max_accuracy_drop": 1e7}}, "constraints.max_accuracy_drop", 1e6),
    ({"constraints": {"max_latency_p95_ms": 1e300}}, "constraints.max_latency_p95_ms", 6.048e8),
    (
        {"constraints": {"max_latency_per_sample_ms": 1e10}},
        "constraints.max_latency_per_sample_ms",
        6.048e8,
    ),
    ({"constraints": {"max_energy_per_sample_j": 1e7}}, "constraints.max_energy_per_sample_j", 1e6),
    ({"constraints": {"max_memory_mb": 1e10}}, "constraints.max_memory_mb", 1e9),
    ({"constraints": {"min_throughput_per_s": 1e13}}, "constraints.min_throughput_per_s", 1e12),
    (
        {"selection": {"strategy": "weighted", "weights": {"latency": 1e7}}},
        "selection.weights.latency",
        1e6,
    ),
    ({"validation": {"neighbours": 101}}, "validation.neighbours", 100),
    ({"validation": {"rounds": 1001}}, "validation.rounds", 1000),
    ({"validation": {"round_seconds": 3601}}, "validation.round_seconds", 3600),
    ({"cost": {"price_per_hour": 1e7}}, "cost.price_per_hour", 1e6),
    ({"cost": {"grid_gco2_per_kwh": 1e5}}, "cost.grid_gco2_per_kwh", 1e4),
    ({"measurement": {"warmup_iters": 10**8}}, "measurement.warmup_iters", 10**7),
    ({"measurement": {"min_iters": 10**8}}, "measurement.min_iters", 10**7),
    ({"measurement": {"max_iters": 10**8}}, "measurement.max_iters", 10**7),
    ({"measurement": {"min_seconds": 1e6}}, "measurement.min_seconds", 604800),
    ({"measurement": {"max_seconds": 1e6}}, "measurement.max_seconds", 604800),
    ({"measurement": {"cpu_watts_per_core": 1e4}}, "measurement.cpu_watts_per_core", 1000),
    ({"measurement": {"settle_tolerance": 2.0}}, "measurement.settle_tolerance", 1),
    ({"measurement": {"energy_window_s": 1e6}}, "measurement.energy_window_s", 604800),
    (
        {"measurement": {"contention_max_wait_s": 1e6}},
        "measurement.contention_max_wait_s",
        604800,
    ),
    ({"measurement": {"contention_threshold": 1.5}}, "measurement.contention_threshold", 1),
    ({"cluster": {"node_wait_s": 1e7}}, "cluster.node_wait_s", 604800),
    ({"model": {"onnx": "m.onnx", "fixed_batch": 65537}}, "model.fixed_batch", 65536),
]


@pytest.mark.parametrize(("patch", "field", "maximum"), TOO_LARGE)
def test_every_number_has_a_maximum(patch: dict, field: str, maximum: float) -> None:
    with pytest.raises(RequestError) as info:
        parse_request({**VALID, **patch})
    assert info.value.field == field
    rule, _, bound = info.value.rule.rpartition(" ")
    assert (rule, float(bound)) == ("Input should be less than or equal to", maximum)
    leaf = patch
    for key in field.split("."):
        leaf = leaf[key]
    assert info.value.value == leaf


def test_every_number_of_the_request_schema_has_a_maximum() -> None:
    """A numeric field added without a maximum fails here."""
    from autotune.requests.request import TuningRequest

    schema = TuningRequest.model_json_schema()
    unbounded = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("integer", "number") and "maximum" not in node:
                unbounded.append(path)
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{path}[{index}]")

    walk(schema, "TuningRequest")
    assert unbounded == []


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
    ("task", "labels", "metric"),
    [
        ("feature-extraction", None, "fidelity"),
        ("text-classification", "labels.txt", "accuracy"),
        ("text-classification", None, "agreement"),
        ("image-classification", None, "agreement"),
    ],
)
def test_a_hugging_face_model_is_judged_as_its_task_suggests(
    task: str, labels: str | None, metric: str
) -> None:
    data = {"text": "lines.txt", "labels": labels} if labels else {"text": "lines.txt"}
    request = parse_request({**VALID, "model": {"hf": "model", "task": task}, "data": data})
    assert request.metric.kind == metric
    given = parse_request({**VALID, "model": {"hf": "m", "task": task}, "data": data,
                           "metric": {"kind": "fidelity"}})  # fmt: skip
    assert given.metric.kind == "fidelity"


def test_workload_resolves_hf_directories_and_text_data(tmp_path: Path) -> None:
    request = parse_request(
        {
            **VALID,
            "model": {"hf": "models/minilm", "task": "feature-extraction"},
            "data": {"text": "lines.txt", "labels": "/abs/labels.txt", "sequence_length": 32},
        }
    )
    workload = request.workload(tmp_path)
    assert workload.model.hf == str(tmp_path / "models/minilm")
    assert workload.model.task == "feature-extraction"
    assert (workload.data.text, workload.data.labels) == (
        str(tmp_path / "lines.txt"),
        "/abs/labels.txt",
    )
    assert workload.data.sequence_length == 32


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
