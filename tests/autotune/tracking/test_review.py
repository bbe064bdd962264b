"""What a reviewer reads first: the parent run's description and the Pareto report."""

from __future__ import annotations

from pathlib import Path

from autotune.core.metrics import OBJECTIVES
from autotune.results.records import Candidate
from autotune.tracking.review import (
    log_axis,
    pairs,
    pareto_html,
    pareto_png,
    points,
    review_note,
    shown_metrics,
)

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

TUNED = {
    "config": {"batch.size": 4, "runtime.engine": "onnxruntime"},
    "metrics": CANDIDATES[2].metrics,
    "baseline": CANDIDATES[0].metrics,
    "headline": {"text": "40× lower p95 latency per call (95% CI 31–52×); 10 paired rounds"},
    "revalidation": {"chosen_because": "lowest latency among the finalists beyond the noise"},
    "constraints": {"max_accuracy_drop": {"bound": 0.01, "value": 0.01, "met": True}},
}
REQUEST = {
    "model": {"onnx": "models/net.onnx"},
    "objectives": ["accuracy", "latency", "energy"],
    "constraints": {"max_accuracy_drop": 0.01},
    "selection": {"strategy": "lowest_latency"},
}


def test_points_are_told_apart_by_kind_and_role() -> None:
    kinds = {p.number: p.kind for p in CLOUD}
    assert kinds == {0: "feasible", 1: "front", 2: "front", 3: "infeasible", 4: "feasible"}
    assert [p.number for p in CLOUD if p.baseline] == [0]
    assert [p.number for p in CLOUD if p.chosen] == [2]


def test_axes_are_logarithmic_where_values_span_more_than_ten_times() -> None:
    assert log_axis([0.01, 2.0]) and not log_axis([0.9, 0.99]) and not log_axis([0.0, 5.0])


def test_throughput_is_shown_where_the_selection_asks_for_it() -> None:
    assert shown_metrics(OBJECTIVE_METRICS, "lowest_latency") == OBJECTIVE_METRICS
    with_throughput = shown_metrics(OBJECTIVE_METRICS, "highest_throughput")
    assert with_throughput[-1] is OBJECTIVES["throughput"]
    assert len(pairs(with_throughput)) == 6


def test_the_report_is_one_page_of_linked_plots_for_every_pair() -> None:
    page = pareto_html(CLOUD, OBJECTIVE_METRICS, "study: 5 measured configurations")
    assert page.count('<svg class="plot"') == 3
    assert page.count('data-trial="2"') == 3  # one point per plot, linked by trial
    assert "log scale" in page  # latency spans 200×
    assert page.count('stroke="#c00"') == 3 + 1  # the chosen ring in each plot and the legend
    assert "batch.size = 4" in page and "trial 2 (Pareto front (feasible), chosen)" in page
    assert (
        "<script src" not in page
        and "<link" not in page
        and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )


def test_the_static_picture_is_written(tmp_path: Path) -> None:
    path = tmp_path / "front.png"
    pareto_png(CLOUD, OBJECTIVE_METRICS, "study", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_description_explains_the_choice_beside_the_baseline() -> None:
    note = review_note("digits", TUNED, CLOUD, OBJECTIVE_METRICS, REQUEST)
    assert note.startswith("## autotune study `digits`")
    assert "`models/net.onnx`" in note and "max_accuracy_drop 0.01" in note
    assert TUNED["headline"]["text"] in note
    assert "| **chosen** | 0.98 | 0.05 |" in note and "| **baseline** | 0.99 | 2 |" in note
    assert "**Why this one:** lowest latency among the finalists" in note
    assert "max_accuracy_drop 0.01: 0.01 (met)" in note
    front_rows = [line for line in note.splitlines() if line.startswith(("| 1 ", "| 2 "))]
    assert len(front_rows) == 2 and "(chosen)" in front_rows[1]
    assert "`batch.size=4`" in note


def test_a_study_without_a_feasible_configuration_says_so() -> None:
    infeasible = points(CANDIDATES, [], baseline=0, chosen=None)
    note = review_note("digits", None, infeasible, OBJECTIVE_METRICS, REQUEST)
    assert "**No configuration met the constraints.**" in note
    assert "**Every measured configuration** (5 configurations)" in note


def test_the_saved_view_opens_the_trials_expanded_with_their_figures() -> None:
    import base64
    import json
    import zlib

    from autotune.tracking.review import VIEW_TAG_PREFIX, runs_view, view_id, view_link

    key, value = runs_view("digits", "parent-run", OBJECTIVE_METRICS, now_ms=5)
    assert key == VIEW_TAG_PREFIX + view_id("digits") and view_id("digits").isalnum()
    envelope = json.loads(value)
    assert envelope["createdAt"] == 5 and "digits" in envelope["name"]
    packed = envelope["state"].removeprefix("deflate;")
    state = json.loads(zlib.decompress(base64.b64decode(packed)))
    assert state["runsExpanded"] == {"parent-run": True}
    assert state["selectedColumns"][:3] == [
        "metrics.`accuracy`",
        "metrics.`latency_p95_ms`",
        "metrics.`energy_per_sample_j`",
    ]
    assert "tags.`chosen`" in state["selectedColumns"]
    assert "params.`batch.size`" in state["selectedColumns"]
    assert (state["orderByKey"], state["orderByAsc"]) == ("metrics.`accuracy`", False)
    assert view_link("3", "digits") == f"#/experiments/3/runs?viewStateShareKey={view_id('digits')}"
