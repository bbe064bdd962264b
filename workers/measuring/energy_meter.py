"""What an energy meter is (`EnergyMeter`, `EnergyReading`), and `CounterMeter`, the base of
the meters that read a cumulative energy counter (NVML, RAPL).

A meter is started right before the workload and stopped right after it. Counter meters first
sample the device's idle draw (nothing of ours runs during it), so a reading has both the total
energy and the part above idle, and they ask for a window of at least `min_window_s` (the caller
repeats the workload inside it: NVML updates its counter only about every 100 ms).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from autotune.core.contract import EnergySource
from autotune.core.errors import AutotuneError

IDLE_SECONDS = 0.5
# How long a counter meter waits for its counter to move at the window's edges: NVML updates
# about every 100 ms, RAPL about every millisecond.
TICK_TIMEOUT_S = 0.5
TICK_POLL_S = 0.001


class MeterUnavailable(AutotuneError):
    """This meter cannot measure here (no library, no counter, no permission)."""


@dataclass(frozen=True)
class EnergyReading:
    """Energy of the workload window: `joules` in total over `seconds`, and (counter meters
    only) the device's idle draw measured right before the window."""

    joules: float
    seconds: float
    idle_power_w: float | None = None

    @property
    def above_idle_joules(self) -> float | None:
        """`joules` less what the device would have drawn idle over the window; a window whose
        draw is within the noise of idle reads 0, never less."""
        if self.idle_power_w is None:
            return None
        return max(self.joules - self.idle_power_w * self.seconds, 0.0)


class EnergyMeter(Protocol):
    """Energy used between `start()` and `stop()`, and where the figure comes from."""

    source: EnergySource
    min_window_s: float  # the workload must run at least this long between start and stop
    model: str | None  # the estimate's power model (`TrialMetrics.energy_model`); None: a counter

    def start(self) -> None: ...

    def stop(self) -> EnergyReading: ...

    def close(self) -> None: ...


class CounterMeter:
    """A cumulative energy counter read at both edges of the window.

    A counter that updates every T seconds is stale by up to T when read, so both edges are
    aligned to the counter's updates: `start()` polls until the counter moves (the window
    begins at that update), and `stop()` notes when the workload ended, then polls until the
    next update. The device is idle between the workload's end and that update (the tail), so
    total = counted - idle power x tail, and above idle = counted - idle power x (window +
    tail). What remains is the polling period (1 ms) and the counter's own accuracy. A counter
    that does not move within `TICK_TIMEOUT_S` is read as it stands.
    """

    source: EnergySource
    model: str | None = None

    def __init__(
        self,
        window_s: float,
        idle_s: float,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.min_window_s = window_s
        self._idle_s = idle_s
        self._clock = clock
        self._sleep = sleep
        self._idle_w = 0.0
        self._start_t = 0.0
        self._start_j = 0.0

    def _read_joules(self) -> float:
        """The counter, cumulative and monotonic, in joules."""
        raise NotImplementedError

    def _idle_power_w(self) -> float:
        raise NotImplementedError

    def start(self) -> None:
        self._idle_w = self._idle_power_w()
        self._start_t, self._start_j = self._await_update()

    def stop(self) -> EnergyReading:
        work_end = self._clock()
        end_t, end_j = self._await_update()
        tail = max(end_t - work_end, 0.0)
        counted = end_j - self._start_j
        return EnergyReading(
            joules=max(counted - self._idle_w * tail, 0.0),
            seconds=work_end - self._start_t,
            idle_power_w=self._idle_w,
        )

    def close(self) -> None:
        pass

    def _await_update(self) -> tuple[float, float]:
        first = self._read_joules()
        deadline = self._clock() + TICK_TIMEOUT_S
        while True:
            value = self._read_joules()
            now = self._clock()
            if value != first or now >= deadline:
                return now, value
            self._sleep(TICK_POLL_S)
