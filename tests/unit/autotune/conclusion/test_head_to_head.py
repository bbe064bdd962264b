"""The finalists head to head with the baseline (`Revalidator`): the unmodified model stays
unless a finalist beats it beyond the noise."""

from __future__ import annotations

from typing import Any, cast

import pytest

from autotune.conclusion.head_to_head import AS_LOADED, CONFIRMING, Revalidator
from autotune.core.contract import EntrantOutcome, HeadToHeadResult, HeadToHeadSpec, TrialMetrics
from autotune.core.metrics import Study, derived
from autotune.execution.base import Executor
from autotune.results.records import Candidate
from autotune.strategies import make_strategy
from tests.coordinator_support import (
    BASELINE,
    SPACE,
    STUDY,
    WORKLOAD,
    config_with,
    make_request,
    open_store,
    table_metrics,
)
from tests.unit.autotune.conclusion.test_decision import busy, outcome

QUIET = busy(False)


class Comparing:
    """Answers a head-to-head with each entrant's scripted p95 per round."""

    def __init__(self, p95_per_round: dict[int, list[float]]) -> None:
        self.p95_per_round = p95_per_round

    def compare(self, spec: HeadToHeadSpec) -> HeadToHeadResult:
        entrants = [self._outcome(e.trial_number, e.config) for e in spec.entrants]
        return HeadToHeadResult(entrants=entrants, contention=[QUIET] * spec.rounds, duration_s=0.0)

    def _outcome(self, number: int, config: dict[str, Any]) -> EntrantOutcome:
        rounds = self.p95_per_round[number]
        median = sorted(rounds)[len(rounds) // 2]
        metrics = table_metrics(config).model_copy(
            update={"latency_p95_ms": median, "throughput_per_s": 1000 / median}
        )
        return outcome(number, rounds).model_copy(update={"metrics": metrics})


def candidate(number: int, config: dict[str, Any], p95: float) -> Candidate:
    metrics: TrialMetrics = table_metrics(config).model_copy(update={"latency_p95_ms": p95})
    dumped = derived(metrics.model_dump(), Study(table_metrics(BASELINE).accuracy))
    return Candidate(trial_number=number, config=config, metrics=dumped, feasible=True)


def revalidator(p95_per_round: dict[int, list[float]]) -> Revalidator:
    request = make_request(trials=4)
    rounds = request.validation.rounds
    store = open_store(request, make_strategy("random", SPACE, request, seed=0), SPACE)
    executor = Comparing({n: p[:rounds] for n, p in p95_per_round.items()})
    return Revalidator(
        request, WORKLOAD, STUDY, cast(Executor, executor), store, on_phase=lambda p: None
    )


# The baseline (#0), and one finalist (#3) that was faster in its own trial.
THE_BASELINE = candidate(0, BASELINE, p95=1.2)
FINALIST = candidate(3, config_with(**{"runtime.threads": 1}), p95=1.0)


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


class ComparingTwice(Comparing):
    """The first head-to-head as scripted; every later one with `then`."""

    def __init__(self, first: dict[int, list[float]], then: dict[int, list[float]]) -> None:
        super().__init__(first)
        self.then = then
        self.specs: list[HeadToHeadSpec] = []

    def compare(self, spec: HeadToHeadSpec) -> HeadToHeadResult:
        self.specs.append(spec)
        if len(self.specs) > 1:
            self.p95_per_round = self.then
        return super().compare(spec)


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
