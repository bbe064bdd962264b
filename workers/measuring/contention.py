"""What the rest of the machine does while a trial measures.

`ContentionProbe` reads the kernel's CPU accounting (/proc/stat, per core) at both edges of a
window and subtracts this trial's own CPU time: what is left on the trial's cores is other
processes' load. It also reads steal time (a hypervisor running other guests on our cores),
CPU pressure (/proc/pressure/cpu, "some": the share of time some task waited for a CPU) and,
for trials on NVIDIA GPUs, the other processes on the device and the clock throttle reasons
NVML reports. A window is contended when other processes' share of the trial's cores or the
stolen share exceeds `MeasurementSettings.contention_threshold`; a thread count above the cores
the trial had to itself (by more than the threshold's share of its cores) is flagged
(`oversubscribed`) but does not by itself make it contended.

/proc/stat counts in clock ticks (1/100 s on most kernels), so a window should last a few
tenths of a second at least for its shares to mean something: one shorter than
`MeasurementSettings.contention_window_s` is watched on, idle, until it is that long.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.core.contract import Contention, MeasurementSettings
from autotune.core.errors import MeasurementContended
from autotune.core.knobs.config import TrialConfig

PROC_STAT = Path("/proc/stat")
CPU_PRESSURE = Path("/proc/pressure/cpu")
# How long one look at the machine lasts while waiting for it to become quiet.
QUIET_POLL_S = 0.25
# NVML's clock event reasons worth a user's attention (idle and the application clock
# setting are not: they say the GPU was waiting for work or is configured so).
_GPU_THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}


@dataclass(frozen=True)
class CoreTicks:
    busy: int
    steal: int
    total: int


def read_core_ticks(stat: Path = PROC_STAT) -> dict[int, CoreTicks]:
    """Per core: busy (user, nice, system, irq, softirq), steal and total ticks."""
    cores: dict[int, CoreTicks] = {}
    for line in stat.read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        values = [int(v) for v in fields[:8]]
        user, nice, system, idle, iowait, irq, softirq, steal = values + [0] * (8 - len(values))
        busy = user + nice + system + irq + softirq
        cores[int(name[3:])] = CoreTicks(busy, steal, busy + idle + iowait + steal)
    return cores


def read_pressure_us(path: Path = CPU_PRESSURE) -> int | None:
    """The cumulative "some" CPU stall time in microseconds; None without PSI."""
    try:
        first = path.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    fields = dict(part.split("=", 1) for part in first.split()[1:])
    return int(fields["total"]) if "total" in fields else None


class GpuWatch:
    """Other processes on the trial's GPUs and the throttle reasons NVML reports, sampled at
    the window's edges."""

    def __init__(self, nvml: Any, indices: Sequence[int], own_pids: Callable[[], set[int]]):
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self._own_pids = own_pids
        self.others: set[int] = set()
        self.reasons: set[str] = set()

    def sample(self) -> None:
        nvml, own = self._nvml, self._own_pids()
        for handle in self._handles:
            with contextlib.suppress(nvml.NVMLError):
                for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if process.pid not in own:
                        self.others.add(int(process.pid))
            with contextlib.suppress(nvml.NVMLError, AttributeError):
                mask = _clock_event_reasons(nvml, handle)
                self.reasons.update(n for bit, n in _GPU_THROTTLE_REASONS.items() if mask & bit)


def _clock_event_reasons(nvml: Any, handle: Any) -> int:
    """NVML renamed the throttle reasons to clock event reasons; either call answers."""
    if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons"):
        return int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
    return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


