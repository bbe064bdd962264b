"""The trial contract's own logic: a screen judging a short window against the front."""

from __future__ import annotations

import pytest

from autotune.core.contract import Screen, ScreenObjective, TrialMetrics
from tests.coordinator_support import table_metrics

# accuracy (maximized, evaluated in full) and latency p95 (minimized, timed)
OBJECTIVES = [
    ScreenObjective(metric="accuracy", maximize=True, timed=False),
    ScreenObjective(metric="latency_p95_ms", maximize=False, timed=True),
]


def figures(accuracy: float, latency_ms: float) -> TrialMetrics:
    return table_metrics({}).model_copy(update={"accuracy": accuracy, "latency_p95_ms": latency_ms})


@pytest.mark.parametrize(
    ("accuracy", "latency_ms", "spread", "dominated"),
    [
        (0.90, 2.0, 0.0, True),  # less accurate, and 2 / 1.2 = 1.67 ms is still slower
        (0.90, 1.1, 0.0, False),  # 1.1 / 1.2 = 0.92 ms would be faster than the front's 1 ms
        (0.90, 1.5, 0.4, False),  # a wide window: 1.5 / 1.6 = 0.94 ms
        (0.95, 2.0, 0.0, True),  # as accurate, slower: dominated
        (0.96, 5.0, 0.0, False),  # more accurate than the front: never dominated
        (0.95, 1.2, 0.0, False),  # 1.2 / 1.2 = 1 ms ties on both: not dominated
    ],
)
def test_a_screen_judges_the_hopeful_figures_of_a_short_window(
    accuracy: float, latency_ms: float, spread: float, dominated: bool
) -> None:
    screen = Screen(objectives=OBJECTIVES, front=[[0.95, 1.0]], margin=0.2)
    found = screen.dominating(figures(accuracy, latency_ms), spread)
    assert (found == [0.95, 1.0]) is dominated
    assert (found is None) is not dominated
