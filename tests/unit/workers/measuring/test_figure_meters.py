"""Figure meters: registered by name, opened for every metric that names one, started and
stopped around the measured window, their figures carried by the measurement."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autotune.core.contract import MeasurementSettings
from autotune.core.knobs.config import parse_config
from autotune.core.measured.cpu_time import CPU_TIME_PER_SAMPLE
from autotune.core.metrics import METRICS, Direction, Metric
from tests.meter_fakes import FakeClock, FakeMeter, settings
from workers.measuring.figure_meter import (
    FIGURE_METERS,
    FigureRequest,
    Window,
    open_figure_meters,
    register_figure_meter,
)
from workers.measuring.meters import measure

CPU = CPU_TIME_PER_SAMPLE.name


class CpuClock:
    """CPU seconds that grow by `per_call_s` with each call of the fake workload."""

    def __init__(self, clock: FakeClock, per_call_s: float) -> None:
        self._clock = clock
        self._per_call_s = per_call_s

    def __call__(self) -> float:
        return 7.0 + self._clock.calls * self._per_call_s


def request(cpu_clock: CpuClock, batch: int = 4) -> FigureRequest:
    config = parse_config({"batch.size": batch}, "torch")
    return FigureRequest(config, MeasurementSettings(), cpu_clock, lambda: 0.0)


def test_cpu_time_per_sample_over_the_whole_window() -> None:
    clock = FakeClock()
    meters = open_figure_meters(request(CpuClock(clock, per_call_s=0.002), batch=4))
    measured = measure(
        clock.work, settings(min_seconds=0.2), FakeMeter(clock, 1.0), clock=clock, figures=meters
    )
    assert measured.window_calls == 100  # the energy window's repeated calls count too
    # 2 ms of CPU a call of 4 samples
    assert measured.figures == {CPU: pytest.approx(0.5)}


def test_our_own_measuring_threads_are_left_out() -> None:
    clock = FakeClock()
    spent = [0.0]
    config = parse_config({"batch.size": 1}, "torch")
    own = FigureRequest(config, MeasurementSettings(), CpuClock(clock, 0.001), lambda: spent[0])
    meter = FIGURE_METERS["cpu_time"](own)
    meter.start()
    for _ in range(10):
        clock.work()
    spent[0] = 0.005  # the memory sampler's thread took 5 ms of the 10
    assert meter.stop(Window(calls=10, seconds=0.1)) == {CPU: pytest.approx(0.5)}


@pytest.fixture
def bandwidth() -> Iterator[None]:
    """A second measured metric, and its meter, registered for one test."""
    metric = Metric(
        "bandwidth_gb_s",
        "GB/s",
        Direction.MAXIMIZE,
        "bytes / s",
        "memory bandwidth",
        "bandwidth",
        meter="bandwidth",
    )
    METRICS.register(metric.name, metric)

    class BandwidthMeter:
        def __init__(self, request: FigureRequest) -> None:
            pass

        def start(self) -> None:
            pass

        def stop(self, window: Window) -> dict[str, float]:
            return {"bandwidth_gb_s": 2.0 * window.calls}

    register_figure_meter("bandwidth")(BandwidthMeter)
    try:
        yield
    finally:
        METRICS.unregister(metric.name)
        FIGURE_METERS.unregister("bandwidth")


@pytest.mark.usefixtures("bandwidth")
def test_every_metric_that_names_a_meter_is_measured() -> None:
    clock = FakeClock()
    meters = open_figure_meters(request(CpuClock(clock, 0.001), batch=1))
    measured = measure(
        clock.work, settings(min_seconds=0.2), FakeMeter(clock, 0.0), clock=clock, figures=meters
    )
    assert measured.figures == {CPU: pytest.approx(1.0), "bandwidth_gb_s": 40.0}


def test_a_metric_naming_an_unregistered_meter_is_refused() -> None:
    metric = Metric("x_per_s", "1/s", Direction.MAXIMIZE, "x", "x", "x", meter="nowhere")
    METRICS.register(metric.name, metric)
    try:
        with pytest.raises(LookupError, match=r"names figure meter 'nowhere', which is not"):
            open_figure_meters(request(CpuClock(FakeClock(), 0.0)))
    finally:
        METRICS.unregister(metric.name)


def test_a_meter_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="'cpu_time' is already registered"):
        register_figure_meter("cpu_time")(FIGURE_METERS["cpu_time"])
