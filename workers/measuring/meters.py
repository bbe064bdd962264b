"""Meters: latency timing with a stopping rule that waits for the median to settle, peak
memory, and the measurement window that energy meters (`workers.measuring.energy`) read.

Stopping rule (`time_calls`): after the warm-up, time calls until both `min_iters` and
`min_seconds` are reached. With `settle_tolerance` None, stop there ("minimums"). Otherwise go
on until the distribution-free 95% confidence interval of the median has a relative
half-width (high - low) / 2 / median <= settle_tolerance ("settled"), checked when the number
of calls has grown by 10% since the last check (and once more at a cap); stop anyway at
`max_iters` ("max_iters") or `max_seconds` ("max_seconds"), whichever comes first. The
intervals are `autotune.core.stats`'s order-statistic intervals.

A call, warm-up calls but the first included, that takes `SLOW_CALL_FACTOR` times
`max_call_ms` or longer stops the measurement (`CallTooSlow`, the trial's status 'too_slow'):
one pathological kernel must not hold a slot for minutes. The first call may compile kernels
for the shape (torch.compile) or allocate buffers: it is not judged.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

import numpy as np

from autotune.core.contract import SLOW_CALL_FACTOR, MeasurementSettings
from autotune.core.errors import CallTooSlow
from autotune.core.stats import median_ci_relative_half_width, quantile_ci
from workers.measuring.energy import EnergyMeter, EnergyReading
from workers.measuring.figure_meter import NO_FIGURES, FigureMeters, Window

StopReason = Literal["settled", "minimums", "max_iters", "max_seconds"]
# The settle condition is checked again once the number of timed calls has grown by this factor.
SETTLE_CHECK_GROWTH = 1.1


@dataclass(frozen=True)
class LatencyStats:
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    cv: float
    iterations: int
    total_latency_s: float
    measure_seconds: float
    p95_ci_low_ms: float
    p95_ci_high_ms: float
    stopped_by: StopReason | None = None
    concurrency: int = 1
    latencies_ms: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)

    @property
    def calls_per_s(self) -> float:
        """Calls completed per second: one at a time, the inverse of the mean latency; under
        concurrent load, the calls completed over the wall time of the window."""
        if self.concurrency == 1:
            return self.iterations / self.total_latency_s
        return self.iterations / self.measure_seconds


# ---------------------------------------------------------------------------------------------
# Timing


def slow_call_ns(settings: MeasurementSettings) -> int | None:
    """The call time, in nanoseconds, past which a measurement stops (None: no bound)."""
    if settings.max_call_ms is None:
        return None
    return int(settings.max_call_ms * SLOW_CALL_FACTOR * 1e6)


def check_call(elapsed_ns: int, limit_ns: int | None) -> None:
    """Raise `CallTooSlow` for a call past the limit, with both figures."""
    if limit_ns is not None and elapsed_ns > limit_ns:
        raise CallTooSlow(
            f"a call took {elapsed_ns / 1e6:,.0f} ms, past {SLOW_CALL_FACTOR:g} x "
            f"measurement.max_call_ms = {limit_ns / 1e6:,.0f} ms: timing stopped",
            elapsed_ns / 1e6,
        )


class StoppingRule:
    """The stopping rule of the module docstring; `check` after each timed call."""

    def __init__(self, settings: MeasurementSettings) -> None:
        self._settings = settings
        self._slow_ns = slow_call_ns(settings)
        self._next_check = 0
        self.settle_checks = 0

    def check(self, latencies: Sequence[int], elapsed_s: float) -> StopReason | None:
        settings = self._settings
        n = len(latencies)
        check_call(latencies[-1], self._slow_ns)
        capped: StopReason | None = None
        if n >= settings.max_iters:
            capped = "max_iters"
        elif elapsed_s >= settings.max_seconds:
            capped = "max_seconds"
        if n >= settings.min_iters and elapsed_s >= settings.min_seconds:
            tolerance = settings.settle_tolerance
            if tolerance is None:
                return "minimums"
            if n >= self._next_check or capped is not None:
                self.settle_checks += 1
                if median_ci_relative_half_width(latencies) <= tolerance:
                    return "settled"
                self._next_check = max(n + 1, math.ceil(n * SETTLE_CHECK_GROWTH))
        return capped


def warm_up(
    call: Callable[[], object],
    iterations: int,
    concurrency: int = 1,
    slow_ns: int | None = None,
) -> None:
    """`iterations` calls, not recorded; under concurrency, spread over the threads (each
    makes at least one). A call past `slow_ns` raises `CallTooSlow`, but for the first: a
    session's first call at a shape may compile kernels or allocate its buffers."""

    def watched() -> None:
        before = time.perf_counter_ns()
        call()
        check_call(time.perf_counter_ns() - before, slow_ns)

    if iterations > 0:
        call()
        iterations -= 1
    if concurrency == 1:
        for _ in range(iterations):
            watched()
        return
    per_thread = max(math.ceil(iterations / concurrency), 1)

    def worker() -> None:
        for _ in range(per_thread):
            watched()

    _in_threads(concurrency, worker)


