"""The Pareto report: its axes (a scale fitted to the feasible points, round ticks), the page
(a details panel that reaches every trial, no empty figures, points at one spot listed
together) and the static picture. The study is test_review.py's, with outliers added here."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from autotune.core.metrics import OBJECTIVES
from autotune.results.records import Candidate
from autotune.tracking.pareto_report import _CHAR_PX, pareto_html, pareto_png
from autotune.tracking.review import Scale, fit_scale, plot_scales, points, tick_labels, ticks
from tests.review_study import CANDIDATES, CLOUD, OBJECTIVE_METRICS, candidate

ACCURACY, LATENCY = OBJECTIVES["accuracy"], OBJECTIVES["latency"]

# The digits study of the issue: eight feasible trials at two accuracies, two infeasible ones
# far below (0.891, 0.969), one of them at the same spot as trial 3 in the other plots.
FEASIBLE = [candidate(n, 0.9822 if n < 4 else 0.9844, 0.13 + 0.08 * n) for n in range(8)]
OUTLIERS = [
    Candidate(8, {"batch.size": 32}, {**FEASIBLE[3].metrics, "accuracy": 0.891}, False),
    Candidate(9, {"batch.size": 64}, {**FEASIBLE[5].metrics, "accuracy": 0.969}, False),
]
STUDY = points([*FEASIBLE, *OUTLIERS], FEASIBLE[4:6], baseline=0, chosen=4)


def page_data(page: str) -> dict[str, dict]:
    found = re.search(r'<script type="application/json" id="trials">(.*?)</script>', page, re.S)
    assert found is not None
    assert "<" not in found.group(1)  # nothing that could close the script element
    return json.loads(found.group(1))


def marks(page: str) -> list[list[str]]:
    """The trials of each mark, plot by plot."""
    return [
        re.findall(r'<g class="pt" data-trials="([^"]*)"', svg)
        for svg in page.split('<svg class="plot"')[1:]
    ]


# -- the scale ---------------------------------------------------------------------------


def test_outliers_far_off_do_not_squash_the_feasible_points() -> None:
    feasible = [float(c.metrics["accuracy"]) for c in FEASIBLE]
    every = [*feasible, 0.891, 0.969]
    scale = fit_scale(every, feasible, keep=[0.9822, 0.9844])
    assert [scale.side(v) for v in every] == [0] * 8 + [-1, -1]
    # the feasible points spread over most of the axis, not one line at its end
    assert scale.pixel(0.9844, 0, 100) - scale.pixel(0.9822, 0, 100) > 80
    assert scale.pixel(0.891, 0, 100) == 0.0  # drawn at the edge
    assert not scale.log


def test_a_feasible_outlier_is_left_out_but_the_chosen_and_baseline_are_always_kept() -> None:
    region = [1.0, 1.1, 1.2, 1.3, 1.4, 50.0]
    scale = fit_scale(region, region)
    assert [scale.side(v) for v in region] == [0] * 5 + [1]
    assert not scale.log  # the span that asked for a log axis was the outlier's
    kept = fit_scale(region, region, keep=[50.0])
    assert kept.side(50.0) == 0 and kept.log


def test_values_just_beyond_the_region_are_taken_in_and_without_a_region_all_are_fitted() -> None:
    assert fit_scale([0.95, 1.0, 2.0], [1.0, 2.0]).side(0.95) == 0
    everything = fit_scale([0.2, 0.5, 0.9], [])
    assert [everything.side(v) for v in (0.2, 0.5, 0.9)] == [0, 0, 0]
    single = fit_scale([3.0], [3.0])
    assert single.lo < 3.0 < single.hi
    assert fit_scale([], []) == Scale(0.0, 1.0)


def test_a_plot_counts_and_marks_its_off_scale_points() -> None:
    sx, sy, placed = plot_scales(STUDY, ACCURACY, LATENCY)
    off = {row.point.number: (row.x_side, row.y_side) for row in placed if row.off_scale}
    assert off == {8: (-1, 0), 9: (-1, 0)}
    page = pareto_html(STUDY, [ACCURACY, LATENCY], "study")
    assert "2 off-scale (▲ at the edge)" in page
    svg = page.split('<svg class="plot"')[1]
    assert svg.count('<path class="dot"') == 2  # a triangle at the edge for each
    assert "trial 8: accuracy 0.8910 is below the axis" in svg  # its true value in its details


# -- the ticks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lo", "hi"),
    [(0.9818, 0.9846), (0.094, 0.766), (0.0, 1.0), (-3.4, 4.4), (97.0, 1240.0), (4e-5, 3e-4)],
)
def test_linear_ticks_are_a_few_round_values_inside_the_axis(lo: float, hi: float) -> None:
    values = ticks(Scale(lo, hi))
    assert 3 <= len(values) <= 6
    assert all(lo <= v <= hi for v in values)
    step = values[1] - values[0]
    assert all(math.isclose(b - a, step) for a, b in zip(values, values[1:], strict=False))
    assert round(step / 10 ** math.floor(math.log10(step)), 6) in {1.0, 2.0, 2.5, 5.0}
    labels = tick_labels(values)
    assert all(len(label) <= 7 for label in labels) and len(set(labels)) == len(labels)


def test_tick_labels_are_short_and_round() -> None:
    assert tick_labels([0.982, 0.9825, 0.983]) == ["0.9820", "0.9825", "0.9830"]
    assert tick_labels([0.25, 0.5, 0.75]) == ["0.25", "0.50", "0.75"]
    assert tick_labels([0.0, 2.0, 4.0]) == ["0", "2", "4"]
    assert tick_labels([1e-4, 1.5e-4, 2e-4]) == ["1e-4", "1.5e-4", "2e-4"]
    assert tick_labels([0.01, 0.1, 1.0, 10.0], log=True) == ["0.01", "0.1", "1", "10"]
    assert tick_labels([5e-5, 1e-4, 2e-4], log=True) == ["5e-5", "1e-4", "2e-4"]


def test_log_ticks_are_decades_or_one_two_five() -> None:
    decades = ticks(fit_scale([0.01, 2.0], [0.01, 2.0]))
    assert decades == [0.01, 0.1, 1.0]
    energy = ticks(fit_scale([4.6e-5, 1.8e-3], [4.6e-5, 1.8e-3]))
    assert energy == [5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3]
    wide = ticks(Scale(-6.2, 3.1, log=True), most=6)
    assert 3 <= len(wide) <= 6 and all(math.log10(v).is_integer() for v in wide)
    narrow = ticks(Scale(math.log10(0.13), math.log10(0.3), log=True))
    assert 3 <= len(narrow) <= 6 and narrow[0] >= 0.13 and narrow[-1] <= 0.3


def texts(svg: str) -> list[dict[str, str]]:
    return [
        {**dict(re.findall(r'([\w-]+)="([^"]*)"', attributes)), "text": text}
        for attributes, text in re.findall(r"<text ([^>]*)>([^<]*)</text>", svg)
    ]


def test_labels_keep_clear_of_each_other_and_of_the_axis_titles() -> None:
    page = pareto_html(STUDY, OBJECTIVE_METRICS, "study")
    for svg in page.split('<svg class="plot"')[1:]:
        labels = [t for t in texts(svg) if t["class"] == "tick"]
        x_row = max(float(t["y"]) for t in labels)
        x_ticks = [t for t in labels if float(t["y"]) == x_row]
        assert {t["text-anchor"] for t in x_ticks} == {"start"}
        boxes = sorted((float(t["x"]), float(t["x"]) + len(t["text"]) * _CHAR_PX) for t in x_ticks)
        assert all(a[1] + 4 < b[0] for a, b in zip(boxes, boxes[1:], strict=False))
        assert boxes[0][0] >= 0 and boxes[-1][1] <= 380  # inside the picture
        titles = [t for t in texts(svg) if t["class"] == "title"]
        x_title = min(float(t["y"]) for t in titles if "transform" not in t)
        y_title = max(float(t["x"]) for t in titles if "transform" in t)
        assert x_row + 10 < x_title  # a line of 11 px text apart
        y_ticks = [t for t in labels if t["text-anchor"] == "end" and float(t["y"]) != x_row]
        assert all(float(t["x"]) - len(t["text"]) * _CHAR_PX > y_title + 4 for t in y_ticks)


# -- the page ----------------------------------------------------------------------------


def test_the_report_is_one_page_of_linked_plots_for_every_pair() -> None:
    page = pareto_html(CLOUD, OBJECTIVE_METRICS, "study: 5 measured configurations")
    assert page.count('<svg class="plot"') == 3
    assert sum("2" in mark.split() for plot in marks(page) for mark in plot) == 3  # linked
    assert "log scale" in page  # latency spans 200×
    assert page.count('stroke="#c00"') == 3 + 1  # the chosen ring in each plot and the legend
    assert 'id="details"' in page and "addEventListener" in page
    assert (
        "<script src" not in page
        and "<link" not in page
        and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )


def test_the_panel_reads_every_trial_with_its_configuration_and_figures() -> None:
    page = pareto_html(CLOUD, OBJECTIVE_METRICS, "study")
    data = page_data(page)
    assert set(data) == {str(c.trial_number) for c in CANDIDATES}
    chosen = data["2"]
    assert chosen["heading"] == "trial 2 (Pareto front (feasible), chosen)"
    assert ["batch.size", "4"] in chosen["config"]
    figures = dict(chosen["figures"])
    assert figures["latency_p95_ms"] == "0.050 ms" and figures["energy_source"] == "estimate"
    names = [name for name, _ in chosen["figures"]]
    assert names[:3] == ["accuracy", "latency_p95_ms", "energy_per_sample_j"]  # the axes first
    for number in data:  # each also in the panel's list of trials
        assert f'<option value="{number}">' in page


def test_a_setting_that_looks_like_markup_stays_text() -> None:
    odd = Candidate(9, {"model.name": "</script><b>x</b>"}, dict(CANDIDATES[1].metrics), True)
    page = pareto_html(points([*CANDIDATES, odd], [], 0, 2), OBJECTIVE_METRICS, "study")
    assert page_data(page)["9"]["config"] == [["model.name", "</script><b>x</b>"]]
    assert "<b>x" not in page


def test_values_that_are_none_are_left_out() -> None:
    empty = Candidate(
        7,
        {"batch.size": 8, "runtime.compile_mode": None},
        {
            **CANDIDATES[1].metrics,
            "top1_agreement": None,
            "energy_per_sample_j": None,
            "latency_cv": math.nan,
            "latency_p95_ci_ms": [0.4, 0.6],
        },
        True,
    )
    page = pareto_html(points([*CANDIDATES, empty], [], 0, 2), OBJECTIVE_METRICS, "study")
    shown = re.sub(r"<script.*?</script>", "", page, flags=re.S)
    assert not re.search(r"\bNone\b|\bnull\b|\bNaN\b|\bnan\b", shown)
    data = page_data(page)
    assert not re.search(r"\bNone\b|\bnull\b|\bNaN\b|\bnan\b", json.dumps(data))
    trial = data["7"]
    assert [k for k, _ in trial["config"]] == ["batch.size"]
    figures = dict(trial["figures"])
    assert {"top1_agreement", "energy_per_sample_j", "latency_cv"}.isdisjoint(figures)
    assert figures["latency_p95_ci_ms"] == "0.4–0.6"  # an interval, no metric of its own
    # without an energy figure it is drawn in the accuracy × latency plot alone, and said so
    assert [sum("7" in m.split() for m in plot) for plot in marks(page)] == [1, 0, 0]
    assert page.count("1 without both") == 2


def test_points_at_one_spot_are_one_mark_that_lists_every_trial() -> None:
    twins = [candidate(5, 0.97, 0.9), candidate(6, 0.97, 0.9), candidate(7, 0.97, 0.9001)]
    page = pareto_html(points([*CANDIDATES, *twins], [], 0, 2), OBJECTIVE_METRICS, "study")
    for plot in marks(page):
        assert "4 5 6 7" in plot  # trial 4 shares the spot: accuracy 0.97, latency 0.9
        assert sorted(n for mark in plot for n in mark.split()) == sorted("0123" + "4567")
    assert 'class="count">4</text>' in page  # how many are there


def test_the_static_picture_is_written_with_the_same_axes(tmp_path: Path) -> None:
    path = tmp_path / "front.png"
    pareto_png(STUDY, OBJECTIVE_METRICS, "study", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
