"""Latency timing: the stopping rule (fake clock, synthetic timings), concurrent timing, the
energy window, peak memory."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import numpy as np
import pytest

from autotune.core.contract import MAX_SECONDS
from autotune.core.errors import CallTooSlow
from autotune.core.stats import median_ci_relative_half_width, quantile_ci_ranks
from tests.meter_fakes import FakeClock, FakeMeter, settings
from workers.measuring.meters import (
    PeakMemorySampler,
    StoppingRule,
    measure,
    run_for,
    summarize,
    time_calls,
    warm_up,
)


def lognormal_ms(sigma: float, n: int = 20_000, seed: int = 0) -> list[float]:
    """Synthetic call durations around 1 ms with a lognormal spread `sigma`."""
    return list(np.random.default_rng(seed).lognormal(0.0, sigma, n))


# ---------------------------------------------------------------------------------------------
# Stopping rule


@pytest.mark.parametrize(
    ("fields", "expected_iterations", "reason"),
    [
        ({"min_iters": 7}, 7, "minimums"),  # the count is reached last
        ({"min_seconds": 0.5}, 50, "minimums"),  # 10 ms calls: the duration is reached last
        ({"min_seconds": 60.0, "max_iters": 20}, 20, "max_iters"),
        ({"min_iters": 500, "max_seconds": 0.1}, 10, "max_seconds"),
        # a constant latency settles at the first check (the median's interval needs 6 calls)
        ({"settle_tolerance": 0.02}, 6, "settled"),
        ({"settle_tolerance": 0.02, "min_iters": 30}, 30, "settled"),
    ],
)
def test_each_stop_reason(fields: dict[str, Any], expected_iterations: int, reason: str) -> None:
    clock = FakeClock()
    stats = time_calls(clock.work, settings(**fields), clock=clock)
    assert stats.iterations == clock.calls == expected_iterations
    assert stats.stopped_by == reason
    assert stats.measure_seconds == pytest.approx(expected_iterations * 0.010)
    assert stats.p50_ms == pytest.approx(10.0) and stats.cv == pytest.approx(0.0)


def test_a_distribution_that_does_not_settle_runs_to_a_cap() -> None:
    wide = lognormal_ms(sigma=2.0)  # the median's interval stays far wider than 0.1%
    clock = FakeClock(wide)
    by_count = time_calls(clock.work, settings(settle_tolerance=0.001, max_iters=300), clock)
    assert by_count.stopped_by == "max_iters" and by_count.iterations == 300
    clock = FakeClock(wide)
    by_time = time_calls(clock.work, settings(settle_tolerance=0.001, max_seconds=0.2), clock)
    assert by_time.stopped_by == "max_seconds"
    assert by_time.measure_seconds >= 0.2 > by_time.measure_seconds - wide[clock.calls - 1] / 1e3


def test_a_noisy_distribution_runs_longer_than_a_tight_one() -> None:
    rule = settings(
        settle_tolerance=0.02, min_iters=20, max_iters=20_000, max_seconds=MAX_SECONDS
    )  # the fake clock: no cap
    runs = {}
    for sigma in (0.02, 0.2, 0.6):
        clock = FakeClock(lognormal_ms(sigma, seed=1))
        runs[sigma] = time_calls(clock.work, rule, clock=clock)
        assert runs[sigma].stopped_by == "settled"
        assert (
            median_ci_relative_half_width(
                np.asarray(lognormal_ms(sigma, seed=1)[: runs[sigma].iterations]) * 1e6
            )
            <= 0.02
        )
    assert runs[0.02].iterations < runs[0.2].iterations < runs[0.6].iterations
    assert runs[0.02].iterations == 20  # tight: settled at the minimums


def test_a_call_far_past_the_bound_stops_timing_with_both_figures() -> None:
    """max_call_ms 5: a call of 10 ms is timed; one of 30 ms (past 4 x 5 ms) stops it."""
    slow = FakeClock([10.0] * 5 + [30.0] + [10.0] * 100)
    with pytest.raises(CallTooSlow) as info:
        time_calls(slow.work, settings(max_call_ms=5.0, min_iters=50), clock=slow)
    assert slow.calls == 6
    assert "a call took 30 ms" in str(info.value) and "= 20 ms" in str(info.value)
    assert info.value.call_ms == pytest.approx(30.0)
    unbounded = FakeClock([30.0] * 10)
    stats = time_calls(unbounded.work, settings(max_call_ms=None, min_iters=10), clock=unbounded)
    assert stats.iterations == 10


def test_a_slow_warm_up_call_stops_the_trial_before_timing() -> None:
    calls: list[int] = []

    def slow() -> None:
        calls.append(1)
        time.sleep(0.02)

    with pytest.raises(CallTooSlow):
        warm_up(slow, 10, slow_ns=5_000_000)
    assert calls == [1, 1]  # the first call is not judged: it may compile for the shape
    warm_up(slow, 2, slow_ns=None)
    assert len(calls) == 4


def test_a_slow_first_warm_up_call_alone_does_not_stop_the_trial() -> None:
    calls: list[int] = []

    def compiles_first() -> None:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.02)

    warm_up(compiles_first, 5, slow_ns=5_000_000)
    assert len(calls) == 5


def test_the_settle_condition_is_checked_every_ten_percent() -> None:
    rule = StoppingRule(settings(settle_tolerance=1e-9, min_iters=100, max_iters=10_000))
    latencies: list[int] = []
    for value in lognormal_ms(1.0, n=10_000, seed=2):
        latencies.append(int(value * 1e6))
        if rule.check(latencies, elapsed_s=0.0) is not None:
            break
    assert len(latencies) == 10_000
    # checks at 100, 110, 121, ... up to 10_000, and once more at the cap
    assert rule.settle_checks <= math.ceil(math.log(100) / math.log(1.1)) + 2


def test_a_final_check_at_the_cap_can_settle() -> None:
    # Past 10 calls the condition is checked every 10% (at 11, 13, 15, ...): a cap at 14 is
    # checked too. Find synthetic timings whose interval first gets narrow enough at 14.
    cap = 14
    checked = [6, 7, 8, 9, 10, 11, 13]
    for seed in range(1000):
        durations = lognormal_ms(0.3, n=cap, seed=seed)
        widths = [median_ci_relative_half_width(np.asarray(durations[:n])) for n in checked]
        at_cap = median_ci_relative_half_width(np.asarray(durations))
        if at_cap < min(widths):
            break
    else:
        pytest.fail("no synthetic timings narrow first at the cap")
    clock = FakeClock(durations)
    rule = settings(settle_tolerance=at_cap * 1.0001, min_iters=5, max_iters=cap)
    stats = time_calls(clock.work, rule, clock=clock)
    assert stats.iterations == cap and stats.stopped_by == "settled"


def test_percentiles_mean_spread_and_p95_interval_of_the_timed_calls() -> None:
    durations = [float(d) for d in range(1, 11)]
    clock = FakeClock(durations)
    stats = time_calls(clock.work, settings(min_iters=10, max_iters=10), clock=clock)
    expected = np.percentile(durations, [50, 90, 95, 99])
    got = [stats.p50_ms, stats.p90_ms, stats.p95_ms, stats.p99_ms]
    assert got == pytest.approx(list(expected))
    assert stats.mean_ms == pytest.approx(5.5)
    assert stats.cv == pytest.approx(np.std(durations) / 5.5)
    assert stats.total_latency_s == pytest.approx(0.055)
    # 10 calls: the p95's interval has a lower rank (x_(8)) but no upper one, so the max
    assert (stats.p95_ci_low_ms, stats.p95_ci_high_ms) == pytest.approx((8.0, 10.0))


def test_the_p95_interval_brackets_the_p95_with_enough_calls() -> None:
    latencies_ns = [int(v * 1e6) for v in lognormal_ms(0.5, n=500, seed=3)]
    stats = summarize(latencies_ns, 1.0)
    low, high = quantile_ci_ranks(500, 0.95)
    ordered = np.sort(np.asarray(latencies_ns) / 1e6)
    assert low is not None and high is not None
    assert (stats.p95_ci_low_ms, stats.p95_ci_high_ms) == (ordered[low], ordered[high])
    assert ordered[0] < stats.p95_ci_low_ms <= stats.p95_ms <= stats.p95_ci_high_ms < ordered[-1]


def test_summarize_orders_percentiles() -> None:
    stats = summarize([5_000_000, 1_000_000, 9_000_000, 2_000_000, 3_000_000], 0.02)
    assert stats.p50_ms <= stats.p90_ms <= stats.p95_ms <= stats.p99_ms <= 9.0
    assert stats.stopped_by is None and stats.concurrency == 1


def test_warm_up_calls_are_not_timed() -> None:
    calls: list[int] = []
    warm_up(lambda: calls.append(1), 4)
    assert len(calls) == 4


# ---------------------------------------------------------------------------------------------
# Concurrency


class ThreadRecorder:
    def __init__(self, fail_after: int | None = None) -> None:
        self.threads: list[int] = []
        self._lock = threading.Lock()
        self._fail_after = fail_after

    def __call__(self) -> None:
        with self._lock:
            self.threads.append(threading.get_ident())
            if self._fail_after is not None and len(self.threads) > self._fail_after:
                raise RuntimeError("the session broke")
        time.sleep(0.0005)  # releases the GIL, as inference kernels do


def test_concurrent_timing_counts_every_thread_s_calls() -> None:
    call = ThreadRecorder()
    stats = time_calls(call, settings(min_iters=40), concurrency=3)
    assert stats.concurrency == 3 and stats.stopped_by == "minimums"
    # every completed call counts, also those in flight when the rule said stop
    assert stats.iterations == len(call.threads) and 40 <= stats.iterations <= 40 + 2
    assert len(set(call.threads)) == 3
    assert stats.calls_per_s == pytest.approx(stats.iterations / stats.measure_seconds)


def test_a_failing_call_under_concurrency_raises() -> None:
    with pytest.raises(RuntimeError, match="the session broke"):
        time_calls(ThreadRecorder(fail_after=10), settings(min_iters=1000), concurrency=2)


def test_concurrent_warm_up_and_repeats() -> None:
    call = ThreadRecorder()
    warm_up(call, 5, concurrency=2)
    # the first call on the calling thread, then two on each of two threads
    assert len(call.threads) == 5 and len(set(call.threads)) == 3
    repeated, clock = ThreadRecorder(), FakeClock(default_ms=1.0)

    def call() -> None:  # time passes only as calls are made: a busy machine changes nothing
        repeated()
        clock.work()

    assert run_for(call, 0.01, concurrency=2, clock=clock) == len(repeated.threads) >= 10


# ---------------------------------------------------------------------------------------------
# The energy window


def test_the_workload_is_repeated_until_the_energy_window_is_long_enough() -> None:
    clock = FakeClock()
    meter = FakeMeter(clock, min_window_s=1.0)
    measured = measure(clock.work, settings(min_seconds=0.2), meter, clock=clock)
    assert measured.latency.iterations == 20  # 10 ms calls
    assert measured.window_calls == clock.calls == 100
    assert measured.energy.seconds == pytest.approx(1.0)
    assert measured.energy.above_idle_joules == pytest.approx(80.0)


def test_a_meter_without_a_window_reads_the_timed_calls_only() -> None:
    clock = FakeClock()
    measured = measure(clock.work, settings(min_seconds=0.2), FakeMeter(clock, 0.0), clock=clock)
    assert measured.window_calls == measured.latency.iterations == clock.calls == 20


# ---------------------------------------------------------------------------------------------
# Memory


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
