"""Failed trials in front of the user: an error's reason names its type and the stage it was
raised in, on its trial's line; a deterministic error is not measured again at another batch
size; the search ends with a summary of its trials; more than half of them failed ends the
study with `MostTrialsFailed`."""

from __future__ import annotations

import traceback

import pytest

from autotune.core.contract import TrialResult, TrialSpec
from autotune.core.errors import MostTrialsFailed
from autotune.search.report import check_failures, study_summary, trial_text
from autotune.strategies.autotune import ERROR_LIKE
from tests.coordinator_support import (
    BASELINE,
    STUDY,
    WORKLOAD,
    ScriptedExecutor,
    make_rig,
)

ONNX = {**BASELINE, "runtime.engine": "onnxruntime", "runtime.graph_opt": "all"}
FIDELITY_ERROR = "IndexError in fidelity: index 1 is out of bounds for axis 0 with size 1"


def fidelity(outputs: list[float]) -> float:
    return outputs[1] - outputs[0]


def raised_in_fidelity() -> tuple[str, str]:
    """A worker's reason for an IndexError raised in `fidelity`, and its traceback."""
    try:
        fidelity([0.5])
    except IndexError as error:
        return f"IndexError: {error}", "".join(traceback.format_exception(error))
    raise AssertionError("fidelity did not raise")


class FailingEngine(ScriptedExecutor):
    """Every configuration of one engine raises in `fidelity`, as a worker reports it."""

    def __init__(self, engine: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.engine = engine

    def _result(self, spec: TrialSpec) -> TrialResult:
        if spec.config["runtime.engine"] != self.engine:
            return super()._result(spec)
        reason, story = raised_in_fidelity()
        failed = TrialResult.for_spec(spec, "error", reason, 0.7)
        return failed.model_copy(update={"traceback": story})


def test_a_repeated_error_is_told_once_and_skipped_after_naming_the_first() -> None:
    executor = FailingEngine("onnxruntime")
    rig = make_rig("autotune", executor=executor, trials=3)
    rig.queue({**ONNX, "batch.size": 8}, {**ONNX, "batch.size": 64})
    rig.search()
    lines = [trial_text(trial.shown) for trial in rig.observed.trials]
    baseline, first, second = sorted(rig.records(), key=lambda r: r.number)[:3]
    reason = "IndexError in fidelity: list index out of range"
    assert (first.status, first.reason) == ("error", reason)
    assert f"trial {first.number}: error: {reason}" in lines
    assert second.status == "skipped" and not second.measured
    assert second.reason == f"{ERROR_LIKE} #{first.number}, whose error would repeat: {reason}"
    assert [s["runtime.engine"] for s in executor.measured_configs()].count("onnxruntime") == 1


def test_the_search_ends_with_a_summary_and_fails_where_most_trials_failed() -> None:
    executor = FailingEngine("onnxruntime")
    rig = make_rig("random", executor=executor, trials=4)
    rig.queue(*({**ONNX, "batch.size": batch} for batch in (1, 8, 64)))
    with pytest.raises(MostTrialsFailed, match="3 of the 4 trials that ran failed"):
        rig.coordinator.run()
    reason = "IndexError in fidelity: list index out of range"
    assert f"study {STUDY}: 4 trials: 3 error ({reason}), 1 ok" in rig.notes


def test_half_of_the_trials_failed_is_not_most() -> None:
    rig = make_rig("random", executor=FailingEngine("onnxruntime"), trials=2)
    rig.queue({**ONNX, "batch.size": 8})
    rig.search()
    check_failures(rig.records())
    assert study_summary(rig.records()) == (
        "2 trials: 1 ok, 1 error (IndexError in fidelity: list index out of range)"
    )


def test_a_failed_trials_line_gives_its_reason_on_one_line() -> None:
    spec = TrialSpec(study="s", trial_number=3, workload=WORKLOAD, config={})
    failed = TrialResult.for_spec(spec, "error", FIDELITY_ERROR + "\n  at the second line")
    assert trial_text(failed) == f"trial 3: error: {FIDELITY_ERROR} at the second line"
