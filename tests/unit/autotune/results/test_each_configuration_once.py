"""The one definition of the trials a front is made of: the measured trials, each
configuration once (`each_configuration_once`), a configuration named whatever its spelling
(`configuration_key`)."""

from __future__ import annotations

from typing import Any

from autotune.core.contract import MeasurementSettings, Provenance
from autotune.results.records import (
    TrialMarks,
    TrialRecord,
    configuration_key,
    each_configuration_once,
)

ORT = {"runtime.engine": "onnxruntime", "batch.size": 1, "runtime.threads": 1}
QUIET = MeasurementSettings()


def record(
    number: int,
    config: dict[str, Any],
    measured: bool = True,
    reused_from: str | None = None,
    settings: MeasurementSettings = QUIET,
    baseline: bool = False,
) -> TrialRecord:
    provenance = Provenance(model_sha256="0" * 64, host="h", software={}, measurement=settings)
    return TrialRecord(
        number=number,
        state="complete",
        config=config,
        marks=TrialMarks(baseline=baseline),
        status="ok",
        metrics={"accuracy": 0.9, "latency_p95_ms": 1.0},
        provenance=provenance,
        measured=measured,
        reused_from=reused_from,
    )


def numbers(records: list[TrialRecord]) -> list[int]:
    return [r.number for r in each_configuration_once(records)]


def test_a_repeat_answered_from_a_trial_is_not_kept_beside_it() -> None:
    original = record(16, ORT)
    repeat = record(31, ORT, measured=False, reused_from="digits-cnn#16")
    other = record(18, {**ORT, "batch.size": 8})
    assert numbers([original, other, repeat]) == [16, 18]
    assert numbers([repeat, other, original]) == [16, 18]  # whatever the order read


def test_the_trial_that_measured_wins_over_an_earlier_unmeasured_answer() -> None:
    answered = record(3, ORT, measured=False, reused_from="earlier-study#7")
    assert numbers([answered]) == [3]  # a warm start's answer is this study's only record
    assert numbers([answered, record(9, ORT)]) == [9]


def test_two_measurements_of_one_configuration_keep_the_earliest_and_the_baseline_first() -> None:
    assert numbers([record(12, ORT), record(5, ORT)]) == [5]
    assert numbers([record(2, ORT), record(4, ORT, baseline=True)]) == [4]


def test_a_configuration_measured_with_other_settings_is_another_measurement() -> None:
    longer = MeasurementSettings(min_seconds=2.0, max_seconds=10.0)
    assert numbers([record(1, ORT), record(2, ORT, settings=longer)]) == [1, 2]
    # How long the study waits for quiet decides when it measures, not what.
    warned = MeasurementSettings(contention="warn")
    assert numbers([record(1, ORT), record(2, ORT, settings=warned)]) == [1]


def test_trials_without_metrics_are_not_among_them() -> None:
    failed = record(1, ORT).model_copy(update={"state": "pruned", "status": "oom"})
    assert numbers([failed]) == []


def test_a_configuration_is_named_whatever_its_spelling() -> None:
    spelled_out = {**ORT, "runtime.graph_opt": "all", "precision.mode": "fp32"}
    assert configuration_key(ORT) == configuration_key(spelled_out)
    # An option of another engine does not apply; a pruning ratio without a method neither.
    openvino_hint = {**ORT, "runtime.ov_performance_hint": "latency"}
    assert configuration_key(ORT) == configuration_key(openvino_hint)
    assert configuration_key(ORT) == configuration_key({**ORT, "prune.ratio": 0.3})
    assert configuration_key(ORT) != configuration_key({**ORT, "batch.size": 8})
    assert configuration_key(ORT) != configuration_key({**ORT, "runtime.graph_opt": "basic"})
