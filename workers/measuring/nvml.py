"""NVIDIA GPU energy from NVML's total-energy counter, and NVML's index of a CUDA device."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from autotune.core.contract import EnergySource
from workers.measuring.energy_meter import IDLE_SECONDS, CounterMeter, MeterUnavailable

IDLE_POLL_S = 0.05


def import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as error:
        raise MeterUnavailable("nvidia-ml-py (module pynvml) is not installed") from error
    return pynvml


class NvmlEnergyMeter(CounterMeter):
    """NVIDIA GPU energy from NVML's total-energy counter (`nvmlDeviceGetTotalEnergyConsumption`,
    mJ since the driver loaded; Volta and newer), summed over `device_index` (an NVML index, or
    several for a trial spread over GPUs; NVML's order is not CUDA's under
    CUDA_VISIBLE_DEVICES, see `nvml_index_of_cuda_device`). Idle power is the mean of
    `nvmlDeviceGetPowerUsage` (mW) sampled every 50 ms over `idle_s` before the window. Counts
    the GPUs' energy only, not the host's.

    `nvml` is the pynvml module (imported when None; tests pass a fake). Raises
    `MeterUnavailable` when NVML or the counter is missing.
    """

    source: EnergySource = "nvml"

    def __init__(
        self,
        device_index: int | Sequence[int] = 0,
        window_s: float = 1.0,
        idle_s: float = IDLE_SECONDS,
        nvml: Any = None,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(window_s, idle_s, clock, sleep)
        self._nvml = nvml if nvml is not None else import_pynvml()
        indices = [device_index] if isinstance(device_index, int) else list(device_index)
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as error:
            raise MeterUnavailable(f"NVML did not initialize: {error}") from error
        self._open = True
        try:
            self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
            self._read_joules()  # pre-Volta GPUs raise NVMLError_NotSupported here
        except self._nvml.NVMLError as error:
            self.close()
            raise MeterUnavailable(
                f"NVML total energy of devices {indices} is not readable: {error}"
            ) from error

    def _read_joules(self) -> float:
        total_mj = sum(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self._handles)
        return float(total_mj) / 1e3

    def _power_w(self) -> float:
        return float(sum(self._nvml.nvmlDeviceGetPowerUsage(h) for h in self._handles)) / 1e3

    def _idle_power_w(self) -> float:
        samples = [self._power_w()]
        deadline = self._clock() + self._idle_s
        while self._clock() < deadline:
            self._sleep(IDLE_POLL_S)
            samples.append(self._power_w())
        return sum(samples) / len(samples)

    def close(self) -> None:
        if self._open:
            self._open = False
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()


def nvml_index_of_cuda_device(index: int) -> int:
    """NVML's index of cuda:`index`, taking CUDA_VISIBLE_DEVICES into account (through torch's
    own mapping when torch is there; without it, identical when the variable is unset)."""
    try:
        import torch.cuda
    except ImportError:
        if os.environ.get("CUDA_VISIBLE_DEVICES") is None:
            return index
        raise MeterUnavailable("NVML index of a CUDA device under CUDA_VISIBLE_DEVICES") from None
    try:
        return int(torch.cuda._get_nvml_device_index(index))
    except Exception as error:
        raise MeterUnavailable(f"NVML index of cuda:{index}: {error}") from error
