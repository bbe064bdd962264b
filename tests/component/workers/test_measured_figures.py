"""The map of measured figures on the real digits workload: a trial and a head-to-head carry
what the figure meters measured, and a figure that is not a registered measured metric fails
the trial with its reason."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from autotune.core.contract import Entrant, HeadToHeadSpec, TrialResult
from autotune.core.measured.cpu_time import CPU_TIME_PER_SAMPLE
from autotune.core.metrics import METRICS, Direction, Metric
from tests.workers_support import FAST, digits_workload, spec_for
from workers import run_trial
from workers.cache import WorkloadCache
from workers.head_to_head import run_head_to_head
from workers.measuring.figure_meter import FIGURE_METERS, FigureRequest, Window

CPU = CPU_TIME_PER_SAMPLE.name
STORE = WorkloadCache(capacity=2)
ONE_THREAD = {"batch.size": 8, "runtime.threads": 1}


def test_a_trial_carries_its_cpu_time_per_sample() -> None:
    result = run_trial(spec_for(digits_workload(), ONE_THREAD), STORE)
    assert result.status == "ok", result.reason
    assert result.metrics is not None
    cpu_ms = result.metrics.measured[CPU]
    # One thread computes every sample: its CPU time is most of the wall time per sample, and
    # no thread of the process can spend more than every core's share of it.
    wall_ms = result.metrics.latency_per_sample_ms
    assert 0.2 * wall_ms < cpu_ms < (os.cpu_count() or 1) * 2 * wall_ms
    again = TrialResult.model_validate_json(result.model_dump_json())
    assert again.metrics is not None and again.metrics.measured == result.metrics.measured


def test_an_unregistered_figure_in_a_result_is_refused() -> None:
    result = run_trial(spec_for(digits_workload(), ONE_THREAD), STORE)
    assert result.metrics is not None
    dumped = result.model_dump()
    dumped["metrics"]["measured"] = {"bandwidth_gb_s": 3.0}
    with pytest.raises(ValidationError, match="must be a measured metric of the registry"):
        TrialResult.model_validate(dumped)


@pytest.fixture
def lying_meter() -> Iterator[None]:
    """A registered metric whose meter gives a figure under a name nothing registered."""
    metric = Metric("probe_per_s", "1/s", Direction.MAXIMIZE, "x", "x", "x", meter="liar")
    METRICS.register(metric.name, metric)

    class LyingMeter:
        def __init__(self, request: FigureRequest) -> None:
            pass

        def start(self) -> None:
            pass

        def stop(self, window: Window) -> dict[str, float]:
            return {"unregistered_per_s": 1.0}

    FIGURE_METERS.register("liar", LyingMeter)
    try:
        yield
    finally:
        METRICS.unregister(metric.name)
        FIGURE_METERS.unregister("liar")


@pytest.mark.usefixtures("lying_meter")
def test_a_meter_s_unregistered_figure_fails_the_trial_with_its_reason() -> None:
    result = run_trial(spec_for(digits_workload(), ONE_THREAD, 0.9), STORE)
    assert result.status == "error"
    assert result.reason is not None
    assert "measured.unregistered_per_s" in result.reason
    assert "must be a measured metric of the registry" in result.reason


def test_every_round_and_the_entrant_carry_the_measured_figures() -> None:
    rounds = 4
    spec = HeadToHeadSpec(
        study="test",
        workload=digits_workload(),
        entrants=[Entrant(trial_number=0, config=ONE_THREAD, known_accuracy=0.9)],
        rounds=rounds,
        round_seconds=0.05,
        measurement=FAST.model_copy(update={"contention": "warn"}),
    )
    (outcome,) = run_head_to_head(spec, STORE).entrants
    assert outcome.status == "ok" and len(outcome.rounds) == rounds
    per_round = [r.measured[CPU] for r in outcome.rounds]
    assert all(value > 0 for value in per_round)
    assert outcome.metrics is not None
    # Over every call of every round: between the rounds' lowest and highest.
    assert min(per_round) <= outcome.metrics.measured[CPU] <= max(per_round)
    assert CPU_TIME_PER_SAMPLE.round_reader is not None
    assert [CPU_TIME_PER_SAMPLE.round_reader(r) for r in outcome.rounds] == per_round
