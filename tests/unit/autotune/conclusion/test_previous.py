"""A re-tune's comparison with the previous choice: both measured in the same interleaved
rounds, the comparison their paired ratios; an unchanged configuration is no change."""

from __future__ import annotations

from typing import Any, cast

import pytest

from autotune.conclusion.previous import (
    SAME_CONFIGURATION,
    ConfigChange,
    PreviousChoice,
    compared_with_previous,
    previous_choice,
)
from autotune.conclusion.tuned_file import TunedConfig
from autotune.execution.base import Executor
from autotune.requests.request import Selection
from tests.conclusion_support import (
    FINALIST,
    PREVIOUS,
    THE_BASELINE,
    ComparingTwice,
    measured_previous,
    per_round,
    retuned,
    revalidator,
    tuned_config,
)

ROUNDS = 10


def tuned_document(config: dict[str, Any]) -> dict[str, Any]:
    """What the previous job's result holds of its choice (its figures are never read)."""
    return {
        "config": config,
        "metrics": {"latency_p95_ms": 99.0, "throughput_per_s": 1.0},
        "study": {"name": "before"},
        "mlflow": {"run_id": "run-before"},
    }


def test_the_previous_choice_is_compared_in_the_same_paired_rounds() -> None:
    revalidation, executor = retuned({0: 2.0, 3: 0.5, 5: 1.0}, measured_previous())
    assert revalidation.chosen.trial_number == 3
    # In every head-to-head, the deciding one and the confirming one, beside the choice.
    assert [[e.trial_number for e in s.entrants] for s in executor.specs] == [[0, 3, 5]] * 2
    compared = revalidation.previous
    assert compared is not None and not compared.same_configuration
    p95, throughput = compared.ratios["latency_p95_ms"], compared.ratios["throughput_per_s"]
    # Paired per round, the machine's threefold swings cancel: exactly half the p95.
    assert p95.ratio == pytest.approx(0.5) and p95.ci_low == pytest.approx(0.5)
    assert p95.ci_high == pytest.approx(0.5)
    assert throughput.ratio == pytest.approx(2.0)
    assert "energy_per_sample_j" in compared.ratios
    assert compared.rounds == ROUNDS and compared.conditions == "quiet"
    assert compared.previous == {"study": "before", "run_id": "run-before"}
    assert compared.previous_trial == 5
    assert compared.config_changes == {
        "batch.size": ConfigChange(before=8, after=1),
        "runtime.threads": ConfigChange(before=None, after=1),
    }
    assert compared.text.startswith("2× lower p95 latency")
    assert compared.text.endswith(f"{ROUNDS} paired rounds, quiet")
    assert revalidation.report["previous_trial"] == 5


def test_the_comparison_comes_from_the_rounds_that_give_the_headline() -> None:
    """The deciding rounds favour the new choice by luck; the confirming rounds, which also
    measure the previous choice, give both the headline and the comparison."""
    checker = revalidator({})
    first = {0: per_round(2.0), 3: per_round(0.5), 5: per_round(1.0)}
    then = {0: per_round(2.0), 3: per_round(0.8), 5: per_round(1.0)}
    executor = ComparingTwice(first, then)
    checker.executor = cast(Executor, executor)
    checker.previous = measured_previous()
    revalidation = checker.revalidate([FINALIST], THE_BASELINE)
    assert revalidation.chosen.trial_number == 3
    assert [[e.trial_number for e in s.entrants] for s in executor.specs] == [
        [0, 3, 5],
        [0, 3, 5],
    ]
    assert revalidation.previous is not None
    assert revalidation.previous.ratios["latency_p95_ms"].ratio == pytest.approx(0.8)
    assert revalidation.headline.ratios["latency_p95_ms"].ratio == pytest.approx(0.4)


def test_an_unchanged_configuration_is_no_change() -> None:
    previous = PreviousChoice(FINALIST.config, "before", "run-before", FINALIST)
    revalidation, executor = retuned({0: 2.0, 3: 0.5}, previous)
    assert revalidation.chosen.trial_number == 3
    # The previous choice is the finalist: beside the baseline, and measured once in a round.
    assert [[e.trial_number for e in s.entrants] for s in executor.specs] == [[0, 3]] * 2
    compared = revalidation.previous
    assert compared is not None
    assert compared.same_configuration and compared.text == SAME_CONFIGURATION
    assert compared.ratios == {} and compared.config_changes == {}
    assert compared.rounds == 0 and compared.conditions is None


def test_a_previous_choice_that_wins_beyond_the_noise_is_kept() -> None:
    """The previous choice is a contestant: measured faster than the new search's finalist,
    and within the constraints, it stays, and so nothing changed."""
    revalidation, _ = retuned({0: 2.0, 3: 1.0, 5: 0.5}, measured_previous())
    assert revalidation.chosen.trial_number == 5
    assert revalidation.previous is not None
    assert revalidation.previous.text == SAME_CONFIGURATION


def test_a_previous_choice_this_study_did_not_complete_is_not_compared() -> None:
    revalidation, executor = retuned({0: 2.0, 3: 0.5}, measured_previous(measured=None))
    assert [[e.trial_number for e in s.entrants] for s in executor.specs] == [[0, 3]] * 2
    compared = revalidation.previous
    assert compared is not None and not compared.same_configuration
    assert compared.text.startswith("not compared: no trial of this study")
    assert compared.ratios == {} and compared.previous_trial is None


def test_a_stored_comparison_is_reused_with_the_head_to_head() -> None:
    checker = revalidator({})
    rounds = {0: per_round(2.0), 3: per_round(0.5), 5: per_round(1.0)}
    executor = ComparingTwice(rounds, rounds)
    checker.executor = cast(Executor, executor)
    checker.previous = measured_previous()
    first = checker.revalidate([FINALIST], THE_BASELINE)
    again = checker.revalidate([FINALIST], THE_BASELINE)
    assert again.reused and len(executor.specs) == 2
    assert again.previous == first.previous
    checker.previous = PreviousChoice(FINALIST.config, "other", "run-other", FINALIST)
    measured = checker.revalidate([FINALIST], THE_BASELINE)
    assert not measured.reused  # another previous choice: measured again


def test_the_previous_choice_is_this_studys_trial_of_its_configuration() -> None:
    document = tuned_document(PREVIOUS.config)
    found = previous_choice(document, [THE_BASELINE, FINALIST, PREVIOUS])
    assert found.measured is PREVIOUS and (found.study, found.run_id) == ("before", "run-before")
    unmodified = previous_choice(tuned_document(THE_BASELINE.config), [THE_BASELINE, PREVIOUS])
    assert unmodified.measured is THE_BASELINE
    assert previous_choice(document, [THE_BASELINE]).measured is None


def test_a_first_tunings_document_has_no_comparison_and_a_retunes_reads_back() -> None:
    tuned = tuned_config()
    assert "previous" not in tuned.model_dump(mode="json")
    unchanged = PreviousChoice(FINALIST.config, "before", "run-before", FINALIST)
    compared = compared_with_previous(unchanged, FINALIST, {}, [], Selection())
    retuned_document = tuned.model_copy(update={"previous": compared}).model_dump(mode="json")
    assert retuned_document["previous"]["text"] == SAME_CONFIGURATION
    assert TunedConfig.model_validate(retuned_document).previous == compared
