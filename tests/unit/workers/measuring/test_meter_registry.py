"""The registry of energy meters: `select_meter` tries the registered counters by priority and
falls back to the estimate, which gives each counter's reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.meter_fakes import (
    SETTINGS,
    SimulatedPower,
    config,
    fake_pynvml,
    rapl,
)
from workers.measuring.energy import (
    METERS,
    CpuTimeEnergyEstimate,
    EnergyMeter,
    MeterRequest,
    MeterUnavailable,
    NvmlEnergyMeter,
    RaplEnergyMeter,
    meters_by_priority,
    register_meter,
    select_meter,
)

CUDA_TRIAL = {"runtime.device": "cuda"}


class PreferredMeter:
    """A factory registered above NVML: opens `meter`, or refuses with `refusal` where set."""

    def __init__(self) -> None:
        self.meter = CpuTimeEnergyEstimate(5.0)
        self.refusal: str | None = None
        self.requests: list[MeterRequest] = []

    def __call__(self, request: MeterRequest) -> EnergyMeter:
        self.requests.append(request)
        if self.refusal is not None:
            raise MeterUnavailable(self.refusal)
        return self.meter


@pytest.fixture
def preferred() -> Iterator[PreferredMeter]:
    factory = PreferredMeter()
    register_meter("preferred", priority=METERS["nvml"].priority + 1)(factory)
    try:
        yield factory
    finally:
        del METERS["preferred"]


def test_nvml_is_tried_before_rapl() -> None:
    names = [meter.name for meter in meters_by_priority()]
    assert names.index("nvml") < names.index("rapl")


def test_a_cuda_trial_with_nvml_gets_nvml_though_rapl_is_readable(tmp_path: Path) -> None:
    rapl(tmp_path, [0])
    fake = fake_pynvml(SimulatedPower())
    meter = select_meter(
        config(**CUDA_TRIAL), SETTINGS, nvml=fake, nvml_index=lambda i: i, powercap_root=tmp_path
    )
    assert isinstance(meter, NvmlEnergyMeter)
    meter.close()
    assert fake.state["inits"] == 0


def test_a_cpu_trial_gets_rapl_though_nvml_is_there(tmp_path: Path) -> None:
    rapl(tmp_path, [0])
    fake = fake_pynvml(SimulatedPower())
    meter = select_meter(config(), SETTINGS, nvml=fake, powercap_root=tmp_path)
    assert isinstance(meter, RaplEnergyMeter) and meter.source == "rapl"
    assert fake.state["inits"] == 0, "NVML was not opened for a CPU trial"


def test_a_cpu_trial_without_counters_gets_the_estimate_with_both_reasons(tmp_path: Path) -> None:
    absent = tmp_path / "absent"
    meter = select_meter(config(), SETTINGS, powercap_root=absent)
    assert isinstance(meter, CpuTimeEnergyEstimate) and meter.source == "estimate"
    assert meter.why is not None
    nvml_reason, rapl_reason = meter.why.split("; ")
    assert nvml_reason == "nvml: the trial runs on no CUDA device"
    assert rapl_reason.startswith(f"rapl: no powercap tree at {absent}: ")


def test_a_cuda_trial_without_the_counter_gets_the_estimate_with_both_reasons(
    tmp_path: Path,
) -> None:
    rapl(tmp_path, [0])
    fake = fake_pynvml(SimulatedPower(), energy_supported=False)
    meter = select_meter(
        config(**CUDA_TRIAL), SETTINGS, nvml=fake, nvml_index=lambda i: i, powercap_root=tmp_path
    )
    assert isinstance(meter, CpuTimeEnergyEstimate) and meter.why is not None
    nvml_reason, rapl_reason = meter.why.split("; ")
    assert nvml_reason.startswith("nvml: ") and "Not Supported" in nvml_reason
    assert rapl_reason == "rapl: the trial runs on CUDA devices [0], not on the CPU alone"


def test_a_taken_name_is_refused() -> None:
    nvml = METERS["nvml"]
    with pytest.raises(ValueError, match="'nvml' is already registered"):
        register_meter("nvml", priority=nvml.priority + 1)(PreferredMeter())
    assert METERS["nvml"] is nvml


def test_a_meter_of_higher_priority_is_chosen_first(
    tmp_path: Path, preferred: PreferredMeter
) -> None:
    rapl(tmp_path, [0])
    trial = config()
    assert select_meter(trial, SETTINGS, powercap_root=tmp_path) is preferred.meter
    (request,) = preferred.requests
    assert request.config == trial and request.settings == SETTINGS
    assert request.powercap_root == tmp_path


def test_a_meter_that_does_not_apply_gives_way_and_its_reason(
    tmp_path: Path, preferred: PreferredMeter
) -> None:
    preferred.refusal = "not on this machine"
    rapl(tmp_path, [0])
    assert isinstance(select_meter(config(), SETTINGS, powercap_root=tmp_path), RaplEnergyMeter)
    meter = select_meter(config(), SETTINGS, powercap_root=tmp_path / "absent")
    assert isinstance(meter, CpuTimeEnergyEstimate) and meter.why is not None
    assert [reason.split(":")[0] for reason in meter.why.split("; ")] == [
        "preferred",
        "nvml",
        "rapl",
    ]
    assert meter.why.startswith("preferred: not on this machine; ")
