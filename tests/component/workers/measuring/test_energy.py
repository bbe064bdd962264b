"""Energy meters against a fake NVML and a fake powercap tree (simulated time and power), the
CPU-time estimate and its TDP lookup in codecarbon's table, meter selection, and (gpu-marked)
the real NVML."""

from __future__ import annotations

import csv
import os
import pickle
import sys
import time
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from autotune.core.contract import MeasurementSettings
from tests.meter_fakes import (
    BUSY_W,
    IDLE_W,
    SETTINGS,
    SimulatedPower,
    config,
    fake_pynvml,
    rapl,
)
from workers.measuring.cpu_power import (
    TDP_TABLE,
    CpuIdentity,
    CpuPowerModel,
    codecarbon_tdp_table,
    estimate_power_model,
    match_tdp,
    read_cpuinfo,
    read_tdp_table,
    tdp_power_model,
)
from workers.measuring.energy import cuda_device_indices, select_meter
from workers.measuring.energy_estimate import CpuTimeEnergyEstimate
from workers.measuring.energy_meter import EnergyReading, MeterUnavailable
from workers.measuring.nvml import NvmlEnergyMeter
from workers.measuring.rapl import RaplEnergyMeter


def nvml_meter(power: SimulatedPower, devices: Any = 0, **fake: Any) -> NvmlEnergyMeter:
    return NvmlEnergyMeter(
        devices, nvml=fake_pynvml(power, **fake), clock=power.clock, sleep=power.sleep
    )


# ---------------------------------------------------------------------------------------------
# NVML


def test_nvml_total_and_above_idle_energy_of_a_window() -> None:
    power = SimulatedPower()
    meter = nvml_meter(power)
    assert meter.source == "nvml" and meter.min_window_s == 1.0 and meter.model is None
    meter.start()
    power.work(1.0)
    reading = meter.stop()
    meter.close()
    # Edges aligned to the 100 ms counter updates: errors of the 1 ms polling only (a counter
    # read as it stands would be off by up to 30 J here).
    assert reading.idle_power_w == pytest.approx(IDLE_W)
    assert reading.seconds == pytest.approx(1.0, abs=0.002)
    assert reading.joules == pytest.approx(BUSY_W * 1.0, abs=0.5)
    assert reading.above_idle_joules == pytest.approx((BUSY_W - IDLE_W) * 1.0, abs=0.5)


def test_nvml_sums_the_devices_of_a_trial() -> None:
    power = SimulatedPower(devices=3)
    meter = nvml_meter(power, devices=[0, 2])
    meter.start()
    power.work(2.0)
    reading = meter.stop()
    assert reading.idle_power_w == pytest.approx(2 * IDLE_W)
    assert reading.joules == pytest.approx(2 * BUSY_W * 2.0, abs=1.0)


def test_nvml_idle_power_is_sampled_for_half_a_second() -> None:
    power = SimulatedPower()
    meter = nvml_meter(power)
    before = power.now
    meter.start()
    assert 0.5 <= power.now - before <= 0.55 + 0.1 + 0.002  # idle samples, then one update


def test_a_gpu_without_the_energy_counter_is_unavailable_and_nvml_is_shut_down() -> None:
    power = SimulatedPower()
    fake = fake_pynvml(power, energy_supported=False)
    with pytest.raises(MeterUnavailable, match="Not Supported"):
        NvmlEnergyMeter(0, nvml=fake)
    assert fake.state["inits"] == 0


def test_nvml_that_does_not_start_is_unavailable() -> None:
    with pytest.raises(MeterUnavailable, match="Driver Not Loaded"):
        NvmlEnergyMeter(0, nvml=fake_pynvml(SimulatedPower(), init_fails=True))


def test_closing_shuts_nvml_down_once() -> None:
    power = SimulatedPower()
    fake = fake_pynvml(power)
    meter = NvmlEnergyMeter(0, nvml=fake)
    assert fake.state["inits"] == 1
    meter.close()
    meter.close()
    assert fake.state["inits"] == 0


# ---------------------------------------------------------------------------------------------
# RAPL


