"""What a conclusion tells a user beside its choice."""

from __future__ import annotations

from autotune.conclusion.conclude import agreement_note
from autotune.conclusion.tuned_file import reported
from tests.coordinator_support import table_metrics


def test_a_fidelity_study_of_class_scores_is_told_its_top1_agreement() -> None:
    note = agreement_note("fidelity", {"accuracy": 0.9997, "top1_agreement": 0.974})
    assert note is not None and "97.4%" in note and "metric: {kind: agreement}" in note
    assert agreement_note("fidelity", {"accuracy": 0.9997}) is None


def test_the_tuned_file_says_how_accuracy_was_judged_right_after_it() -> None:
    metrics = table_metrics({"batch.size": 1}).model_dump()
    metrics |= {"top1_agreement": 0.974, "accuracy_judged_by": "fidelity: cosine"}
    keys = list(reported(metrics))
    assert keys[keys.index("accuracy") + 1] == "accuracy_judged_by"
    assert reported(metrics)["top1_agreement"] == 0.974
