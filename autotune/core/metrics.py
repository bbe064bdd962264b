"""The metric registry: every metric autotune measures or derives, typed once (name, unit,
direction, aggregation), and the two registries built on it: the objectives a request may
optimize and the bounds a request may set. The request schema, Optuna's directions, the
constraint checks, the tuned file, MLflow keys (the metric names), the CLI table, plots and
replay defaults all read these registries, so adding an objective is one registration here
(plus the meter that produces the metric)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

T = TypeVar("T")


class Direction(StrEnum):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


class Registry(Mapping[str, T]):
    """Named entries in registration order; a name is registered once."""

    def __init__(self, kind: str) -> None:
        self._kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self._kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> T:
        if name not in self._entries:
            raise KeyError(f"{self._kind} {name!r} is not registered")
        return self._entries.pop(name)

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


# Units without a dimension: shown as the bare number.
DIMENSIONLESS = frozenset({"fraction", "ratio"})


@dataclass(frozen=True)
class Metric:
    name: str  # also the key in trial records, the tuned file and MLflow
    unit: str
    direction: Direction
    aggregation: str  # how one trial's samples become this one figure
    description: str
    label: str  # a few words for tables, axes and headlines
    number_format: str = ".4g"
    # A table column's header (two short lines); the label where none is given.
    header: str | None = None
    # A text field reported right after this metric that says how it was obtained.
    qualifier: str | None = None
    # What a record that leaves the metric out (a replayed table) stands for: nothing measured.
    unrecorded: float | None = None
    # Derived from the study's baseline: not part of what a trial measured on its own.
    against_baseline: bool = False

    def shown(self, value: float) -> str:
        """The value as tables show it under a header that names the unit."""
        return format(value, self.number_format)

    def with_unit(self, value: float) -> str:
        return (
            self.shown(value) if self.unit in DIMENSIONLESS else f"{self.shown(value)} {self.unit}"
        )

    @property
    def column(self) -> str:
        return self.header or self.label

    @property
    def axis_label(self) -> str:
        return f"{self.name} ({self.unit})"


class BoundKind(StrEnum):
    UPPER = "upper"
    LOWER = "lower"


@dataclass(frozen=True)
class Bound:
    """A constraint a request may set: a bound on one metric."""

    name: str  # the request's field under `constraints`
    metric: Metric
    kind: BoundKind
    limit: float  # the largest bound a request may give
    description: str
    zero_allowed: bool = False  # whether 0 is a valid bound (else it must be > 0)

    def violation(self, bound: float, value: float) -> float:
        """How far `value` is beyond `bound`; <= 0 means the bound is met."""
        return value - bound if self.kind is BoundKind.UPPER else bound - value


METRICS: Registry[Metric] = Registry("metric")
OBJECTIVES: Registry[Metric] = Registry("objective")
BOUNDS: Registry[Bound] = Registry("bound")


def register_metric(metric: Metric) -> Metric:
    return METRICS.register(metric.name, metric)


def register_objective(name: str, metric: Metric) -> Metric:
    """An objective a request may name, optimizing a registered metric."""
    _check_registered(metric)
    return OBJECTIVES.register(name, metric)


def register_bound(bound: Bound) -> Bound:
    _check_registered(bound.metric)
    return BOUNDS.register(bound.name, bound)


def _check_registered(metric: Metric) -> None:
    if METRICS.get(metric.name) is not metric:
        raise ValueError(f"metric {metric.name!r} must be registered first")


def get_metric(name: str) -> Metric:
    return METRICS[name]


ACCURACY = register_metric(
    Metric(
        "accuracy",
        "fraction",
        Direction.MAXIMIZE,
        aggregation="the quality metric over the evaluation samples",
        description="the request's quality metric (top-1, fidelity or the user's)",
        label="accuracy",
        number_format=".4f",
    )
)
ACCURACY_DROP = register_metric(
    Metric(
        "accuracy_drop",
        "fraction",
        Direction.MINIMIZE,
        aggregation="baseline accuracy minus accuracy",
        description="how much accuracy the configuration loses against the study's baseline",
        label="accuracy drop",
        number_format=".4f",
        against_baseline=True,
    )
)
LATENCY_P50 = register_metric(
    Metric(
        "latency_p50_ms",
        "ms",
        Direction.MINIMIZE,
        aggregation="p50 of per-call latencies",
        description="median latency of one call (one batch)",
        label="p50 latency per call",
        number_format=".3f",
    )
)
LATENCY_P90 = register_metric(
    Metric(
        "latency_p90_ms",
        "ms",
        Direction.MINIMIZE,
        aggregation="p90 of per-call latencies",
        description="p90 latency of one call (one batch)",
        label="p90 latency per call",
        number_format=".3f",
    )
)
LATENCY_P95 = register_metric(
    Metric(
        "latency_p95_ms",
        "ms",
        Direction.MINIMIZE,
        aggregation="p95 of per-call latencies",
        description="p95 latency of one call (one batch)",
        label="p95 latency per call",
        header="p95 ms\nper call",
        number_format=".3f",
    )
)
LATENCY_P99 = register_metric(
    Metric(
        "latency_p99_ms",
        "ms",
        Direction.MINIMIZE,
        aggregation="p99 of per-call latencies",
        description="p99 latency of one call (one batch)",
        label="p99 latency per call",
        number_format=".3f",
    )
)
LATENCY_CV = register_metric(
    Metric(
        "latency_cv",
        "ratio",
        Direction.MINIMIZE,
        aggregation="std / mean of per-call latencies",
        description="the spread of the timed latencies",
        label="latency spread",
        number_format=".3f",
        unrecorded=0.0,
    )
)
THROUGHPUT = register_metric(
    Metric(
        "throughput_per_s",
        "samples/s",
        Direction.MAXIMIZE,
        aggregation="samples over the timed seconds",
        description="samples per second at the configuration's batch size",
        label="throughput",
        header="samples\nper s",
        number_format=".0f",
    )
)
LATENCY_PER_SAMPLE = register_metric(
    Metric(
        "latency_per_sample_ms",
        "ms",
        Direction.MINIMIZE,
        aggregation="1000 / throughput_per_s",
        description="milliseconds per sample at the configuration's batch size",
        label="latency per sample",
        header="ms per\nsample",
        number_format=".4g",
    )
)
ENERGY = register_metric(
    Metric(
        "energy_per_sample_j",
        "J",
        Direction.MINIMIZE,
        aggregation="mean per sample",
        description="energy per inferred sample",
        label="energy per sample",
        header="J per\nsample",
        number_format=".2e",
        qualifier="energy_source",
        unrecorded=0.0,
    )
)
PEAK_MEMORY = register_metric(
    Metric(
        "peak_memory_mb",
        "MiB",
        Direction.MINIMIZE,
        aggregation="peak over the trial",
        description="peak memory of the trial",
        label="peak memory",
        number_format=".1f",
        unrecorded=0.0,
    )
)

# `latency` is per call (one batch: what a caller serving single requests waits);
# `latency_per_sample` and `throughput` are per sample (what serving batches costs), two views
# of one measure. Their order is the order of the CLI's front table.
register_objective("accuracy", ACCURACY)
register_objective("latency", LATENCY_P95)
register_objective("latency_per_sample", LATENCY_PER_SAMPLE)
register_objective("throughput", THROUGHPUT)
register_objective("energy", ENERGY)

# The largest bounds a request may give: generous, but finite, so that no number overflows a
# database column. A week in milliseconds, as contract.MAX_SECONDS.
MAX_MS = 7 * 24 * 3600 * 1000.0

register_bound(
    Bound(
        "max_accuracy_drop",
        ACCURACY_DROP,
        BoundKind.UPPER,
        1e6,  # in the quality metric's own units (a custom metric's may be large)
        "absolute drop against the baseline, e.g. 0.01 = 1 point",
        zero_allowed=True,
    )
)
register_bound(Bound("max_latency_p95_ms", LATENCY_P95, BoundKind.UPPER, MAX_MS, "per call"))
register_bound(
    Bound(
        "max_latency_per_sample_ms",
        LATENCY_PER_SAMPLE,
        BoundKind.UPPER,
        MAX_MS,
        "per sample: 1000 / throughput_per_s",
    )
)
register_bound(
    Bound("max_energy_per_sample_j", ENERGY, BoundKind.UPPER, 1e6, "energy per sample, J")
)
register_bound(Bound("max_memory_mb", PEAK_MEMORY, BoundKind.UPPER, 1e9, "peak memory, MiB"))
register_bound(
    Bound("min_throughput_per_s", THROUGHPUT, BoundKind.LOWER, 1e12, "samples per second")
)


def constraint_violations(
    bounds: Mapping[str, float], metrics: Mapping[str, Any]
) -> dict[str, float]:
    """Each bound (constraint name -> bound) as Optuna wants it: a value <= 0 means met."""
    return {
        name: BOUNDS[name].violation(bound, float(metrics[BOUNDS[name].metric.name]))
        for name, bound in bounds.items()
    }


def reported_metrics() -> tuple[str, ...]:
    """What the tuned file shows of a trial's metrics, in order: every registered metric,
    each followed by its qualifier."""
    names: list[str] = []
    for metric in METRICS.values():
        names.append(metric.name)
        if metric.qualifier is not None:
            names.append(metric.qualifier)
    return tuple(names)


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


def with_accuracy_drop(measured: Mapping[str, Any], baseline_accuracy: float) -> dict[str, Any]:
    """A trial's measured metrics with what they are against the study's baseline."""
    drop = float(baseline_accuracy) - float(measured[ACCURACY.name])
    return {**measured, ACCURACY_DROP.name: drop}


def measured_only(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's metrics without those derived from its study's baseline: what it measured,
    valid against another study's baseline too."""
    return {k: v for k, v in metrics.items() if not _against_baseline(k)}


def _against_baseline(name: str) -> bool:
    metric = METRICS.get(name)
    return metric is not None and metric.against_baseline
