"""Pareto fronts over typed metrics: dominance, ties, hypervolume and the running front."""

import numpy as np
import pytest

from autotune.core.metrics import OBJECTIVES
from autotune.results.records import Candidate
from autotune.search.front import (
    RunningFront,
    by_contribution,
    dominates,
    hypervolume,
    pareto_front,
)

OBJ = [OBJECTIVES["accuracy"], OBJECTIVES["latency"], OBJECTIVES["energy"]]


def cand(n: int, accuracy: float, latency: float, energy: float = 1.0) -> Candidate:
    metrics = {"accuracy": accuracy, "latency_p95_ms": latency, "energy_per_sample_j": energy}
    return Candidate(trial_number=n, config={"n": n}, metrics=metrics, feasible=True)


def test_dominates_needs_one_strictly_better() -> None:
    assert dominates((1.0, 1.0), (1.0, 2.0))
    assert not dominates((1.0, 2.0), (1.0, 2.0))
    assert not dominates((0.0, 3.0), (1.0, 2.0))


def test_front_respects_directions() -> None:
    a = cand(0, accuracy=0.99, latency=5.0)
    b = cand(1, accuracy=0.98, latency=1.0)
    c = cand(2, accuracy=0.97, latency=2.0)  # dominated by b
    d = cand(3, accuracy=0.99, latency=6.0)  # dominated by a
    front = pareto_front([a, b, c, d], OBJ)
    assert [x.trial_number for x in front] == [0, 1]


def test_front_keeps_exact_ties() -> None:
    a, b = cand(0, 0.9, 1.0), cand(1, 0.9, 1.0)
    assert len(pareto_front([a, b], OBJ)) == 2


def test_hypervolume_of_boxes_by_hand() -> None:
    reference = [4.0, 4.0]
    assert hypervolume([[1.0, 3.0]], reference) == pytest.approx(3.0)
    # Two boxes, 3 + 6, sharing 2x1: 7; a point outside the reference adds nothing.
    assert hypervolume([[1.0, 3.0], [2.0, 1.0], [5.0, 0.0]], reference) == pytest.approx(7.0)
    assert hypervolume([[4.0, 1.0]], reference) == 0.0


def test_front_by_hypervolume_contribution() -> None:
    latency, energy = OBJECTIVES["latency"], OBJECTIVES["energy"]

    def point(number: int, p95: float, joules: float) -> Candidate:
        return Candidate(number, {}, {"latency_p95_ms": p95, "energy_per_sample_j": joules}, True)

    # Extent 10 in each metric: the reference point is a tenth further, (11, 11).
    front = [point(0, 0.0, 10.0), point(1, 5.0, 1.0), point(2, 10.0, 0.0)]
    # Exclusive contributions with reference (11, 11): point 0 owns x in [0, 5) and y in
    # [10, 11): 5; point 1 owns x in [5, 10), y in [1, 10): 45; point 2 owns x in [10, 11),
    # y in [0, 1): 1.
    ordered = by_contribution(front, [latency, energy])
    assert [c.trial_number for c in ordered] == [1, 0, 2]
    assert by_contribution(front[:1], [latency, energy]) == front[:1]


def test_a_running_front_is_the_front_of_every_trial_told_so_far() -> None:
    rng = np.random.default_rng(3)
    objectives = [OBJECTIVES["accuracy"], OBJECTIVES["latency"]]
    running = RunningFront(objectives)
    completed: dict[int, Candidate] = {}
    for number in range(200):
        accuracy, p95 = (float(v) for v in rng.integers(0, 12, 2))
        completed[number] = Candidate(
            number, {}, {"accuracy": accuracy, "latency_p95_ms": p95}, bool(number % 5)
        )
        feasible = [c for c in completed.values() if c.feasible]
        assert running.update(completed) == pareto_front(feasible, objectives)
    best = Candidate(7, {}, {"accuracy": 99.0, "latency_p95_ms": 0.0}, True)
    completed[7] = best  # told again, with other figures: the front is rebuilt
    assert running.update(completed) == [best]
