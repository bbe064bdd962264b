"""Re-validation: before a configuration is returned, the finalists (the chosen one and its
nearest Pareto neighbours) and the baseline are measured again with more iterations, and
the re-measured order decides. Configurations whose p95 latency intervals overlap are
reported as tied rather than one of them winning by noise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from autotune.contract import MeasurementSettings
from autotune.metrics import Direction, Metric
from autotune.pareto import Candidate


def scaled_settings(settings: MeasurementSettings, factor: float) -> MeasurementSettings:
    """The same measurement, `factor` times longer and with `factor` times more iterations."""
    return settings.model_copy(
        update={
            "min_iters": int(settings.min_iters * factor),
            "max_iters": int(settings.max_iters * factor),
            "min_seconds": settings.min_seconds * factor,
            "max_seconds": settings.max_seconds * factor,
        }
    )


def nearest_neighbours(
    chosen: Candidate, front: Sequence[Candidate], metrics: Sequence[Metric], count: int
) -> list[Candidate]:
    """The `count` front members closest to `chosen` in min-max normalized objective space."""
    others = [c for c in front if c.trial_number != chosen.trial_number]
    spans = {}
    for metric in metrics:
        values = [float(c.metrics[metric.name]) for c in front]
        spans[metric.name] = (min(values), (max(values) - min(values)) or 1.0)

    def distance(candidate: Candidate) -> float:
        total = 0.0
        for metric in metrics:
            low, span = spans[metric.name]
            a = (float(candidate.metrics[metric.name]) - low) / span
            b = (float(chosen.metrics[metric.name]) - low) / span
            total += (a - b) ** 2
        return total

    return sorted(others, key=lambda c: (distance(c), c.trial_number))[:count]


def with_metrics(
    candidate: Candidate, metrics: dict[str, Any], violations: dict[str, float]
) -> Candidate:
    return replace(
        candidate,
        metrics=metrics,
        violations=violations,
        feasible=all(v <= 0 for v in violations.values()),
    )


def p95_interval(metrics: dict[str, Any]) -> tuple[float, float]:
    """The confidence interval of the p95 latency; the point value where none is known."""
    low = metrics.get("latency_p95_ci_low_ms")
    high = metrics.get("latency_p95_ci_high_ms")
    point = float(metrics["latency_p95_ms"])
    return (float(low) if low is not None else point, float(high) if high is not None else point)


def tied_with(chosen: Candidate, others: Sequence[Candidate]) -> list[Candidate]:
    """Others whose p95 latency interval overlaps the chosen one's."""
    low, high = p95_interval(chosen.metrics)
    tied = []
    for other in others:
        other_low, other_high = p95_interval(other.metrics)
        if other_low <= high and low <= other_high:
            tied.append(other)
    return tied


def order_changed(before: Sequence[Candidate], after: Sequence[Candidate], metric: Metric) -> bool:
    """Whether re-measurement reordered the finalists on the selection metric."""

    def order(candidates: Sequence[Candidate]) -> list[int]:
        sign = -1.0 if metric.direction is Direction.MAXIMIZE else 1.0
        ranked = sorted(
            candidates, key=lambda c: (sign * float(c.metrics[metric.name]), c.trial_number)
        )
        return [c.trial_number for c in ranked]

    return order(before) != order(after)
