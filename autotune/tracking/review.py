"""What a person reviewing a study in MLflow sees of its trials: the points of the Pareto report
(`autotune.tracking.pareto_report`) and its axes, the marks and colours of the trials' runs,
and their key figures rounded to the digits they are shown with. The parent run's description
is `autotune.tracking.note`, the runs table's saved view `autotune.tracking.view`.

Points are coloured by kind: on the feasible front, feasible, or infeasible; the baseline and
the chosen configuration are marked. An axis fits the feasible points (`fit_scale`); it is
logarithmic where they span more than a factor of ten.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.core.metrics import METRICS, OBJECTIVES, Metric
from autotune.results.records import Candidate

# kind -> (legend label, colour)
KINDS = {
    "front": ("Pareto front (feasible)", "#dd8452"),
    "feasible": ("feasible", "#4c72b0"),
    "infeasible": ("infeasible (a constraint not met)", "#b0b0b0"),
}
# A log axis where the largest value is more than this many times the smallest.
LOG_SPAN = 10.0
# The marks of a trial's run beyond its kind: the chosen configuration and the baseline.
CHOSEN_COLOUR, BASELINE_COLOUR = "#cc0000", "#000000"
# The study's own run in MLflow's table and charts: a colour no trial has.
STUDY_COLOUR = "#8172b3"


@dataclass(frozen=True)
class Point:
    candidate: Candidate
    kind: str  # a key of KINDS
    baseline: bool
    chosen: bool

    @property
    def number(self) -> int:
        return self.candidate.trial_number

    @property
    def roles(self) -> list[str]:
        return [r for r, on in (("chosen", self.chosen), ("baseline", self.baseline)) if on]

    @property
    def colour(self) -> str:
        """The colour of its run in MLflow's table and charts: the chosen one red, the baseline
        black, else its kind's colour (the report's)."""
        if self.chosen:
            return CHOSEN_COLOUR
        return BASELINE_COLOUR if self.baseline else KINDS[self.kind][1]


def points(
    candidates: Sequence[Candidate],
    front: Sequence[Candidate],
    baseline: int | None,
    chosen: int | None,
) -> list[Point]:
    on_front = {c.trial_number for c in front}
    return [
        Point(
            c,
            "front" if c.trial_number in on_front else "feasible" if c.feasible else "infeasible",
            c.trial_number == baseline,
            c.trial_number == chosen,
        )
        for c in candidates
    ]


# Figures shown beside the objectives wherever a trial is summed up.
KEY_FIGURES = ("throughput_per_s", "accuracy_drop")


def key_figures(objectives: Sequence[Metric]) -> list[str]:
    """The objectives' metric names, then the key figures they leave out."""
    names = [m.name for m in objectives]
    return names + [name for name in KEY_FIGURES if name not in names]


# A trial's key figures are logged a second time under this prefix, rounded to the digits
# tables show (MLflow's table shows a float's every digit and cuts what does not fit); the
# exact figure stays under its own name. The "/" puts them in their own section of charts.
ROUNDED_PREFIX = "rounded/"
ROUNDED = tuple(dict.fromkeys([*(m.name for m in OBJECTIVES.values()), *KEY_FIGURES]))


def rounded(name: str) -> str:
    return ROUNDED_PREFIX + name


