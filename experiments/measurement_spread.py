"""How much do repeated measurements of the same configuration differ, and what do they cost?

Measures three configurations of the digits example repeatedly with `run_trial` in one
process (default MeasurementSettings), interleaved (repeat 1 of each, then repeat 2, ...) so
that drift of the machine shows in every configuration alike. One unrecorded trial per
configuration first builds the variant and judges its accuracy, so the repeats measure the
measurement. Writes a markdown table naming the machine.

    .venv/bin/python experiments/measurement_spread.py [--repeats 10] [--threads default,1]
                                                       [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.core.artifacts import software_versions  # noqa: E402
from autotune.core.contract import (  # noqa: E402
    ConfigValue,
    DataRef,
    MeasurementSettings,
    ModelRef,
    TrialMetrics,
    TrialSpec,
    Workload,
)
from workers.building.runtimes import machine_profile  # noqa: E402
from workers.cache import WorkloadCache  # noqa: E402
from workers.runner import run_trial  # noqa: E402

BASE_CONFIGS: dict[str, dict[str, ConfigValue]] = {
    "torch_eager fp32, batch 1": {"runtime.engine": "torch_eager", "precision.mode": "fp32"},
    "onnxruntime fp32, batch 1": {"runtime.engine": "onnxruntime", "precision.mode": "fp32"},
    "onnxruntime int8_dynamic, batch 32": {
        "runtime.engine": "onnxruntime",
        "precision.mode": "int8_dynamic",
        "batch.size": 32,
    },
}


def configurations(threads: list[int | None]) -> dict[str, dict[str, ConfigValue]]:
    """The base configurations at each thread count (None: the default, all cores)."""
    chosen: dict[str, dict[str, ConfigValue]] = {}
    for count in threads:
        for name, config in BASE_CONFIGS.items():
            if count is None:
                chosen[name] = config
            else:
                chosen[f"{name}, {count} thread{'s' if count > 1 else ''}"] = {
                    **config,
                    "runtime.threads": count,
                }
    return chosen


TARGET_P50_SPREAD = 0.03
DEFAULT_OUT = REPO / "experiments" / "results" / "measurement-spread-cpu.md"


@dataclass
class Repeats:
    metrics: list[TrialMetrics] = field(default_factory=list)
    trial_seconds: list[float] = field(default_factory=list)
    first_trial_seconds: float = 0.0

    def values(self, name: str) -> list[float]:
        return [float(getattr(m, name)) for m in self.metrics]


def workload() -> Workload:
    return Workload(
        model=ModelRef(entry_point="experiments.digits.model:build_model"),
        data=DataRef(entry_point="experiments.digits.model:eval_data"),
        python_path=[str(REPO)],
    )


def trial(config: dict[str, ConfigValue], number: int) -> TrialSpec:
    return TrialSpec(
        study="measurement-spread",
        trial_number=number,
        workload=workload(),
        config=config,
        measurement=MeasurementSettings(),
    )


def run(configs: dict[str, dict[str, ConfigValue]], repeats: int) -> dict[str, Repeats]:
    store = WorkloadCache()
    results = {name: Repeats() for name in configs}
    number = 0
    for name, config in configs.items():
        first = run_trial(trial(config, number), store)
        number += 1
        if first.status != "ok":
            raise SystemExit(f"{name}: {first.status}: {first.reason}")
        results[name].first_trial_seconds = first.duration_s
    for repeat in range(repeats):
        for name, config in configs.items():
            result = run_trial(trial(config, number), store)
            number += 1
            if result.status != "ok" or result.metrics is None:
                raise SystemExit(f"{name}, repeat {repeat}: {result.status}: {result.reason}")
            results[name].metrics.append(result.metrics)
            results[name].trial_seconds.append(result.duration_s)
            print(
                f"{name:36s} repeat {repeat + 1:2d}: p50 {result.metrics.latency_p50_ms:.4f} ms, "
                f"p95 {result.metrics.latency_p95_ms:.4f} ms, {result.metrics.iterations} calls "
                f"({result.metrics.stopped_by}), {result.duration_s:.2f} s",
                flush=True,
            )
    return results


def spread(values: list[float]) -> tuple[float, float, float]:
    """(max - min) / median, the largest deviation from the median over the median, and the
    coefficient of variation (sample standard deviation over the mean)."""
    median = statistics.median(values)
    cv = statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0
    return (
        (max(values) - min(values)) / median,
        max(abs(v - median) for v in values) / median,
        cv,
    )


def machine() -> list[str]:
    import psutil

    cpu_model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = software_versions()
    return [
        f"- CPU: {cpu_model}, {len(os.sched_getaffinity(0))} cores available to the process "
        f"({psutil.cpu_count(logical=True)} logical, {psutil.cpu_count(logical=False)} "
        "physical as the OS sees them)",
        f"- memory: {psutil.virtual_memory().total / 2**30:.1f} GiB; OS: {platform.platform()}",
        "- software: " + ", ".join(f"{name} {version}" for name, version in versions.items()),
        f"- hardware fingerprint: `{machine_profile().fingerprint}`",
        f"- energy counter: {energy_counter()}",
    ]


def energy_counter() -> str:
    if Path("/sys/class/powercap").exists():
        return "/sys/class/powercap exists (see each trial's energy_source)"
    return "none (no /sys/class/powercap): energy figures are the CPU-time estimate"


def busy_neighbours() -> str:
    """Other processes' CPU use over one second, the busiest few."""
    import psutil

    me = os.getpid()
    processes = [p for p in psutil.process_iter(["name"]) if p.pid != me]
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.cpu_percent(None)
    time.sleep(1.0)
    usage = []
    for process in processes:
        try:
            usage.append((process.cpu_percent(None), process.info["name"]))
        except psutil.Error:
            continue
    usage.sort(reverse=True)
    busy = [f"{name} {percent:.0f}%" for percent, name in usage[:4] if percent >= 5]
    return ", ".join(busy) if busy else "none above 5% of a core"


