"""The Pareto report: every pair of a study's objectives as linked scatter plots in one
self-contained HTML file (no external resources; MLflow shows it in a frame that runs its
script), and a static PNG of the same for viewers that run no scripts.

Each axis fits the points a reviewer compares (the feasible trials, far outliers among them
left out, but never the front's, the chosen or the baseline), so one trial far off does not
squash the rest into a line: a trial outside is drawn at the plot's edge as a triangle
pointing its way, each plot says how many are, and the details give its true figures. Axes
carry a few round ticks (decades on a log axis) and titles with units. Trials within a few
pixels of each other are one mark that lists them all. Hovering, clicking or tabbing to a mark
shows its trials in the details panel and lights them up in every plot.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune.core.metrics import Metric
from autotune.tracking.review import (
    KINDS,
    Placed,
    Point,
    Scale,
    heading,
    pairs,
    panel_data,
    plot_scales,
    shown_figure,
    tick_labels,
    ticks,
)

_WIDTH, _HEIGHT = 380, 330
_TOP, _RIGHT, _BOTTOM = 28, 16, 50  # the plot area's margins; the left one fits the labels
_CHAR_PX = 6.4  # about the width of a character of the 11 px labels
_NEAR_PX = 4.0  # marks closer than this are one mark listing all their trials
_LABEL_GAP_PX = 8.0  # the least space between two labels of the x axis
_INSET_PX = 6.0  # a point beyond an axis is drawn this far inside the plot's edge
_CHOSEN_RING, _BASELINE_BOX = "#c00", "#000"
Area = tuple[float, float, float, float]  # the plot area: left, top, right, bottom


# -- the HTML report ---------------------------------------------------------------------


def pareto_html(
    cloud: Sequence[Point], metrics: Sequence[Metric], title: str, lines: Sequence[str] = ()
) -> str:
    """One page, no external resources: a scatter plot per pair of `metrics`, a mark per trial
    that has both figures, and a details panel: hovering, clicking or tabbing to a mark shows
    its trials' configuration and figures and lights them up in every plot."""
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
        ' <span class="key"><svg width="14" height="14"><path d="M2 12 L7 2 L12 12 Z" '
        'fill="#777"/></svg> off the axis\'s scale, drawn at the edge</span>'
        ' <span class="key"><b class="badge">3</b> trials at one spot</span>'
    )
    intro = "".join(f"<p>{html.escape(line)}</p>" for line in lines)
    options = "".join(
        f'<option value="{p.number}">{html.escape(heading(p))}</option>'
        for p in sorted(cloud, key=lambda p: p.number)
    )
    data = json.dumps(panel_data(cloud, metrics), separators=(",", ":"))
    return _PAGE.format(
        title=html.escape(title),
        intro=intro,
        legend=legend,
        marks=marks,
        plots=plots,
        options=options,
        data=data.replace("<", "\\u003c"),  # inside a script element: no "</script>"
    )


def _svg(cloud: Sequence[Point], x: Metric, y: Metric) -> str:
    sx, sy, placed = plot_scales(cloud, x, y)
    y_ticks = ticks(sy)
    y_labels = tick_labels(y_ticks, sy.log)
    left = 34 + max((len(label) for label in y_labels), default=1) * _CHAR_PX + 8
    area = (left, _TOP, _WIDTH - _RIGHT, _HEIGHT - _BOTTOM)
    x_ticks, x_labels = _fitting_ticks(sx, area[0], area[2])
    placed = [
        _at(row, sx.pixel(row.x, area[0], area[2]), sy.pixel(row.y, area[3], area[1]))
        for row in placed
    ]
    parts = [
        f'<rect x="{area[0]:.1f}" y="{area[1]}" width="{area[2] - area[0]:.1f}" '
        f'height="{area[3] - area[1]}" class="area"/>',
        _x_axis(sx, x_ticks, x_labels, area),
        _y_axis(sy, y_ticks, y_labels, area),
        _axis_titles(x, sx, y, sy, area),
        _note(placed, len(cloud), x, y),
        *(_mark(group, x, y) for group in _groups(placed)),
    ]
    return (
        f'<svg class="plot" viewBox="0 0 {_WIDTH} {_HEIGHT}" width="{_WIDTH}" '
        f'height="{_HEIGHT}" xmlns="http://www.w3.org/2000/svg" role="group" '
        f'aria-label="{html.escape(y.name)} against {html.escape(x.name)}">{"".join(parts)}</svg>'
    )


