"""What the coordinator relies on from every `Tracker`: the null tracker and MLflow's.

Each test runs against each implementation; where one can show what it recorded (MLflow's
store), the case says how, and the test checks that too. MLflow-only behaviour (the
background writer, rounds, artifacts) is tested in test_tracking.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from autotune.core.metrics import OBJECTIVES
from autotune.results.records import Candidate
from autotune.tracking import (
    PARENT_TAG,
    TRIAL_TAG,
    MlflowTracker,
    NullTracker,
    Tracker,
    TrackerClosed,
)

STUDY = "conformance"
METRIC_NAMES = (OBJECTIVES["latency"].name, OBJECTIVES["accuracy"].name)


@dataclass
class TrackerCase:
    tracker: Tracker
    make_another: Callable[[], Tracker]
    # the trial number of each child run recorded, one entry per run; None: not observable
    recorded_trials: Callable[[], list[int]] | None
    # the parent's status in the store; None: not observable
    parent_status: Callable[[], str] | None


def null_case(request: pytest.FixtureRequest) -> TrackerCase:
    return TrackerCase(NullTracker(STUDY), lambda: NullTracker(STUDY), None, None)


def mlflow_case(request: pytest.FixtureRequest) -> TrackerCase:
    from mlflow.tracking import MlflowClient

    uri: str = request.getfixturevalue("mlflow_uri")
    tracker = MlflowTracker(uri, "conformance", STUDY)
    client = MlflowClient(uri)

    def recorded_trials() -> list[int]:
        runs = client.search_runs(
            [tracker.experiment_id],
            filter_string=f"tags.`{PARENT_TAG}` = '{tracker.parent_run_id}'",
        )
        return sorted(int(run.data.tags[TRIAL_TAG]) for run in runs)

    def parent_status() -> str:
        return str(client.get_run(tracker.parent_run_id).info.status)

    return TrackerCase(
        tracker,
        lambda: MlflowTracker(uri, "conformance", STUDY),
        recorded_trials,
        parent_status,
    )


@pytest.fixture(params=[null_case, mlflow_case], ids=["null", "mlflow"])
def case(request: pytest.FixtureRequest) -> Iterator[TrackerCase]:
    make_case: Callable[[pytest.FixtureRequest], TrackerCase] = request.param
    made = make_case(request)
    yield made
    if not made.tracker.closed:
        made.tracker.finish("KILLED")


def candidate(number: int, latency: float, accuracy: float) -> Candidate:
    metrics = dict(zip(METRIC_NAMES, (latency, accuracy), strict=True))
    return Candidate(number, {"batch_size": 2**number}, metrics, feasible=True)


def log_study_inputs(tracker: Tracker) -> None:
    tracker.log_study_inputs(
        params={"budget.trials": 3, "objectives": ["latency", "accuracy"]},
        documents={"request.yaml": {"model": "m"}, "hardware.json": {"cpus": 2}},
        tags={"energy_source": "pending"},
    )


def log_trials(tracker: Tracker) -> list[Candidate]:
    """Two measured trials and one that failed, as the coordinator tells them."""
    measured = [candidate(0, 4.0, 0.90), candidate(1, 2.0, 0.85)]
    for c in measured:
        figures: dict[str, Any] = {**c.metrics, "energy_source": "estimate"}
        tracker.log_trial(c.trial_number, 0, c.config, figures, {"contended": "false"})
    tracker.log_trial(2, 1, {"batch_size": 4}, None, {"failure": "out of memory"})
    return measured


def revalidation_report(finalists: list[Candidate]) -> dict[str, Any]:
    return {
        "comparisons": [
            [{"trial": c.trial_number, "revalidated": dict(c.metrics)} for c in finalists],
            [{"trial": 2, "revalidated": None}],
        ]
    }


def comparison_document(run_id: str) -> dict[str, Any]:
    """A re-tune's comparison with the previous choice, as `PreviousComparison` writes it."""
    return {
        "previous": {"study": "before", "run_id": run_id},
        "previous_trial": 1,
        "config_changes": {"batch_size": {"before": 2, "after": 1}},
        "same_configuration": False,
        "text": "2× lower p95 latency per call (95% CI 2–2×); 6 paired rounds, quiet",
        "ratios": {METRIC_NAMES[0]: {"ratio": 0.5, "ci_low": 0.45, "ci_high": 0.55}},
        "rounds": 6,
        "contended_rounds": 0,
        "conditions": "quiet",
        "resolved": True,
    }


