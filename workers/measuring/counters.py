"""Autotune's own counter meters, registered in `workers.measuring.energy` as the
`autotune.meters` entry point of autotune's pyproject.toml: NVML for a trial on CUDA devices,
RAPL for a CPU trial."""

from __future__ import annotations

from workers.measuring.energy import MeterRequest, cuda_device_indices, register_meter
from workers.measuring.energy_meter import EnergyMeter, MeterUnavailable
from workers.measuring.nvml import NvmlEnergyMeter
from workers.measuring.rapl import RaplEnergyMeter


@register_meter("nvml", priority=200)
def nvml_for_cuda_trial(request: MeterRequest) -> EnergyMeter:
    """NVML over the trial's CUDA devices."""
    cuda = cuda_device_indices(request.config)
    if not cuda:
        raise MeterUnavailable("the trial runs on no CUDA device")
    return NvmlEnergyMeter(
        [request.nvml_index(i) for i in cuda], request.settings.energy_window_s, nvml=request.nvml
    )


@register_meter("rapl", priority=100)
def rapl_for_cpu_trial(request: MeterRequest) -> EnergyMeter:
    """RAPL for a CPU trial: the CPU packages' energy is not a GPU trial's."""
    cuda = cuda_device_indices(request.config)
    if cuda:
        raise MeterUnavailable(f"the trial runs on CUDA devices {cuda}, not on the CPU alone")
    return RaplEnergyMeter(request.powercap_root, request.settings.energy_window_s)
