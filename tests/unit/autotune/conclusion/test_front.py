import pytest

from autotune.conclusion.front import select
from autotune.core.metrics import OBJECTIVES, THROUGHPUT, selection_objective
from autotune.requests.request import Selection
from autotune.results.records import Candidate
from autotune.search.front import pareto_front


def cand(n: int, accuracy: float, latency: float, energy: float = 1.0) -> Candidate:
    metrics = {"accuracy": accuracy, "latency_p95_ms": latency, "energy_per_sample_j": energy}
    return Candidate(trial_number=n, config={"n": n}, metrics=metrics, feasible=True)


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
