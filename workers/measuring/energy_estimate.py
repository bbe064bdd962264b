"""The energy estimate from CPU time, for machines with no readable energy counter."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence

from autotune.core.contract import EnergySource
from workers.measuring.cpu_power import CpuPowerModel
from workers.measuring.energy_meter import EnergyReading


class CpuTimeEnergyEstimate:
    """An estimate, not a measurement (`source = "estimate"`), for machines with no readable
    energy counter.

    Power model: each CPU-second the process consumes (all of its threads, from
    `time.process_time()`, plus helper processes through `cpu_clock`) costs
    `power.watts_per_core` joules, i.e. a busy core draws that and an idle one nothing.
    `power` is one of two models, named in `model`:

    - TDP (`tdp:codecarbon:<cpu>:<tdp> W/<cores> cores`, see `tdp_power_model`): a busy core
      draws TDP / physical cores of its package. TDP is the package's sustained power with
      all of its cores busy (uncore included), so keeping n of its C cores busy costs n/C of
      it and a fully loaded package its TDP. Physical cores, not hardware threads: a CPU-second
      of a thread is normally a core's second (torch runs one thread per physical core by
      default), while two SMT siblings busy at once share one core's power but are each
      charged a full share, so there the estimate errs high. Boost above TDP is not counted.
    - flat (`flat:<w> W/core`): `MeasurementSettings.cpu_watts_per_core` per busy core where
      the request sets it, else `DEFAULT_WATTS_PER_CORE` where the TDP model is unavailable
      (`power.why` says why).

    Either way idle, uncore-at-idle and DRAM power are not charged, so there is no above-idle
    figure. CPU time of helper threads that are not the workload (the memory sampler) can be
    excluded through `excluded_cpu_seconds`. It needs no window beyond the workload's own.
    `why` says why no counter measured instead (for logs; a result carries only the source
    and the model). A plain number for `power` is a flat model of that many watts per core.
    """

    source: EnergySource = "estimate"
    min_window_s = 0.0

    def __init__(
        self,
        power: CpuPowerModel | float,
        excluded_cpu_seconds: Callable[[], float] = lambda: 0.0,
        cpu_clock: Callable[[], float] = time.process_time,
        clock: Callable[[], float] = time.perf_counter,
        why: str | None = None,
    ) -> None:
        self.why = why
        self.power = power if isinstance(power, CpuPowerModel) else CpuPowerModel.flat(power)
        self.model: str | None = self.power.name
        self._excluded = excluded_cpu_seconds
        self._cpu_clock = cpu_clock
        self._clock = clock
        self._start_cpu = 0.0
        self._start_excluded = 0.0
        self._start_wall = 0.0

    def start(self) -> None:
        self._start_wall = self._clock()
        self._start_cpu = self._cpu_clock()
        self._start_excluded = self._excluded()

    def stop(self) -> EnergyReading:
        used = self._cpu_clock() - self._start_cpu
        excluded = self._excluded() - self._start_excluded
        joules = max(used - excluded, 0.0) * self.power.watts_per_core
        return EnergyReading(joules=joules, seconds=self._clock() - self._start_wall)

    def close(self) -> None:
        pass


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