def _at(row: Placed, px: float, py: float) -> Placed:
    """The point drawn at (px, py); one beyond an axis a few pixels inside its edge."""
    return replace(row, px=px - _INSET_PX * row.x_side, py=py + _INSET_PX * row.y_side)


def _fitting_ticks(scale: Scale, left: float, right: float) -> tuple[list[float], list[str]]:
    """The most ticks, up to six, whose labels (under them, kept inside the picture) stand
    apart."""
    for most in range(6, 1, -1):
        values = ticks(scale, most)
        labels = tick_labels(values, scale.log)
        at = [scale.pixel(v, left, right) for v in values]
        boxes = [_label_box(x, label) for x, label in zip(at, labels, strict=True)]
        if all(a[1] + _LABEL_GAP_PX <= b[0] for a, b in zip(boxes, boxes[1:], strict=False)):
            break
    return values, labels


def _label_box(at: float, label: str) -> tuple[float, float]:
    """From where to where a label centred at `at` lies, moved to stay inside the picture."""
    width = len(label) * _CHAR_PX
    start = min(max(at - width / 2, 2.0), _WIDTH - 2.0 - width)
    return start, start + width


def _x_axis(scale: Scale, values: list[float], labels: list[str], area: Area) -> str:
    left, top, right, bottom = area
    out = []
    for tick, label in zip(values, labels, strict=True):
        at = scale.pixel(tick, left, right)
        out.append(
            f'<line x1="{at:.1f}" y1="{top}" x2="{at:.1f}" y2="{bottom}" class="grid"/>'
            f'<line x1="{at:.1f}" y1="{bottom}" x2="{at:.1f}" y2="{bottom + 4}" class="axis"/>'
            f'<text x="{_label_box(at, label)[0]:.1f}" y="{bottom + 16}" text-anchor="start" '
            f'class="tick">{html.escape(label)}</text>'
        )
    return "".join(out)


def _y_axis(scale: Scale, values: list[float], labels: list[str], area: Area) -> str:
    left, top, right, bottom = area
    out = []
    for tick, label in zip(values, labels, strict=True):
        at = scale.pixel(tick, bottom, top)
        out.append(
            f'<line x1="{left:.1f}" y1="{at:.1f}" x2="{right}" y2="{at:.1f}" class="grid"/>'
            f'<line x1="{left - 4:.1f}" y1="{at:.1f}" x2="{left:.1f}" y2="{at:.1f}" class="axis"/>'
            f'<text x="{left - 7:.1f}" y="{at + 4:.1f}" text-anchor="end" class="tick">'
            f"{html.escape(label)}</text>"
        )
    return "".join(out)


def _axis_titles(x: Metric, sx: Scale, y: Metric, sy: Scale, area: Area) -> str:
    left, top, right, bottom = area
    middle_x, middle_y = (left + right) / 2, (top + bottom) / 2
    x_text = _axis_title(x, sx.log)
    if len(x_text) * _CHAR_PX > _WIDTH - 8:
        x_lines = [x.axis_label, _axis_qualifier(x, sx.log)]
    else:
        x_lines = [x_text]
    out = [
        f'<text x="{middle_x:.1f}" y="{bottom + 32 + 13 * i}" text-anchor="middle" '
        f'class="title">{html.escape(line)}</text>'
        for i, line in enumerate(x_lines)
    ]
    for i, line in enumerate([y.axis_label, _axis_qualifier(y, sy.log)]):
        at = 13 + 13 * i
        out.append(
            f'<text x="{at}" y="{middle_y:.1f}" text-anchor="middle" class="title" '
            f'transform="rotate(-90 {at} {middle_y:.1f})">{html.escape(line)}</text>'
        )
    return "".join(out)


def _axis_qualifier(metric: Metric, log: bool) -> str:
    better = "lower is better" if metric.direction.value == "minimize" else "higher is better"
    return f"log scale, {better}" if log else better


def _axis_title(metric: Metric, log: bool) -> str:
    return f"{metric.axis_label}, {_axis_qualifier(metric, log)}"


