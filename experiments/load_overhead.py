"""What does `autotune.load(...).predict` cost over calling its engine directly?

For each engine the digits example can be tuned to on this machine (fp32), the configuration
is exported as `autotune tune` exports a choice (`export_artifact`) and loaded as
`autotune.load` loads it (`load_predictor`). Each round then times, in alternating order, a
block of `predict(batch)` calls and a block of calls of the very engine object the predictor
holds (ONNX Runtime's `InferenceSession.run`, OpenVINO's compiled model's infer request, the
torch module under `torch.inference_mode()`), the same batch, its outputs as numpy arrays. A
block's figure is its median time per call; each round gives predict ÷ direct. Reports the
medians over the rounds, the median ratio and the added time, with the machine's name and load
average. Target: at most 2% or 10 µs added per call, whichever is larger.

    .venv/bin/python experiments/load_overhead.py [--rounds 15] [--calls 300] [--batches 1,16]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.core.artifacts import software_versions  # noqa: E402
from autotune.core.contract import DataRef, ModelRef, TrialSpec, Workload  # noqa: E402
from autotune.core.knobs import supports  # noqa: E402
from autotune.core.knobs.base import ConfigValue  # noqa: E402
from autotune.core.knobs.config import parse_config  # noqa: E402
from workers.artifacts import export_artifact  # noqa: E402
from workers.building.runtimes import machine_target  # noqa: E402
from workers.cache import WorkloadCache  # noqa: E402
from workers.predictor import Predictor, load_predictor  # noqa: E402

ENGINES = ("onnxruntime", "openvino", "torch_eager")
ALLOWED_SHARE = 0.02
ALLOWED_US = 10.0


def digits_workload() -> Workload:
    return Workload(
        model=ModelRef(entry_point="experiments.digits.model:build_model"),
        data=DataRef(entry_point="experiments.digits.model:eval_data"),
        python_path=[str(REPO)],
    )


def exported(
    engine: str, batch: int, directory: Path, store: WorkloadCache
) -> tuple[dict[str, ConfigValue], Path] | None:
    """The engine's fp32 configuration at `batch` and its exported artifact, or None where this
    machine does not run it."""
    config: dict[str, ConfigValue] = {
        "runtime.engine": engine,
        "precision.mode": "fp32",
        "batch.size": batch,
        "runtime.threads": 1,
    }
    if supports(parse_config(config, "torch"), machine_target("torch")) is not None:
        return None
    spec = TrialSpec(
        study="load-overhead",
        trial_number=0,
        purpose="export",
        workload=digits_workload(),
        config=config,
    )
    out = directory / f"{engine}-{batch}"
    export_artifact(spec, str(out), store)
    return config, out


def direct_call(predictor: Predictor, batch: np.ndarray) -> Callable[[], object]:
    """A call of the engine object the predictor holds, fed and read as its own API takes."""
    session: Any = predictor.session
    if hasattr(session, "_session"):  # ONNX Runtime
        ort, name = session._session, session.inputs[0].name
        return lambda: ort.run(None, {name: batch})[0]
    if hasattr(session, "_compiled"):  # OpenVINO
        request = session._compiled.create_infer_request()
        port = session._compiled.outputs[0]
        return lambda: request.infer({session.inputs[0].name: batch})[port]
    import torch

    module = session._module
    torch.set_num_threads(predictor.config.threads)

    def call() -> object:
        with torch.inference_mode():
            return module(torch.from_numpy(batch)).numpy()

    return call


def block_median_us(call: Callable[[], object], calls: int) -> float:
    for _ in range(5):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def interleaved(
    predict: Callable[[], object], direct: Callable[[], object], rounds: int, calls: int
) -> dict[str, float]:
    """Medians over the rounds of each side's per-call median, and of predict ÷ direct."""
    mine, theirs, ratios = [], [], []
    for index in range(rounds):
        pair = (predict, direct) if index % 2 == 0 else (direct, predict)
        first, second = (block_median_us(call, calls) for call in pair)
        ours, plain = (first, second) if index % 2 == 0 else (second, first)
        mine.append(ours)
        theirs.append(plain)
        ratios.append(ours / plain)
    predict_us, direct_us = statistics.median(mine), statistics.median(theirs)
    return {
        "predict_us": predict_us,
        "direct_us": direct_us,
        "ratio": statistics.median(ratios),
        "added_us": statistics.median(a - b for a, b in zip(mine, theirs, strict=True)),
    }


def measure(rounds: int, calls: int, batches: list[int]) -> list[tuple[str, int, dict[str, float]]]:
    store = WorkloadCache()
    inputs = store.get(digits_workload()).data.inputs
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for engine in ENGINES:
            for batch in batches:
                made = exported(engine, batch, Path(directory), store)
                if made is None:
                    continue
                predictor = load_predictor(str(made[1]))
                samples = np.ascontiguousarray(inputs[:batch], dtype=np.float32)
                figures = interleaved(
                    lambda p=predictor, s=samples: p.predict(s),
                    direct_call(predictor, samples),
                    rounds,
                    calls,
                )
                predictor.close()
                rows.append((engine, batch, figures))
                print(engine, batch, {k: round(v, 3) for k, v in figures.items()}, flush=True)
    return rows


def within_target(figures: dict[str, float]) -> bool:
    allowed = max(ALLOWED_SHARE * figures["direct_us"], ALLOWED_US)
    return figures["added_us"] <= allowed


def machine() -> str:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    names = [line.split(":", 1)[1].strip() for line in lscpu.splitlines() if "Model name" in line]
    return f"{names[0] if names else 'unknown CPU'}, {os.cpu_count()} cores"


def report(rows: list[tuple[str, int, dict[str, float]]], args: argparse.Namespace) -> str:
    versions = software_versions()
    lines = [
        f"Machine: {machine()}; load average (1 min) {args.load_before[0]:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        f"Command: `.venv/bin/python experiments/load_overhead.py --rounds {args.rounds} "
        f"--calls {args.calls} --batches {','.join(map(str, args.batches))}`",
        "",
        "| engine | batch | predict() µs | direct µs | predict ÷ direct | added µs | within "
        f"{ALLOWED_SHARE:.0%} or {ALLOWED_US:g} µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for engine, batch, f in rows:
        lines.append(
            f"| {engine} | {batch} | {f['predict_us']:.1f} | {f['direct_us']:.1f} | "
            f"{f['ratio']:.3f} | {f['added_us']:.1f} | {'yes' if within_target(f) else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--batches", type=lambda s: [int(b) for b in s.split(",")], default=[1, 16])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.load_before = os.getloadavg()
    text = report(measure(args.rounds, args.calls, args.batches), args)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
