"""Energy meters: NVML's total-energy counter on NVIDIA GPUs (`workers.measuring.nvml`), RAPL
package counters on CPUs where readable (`workers.measuring.rapl`), otherwise an estimate from
CPU time that says so (`source = "estimate"`, `workers.measuring.energy_estimate`). The
estimate charges each CPU-second a busy core's share of the CPU's TDP, from codecarbon's CPU
table where the CPU is in it, else a flat `cpu_watts_per_core` (`workers.measuring.cpu_power`);
`model` names which.

A meter is started right before the workload and stopped right after it. Counter meters
(`NvmlEnergyMeter`, `RaplEnergyMeter`) first sample the device's idle draw (nothing of ours
runs during it), so a reading has both the total energy and the part above idle, and they
ask for a window of at least `min_window_s` (the caller repeats the workload inside it: NVML
updates its counter only about every 100 ms). The estimate asks for no extra window.

The counter meters are registered in `METERS` with `register_meter`, each as a factory with a
name and a priority: NVML first (for a trial on CUDA devices), then RAPL (for a CPU trial),
both in `workers.measuring.counters`, autotune's own `autotune.meters` entry point.
`select_meter` tries them in priority order for a trial and returns the first that applies;
where none does, the estimate, whose `why` gives each counter's reason. Installed plugins
register theirs the same way (the `autotune.meters` entry points, `autotune.core.plugins`);
the group is loaded at the end of this module, autotune's own entries first. The meters and
what they read are importable from here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.core.contract import MeasurementSettings
from autotune.core.knobs import ENGINES
from autotune.core.knobs.config import TrialConfig
from autotune.core.plugins import METERS_GROUP, load_plugins
from workers.measuring.cpu_power import CPUINFO, estimate_power_model
from workers.measuring.energy_estimate import CpuTimeEnergyEstimate, cpu_seconds_with
from workers.measuring.energy_meter import EnergyMeter, EnergyReading, MeterUnavailable
from workers.measuring.nvml import NvmlEnergyMeter, import_pynvml, nvml_index_of_cuda_device
from workers.measuring.rapl import POWERCAP_ROOT, RaplEnergyMeter

__all__ = [
    "METERS",
    "CpuTimeEnergyEstimate",
    "EnergyMeter",
    "EnergyReading",
    "MeterFactory",
    "MeterRequest",
    "MeterUnavailable",
    "NvmlEnergyMeter",
    "RaplEnergyMeter",
    "RegisteredMeter",
    "cpu_seconds_with",
    "cuda_device_indices",
    "import_pynvml",
    "meters_by_priority",
    "nvml_index_of_cuda_device",
    "register_meter",
    "select_meter",
]


def cuda_device_indices(config: TrialConfig) -> list[int]:
    """The CUDA devices a trial runs on (empty for a CPU trial): replicas and ranks take
    cuda:0..n-1; an engine's own CUDA session (onnxruntime's CUDA and TensorRT providers) runs
    on cuda:0."""
    if not ENGINES[config.engine].on_cuda(config):
        return []
    return list(range(max(config.tensor_parallel, config.data_parallel, 1)))


@dataclass(frozen=True)
class MeterRequest:
    """What a meter factory may use: the trial, its measurement settings, and where to read
    (`nvml` is the pynvml module, None to import it; tests pass fakes for all three)."""

    config: TrialConfig
    settings: MeasurementSettings
    nvml: Any = None
    nvml_index: Callable[[int], int] = nvml_index_of_cuda_device
    powercap_root: str | Path = POWERCAP_ROOT


MeterFactory = Callable[[MeterRequest], EnergyMeter]
"""Opens a meter for the request, or raises `MeterUnavailable` saying why it does not apply."""


@dataclass(frozen=True)
class RegisteredMeter:
    name: str
    priority: int
    factory: MeterFactory


METERS: dict[str, RegisteredMeter] = {}
"""The counter meters by name. `select_meter` tries the highest priority first."""


def register_meter(name: str, priority: int) -> Callable[[MeterFactory], MeterFactory]:
    """Registers the decorated factory in `METERS` as `name`; a higher `priority` is tried
    first, and meters of equal priority in the order they were registered. Raises ValueError
    where `name` is taken."""

    def register(factory: MeterFactory) -> MeterFactory:
        if name in METERS:
            raise ValueError(f"an energy meter named {name!r} is already registered")
        METERS[name] = RegisteredMeter(name, priority, factory)
        return factory

    return register


def meters_by_priority() -> list[RegisteredMeter]:
    """The registered meters in the order `select_meter` tries them."""
    return sorted(METERS.values(), key=lambda meter: meter.priority, reverse=True)


def select_meter(
    config: TrialConfig,
    settings: MeasurementSettings,
    excluded_cpu_seconds: Callable[[], float] = lambda: 0.0,
    cpu_clock: Callable[[], float] = time.process_time,
    *,
    nvml: Any = None,
    nvml_index: Callable[[int], int] = nvml_index_of_cuda_device,
    powercap_root: str | Path = POWERCAP_ROOT,
    cpuinfo: str = CPUINFO,
) -> EnergyMeter:
    """The first meter in `METERS`, by priority, that applies to the trial (NVML for a trial
    on CUDA devices, RAPL for a CPU trial, where they can be read); else the CPU-time estimate
    (`excluded_cpu_seconds` and `cpu_clock` are the estimate's; for a GPU trial it sees the
    host's CPU time only) with the power model of `estimate_power_model`. The meter's `source`
    says which it is and `model` which power model an estimate used; the estimate's `why`
    says why each counter was not used ("nvml: ...; rapl: ..."). Close the meter after use."""
    request = MeterRequest(config, settings, nvml, nvml_index, powercap_root)
    reasons = []
    for meter in meters_by_priority():
        try:
            return meter.factory(request)
        except MeterUnavailable as error:
            reasons.append(f"{meter.name}: {error}")
    return CpuTimeEnergyEstimate(
        estimate_power_model(settings, cpuinfo),
        excluded_cpu_seconds,
        cpu_clock,
        why="; ".join(reasons) or "no energy meter is registered",
    )


load_plugins(METERS_GROUP)
