"""What a recorded table gives a trial beyond its row: the short screening window a worker
times first (`short_window`) and the baseline's batch scan (`scanned_call_ms`).

A short window's call times are drawn from the row's recorded spread: log-normal, its median
the row's `latency_p50_ms` and its shape the recorded p95 over that median
(sigma = ln(p95 / p50) / 1.645). A row that records only its p95 (p50 filled with it) has no
spread: every drawn call takes its p95. Calls are drawn until the window's own stopping rule
ends it, as a worker's screening window (`SCREEN_CALLS` calls and the screening seconds, or
the measurement's `min_seconds` where shorter; a quarter of `max_seconds` at most). The
window's figures are then read as a worker reads its own: percentiles, calls per second, the
interval of the median (`median_ci_relative_half_width`); energy per sample scales the row's
with the window's mean call time over the row's (the CPU-time estimate is proportional to
it); accuracy, memory and the energy source are the row's.

The batch scan reads each batch's call time from the row of the same configuration at that
batch: its `latency_p50_ms` (a worker's scan takes the median of a few calls). A batch the
table has no row for is left out of the scan (and logged); a batch whose row did not run
(out of memory, unsupported) ends the scan, as a failing call ends a worker's; so does a
batch whose call passes `max_call_ms`, after it is read."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from autotune.core.contract import ConfigValue, MeasurementSettings, TrialMetrics
from autotune.core.stats import median_ci_relative_half_width, quantile_ci
from autotune.execution.replay_table import ReplayTable
from autotune.space.search_space import BATCH_KEY

logger = logging.getLogger(__name__)

# As a worker's screening window: calls at least, and the normal quantile of p95.
SCREEN_CALLS = 8
Z_P95 = 1.6448536269514722
# Calls a worker's batch scan makes at each batch: one untimed at the new shape, then timed.
SCAN_CALLS = 1 + 3
_DRAWN_AT_ONCE = 256


@dataclass(frozen=True)
class Window:
    """A drawn short window: its figures, the relative half-width of its median's interval,
    and how long it took."""

    figures: TrialMetrics
    spread: float
    seconds: float


def screening_settings(settings: MeasurementSettings, screen_seconds: float) -> MeasurementSettings:
    """The stopping rule of a worker's short window within `settings`."""
    return settings.model_copy(
        update={
            "min_iters": SCREEN_CALLS,
            "min_seconds": min(screen_seconds, settings.min_seconds),
            "max_seconds": max(screen_seconds, settings.max_seconds / 4),
            "settle_tolerance": None,
        }
    )


def short_window(
    row: TrialMetrics, settings: MeasurementSettings, batch: int, rng: np.random.Generator
) -> Window:
    """A short window of the row's configuration under `settings` (already the window's
    own: `screening_settings`), its call times drawn with `rng`."""
    calls_ms, stopped_by = _draw_calls(row, settings, rng)
    seconds = float(calls_ms.sum()) / 1000.0
    ordered = np.sort(calls_ms)
    p50, p90, p95, p99 = (float(v) for v in np.percentile(ordered, [50, 90, 95, 99]))
    mean = float(ordered.mean())
    scale = mean / row.latency_mean_ms
    throughput = batch * len(ordered) / seconds
    p95_low, p95_high = quantile_ci(ordered, 0.95)
    figures = row.model_copy(
        update={
            "latency_p50_ms": p50,
            "latency_p90_ms": p90,
            "latency_p95_ms": p95,
            "latency_p99_ms": p99,
            "latency_mean_ms": mean,
            "latency_cv": float(ordered.std() / mean),
            "latency_p95_ci_low_ms": p95_low,
            "latency_p95_ci_high_ms": p95_high,
            "throughput_per_s": throughput,
            "latency_per_sample_ms": 1000.0 / throughput,
            "energy_per_sample_j": row.energy_per_sample_j * scale,
            "energy_above_idle_per_sample_j": _scaled(row.energy_above_idle_per_sample_j, scale),
            "iterations": len(ordered),
            "measure_seconds": seconds,
            "stopped_by": stopped_by,
        }
    )
    return Window(figures, median_ci_relative_half_width(ordered), seconds)


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def _draw_calls(
    row: TrialMetrics, settings: MeasurementSettings, rng: np.random.Generator
) -> tuple[np.ndarray, str]:
    """Call times (ms) drawn until the window's stopping rule ends it, and which part did."""
    median = row.latency_p50_ms if row.latency_p50_ms > 0 else row.latency_p95_ms
    sigma = max(0.0, math.log(row.latency_p95_ms / median)) / Z_P95
    drawn = np.empty(0)
    while True:
        more = median * np.exp(sigma * rng.standard_normal(_DRAWN_AT_ONCE))
        drawn = np.concatenate([drawn, more])
        elapsed_s = np.cumsum(drawn) / 1000.0
        calls = np.arange(1, len(drawn) + 1)
        minimums = (calls >= settings.min_iters) & (elapsed_s >= settings.min_seconds)
        stops = {
            "minimums": minimums,
            "max_iters": calls >= settings.max_iters,
            "max_seconds": elapsed_s >= settings.max_seconds,
        }
        first = {reason: int(np.argmax(hit)) for reason, hit in stops.items() if hit.any()}
        if first:
            reason = min(first, key=lambda r: first[r])
            return drawn[: first[reason] + 1], reason


def full_timing_seconds(row: TrialMetrics, settings: MeasurementSettings) -> float:
    """About how long timing the row in full under `settings` takes: its minimums at the
    row's mean call time, within its caps (a settled median would only end it sooner)."""
    mean_s = row.latency_mean_ms / 1000.0
    calls = max(settings.min_iters, math.ceil(settings.min_seconds / mean_s))
    return min(min(calls, settings.max_iters) * mean_s, settings.max_seconds)


def screened_seconds(measure_seconds: float, full_s: float, window_s: float) -> float:
    """A screened trial's time: its row's, less the timing it skipped; never longer than
    the row, never shorter than its window."""
    return min(measure_seconds, max(window_s, measure_seconds - (full_s - window_s)))


def scanned_call_ms(
    table: ReplayTable,
    config: dict[str, ConfigValue],
    batches: list[int],
    max_call_ms: float | None,
) -> dict[int, float]:
    """The call time (ms) at each batch of a scan, read from the table (module docstring)."""
    call_ms: dict[int, float] = {}
    for batch in batches:
        row = table.lookup({**config, BATCH_KEY: batch})
        if row is None:
            logger.warning("the batch scan leaves out batch %d: no row of %s at it", batch, config)
            continue
        if row.metrics is None:
            break
        call_ms[batch] = row.metrics.latency_p50_ms
        if max_call_ms is not None and call_ms[batch] > max_call_ms:
            break
    return call_ms
