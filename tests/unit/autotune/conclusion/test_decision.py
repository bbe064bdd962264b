"""Re-validation: neighbours, ties within the noise resolved to the simpler configuration,
the headline as paired ratios with their conditions."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.conclusion.decision import (
    changes_from,
    decide,
    headline,
    nearest_neighbours,
    ratio,
    with_metrics,
)
from autotune.core.metrics import OBJECTIVES
from autotune.requests.request import Selection
from autotune.results.records import Candidate
from tests.conclusion_support import busy, outcome

OBJ = [OBJECTIVES["accuracy"], OBJECTIVES["latency"]]
BASELINE = {"batch.size": 1, "precision.mode": "fp32", "runtime.engine": "torch_eager"}
LOWEST_LATENCY = Selection(strategy="lowest_latency")


def cand(n: int, p95: float, accuracy: float = 0.9, config: dict | None = None) -> Candidate:
    metrics = {"accuracy": accuracy, "latency_p95_ms": p95, "throughput_per_s": 1000 / p95}
    return Candidate(trial_number=n, config=config or {}, metrics=metrics, feasible=True)


def test_nearest_neighbours_in_normalized_space() -> None:
    chosen = cand(0, p95=1.0, accuracy=0.90)
    near = cand(1, p95=1.1, accuracy=0.91)
    far = cand(2, p95=9.0, accuracy=0.99)
    middle = cand(3, p95=4.0, accuracy=0.95)
    front = [chosen, near, far, middle]
    assert [c.trial_number for c in nearest_neighbours(chosen, front, OBJ, 2)] == [1, 3]
    assert nearest_neighbours(chosen, front, OBJ, 0) == []


def test_rescoring_with_remeasured_metrics() -> None:
    rescored = with_metrics(cand(0, 1.0), {"latency_p95_ms": 3.0}, {"max_latency_p95_ms": 1.0})
    assert not rescored.feasible and rescored.metrics["latency_p95_ms"] == 3.0


def test_changes_from_the_baseline_count_every_differing_setting() -> None:
    assert changes_from(BASELINE, BASELINE) == 0
    assert changes_from({**BASELINE, "batch.size": 8}, BASELINE) == 1
    assert changes_from({**BASELINE, "runtime.threads": 1}, BASELINE) == 1  # one side only


def test_a_difference_inside_the_noise_is_a_tie_won_by_the_simpler_configuration() -> None:
    rng = np.random.default_rng(0)
    machine = rng.uniform(1.0, 1.5, 10)  # the machine's speed, shared by both in a round
    noise = rng.normal(1.0, 0.03, (2, 10))  # each block's own noise, larger than 1%
    simple = cand(1, 1.01, config={**BASELINE, "batch.size": 8})
    complex_ = cand(2, 1.0, config={**BASELINE, "batch.size": 8, "precision.mode": "int8"})
    outcomes = {
        1: outcome(1, list(machine * noise[0] * 1.01)),
        2: outcome(2, list(machine * noise[1])),
    }
    assert ratio(outcomes[1], outcomes[2], "latency_p95_ms").contains(1.0)
    decision = decide([simple, complex_], outcomes, LOWEST_LATENCY, BASELINE)
    assert decision.leader is complex_  # faster on the figures alone
    assert decision.chosen is simple and decision.tied_with == [1]
    assert "fewer changes from the baseline (1 vs 2)" in decision.because


def test_a_difference_beyond_the_noise_goes_to_the_faster_configuration() -> None:
    machine = np.random.default_rng(1).uniform(1.0, 3.0, 10)  # a very noisy machine
    simple = cand(1, 2.0, config={**BASELINE, "batch.size": 8})
    fast = cand(2, 1.0, config={**BASELINE, "batch.size": 8, "precision.mode": "int8"})
    outcomes = {1: outcome(1, list(machine * 2.0)), 2: outcome(2, list(machine * 1.0))}
    decision = decide([simple, fast], outcomes, LOWEST_LATENCY, BASELINE)
    assert decision.chosen is fast and decision.tied_with == []
    assert decision.because == "the best latency_p95_ms of the finalists"


def test_throughput_selection_ties_on_throughput() -> None:
    batched = cand(1, 8.0, config={**BASELINE, "batch.size": 64})
    batched.metrics["throughput_per_s"] = 8000.0
    single = cand(2, 1.0, config=BASELINE)
    outcomes = {1: outcome(1, [8.0] * 8, batch=64), 2: outcome(2, [1.0] * 8)}
    decision = decide(
        [batched, single], outcomes, Selection(strategy="highest_throughput"), BASELINE
    )
    assert decision.chosen is batched
    summary = headline(
        outcomes[1], outcomes[2], [busy(False)] * 8, Selection(strategy="highest_throughput"), False
    )
    assert summary.text.startswith(
        "8× throughput (95% CI 8–8×); 8× higher p95 latency per call (95% CI 8–8×); "
        "8× lower energy per sample"
    )


def test_the_headline_is_a_paired_ratio_with_its_interval_and_conditions() -> None:
    machine = np.random.default_rng(2).uniform(1.0, 2.0, 10)
    base = outcome(0, list(machine * 4.0))
    tuned = outcome(1, list(machine * 1.0), batch=1)
    quiet = headline(
        tuned, base, [busy(False)] * 10, Selection(strategy="highest_throughput"), True
    )
    assert quiet.ratios["throughput_per_s"].ratio == np.float64(4.0)
    assert quiet.conditions == "quiet" and quiet.contended_rounds == 0
    assert quiet.text.startswith("4× throughput (95% CI 4–4×)")
    assert "4× lower energy per sample (95% CI 4–4×) (estimated)" in quiet.text
    assert quiet.text.endswith("10 paired rounds, quiet")
    loaded = headline(tuned, base, [busy(i < 3) for i in range(10)], LOWEST_LATENCY, False)
    assert loaded.conditions == "contended" and loaded.contended_rounds == 3
    assert loaded.text.startswith(
        "contended: 30% of the rounds saw other load; re-run on an idle machine for a firm "
        "figure; 4× lower p95 latency per call (95% CI 4–4×); 4× throughput"
    )
    assert loaded.text.endswith("; 10 paired rounds")


# Per round, the baseline's p95 over the tuned one's: a median of 576, its 95% interval
# from the 2nd to the 9th of the ten (278 to 1,100), a span of 4x (the contended run).
WIDE = [200.0, 278.0, 300.0, 400.0, 552.0, 600.0, 800.0, 1000.0, 1100.0, 1200.0]


def test_a_contended_headline_leads_with_the_condition_and_gives_wide_figures_as_ranges() -> None:
    base = outcome(0, WIDE)
    tuned = outcome(1, [1.0] * 10)
    summary = headline(tuned, base, [busy(True)] * 10, LOWEST_LATENCY, False)
    assert summary.ratios["latency_p95_ms"].ci_low == 1 / 1100
    assert summary.text.startswith(
        "contended: 100% of the rounds saw other load; re-run on an idle machine for a firm "
        "figure; p95 latency per call between 278× and 1,100× lower, not resolved; "
        "throughput between 278× and 1,100×, not resolved"
    )
    assert "576" not in summary.text  # the median is no result with such an interval
    assert "e+" not in summary.text


def test_a_quiet_headline_with_a_very_wide_interval_says_so_first() -> None:
    tuned = outcome(1, [1.0] * 10)
    summary = headline(tuned, outcome(0, WIDE), [busy(False)] * 10, LOWEST_LATENCY, False)
    assert summary.conditions == "quiet" and not summary.resolved
    assert summary.text.startswith(
        "quiet, but not resolved: the 95% interval of p95 latency per call, throughput and "
        "energy per sample spans more than 3×; more rounds (validation.rounds) narrow it; "
        "p95 latency per call between 278× and 1,100× lower, not resolved"
    )
    assert summary.text.endswith("; 10 paired rounds")


def test_an_interval_that_spans_less_than_3x_is_a_result() -> None:
    base = outcome(0, [1.0, 1.2, 1.5, 2.0, 3.0, 3.0, 3.5, 3.5, 3.5, 9.0])
    summary = headline(outcome(1, [1.0] * 10), base, [busy(False)] * 10, LOWEST_LATENCY, False)
    assert summary.text.startswith("3× lower p95 latency per call (95% CI 1.2–3.5×)")
    assert summary.text.endswith("10 paired rounds, quiet") and summary.resolved


def test_big_ratios_are_plain_numbers() -> None:
    base = outcome(0, [1234.5] * 8)
    summary = headline(outcome(1, [1.0] * 8), base, [busy(False)] * 8, LOWEST_LATENCY, False)
    assert summary.text.startswith("1,230× lower p95 latency per call (95% CI 1,230–1,230×)")
    assert "e+" not in summary.text and "e-" not in summary.text


def test_the_headline_of_the_unmodified_model_says_so() -> None:
    base = outcome(0, [1.0] * 6)
    summary = headline(base, base, [], LOWEST_LATENCY, False)
    assert summary.same_as_baseline and summary.conditions == "replayed"
    assert summary.text.startswith("the unmodified model is the best choice")


def test_a_cost_selection_decides_and_leads_the_headline_by_cost() -> None:
    """The cost per million samples is read from rounds as hours per million samples (the
    price is one constant for every entrant), so its ratio is the inverse of throughput's."""
    batched = cand(1, 8.0, config={**BASELINE, "batch.size": 64})
    batched.metrics["throughput_per_s"] = 8000.0
    batched.metrics["cost_per_million_samples"] = 0.1
    single = cand(2, 1.0, config=BASELINE)
    single.metrics["cost_per_million_samples"] = 0.8
    outcomes = {1: outcome(1, [8.0] * 8, batch=64), 2: outcome(2, [1.0] * 8)}
    lowest_cost = Selection(strategy="lowest_cost")

    decision = decide([batched, single], outcomes, lowest_cost, BASELINE)
    summary = headline(outcomes[1], outcomes[2], [busy(False)] * 8, lowest_cost, False)

    assert decision.chosen is batched
    assert decision.because == "the best cost_per_million_samples of the finalists"
    assert summary.ratios["cost_per_million_samples"].ratio == 1 / 8
    assert summary.text.startswith("8× lower cost per million samples (95% CI 8–8×); 8× throughput")


def test_the_headline_of_the_unmodified_model_measures_it_as_loaded_against_the_plain_one() -> None:
    plain = outcome(0, [1.0 + 0.01 * i for i in range(8)])
    loaded = outcome(0, [1.05 + 0.01 * i for i in range(8)]).model_copy(
        update={"loaded_artifact": True}
    )
    summary = headline(loaded, plain, [busy(False)] * 8, LOWEST_LATENCY, False)
    assert summary.same_as_baseline and summary.conditions == "quiet"
    p95 = summary.ratios["latency_p95_ms"]
    assert p95.ratio == pytest.approx(1.05, rel=0.01) and p95.ci_low > 1.0
    assert summary.text.startswith(
        "the unmodified model is the best choice: no finalist beat it beyond the noise; "
        "loaded from its artifact, against the plain model: 1.05× higher p95 latency per call"
    )
    assert summary.text.endswith("8 paired rounds, quiet")