def report(results: dict[str, Repeats], repeats: int, context: dict[str, str]) -> str:
    defaults = MeasurementSettings()
    lines = [
        "# Measurement spread on the CPU: the same configuration measured repeatedly",
        "",
        "Command: `.venv/bin/python experiments/measurement_spread.py "
        f"--repeats {repeats} --threads {context['threads']}` ({context['started']}, "
        f"{context['wall']} in all).",
        "",
        "Machine:",
        *machine(),
        f"- load average (1 min) before / after: {context['load_before']} / "
        f"{context['load_after']}; other processes' CPU before the run: "
        f"{context['neighbours_before']}; after: {context['neighbours_after']}",
        "",
        f"Settings: default MeasurementSettings (warm-up {defaults.warmup_iters} calls, at "
        f"least {defaults.min_iters} calls and {defaults.min_seconds} s, then until the "
        f"median's 95% interval is within ±{defaults.settle_tolerance:.0%}, at most "
        f"{defaults.max_iters} calls or {defaults.max_seconds} s), default threads "
        f"({len(os.sched_getaffinity(0))}) unless a thread count is named. {repeats} repeats "
        "per configuration in one process, "
        "interleaved; one earlier trial per configuration (building the variant, judging "
        "accuracy) is not counted.",
        "",
        "Spread across repeats: range = (max − min) / median; max dev = largest |x − median| / "
        "median; cv = sample standard deviation / mean. Latencies are per call (one batch).",
        "",
        "| configuration | p50 median (ms) | p50 range | p50 max dev | p50 cv "
        "| p95 median (ms) | p95 range | p95 cv | within-run cv (median) "
        "| calls per trial (median) | stopped by |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for name, data in results.items():
        p50, p95 = data.values("latency_p50_ms"), data.values("latency_p95_ms")
        p50_range, p50_dev, p50_cv = spread(p50)
        p95_range, _, p95_cv = spread(p95)
        stops = Counter(m.stopped_by for m in data.metrics)
        lines.append(
            f"| {name} | {statistics.median(p50):.4f} | {p50_range:.1%} | {p50_dev:.1%} "
            f"| {p50_cv:.1%} | {statistics.median(p95):.4f} | {p95_range:.1%} | {p95_cv:.1%} "
            f"| {statistics.median(data.values('latency_cv')):.2f} "
            f"| {statistics.median(data.values('iterations')):.0f} "
            f"| {', '.join(f'{reason} {count}' for reason, count in stops.most_common())} |"
        )
        verdicts.append((name, p50_dev, p50_range))
    lines += [
        "",
        "Cost of a measurement (per trial, medians over the repeats):",
        "",
        "| configuration | run_trial wall (s) | timed loop (s) | first trial (s, builds and "
        "judges the variant) | p95 95% interval width / p95 (median) | energy per sample "
        "(J, estimate, median; range) |",
        "|---|---|---|---|---|---|",
    ]
    for name, data in results.items():
        widths = [
            (m.latency_p95_ci_high_ms - m.latency_p95_ci_low_ms) / m.latency_p95_ms
            for m in data.metrics
            if m.latency_p95_ci_high_ms is not None and m.latency_p95_ci_low_ms is not None
        ]
        energy = data.values("energy_per_sample_j")
        sources = {m.energy_source for m in data.metrics}
        lines.append(
            f"| {name} | {statistics.median(data.trial_seconds):.2f} "
            f"| {statistics.median(data.values('measure_seconds')):.2f} "
            f"| {data.first_trial_seconds:.2f} "
            f"| {statistics.median(widths):.1%} "
            f"| {statistics.median(energy):.2e} ({'/'.join(sorted(sources))}); "
            f"{spread(energy)[0]:.0%} |"
        )
    names = list(results)
    lines += [
        "",
        "Every repeat, in the order run (p50 / p95 ms, calls, stop reason):",
        "",
        "| repeat | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for index in range(repeats):
        cells = []
        for name in names:
            m = results[name].metrics[index]
            cells.append(
                f"{m.latency_p50_ms:.4f} / {m.latency_p95_ms:.4f}, {m.iterations}, {m.stopped_by}"
            )
        lines.append(f"| {index + 1} | " + " | ".join(cells) + " |")
    capped_early = [
        name
        for name, data in results.items()
        if any(
            m.stopped_by == "max_iters" and m.measure_seconds < defaults.min_seconds
            for m in data.metrics
        )
    ]
    if capped_early:
        lines += [
            "",
            f"Note: for {', '.join(capped_early)} the max_iters cap ({defaults.max_iters} calls) "
            f"ended timing before min_seconds ({defaults.min_seconds} s) was reached, so the "
            "settle condition was never checked (caps win over minimums).",
        ]
    met = [name for name, dev, _ in verdicts if dev <= TARGET_P50_SPREAD]
    missed = [f"{name} (max dev {dev:.1%})" for name, dev, _ in verdicts if dev > TARGET_P50_SPREAD]
    lines += [
        "",
        f"Target: every repeat's p50 within {TARGET_P50_SPREAD:.0%} of the median p50 "
        "(max dev ≤ 3%) on an idle machine.",
        f"- met by: {', '.join(met) if met else 'none'}",
        f"- missed by: {', '.join(missed) if missed else 'none'}",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--threads",
        default="default,1",
        help="comma-separated runtime.threads values to measure each configuration at "
        "('default': all cores; default: 'default,1')",
    )
    args = parser.parse_args()
    threads = [None if t == "default" else int(t) for t in args.threads.split(",")]
    if args.repeats < 2:
        parser.error("--repeats must be at least 2")
    context = {
        "threads": args.threads,
        "started": time.strftime("%Y-%m-%d %H:%M %Z"),
        "load_before": f"{os.getloadavg()[0]:.2f}",
        "neighbours_before": busy_neighbours(),
    }
    began = time.perf_counter()
    results = run(configurations(threads), args.repeats)
    context["wall"] = f"{time.perf_counter() - began:.0f} s"
    context["load_after"] = f"{os.getloadavg()[0]:.2f}"
    context["neighbours_after"] = busy_neighbours()
    text = report(results, args.repeats, context)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print()
    print(text)


if __name__ == "__main__":
    main()
