"""Typed metric definitions: one place that drives Optuna directions, MLflow keys and reports."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Direction(StrEnum):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    direction: Direction
    description: str


_METRICS: dict[str, Metric] = {}


def register_metric(metric: Metric) -> Metric:
    if metric.name in _METRICS:
        raise ValueError(f"metric {metric.name!r} is already registered")
    _METRICS[metric.name] = metric
    return metric


def get_metric(name: str) -> Metric:
    return _METRICS[name]


def all_metrics() -> dict[str, Metric]:
    return dict(_METRICS)


ACCURACY = register_metric(
    Metric("accuracy", "fraction", Direction.MAXIMIZE, "the request's quality metric")
)
ACCURACY_DROP = register_metric(
    Metric("accuracy_drop", "fraction", Direction.MINIMIZE, "baseline accuracy minus accuracy")
)
LATENCY_P50 = register_metric(
    Metric("latency_p50_ms", "ms", Direction.MINIMIZE, "median latency of one batch")
)
LATENCY_P90 = register_metric(Metric("latency_p90_ms", "ms", Direction.MINIMIZE, "p90 latency"))
LATENCY_P95 = register_metric(Metric("latency_p95_ms", "ms", Direction.MINIMIZE, "p95 latency"))
LATENCY_P99 = register_metric(Metric("latency_p99_ms", "ms", Direction.MINIMIZE, "p99 latency"))
LATENCY_CV = register_metric(
    Metric("latency_cv", "ratio", Direction.MINIMIZE, "std/mean of the timed latencies")
)
THROUGHPUT = register_metric(
    Metric("throughput_per_s", "samples/s", Direction.MAXIMIZE, "samples per second")
)
ENERGY = register_metric(
    Metric("energy_per_sample_j", "J", Direction.MINIMIZE, "energy per inferred sample")
)
PEAK_MEMORY = register_metric(
    Metric("peak_memory_mb", "MiB", Direction.MINIMIZE, "peak memory of the trial")
)

# The objectives a request may name, mapped to the metric each one optimizes.
OBJECTIVES: dict[str, Metric] = {
    "accuracy": ACCURACY,
    "latency": LATENCY_P95,
    "energy": ENERGY,
}
