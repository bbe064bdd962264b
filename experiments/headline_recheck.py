"""Does autotune's headline hold when it is checked independently, on a quiet and on a busy
machine?

For each example (digits, MiniLM, and `small-gain`: an image classifier whose two engines
differ little, `experiments/small_gain/`; it runs quiet only, `--idle-runs` times) and
condition (idle; one busy-loop process per core running throughout), tune with `autotune
tune` (in-process executor, a fresh study), then re-check the tuned file's claim outside the
tuner's measuring code: the baseline and the chosen configuration are built once (with the
workers' own builder, so the re-check runs exactly the configuration that was chosen) and
timed alternately A B A B ... in `--rounds` rounds of `--block-seconds` each, with a plain
perf_counter loop. Each round gives tuned ÷ baseline for throughput and for p95 latency per
call; the re-check's figure is the median over the rounds. Target: the headline's 95%
interval contains the re-check's median. Writes a Markdown report naming the machine.

    .venv/bin/python experiments/headline_recheck.py [--idle-runs 3] [--rounds 12]
        [--digits-trials 16] [--minilm-trials 10] [--examples digits,minilm,small-gain]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.core.artifacts import software_versions  # noqa: E402
from autotune.core.contract import MeasurementSettings, Workload  # noqa: E402
from autotune.core.stats import paired_ratio  # noqa: E402
from autotune.requests.request import load_request  # noqa: E402
from experiments.small_gain.model import ensure_files  # noqa: E402
from workers.cache import WorkloadCache  # noqa: E402
from workers.measuring.contention import ContentionProbe  # noqa: E402

EXAMPLES = {
    "digits": "experiments/digits/request.yaml",
    "minilm": "experiments/minilm/request.yaml",
    "small-gain": "experiments/small_gain/request.yaml",
}
BUSY_LOOP = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); exec('while True: pass')"


@dataclass
class Run:
    example: str
    condition: str
    headline: dict[str, Any]
    chosen: dict[str, Any]
    tune_seconds: float
    recheck_throughput: float
    recheck_p95: float
    recheck_throughput_ci: tuple[float, float]
    recheck_rounds: int
    recheck_other_load: float

    def holds(self, metric: str, value: float) -> bool:
        ratio = self.headline["ratios"][metric]
        return bool(ratio["ci_low"] <= value <= ratio["ci_high"])


@contextlib.contextmanager
def busy_cores(enabled: bool) -> Iterator[None]:
    cores = sorted(os.sched_getaffinity(0)) if enabled else []
    children = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(c)]) for c in cores]
    try:
        yield
    finally:
        for child in children:
            child.kill()
            child.wait()


def tune(example: str, trials: int, workdir: Path) -> tuple[dict[str, Any] | None, float]:
    out = workdir / "tuned.yaml"
    command = [
        str(REPO / ".venv" / "bin" / "autotune"),
        "tune",
        EXAMPLES[example],
        "--trials",
        str(trials),
        "--executor",
        "inprocess",
        "--storage",
        f"sqlite:///{workdir / 'study.db'}",
        "--tracking-uri",
        f"sqlite:///{workdir / 'mlflow.db'}",
        "--out",
        str(out),
        "--seed",
        "0",
    ]
    started = time.perf_counter()
    log = workdir / "tune.log"
    with open(log, "w") as handle:
        done = subprocess.run(command, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT)
    if done.returncode == 3:  # finished, but nothing met the constraints
        return None, time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"tuning {example} failed ({done.returncode}):\n{log.read_text()}")
    return yaml.safe_load(out.read_text()), time.perf_counter() - started


def workload(example: str) -> Workload:
    """The example's model and data, judged by its request's metric."""
    path = REPO / EXAMPLES[example]
    return load_request(path).workload(path.parent)


def recheck(
    tuned: Workload, baseline: dict[str, Any], chosen: dict[str, Any], rounds: int, block_s: float
) -> tuple[list[float], list[float], float]:
    """Per round: chosen ÷ baseline throughput and p95 per call of the `tuned` workload,
    timed alternately; and the share of the cores other processes used meanwhile."""
    from workers.measuring.evaluate import tile_batch

    loaded = WorkloadCache().get(tuned)
    entrants = []
    for config in (baseline, chosen):
        parsed = loaded.parse(config)
        session = loaded.session_for(parsed)
        batch = tile_batch(loaded.data.inputs, parsed.batch_size)
        for _ in range(20):
            session.run(batch)
        entrants.append((session, batch, parsed.batch_size))
    throughput: list[list[float]] = [[], []]
    p95: list[list[float]] = [[], []]
    probe = ContentionProbe(MeasurementSettings())  # what else ran during the re-check
    probe.start()
    for index in range(rounds):
        order = [0, 1] if index % 2 == 0 else [1, 0]
        for which in order:
            session, batch, size = entrants[which]
            time.sleep(0.05)  # the other one's thread pools stop spinning
            for _ in range(3):
                session.run(batch)
            latencies: list[float] = []
            end = time.perf_counter() + block_s
            while time.perf_counter() < end or len(latencies) < 3:
                before = time.perf_counter()
                session.run(batch)
                latencies.append(time.perf_counter() - before)
            throughput[which].append(size * len(latencies) / sum(latencies))
            p95[which].append(float(np.percentile(latencies, 95)))
    for session, _, _ in entrants:
        with contextlib.suppress(AttributeError):
            session.close()  # type: ignore[attr-defined]
    thr = [t / b for t, b in zip(throughput[1], throughput[0], strict=True)]
    lat = [t / b for t, b in zip(p95[1], p95[0], strict=True)]
    return thr, lat, probe.stop().other_cpu_share


@dataclass
class Infeasible:
    """A tuning that finished without any configuration meeting the constraints (exit 3)."""

    example: str
    condition: str
    tune_seconds: float


def one_run(
    example: str, condition: str, trials: int, rounds: int, block_s: float
) -> Run | Infeasible:
    with tempfile.TemporaryDirectory() as tmp, busy_cores(condition == "busy"):
        tuned, seconds = tune(example, trials, Path(tmp))
        if tuned is None:
            print(f"{example} {condition}: no configuration met the constraints", flush=True)
            return Infeasible(example, condition, seconds)
        baseline_config = baseline_of(Path(tmp), tuned)
        thr, lat, other = recheck(
            workload(example), baseline_config, tuned["config"], rounds, block_s
        )
    paired = paired_ratio(thr, [1.0] * len(thr))
    run = Run(
        example=example,
        condition=condition,
        headline=tuned["headline"],
        chosen=tuned["config"],
        tune_seconds=seconds,
        recheck_throughput=statistics.median(thr),
        recheck_p95=statistics.median(lat),
        recheck_throughput_ci=(paired.low, paired.high),
        recheck_rounds=len(thr),
        recheck_other_load=other,
    )
    print(f"{example} {condition}: {tuned['headline']['text']}", flush=True)
    print(
        f"  re-check: throughput {run.recheck_throughput:.3g}x, p95 {run.recheck_p95:.3g}x",
        flush=True,
    )
    return run


def baseline_of(workdir: Path, tuned: dict[str, Any]) -> dict[str, Any]:
    from autotune.results import opened_store

    storage = f"sqlite:///{workdir / 'study.db'}"
    with opened_store(tuned["study"]["name"], storage, "study") as store:
        baseline = next(r for r in store.records() if r.marks.baseline)
    return dict(baseline.config)


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{model}, {os.cpu_count()} cores, {memory_gib:.0f} GiB, no GPU"


def report(runs: list[Run | Infeasible], args: argparse.Namespace) -> str:
    versions = software_versions()
    lines = [
        "# Headlines re-checked head to head",
        "",
        f"Machine: {machine()}; Python {versions['python']}, torch {versions.get('torch')}, "
        f"onnxruntime {versions.get('onnxruntime')}. Command: `.venv/bin/python "
        f"experiments/headline_recheck.py --idle-runs {args.idle_runs} --rounds {args.rounds} "
        f"--digits-trials {args.digits_trials} --minilm-trials {args.minilm_trials} "
        f"--examples {args.examples}`.",
        "",
        "Each row: `autotune tune` (in-process executor, a fresh study, default "
        "`measurement.contention: wait`), then an independent re-check of the baseline against "
        f"the chosen configuration: {args.rounds} rounds alternating A B / B A, "
        f"{args.block_seconds} s blocks, plain perf_counter timing. 'busy': one busy-loop "
        "process per core ran through the tuning and the re-check. Ratios are tuned ÷ baseline "
        "(throughput: higher is better; p95 per call: lower is better).",
        "",
        "| example | condition | chosen | headline throughput (95% CI) | re-check | holds | "
        "headline p95/call (95% CI) | re-check | holds | conditions reported | other load in "
        "re-check | tune s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        if isinstance(run, Infeasible):
            lines.append(
                f"| {run.example} | {run.condition} | none: no configuration met the "
                f"constraints (exit 3) | | | | | | | | | {run.tune_seconds:.0f} |"
            )
            continue
        thr = run.headline["ratios"]["throughput_per_s"]
        p95 = run.headline["ratios"]["latency_p95_ms"]
        chosen = ", ".join(f"{k}={v}" for k, v in sorted(run.chosen.items()))
        conditions = run.headline["conditions"]
        if conditions == "contended":
            conditions += f" ({run.headline['contended_rounds']}/{run.headline['rounds']} rounds)"
        lines.append(
            f"| {run.example} | {run.condition} | {chosen} | {thr['ratio']:.3g}× "
            f"({thr['ci_low']:.3g}–{thr['ci_high']:.3g}) | {run.recheck_throughput:.3g}× | "
            f"{'yes' if run.holds('throughput_per_s', run.recheck_throughput) else 'no'} | "
            f"{p95['ratio']:.3g}× ({p95['ci_low']:.3g}–{p95['ci_high']:.3g}) | "
            f"{run.recheck_p95:.3g}× | "
            f"{'yes' if run.holds('latency_p95_ms', run.recheck_p95) else 'no'} | "
            f"{conditions} | {run.recheck_other_load:.0%} | {run.tune_seconds:.0f} |"
        )
    done = [r for r in runs if isinstance(r, Run)]
    lines += _holding(done)
    idle = [r for r in done if r.example == "digits" and r.condition == "idle"]
    if len(idle) > 1:
        values = [r.headline["ratios"]["throughput_per_s"]["ratio"] for r in idle]
        lines += [
            "",
            f"Run-to-run spread of the digits headline over {len(idle)} idle runs (throughput "
            f"ratio): {', '.join(f'{v:.3g}×' for v in values)}; the chosen configurations: "
            + "; ".join(", ".join(f"{k}={v}" for k, v in sorted(r.chosen.items())) for r in idle)
            + ".",
        ]
    lines += ["", "Headlines as printed:", ""]
    lines += [f"- {r.example}, {r.condition}: {r.headline['text']}" for r in done]
    return "\n".join(lines) + "\n"


def _holding(done: list[Run]) -> list[str]:
    """Per example, in how many quiet runs each headline figure's interval held the
    re-check."""
    lines = ["", "| example | quiet runs | p95/call held | throughput held |", "|---|---|---|---|"]
    for example in dict.fromkeys(r.example for r in done):
        quiet = [
            r
            for r in done
            if r.example == example and r.headline["conditions"] == "quiet"
            and not r.headline["same_as_baseline"]
        ]  # fmt: skip
        p95 = sum(r.holds("latency_p95_ms", r.recheck_p95) for r in quiet)
        thr = sum(r.holds("throughput_per_s", r.recheck_throughput) for r in quiet)
        lines.append(
            f"| {example} | {len(quiet)} | {p95} of {len(quiet)} | {thr} of {len(quiet)} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle-runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--block-seconds", type=float, default=0.3)
    parser.add_argument("--digits-trials", type=int, default=16)
    parser.add_argument("--minilm-trials", type=int, default=10)
    parser.add_argument("--examples", default="digits,minilm")
    parser.add_argument(
        "--out", type=Path, default=REPO / "experiments/results/headline-recheck-cpu.md"
    )
    args = parser.parse_args()
    trials = {"digits": args.digits_trials, "minilm": args.minilm_trials, "small-gain": 4}
    ensure_files()
    runs: list[Run | Infeasible] = []
    for example in args.examples.split(","):
        idle_runs = args.idle_runs if example in ("digits", "small-gain") else 1
        for _ in range(idle_runs):
            runs.append(one_run(example, "idle", trials[example], args.rounds, args.block_seconds))
        if example != "small-gain":  # its point is the quiet machine
            runs.append(one_run(example, "busy", trials[example], args.rounds, args.block_seconds))
        args.out.write_text(report(runs, args))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
