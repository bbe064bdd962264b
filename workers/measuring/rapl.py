"""CPU package energy from Linux powercap RAPL counters."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autotune.core.contract import EnergySource
from workers.measuring.energy_meter import IDLE_SECONDS, CounterMeter, MeterUnavailable

POWERCAP_ROOT = "/sys/class/powercap"
_RAPL_PACKAGE = re.compile(r"^(intel|amd)-rapl:\d+$")


@dataclass
class _RaplDomain:
    energy_file: Path
    max_range_uj: int
    last_uj: int
    total_uj: int = 0

    def advance(self) -> int:
        """Microjoules since the meter opened; one wrap between two reads is undone with the
        domain's `max_energy_range_uj` (at 200 W the usual range lasts over 20 minutes)."""
        now = int(self.energy_file.read_text())
        delta = now - self.last_uj
        if delta < 0:
            delta += self.max_range_uj
        self.total_uj += delta
        self.last_uj = now
        return self.total_uj


class RaplEnergyMeter(CounterMeter):
    """CPU package energy from Linux powercap RAPL counters: the package domains
    `<root>/intel-rapl:N/energy_uj` (AMD: the same, or `amd-rapl:N`), summed over packages, so
    it is the whole sockets' energy (uncore included; DRAM and other processes too). Idle power
    is the counter's rate over `idle_s` before the window. Raises `MeterUnavailable` where no
    package domain is readable (kernels since 5.10 let only root read `energy_uj`).
    """

    source: EnergySource = "rapl"

    def __init__(
        self,
        root: str | Path = POWERCAP_ROOT,
        window_s: float = 1.0,
        idle_s: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(window_s, idle_s, clock, sleep)
        self._domains = _rapl_packages(Path(root))

    def _read_joules(self) -> float:
        return sum(domain.advance() for domain in self._domains) / 1e6

    def _idle_power_w(self) -> float:
        before_t, before_j = self._clock(), self._read_joules()
        self._sleep(self._idle_s)
        after_t, after_j = self._clock(), self._read_joules()
        return (after_j - before_j) / (after_t - before_t) if after_t > before_t else 0.0


def _rapl_packages(root: Path) -> list[_RaplDomain]:
    try:
        candidates = sorted(p for p in root.iterdir() if _RAPL_PACKAGE.match(p.name))
    except OSError as error:
        raise MeterUnavailable(f"no powercap tree at {root}: {error}") from error
    domains = []
    for directory in candidates:
        name_file = directory / "name"
        # Some machines put a platform (psys) domain at the top level beside the packages.
        if name_file.exists() and not name_file.read_text().strip().startswith("package"):
            continue
        try:
            domains.append(
                _RaplDomain(
                    energy_file=directory / "energy_uj",
                    max_range_uj=int((directory / "max_energy_range_uj").read_text()),
                    last_uj=int((directory / "energy_uj").read_text()),
                )
            )
        except (OSError, ValueError) as error:
            raise MeterUnavailable(f"RAPL counter {directory} is not readable: {error}") from error
    if not domains:
        raise MeterUnavailable(f"no RAPL package domain under {root}")
    return domains
