"""The map of measured figures on `TrialMetrics` and `RoundFigures`: checked against the metric
registry, dumped beside the fields as a trial record holds every metric, and read back."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from autotune.core.contract import RoundFigures, TrialMetrics, TrialResult
from autotune.core.errors import RequestError
from autotune.core.measured.cpu_time import CPU_TIME_PER_SAMPLE
from autotune.core.metrics import (
    BOUNDS,
    METRICS,
    constraint_violations,
    mapped_metrics,
)
from autotune.results.records import TrialRecord
from tests.coordinator_support import table_metrics

CPU = CPU_TIME_PER_SAMPLE.name


def round_figures(**fields: Any) -> RoundFigures:
    return RoundFigures(
        calls=5,
        latency_p50_ms=1.0,
        latency_p95_ms=2.0,
        throughput_per_s=500.0,
        energy_per_sample_j=0.01,
        **fields,
    )


def test_cpu_time_is_a_registered_measured_metric_with_its_meter() -> None:
    assert mapped_metrics() == {CPU: CPU_TIME_PER_SAMPLE}
    assert METRICS[CPU].meter == "cpu_time"
    assert BOUNDS["max_cpu_time_per_sample_ms"].metric is CPU_TIME_PER_SAMPLE


def test_a_fixed_field_s_metric_names_no_meter() -> None:
    assert METRICS["energy_per_sample_j"].meter is None
    assert "energy_per_sample_j" not in mapped_metrics()


@pytest.mark.parametrize("model", ["trial", "round"])
def test_an_unregistered_key_is_refused_naming_the_field_the_rule_and_the_value(
    model: str,
) -> None:
    with pytest.raises(ValidationError) as caught:
        if model == "trial":
            table_metrics({}).model_validate(
                {**table_metrics({}).model_dump(), "measured": {"bandwidth_gb_s": 3.0}}
            )
        else:
            round_figures(measured={"bandwidth_gb_s": 3.0})
    error = caught.value.errors()[0]
    assert error["loc"][:2] == ("measured", "bandwidth_gb_s")
    assert "must be a measured metric of the registry that names its figure meter" in error["msg"]
    assert CPU in error["msg"]
    assert error["input"] == "bandwidth_gb_s"


def test_a_metric_of_a_fixed_field_is_refused_in_the_map() -> None:
    with pytest.raises(ValidationError, match="must be a measured metric of the registry"):
        round_figures(measured={"latency_p95_ms": 2.0})


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_a_measured_value_must_be_finite(value: float) -> None:
    with pytest.raises(ValidationError) as caught:
        round_figures(measured={CPU: value})
    assert caught.value.errors()[0]["loc"] == ("measured", CPU)
    assert "finite" in caught.value.errors()[0]["msg"]


def test_a_boolean_is_not_a_measured_value() -> None:
    with pytest.raises(ValidationError, match="must be a number, not a boolean"):
        round_figures(measured={CPU: True})


def test_a_dump_holds_the_map_s_figures_beside_the_fields_and_reads_back() -> None:
    metrics = table_metrics({}).model_copy(update={"measured": {CPU: 0.25}})
    dumped = metrics.model_dump()
    assert dumped[CPU] == 0.25
    assert "measured" not in dumped
    assert TrialMetrics.model_validate(dumped) == metrics
    assert TrialMetrics.model_validate_json(metrics.model_dump_json()) == metrics
    figures = round_figures(measured={CPU: 0.25})
    assert RoundFigures.model_validate_json(figures.model_dump_json()) == figures


def test_a_trial_result_round_trips_its_measured_figures() -> None:
    metrics = table_metrics({}).model_copy(update={"measured": {CPU: 0.5}})
    result = TrialResult(
        study="s",
        trial_number=1,
        attempt=0,
        status="ok",
        variant_key="v",
        metrics=metrics,
        duration_s=1.0,
    )
    again = TrialResult.model_validate_json(result.model_dump_json())
    assert again.metrics is not None
    assert again.metrics.measured == {CPU: 0.5}


def test_a_record_without_the_map_loads_with_an_empty_map() -> None:
    dumped = table_metrics({}).model_dump()
    assert TrialMetrics.model_validate(dumped).measured == {}
    assert round_figures().measured == {}
    assert "measured" not in round_figures().model_dump()


def test_a_figure_is_read_from_a_field_or_the_map() -> None:
    figures = round_figures(measured={CPU: 0.3})
    assert figures.figure("latency_p95_ms") == 2.0
    assert figures.figure(CPU) == 0.3
    assert math.isnan(round_figures().figure(CPU))
    with pytest.raises(ValueError, match="must be a measured metric"):
        figures.figure("bandwidth_gb_s")


def test_the_round_reader_of_a_measured_metric_reads_the_map() -> None:
    assert CPU_TIME_PER_SAMPLE.round_reader is not None
    assert CPU_TIME_PER_SAMPLE.round_reader(round_figures(measured={CPU: 0.7})) == 0.7


def test_a_request_bounds_a_measured_metric_as_any_other() -> None:
    record = table_metrics({}).model_copy(update={"measured": {CPU: 0.4}}).model_dump()
    violations = constraint_violations({"max_cpu_time_per_sample_ms": 0.5}, record)
    assert violations == {"max_cpu_time_per_sample_ms": pytest.approx(-0.1)}
    violated = constraint_violations({"max_cpu_time_per_sample_ms": 0.3}, record)
    assert violated["max_cpu_time_per_sample_ms"] == pytest.approx(0.1)


def test_a_bound_on_a_figure_the_trial_lacks_is_a_request_error_naming_it() -> None:
    record = table_metrics({}).model_dump()
    with pytest.raises(RequestError) as refused:
        constraint_violations({"max_cpu_time_per_sample_ms": 0.5}, record)
    assert refused.value.field == "constraints.max_cpu_time_per_sample_ms"
    assert CPU in str(refused.value)


def test_a_stored_trial_gives_back_its_map_s_figures_as_measured() -> None:
    figures = table_metrics({}).model_copy(update={"measured": {CPU: 0.4}})
    record = TrialRecord(number=3, state="complete", config={}, metrics=figures.model_dump())
    assert record.measured_metrics() == figures
