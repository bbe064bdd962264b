"""Order-statistic intervals (against the binomial distribution and by simulated coverage)
and paired ratios of interleaved rounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.core.stats import paired_ratio, quantile_ci, quantile_ci_ranks


def brute_force_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int | None, int | None]:
    """The same ranks from exact binomial sums (math.comb), 0-based."""
    pmf = [math.comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(n + 1)]
    tail = (1 - confidence) / 2
    lows = [j for j in range(n) if sum(pmf[: j + 1]) <= tail]
    highs = [j for j in range(n) if sum(pmf[j + 1 :]) <= tail]
    return (lows[-1] if lows else None), (highs[0] if highs else None)


@pytest.mark.parametrize("n", [1, 5, 6, 10, 50, 71, 72, 100, 333, 1000])
@pytest.mark.parametrize("q", [0.5, 0.95])
def test_ranks_match_the_binomial_distribution(n: int, q: float) -> None:
    assert quantile_ci_ranks(n, q) == brute_force_ranks(n, q)


def test_which_sides_need_more_samples() -> None:
    assert quantile_ci_ranks(5, 0.5) == (None, None)
    assert quantile_ci_ranks(6, 0.5) == (0, 5)
    low, high = quantile_ci_ranks(71, 0.95)
    assert low is not None and high is None  # 0.95^71 > 2.5%: no upper rank yet
    assert quantile_ci_ranks(72, 0.95)[1] == 71  # 0.95^72 <= 2.5%: the maximum itself


def test_ranks_for_many_samples_are_near_the_normal_approximation() -> None:
    n, q = 100_000, 0.95
    low, high = quantile_ci_ranks(n, q)
    half = 1.96 * math.sqrt(n * q * (1 - q))
    assert low is not None and high is not None
    assert abs(low - (n * q - half)) <= 3 and abs(high - (n * q + half)) <= 3


@pytest.mark.parametrize(("n", "q"), [(200, 0.95), (400, 0.95), (60, 0.5)])
def test_the_interval_covers_the_true_quantile_95_percent_of_the_time(n: int, q: float) -> None:
    rng = np.random.default_rng(1234)
    trials, sigma = 4000, 0.5
    true_quantile = math.exp(sigma * {0.95: 1.6448536269514722, 0.5: 0.0}[q])
    samples = np.sort(rng.lognormal(0.0, sigma, (trials, n)), axis=1)
    low, high = quantile_ci_ranks(n, q)
    assert low is not None and high is not None
    covered = np.mean((samples[:, low] <= true_quantile) & (true_quantile < samples[:, high]))
    exact = brute_force_coverage(n, q, low, high)
    assert exact >= 0.95
    assert abs(covered - exact) <= 4 * math.sqrt(exact * (1 - exact) / trials)


def brute_force_coverage(n: int, q: float, low: int, high: int) -> float:
    """P(low + 1 <= B <= high), the coverage of [x_(low+1), x_(high+1)]."""
    return sum(math.comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(low + 1, high + 1))


def test_quantile_ci_falls_back_to_the_extremes() -> None:
    values = np.arange(1.0, 4.0)
    assert quantile_ci(values, 0.5) == (1.0, 3.0)


def test_paired_ratios_cover_the_true_ratio_under_a_drifting_machine() -> None:
    """Synthetic interleaved rounds: the machine's speed drifts from round to round by up to
    3x (shared by both configurations within a round), each block adds its own 5% noise;
    the true ratio is 2.5. The interval of the median covers it about 95% of the time or
    more, while a ratio of two separately timed rounds is often far off."""
    rng = np.random.default_rng(7)
    true_ratio, rounds, trials = 2.5, 10, 2000
    covered = 0
    unpaired_far = 0
    for _ in range(trials):
        machine = rng.uniform(1.0, 3.0, rounds)
        baseline = machine * rng.lognormal(0.0, 0.05, rounds)
        tuned = machine * true_ratio * rng.lognormal(0.0, 0.05, rounds)
        paired = paired_ratio(list(tuned), list(baseline))
        covered += paired.contains(true_ratio)
        unpaired = tuned[0] / baseline[-1]  # two absolutes from different moments
        unpaired_far += abs(unpaired / true_ratio - 1) > 0.2
    assert covered / trials >= 0.93
    assert unpaired_far / trials > 0.3


def test_paired_ratio_needs_pairs() -> None:
    with pytest.raises(ValueError, match="same, non-zero number"):
        paired_ratio([1.0, 2.0], [1.0])
    exact = paired_ratio([2.0] * 6, [1.0] * 6)
    assert (exact.median, exact.low, exact.high, exact.rounds) == (2.0, 2.0, 2.0, 6)
