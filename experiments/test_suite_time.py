"""The test suite's wall time, this checkout beside an earlier revision, in one run.

    python experiments/test_suite_time.py --base REV [--rounds 2] [--full]

The earlier revision is checked out into a temporary worktree and run with this checkout's
virtual environment. Each round times the inner loop of each: the base's `-m "not slow"`
(what its `make test-fast` ran, in pytest-xdist workers) and this checkout's `make
test-unit`; the two alternate, round after round, so that both see the same machine. With
--full, each whole suite runs once after the rounds (the base's `pytest` in the same workers,
this checkout's `make test`). Prints a markdown table of wall times, pytest's closing lines
(the last one, for a run of several) and the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTEST = REPO / ".venv" / "bin" / "pytest"
SUMMARY = re.compile(r"\d+ passed.* in [\d.]+s")
# What `make test` gives each pytest run: one worker per core, at most four.
WORKERS = ["-n", str(min(os.cpu_count() or 1, 4)), "--dist", "worksteal"]


def run(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds and pytest's closing line of one run (with its exit code where it
    failed, and what it printed last on stderr)."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if SUMMARY.search(line)]
    line = lines[-1].strip("= ") if lines else "no closing line"
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-2000:])
        line = f"exit {done.returncode}: {line}"
    return seconds, line


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{model}, {os.cpu_count()} cores, {memory_gib:.0f} GiB, Python {platform.python_version()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the earlier revision")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="also each whole suite, once")
    args = parser.parse_args()

    rows: list[tuple[str, str, float, str]] = []
    with tempfile.TemporaryDirectory() as directory:
        base = Path(directory) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), args.base],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        # The base's own modules first on the path (the venv's editable install is this one).
        base_env = {**os.environ, "PYTHONPATH": str(base)}
        here_env = dict(os.environ)
        try:

            def both(suite: str, marks: list[str], target: str) -> None:
                command = [str(PYTEST), *WORKERS, *marks, "-q", "-p", "no:cacheprovider"]
                rows.append((suite, args.base, *run(command, base, base_env)))
                rows.append((suite, "this checkout", *run(["make", target], REPO, here_env)))

            for round_number in range(1, args.rounds + 1):
                both(f"inner loop, round {round_number}", ["-m", "not slow"], "test-unit")
            if args.full:
                both("whole suite", [], "test")
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=REPO, capture_output=True
            )

    print(f"Machine: {machine()}\n")
    print("| suite | revision | wall s | pytest's closing line |")
    print("| --- | --- | ---: | --- |")
    for suite, revision, seconds, line in rows:
        print(f"| {suite} | {revision} | {seconds:.0f} | {line} |")


if __name__ == "__main__":
    main()
