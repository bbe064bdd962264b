import json
from collections.abc import Iterator

import pytest

from autotune.core.contract import MAX_SECONDS
from autotune.core.errors import RequestError
from autotune.core.metrics import (
    ACCURACY,
    BOUNDS,
    COST,
    LATENCY_P50,
    LATENCY_P95,
    METRICS,
    OBJECTIVES,
    SELECTIONS,
    THROUGHPUT,
    Bound,
    BoundKind,
    Direction,
    Metric,
    Study,
    constraint_violations,
    derived,
    measured_only,
    register_bound,
    register_metric,
    register_objective,
    reported_metrics,
    selection_objective,
)
from autotune.requests.request import (
    Constraints,
    TuningRequest,
    build_constraints_model,
    parse_request,
)

QUEUE_WAIT = Metric(
    "queue_wait_ms",
    "ms",
    Direction.MINIMIZE,
    "p95 of per-call waits",
    "time a call waits for a free worker",
    "queue wait",
)


@pytest.fixture
def queue_wait() -> Iterator[Metric]:
    """A metric registered for one test, with an objective and a bound on it."""
    register_metric(QUEUE_WAIT)
    register_objective("queue_wait", QUEUE_WAIT, selection="lowest_queue_wait")
    register_bound(Bound("max_queue_wait_ms", QUEUE_WAIT, BoundKind.UPPER, 1e3, "per call"))
    try:
        yield QUEUE_WAIT
    finally:
        BOUNDS.unregister("max_queue_wait_ms")
        OBJECTIVES.unregister("queue_wait")
        SELECTIONS.unregister("lowest_queue_wait")
        METRICS.unregister(QUEUE_WAIT.name)


def test_a_name_registers_once() -> None:
    with pytest.raises(ValueError, match="metric 'accuracy' is already registered"):
        register_metric(ACCURACY)
    with pytest.raises(ValueError, match="objective 'latency' is already registered"):
        register_objective("latency", LATENCY_P50, selection="lowest_p50")
    with pytest.raises(ValueError, match="bound 'max_latency_p95_ms' is already registered"):
        register_bound(Bound("max_latency_p95_ms", LATENCY_P95, BoundKind.UPPER, 1.0, "again"))


def test_objectives_and_bounds_need_a_registered_metric() -> None:
    with pytest.raises(ValueError, match="must be registered first"):
        register_objective("queue_wait", QUEUE_WAIT, selection="lowest_queue_wait")
    with pytest.raises(ValueError, match="must be registered first"):
        register_bound(Bound("max_queue_wait_ms", QUEUE_WAIT, BoundKind.UPPER, 1.0, "per call"))
    assert "queue_wait" not in OBJECTIVES and "max_queue_wait_ms" not in BOUNDS


def test_every_objective_and_bound_names_a_registered_metric() -> None:
    for metric in [*OBJECTIVES.values(), *(b.metric for b in BOUNDS.values())]:
        assert METRICS[metric.name] is metric


def test_the_request_constraints_are_the_bounds() -> None:
    assert list(Constraints.model_fields) == list(BOUNDS)
    assert BOUNDS["max_latency_p95_ms"].limit == MAX_SECONDS * 1000.0


def test_violations_of_an_upper_and_a_lower_bound() -> None:
    bounds = {"max_latency_p95_ms": 5.0, "min_throughput_per_s": 100.0}
    met = {LATENCY_P95.name: 4.0, THROUGHPUT.name: 150.0}
    missed = {LATENCY_P95.name: 6.5, THROUGHPUT.name: 80.0}
    assert constraint_violations(bounds, met) == {
        "max_latency_p95_ms": -1.0,
        "min_throughput_per_s": -50.0,
    }
    assert constraint_violations(bounds, missed) == {
        "max_latency_p95_ms": 1.5,
        "min_throughput_per_s": 20.0,
    }
    on_the_bound = {LATENCY_P95.name: 5.0, THROUGHPUT.name: 100.0}
    assert all(v == 0 for v in constraint_violations(bounds, on_the_bound).values())
    assert constraint_violations({}, met) == {}


def test_accuracy_drop_is_added_against_the_baseline_and_stripped_again() -> None:
    measured = {ACCURACY.name: 0.9, LATENCY_P95.name: 2.0}
    told = derived(measured, Study(baseline_accuracy=0.95))
    assert told["accuracy_drop"] == pytest.approx(0.05)
    assert measured_only(told) == measured
    assert derived(measured, Study(baseline_accuracy=0.9))["accuracy_drop"] == 0.0


def test_reported_metrics_keep_the_tuned_file_order() -> None:
    assert reported_metrics() == (
        "accuracy",
        "accuracy_judged_by",
        "top1_agreement",
        "accuracy_drop",
        "latency_p50_ms",
        "latency_p90_ms",
        "latency_p95_ms",
        "latency_p99_ms",
        "latency_cv",
        "throughput_per_s",
        "latency_per_sample_ms",
        "energy_per_sample_j",
        "energy_source",
        "peak_memory_mb",
        "cost_per_million_samples",
        "cpu_time_per_sample_ms",
    )


