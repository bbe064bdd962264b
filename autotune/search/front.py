"""Pareto fronts over typed metrics: a study's, and the running front the search keeps up to
date as its trials are told."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.core.metrics import OBJECTIVES, Direction, Metric, with_derived
from autotune.results.records import Candidate

if TYPE_CHECKING:
    from autotune.results.store import ResultStore


def oriented(candidate: Candidate, metrics: Sequence[Metric]) -> tuple[float, ...]:
    """Values turned so that smaller is better for every metric."""
    return tuple(
        -value_of(candidate, m) if m.direction is Direction.MAXIMIZE else value_of(candidate, m)
        for m in metrics
    )


def value_of(candidate: Candidate, metric: Metric) -> Any:
    """A trial recorded before a derived metric existed has it derived (`with_derived`)."""
    if metric.name in candidate.metrics:
        return candidate.metrics[metric.name]
    return with_derived(candidate.metrics)[metric.name]


def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(
        x < y for x, y in zip(a, b, strict=True)
    )


def pareto_front(candidates: Sequence[Candidate], metrics: Sequence[Metric]) -> list[Candidate]:
    """The non-dominated candidates, in the order given. Equal points all stay."""
    points = [oriented(c, metrics) for c in candidates]
    return [
        c
        for i, c in enumerate(candidates)
        if not any(dominates(points[j], points[i]) for j in range(len(points)) if j != i)
    ]


class RunningFront:
    """The feasible Pareto front of a growing set of trials, kept up to date one new trial at
    a time (each is compared with the front, not with every trial before it); equal points
    all stay, as in `pareto_front`."""

    def __init__(self, metrics: Sequence[Metric]) -> None:
        self._metrics = list(metrics)
        self._seen: dict[int, Candidate] = {}
        self._front: list[tuple[tuple[float, ...], Candidate]] = []

    def update(self, completed: Mapping[int, Candidate]) -> list[Candidate]:
        """The front of `completed` (trial number -> candidate), which holds every trial
        given before; a trial told again with other figures rebuilds the front."""
        if any(completed.get(n) is not c for n, c in self._seen.items()):
            self._seen, self._front = {}, []
        for number, candidate in completed.items():
            if number not in self._seen:
                self._seen[number] = candidate
                if candidate.feasible:
                    self._add(candidate)
        return [c for _, c in self._front]

    def _add(self, candidate: Candidate) -> None:
        point = oriented(candidate, self._metrics)
        if any(dominates(kept, point) for kept, _ in self._front):
            return
        self._front = [(kept, c) for kept, c in self._front if not dominates(point, kept)]
        self._front.append((point, candidate))


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """The hypervolume that smaller-is-better `points` dominate up to `reference`; points not
    strictly better than it in every objective add nothing."""
    import numpy as np

    from autotune.optuna_api import compute_hypervolume

    inside = [p for p in points if all(x < r for x, r in zip(p, reference, strict=True))]
    if not inside:
        return 0.0
    return float(compute_hypervolume(np.array(inside, dtype=float), np.array(reference, float)))


def by_contribution(front: Sequence[Candidate], metrics: Sequence[Metric]) -> list[Candidate]:
    """The front, the point whose loss would cost the most hypervolume first. The reference
    point lies a tenth of the front's extent beyond its worst value of each metric."""
    points = [oriented(c, metrics) for c in front]
    if len(points) < 2:
        return list(front)
    worst = [max(column) for column in zip(*points, strict=True)]
    best = [min(column) for column in zip(*points, strict=True)]
    reference = [w + max(0.1 * (w - b), 1e-12) for w, b in zip(worst, best, strict=True)]
    total = hypervolume(points, reference)
    losses = [
        total - hypervolume(points[:i] + points[i + 1 :], reference) for i in range(len(points))
    ]
    order = sorted(range(len(front)), key=lambda i: -losses[i])
    return [front[i] for i in order]


def front_of(store: ResultStore) -> list[Candidate]:
    """A study's feasible Pareto front, over the objectives the study was run with."""
    objectives = [OBJECTIVES[o] for o in store.objective_names()]
    return pareto_front([r.candidate() for r in store.completed() if r.feasible], objectives)