def time_calls(
    call: Callable[[], object],
    settings: MeasurementSettings,
    clock: Callable[[], int] = time.perf_counter_ns,
    concurrency: int = 1,
) -> LatencyStats:
    """Time calls under the stopping rule of the module docstring.

    With `concurrency` N > 1, N threads call concurrently; every completed call's latency
    counts, including those that finish after the rule said stop (so `max_iters` can be
    passed by up to N - 1), and `measure_seconds` runs to the last completion."""
    rule = StoppingRule(settings)
    if concurrency > 1:
        return _time_concurrently(call, rule, clock, concurrency)
    latencies_ns: list[int] = []
    start = clock()
    while True:
        before = clock()
        call()
        after = clock()
        latencies_ns.append(after - before)
        reason = rule.check(latencies_ns, (after - start) / 1e9)
        if reason is not None:
            return summarize(latencies_ns, (clock() - start) / 1e9, reason)


def _time_concurrently(
    call: Callable[[], object], rule: StoppingRule, clock: Callable[[], int], concurrency: int
) -> LatencyStats:
    latencies_ns: list[int] = []
    lock = threading.Lock()
    done = threading.Event()
    reasons: list[StopReason] = []
    start = [0]

    def worker() -> None:
        while not done.is_set():
            before = clock()
            call()
            after = clock()
            with lock:
                latencies_ns.append(after - before)
                if done.is_set():
                    break
                reason = rule.check(latencies_ns, (after - start[0]) / 1e9)
                if reason is not None:
                    reasons.append(reason)
                    done.set()

    def started() -> None:
        start[0] = clock()

    _in_threads(concurrency, worker, on_start=started, stop=done)
    return summarize(latencies_ns, (clock() - start[0]) / 1e9, reasons[0], concurrency)