def _note(placed: Sequence[Placed], total: int, x: Metric, y: Metric) -> str:
    """What the plot leaves out of its scale or its points, above it."""
    off = sum(row.off_scale for row in placed)
    missing = total - len(placed)
    said = []
    if off:
        said.append(f"{off} off-scale (▲ at the edge)")
    if missing:
        said.append(f"{missing} without both {x.name} and {y.name}, not drawn")
    text = html.escape("; ".join(said))
    return f'<text x="{_WIDTH - 6}" y="16" text-anchor="end" class="note">{text}</text>'


def _groups(placed: Sequence[Placed]) -> list[list[Placed]]:
    """The points within a few pixels of each other, each group drawn as one mark; groups
    with the chosen or baseline trial, then the front's, drawn last, on top."""
    groups: list[list[Placed]] = []
    for row in sorted(placed, key=lambda r: r.point.number):
        for group in groups:
            if math.dist((group[0].px, group[0].py), (row.px, row.py)) <= _NEAR_PX:
                group.append(row)
                break
        else:
            groups.append([row])
    return sorted(groups, key=lambda g: max(_rank(r.point) for r in g))


def _rank(point: Point) -> int:
    return 3 if point.roles else {"front": 2, "feasible": 1}.get(point.kind, 0)


def _mark(group: Sequence[Placed], x: Metric, y: Metric) -> str:
    first = max(group, key=lambda r: _rank(r.point))
    cx, cy = group[0].px, group[0].py
    colour = KINDS[first.point.kind][1]
    numbers = " ".join(str(r.point.number) for r in group)
    off = "; ".join(_off_text(r, x, y) for r in group if r.off_scale)
    label = ("trials " if len(group) > 1 else "trial ") + numbers.replace(" ", ", ")
    shape = [
        f'<g class="pt" data-trials="{numbers}" data-off="{html.escape(off)}" tabindex="0" '
        f'role="button" aria-label="{label}"><circle class="halo" cx="{cx:.1f}" cy="{cy:.1f}" '
        'r="12"/>'
    ]
    beyond = next((r for r in group if r.off_scale), None)
    if beyond is not None:
        dx, dy = beyond.x_side, -beyond.y_side
        shape.append(f'<path class="dot" d="{_triangle(cx, cy, dx, dy)}" fill="{colour}"/>')
    else:
        shape.append(f'<circle class="dot" cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{colour}"/>')
    if any(r.point.baseline for r in group):
        shape.append(
            f'<rect x="{cx - 8:.1f}" y="{cy - 8:.1f}" width="16" height="16" fill="none" '
            f'stroke="{_BASELINE_BOX}" stroke-width="2"/>'
        )
    if any(r.point.chosen for r in group):
        shape.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="10" fill="none" stroke="{_CHOSEN_RING}" '
            'stroke-width="3"/>'
        )
    if len(group) > 1:
        shape.append(f'<text x="{cx + 8:.1f}" y="{cy - 7:.1f}" class="count">{len(group)}</text>')
    return "".join(shape) + "</g>"


def _triangle(cx: float, cy: float, dx: int, dy: int) -> str:
    """A triangle at (cx, cy) pointing along x (dx = ±1) or else along y (dy = ±1, down +)."""
    if dx:
        corners = [(cx + 7 * dx, cy), (cx - 4 * dx, cy - 6), (cx - 4 * dx, cy + 6)]
    else:
        corners = [(cx, cy + 7 * dy), (cx - 6, cy - 4 * dy), (cx + 6, cy - 4 * dy)]
    return "M" + " L".join(f"{a:.1f} {b:.1f}" for a, b in corners) + " Z"


def _off_text(row: Placed, x: Metric, y: Metric) -> str:
    said = [
        f"{metric.name} {shown_figure(metric.name, figure)} is {'below' if side < 0 else 'above'} "
        "the axis"
        for metric, figure, side in ((x, row.x, row.x_side), (y, row.y, row.y_side))
        if side
    ]
    return f"trial {row.point.number}: {' and '.join(said)}"


# -- the static PNG ----------------------------------------------------------------------


