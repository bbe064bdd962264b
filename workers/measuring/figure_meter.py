"""Figure meters: what measures the metrics carried in the map of measured figures
(`autotune.core.contract.figures`). A metric of the registry names its meter
(`Metric.meter`); the meter's factory is registered here by that name
(`register_figure_meter`), one module each (autotune's own in `workers.measuring.figure_meters`),
loaded through the `autotune.figure_meters` entry points at the end of this module.

For a measurement, `open_figure_meters` opens the meter of every registered metric that names
one. Like an energy meter, each is started right before the measured calls and stopped right
after them (`workers.measuring.meters.measure`), and gives `{metric name: value}` for that
window."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from autotune.core.contract import MeasurementSettings
from autotune.core.knobs.config import TrialConfig
from autotune.core.metrics import mapped_metrics
from autotune.core.plugins import FIGURE_METERS_GROUP, load_plugins
from autotune.core.registry import Registry


@dataclass(frozen=True)
class FigureRequest:
    """What a figure meter may use: the trial, its measurement settings, the CPU clock of the
    worker (its process and its helper processes) and the CPU time of our own measuring
    threads, to leave out."""

    config: TrialConfig
    settings: MeasurementSettings
    cpu_clock: Callable[[], float] = time.process_time
    excluded_cpu_seconds: Callable[[], float] = lambda: 0.0


@dataclass(frozen=True)
class Window:
    """The measured window: its calls (timed, and any repeated to fill an energy meter's
    window) and its wall seconds."""

    calls: int
    seconds: float


class FigureMeter(Protocol):
    def start(self) -> None: ...

    def stop(self, window: Window) -> Mapping[str, float]:
        """The figures of the window since `start`, by metric name."""
        ...


FigureMeterFactory = Callable[[FigureRequest], FigureMeter]
FIGURE_METERS: Registry[FigureMeterFactory] = Registry("figure meter")
"""The figure meters by the name a metric gives in `Metric.meter`."""


def register_figure_meter(name: str) -> Callable[[FigureMeterFactory], FigureMeterFactory]:
    """Registers the decorated factory in `FIGURE_METERS` as `name`. Raises ValueError where
    `name` is taken."""
    return FIGURE_METERS.registers(name)


class FigureMeters:
    """Meters started and stopped together; their figures merged."""

    def __init__(self, meters: list[FigureMeter]) -> None:
        self._meters = meters

    def start(self) -> None:
        for meter in self._meters:
            meter.start()

    def stop(self, window: Window) -> dict[str, float]:
        figures: dict[str, float] = {}
        for meter in self._meters:
            figures.update(meter.stop(window))
        return figures


NO_FIGURES = FigureMeters([])


def open_figure_meters(request: FigureRequest) -> FigureMeters:
    """The meters of every registered metric that names one, each opened once. Raises
    LookupError where a metric names a meter that is not registered."""
    names = dict.fromkeys(metric.meter for metric in mapped_metrics().values())
    meters = []
    for name in names:
        if name is None or name not in FIGURE_METERS:
            users = [m.name for m in mapped_metrics().values() if m.meter == name]
            raise LookupError(
                f"metric {users} names figure meter {name!r}, which is not registered "
                f"(registered: {sorted(FIGURE_METERS)})"
            )
        meters.append(FIGURE_METERS[name](request))
    return FigureMeters(meters)


load_plugins(FIGURE_METERS_GROUP)
