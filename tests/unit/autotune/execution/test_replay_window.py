"""The replay executor answers a spec's batch scan and screening window as a worker does: the
scan from the table's rows of the configuration at other batches, the window drawn from the
row's recorded spread, seeded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.core.contract import MeasurementSettings, Screen, ScreenObjective, TrialSpec
from autotune.execution.replay import ReplayExecutor
from autotune.execution.replay_table import ReplayTable
from autotune.execution.replay_window import SCAN_CALLS, SCREEN_CALLS, short_window
from tests.replay_tables import write_table

COLUMNS = [
    "runtime.engine",
    "batch.size",
    "status",
    "accuracy",
    "latency_p50_ms",
    "latency_p95_ms",
    "energy_per_sample_j",
    "measure_seconds",
]
EAGER = {"runtime.engine": "torch_eager"}
ONNX = {"runtime.engine": "onnxruntime"}
# Accuracy, then p95 per call: the front point a window is judged against.
OBJECTIVES = [
    ScreenObjective(metric="accuracy", maximize=True, timed=False),
    ScreenObjective(metric="latency_p95_ms", maximize=False, timed=True),
]


def row(config: dict[str, Any], batch: int, p50: float, p95: float, **cells: Any) -> dict:
    return {
        **config,
        "batch.size": batch,
        "status": "ok",
        "accuracy": 0.9,
        "latency_p50_ms": p50,
        "latency_p95_ms": p95,
        "energy_per_sample_j": 0.01 * p50,
        "measure_seconds": 4.0,
        **cells,
    }


@pytest.fixture
def table(tmp_path: Path) -> ReplayTable:
    """torch_eager at batches 1, 8, 16 (out of memory) and 64; onnxruntime at 1 and 64 (no
    row at 8); onnxruntime's calls are ten times eager's, with a spread."""
    rows = [
        row(EAGER, 1, 1.0, 1.5),
        row(EAGER, 8, 5.0, 6.0),
        {**EAGER, "batch.size": 16, "status": "oom", "measure_seconds": 1.0},
        row(EAGER, 64, 30.0, 33.0),
        row(ONNX, 1, 10.0, 20.0),
        row(ONNX, 64, 200.0, 260.0),
    ]
    return ReplayTable.load(write_table(tmp_path / "t.csv", rows, COLUMNS))


def spec(table: ReplayTable, config: dict[str, Any], number: int = 1, **fields: Any) -> TrialSpec:
    return TrialSpec(
        study="s", trial_number=number, workload=table.workload(), config=config, **fields
    )


def answer(executor: ReplayExecutor, trial: TrialSpec) -> Any:
    executor.submit(trial)
    (result,) = executor.wait()
    return result


def test_the_scan_reads_each_batch_from_its_row_and_stops_where_a_worker_would(
    table: ReplayTable,
) -> None:
    executor = ReplayExecutor(table)
    scan = answer(executor, spec(table, {**EAGER, "batch.size": 1}, batch_scan=[1, 8, 16, 64]))
    assert scan.status == "ok"
    assert scan.call_ms_by_batch == {1: 1.0, 8: 5.0}  # batch 16 ran out of memory: the end
    assert scan.duration_s == pytest.approx(4.0 + SCAN_CALLS * 6.0 / 1000)
    bounded = MeasurementSettings(max_call_ms=20.0)
    trial = spec(table, {**ONNX, "batch.size": 1}, batch_scan=[1, 8, 64], measurement=bounded)
    # onnxruntime has no row at 8: left out; its call at 64 passes the bound and ends the scan.
    assert answer(executor, trial).call_ms_by_batch == {1: 10.0, 64: 200.0}
    unscanned = answer(executor, spec(table, {**EAGER, "batch.size": 8}))
    assert unscanned.call_ms_by_batch == {} and unscanned.duration_s == 4.0


def test_a_dominated_window_is_screened_with_its_figures(table: ReplayTable) -> None:
    screen = Screen(objectives=OBJECTIVES, front=[[0.9, 1.5]], margin=0.2)
    executor = ReplayExecutor(table)
    result = answer(executor, spec(table, {**ONNX, "batch.size": 1}, screen=screen))
    assert result.status == "screened" and result.metrics is None
    figures = result.screening
    assert figures is not None and figures.accuracy == 0.9
    assert figures.iterations >= SCREEN_CALLS
    assert figures.latency_p95_ms > 1.5 * 1.2
    assert figures.measure_seconds == pytest.approx(
        figures.iterations * figures.latency_mean_ms / 1000
    )
    assert result.reason is not None and result.reason.startswith(
        f"screened: {figures.iterations} calls in"
    )
    # Its row's 4 s less the full timing it skipped, never shorter than the window.
    assert figures.measure_seconds <= result.duration_s < 4.0
    assert executor.simulated_seconds == result.duration_s


def test_a_window_within_reach_of_the_front_is_timed_in_full(table: ReplayTable) -> None:
    """Eager at batch 1 (p95 1.5 ms) against a front point at 1.4 ms: within the margin."""
    screen = Screen(objectives=OBJECTIVES, front=[[0.9, 1.4]], margin=0.2)
    result = answer(ReplayExecutor(table), spec(table, {**EAGER, "batch.size": 1}, screen=screen))
    assert result.status == "ok" and result.screening is None
    assert result.metrics is not None and result.metrics.latency_p95_ms == 1.5  # the row's


def test_windows_are_repeatable_by_seed_and_trial(table: ReplayTable) -> None:
    screen = Screen(objectives=OBJECTIVES, front=[[0.9, 1.5]], margin=0.2)

    def window(seed: int, number: int) -> Any:
        trial = spec(table, {**ONNX, "batch.size": 1}, number=number, screen=screen)
        return answer(ReplayExecutor(table, seed=seed), trial).screening

    assert window(0, 1) == window(0, 1)
    assert window(0, 1) != window(1, 1)
    assert window(0, 1) != window(0, 2)


def test_drawn_calls_follow_the_recorded_median_and_p95(table: ReplayTable) -> None:
    """A long window of onnxruntime at batch 1 (p50 10 ms, p95 20 ms) reads them back."""
    recorded = table.lookup({**ONNX, "batch.size": 1})
    assert recorded is not None and recorded.metrics is not None
    long = MeasurementSettings(min_iters=8, min_seconds=40.0, max_seconds=100.0, max_iters=10**6)
    window = short_window(recorded.metrics, long, 1, np.random.default_rng(0))
    figures = window.figures
    assert figures.iterations > 2000
    assert figures.latency_p50_ms == pytest.approx(10.0, rel=0.05)
    assert figures.latency_p95_ms == pytest.approx(20.0, rel=0.08)
    assert figures.throughput_per_s == pytest.approx(
        1000 * figures.iterations / (window.seconds * 1000)
    )
    assert window.spread < 0.05


def test_a_row_without_a_spread_draws_its_p95_every_call(tmp_path: Path) -> None:
    flat = ReplayTable.load(write_table(tmp_path / "flat.csv", [row(EAGER, 1, 2.0, 2.0)], COLUMNS))
    metrics = flat.rows[0].metrics
    assert metrics is not None
    settings = MeasurementSettings(min_iters=8, min_seconds=0.1, max_seconds=1.0)
    window = short_window(metrics, settings, 1, np.random.default_rng(3))
    assert window.figures.iterations == 50  # 0.1 s of 2 ms calls
    assert window.figures.latency_p50_ms == window.figures.latency_p95_ms == pytest.approx(2.0)
    assert window.spread == 0.0
