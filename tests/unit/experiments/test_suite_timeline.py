"""The suite's timeline report: busy time, waits for the machine and idle tails, per worker."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.suite_timeline import (
    DEFAULT_ARGS,
    Span,
    busy_core_seconds,
    cpu_line,
    read_spans,
    report,
    suite_command,
)


def span(worker: str, test: str, started: float, got_machine: float, ended: float) -> Span:
    return Span(worker, test, started, got_machine, ended)


SPANS = [
    span("gw0", "tests/component/a.py::test_quick", 0.0, 0.0, 2.0),
    span("gw0", "tests/system/b.py::test_alone", 2.0, 2.0, 32.0),
    span("gw1", "tests/component/a.py::test_other", 0.0, 0.0, 4.0),
    # Waited for the exclusive test above, then ran; the run ends with gw0's idle tail.
    span("gw1", "tests/system/c.py::test_after", 4.0, 32.0, 50.0),
]


def test_each_worker_is_busy_waits_or_idles_and_long_tests_are_summed() -> None:
    lines = report(SPANS)
    assert lines[0] == "span 50 s, 4 tests"
    assert lines[1] == "gw0: busy 32 s, waited for the machine 0 s, idle after its last test 18 s"
    assert lines[2] == "gw1: busy 22 s, waited for the machine 28 s, idle after its last test 0 s"
    assert lines[3] == "summed busy 54 s: component 6 s, system 48 s"
    assert lines[4] == "2 tests of 10 s or more: 48 s (89% of the busy time)"
    assert lines[5:] == ["waited 28 s: gw1 tests/system/c.py::test_after"]


def test_a_timeline_file_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    path.write_text("".join(f"{json.dumps(s.__dict__)}\n" for s in SPANS))
    assert read_spans(path) == SPANS


def test_options_alone_keep_the_default_tiers_and_a_path_replaces_them() -> None:
    assert suite_command(["--durations=0"])[-3:] == ["--durations=0", *DEFAULT_ARGS]
    named = suite_command(["-x", "tests/unit/experiments/test_suite_timeline.py::test_x"])
    assert named[-2:] == ["-x", "tests/unit/experiments/test_suite_timeline.py::test_x"]
    assert not set(DEFAULT_ARGS) & set(named)


def test_the_machine_s_cpu_time_is_what_its_cores_computed_and_bounds_the_wall_time() -> None:
    # user nice system idle iowait irq softirq steal: ticks of 1/100 s over all cores
    stat = "cpu  6000 100 1900 3000 500 200 300 7000 0 0\ncpu0 1 2 3\n"
    assert busy_core_seconds(stat, 100.0) == 85.0  # not idle, I/O wait or steal
    line = cpu_line({"wall_s": 100.0, "busy_core_s": 150.0, "cores": 2})
    assert line == (
        "CPU: 150 core-seconds busy in 100 s (75% of 2 cores); that work alone needs 75 s of "
        "wall time or more on 2 cores"
    )
