"""The energy meter `example_cpu_time` (entry point group `autotune.meters`): an estimate, not
a measurement. It charges each CPU-second of the trial's process a flat WATTS_PER_CORE, and
says so: its readings have `energy_source` "estimate" and `energy_model`
"example_cpu_time:flat:<w> W/core". It applies to CPU trials on `ort_tuned_session` alone, and
for those it outranks RAPL (priority 150 against RAPL's 100), so that this example is what
measures them on any machine; every other trial keeps autotune's own meters."""

from __future__ import annotations

from autotune_example_plugin.engine import NAME as ENGINE
from workers.measuring.cpu_power import CpuPowerModel
from workers.measuring.energy import (
    CpuTimeEnergyEstimate,
    EnergyMeter,
    MeterRequest,
    MeterUnavailable,
    cuda_device_indices,
    register_meter,
)

METER = "example_cpu_time"
PRIORITY = 150
WATTS_PER_CORE = 12.5


@register_meter(METER, priority=PRIORITY)
def example_cpu_time(request: MeterRequest) -> EnergyMeter:
    """The estimate for a CPU trial on this plugin's engine; `MeterUnavailable` for any other."""
    if request.config.engine != ENGINE:
        raise MeterUnavailable(f"estimates runtime.engine={ENGINE} trials only")
    if cuda_device_indices(request.config):
        raise MeterUnavailable("the trial runs on CUDA devices")
    flat = CpuPowerModel.flat(WATTS_PER_CORE)
    power = CpuPowerModel(flat.watts_per_core, f"{METER}:{flat.name}")
    return CpuTimeEnergyEstimate(power, why=f"{METER}: a CPU-time estimate, not a counter")
