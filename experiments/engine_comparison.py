"""The four engines head to head on the digits and MiniLM examples: each engine at fp32 (and
bf16 where it runs it) at two batch sizes, all in one interleaved comparison per example and
batch size (`workers.head_to_head`: every round times each entrant once, the order rotating,
so a slow minute of the machine hits all of them alike). Reports per entrant the median over
the rounds of its p95 latency per call, and its paired ratio to ONNX Runtime fp32 with the
ratio's 95% interval; the rounds the machine was busy are counted. Writes a Markdown report
naming the machine.

    .venv/bin/python experiments/engine_comparison.py [--rounds 10] [--round-seconds 0.5]
        [--out experiments/results/engines-cpu-head-to-head.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.core.artifacts import software_versions  # noqa: E402
from autotune.core.contract import Entrant, HeadToHeadSpec, MeasurementSettings  # noqa: E402
from autotune.core.knobs import ENGINES, supports  # noqa: E402
from autotune.core.knobs.config import default_threads, parse_config  # noqa: E402
from autotune.core.stats import paired_ratio  # noqa: E402
from autotune.requests.request import load_request  # noqa: E402
from workers.building.probe import probe  # noqa: E402
from workers.building.runtimes import machine_target  # noqa: E402
from workers.cache import WorkloadCache  # noqa: E402
from workers.head_to_head import run_head_to_head  # noqa: E402

EXAMPLES = {
    "digits": ("experiments/digits/request.yaml", (1, 32)),
    "minilm": ("experiments/minilm/request.yaml", (1, 8)),
}
REFERENCE = ("onnxruntime", "fp32")


def entrants(batch: int) -> list[tuple[str, str, dict[str, Any]]]:
    """Every engine at fp32, and at bf16 where this machine lets it run bf16."""
    chosen = []
    for engine in ENGINES:
        for precision in ("fp32", "bf16"):
            config = {
                "runtime.engine": engine,
                "precision.mode": precision,
                "batch.size": batch,
                "runtime.threads": default_threads(),
            }
            if supports(parse_config(config, "torch"), machine_target("torch")) is None:
                chosen.append((engine, precision, config))
    return chosen


def compare(
    example: str, batch: int, rounds: int, round_seconds: float, store: WorkloadCache
) -> list[str]:
    request = load_request(REPO / EXAMPLES[example][0])
    chosen = entrants(batch)
    spec = HeadToHeadSpec(
        study=f"engines-{example}-b{batch}",
        workload=request.workload(REPO),
        entrants=[
            Entrant(trial_number=i, config=config, known_accuracy=0.0)
            for i, (_, _, config) in enumerate(chosen)
        ],
        rounds=rounds,
        round_seconds=round_seconds,
        measurement=MeasurementSettings(contention="warn"),
    )
    result = run_head_to_head(spec, store)
    outcomes = {o.trial_number: o for o in result.entrants}
    reference = next(i for i, (e, p, _) in enumerate(chosen) if (e, p) == REFERENCE)
    reference_p95 = [r.latency_p95_ms for r in outcomes[reference].rounds]
    busy = sum(c.contended for c in result.contention)
    lines = [
        f"\n### {example}, batch {batch}\n",
        f"{rounds} interleaved rounds of {round_seconds} s per entrant; "
        f"{busy} of {len(result.contention)} rounds saw other load.\n",
        "| engine | precision | p95 ms per call (median of rounds) | ÷ ONNX Runtime fp32 "
        "(median, 95% CI) | samples/s (median) |",
        "|---|---|---|---|---|",
    ]
    for i, (engine, precision, _) in enumerate(chosen):
        outcome = outcomes[i]
        if not outcome.rounds:
            lines.append(f"| {engine} | {precision} | {outcome.status}: {outcome.reason} | | |")
            continue
        p95 = [r.latency_p95_ms for r in outcome.rounds]
        ratio = paired_ratio(p95, reference_p95)
        throughput = statistics.median(r.throughput_per_s for r in outcome.rounds)
        lines.append(
            f"| {engine} | {precision} | {statistics.median(p95):.4g} | "
            f"{ratio.median:.2f} ({ratio.low:.2f}–{ratio.high:.2f}) | {throughput:.4g} |"
        )
    return lines


def machine() -> str:
    profile = probe()
    software = ", ".join(f"{k} {v}" for k, v in software_versions().items())
    return (
        f"{profile.cpu_model}, {profile.cpu_cores} cores, {profile.memory_mb // 1024} GiB, "
        f"flags {', '.join(profile.cpu_flags)}; {software}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--round-seconds", type=float, default=0.5)
    parser.add_argument(
        "--out", type=Path, default=REPO / "experiments/results/engines-cpu-head-to-head.md"
    )
    args = parser.parse_args()
    started = time.monotonic()
    store = WorkloadCache()
    lines = [
        "# The engines head to head (digits and MiniLM)\n",
        f"Command: `python experiments/engine_comparison.py --rounds {args.rounds} "
        f"--round-seconds {args.round_seconds}`\n",
        f"Machine: {machine()}\n",
        "Each table is one interleaved comparison: every round times each entrant once, in "
        "an order that rotates; the ratio is per round, to ONNX Runtime fp32 in the same "
        "round. Threads: all cores. bf16 appears where the engine runs it on this CPU (torch "
        "casts the model; OpenVINO applies it as its inference precision).",
    ]
    for example, (_, batches) in EXAMPLES.items():
        for batch in batches:
            lines += compare(example, batch, args.rounds, args.round_seconds, store)
    lines.append(f"\nWall time: {time.monotonic() - started:.0f} s.")
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
