"""What a reviewer sees of the trials: their runs' marks and colours, and their key figures
rounded as tables show them, of the study in tests/review_study.py."""

from __future__ import annotations

from autotune.core.metrics import OBJECTIVES
from autotune.tracking.review import (
    BASELINE_COLOUR,
    CHOSEN_COLOUR,
    KINDS,
    key_figures,
    log_axis,
    pairs,
    rounded_figures,
    shown_metrics,
)
from tests.review_study import CLOUD, OBJECTIVE_METRICS


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


def test_a_trial_s_key_figures_are_logged_again_rounded_as_tables_show_them() -> None:
    figures = {
        "accuracy": 0.9844444444444445,
        "latency_p95_ms": 0.06013179999999999,
        "energy_per_sample_j": 5.569936849561356e-05,
        "throughput_per_s": 131563.67926567484,
        "accuracy_drop": -0.0022222222222222365,
        "latency_p50_ms": 0.05,  # not a key figure
        "energy_source": "estimate",
    }
    assert rounded_figures(figures) == {
        "rounded/accuracy": 0.9844,
        "rounded/latency_p95_ms": 0.06,
        "rounded/energy_per_sample_j": 5.57e-05,
        "rounded/throughput_per_s": 131564.0,
        "rounded/accuracy_drop": -0.0022,
    }


def test_the_key_figures_are_the_objectives_then_throughput_and_the_accuracy_drop() -> None:
    assert key_figures(OBJECTIVE_METRICS) == [
        "accuracy",
        "latency_p95_ms",
        "energy_per_sample_j",
        "throughput_per_s",
        "accuracy_drop",
    ]


def test_a_trial_s_run_is_coloured_by_its_kind_and_its_role() -> None:
    colours = {p.number: p.colour for p in CLOUD}
    assert colours == {
        0: BASELINE_COLOUR,
        1: KINDS["front"][1],
        2: CHOSEN_COLOUR,
        3: KINDS["infeasible"][1],
        4: KINDS["feasible"][1],
    }
    assert [p.roles for p in CLOUD if p.roles] == [["baseline"], ["chosen"]]