def test_rapl_sums_the_packages(tmp_path: Path) -> None:
    tree = rapl(tmp_path, [10_000, 5_000_000])
    meter = RaplEnergyMeter(tmp_path, 1.0, clock=tree.power.clock, sleep=tree.sleep)
    assert meter.source == "rapl" and meter.model is None
    meter.start()
    tree.work(1.5)
    reading = meter.stop()
    assert reading.idle_power_w == pytest.approx(2 * IDLE_W, rel=1e-3)
    assert reading.seconds == pytest.approx(1.5, abs=0.002)
    assert reading.joules == pytest.approx(2 * BUSY_W * 1.5, abs=0.5)
    assert reading.above_idle_joules == pytest.approx(2 * (BUSY_W - IDLE_W) * 1.5, abs=0.5)


def test_rapl_counters_that_wrap_around(tmp_path: Path) -> None:
    max_range = 500_000_000  # 500 J: the 300 J window wraps the counter once
    tree = rapl(tmp_path, [max_range - 40_000_000], max_range_uj=max_range)
    meter = RaplEnergyMeter(tmp_path, 1.0, clock=tree.power.clock, sleep=tree.sleep)
    meter.start()
    tree.work(1.0)
    value = int((tmp_path / "intel-rapl:0" / "energy_uj").read_text())
    assert value < max_range - 40_000_000, "the counter wrapped"
    assert meter.stop().joules == pytest.approx(BUSY_W * 1.0, abs=0.5)


def test_no_powercap_tree_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(MeterUnavailable, match="no powercap tree"):
        RaplEnergyMeter(tmp_path / "absent")
    (tmp_path / "intel-rapl:0:0").mkdir()
    with pytest.raises(MeterUnavailable, match="no RAPL package domain"):
        RaplEnergyMeter(tmp_path)


def test_an_unreadable_counter_is_unavailable(tmp_path: Path) -> None:
    tree = rapl(tmp_path, [0])
    counter = tmp_path / "intel-rapl:0" / "energy_uj"
    if os.geteuid() == 0:
        counter.unlink()  # root reads any mode; a missing file stands in for a 0400 one
    else:
        counter.chmod(0)
    with pytest.raises(MeterUnavailable, match="not readable"):
        RaplEnergyMeter(tree.root)


def test_amd_packages_are_read_too(tmp_path: Path) -> None:
    directory = tmp_path / "amd-rapl:0"
    directory.mkdir()
    (directory / "energy_uj").write_text("123\n")
    (directory / "max_energy_range_uj").write_text("1000000\n")
    RaplEnergyMeter(tmp_path)  # no name file: a top-level amd-rapl:N is a package


# ---------------------------------------------------------------------------------------------
# The estimate


def test_energy_estimate_is_cpu_time_times_watts_minus_excluded_threads() -> None:
    cpu = iter([1.0, 3.0])
    excluded = iter([0.1, 0.3])
    wall = iter([10.0, 12.5])
    meter = CpuTimeEnergyEstimate(
        10.0, lambda: next(excluded), cpu_clock=lambda: next(cpu), clock=lambda: next(wall)
    )
    meter.start()
    reading = meter.stop()
    assert reading.joules == pytest.approx((2.0 - 0.2) * 10.0)
    assert reading.seconds == pytest.approx(2.5)
    assert reading.idle_power_w is None and reading.above_idle_joules is None
    assert meter.source == "estimate" and meter.min_window_s == 0.0
    assert meter.model == "flat:10.0 W/core"


def test_energy_estimate_grows_with_real_cpu_work() -> None:
    meter = CpuTimeEnergyEstimate(10.0)
    meter.start()
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert meter.stop().joules >= 0.5 * 0.05 * 10.0


def test_above_idle_energy_is_never_negative() -> None:
    assert EnergyReading(joules=50.0, seconds=1.0, idle_power_w=60.0).above_idle_joules == 0.0
    assert EnergyReading(joules=50.0, seconds=1.0, idle_power_w=20.0).above_idle_joules == 30.0


# ---------------------------------------------------------------------------------------------
# Selection


@pytest.mark.parametrize(
    ("values", "devices"),
    [
        ({}, []),
        ({"runtime.device": "cuda"}, [0]),
        ({"runtime.device": "cuda", "shard.data_parallel": 2}, [0, 1]),
        ({"runtime.device": "cuda", "shard.tensor_parallel": 4}, [0, 1, 2, 3]),
        ({"shard.tensor_parallel": 2}, []),  # ranks on the CPU
        ({"runtime.engine": "onnxruntime", "runtime.provider": "cuda"}, [0]),
        ({"runtime.engine": "onnxruntime", "runtime.provider": "tensorrt"}, [0]),
    ],
)
def test_the_cuda_devices_of_a_trial(values: dict[str, Any], devices: list[int]) -> None:
    assert cuda_device_indices(config(**values)) == devices


