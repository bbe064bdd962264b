"""What a person reviewing a study in MLflow sees of its trials: the Pareto report, every pair
of objectives as linked scatter plots in one self-contained HTML file (a static PNG of the same
for viewers that run no scripts), the marks and colours of the trials' runs, and their key
figures rounded to the digits they are shown with. The parent run's description is
`autotune.tracking.note`, the runs table's saved view `autotune.tracking.view`.

Points are coloured by kind: on the feasible front, feasible, or infeasible; the baseline and
the chosen configuration are marked. Axes are logarithmic where the values span more than a
factor of ten.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
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


def _values(cloud: Sequence[Point], metric: Metric) -> list[float]:
    return [float(p.candidate.metrics[metric.name]) for p in cloud]


# -- the HTML report ---------------------------------------------------------------------

_WIDTH, _HEIGHT, _MARGIN = 360, 300, 48


def pareto_html(
    cloud: Sequence[Point], metrics: Sequence[Metric], title: str, lines: Sequence[str] = ()
) -> str:
    """One page, no external resources: a scatter plot per pair of `metrics`, a point per
    trial that has figures. Hovering a point shows its trial's configuration and figures and
    highlights the same trial in every plot."""
    plots = "\n".join(_svg(cloud, x, y) for x, y in pairs(metrics))
    legend = " ".join(
        f'<span class="key"><svg width="12" height="12"><circle cx="6" cy="6" r="5" '
        f'fill="{colour}"/></svg> {html.escape(label)}</span>'
        for label, colour in KINDS.values()
    )
    marks = (
        '<span class="key"><svg width="14" height="14"><rect x="1" y="1" width="12" height="12" '
        'fill="none" stroke="#000" stroke-width="2"/></svg> baseline (the unmodified model)</span>'
        ' <span class="key"><svg width="16" height="16"><circle cx="8" cy="8" r="7" fill="none" '
        'stroke="#c00" stroke-width="3"/></svg> chosen</span>'
    )
    intro = "".join(f"<p>{html.escape(line)}</p>" for line in lines)
    return _PAGE.format(
        title=html.escape(title), intro=intro, legend=legend, marks=marks, plots=plots
    )


def _svg(cloud: Sequence[Point], x: Metric, y: Metric) -> str:
    xs, ys = _values(cloud, x), _values(cloud, y)
    to_x = _scale(xs, _MARGIN, _WIDTH - 12)
    to_y = _scale(ys, _HEIGHT - _MARGIN + 8, 12)
    shapes = []
    # the chosen and baseline points drawn last, on top
    for point in sorted(cloud, key=lambda p: (p.chosen or p.baseline, p.kind == "front")):
        cx = to_x(float(point.candidate.metrics[x.name]))
        cy = to_y(float(point.candidate.metrics[y.name]))
        colour = KINDS[point.kind][1]
        tip = html.escape(_tooltip(point))
        shape = [f'<g class="pt" data-trial="{point.number}"><title>{tip}</title>']
        shape.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{colour}"/>')
        if point.baseline:
            shape.append(
                f'<rect x="{cx - 8:.1f}" y="{cy - 8:.1f}" width="16" height="16" fill="none" '
                'stroke="#000" stroke-width="2"/>'
            )
        if point.chosen:
            shape.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="10" fill="none" stroke="#c00" '
                'stroke-width="3"/>'
            )
        shapes.append("".join(shape) + "</g>")
    axes = (
        f'<line x1="{_MARGIN}" y1="{_HEIGHT - _MARGIN + 8}" x2="{_WIDTH - 8}" '
        f'y2="{_HEIGHT - _MARGIN + 8}" stroke="#444"/>'
        f'<line x1="{_MARGIN}" y1="8" x2="{_MARGIN}" y2="{_HEIGHT - _MARGIN + 8}" stroke="#444"/>'
        f'<text x="{(_WIDTH + _MARGIN) / 2:.0f}" y="{_HEIGHT - 6}" text-anchor="middle">'
        f"{html.escape(_axis_title(x, xs))}</text>"
        f'<text x="12" y="{_HEIGHT / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {_HEIGHT / 2:.0f})">{html.escape(_axis_title(y, ys))}</text>'
        + _ticks(xs, to_x, horizontal=True)
        + _ticks(ys, to_y, horizontal=False)
    )
    return (
        f'<svg class="plot" width="{_WIDTH}" height="{_HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg">{axes}{"".join(shapes)}</svg>'
    )


def _axis_title(metric: Metric, values: Sequence[float]) -> str:
    better = "lower is better" if metric.direction.value == "minimize" else "higher is better"
    scale = ", log scale" if log_axis(values) else ""
    return f"{metric.axis_label}{scale}, {better}"


def _scale(values: Sequence[float], low_px: float, high_px: float) -> Any:
    logarithmic = log_axis(values)

    def at(value: float) -> float:
        return math.log10(value) if logarithmic else value

    lo, hi = min(map(at, values)), max(map(at, values))
    span = hi - lo or abs(hi) or 1.0
    lo, hi = lo - 0.05 * span, hi + 0.05 * span

    def to_px(value: float) -> float:
        return low_px + (at(value) - lo) / (hi - lo) * (high_px - low_px)

    return to_px


def _ticks(values: Sequence[float], to_px: Any, horizontal: bool) -> str:
    marks = []
    for value in (min(values), max(values)):
        position = to_px(value)
        label = html.escape(format(value, ".3g"))
        if horizontal:
            marks.append(
                f'<text x="{position:.1f}" y="{_HEIGHT - _MARGIN + 22}" text-anchor="middle" '
                f'class="tick">{label}</text>'
            )
        else:
            marks.append(
                f'<text x="{_MARGIN - 4}" y="{position + 4:.1f}" text-anchor="end" '
                f'class="tick">{label}</text>'
            )
    return "".join(marks)


def _tooltip(point: Point) -> str:
    head = f"trial {point.number} ({', '.join([KINDS[point.kind][0], *point.roles])})"
    config = [f"{k} = {v}" for k, v in sorted(point.candidate.config.items())]
    figures = [
        f"{k} = {format(v, '.4g') if isinstance(v, float) else v}"
        for k, v in sorted(point.candidate.metrics.items())
        if not k.startswith("contention.")
    ]
    return "\n".join([head, *config, "", *figures])


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 16px; color: #222; }}
.plot {{ border: 1px solid #ddd; margin: 4px; background: #fff; }}
.plot text {{ font-size: 11px; }} .plot .tick {{ fill: #666; }}
.key {{ margin-right: 14px; white-space: nowrap; }}
.pt {{ cursor: pointer; }} .pt.on circle:first-of-type {{ stroke: #000; stroke-width: 2; r: 8; }}
</style></head><body>
<h2>{title}</h2>{intro}
<p>{legend} {marks}</p>
<p>Hover a point: its trial's configuration and figures; the same trial lights up in every
plot.</p>
<div>{plots}</div>
<script>
for (const g of document.querySelectorAll(".pt")) {{
  const same = () => document.querySelectorAll('.pt[data-trial="' + g.dataset.trial + '"]');
  g.addEventListener("mouseenter", () => same().forEach(p => p.classList.add("on")));
  g.addEventListener("mouseleave", () => same().forEach(p => p.classList.remove("on")));
}}
</script>
</body></html>
"""