class ContentionProbe:
    """Observes one window: `start()`, the work, `stop()` -> `Contention`.

    `own_cpu_seconds` is this trial's CPU clock (this process and its helper processes), so
    its own work is not counted as other load."""

    def __init__(
        self,
        settings: MeasurementSettings,
        own_cpu_seconds: Callable[[], float] = time.process_time,
        cores: Sequence[int] | None = None,
        gpu: GpuWatch | None = None,
        stat: Path = PROC_STAT,
        pressure: Path = CPU_PRESSURE,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._settings = settings
        self._sleep = sleep
        self._own = own_cpu_seconds
        self._cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
        self._gpu = gpu
        self._stat = stat
        self._pressure = pressure
        self._clock = clock
        self._hz = os.sysconf("SC_CLK_TCK")
        self._start: tuple[float, float, dict[int, CoreTicks], int | None] | None = None

    def start(self) -> None:
        if self._gpu is not None:
            self._gpu.sample()
        self._start = (
            self._clock(),
            self._own(),
            read_core_ticks(self._stat),
            read_pressure_us(self._pressure),
        )

    def stop(self, threads: int | None = None, waited_s: float = 0.0) -> Contention:
        if self._start is None:
            raise RuntimeError("stop() before start()")
        began, own_before, ticks_before, pressure_before = self._start
        short_by = self._settings.contention_window_s - (self._clock() - began)
        if short_by > 0:
            self._sleep(short_by)  # the ticks of a shorter window say little
        ticks = read_core_ticks(self._stat)
        pressure = read_pressure_us(self._pressure)
        own_s = max(self._own() - own_before, 0.0)
        seconds = max(self._clock() - began, 1e-9)
        if self._gpu is not None:
            self._gpu.sample()
        mine = [c for c in self._cores if c in ticks and c in ticks_before]
        busy_s, steal_share = self._busy_and_steal(ticks_before, ticks, mine)
        all_busy_s, _ = self._busy_and_steal(ticks_before, ticks, sorted(ticks))
        others_s = max(busy_s - own_s, 0.0)
        n = max(len(mine), 1)
        other_share = min(others_s / (seconds * n), 1.0)
        machine_share = min(max(all_busy_s - own_s, 0.0) / (seconds * max(len(ticks), 1)), 1.0)
        cpu_pressure = None
        if pressure is not None and pressure_before is not None:
            cpu_pressure = min((pressure - pressure_before) / 1e6 / seconds, 1.0)
        to_itself = max(n - others_s / seconds, 0.0)
        threshold = self._settings.contention_threshold
        reasons = []
        if other_share > threshold:
            reasons.append(f"other processes used {other_share:.0%} of the trial's {n} cores")
        if steal_share > threshold:
            reasons.append(f"the hypervisor stole {steal_share:.0%} of the trial's cores")
        gpu_others = sorted(self._gpu.others) if self._gpu is not None else []
        if gpu_others:
            reasons.append(f"other processes ran on the GPU: {gpu_others}")
        return Contention(
            seconds=seconds,
            cores=n,
            other_cpu_share=other_share,
            machine_other_cpu_share=machine_share,
            steal_share=steal_share,
            cpu_pressure=cpu_pressure,
            cores_to_itself=to_itself,
            threads=threads,
            oversubscribed=threads is not None and threads > to_itself + threshold * n,
            gpu_other_processes=gpu_others,
            gpu_throttle_reasons=sorted(self._gpu.reasons) if self._gpu is not None else [],
            waited_s=waited_s,
            contended=bool(reasons),
            reasons=reasons,
        )

    def _busy_and_steal(
        self, before: dict[int, CoreTicks], after: dict[int, CoreTicks], cores: list[int]
    ) -> tuple[float, float]:
        busy = sum(after[c].busy - before[c].busy for c in cores)
        steal = sum(after[c].steal - before[c].steal for c in cores)
        total = sum(after[c].total - before[c].total for c in cores)
        return busy / self._hz, (steal / total if total > 0 else 0.0)

    def wait_for_quiet(self, max_wait_s: float) -> float:
        """Look at the machine in short windows, doing nothing ourselves, until one is quiet
        or `max_wait_s` has passed; returns the seconds waited (0 when the first look was
        quiet)."""
        began = self._clock()
        while True:
            look_started = self._clock()
            self.start()
            self._sleep(QUIET_POLL_S)
            if not self.stop().contended:
                return look_started - began
            if self._clock() - began >= max_wait_s:
                return self._clock() - began


def gpu_watch_for(config: TrialConfig, own_pids: Callable[[], set[int]]) -> GpuWatch | None:
    """A GpuWatch over the trial's CUDA devices; None off CUDA or where NVML is unreadable."""
    from workers.measuring.energy import (
        MeterUnavailable,
        cuda_device_indices,
        import_pynvml,
        nvml_index_of_cuda_device,
    )

    devices = cuda_device_indices(config)
    if not devices:
        return None
    try:
        nvml = import_pynvml()
    except MeterUnavailable:
        return None
    try:
        nvml.nvmlInit()  # reference-counted: the energy meter's own init and shutdown pair up
        return GpuWatch(nvml, [nvml_index_of_cuda_device(i) for i in devices], own_pids)
    except (nvml.NVMLError, MeterUnavailable):
        return None


def probe_for(
    settings: MeasurementSettings, config: TrialConfig, helpers: Sequence[int]
) -> ContentionProbe:
    """A probe of a trial's window: its CPU clock counts its helper processes as its own."""
    from workers.measuring.energy import cpu_seconds_with

    own_pids = {os.getpid(), *helpers}
    gpu = gpu_watch_for(config, lambda: own_pids)
    return ContentionProbe(settings, cpu_seconds_with(helpers), gpu=gpu)


def waited_for_quiet(probe: ContentionProbe, settings: MeasurementSettings) -> float:
    """Under the 'wait' policy, the seconds waited for quiet; otherwise 0."""
    if settings.contention != "wait":
        return 0.0
    return probe.wait_for_quiet(settings.contention_max_wait_s)


def check_contention(contention: Contention, settings: MeasurementSettings) -> None:
    """Under the 'fail' policy a contended window ends the measurement."""
    if settings.contention == "fail" and contention.contended:
        raise MeasurementContended(
            "; ".join(contention.reasons) + " while measuring (measurement.contention is 'fail')"
        )
