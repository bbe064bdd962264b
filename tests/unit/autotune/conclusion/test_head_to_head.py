"""The finalists head to head with the baseline (`Revalidator`): the unmodified model stays
unless a finalist beats it beyond the noise."""

from __future__ import annotations

from typing import cast

import pytest

from autotune.conclusion.head_to_head import AS_LOADED, CONFIRMING
from autotune.core.contract import HeadToHeadResult, HeadToHeadSpec
from autotune.execution.base import Executor
from tests.conclusion_support import (
    FINALIST,
    THE_BASELINE,
    Comparing,
    ComparingTwice,
    outcome,
    revalidator,
)


def chosen_after(p95_per_round: dict[int, list[float]]) -> int:
    """The trial chosen when both are re-measured with these rounds."""
    return revalidator(p95_per_round).revalidate([FINALIST], THE_BASELINE).chosen.trial_number


SLOW, FAST = [1.0 + 0.01 * i for i in range(12)], [0.5 + 0.01 * i for i in range(12)]


def test_a_finalist_slower_than_the_baseline_head_to_head_leaves_the_model_unchanged() -> None:
    assert chosen_after({0: FAST, 3: SLOW}) == 0


def test_a_finalist_tied_with_the_baseline_leaves_the_model_unchanged() -> None:
    assert chosen_after({0: SLOW, 3: SLOW[::-1]}) == 0


def test_a_finalist_faster_beyond_the_noise_is_chosen() -> None:
    assert chosen_after({0: SLOW, 3: FAST}) == 3


def test_a_stored_decision_for_the_baseline_is_reused() -> None:
    checker = revalidator({0: FAST, 3: SLOW})
    first = checker.revalidate([FINALIST], THE_BASELINE)
    again = checker.revalidate([FINALIST], THE_BASELINE)
    assert first.chosen.trial_number == again.chosen.trial_number == 0
    assert again.reused


def test_the_headline_comes_from_fresh_rounds_not_from_those_that_chose() -> None:
    """The deciding rounds favoured the finalist by luck (2x); fresh rounds of it and the
    baseline alone measure 1.2x: the headline is the fresh rounds' figure."""
    checker = revalidator({})
    rounds = checker.request.validation.rounds
    modest = [p / 1.2 for p in SLOW]
    executor = ComparingTwice(
        {0: SLOW[:rounds], 3: FAST[:rounds]}, {0: SLOW[:rounds], 3: modest[:rounds]}
    )
    checker.executor = cast(Executor, executor)
    revalidation = checker.revalidate([FINALIST], THE_BASELINE)
    assert revalidation.chosen.trial_number == 3
    assert [len(spec.entrants) for spec in executor.specs] == [2, 2]
    p95 = revalidation.headline.ratios["latency_p95_ms"]
    assert p95.ratio == pytest.approx(1 / 1.2)
    assert revalidation.report["headline_from"] == CONFIRMING
    assert revalidation.chosen.metrics["latency_p95_ms"] == pytest.approx(
        sorted(modest[:rounds])[rounds // 2]
    )


class ComparingLoaded(Comparing):
    """As scripted; an entrant run as loaded from its artifact with `loaded`'s rounds."""

    def __init__(self, p95_per_round: dict[int, list[float]], loaded: list[float]) -> None:
        super().__init__(p95_per_round)
        self.loaded = loaded
        self.specs: list[HeadToHeadSpec] = []

    def compare(self, spec: HeadToHeadSpec) -> HeadToHeadResult:
        self.specs.append(spec)
        result = super().compare(spec)
        for index, entrant in enumerate(spec.entrants):
            if entrant.loaded_artifact:
                as_loaded = outcome(entrant.trial_number, self.loaded[: spec.rounds])
                result.entrants[index] = as_loaded.model_copy(update={"loaded_artifact": True})
        return result


def test_a_baseline_choice_is_headlined_as_loaded_from_its_artifact_against_the_plain_model() -> (
    None
):
    checker = revalidator({})
    rounds = checker.request.validation.rounds
    executor = ComparingLoaded({0: FAST[:rounds], 3: SLOW[:rounds]}, [p * 1.05 for p in FAST])
    checker.executor = cast(Executor, executor)
    revalidation = checker.revalidate([FINALIST], THE_BASELINE)
    assert revalidation.chosen.trial_number == 0
    deciding, as_loaded = executor.specs
    assert not any(e.loaded_artifact for e in deciding.entrants)
    assert [(e.trial_number, e.loaded_artifact) for e in as_loaded.entrants] == [
        (0, False),
        (0, True),
    ]
    p95 = revalidation.headline.ratios["latency_p95_ms"]
    assert p95.ratio == pytest.approx(1.05) and (p95.ci_low, p95.ci_high) != (1.0, 1.0)
    assert revalidation.headline.same_as_baseline
    assert "loaded from its artifact, against the plain model" in revalidation.headline.text
    assert revalidation.report["headline_from"] == AS_LOADED
