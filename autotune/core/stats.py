"""Distribution-free statistics of timings, shared by the meters and the head-to-head.

Confidence intervals of a quantile q from n samples (`quantile_ci_ranks`): the number B of
samples at or below the true quantile is Binomial(n, q), so [x_(l), x_(u)] (order statistics,
1-based) covers it with probability >= P(l <= B <= u - 1) for any continuous distribution. l is
the largest rank with P(B <= l - 1) <= 2.5% and u the smallest with P(B >= u) <= 2.5%, so
each side misses with at most 2.5%.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95


def _binomial_pmf(n: int, p: float) -> np.ndarray:
    """P(B = k) for k = 0..n, B ~ Binomial(n, p), built in log space (stable for large n)."""
    k = np.arange(1, n + 1, dtype=np.float64)
    steps = np.log(n - k + 1) - np.log(k) + math.log(p) - math.log1p(-p)
    log_pmf = n * math.log1p(-p) + np.concatenate(([0.0], np.cumsum(steps)))
    pmf = np.exp(log_pmf - log_pmf.max())
    return pmf / pmf.sum()  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=512)
def quantile_ci_ranks(
    n: int, q: float, confidence: float = CONFIDENCE
) -> tuple[int | None, int | None]:
    """0-based indices (low, high) into n sorted samples of the distribution-free confidence
    interval of the q-quantile (see the module docstring). A side is None when n is too small
    for it to exist (e.g. the upper side of the p95's 95% interval needs n >= 72, the median's
    interval n >= 6)."""
    if n < 1:
        return None, None
    tail = (1.0 - confidence) / 2
    pmf = _binomial_pmf(n, q)
    cdf = np.cumsum(pmf)  # cdf[j] = P(B <= j)
    sf = np.cumsum(pmf[::-1])[::-1]  # sf[j] = P(B >= j)
    # x_(j+1) >= the quantile misses iff B <= j
    below = np.flatnonzero(cdf[:n] <= tail)
    # x_(j+1) < the quantile misses iff B >= j + 1
    above = np.flatnonzero(sf[1 : n + 1] <= tail)
    low = int(below[-1]) if below.size else None
    high = int(above[0]) if above.size else None
    return low, high


def quantile_ci(sorted_values: np.ndarray, q: float) -> tuple[float, float]:
    """The 95% confidence interval of the q-quantile of sorted samples; a side that needs more
    samples than there are falls back to the minimum or maximum (which then covers with less
    than 95%)."""
    low, high = quantile_ci_ranks(len(sorted_values), q)
    return (
        float(sorted_values[0 if low is None else low]),
        float(sorted_values[-1 if high is None else high]),
    )


def median_ci_relative_half_width(latencies: Sequence[int] | np.ndarray) -> float:
    """(high - low) / 2 / median of the median's 95% interval; inf where it does not exist."""
    values = np.sort(np.asarray(latencies, dtype=np.float64))
    low, high = quantile_ci_ranks(len(values), 0.5)
    if low is None or high is None:
        return math.inf
    median = float(np.median(values))
    spread = float(values[high] - values[low])
    if median <= 0:
        return 0.0 if spread == 0 else math.inf
    return spread / 2 / median


@dataclass(frozen=True)
class PairedRatio:
    """The median of per-round ratios (a ÷ b, each pair measured in the same round) and the
    distribution-free 95% interval of that median; `rounds` pairs went into it."""

    median: float
    low: float
    high: float
    rounds: int

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> PairedRatio:
    """Per-round ratios numerators[i] / denominators[i] summarised by their median and its
    order-statistic interval (`quantile_ci`: at least 6 rounds for both sides to exist; with
    fewer, the interval widens to the extremes)."""
    if len(numerators) != len(denominators) or not numerators:
        raise ValueError("paired_ratio needs the same, non-zero number of values on both sides")
    ratios = np.sort(np.asarray(numerators, float) / np.asarray(denominators, float))
    low, high = quantile_ci(ratios, 0.5)
    return PairedRatio(float(np.median(ratios)), low, high, len(ratios))