def log_results(tracker: Tracker, candidates: list[Candidate], front: list[Candidate]) -> None:
    objectives = [OBJECTIVES["latency"], OBJECTIVES["accuracy"]]
    tracker.log_results(
        candidates, front, objectives, {"baseline.latency_p95_ms": 4.0}, {}, None, {"n": "2"}
    )


def test_every_call_of_a_study_in_the_coordinators_order(case: TrackerCase) -> None:
    tracker = case.tracker
    log_study_inputs(tracker)
    measured = log_trials(tracker)
    tracker.log_revalidation(revalidation_report(measured))
    log_results(tracker, measured, measured[1:])
    tracker.log_comparison(comparison_document("run-before"))
    tracker.finish("FINISHED")

    assert tracker.closed
    if case.recorded_trials is not None:
        assert case.recorded_trials() == [0, 1, 2]
    if case.parent_status is not None:
        assert case.parent_status() == "FINISHED"


def test_a_study_without_a_feasible_configuration_finishes_then_fails(
    case: TrackerCase,
) -> None:
    tracker = case.tracker
    log_study_inputs(tracker)
    measured = log_trials(tracker)
    log_results(tracker, measured, [])
    tracker.finish("FINISHED")
    tracker.finish("FAILED")

    assert tracker.closed
    if case.parent_status is not None:
        assert case.parent_status() == "FAILED"


def test_a_repeated_trial_number_is_recorded_once(case: TrackerCase) -> None:
    tracker = case.tracker
    tracker.log_trial(7, 0, {"batch_size": 1}, {METRIC_NAMES[0]: 1.0}, {})
    tracker.log_trial(7, 1, {"batch_size": 1}, {METRIC_NAMES[0]: 9.0}, {})
    tracker.flush()
    if case.recorded_trials is not None:
        assert case.recorded_trials() == [7]


def test_a_resumed_study_does_not_record_a_trial_again(case: TrackerCase) -> None:
    case.tracker.log_trial(0, 0, {"batch_size": 1}, {METRIC_NAMES[0]: 1.0}, {})
    case.tracker.finish("KILLED")

    resumed = case.make_another()
    assert resumed.parent_run_id == case.tracker.parent_run_id
    assert resumed.experiment_id == case.tracker.experiment_id
    resumed.log_trial(0, 1, {"batch_size": 1}, {METRIC_NAMES[0]: 2.0}, {})
    resumed.log_trial(1, 0, {"batch_size": 2}, {METRIC_NAMES[0]: 3.0}, {})
    resumed.finish("FINISHED")
    if case.recorded_trials is not None:
        assert case.recorded_trials() == [0, 1]


def test_finish_closes_the_tracker(case: TrackerCase) -> None:
    tracker = case.tracker
    tracker.log_trial(0, 0, {"batch_size": 1}, None, {})
    assert not tracker.closed
    tracker.finish("KILLED")

    assert tracker.closed
    with pytest.raises(TrackerClosed):
        tracker.log_trial(1, 0, {"batch_size": 1}, None, {})
    with pytest.raises(TrackerClosed):
        tracker.log_revalidation({"comparisons": []})


def test_flush_with_nothing_logged_returns(case: TrackerCase) -> None:
    case.tracker.flush()
    assert not case.tracker.closed