def pareto_png(cloud: Sequence[Point], metrics: Sequence[Metric], title: str, path: Path) -> None:
    """The report's plots as one image, with the same axes: a panel per pair of metrics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = pairs(metrics)
    size = (max(5.2 * len(panels), 10.0), 4.9)
    fig, axes = plt.subplots(1, len(panels), figsize=size, squeeze=False)
    for ax, (x, y) in zip(axes[0], panels, strict=True):
        _png_panel(ax, cloud, x, y)
    fig.legend(handles=_png_legend(), loc="upper center", bbox_to_anchor=(0.5, 0.94), ncol=6)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _png_legend() -> list[Any]:
    from matplotlib.lines import Line2D

    def key(label: str, **style: Any) -> Any:
        return Line2D([], [], linestyle="", label=label, **style)

    return [
        *(key(label, marker="o", color=colour) for label, colour in KINDS.values()),
        key("baseline", marker="s", markersize=10, mfc="none", mec="black", mew=2),
        key("chosen", marker="o", markersize=12, mfc="none", mec="#cc0000", mew=3),
        key("off-scale, at the edge", marker="<", color="#777"),
    ]


def _png_panel(ax: Any, cloud: Sequence[Point], x: Metric, y: Metric) -> None:
    sx, sy, placed = plot_scales(cloud, x, y)
    inside = [r for r in placed if not r.off_scale]
    for kind, (_, colour) in reversed(KINDS.items()):
        group = [r for r in inside if r.point.kind == kind]
        if group:
            ax.scatter([r.x for r in group], [r.y for r in group], c=colour, s=28)
    for row in placed:
        if row.off_scale:
            marker = {(-1, 0): "<", (1, 0): ">", (0, -1): "v", (0, 1): "^"}
            shape = marker[(row.x_side, 0)] if row.x_side else marker[(0, row.y_side)]
            ax.scatter(
                [sx.clip(row.x)],
                [sy.clip(row.y)],
                c=KINDS[row.point.kind][1],
                s=44,
                marker=shape,
                clip_on=False,
            )
    for role, style in (
        ("baseline", {"marker": "s", "s": 150, "edgecolors": "black", "linewidths": 2}),
        ("chosen", {"marker": "o", "s": 260, "edgecolors": "#cc0000", "linewidths": 3}),
    ):
        marked = [r for r in placed if getattr(r.point, role)]
        if marked:
            xs, ys = [sx.clip(r.x) for r in marked], [sy.clip(r.y) for r in marked]
            ax.scatter(xs, ys, facecolors="none", clip_on=False, **style)
    for scale, axis, set_scale, set_lim in (
        (sx, ax.xaxis, ax.set_xscale, ax.set_xlim),
        (sy, ax.yaxis, ax.set_yscale, ax.set_ylim),
    ):
        set_scale("log" if scale.log else "linear")
        set_lim(*scale.bounds)
        values = ticks(scale)
        axis.set_ticks(values, tick_labels(values, scale.log))
        axis.set_ticks([], minor=True)
    ax.set_xlabel(_axis_title(x, sx.log))
    ax.set_ylabel(_axis_title(y, sy.log))
    off = sum(r.off_scale for r in placed)
    if off:
        ax.set_title(f"{off} off-scale (triangles at the edge)", fontsize=9)


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 12px; color: #222; }}
p {{ margin: 6px 0; }}
.key {{ margin-right: 12px; white-space: nowrap; }}
.badge, .plot .count {{ font-size: 10px; font-weight: bold; }}
.badge {{ border: 1px solid #999; border-radius: 7px; padding: 0 4px; }}
.layout {{ display: flex; align-items: flex-start; gap: 10px; }}
.plots {{ flex: 1 1 auto; min-width: 0; display: flex; flex-wrap: wrap; gap: 6px; }}
.plot {{ flex: 0 1 380px; min-width: 0; height: auto; border: 1px solid #ddd; background: #fff; }}
.plot text {{ font-size: 11px; }} .plot .tick {{ fill: #555; }} .plot .note {{ fill: #a40; }}
.plot .area {{ fill: none; stroke: #999; }} .plot .axis {{ stroke: #999; }}
.plot .grid {{ stroke: #eee; }}
.plot .count {{ fill: #111; stroke: #fff; stroke-width: 3px; paint-order: stroke; }}
.pt {{ cursor: pointer; outline: none; }} .pt .halo {{ fill: none; stroke: none; }}
.pt.on .halo {{ fill: rgba(255, 191, 0, 0.35); stroke: #e6a100; stroke-width: 2; }}
.pt.on .dot, .pt:focus .dot {{ stroke: #000; stroke-width: 2; }}
.panel {{ flex: 0 0 250px; position: sticky; top: 8px; max-height: calc(100vh - 16px);
  overflow: auto; border: 1px solid #ccc; background: #fafafa; padding: 8px; font-size: 12px; }}
.panel h3 {{ font-size: 13px; margin: 0 0 6px; }} .panel select {{ width: 100%; }}
.panel .trial {{ border-top: 1px solid #ddd; margin-top: 6px; padding-top: 4px; }}
.panel button {{ font: inherit; font-weight: bold; border: 0; background: none; padding: 0;
  cursor: pointer; text-align: left; color: #124; }}
.panel table {{ border-collapse: collapse; }}
.panel td {{ padding: 0 6px 0 0; vertical-align: top; }} .panel td:first-child {{ color: #555; }}
.panel .part {{ color: #777; font-style: italic; margin-top: 3px; }}
.panel .off {{ color: #a40; }} .panel .hint {{ color: #666; }}
@media (max-width: 600px) {{
  .layout {{ display: block; }}
  .panel {{ position: fixed; top: auto; left: 0; right: 0; bottom: 0; max-height: 40vh; }}
  body {{ padding-bottom: 40vh; }}
}}
</style></head><body>
<h2>{title}</h2>{intro}
<p>{legend} {marks}</p>
<p>Each axis fits the feasible trials (all of the front, the chosen and the baseline); a
trial beyond is drawn at the edge, its figures in its details. Hover, click or tab to a point
for its trials' configuration and figures in the panel; the same trials light up in every
plot. A click keeps them (Esc lets go).</p>
<div class="layout"><div class="plots">{plots}</div>
<aside class="panel" id="details" aria-live="polite"><h3>Details</h3>
<select id="pick" aria-label="a trial"><option value="">choose a trial…</option>{options}</select>
<div id="shown"><p class="hint">Hover or click a point.</p></div></aside></div>
<script type="application/json" id="trials">{data}</script>
<script>
const trials = JSON.parse(document.getElementById("trials").textContent);
const shown = document.getElementById("shown"), pick = document.getElementById("pick");
const marks = [...document.querySelectorAll(".pt")];
let kept = null;
function el(tag, text, cls) {{
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}}
function light(numbers) {{
  for (const g of marks)
    g.classList.toggle("on", g.dataset.trials.split(" ").some(n => numbers.includes(n)));
}}
function rows(table, pairs) {{
  for (const [k, v] of pairs) {{
    const tr = table.insertRow();
    tr.insertCell().textContent = k;
    tr.insertCell().textContent = v;
  }}
}}
function show(numbers, off) {{
  shown.replaceChildren();
  if (numbers.length > 1) shown.append(el("p", numbers.length + " trials at this spot"));
  if (off) shown.append(el("p", "Drawn at the edge: " + off, "off"));
  for (const n of numbers) {{
    const t = trials[n], box = el("div", undefined, "trial"), name = el("button", t.heading);
    name.addEventListener("click", () => {{ kept = [n]; show([n], ""); }});
    const config = el("table"), figures = el("table");
    rows(config, t.config);
    rows(figures, t.figures);
    box.append(name, el("div", "configuration", "part"), config);
    box.append(el("div", "figures", "part"), figures);
    shown.append(box);
  }}
  if (kept) shown.append(el("p", "Kept: click it again or press Esc to let go.", "hint"));
  light(numbers);
}}
function choose(g, keep) {{
  const numbers = g.dataset.trials.split(" ");
  if (keep) kept = kept && kept.join() === numbers.join() ? null : numbers;
  if (keep || !kept) show(numbers, g.dataset.off);
}}
for (const g of marks) {{
  g.addEventListener("mouseenter", () => choose(g, false));
  g.addEventListener("focus", () => choose(g, false));
  g.addEventListener("click", () => choose(g, true));
  g.addEventListener("keydown", e => {{
    if (e.key === "Enter" || e.key === " ") {{ e.preventDefault(); choose(g, true); }}
  }});
}}
pick.addEventListener("change", () => {{
  if (pick.value) {{ kept = [pick.value]; show(kept, ""); }}
}});
document.addEventListener("keydown", e => {{
  if (e.key !== "Escape") return;
  kept = null;
  light([]);
  shown.replaceChildren(el("p", "Hover or click a point.", "hint"));
}});
</script>
</body></html>
"""
