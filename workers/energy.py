"""Energy meters: NVML's total-energy counter on NVIDIA GPUs, RAPL package counters on CPUs
where readable, otherwise an estimate from CPU time that says so (`source = "estimate"`). The
estimate charges each CPU-second a busy core's share of the CPU's TDP, from codecarbon's CPU
table where the CPU is in it, else a flat `cpu_watts_per_core`; `model` names which.

A meter is started right before the workload and stopped right after it. Counter meters
(`NvmlEnergyMeter`, `RaplEnergyMeter`) first sample the device's idle draw (nothing of ours
runs during it), so a reading has both the total energy and the part above idle, and they
ask for a window of at least `min_window_s` (the caller repeats the workload inside it: NVML
updates its counter only about every 100 ms). The estimate asks for no extra window.

`select_meter` picks the meter for a trial's device.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from autotune.contract import EnergySource, MeasurementSettings
from autotune.errors import AutotuneError
from workers.config import TrialConfig

POWERCAP_ROOT = "/sys/class/powercap"
# The flat estimate's watts per busy core where neither the request nor a TDP says better.
DEFAULT_WATTS_PER_CORE = 10.0
IDLE_SECONDS = 0.5
# How long a counter meter waits for its counter to move at the window's edges: NVML updates
# about every 100 ms, RAPL about every millisecond.
TICK_TIMEOUT_S = 0.5
TICK_POLL_S = 0.001
IDLE_POLL_S = 0.05
CPUINFO = "/proc/cpuinfo"
# codecarbon's CPU power table (`Name,TDP`), inside its package: the file codecarbon's own
# `DataSource.get_cpu_power_data` reads.
TDP_TABLE = "data/hardware/cpu_power.csv"


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


# ---------------------------------------------------------------------------------------------
# The estimate


@dataclass(frozen=True)
class CpuPowerModel:
    """What the estimate charges per CPU-second: `watts_per_core`, named by `name` (the result's
    `energy_model`). `why` says why a flat model stands where the TDP model is not used."""

    watts_per_core: float
    name: str
    why: str | None = None

    @classmethod
    def flat(cls, watts_per_core: float, why: str | None = None) -> CpuPowerModel:
        return cls(watts_per_core, f"flat:{float(watts_per_core)} W/core", why)

    @classmethod
    def tdp(cls, cpu: str, tdp_w: float, cores: int) -> CpuPowerModel:
        """`cpu` (the table's name) has a TDP of `tdp_w` over `cores` physical cores."""
        return cls(tdp_w / cores, f"tdp:codecarbon:{cpu}:{tdp_w:g} W/{cores} cores")


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


# ---------------------------------------------------------------------------------------------
# The CPU's TDP

_MARKS = re.compile(r"\((?:r|tm)\)|[®™]")
_REMARKS = re.compile(r"\([^)]*\)")
_GENERATION = re.compile(r"^\s*\d+(?:st|nd|rd|th) gen\b")
_GRAPHICS = re.compile(r"\bwith radeon\b.*$")
_CORES_IN_NAME = re.compile(r"\b(\d+)-core\b", re.IGNORECASE)
_PROCESSOR = re.compile(r"\b(?:\d+-core )?processor\b")
_CPU_WORD = re.compile(r"\bcpu\b")

TdpTable = dict[str, tuple[str, float] | None]


def normalised_cpu_name(name: str) -> str:
    """`name` without what CPU brand strings and codecarbon's table spell differently: case;
    (R), (TM), ® and ™; everything from "@" on (the clock, "CPU @ 2.50GHz"); parenthesised
    remarks ("(OEM Only)"); a leading "12th Gen"; a trailing "with Radeon Graphics";
    "64-Core Processor" or "Processor"; the word "CPU". Whitespace is collapsed. So
    "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz" and "AMD EPYC 7763 64-Core Processor"
    read "intel xeon platinum 8259cl" and "amd epyc 7763", as the table's names do."""
    text = _MARKS.sub(" ", name.casefold()).split("@")[0]
    for pattern in (_REMARKS, _GENERATION, _GRAPHICS, _PROCESSOR, _CPU_WORD):
        text = pattern.sub(" ", text)
    return " ".join(text.split())


def read_tdp_table(lines: Iterable[str]) -> TdpTable:
    """codecarbon's CPU table (CSV rows `Name,TDP`, watts) by normalised name: the table's own
    name and the TDP, or None where names that normalise alike have different TDPs (such a
    name is ambiguous, so never matched). Rows whose TDP is not a positive number are
    skipped."""
    table: TdpTable = {}
    for row in csv.DictReader(lines):
        name = (row.get("Name") or "").strip()
        try:
            tdp_w = float(row.get("TDP") or "")
        except ValueError:
            continue
        key = normalised_cpu_name(name)
        if not key or not tdp_w > 0:
            continue
        if key not in table:
            table[key] = (name, tdp_w)
        elif (known := table[key]) is not None and known[1] != tdp_w:
            table[key] = None
    return table


def match_tdp(cpu_name: str, table: TdpTable) -> tuple[str, float] | None:
    """The table's name and TDP of `cpu_name`, or None. The rule: the normalised name (see
    `normalised_cpu_name`) must equal a table name's, and all table names equal to it must
    give one TDP. No prefix, token or similarity match: a VM's "AMD EPYC" matches neither
    "AMD EPYC 7763" nor anything else."""
    return table.get(normalised_cpu_name(cpu_name))


def codecarbon_tdp_table() -> TdpTable:
    """codecarbon's CPU table, from its package data (imported here, so a data plane without
    codecarbon still loads this module; nothing of codecarbon is started). Raises
    `LookupError` saying why where codecarbon is not installed or the file is unreadable."""
    from importlib.resources import files

    try:
        text = files("codecarbon").joinpath(TDP_TABLE).read_text(encoding="utf-8")
    except ImportError:
        raise LookupError("codecarbon is not installed") from None
    except OSError as error:
        raise LookupError(f"codecarbon's CPU table is not readable: {error}") from error
    return read_tdp_table(text.splitlines())


@dataclass(frozen=True)
class CpuIdentity:
    """What /proc/cpuinfo says of the CPU: its model name, and the physical cores of one
    package where that is certain (None: unknown)."""

    name: str | None
    package_cores: int | None
    virtual: bool


def read_cpuinfo(text: str) -> CpuIdentity:
    """The first processor's `model name`; the package's cores from the name where it gives
    them (AMD's "64-Core Processor"), else from `cpu cores`, but only outside a virtual
    machine (no `hypervisor` flag): a guest's topology is its vCPUs, not the package's."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or None
    virtual = "hypervisor" in fields.get("flags", "").split()
    cores: int | None = None
    if name is not None and (in_name := _CORES_IN_NAME.search(name)):
        cores = int(in_name.group(1))
    elif not virtual and fields.get("cpu cores", "").isdigit():
        cores = int(fields["cpu cores"])
    return CpuIdentity(name, cores if cores else None, virtual)


@functools.cache
def tdp_power_model(cpuinfo: str = CPUINFO) -> CpuPowerModel | str:
    """This machine's TDP model (TDP / physical cores of a package, see
    `CpuTimeEnergyEstimate`), or a sentence saying why there is none: codecarbon missing, no
    CPU name, a CPU not (or ambiguously) in codecarbon's table, a package's cores unknown.
    Resolved once per process."""
    try:
        cpu = read_cpuinfo(Path(cpuinfo).read_text())
    except OSError as error:
        return f"{cpuinfo} is not readable: {error}"
    if cpu.name is None:
        return f"no CPU model name in {cpuinfo}"
    try:
        table = codecarbon_tdp_table()
    except LookupError as error:
        return str(error)
    found = match_tdp(cpu.name, table)
    if found is None:
        ambiguous = normalised_cpu_name(cpu.name) in table
        return f"CPU {cpu.name!r} is {'ambiguous' if ambiguous else 'not'} in codecarbon's table"
    if cpu.package_cores is None:
        where = "in a virtual machine" if cpu.virtual else f"from {cpuinfo}"
        return f"the physical cores of a {cpu.name!r} package are unknown {where}"
    return CpuPowerModel.tdp(found[0], found[1], cpu.package_cores)


def estimate_power_model(settings: MeasurementSettings, cpuinfo: str = CPUINFO) -> CpuPowerModel:
    """The estimate's power model: `cpu_watts_per_core` flat where the request sets it (an
    explicit figure wins), else the TDP model where there is one, else the flat default."""
    if settings.cpu_watts_per_core is not None:
        return CpuPowerModel.flat(settings.cpu_watts_per_core, "cpu_watts_per_core is set")
    found = tdp_power_model(cpuinfo)
    if isinstance(found, str):
        return CpuPowerModel.flat(DEFAULT_WATTS_PER_CORE, found)
    return found


# ---------------------------------------------------------------------------------------------
# Counter meters


class _CounterMeter:
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


def import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as error:
        raise MeterUnavailable("nvidia-ml-py (module pynvml) is not installed") from error
    return pynvml


class NvmlEnergyMeter(_CounterMeter):
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


class RaplEnergyMeter(_CounterMeter):
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


# ---------------------------------------------------------------------------------------------
# Selection


def cuda_device_indices(config: TrialConfig) -> list[int]:
    """The CUDA devices a trial runs on (empty for a CPU trial): replicas and ranks take
    cuda:0..n-1; onnxruntime's CUDA and TensorRT providers run on cuda:0."""
    on_cuda = config.device == "cuda" or (
        config.engine == "onnxruntime" and config.ort_provider in ("cuda", "tensorrt")
    )
    if not on_cuda:
        return []
    return list(range(max(config.tensor_parallel, config.data_parallel, 1)))


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
