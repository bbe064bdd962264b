"""Contention: the probe against real busy processes on the trial's cores, the kernel files it
reads, and what each `measurement.contention` policy does to a trial."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from autotune.core.contract import MeasurementSettings
from tests.workers_support import FAST, digits_workload, spec_for
from workers.building.runtimes import machine_profile
from workers.measuring.contention import ContentionProbe, read_core_ticks, read_pressure_us
from workers.runner import run_trial

# Each test reads how busy its core was: another test running meanwhile would be load.
pytestmark = pytest.mark.exclusive

CORE = min(os.sched_getaffinity(0))
BUSY_LOOP = (
    "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); print(flush=True); "
    "exec('while True: pass')"
)


@contextmanager
def busy_processes(cores: list[int]) -> Iterator[None]:
    """One real busy-looping process pinned to each of `cores`, each spinning when this
    yields (it says so once it is pinned)."""
    children = [
        subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(c)], stdout=subprocess.PIPE)
        for c in cores
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == b"\n"
        yield
    finally:
        for child in children:
            child.kill()
            child.communicate()


@contextmanager
def pinned(cores: set[int]) -> Iterator[None]:
    """This process on `cores` alone for the body. The machine's profile, which each process
    probes once, is probed before, as a trial worker does before it pins itself: probed
    pinned, it would count one core for the rest of this process's tests."""
    machine_profile()
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def observe(busy: bool) -> float:
    """Other processes' share of CORE while this process spins on it for a quarter second."""
    with pinned({CORE}):
        probe = ContentionProbe(MeasurementSettings(), cores=[CORE])
        if busy:
            with busy_processes([CORE]):
                probe.start()
                spin(0.25)
                contention = probe.stop(threads=1)
        else:
            probe.start()
            spin(0.25)
            contention = probe.stop(threads=1)
    assert contention.cores == 1
    if busy:
        assert contention.contended
        assert "other processes used" in contention.reasons[0]
        assert contention.oversubscribed  # 1 thread, about half a core to itself
    return contention.other_cpu_share


def test_a_busy_process_on_the_trial_s_core_is_seen() -> None:
    loaded = observe(busy=True)
    quiet = observe(busy=False)
    # The busy loop and this process share one core: the other gets about half of it.
    assert loaded > 0.25
    assert loaded > quiet + 0.2


def test_the_trial_s_own_work_is_not_other_load() -> None:
    with pinned({CORE}):
        probe = ContentionProbe(MeasurementSettings(), cores=[CORE])
        probe.start()
        spin(0.25)
        contention = probe.stop()
    # This process kept its core busy; nearly all of it was its own CPU time.
    assert contention.other_cpu_share < 0.5


def test_proc_stat_and_pressure_parsing(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  30 0 10 100 5 1 1 3 0 0\n"
        "cpu0 10 1 4 50 2 0 1 2 0 0\n"
        "cpu1 20 0 6 50 3 1 0 1 0 0\n"
        "intr 12345\n"
    )
    ticks = read_core_ticks(stat)
    assert sorted(ticks) == [0, 1]
    assert (ticks[0].busy, ticks[0].steal, ticks[0].total) == (16, 2, 70)
    pressure = tmp_path / "pressure"
    pressure.write_text(
        "some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    assert read_pressure_us(pressure) == 123456
    assert read_pressure_us(tmp_path / "missing") is None


def test_steal_time_makes_a_window_contended(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu0 0 0 0 100 0 0 0 0\n")
    clock = iter([0.0, 1.0, 1.0])
    probe = ContentionProbe(
        MeasurementSettings(),
        own_cpu_seconds=lambda: 0.0,
        cores=[0],
        stat=stat,
        pressure=tmp_path / "none",
        clock=lambda: next(clock),
    )
    probe.start()
    hz = os.sysconf("SC_CLK_TCK")
    stat.write_text(f"cpu0 0 0 0 {100 + hz // 2} 0 0 0 {hz // 2}\n")  # half the second stolen
    contention = probe.stop()
    assert contention.steal_share == pytest.approx(0.5)
    assert contention.contended and "hypervisor stole 50%" in contention.reasons[0]
    assert contention.cpu_pressure is None


def test_a_window_shorter_than_the_setting_is_watched_on_until_it_is_that_long(
    tmp_path: Path,
) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu0 0 0 0 100 0 0 0 0\n")
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    probe = ContentionProbe(
        MeasurementSettings(contention_window_s=0.2),
        own_cpu_seconds=lambda: 0.0,
        cores=[0],
        stat=stat,
        pressure=tmp_path / "none",
        clock=lambda: now[0],
        sleep=sleep,
    )
    probe.start()
    now[0] += 0.05  # the measurement took 50 ms
    assert probe.stop().seconds == pytest.approx(0.2)
    assert slept == [pytest.approx(0.15)]
    probe.start()
    now[0] += 0.3  # a longer one is not padded
    assert probe.stop().seconds == pytest.approx(0.3)
    assert len(slept) == 1


def test_waiting_for_quiet_is_bounded(tmp_path: Path) -> None:
    with pinned({CORE}), busy_processes([CORE]):
        probe = ContentionProbe(MeasurementSettings(), cores=[CORE])
        waited = probe.wait_for_quiet(max_wait_s=0.3)
    assert waited >= 0.3  # never quiet: it waited its bound, then gave up
    with pinned({CORE}):
        quick = ContentionProbe(MeasurementSettings(), cores=[CORE]).wait_for_quiet(0.0)
    assert quick >= 0.0


def digits_trial(contention: str) -> object:
    settings = FAST.model_copy(
        update={
            "contention": contention,
            "contention_max_wait_s": 0.3,
            "contention_window_s": MeasurementSettings().contention_window_s,
        }
    )
    spec = spec_for(digits_workload(), {"runtime.threads": 1}).model_copy(
        update={"measurement": settings}
    )
    with pinned({CORE}), busy_processes([CORE]):
        return run_trial(spec)


def test_fail_mode_ends_a_contended_trial_with_the_reason() -> None:
    result = digits_trial("fail")
    assert result.status == "contended"  # type: ignore[attr-defined]
    reason = result.reason  # type: ignore[attr-defined]
    assert "other processes used" in reason and "measurement.contention is 'fail'" in reason


def test_warn_mode_measures_and_marks_the_result() -> None:
    result = digits_trial("warn")
    assert result.status == "ok"  # type: ignore[attr-defined]
    contention = result.provenance.contention  # type: ignore[attr-defined]
    assert contention.contended and contention.waited_s == 0.0
    assert contention.threads == 1


def test_wait_mode_waits_its_bound_then_measures_and_marks() -> None:
    result = digits_trial("wait")
    assert result.status == "ok"  # type: ignore[attr-defined]
    contention = result.provenance.contention  # type: ignore[attr-defined]
    assert contention.contended and contention.waited_s >= 0.3