def test_values_are_shown_in_their_format_and_unit() -> None:
    assert LATENCY_P95.with_unit(1.23456) == "1.235 ms"
    assert THROUGHPUT.with_unit(1234.5) == "1234 samples/s"
    assert ACCURACY.with_unit(0.98765) == "0.9877"
    assert LATENCY_P95.axis_label == "latency_p95_ms (ms)"


def test_a_registered_objective_is_one_registration_away(queue_wait: Metric) -> None:
    request = parse_request(
        {"name": "x", "objectives": ["accuracy", "queue_wait"]}
        | {"selection": {"strategy": "lowest_queue_wait"}},
        replay=True,
    )
    assert [OBJECTIVES[o] for o in request.objectives] == [ACCURACY, queue_wait]
    assert selection_objective(request.selection.strategy) is queue_wait
    schema = TuningRequest.model_json_schema()
    assert "queue_wait" in schema["properties"]["objectives"]["items"]["enum"]
    assert "lowest_queue_wait" in json.dumps(schema["$defs"]["Selection"])
    assert "queue_wait_ms" in reported_metrics()


def test_every_registered_metric_says_how_rounds_give_it_and_what_it_needs() -> None:
    """A walk of the registries: an objective is either read from head-to-head rounds or
    depends on the variant alone; one that favours an end of the batch range says which; what
    a derived metric needs is a field of the request; every objective has its selection."""
    for name, metric in OBJECTIVES.items():
        assert (metric.round_reader is None) == metric.from_variant, name
        assert metric.lean is not None or metric.from_variant, name
        assert name in SELECTIONS.values(), name
    for metric in METRICS.values():
        if metric.needs is not None:
            section, field = metric.needs.split(".")
            assert field in TuningRequest.model_fields[section].annotation.model_fields  # type: ignore[union-attr]
            assert metric.derive is not None, metric.name


def test_the_cost_per_million_samples_derives_from_throughput_at_the_request_s_price() -> None:
    measured = {ACCURACY.name: 0.9, THROUGHPUT.name: 500.0}
    assert COST.name not in derived(measured, Study(baseline_accuracy=0.9))
    priced = derived(measured, Study(baseline_accuracy=0.9, price_per_hour=3.6))
    # 1e6 samples at 500/s take 2,000 s = 5/9 h; at 3.6 an hour that is 2.0.
    assert priced[COST.name] == pytest.approx(2.0)
    assert priced["latency_per_sample_ms"] == pytest.approx(2.0)


def test_cost_as_objective_selection_or_bound_needs_a_price() -> None:
    for patch, where in [
        ({"objectives": ["accuracy", "cost"]}, "objectives: cost"),
        ({"selection": {"strategy": "lowest_cost"}}, "selection: lowest_cost"),
        ({"constraints": {"max_cost_per_million_samples": 1.0}}, "max_cost_per_million_samples"),
    ]:
        with pytest.raises(RequestError) as caught:
            parse_request({"name": "x", **patch}, replay=True)
        assert where in caught.value.rule and "cost.price_per_hour" in caught.value.rule
    request = parse_request(
        {"name": "x", "objectives": ["accuracy", "cost"], "cost": {"price_per_hour": 2.5}},
        replay=True,
    )
    assert [OBJECTIVES[o] for o in request.objectives] == [ACCURACY, COST]


def test_cost_and_throughput_are_one_measure() -> None:
    with pytest.raises(RequestError) as caught:
        parse_request(
            {"name": "x", "objectives": ["throughput", "cost"], "cost": {"price_per_hour": 1}},
            replay=True,
        )
    assert caught.value.field == "objectives"
    assert "one measure" in caught.value.rule


def test_an_unregistered_objective_is_refused() -> None:
    with pytest.raises(RequestError) as caught:
        parse_request({"name": "x", "objectives": ["queue_wait"]}, replay=True)
    assert caught.value.field == "objectives.0"
    assert "'latency_per_sample'" in caught.value.rule
    assert caught.value.value == "queue_wait"


def test_a_registered_bound_is_a_field_of_the_rebuilt_constraints(queue_wait: Metric) -> None:
    constraints = build_constraints_model()
    assert constraints.model_validate({"max_queue_wait_ms": 20}).model_dump(exclude_none=True) == {
        "max_queue_wait_ms": 20.0
    }
    with pytest.raises(ValueError, match="less than or equal to 1000"):
        constraints.model_validate({"max_queue_wait_ms": 2e3})
    with pytest.raises(ValueError, match="greater than 0"):
        constraints.model_validate({"max_queue_wait_ms": 0})
    with pytest.raises(ValueError, match="Extra inputs"):
        constraints.model_validate({"max_queue_wait": 20})