def test_a_cuda_trial_gets_nvml(tmp_path: Path) -> None:
    power = SimulatedPower(devices=4)
    fake = fake_pynvml(power)
    trial = config(**{"runtime.device": "cuda", "shard.data_parallel": 2})
    meter = select_meter(trial, SETTINGS, nvml=fake, nvml_index=lambda i: i + 2)
    assert isinstance(meter, NvmlEnergyMeter) and meter.source == "nvml"
    assert meter.min_window_s == 2.0
    assert meter._handles == [2, 3]  # NVML's indices of cuda:0 and cuda:1
    meter.close()


def test_a_cuda_trial_without_the_counter_gets_the_estimate_and_says_why() -> None:
    fake = fake_pynvml(SimulatedPower(), energy_supported=False)
    trial = config(**{"runtime.device": "cuda"})
    meter = select_meter(trial, SETTINGS, nvml=fake, nvml_index=lambda i: i)
    assert isinstance(meter, CpuTimeEnergyEstimate) and meter.source == "estimate"
    assert meter.why is not None and "Not Supported" in meter.why
    assert fake.state["inits"] == 0


def test_a_cuda_trial_without_pynvml_gets_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # importing it raises ImportError
    meter = select_meter(config(**{"runtime.device": "cuda"}), SETTINGS, nvml_index=lambda i: i)
    assert isinstance(meter, CpuTimeEnergyEstimate)
    assert meter.why is not None and "nvidia-ml-py" in meter.why


def test_a_cpu_trial_gets_rapl_where_readable(tmp_path: Path) -> None:
    rapl(tmp_path, [0])
    meter = select_meter(config(), SETTINGS, powercap_root=tmp_path)
    assert isinstance(meter, RaplEnergyMeter) and meter.min_window_s == 2.0


def test_a_cpu_trial_without_rapl_gets_the_estimate(tmp_path: Path) -> None:
    meter = select_meter(config(), SETTINGS, powercap_root=tmp_path / "absent")
    assert isinstance(meter, CpuTimeEnergyEstimate) and meter.why
    assert meter.model == "flat:7.0 W/core"  # SETTINGS sets cpu_watts_per_core
    meter.start()
    assert meter.stop().joules >= 0.0


def test_the_estimate_of_a_cpu_in_the_table_uses_its_tdp(tmp_path: Path) -> None:
    info = cpuinfo(tmp_path, "AMD EPYC 7763 64-Core Processor", virtual=True)
    cpu = iter([5.0, 7.0])
    meter = select_meter(
        config(),
        MeasurementSettings(energy_window_s=2.0),
        cpu_clock=lambda: next(cpu),
        powercap_root=tmp_path / "absent",
        cpuinfo=info,
    )
    assert isinstance(meter, CpuTimeEnergyEstimate) and meter.source == "estimate"
    tdp = table_tdp("AMD EPYC 7763")
    assert meter.model == f"tdp:codecarbon:AMD EPYC 7763:{tdp:g} W/64 cores"
    meter.start()
    assert meter.stop().joules == pytest.approx(2.0 * tdp / 64)


# ---------------------------------------------------------------------------------------------
# The TDP model


def table_tdp(name: str) -> float:
    """The TDP codecarbon's table gives the CPU named exactly `name`, read with csv alone."""
    text = files("codecarbon").joinpath(TDP_TABLE).read_text(encoding="utf-8")
    (tdp,) = [float(row["TDP"]) for row in csv.DictReader(text.splitlines()) if row["Name"] == name]
    return tdp


def cpuinfo(tmp_path: Path, name: str | None, cores: int = 2, virtual: bool = False) -> str:
    """A /proc/cpuinfo of two processors of one package."""
    flags = "fpu sse avx2" + (" hypervisor" if virtual else "")
    blocks = []
    for index in range(2):
        lines = [f"processor\t: {index}"]
        if name is not None:
            lines.append(f"model name\t: {name}")
        lines += ["physical id\t: 0", f"cpu cores\t: {cores}", f"flags\t\t: {flags}"]
        blocks.append("\n".join(lines) + "\n")
    path = tmp_path / "cpuinfo"
    path.write_text("\n".join(blocks))
    return str(path)


@pytest.fixture
def fresh_tdp() -> Iterator[None]:
    """tdp_power_model resolved anew, and its answers forgotten afterwards."""
    tdp_power_model.cache_clear()
    yield
    tdp_power_model.cache_clear()


