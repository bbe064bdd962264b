"""The `cpu_time` figure meter: the worker's CPU seconds over the measured window (every
thread of its process and its helper processes, less our own measuring threads), per sample
(`autotune.core.measured.cpu_time`)."""

from __future__ import annotations

from autotune.core.measured.cpu_time import CPU_TIME_PER_SAMPLE
from workers.measuring.figure_meter import FigureRequest, Window, register_figure_meter


@register_figure_meter("cpu_time")
class CpuTimeMeter:
    def __init__(self, request: FigureRequest) -> None:
        self._request = request
        self._started = 0.0

    def start(self) -> None:
        self._started = self._cpu_seconds()

    def stop(self, window: Window) -> dict[str, float]:
        spent_s = self._cpu_seconds() - self._started
        samples = window.calls * self._request.config.batch_size
        return {CPU_TIME_PER_SAMPLE.name: 1000.0 * spent_s / samples}

    def _cpu_seconds(self) -> float:
        return self._request.cpu_clock() - self._request.excluded_cpu_seconds()