def rounded_figures(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Each key figure among `metrics` as its table shows it (the metric's number format:
    0.9844 for 0.984444…, 0.125 ms, 5.57e-05 J), under `rounded/NAME`."""
    return {
        rounded(name): float(METRICS[name].shown(float(value)))
        for name, value in metrics.items()
        if name in ROUNDED and isinstance(value, int | float) and not isinstance(value, bool)
    }


def shown_metrics(objectives: Sequence[Metric], selection: str | None) -> list[Metric]:
    """The study's objectives, and throughput where the selection asks for it."""
    shown = list(objectives)
    if selection == "highest_throughput" and OBJECTIVES["throughput"] not in shown:
        shown.append(OBJECTIVES["throughput"])
    return shown


def pairs(metrics: Sequence[Metric]) -> list[tuple[Metric, Metric]]:
    """Every pair of the metrics, the first on x (latency-like on x reads best)."""
    return list(itertools.combinations(metrics, 2))


def log_axis(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) == len(values) and bool(values) and max(values) > LOG_SPAN * min(values)


# -- the axes of the Pareto report (autotune.tracking.pareto_report) ----------------------

# Values beyond the fitted region by less than this share of its span are taken in.
NEAR_SHARE = 0.25
# The margin on each side of an axis, as a share of the span it shows.
PAD_SHARE = 0.06
# The region's outliers: beyond this many interquartile ranges from its quartiles.
FAR_IQR = 3.0


@dataclass(frozen=True)
class Scale:
    """An axis from `lo` to `hi` in its own units: the value's, or its log10 on a log axis."""

    lo: float
    hi: float
    log: bool = False

    def at(self, value: float) -> float:
        if not self.log:
            return value
        return math.log10(value) if value > 0 else -math.inf

    def side(self, value: float) -> int:
        """-1 where `value` lies below the axis, 1 above it, 0 on it."""
        at = self.at(value)
        return -1 if at < self.lo else 1 if at > self.hi else 0

    def pixel(self, value: float, low_px: float, high_px: float) -> float:
        """Where `value` is drawn between the pixels of the axis's two ends (at the end
        beyond which it lies)."""
        share = (min(max(self.at(value), self.lo), self.hi) - self.lo) / (self.hi - self.lo)
        return low_px + share * (high_px - low_px)

    @property
    def bounds(self) -> tuple[float, float]:
        """The values at the axis's two ends."""
        return (10**self.lo, 10**self.hi) if self.log else (self.lo, self.hi)

    def clip(self, value: float) -> float:
        lo, hi = self.bounds
        return min(max(value, lo), hi)


def fit_scale(
    values: Sequence[float], region: Sequence[float] = (), keep: Sequence[float] = ()
) -> Scale:
    """An axis for `values` that shows the `region` (the feasible points' values) and those
    to `keep` (the front's, the chosen and the baseline's), so that a few points far off do
    not squash the rest: the region's far outliers (beyond three interquartile ranges) are
    left out, values just beyond it are taken in, and a margin is added. Values outside lie
    off the scale. Where the region and the kept values are not two distinct values, it fits
    all."""
    fit = [*region, *keep]
    if len(set(fit)) < 2:
        region, keep, fit = values, (), list(values)
    if not fit:
        return Scale(0.0, 1.0)
    log = log_axis(fit)
    shown = _inliers(region, Scale(0.0, 1.0, log).at) + list(keep)
    if log and not log_axis(shown):  # the span came from outliers
        log, shown = False, _inliers(region, float) + list(keep)
    at = Scale(0.0, 1.0, log).at
    lo, hi = min(map(at, shown)), max(map(at, shown))
    if hi == lo:
        lo, hi = lo - (abs(lo) * 0.01 or 1.0), hi + (abs(hi) * 0.01 or 1.0)
    near = NEAR_SHARE * (hi - lo)
    every = [at(v) for v in values]
    lo = min([lo, *(v for v in every if lo - near <= v < lo)])
    hi = max([hi, *(v for v in every if hi < v <= hi + near)])
    pad = PAD_SHARE * (hi - lo)
    return Scale(lo - pad, hi + pad, log)


def _inliers(values: Sequence[float], at: Callable[[float], float]) -> list[float]:
    """The values but the far outliers (in the axis's units `at`) where there are 5 or more."""
    if len(values) < 5:
        return list(values)
    q1, _, q3 = statistics.quantiles(map(at, values), n=4, method="inclusive")
    reach = FAR_IQR * (q3 - q1)
    if reach <= 0:
        return list(values)
    return [v for v in values if q1 - reach <= at(v) <= q3 + reach]


def ticks(scale: Scale, most: int = 6) -> list[float]:
    """Round values on the axis, at most `most` (at least 2): 1, 2, 2.5 or 5 times a power of
    ten apart, about five of them; on a log axis decades (every other one where there are
    many), with 2 and 5 between where it spans less than three, and round values on a linear
    step where it spans less than a factor of about three."""
    if not scale.log:
        return _linear_ticks(scale.lo, scale.hi, most)
    tolerance = 1e-9
    decades = list(range(math.ceil(scale.lo - tolerance), math.floor(scale.hi + tolerance) + 1))
    if len(decades) >= 3:
        every = math.ceil(len(decades) / most)
        return [10.0**k for k in decades if k % every == 0] or [10.0 ** decades[0]]
    for steps in ((1, 2, 5), (1, 3)):
        within = [
            float(f"{m * 10.0**k:.12g}")
            for k in range(math.floor(scale.lo) - 1, math.ceil(scale.hi) + 1)
            for m in steps
            if scale.lo - tolerance <= math.log10(m) + k <= scale.hi + tolerance
        ]
        if 3 <= len(within) <= most:
            return within
    return _linear_ticks(*scale.bounds, min(most, 5))


def _linear_ticks(lo: float, hi: float, most: int) -> list[float]:
    target, span = min(5, most), hi - lo
    best: tuple[float, float, int, int] | None = None
    top = math.floor(math.log10(span)) if span > 0 else 0
    for power in range(top - 2, top + 2):
        for mantissa in (1.0, 2.0, 2.5, 5.0):
            step = mantissa * 10.0**power
            first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
            count = last - first + 1
            if 2 <= count <= max(most, 2):
                # the closest count to the target, then steps of 1, 2 or 5, then the widest
                score = abs(count - target) + (0.5 if mantissa == 2.5 else 0.0)
                if best is None or (score, -step) < (best[0], -best[1]):
                    best = (score, step, first, last)
    if best is None:
        return [lo, hi]
    _, step, first, last = best
    return [float(f"{k * step:.12g}") for k in range(first, last + 1)]


def tick_labels(values: Sequence[float], log: bool = False) -> list[str]:
    """The ticks' labels, as short as they can be: one number of decimals on a linear axis
    (0.980, 0.985), each its own on a log axis (0.01, 0.1, 1); 5e-5 where the values are tiny
    or huge (every label of a log axis that has one)."""
    if log:
        tiny = bool(values) and (min(values) < 1e-3 or max(values) >= 1e6)
        return [_label(v, _decimals([v]), tiny) for v in values]
    largest = max((abs(v) for v in values), default=0.0)
    tiny = largest >= 1e6 or 0 < largest < 1e-3
    decimals = _decimals(values)
    return [_label(v, decimals, tiny) for v in values]


def _decimals(values: Sequence[float]) -> int:
    largest = max((abs(v) for v in values), default=0.0) or 1.0
    return next(
        (d for d in range(13) if all(abs(round(v, d) - v) <= 1e-9 * largest for v in values)),
        12,
    )


def _label(value: float, decimals: int, scientific: bool) -> str:
    if value == 0:
        return "0"
    if scientific:
        mantissa, _, power = format(value, ".2e").partition("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(power)}"
    return f"{value:.{decimals}f}"


@dataclass(frozen=True)
class Placed:
    """A point of one plot: its values, which side of each axis it lies beyond (-1 below, 1
    above, 0 within), and where it is drawn (at the edge where it lies beyond)."""

    point: Point
    x: float
    y: float
    x_side: int
    y_side: int
    px: float = 0.0
    py: float = 0.0

    @property
    def off_scale(self) -> bool:
        return bool(self.x_side or self.y_side)


def value(point: Point, metric: Metric) -> float | None:
    """The trial's figure for `metric`, or None where it has none (not measured, NaN)."""
    figure = point.candidate.metrics.get(metric.name)
    if not isinstance(figure, int | float) or isinstance(figure, bool):
        return None
    return float(figure) if math.isfinite(figure) else None


def plot_scales(cloud: Sequence[Point], x: Metric, y: Metric) -> tuple[Scale, Scale, list[Placed]]:
    """The two axes of a plot, each fitted to its feasible points (the front's, the chosen and
    the baseline always shown), and the points that have both figures, with the side of each
    axis they lie beyond."""
    both = [
        (p, vx, vy)
        for p in cloud
        if (vx := value(p, x)) is not None and (vy := value(p, y)) is not None
    ]
    sx, sy = (
        fit_scale(
            [v for _, v in column],
            [v for p, v in column if p.candidate.feasible],
            [v for p, v in column if p.roles or p.kind == "front"],
        )
        for column in ([(p, vx) for p, vx, _ in both], [(p, vy) for p, _, vy in both])
    )
    return sx, sy, [Placed(p, vx, vy, sx.side(vx), sy.side(vy)) for p, vx, vy in both]


# -- what the Pareto report's details panel reads -----------------------------------------


def panel_data(cloud: Sequence[Point], metrics: Sequence[Metric]) -> dict[str, Any]:
    """Each trial's heading, configuration and figures as the panel lists them, by trial
    number; settings and figures without a value are left out."""
    first = key_figures(metrics)
    return {
        str(p.number): {
            "heading": heading(p),
            "config": [
                [key, str(setting)]
                for key, setting in sorted(p.candidate.config.items())
                if setting is not None
            ],
            "figures": _figures(p.candidate.metrics, first),
        }
        for p in cloud
    }


def heading(point: Point) -> str:
    return f"trial {point.number} ({', '.join([KINDS[point.kind][0], *point.roles])})"


def _figures(metrics: dict[str, Any], first: Sequence[str]) -> list[list[str]]:
    order = {name: i for i, name in enumerate(first)}
    names = sorted(metrics, key=lambda n: (order.get(n, len(order)), n))
    shown = [
        (name, shown_figure(name, metrics[name]))
        for name in names
        if not name.startswith("contention.")
    ]
    return [[name, text] for name, text in shown if text]


def shown_figure(name: str, figure: Any) -> str:
    """A figure as the panel shows it (with its metric's unit and digits); '' for none."""
    if isinstance(figure, bool | str):
        return str(figure)
    if isinstance(figure, int | float):
        if not math.isfinite(figure):
            return ""
        metric = METRICS.get(name)
        return metric.with_unit(float(figure)) if metric else format(figure, ".4g")
    if (
        isinstance(figure, list | tuple)
        and figure
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in figure)
    ):
        return "–".join(shown_figure(name, v) for v in figure)
    return ""