@pytest.mark.parametrize(
    ("brand", "name"),
    [
        ("Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "Intel Xeon Platinum 8259CL"),
        ("INTEL(R) XEON(R) PLATINUM 8580", "Intel Xeon Platinum 8580"),
        ("Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz", "Intel Xeon E5-2686 v4"),
        ("12th Gen Intel(R) Core(TM) i7-12700H", "Intel Core i7-12700H"),
        ("AMD EPYC 7763 64-Core Processor", "AMD EPYC 7763"),
        ("AMD EPYC 7R13 Processor", "AMD EPYC 7R13"),
        ("AMD Ryzen 7 5800H with Radeon Graphics", "AMD Ryzen 7 5800H"),
    ],
)
def test_the_tdp_lookup_matches_cpus_in_codecarbon_s_table(brand: str, name: str) -> None:
    assert match_tdp(brand, codecarbon_tdp_table()) == (name, table_tdp(name))


@pytest.mark.parametrize(
    "brand",
    [
        "AMD EPYC",  # this VM's name: many EPYCs start so, none is it
        "Intel(R) Xeon(R) CPU @ 2.20GHz",  # a cloud VM's Xeon without a model number
        "AMD EPYC 776",  # a prefix of AMD EPYC 7763
        "Intel Xeon Platinum 8259",  # the table has 8259CL and 8259L only
        "AMD Phenom II X4 945",  # in the table twice, at 95 W and at 125 W
        "",
    ],
)
def test_the_tdp_lookup_refuses_cpus_not_in_the_table(brand: str) -> None:
    assert match_tdp(brand, codecarbon_tdp_table()) is None


def test_names_that_normalise_alike_with_different_tdps_are_ambiguous() -> None:
    table = read_tdp_table(
        [
            "Name,TDP",
            "Chip 9 (95W),95",
            "Chip 9 (125W),125",
            "Chip 8,65.0",
            "Chip 8 Processor,65",  # the same TDP: still a match
            "Chip 7,27.29.5",  # not a number: skipped
            "Chip 6,0",
        ]
    )
    assert match_tdp("Chip 9", table) is None and "chip 9" in table
    assert match_tdp("Chip(TM) 8 CPU @ 3.00GHz", table) == ("Chip 8", 65.0)
    assert match_tdp("Chip 7", table) is None and match_tdp("Chip 6", table) is None


def test_a_package_s_cores_come_from_the_name_or_from_bare_metal_cpuinfo(tmp_path: Path) -> None:
    def read(path: str) -> CpuIdentity:
        return read_cpuinfo(Path(path).read_text())

    amd = read(cpuinfo(tmp_path, "AMD EPYC 7763 64-Core Processor", cores=4, virtual=True))
    assert amd.name == "AMD EPYC 7763 64-Core Processor" and amd.package_cores == 64
    intel = "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"
    assert read(cpuinfo(tmp_path, intel, cores=24)).package_cores == 24
    guest = read(cpuinfo(tmp_path, intel, cores=4, virtual=True))
    assert guest.virtual and guest.package_cores is None  # a guest's cores are its vCPUs
    assert read(cpuinfo(tmp_path, None)).name is None


def test_the_estimate_charges_the_tdp_per_physical_core(tmp_path: Path, fresh_tdp: None) -> None:
    power = tdp_power_model(cpuinfo(tmp_path, "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", 24))
    assert isinstance(power, CpuPowerModel)
    tdp = table_tdp("Intel Xeon Platinum 8259CL")
    assert power.name == f"tdp:codecarbon:Intel Xeon Platinum 8259CL:{tdp:g} W/24 cores"
    cpu = iter([1.0, 4.0])
    excluded = iter([0.0, 0.5])
    wall = iter([10.0, 12.0])
    meter = CpuTimeEnergyEstimate(
        power, lambda: next(excluded), cpu_clock=lambda: next(cpu), clock=lambda: next(wall)
    )
    meter.start()
    reading = meter.stop()
    assert reading.joules == pytest.approx((3.0 - 0.5) * tdp / 24)
    assert meter.source == "estimate" and meter.model == power.name


@pytest.mark.parametrize(
    ("name", "virtual", "why"),
    [
        ("AMD EPYC", True, "'AMD EPYC' is not in codecarbon's table"),
        ("AMD Phenom II X4 945 Processor", False, "is ambiguous in codecarbon's table"),
        ("Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", True, "unknown in a virtual machine"),
        (None, False, "no CPU model name"),
    ],
)
def test_without_a_tdp_the_estimate_is_flat_and_says_why(
    tmp_path: Path, fresh_tdp: None, name: str | None, virtual: bool, why: str
) -> None:
    power = estimate_power_model(MeasurementSettings(), cpuinfo(tmp_path, name, virtual=virtual))
    assert power.name == "flat:10.0 W/core" and power.watts_per_core == 10.0
    assert power.why is not None and why in power.why


def test_without_codecarbon_the_estimate_falls_back_to_the_flat_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_tdp: None
) -> None:
    monkeypatch.setitem(sys.modules, "codecarbon", None)  # importing it raises ImportError
    info = cpuinfo(tmp_path, "AMD EPYC 7763 64-Core Processor")
    cpu = iter([1.0, 3.5])
    meter = select_meter(
        config(),
        MeasurementSettings(),
        cpu_clock=lambda: next(cpu),
        powercap_root=tmp_path / "absent",
        cpuinfo=info,
    )
    assert isinstance(meter, CpuTimeEnergyEstimate) and meter.source == "estimate"
    assert meter.model == "flat:10.0 W/core"
    assert meter.power.why == "codecarbon is not installed"
    meter.start()
    assert meter.stop().joules == pytest.approx(2.5 * 10.0)


