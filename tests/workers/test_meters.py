from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from autotune.contract import MeasurementSettings
from workers.meters import (
    CpuTimeEnergyEstimate,
    PeakMemorySampler,
    summarize,
    time_calls,
    warm_up,
)


class FakeClock:
    """A nanosecond clock that only moves when the fake workload runs."""

    def __init__(self, durations_ms: list[float] | None = None, default_ms: float = 10.0) -> None:
        self.now_ns = 0
        self.calls = 0
        self._durations_ms = durations_ms or []
        self._default_ms = default_ms

    def __call__(self) -> int:
        return self.now_ns

    def work(self) -> None:
        index = self.calls
        self.calls += 1
        duration = (
            self._durations_ms[index] if index < len(self._durations_ms) else self._default_ms
        )
        self.now_ns += int(duration * 1e6)


def settings(**fields: float) -> MeasurementSettings:
    defaults: dict[str, Any] = {
        "warmup_iters": 0,
        "min_iters": 5,
        "max_iters": 1000,
        "min_seconds": 0.0,
    }
    return MeasurementSettings(**{**defaults, "max_seconds": 100.0, **fields})


@pytest.mark.parametrize(
    ("fields", "expected_iterations"),
    [
        ({"min_iters": 7, "min_seconds": 0.0}, 7),  # the count is reached last
        ({"min_iters": 5, "min_seconds": 0.5}, 50),  # 10 ms calls: the duration is reached last
        ({"min_iters": 5, "min_seconds": 60.0, "max_iters": 20}, 20),  # capped by count
        ({"min_iters": 500, "max_iters": 1000, "max_seconds": 0.1}, 10),  # capped by duration
    ],
)
def test_stopping_rule(fields: dict[str, float], expected_iterations: int) -> None:
    clock = FakeClock()
    stats = time_calls(clock.work, settings(**fields), clock=clock)
    assert stats.iterations == clock.calls == expected_iterations
    assert stats.measure_seconds == pytest.approx(expected_iterations * 0.010)
    assert stats.p50_ms == pytest.approx(10.0) and stats.cv == pytest.approx(0.0)


def test_percentiles_mean_and_spread_of_the_timed_calls() -> None:
    durations = [float(d) for d in range(1, 11)]
    clock = FakeClock(durations)
    stats = time_calls(clock.work, settings(min_iters=10, max_iters=10), clock=clock)
    expected = np.percentile(durations, [50, 90, 95, 99])
    got = [stats.p50_ms, stats.p90_ms, stats.p95_ms, stats.p99_ms]
    assert got == pytest.approx(list(expected))
    assert stats.mean_ms == pytest.approx(5.5)
    assert stats.cv == pytest.approx(np.std(durations) / 5.5)
    assert stats.total_latency_s == pytest.approx(0.055)


def test_warm_up_calls_are_not_timed() -> None:
    calls: list[int] = []
    warm_up(lambda: calls.append(1), 4)
    assert len(calls) == 4


def test_summarize_orders_percentiles() -> None:
    stats = summarize([5_000_000, 1_000_000, 9_000_000, 2_000_000, 3_000_000], 0.02)
    assert stats.p50_ms <= stats.p90_ms <= stats.p95_ms <= stats.p99_ms <= 9.0


def test_energy_estimate_is_cpu_time_times_watts_minus_excluded_threads() -> None:
    cpu = iter([1.0, 3.0])
    excluded = iter([0.1, 0.3])
    meter = CpuTimeEnergyEstimate(10.0, lambda: next(excluded), cpu_clock=lambda: next(cpu))
    meter.start()
    assert meter.stop() == pytest.approx((2.0 - 0.2) * 10.0)
    assert meter.source == "estimate"


def test_energy_estimate_grows_with_real_cpu_work() -> None:
    meter = CpuTimeEnergyEstimate(10.0)
    meter.start()
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert meter.stop() >= 0.5 * 0.05 * 10.0


def test_peak_memory_catches_a_short_lived_allocation() -> None:
    with PeakMemorySampler() as before:
        pass
    with PeakMemorySampler() as sampler:
        block = np.ones(256 * 2**20 // 8)  # 256 MiB, touched
        time.sleep(0.05)
        del block
        time.sleep(0.02)
    assert sampler.peak_mb >= before.peak_mb + 200
    assert sampler.own_cpu_seconds() >= 0.0
