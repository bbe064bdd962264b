"""Where the test suite's wall time goes: what each pytest-xdist worker did, second by second.

    python experiments/suite_timeline.py run TIMELINE.jsonl [PYTEST ARGS...]
    python experiments/suite_timeline.py report TIMELINE.jsonl

`run` runs `.venv/bin/pytest` in the workers `make test` uses (one per core, at most four)
with this module as a plugin, which writes one line per test: its worker, when the test
started, when it got the machine (a test waits for it while an `exclusive` test runs, or
before its own exclusive turn) and when it ended. The PYTEST ARGS are passed on; where they
name no test path (options alone, such as --durations=0), the component and system tiers
are run. `report` reads such a file and prints the span of the run, each worker's
busy time, its wait for the machine and its idle tail after its last test, the busy time
per tier, the share of the tests of 10 s or more, and the longest waits. `run` also reads
the machine's CPU time (/proc/stat) before and after the suite, into TIMELINE.cpu.json:
the core-seconds the suite's processes computed, and so the least wall time this machine's
cores could run that work in, however the tests were ordered or overlapped (keep the machine
otherwise quiet: every process counts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from experiments.test_suite_time import WORKERS  # noqa: E402

TIMELINE_ENV = "AUTOTUNE_TEST_TIMELINE"
DEFAULT_ARGS = ["tests/component", "tests/system"]
LONG_S = 10.0


@dataclass(frozen=True)
class Span:
    worker: str
    test: str
    started: float
    got_machine: float
    ended: float

    @property
    def busy_s(self) -> float:
        return self.ended - self.got_machine

    @property
    def waited_s(self) -> float:
        return self.got_machine - self.started


# -- the pytest plugin (loaded with -p experiments.suite_timeline) ---------------------------

_got_machine: dict[str, float] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _got_machine.setdefault(item.nodeid, time.time())


# Outside the suite's own machine-share wrapper (tests/conftest.py), so that the wait for the
# machine is seen.
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    started = time.time()
    try:
        return (yield)
    finally:
        span = Span(
            worker=os.environ.get("PYTEST_XDIST_WORKER", "main"),
            test=item.nodeid,
            started=started,
            got_machine=_got_machine.pop(item.nodeid, started),
            ended=time.time(),
        )
        if TIMELINE_ENV in os.environ:
            with open(os.environ[TIMELINE_ENV], "a") as out:
                out.write(json.dumps(span.__dict__) + "\n")


# -- the machine's CPU time ------------------------------------------------------------------


def busy_core_seconds(proc_stat: str, ticks_per_s: float) -> float:
    """The machine's busy CPU time so far, summed over its cores (user, nice, system, irq and
    softirq; not idle, I/O wait or steal), from /proc/stat's first line."""
    user, nice, system, _idle, _iowait, irq, softirq = map(int, proc_stat.split()[1:8])
    return (user + nice + system + irq + softirq) / ticks_per_s


def machine_busy_core_seconds() -> float:
    return busy_core_seconds(Path("/proc/stat").read_text(), os.sysconf("SC_CLK_TCK"))


def cpu_line(usage: dict[str, float]) -> str:
    wall, busy, cores = usage["wall_s"], usage["busy_core_s"], usage["cores"]
    return (
        f"CPU: {busy:.0f} core-seconds busy in {wall:.0f} s ({100 * busy / (wall * cores):.0f}% "
        f"of {cores:g} cores); that work alone needs {busy / cores:.0f} s of wall time or more "
        f"on {cores:g} cores"
    )


def cpu_path(timeline: Path) -> Path:
    return timeline.with_name(timeline.name + ".cpu.json")


# -- the report ---------------------------------------------------------------------------


def read_spans(path: Path) -> list[Span]:
    return [Span(**json.loads(line)) for line in path.read_text().splitlines() if line]


def report(spans: list[Span]) -> list[str]:
    first, last = min(s.started for s in spans), max(s.ended for s in spans)
    lines = [f"span {last - first:.0f} s, {len(spans)} tests"]
    by_worker: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_worker[span.worker].append(span)
    for worker, own in sorted(by_worker.items()):
        busy, waited = sum(s.busy_s for s in own), sum(s.waited_s for s in own)
        tail = last - max(s.ended for s in own)
        lines.append(
            f"{worker}: busy {busy:.0f} s, waited for the machine {waited:.0f} s, "
            f"idle after its last test {tail:.0f} s"
        )
    tiers: dict[str, float] = defaultdict(float)
    for span in spans:
        tiers[span.test.split("/")[1] if "/" in span.test else span.test] += span.busy_s
    total = sum(tiers.values())
    lines.append(
        f"summed busy {total:.0f} s: "
        + ", ".join(f"{tier} {seconds:.0f} s" for tier, seconds in sorted(tiers.items()))
    )
    long = [s for s in spans if s.busy_s >= LONG_S]
    long_s = sum(s.busy_s for s in long)
    lines.append(
        f"{len(long)} tests of {LONG_S:g} s or more: {long_s:.0f} s "
        f"({100 * long_s / total if total else 0:.0f}% of the busy time)"
    )
    for span in sorted(spans, key=lambda s: s.waited_s, reverse=True)[:5]:
        if span.waited_s >= 1.0:
            lines.append(f"waited {span.waited_s:.0f} s: {span.worker} {span.test}")
    return lines


def suite_command(pytest_args: list[str]) -> list[str]:
    """pytest in the workers `make test` uses, with this plugin; where `pytest_args` name no
    test path (options alone, such as --durations=0), the component and system tiers."""
    names_a_path = any((REPO / arg.split("::")[0]).exists() for arg in pytest_args)
    tests = [] if names_a_path else DEFAULT_ARGS
    return [
        str(REPO / ".venv" / "bin" / "pytest"),
        *WORKERS,
        "-p",
        "experiments.suite_timeline",
        *pytest_args,
        *tests,
    ]


def run(timeline: Path, pytest_args: list[str]) -> int:
    timeline.unlink(missing_ok=True)
    env = {**os.environ, TIMELINE_ENV: str(timeline.resolve())}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started, before = time.monotonic(), machine_busy_core_seconds()
    code = subprocess.run(suite_command(pytest_args), cwd=REPO, env=env, check=False).returncode
    wall, busy = time.monotonic() - started, machine_busy_core_seconds() - before
    usage = {"wall_s": wall, "busy_core_s": busy, "cores": os.cpu_count()}
    cpu_path(timeline).write_text(json.dumps(usage) + "\n")
    return code


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("run", "report"):
        print(__doc__, file=sys.stderr)
        return 2
    timeline = Path(argv[1])
    code = run(timeline, argv[2:]) if argv[0] == "run" else 0
    print("\n".join(report(read_spans(timeline))))
    if cpu_path(timeline).exists():
        print(cpu_line(json.loads(cpu_path(timeline).read_text())))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
