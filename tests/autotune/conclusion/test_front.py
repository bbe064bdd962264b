import numpy as np
import pytest

from autotune.conclusion.front import select
from autotune.core.metrics import OBJECTIVES, THROUGHPUT, selection_objective
from autotune.requests.request import Selection
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


def test_select_strategies() -> None:
    fast = cand(0, accuracy=0.95, latency=1.0, energy=3.0)
    frugal = cand(1, accuracy=0.96, latency=2.0, energy=1.0)
    exact = cand(2, accuracy=0.99, latency=4.0, energy=2.0)
    front = [fast, frugal, exact]
    assert select(front, Selection(strategy="lowest_latency")) is fast
    assert select(front, Selection(strategy="lowest_energy")) is frugal
    assert select(front, Selection(strategy="highest_accuracy")) is exact
    weighted = Selection(strategy="weighted", weights={"accuracy": 1.0, "latency": 0.1})
    assert select(front, weighted) is exact
    weighted = Selection(strategy="weighted", weights={"accuracy": 0.1, "latency": 1.0})
    assert select(front, weighted) is fast


def test_latency_ties_go_to_accuracy() -> None:
    worse = cand(0, accuracy=0.90, latency=1.0)
    better = cand(1, accuracy=0.95, latency=1.0)
    assert select([worse, better], Selection()) is better


def served(n: int, batch: int, p95: float, accuracy: float = 0.9) -> Candidate:
    """A configuration at `batch` samples per call whose p95 per call is `p95` ms, timed one
    call at a time at that p95: throughput and per-sample latency follow from both."""
    throughput = 1000.0 * batch / p95
    metrics = {
        "accuracy": accuracy,
        "latency_p95_ms": p95,
        "throughput_per_s": throughput,
        "latency_per_sample_ms": 1000.0 / throughput,
        "energy_per_sample_j": 0.01,
    }
    return Candidate(trial_number=n, config={"batch.size": batch}, metrics=metrics, feasible=True)


def test_highest_throughput_is_not_lowest_latency() -> None:
    single = served(0, batch=1, p95=1.0)  # 1,000 samples/s, 1 ms a call
    batched = served(1, batch=64, p95=8.0)  # 8,000 samples/s, 8 ms a call
    middle = served(2, batch=8, p95=2.0)  # 4,000 samples/s
    front = [single, batched, middle]
    assert select(front, Selection(strategy="highest_throughput")) is batched
    assert select(front, Selection(strategy="lowest_latency")) is single
    assert selection_objective(Selection(strategy="highest_throughput").strategy) is THROUGHPUT


def test_throughput_ties_go_to_accuracy_then_the_earlier_trial() -> None:
    first, later = served(3, batch=8, p95=2.0), served(5, batch=8, p95=2.0)
    better = served(7, batch=8, p95=2.0, accuracy=0.95)
    highest = Selection(strategy="highest_throughput")
    assert select([later, first], highest) is first
    assert select([later, first, better], highest) is better


def test_throughput_is_maximized_and_per_sample_latency_minimized_on_a_front() -> None:
    single, batched = served(0, batch=1, p95=1.0), served(1, batch=64, p95=8.0)
    for objective in ("throughput", "latency_per_sample"):
        assert pareto_front([single, batched], [OBJECTIVES[objective]]) == [batched]
    assert pareto_front([single, batched], [OBJECTIVES["latency"]]) == [single]
    both = [OBJECTIVES["latency"], OBJECTIVES["throughput"]]
    assert pareto_front([single, batched], both) == [single, batched]


def test_weighted_selection_takes_either_view() -> None:
    single, batched = served(0, batch=1, p95=1.0), served(1, batch=64, p95=8.0)
    front = [single, batched]
    per_sample = Selection(strategy="weighted", weights={"latency_per_sample": 1.0, "latency": 0.5})
    assert select(front, per_sample) is batched
    per_call = Selection(strategy="weighted", weights={"throughput": 0.5, "latency": 1.0})
    assert select(front, per_call) is single


def test_a_record_without_per_sample_latency_has_it_derived() -> None:
    """Trials recorded before `latency_per_sample_ms` existed only hold the throughput."""
    old = [served(0, batch=1, p95=1.0), served(1, batch=64, p95=8.0)]
    for candidate in old:
        del candidate.metrics["latency_per_sample_ms"]
    per_sample = Selection(strategy="weighted", weights={"latency_per_sample": 1.0})
    assert select(old, per_sample) is old[1]
    assert pareto_front(old, [OBJECTIVES["latency_per_sample"]]) == [old[1]]


def test_select_rejects_empty_front() -> None:
    with pytest.raises(ValueError):
        select([], Selection())


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
