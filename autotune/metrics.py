"""Typed metric definitions: one place that drives Optuna directions, MLflow keys and reports."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


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
LATENCY_P95 = register_metric(
    Metric("latency_p95_ms", "ms", Direction.MINIMIZE, "p95 latency of one call (one batch)")
)
LATENCY_P99 = register_metric(Metric("latency_p99_ms", "ms", Direction.MINIMIZE, "p99 latency"))
LATENCY_CV = register_metric(
    Metric("latency_cv", "ratio", Direction.MINIMIZE, "std/mean of the timed latencies")
)
THROUGHPUT = register_metric(
    Metric("throughput_per_s", "samples/s", Direction.MAXIMIZE, "samples per second")
)
LATENCY_PER_SAMPLE = register_metric(
    Metric(
        "latency_per_sample_ms",
        "ms",
        Direction.MINIMIZE,
        "milliseconds per sample at the configuration's batch size: 1000 / throughput_per_s",
    )
)
ENERGY = register_metric(
    Metric("energy_per_sample_j", "J", Direction.MINIMIZE, "energy per inferred sample")
)
PEAK_MEMORY = register_metric(
    Metric("peak_memory_mb", "MiB", Direction.MINIMIZE, "peak memory of the trial")
)

# The objectives a request may name, mapped to the metric each one optimizes. `latency` is
# per call (one batch: what a caller serving single requests waits); `latency_per_sample` and
# `throughput` are per sample (what serving batches costs), two views of one measure.
OBJECTIVES: dict[str, Metric] = {
    "accuracy": ACCURACY,
    "latency": LATENCY_P95,
    "latency_per_sample": LATENCY_PER_SAMPLE,
    "throughput": THROUGHPUT,
    "energy": ENERGY,
}


def latency_per_sample_ms(throughput_per_s: float) -> float:
    """Milliseconds per sample at the batch size the throughput was measured at."""
    return 1000.0 / throughput_per_s if throughput_per_s > 0 else math.inf


def with_derived(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """`metrics` with `latency_per_sample_ms` derived from `throughput_per_s` where it is
    missing (a record made before that metric existed)."""
    derived = dict(metrics)
    if derived.get(LATENCY_PER_SAMPLE.name) is None and THROUGHPUT.name in derived:
        derived[LATENCY_PER_SAMPLE.name] = latency_per_sample_ms(float(derived[THROUGHPUT.name]))
    return derived