# -- the static PNG ----------------------------------------------------------------------


def pareto_png(cloud: Sequence[Point], metrics: Sequence[Metric], title: str, path: Path) -> None:
    """The report's plots as one image: a panel per pair of metrics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = pairs(metrics)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.4), squeeze=False)
    for ax, (x, y) in zip(axes[0], panels, strict=True):
        for kind, (label, colour) in reversed(KINDS.items()):
            group = [p for p in cloud if p.kind == kind]
            if group:
                ax.scatter(_values(group, x), _values(group, y), c=colour, s=28, label=label)
        for role, style in (
            ("baseline", {"marker": "s", "s": 150, "edgecolors": "black", "linewidths": 2}),
            ("chosen", {"marker": "o", "s": 260, "edgecolors": "#cc0000", "linewidths": 3}),
        ):
            marked = [p for p in cloud if getattr(p, role)]
            if marked:
                ax.scatter(
                    _values(marked, x), _values(marked, y), facecolors="none", label=role, **style
                )
        if log_axis(_values(cloud, x)):
            ax.set_xscale("log")
        if log_axis(_values(cloud, y)):
            ax.set_yscale("log")
        ax.set_xlabel(_axis_title(x, _values(cloud, x)))
        ax.set_ylabel(_axis_title(y, _values(cloud, y)))
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
