"""Energy meters: NVML's total-energy counter on NVIDIA GPUs (`workers.nvml`), RAPL package
counters on CPUs where readable (`workers.rapl`), otherwise an estimate from CPU time that says
so (`source = "estimate"`, `workers.energy_estimate`). The estimate charges each CPU-second a
busy core's share of the CPU's TDP, from codecarbon's CPU table where the CPU is in it, else a
flat `cpu_watts_per_core` (`workers.cpu_power`); `model` names which.

A meter is started right before the workload and stopped right after it. Counter meters
(`NvmlEnergyMeter`, `RaplEnergyMeter`) first sample the device's idle draw (nothing of ours
runs during it), so a reading has both the total energy and the part above idle, and they
ask for a window of at least `min_window_s` (the caller repeats the workload inside it: NVML
updates its counter only about every 100 ms). The estimate asks for no extra window.

`select_meter` picks the meter for a trial's device. The meters and what they read are
importable from here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.contract import MeasurementSettings
from workers.config import TrialConfig
from workers.cpu_power import CPUINFO, estimate_power_model
from workers.energy_estimate import CpuTimeEnergyEstimate, cpu_seconds_with
from workers.energy_meter import EnergyMeter, EnergyReading, MeterUnavailable
from workers.nvml import NvmlEnergyMeter, import_pynvml, nvml_index_of_cuda_device
from workers.rapl import POWERCAP_ROOT, RaplEnergyMeter

__all__ = [
    "CpuTimeEnergyEstimate",
    "EnergyMeter",
    "EnergyReading",
    "MeterUnavailable",
    "NvmlEnergyMeter",
    "RaplEnergyMeter",
    "cpu_seconds_with",
    "cuda_device_indices",
    "import_pynvml",
    "nvml_index_of_cuda_device",
    "select_meter",
]


def cuda_device_indices(config: TrialConfig) -> list[int]:
    """The CUDA devices a trial runs on (empty for a CPU trial): replicas and ranks take
    cuda:0..n-1; onnxruntime's CUDA and TensorRT providers run on cuda:0."""
    on_cuda = config.device == "cuda" or (
        config.engine == "onnxruntime" and config.ort_provider in ("cuda", "tensorrt")
    )
    if not on_cuda:
        return []
    return list(range(max(config.tensor_parallel, config.data_parallel, 1)))


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
    """NVML for a trial on CUDA devices, RAPL for a CPU trial, where they can be read; else the
    CPU-time estimate (`excluded_cpu_seconds` and `cpu_clock` are the estimate's; for a GPU
    trial it sees the host's CPU time only) with the power model of `estimate_power_model`.
    The meter's `source` says which it is and `model` which power model an estimate used; the
    estimate's `why` says why no counter was used. Close the meter after use."""
    cuda = cuda_device_indices(config)
    try:
        if cuda:
            return NvmlEnergyMeter(
                [nvml_index(i) for i in cuda], settings.energy_window_s, nvml=nvml
            )
        return RaplEnergyMeter(powercap_root, settings.energy_window_s)
    except MeterUnavailable as error:
        why = str(error)
    return CpuTimeEnergyEstimate(
        estimate_power_model(settings, cpuinfo), excluded_cpu_seconds, cpu_clock, why=why
    )
