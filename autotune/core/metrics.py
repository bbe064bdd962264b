"""The metric registry: every metric autotune measures or derives, typed once; the objectives
(each with the selection strategy that ranks by it) and the bounds a request may set.

A `Metric` carries all its behaviour: its direction, the end of the batch-size range it
favours (`lean`), how a head-to-head round gives it (`round_reader`, or `from_variant` for a
figure the rounds do not re-measure) and, for a derived metric, how it is computed from a
trial's other figures and the study (`derive`). The request schema, Optuna's directions, the
constraint checks, the search's batch lean, the head-to-head decision and headline, the tuned
file, MLflow keys (the metric names), the CLI table, plots and replay defaults all read these
registries, so a new derived objective is one registration here.

A metric the data plane measures beyond the fixed fields of `TrialMetrics` and `RoundFigures`
names its figure meter (`meter`, `workers.measuring.figure_meter`) and is carried in their map
of measured figures (`autotune.core.contract.figures`), checked against this registry: such a
metric is one module (autotune's own in `autotune.core.measured`, loaded through the
`autotune.metrics` entry points at the end of this one) and its meter one module (the
`autotune.figure_meters` entry points, `workers.measuring.figure_meters`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from autotune.core.errors import RequestError
from autotune.core.plugins import METRICS_GROUP, load_plugins
from autotune.core.registry import Registry

if TYPE_CHECKING:
    from autotune.core.contract import RoundFigures


class Direction(StrEnum):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


# Units without a dimension: shown as the bare number.
DIMENSIONLESS = frozenset({"fraction", "ratio"})
# Which end of the batch-size range a metric favours: large batches for figures per sample
# (throughput, latency per sample, energy per sample), batch 1 for the p95 of one call.
Lean = Literal["per_sample", "per_call"]


@dataclass(frozen=True)
class Study:
    """What a derived metric may need besides a trial's own figures."""

    baseline_accuracy: float | None = None
    price_per_hour: float | None = None  # the request's `cost.price_per_hour`


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
    lean: Lean | None = None
    # This metric in one entrant's block of one head-to-head round.
    round_reader: Callable[[RoundFigures], float] | None = None
    # Depends on the model variant alone (precision, pruning): not re-measured in rounds.
    from_variant: bool = False
    # A derived metric from a trial's other figures and its study; None where it cannot be.
    derive: Callable[[Mapping[str, Any], Study], float | None] | None = None
    # The request field a study needs to derive this metric (e.g. "cost.price_per_hour").
    needs: str | None = None
    # Metrics of one measure (throughput and the time or cost per sample) are one objective.
    measure: str | None = None
    # The figure meter that measures it: the metric is carried in the map of measured figures
    # (`TrialMetrics.measured`, `RoundFigures.measured`), not in a fixed field.
    meter: str | None = None

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
# Selection strategy -> the objective it ranks the feasible front by.
SELECTIONS: Registry[str] = Registry("selection strategy")
BOUNDS: Registry[Bound] = Registry("bound")


def register_metric(metric: Metric) -> Metric:
    return METRICS.register(metric.name, metric)


