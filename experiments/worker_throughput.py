"""Trial throughput of the digits example with 1 and 2 Ray workers on this machine.

    .venv/bin/python experiments/worker_throughput.py [--trials 16]

Each run is a fresh study (SQLite, a local MLflow store in a temporary directory) with the
same seed; the wall time covers the search (baseline included), not re-validation or export.
Writes experiments/results/worker-throughput.md.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.tuning import TuneOptions, run_tune  # noqa: E402
from workers.building.probe import probe  # noqa: E402


def one_run(workers: int, trials: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        request = yaml.safe_load((REPO / "experiments/digits/request.yaml").read_text())
        request.update(
            budget={"trials": trials},
            storage=f"sqlite:///{tmp}/study.db",
            tracking={"uri": f"sqlite:///{tmp}/mlflow.db", "experiment": "throughput"},
            validation={"neighbours": 0, "rounds": 6, "round_seconds": 0.05},
        )
        path = Path(tmp) / "request.yaml"
        path.write_text(yaml.safe_dump(request))
        stamps: list[float] = []

        class Stamp:
            def __call__(self, total: int | None):  # progress hook: record each tell
                from contextlib import nullcontext

                return nullcontext(lambda done, result: stamps.append(time.perf_counter()))

        started = time.perf_counter()
        options = TuneOptions(workers=workers, seed=0, out=Path(tmp) / "tuned.yaml")
        run_tune(path, options, progress=Stamp())
        return stamps[-1] - started, len(stamps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=16)
    args = parser.parse_args()
    rows = []
    for workers in (1, 2):
        seconds, told = one_run(workers, args.trials)
        rows.append((workers, seconds, told))
        print(workers, seconds, told, flush=True)
    profile = probe()
    lines = [
        "# Trial throughput with 1 and 2 Ray workers",
        "",
        f"Machine: {profile.cpu_model}, {profile.cpu_cores} cores, {profile.memory_mb} MiB, "
        f"no GPU; Python {platform.python_version()}. Command: "
        f"`.venv/bin/python experiments/worker_throughput.py --trials {args.trials}`.",
        "Digits example, default space, same seed, a fresh SQLite study each; wall time from "
        "the start of the command to the last trial told (Ray start-up, baseline included).",
        "",
        "| workers | trials told | seconds | trials per minute |",
        "|---|---|---|---|",
    ]
    for workers, seconds, told in rows:
        lines.append(f"| {workers} | {told} | {seconds:.1f} | {60 * told / seconds:.1f} |")
    lines += [
        "",
        "Each worker is pinned to its own core; with 2 workers each trial has one core, so "
        "multi-threaded configurations lose what the second slot gains. On a 2-core machine "
        "the gain from a second worker is bounded by that trade.",
    ]
    out = REPO / "experiments/results/worker-throughput.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
