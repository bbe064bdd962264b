"""What the energy estimate charges per busy CPU core: a flat figure, or the CPU's TDP over its
physical cores, from codecarbon's CPU table where the CPU is in it (see
`workers.measuring.energy_estimate.CpuTimeEnergyEstimate`)."""

from __future__ import annotations

import csv
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from autotune.core.contract import MeasurementSettings

# The flat estimate's watts per busy core where neither the request nor a TDP says better.
DEFAULT_WATTS_PER_CORE = 10.0
CPUINFO = "/proc/cpuinfo"
# codecarbon's CPU power table (`Name,TDP`), inside its package: the file codecarbon's own
# `DataSource.get_cpu_power_data` reads.
TDP_TABLE = "data/hardware/cpu_power.csv"


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
