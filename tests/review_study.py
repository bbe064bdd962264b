"""The study the review's tests look at (test_review.py, the report's, the description's, the
view's and the tracker's): five trials, two on the front, one infeasible, the baseline off the
front; its cloud of points, the chosen trial's tuned file and the request."""

from __future__ import annotations

from autotune.core.metrics import OBJECTIVES
from autotune.results.records import Candidate
from autotune.tracking.review import points

OBJECTIVE_METRICS = [OBJECTIVES["accuracy"], OBJECTIVES["latency"], OBJECTIVES["energy"]]


def candidate(number: int, accuracy: float, latency: float, feasible: bool = True) -> Candidate:
    metrics = {
        "accuracy": accuracy,
        "latency_p95_ms": latency,
        "energy_per_sample_j": latency / 100,
        "throughput_per_s": 1000 / latency,
        "accuracy_drop": 0.99 - accuracy,
        "energy_source": "estimate",
    }
    return Candidate(number, {"batch.size": 2**number}, metrics, feasible)


CANDIDATES = [
    candidate(0, 0.99, 2.0),  # the baseline, off the front
    candidate(1, 0.99, 0.5),
    candidate(2, 0.98, 0.05),
    candidate(3, 0.90, 0.01, feasible=False),
    candidate(4, 0.97, 0.9),
]
FRONT = [CANDIDATES[1], CANDIDATES[2]]
CLOUD = points(CANDIDATES, FRONT, baseline=0, chosen=2)

# The chosen trial's figures head to head differ from its search figures (p95 0.07, 0.05).
CHOSEN_HEAD_TO_HEAD = {**CANDIDATES[2].metrics, "latency_p95_ms": 0.07}
TUNED = {
    "config": {"batch.size": 4, "runtime.engine": "onnxruntime"},
    "metrics": CHOSEN_HEAD_TO_HEAD,
    "baseline": CANDIDATES[0].metrics,
    "headline": {"text": "40× lower p95 latency per call (95% CI 31–52×); 10 paired rounds"},
    "study": {"trial_number": 2},
    "revalidation": {
        "rounds": 10,
        "chosen": 2,
        "baseline_trial": 0,
        "confirmation": CHOSEN_HEAD_TO_HEAD,
        "chosen_because": "lowest latency among the finalists beyond the noise",
    },
    "constraints": {
        "max_accuracy_drop": {"bound": 0.01, "value": 0.01, "met": True},
        "max_latency_p95_ms": {"bound": 2.0, "value": 0.07, "met": True},
    },
}
REQUEST = {
    "model": {"onnx": "models/net.onnx"},
    "objectives": ["accuracy", "latency", "energy"],
    "constraints": {"max_accuracy_drop": 0.01, "max_latency_p95_ms": 2.0},
    "selection": {"strategy": "lowest_latency"},
}