def run_for(
    call: Callable[[], object],
    seconds: float,
    concurrency: int = 1,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> int:
    """Repeat untimed calls (from `concurrency` threads) until `seconds` have passed; returns
    the number of calls completed."""
    deadline = clock() + seconds * 1e9
    counts = [0] * concurrency

    def worker(index: int) -> None:
        while clock() < deadline:
            call()
            counts[index] += 1

    if concurrency == 1:
        worker(0)
    else:
        workers = iter(range(concurrency))
        lock = threading.Lock()

        def numbered() -> None:
            with lock:
                index = next(workers)
            worker(index)

        _in_threads(concurrency, numbered)
    return sum(counts)


def _in_threads(
    count: int,
    worker: Callable[[], None],
    on_start: Callable[[], None] = lambda: None,
    stop: threading.Event | None = None,
) -> None:
    """Run `worker` in `count` threads released together (after `on_start`); the first
    exception of any thread stops the others (through `stop`) and is raised here."""
    barrier = threading.Barrier(count + 1)
    errors: list[BaseException] = []

    def guarded() -> None:
        barrier.wait()
        try:
            worker()
        except BaseException as error:
            errors.append(error)
            if stop is not None:
                stop.set()

    threads = [threading.Thread(target=guarded, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    on_start()
    barrier.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def summarize(
    latencies_ns: Sequence[int] | np.ndarray,
    measure_seconds: float,
    stopped_by: StopReason | None = None,
    concurrency: int = 1,
) -> LatencyStats:
    """Percentiles use numpy's linear interpolation; cv is the population std over the mean;
    the p95's interval is `quantile_ci` (min or max where too few samples for a side)."""
    latencies_ms = np.sort(np.asarray(latencies_ns, dtype=np.float64) / 1e6)
    p50, p90, p95, p99 = np.percentile(latencies_ms, [50, 90, 95, 99])
    ci_low, ci_high = quantile_ci(latencies_ms, 0.95)
    mean = float(latencies_ms.mean())
    return LatencyStats(
        p50_ms=float(p50),
        p90_ms=float(p90),
        p95_ms=float(p95),
        p99_ms=float(p99),
        mean_ms=mean,
        cv=float(latencies_ms.std() / mean) if mean > 0 else 0.0,
        iterations=len(latencies_ns),
        total_latency_s=float(latencies_ms.sum() / 1e3),
        measure_seconds=measure_seconds,
        p95_ci_low_ms=ci_low,
        p95_ci_high_ms=ci_high,
        stopped_by=stopped_by,
        concurrency=concurrency,
        latencies_ms=latencies_ms,
    )


@dataclass(frozen=True)
class Measurement:
    """Latency of the timed calls, and energy and the figure meters' figures of the window
    around them; `window_calls` is the number of calls inside the window (the timed ones and
    any repeated to make the window as long as the energy meter needs)."""

    latency: LatencyStats
    energy: EnergyReading
    window_calls: int
    figures: dict[str, float] = field(default_factory=dict)


def measure(
    call: Callable[[], object],
    settings: MeasurementSettings,
    meter: EnergyMeter,
    concurrency: int = 1,
    clock: Callable[[], int] = time.perf_counter_ns,
    figures: FigureMeters = NO_FIGURES,
) -> Measurement:
    """Start the meters, time the calls, repeat them (untimed, same concurrency) until the
    window is `meter.min_window_s` long, stop the meters."""
    meter.start()
    figures.start()
    began = clock()
    latency = time_calls(call, settings, clock, concurrency)
    remaining_s = meter.min_window_s - (clock() - began) / 1e9
    extra = run_for(call, remaining_s, concurrency, clock) if remaining_s > 0 else 0
    window = Window(calls=latency.iterations + extra, seconds=(clock() - began) / 1e9)
    measured = figures.stop(window)
    energy = meter.stop()
    return Measurement(latency, energy, window.calls, measured)


# ---------------------------------------------------------------------------------------------
# Memory


class PeakMemorySampler:
    """Peak resident set size of this process, sampled by a background thread.

    Use as a context manager around the work to watch. The thread's own CPU time is tracked
    so energy estimates can leave it out.
    """

    def __init__(self, interval_s: float = 0.002) -> None:
        import psutil

        self._process = psutil.Process()
        self._helpers: list[psutil.Process] = []
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
        self._peak_bytes = 0
        self._own_cpu_s = 0.0

    def __enter__(self) -> PeakMemorySampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def peak_mb(self) -> float:
        return self._peak_bytes / 2**20

    def own_cpu_seconds(self) -> float:
        """CPU time the sampling thread has used so far."""
        return self._own_cpu_s

    def watch(self, pids: Sequence[int]) -> None:
        """Count these helper processes (a sharded session's workers) in, from now on: the
        figure becomes the peak of this process's and their resident sets summed."""
        import psutil

        for pid in pids:
            with contextlib.suppress(psutil.Error):
                self._helpers.append(psutil.Process(pid))

    def _sample(self) -> None:
        import psutil

        total = self._process.memory_info().rss
        for helper in self._helpers:
            with contextlib.suppress(psutil.Error):  # a helper that has exited holds nothing
                total += helper.memory_info().rss
        self._peak_bytes = max(self._peak_bytes, total)

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()
            self._own_cpu_s = time.thread_time()
