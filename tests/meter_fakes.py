"""Fakes for the measuring tests: a nanosecond clock that moves only when the fake workload
runs, an energy meter on it, timing settings without a floor; and simulated power behind a fake
NVML and a fake powercap tree, with the settings and configuration meter selection is given."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from autotune.core.contract import MeasurementSettings
from autotune.core.knobs.config import TrialConfig, parse_config
from workers.measuring.energy_meter import EnergyReading


class FakeClock:
    """A nanosecond clock that only moves when the fake workload runs."""

    def __init__(self, durations_ms: list[float] | None = None, default_ms: float = 10.0) -> None:
        self.now_ns = 0
        self.calls = 0
        self._durations_ms = durations_ms or []
        self._default_ms = default_ms

    def __call__(self) -> int:
        return self.now_ns

    def work(self) -> None:
        index = self.calls
        self.calls += 1
        duration = (
            self._durations_ms[index] if index < len(self._durations_ms) else self._default_ms
        )
        self.now_ns += int(duration * 1e6)


def settings(**fields: Any) -> MeasurementSettings:
    defaults: dict[str, Any] = {
        "warmup_iters": 0,
        "min_iters": 5,
        "max_iters": 1000,
        "min_seconds": 0.0,
        "max_seconds": 100.0,
        "settle_tolerance": None,
    }
    return MeasurementSettings(**{**defaults, **fields})


class FakeMeter:
    source = "nvml"

    def __init__(self, clock: FakeClock, min_window_s: float) -> None:
        self.min_window_s = min_window_s
        self._clock = clock
        self.started_ns: int | None = None

    def start(self) -> None:
        self.started_ns = self._clock()

    def stop(self) -> EnergyReading:
        assert self.started_ns is not None
        seconds = (self._clock() - self.started_ns) / 1e9
        return EnergyReading(joules=100.0 * seconds, seconds=seconds, idle_power_w=20.0)

    def close(self) -> None:
        pass


IDLE_W = 60.0
BUSY_W = 300.0


class SimulatedPower:
    """Simulated time and power draw of some devices. Each device's energy accumulates
    continuously; the counter that meters read is published only every `update_s` (NVML:
    about 100 ms), as the real ones are."""

    def __init__(self, devices: int = 1, update_s: float = 0.1, idle_w: float = IDLE_W) -> None:
        self.now = 1000.03  # not on an update boundary
        self.update_s = update_s
        self.power_w = [idle_w] * devices
        self.energy_j = [0.0] * devices
        self.published_j = [0.0] * devices
        self._updates = int(self.now / update_s)  # counter updates so far
        self.sleeps = 0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while True:
            boundary = (self._updates + 1) * self.update_s
            step_end = min(boundary, end)
            for i, watts in enumerate(self.power_w):
                self.energy_j[i] += watts * (step_end - self.now)
            self.now = step_end
            if step_end == boundary:
                self._updates += 1
                self.published_j = list(self.energy_j)
            if step_end >= end:
                return

    def work(self, seconds: float, watts: float = BUSY_W) -> None:
        """The workload: every device draws `watts` for `seconds`, then idles again."""
        idle = list(self.power_w)
        self.power_w = [watts] * len(idle)
        self.advance(seconds)
        self.power_w = idle


class FakeNVMLError(Exception):
    pass


def fake_pynvml(power: SimulatedPower, energy_supported: bool = True, init_fails: bool = False):  # type: ignore[no-untyped-def]
    """An object with the part of pynvml's API the meter uses, over simulated devices."""
    state = {"inits": 0}

    def init() -> None:
        if init_fails:
            raise FakeNVMLError("Driver Not Loaded")
        state["inits"] += 1

    def shutdown() -> None:
        state["inits"] -= 1

    def handle(index: int) -> int:
        if index >= len(power.power_w):
            raise FakeNVMLError("Invalid Argument")
        return index

    def total_energy(handle: int) -> int:
        if not energy_supported:
            raise FakeNVMLError("Not Supported")
        return int(power.published_j[handle] * 1e3)  # mJ

    return SimpleNamespace(
        NVMLError=FakeNVMLError,
        nvmlInit=init,
        nvmlShutdown=shutdown,
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetTotalEnergyConsumption=total_energy,
        nvmlDeviceGetPowerUsage=lambda handle: int(power.power_w[handle] * 1e3),  # mW
        state=state,
    )


class FakePowercap:
    """A powercap tree in a directory whose package counters follow simulated power."""

    def __init__(
        self, root: Path, power: SimulatedPower, max_range_uj: int, start_uj: list[int]
    ) -> None:
        self.root = root
        self.power = power
        self.max_range_uj = max_range_uj
        self.start_uj = start_uj
        for package, value in enumerate(start_uj):
            self._domain(f"intel-rapl:{package}", f"package-{package}", value)
            self._domain(f"intel-rapl:{package}:0", "core", 0)  # a subdomain: not summed
        self._domain("intel-rapl:9", "psys", 0)  # a platform domain: not summed
        self._domain("intel-rapl-mmio:0", "package-0", 0)  # the MMIO interface: not summed
        self.publish()

    def _domain(self, name: str, label: str, value: int) -> None:
        directory = self.root / name
        directory.mkdir()
        (directory / "name").write_text(label + "\n")
        (directory / "max_energy_range_uj").write_text(f"{self.max_range_uj}\n")
        (directory / "energy_uj").write_text(f"{value}\n")

    def publish(self) -> None:
        for package, start in enumerate(self.start_uj):
            value = (start + int(self.power.energy_j[package] * 1e6)) % self.max_range_uj
            (self.root / f"intel-rapl:{package}" / "energy_uj").write_text(f"{value}\n")

    def sleep(self, seconds: float) -> None:
        self.power.advance(seconds)
        self.publish()

    def work(self, seconds: float) -> None:
        self.power.work(seconds)
        self.publish()


def rapl(tmp_path: Path, start_uj: list[int], max_range_uj: int = 262_143_328_850) -> FakePowercap:
    power = SimulatedPower(devices=len(start_uj), update_s=0.001)
    return FakePowercap(tmp_path, power, max_range_uj, start_uj)


SETTINGS = MeasurementSettings(energy_window_s=2.0, cpu_watts_per_core=7.0)


def config(**values: Any) -> TrialConfig:
    return parse_config(values, "torch")
