"""An independent re-check of a tuned model's headline, in a fresh process.

    .venv/bin/python experiments/user_models_recheck.py FOLDER [--rounds 12]
        [--block-seconds 0.3]

FOLDER is one model's folder of `experiments/user_models.py` (its request.yaml, study.db and
tuned.yaml). The unmodified model and the chosen configuration are built once and timed
alternately, outside the tuner's measuring code, by `experiments/headline_recheck.py`'s
`recheck`; this prints one JSON line: the medians over the rounds of chosen ÷ unmodified
throughput and p95 latency per call, the throughput ratio's 95% interval, and the share of
the cores other processes used meanwhile."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.core.stats import paired_ratio  # noqa: E402
from autotune.requests.request import load_request  # noqa: E402
from experiments.headline_recheck import baseline_of, recheck  # noqa: E402


def recheck_in_fresh_process(folder: Path, rounds: int, block_s: float) -> dict[str, Any]:
    """The re-check of `folder`'s headline, run by this module in a new Python process
    (working directory `folder`, as the tuning ran); {"error": ...} where it failed."""
    command = [sys.executable, str(Path(__file__).resolve()), str(folder), "--rounds",
               str(rounds), "--block-seconds", str(block_s)]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, cwd=folder)
    if run.returncode != 0:
        return {"error": (run.stderr.strip().splitlines() or ["(no output)"])[-1]}
    figures: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return figures


def recheck_folder(folder: Path, rounds: int, block_s: float) -> dict[str, Any]:
    tuned = yaml.safe_load((folder / "tuned.yaml").read_text())
    workload = load_request(folder / "request.yaml").workload(folder)
    baseline = baseline_of(folder, tuned)
    throughput, p95, other_load = recheck(workload, baseline, tuned["config"], rounds, block_s)
    paired = paired_ratio(throughput, [1.0] * len(throughput))
    return {
        "throughput": statistics.median(throughput),
        "throughput_ci": [paired.low, paired.high],
        "p95": statistics.median(p95),
        "rounds": len(throughput),
        "other_load": other_load,
    }


def describe_recheck(tuned: dict[str, Any], figures: dict[str, Any]) -> str:
    """The re-check's figures beside the headline's: whether each headline interval holds
    the re-check's median."""
    if "error" in figures:
        return f"failed: {figures['error']}"
    low, high = figures["throughput_ci"]
    text = (
        f"throughput {figures['throughput']:.3g}× (95% CI {low:.3g}–{high:.3g}×), p95 per "
        f"call {figures['p95']:.3g}×; {figures['rounds']} alternating rounds, other processes "
        f"used {figures['other_load']:.0%} of the cores"
    )
    ratios = tuned["headline"].get("ratios") or {}
    held = [
        f"{label} {'held' if _within(ratios[name], figures[key]) else 'not held'}"
        for name, key, label in (("throughput_per_s", "throughput", "throughput"),
                                 ("latency_p95_ms", "p95", "p95"))
        if name in ratios
    ]  # fmt: skip
    return text + ("; headline interval: " + ", ".join(held) if held else "")


def _within(ratio: dict[str, float], value: float) -> bool:
    return bool(ratio["ci_low"] <= value <= ratio["ci_high"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--block-seconds", type=float, default=0.3)
    args = parser.parse_args()
    print(json.dumps(recheck_folder(args.folder.resolve(), args.rounds, args.block_seconds)))


if __name__ == "__main__":
    main()
