"""Meters: latency timing with a count-and-duration stopping rule, peak memory, energy."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import numpy as np

from autotune.contract import EnergySource, MeasurementSettings


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


def warm_up(call: Callable[[], object], iterations: int) -> None:
    for _ in range(iterations):
        call()


def time_calls(
    call: Callable[[], object],
    settings: MeasurementSettings,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> LatencyStats:
    """Time each call until both `min_iters` and `min_seconds` are reached; stop early at
    `max_iters` or `max_seconds`, whichever comes first."""
    latencies_ns: list[int] = []
    start = clock()
    while True:
        before = clock()
        call()
        after = clock()
        latencies_ns.append(after - before)
        if _should_stop(len(latencies_ns), (after - start) / 1e9, settings):
            return summarize(latencies_ns, (clock() - start) / 1e9)


def _should_stop(iterations: int, elapsed_s: float, settings: MeasurementSettings) -> bool:
    if iterations >= settings.max_iters or elapsed_s >= settings.max_seconds:
        return True
    return iterations >= settings.min_iters and elapsed_s >= settings.min_seconds


def summarize(latencies_ns: list[int], measure_seconds: float) -> LatencyStats:
    """Percentiles use numpy's linear interpolation; cv is the population std over the mean."""
    latencies_ms = np.asarray(latencies_ns, dtype=np.float64) / 1e6
    p50, p90, p95, p99 = np.percentile(latencies_ms, [50, 90, 95, 99])
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
    )


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


def cpu_seconds_with(pids: Sequence[int]) -> Callable[[], float]:
    """A CPU clock for `CpuTimeEnergyEstimate`: this process's CPU time plus that of the helper
    processes `pids` (user + system; a helper that has exited keeps its last reading)."""
    import psutil

    helpers = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            helpers.append(psutil.Process(pid))
    last = [0.0] * len(helpers)

    def clock() -> float:
        for index, helper in enumerate(helpers):
            with contextlib.suppress(psutil.Error):
                times = helper.cpu_times()
                last[index] = times.user + times.system
        return time.process_time() + sum(last)

    return clock


class EnergyMeter(Protocol):
    """Energy used between `start()` and `stop()`, in joules, and where the figure comes from."""

    source: EnergySource

    def start(self) -> None: ...

    def stop(self) -> float: ...


class CpuTimeEnergyEstimate:
    """An estimate, not a measurement (`source = "estimate"`), for machines with no readable
    energy counter.

    Power model: each CPU-second the process consumes (all of its threads, from
    `time.process_time()`) costs `watts_per_core` joules, i.e. a fully busy core draws
    `watts_per_core` watts and an idle one nothing. Idle/uncore/DRAM power and frequency
    scaling are ignored. CPU time of helper threads that are not the workload (the memory
    sampler) can be excluded through `excluded_cpu_seconds`.
    """

    source: EnergySource = "estimate"

    def __init__(
        self,
        watts_per_core: float,
        excluded_cpu_seconds: Callable[[], float] = lambda: 0.0,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self._watts_per_core = watts_per_core
        self._excluded = excluded_cpu_seconds
        self._cpu_clock = cpu_clock
        self._start_cpu = 0.0
        self._start_excluded = 0.0

    def start(self) -> None:
        self._start_cpu = self._cpu_clock()
        self._start_excluded = self._excluded()

    def stop(self) -> float:
        used = self._cpu_clock() - self._start_cpu
        excluded = self._excluded() - self._start_excluded
        return max(used - excluded, 0.0) * self._watts_per_core
