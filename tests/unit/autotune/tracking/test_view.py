"""The saved view of the runs table and the links into MLflow's UI."""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from autotune.core.metrics import OBJECTIVES
from autotune.tracking.view import (
    CHART_SECTION,
    VIEW_TAG_PREFIX,
    column_width,
    runs_view,
    study_links,
    view_id,
    view_link,
)
from tests.review_study import OBJECTIVE_METRICS

LATENCY = OBJECTIVES["latency"]


def unpacked(value: str) -> tuple[dict[str, Any], dict[str, Any]]:
    envelope = json.loads(value)
    packed = envelope["state"].removeprefix("deflate;")
    return envelope, json.loads(zlib.decompress(base64.b64decode(packed)))


def test_the_view_sorts_the_trials_by_what_the_selection_ranks_by() -> None:
    key, value = runs_view("digits", OBJECTIVE_METRICS, LATENCY, now_ms=5)
    assert key == VIEW_TAG_PREFIX + view_id("digits") and view_id("digits").isalnum()
    envelope, state = unpacked(value)
    assert envelope["createdAt"] == 5 and "digits" in envelope["name"]
    # sorted by a metric, MLflow lists the child runs flat rather than folded under the parent
    assert (state["orderByKey"], state["orderByAsc"]) == ("metrics.`rounded/latency_p95_ms`", True)
    _, by_accuracy = unpacked(runs_view("digits", OBJECTIVE_METRICS, OBJECTIVE_METRICS[0], 5)[1])
    assert (by_accuracy["orderByKey"], by_accuracy["orderByAsc"]) == (
        "metrics.`rounded/accuracy`",
        False,
    )


def test_the_view_shows_the_rounded_key_figures_in_columns_wide_enough_for_their_names() -> None:
    _, state = unpacked(runs_view("digits", OBJECTIVE_METRICS, LATENCY, now_ms=5)[1])
    assert state["selectedColumns"][:5] == [
        "metrics.`rounded/latency_p95_ms`",
        "metrics.`rounded/accuracy`",
        "metrics.`rounded/energy_per_sample_j`",
        "metrics.`rounded/throughput_per_s`",
        "metrics.`rounded/accuracy_drop`",
    ]
    assert state["selectedColumns"][5:7] == ["tags.`chosen`", "tags.`baseline`"]
    assert "params.`batch.size`" in state["selectedColumns"]
    assert state["columnOrder"] == ["attributes.`Run Name`", *state["selectedColumns"]]
    widths = state["columnWidths"]
    assert set(widths) == set(state["columnOrder"])
    assert widths["attributes.`Run Name`"] >= 7 * len("trial-1234 (chosen, baseline)")
    assert widths["metrics.`rounded/energy_per_sample_j`"] >= 7 * len("rounded/energy_per_sample_j")
    assert column_width("tags.`chosen`") == 100
    assert state["runsHiddenMode"] == "SHOW_ALL"


def test_the_view_s_charts_are_a_scatter_per_pair_of_objectives() -> None:
    _, state = unpacked(runs_view("digits", OBJECTIVE_METRICS, LATENCY, now_ms=5)[1])
    charts = state["compareRunCharts"]
    assert [(c["type"], c["xaxis"]["key"], c["yaxis"]["key"]) for c in charts] == [
        ("SCATTER", "latency_p95_ms", "accuracy"),
        ("SCATTER", "latency_p95_ms", "energy_per_sample_j"),
        ("SCATTER", "accuracy", "energy_per_sample_j"),
    ]
    (section,) = state["compareRunSections"]
    assert section["name"] == CHART_SECTION and {c["metricSectionId"] for c in charts} == {
        section["uuid"]
    }
    assert len({c["uuid"] for c in charts}) == 3 and state["isAccordionReordered"] is True


def test_the_links_open_the_runs_in_model_training_whatever_the_browser_chose() -> None:
    table = view_link("3", "digits")
    assert table == (
        f"#/experiments/3/runs?workflowType=machine_learning&viewStateShareKey={view_id('digits')}"
    )
    assert view_link("3", "digits", charts=True) == table + "&compareRunsMode=CHART"
    links = dict(study_links("3", "digits", "abc"))
    assert links["the study's run"] == "#/experiments/3/runs/abc?workflowType=machine_learning"
    assert list(links) == [
        "every trial with its figures",
        "the trade-off as charts",
        "the study's run",
    ]