def longer(settings: MeasurementSettings) -> MeasurementSettings:
    return settings.model_copy(update={"min_iters": 100, "max_seconds": 10.0})


def test_cpu_watts_per_core_set_in_the_request_wins_over_the_tdp(tmp_path: Path) -> None:
    info = cpuinfo(tmp_path, "AMD EPYC 7763 64-Core Processor")
    assert estimate_power_model(MeasurementSettings(), info).name.startswith("tdp:codecarbon:")
    explicit = MeasurementSettings.model_validate({"cpu_watts_per_core": 10.0})
    power = estimate_power_model(explicit, info)
    assert power.name == "flat:10.0 W/core" and power.why == "cpu_watts_per_core is set"
    # ...and stays so when the settings are copied with changes, dumped (a stored request)
    # and shipped to a worker
    stored = MeasurementSettings.model_validate(longer(explicit).model_dump(exclude_none=True))
    assert estimate_power_model(pickle.loads(pickle.dumps(stored)), info).name == (
        "flat:10.0 W/core"
    )
    unset = MeasurementSettings.model_validate(MeasurementSettings().model_dump(mode="json"))
    assert estimate_power_model(unset, info).name.startswith("tdp:codecarbon:")


def test_the_tdp_is_resolved_once_per_process(tmp_path: Path, fresh_tdp: None) -> None:
    info = cpuinfo(tmp_path, "AMD EPYC 7763 64-Core Processor")
    first = tdp_power_model(info)
    Path(info).unlink()
    assert isinstance(first, CpuPowerModel) and tdp_power_model(info) is first


# ---------------------------------------------------------------------------------------------
# The real NVML (skipped without CUDA and nvidia-ml-py)


def real_nvml() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return pytest.importorskip("pynvml", reason="needs nvidia-ml-py")


@pytest.mark.gpu
def test_the_real_nvml_counter_sees_a_busy_gpu() -> None:
    import torch

    from workers.measuring.nvml import nvml_index_of_cuda_device

    nvml = real_nvml()
    meter = NvmlEnergyMeter(nvml_index_of_cuda_device(0), window_s=1.0)
    a = torch.randn(4096, 4096, device="cuda")
    try:
        meter.start()
        began = time.perf_counter()
        while time.perf_counter() - began < meter.min_window_s:
            a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
        reading = meter.stop()
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index_of_cuda_device(0))
        limit_w = nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3
        nvml.nvmlShutdown()
    finally:
        meter.close()
    assert reading.idle_power_w is not None and 0 < reading.idle_power_w < limit_w
    assert reading.seconds >= 1.0
    mean_w = reading.joules / reading.seconds
    assert reading.idle_power_w < mean_w <= 1.2 * limit_w
    above = reading.above_idle_joules
    assert above is not None and 0 < above < reading.joules


@pytest.mark.gpu
def test_a_cuda_trial_selects_the_real_nvml() -> None:
    real_nvml()
    meter = select_meter(config(**{"runtime.device": "cuda"}), SETTINGS)
    try:
        assert meter.source == "nvml"
    finally:
        meter.close()