def register_objective(name: str, metric: Metric, selection: str) -> Metric:
    """An objective a request may name, optimizing a registered metric, and the selection
    strategy that picks the front's best by it."""
    _check_registered(metric)
    SELECTIONS.register(selection, name)
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
        qualifier="accuracy_judged_by",
        from_variant=True,
    )
)
TOP1_AGREEMENT = register_metric(
    Metric(
        "top1_agreement",
        "fraction",
        Direction.MAXIMIZE,
        aggregation="share of the evaluation samples",
        description="the share of samples whose top-1 class is the unmodified model's, "
        "reported beside fidelity or a custom metric where the outputs look like class scores",
        label="top-1 agreement",
        number_format=".4f",
        from_variant=True,
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
        from_variant=True,
        derive=lambda m, study: (
            None
            if study.baseline_accuracy is None or "accuracy" not in m
            else study.baseline_accuracy - m["accuracy"]
        ),
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
        lean="per_call",
        round_reader=lambda f: f.latency_p50_ms,
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
        lean="per_call",
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
        lean="per_call",
        round_reader=lambda f: f.latency_p95_ms,
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
        lean="per_call",
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
        lean="per_sample",
        round_reader=lambda f: f.throughput_per_s,
        measure="time per sample",
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
        lean="per_sample",
        round_reader=lambda f: latency_per_sample_ms(f.throughput_per_s),
        derive=lambda m, study: (
            latency_per_sample_ms(float(m["throughput_per_s"])) if "throughput_per_s" in m else None
        ),
        measure="time per sample",
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
        lean="per_sample",
        round_reader=lambda f: f.energy_per_sample_j,
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
COST = register_metric(
    Metric(
        "cost_per_million_samples",
        "per 1M samples",
        Direction.MINIMIZE,
        aggregation="cost.price_per_hour / 3600 / throughput_per_s * 1e6",
        description="what a million samples cost at the configuration's throughput, at the "
        "request's price of an hour of the hardware (`cost.price_per_hour`)",
        label="cost per million samples",
        header="cost per\n1M samples",
        number_format=".4g",
        lean="per_sample",
        # The price is one constant for every entrant of a round: a paired ratio of cost is
        # the ratio of hours per million samples.
        round_reader=lambda f: hours_per_million(f.throughput_per_s),
        derive=lambda m, study: (
            None
            if study.price_per_hour is None or "throughput_per_s" not in m
            else study.price_per_hour * hours_per_million(float(m["throughput_per_s"]))
        ),
        needs="cost.price_per_hour",
        measure="time per sample",
    )
)

# `latency` is per call (one batch: what a caller serving single requests waits);
# `latency_per_sample` and `throughput` are per sample (what serving batches costs), two views
# of one measure. Their order is the order of the CLI's front table.
register_objective("accuracy", ACCURACY, selection="highest_accuracy")
register_objective("latency", LATENCY_P95, selection="lowest_latency")
register_objective("latency_per_sample", LATENCY_PER_SAMPLE, "lowest_latency_per_sample")
register_objective("throughput", THROUGHPUT, selection="highest_throughput")
register_objective("energy", ENERGY, selection="lowest_energy")
register_objective("cost", COST, selection="lowest_cost")

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
register_bound(
    Bound("max_cost_per_million_samples", COST, BoundKind.UPPER, 1e12, "at cost.price_per_hour")
)


def constraint_violations(
    bounds: Mapping[str, float], metrics: Mapping[str, Any]
) -> dict[str, float]:
    """Each bound (constraint name -> bound) as Optuna wants it: a value <= 0 means met. A bound
    on a figure the trial does not carry (a replay table without its column) is a request error."""
    unmeasured = next((n for n in bounds if BOUNDS[n].metric.name not in metrics), None)
    if unmeasured is not None:
        metric = BOUNDS[unmeasured].metric.name
        raise RequestError(f"constraints.{unmeasured}", "must bound a measured metric", metric)
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


def hours_per_million(throughput_per_s: float) -> float:
    """Hours the hardware takes for a million samples at this throughput."""
    return 1e6 / 3600.0 / throughput_per_s if throughput_per_s > 0 else math.inf


def derived(metrics: Mapping[str, Any], study: Study) -> dict[str, Any]:
    """`metrics` with every derived metric the figures and the study allow (`Metric.derive`),
    in registration order."""
    figures = dict(metrics)
    for metric in METRICS.values():
        if metric.derive is None:
            continue
        value = metric.derive(figures, study)
        if value is not None:
            figures[metric.name] = value
    return figures


def with_derived(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """`metrics` with what derives from a trial's own figures alone where it is missing (a
    record made before that metric existed)."""
    figures = dict(metrics)
    for metric in METRICS.values():
        if metric.derive is not None and figures.get(metric.name) is None:
            value = metric.derive(figures, Study())
            if value is not None:
                figures[metric.name] = value
    return figures


def measured_only(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's metrics without those derived from its study's baseline: what it measured,
    valid against another study's baseline too."""
    return {k: v for k, v in metrics.items() if not _against_baseline(k)}


def _against_baseline(name: str) -> bool:
    metric = METRICS.get(name)
    return metric is not None and metric.against_baseline


def variant_quality(metrics: Mapping[str, Any]) -> dict[str, float | str]:
    """What a trial measured of its model variant's quality besides its accuracy (measured once
    a variant, and told to the variant's later trials with the accuracy)."""
    names = [
        metric.name
        for metric in METRICS.values()
        if metric.from_variant and metric.derive is None and metric is not ACCURACY
    ]
    names.append(str(ACCURACY.qualifier))
    return {name: metrics[name] for name in names if metrics.get(name) is not None}


def selection_objective(strategy: str) -> Metric:
    """The metric a selection strategy ranks by (latency per call for a weighted choice)."""
    return OBJECTIVES[SELECTIONS.get(strategy, "latency")]


def mapped_metrics() -> dict[str, Metric]:
    """The metrics carried in the map of measured figures: those that name their meter."""
    return {metric.name: metric for metric in METRICS.values() if metric.meter is not None}


load_plugins(METRICS_GROUP)
