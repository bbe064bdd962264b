"""The GPU paths on a real GPU, in one command: `make gpu-check` (results in GPU_CHECK_OUT).

On a machine with CUDA, in about 8 minutes:
1. the `gpu`-marked tests;
2. each GPU path of the data plane once, on the digits CNN and on a MiniLM-sized BERT encoder
   built from a config (random weights, nothing downloaded): fp32/bf16/fp16/fp8, 2:4
   semi-structured sparsity, torch.compile modes, CUDA graphs, SDPA backends, ONNX Runtime's
   CUDA and TensorRT providers, and the largest batch of the space;
3. a short study of each model on the GPU (in-process executor, SQLite, no MLflow);
4. NVML's energy counter (the meter trials use) against NVML's power draw sampled every
   10 ms and integrated over the same window, per sample of a real workload;
5. the p50 spread of one configuration measured 10 times;
then writes `gpu-check.md` (the machine, the versions, every figure) and `gpu-check.json`.

Without a CUDA device it is a dry run: it imports what it would run, checks every
configuration of step 2 against the capabilities of a saved H200 profile, collects the gpu
tests, runs step 3's study on the CPU, says so and exits 0.

The data plane and this script need torch, numpy, onnx, onnxruntime, pydantic and, for the
studies, optuna; neither Ray nor MLflow.

    python experiments/gpu_check.py [--out DIR] [--dry-run] [--budget-s 450]

Only the report (`gpu-check.md`, `gpu-check.json`) and the gpu tests' log go to `--out`;
models and studies are made in a temporary folder that is removed afterwards.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiments import measurement_spread  # noqa: E402

H200_PROFILE = REPO / "search_spaces" / "profiles" / "h200x8.json"
SPREAD_TARGET = 0.01
FAST_MEASUREMENT = {"warmup_iters": 5, "min_iters": 30, "min_seconds": 0.2, "max_seconds": 1.0}
FAST_VALIDATION = {"rounds": 6, "round_seconds": 0.1}
SEQUENCE_LENGTH = 128
Config = dict[str, Any]

CUDA = {"runtime.engine": "torch_eager", "runtime.device": "cuda"}
COMPILED = {"runtime.engine": "torch_compile", "runtime.device": "cuda"}
ORT = {"runtime.engine": "onnxruntime"}

# Each GPU path once: (what it checks, configuration). Batch sizes stay in the spaces' values.
DIGITS_PATHS: list[tuple[str, Config]] = [
    ("fp32, batch 1", {**CUDA, "precision.mode": "fp32", "batch.size": 1}),
    ("fp16, batch 256", {**CUDA, "precision.mode": "fp16", "batch.size": 256}),
    ("bf16, batch 256", {**CUDA, "precision.mode": "bf16", "batch.size": 256}),
    ("fp8, batch 256", {**CUDA, "precision.mode": "fp8", "batch.size": 256}),
    (
        "int8_static on ONNX Runtime CUDA",
        {**ORT, "runtime.provider": "cuda", "batch.size": 64, "precision.mode": "int8_static"},
    ),
    ("cuDNN autotuning, batch 64", {**CUDA, "cuda.cudnn_benchmark": True, "batch.size": 64}),
    ("CUDA graphs, batch 1", {**CUDA, "cuda.graphs": True, "batch.size": 1}),
    (
        "2:4 sparsity, fp16",
        {**CUDA, "prune.method": "semi_structured_2_4", "precision.mode": "fp16", "batch.size": 64},
    ),
    (
        "structured pruning 0.3",
        {**CUDA, "prune.method": "structured", "prune.ratio": 0.3, "batch.size": 64},
    ),
    ("torch.compile default", {**COMPILED, "runtime.compile_mode": "default", "batch.size": 64}),
    (
        "torch.compile reduce-overhead",
        {**COMPILED, "runtime.compile_mode": "reduce-overhead", "batch.size": 64},
    ),
    ("ONNX Runtime CUDA provider", {**ORT, "runtime.provider": "cuda", "batch.size": 64}),
    ("ONNX Runtime TensorRT provider", {**ORT, "runtime.provider": "tensorrt", "batch.size": 64}),
    ("largest batch, bf16", {**CUDA, "precision.mode": "bf16", "batch.size": 1024}),
    (  # last: its kernel autotuning takes longest
        "torch.compile max-autotune",
        {**COMPILED, "runtime.compile_mode": "max-autotune", "batch.size": 64},
    ),
]
ENCODER_PATHS: list[tuple[str, Config]] = [
    ("fp32, batch 1", {**CUDA, "precision.mode": "fp32", "batch.size": 1}),
    ("bf16, batch 32", {**CUDA, "precision.mode": "bf16", "batch.size": 32}),
    ("fp16, batch 32", {**CUDA, "precision.mode": "fp16", "batch.size": 32}),
    ("fp8, batch 32", {**CUDA, "precision.mode": "fp8", "batch.size": 32}),
    *[
        (
            f"SDPA {backend}, bf16, batch 32",
            {**CUDA, "precision.mode": "bf16", "attention.sdpa_backend": backend, "batch.size": 32},
        )
        for backend in ("math", "flash", "efficient", "cudnn")
    ],
    (
        "2:4 sparsity, bf16",
        {**CUDA, "prune.method": "semi_structured_2_4", "precision.mode": "bf16", "batch.size": 32},
    ),
    (
        "CUDA graphs, bf16, batch 8",
        {**CUDA, "cuda.graphs": True, "precision.mode": "bf16", "batch.size": 8},
    ),
    (
        "torch.compile default, bf16",
        {**COMPILED, "runtime.compile_mode": "default", "precision.mode": "bf16", "batch.size": 32},
    ),
    (
        "torch.compile reduce-overhead, bf16",
        {
            **COMPILED,
            "runtime.compile_mode": "reduce-overhead",
            "precision.mode": "bf16",
            "batch.size": 32,
        },
    ),
    ("ONNX Runtime CUDA provider", {**ORT, "runtime.provider": "cuda", "batch.size": 32}),
    ("largest batch, bf16", {**CUDA, "precision.mode": "bf16", "batch.size": 256}),
]
NOT_ON_ONE_GPU = [
    ("tensor- and data-parallel sharding", "needs two or more GPUs; tested with fakes"),
]


@dataclass
class Row:
    section: str
    name: str
    outcome: str  # ok | failed | unsupported | not run | a trial status
    detail: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class Check:
    out: Path  # what comes back: the report, its JSON, the tests' log
    work: Path  # models, studies and their stores
    dry_run: bool
    budget_s: float
    rows: list[Row] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        figures = ", ".join(f"{k} {_short(v)}" for k, v in row.figures.items())
        print(
            f"[{row.section}] {row.name}: {row.outcome} {row.detail} {figures}".rstrip(), flush=True
        )

    @contextmanager
    def timed(self, section: str, name: str) -> Iterator[Row]:
        """A row whose outcome is 'failed' with the error where the block raises."""
        row = Row(section, name, "ok")
        start = time.monotonic()
        try:
            yield row
        except Exception as error:  # one path failing is a finding, not the end of the check
            row.outcome, row.detail = "failed", f"{type(error).__name__}: {error}"[:300]
        row.seconds = round(time.monotonic() - start, 2)
        self.add(row)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


# The environment ------------------------------------------------------------------------


def describe_machine() -> dict[str, Any]:
    import importlib.metadata as metadata

    import torch

    packages = {}
    for name in (
        "torch",
        "numpy",
        "onnx",
        "onnxruntime",
        "onnxruntime-gpu",
        "pydantic",
        "optuna",
        "transformers",
        "nvidia-ml-py",
        "torchao",
        "tensorrt",
    ):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    machine: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_cores": os.cpu_count(),
        "packages": packages,
        "cuda": torch.version.cuda,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        machine["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        machine["compute_capability"] = f"{props.major}.{props.minor}"
        machine["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        machine["driver"] = _driver_version()
    try:
        import onnxruntime

        machine["onnxruntime_providers"] = onnxruntime.get_available_providers()
    except ImportError:
        machine["onnxruntime_providers"] = []
    return machine


def _driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return str(pynvml.nvmlSystemGetDriverVersion())
        finally:
            pynvml.nvmlShutdown()
    except Exception as error:
        return f"unknown ({type(error).__name__})"


# 1. The gpu-marked tests ------------------------------------------------------------------


def gpu_tests(check: Check) -> None:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/component/workers",
        "tests/system/workers",
    ]
    if check.dry_run:
        command.append("--collect-only")
    with check.timed("tests", "pytest -m gpu tests/*/workers") as row:
        done = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=max(check.left_s() * 0.3, 60)
        )
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        row.detail = lines[-1] if lines else done.stderr.strip()[-300:]
        (check.out / "gpu-tests.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            row.outcome = "failed"


# 2. Each GPU path once -------------------------------------------------------------------


def encoder_workload(work: Path) -> Any:
    """A MiniLM-sized BERT encoder (6 layers, hidden 384, 12 heads) with random weights,
    judged by the fidelity of its embeddings on generated sentences."""
    import random

    from autotune.core.contract import DataRef, MetricRef, ModelRef, Workload
    from tests.hf_models import WORDS, bert_directory

    directory = work / "encoder"
    if not (directory / "config.json").exists():
        bert_directory(
            directory, hidden=384, layers=6, heads=12, intermediate=1536, max_length=SEQUENCE_LENGTH
        )
    pick = random.Random(0)
    lines = [" ".join(pick.choices(WORDS, k=pick.randint(8, 60))) for _ in range(256)]
    text = work / "sentences.txt"
    text.write_text("\n".join(lines) + "\n")
    return Workload(
        model=ModelRef(hf=str(directory), task="feature-extraction"),
        data=DataRef(text=str(text), sequence_length=SEQUENCE_LENGTH),
        metric=MetricRef(kind="fidelity"),
    )


def paths(check: Check, model: str, workload: Any, configs: list[tuple[str, Config]]) -> None:
    """Each configuration as a trial (`workers.run_trial`), or, in a dry run, checked against
    a saved H200 profile's capabilities as the space would check it."""
    if check.dry_run:
        return _paths_against_profile(check, model, workload, configs)
    from autotune.core.contract import MeasurementSettings, TrialSpec
    from workers import run_trial
    from workers.cache import WorkloadCache

    store = WorkloadCache()
    measurement = MeasurementSettings(**FAST_MEASUREMENT)
    for number, (name, config) in enumerate(configs):
        if check.left_s() < 60:
            check.add(Row(f"paths: {model}", name, "not run", "the check's time budget ran out"))
            continue
        with check.timed(f"paths: {model}", name) as row:
            spec = TrialSpec(
                study=f"gpu-check-{model}",
                trial_number=number,
                workload=workload,
                config=config,
                measurement=measurement,
                timeout_s=120,
            )
            result = run_trial(spec, store)
            row.outcome = result.status
            row.detail = result.reason or ""
            if result.metrics is not None:
                metrics = result.metrics
                row.figures = {
                    "accuracy": round(metrics.accuracy, 4),
                    "p50 ms": round(metrics.latency_p50_ms, 4),
                    "samples/s": round(metrics.throughput_per_s, 1),
                    "J/sample": metrics.energy_per_sample_j,
                    "energy": metrics.energy_source,
                    "peak MB": round(metrics.peak_memory_mb, 1),
                }


def _paths_against_profile(
    check: Check, model: str, workload: Any, configs: list[tuple[str, Config]]
) -> None:
    from autotune.core.knobs import Target, supports
    from autotune.core.knobs.config import parse_config
    from autotune.space.hardware import load_profile
    from workers.cache import WorkloadCache

    kind = WorkloadCache().get(workload).model.kind
    target = Target(frozenset(load_profile(H200_PROFILE).capabilities()), kind)
    for name, config in configs:
        with check.timed(f"paths: {model}", name) as row:
            reason = supports(parse_config(config, kind), target)
            row.outcome = "builds on an H200" if reason is None else "refused on an H200"
            row.detail = reason or ""


# 3. A short study on the GPU -------------------------------------------------------------


def study(
    check: Check, model: str, workload: Any, space: str, trials: int, share: float = 1.0
) -> None:
    """A short study, given `share` of the time left (less a minute for the report)."""
    from autotune.requests.request import TuningRequest
    from autotune.results import opened_store
    from autotune.tuning import TuneOptions, tune_request

    if check.left_s() < 90:
        check.add(Row("studies", model, "not run", "the check's time budget ran out"))
        return
    work = check.work / "studies"
    storage = f"sqlite:///{work / 'studies.db'}"
    name = f"gpu-check-{model}"
    with check.timed("studies", f"{model}, {trials} trials, {space}") as row:
        request = TuningRequest.model_validate(
            {
                "name": name,
                "model": workload.model.model_dump(exclude_none=True),
                "data": workload.data.model_dump(exclude_none=True),
                "metric": workload.metric.model_dump(exclude_none=True),
                "constraints": {"max_accuracy_drop": 0.01},
                "search_space": space,
                # an in-process trial cannot be stopped: the study stops asking in time instead
                "budget": {"trials": trials, "timeout_s": max((check.left_s() - 60) * share, 60)},
                "measurement": FAST_MEASUREMENT,
                "validation": FAST_VALIDATION,
                "storage": storage,
            }
        )
        options = TuneOptions(executor="inprocess", track=False, out_dir=work / model, seed=0)
        work.mkdir(parents=True, exist_ok=True)
        outcome, _ = tune_request(request, REPO, options)
        with opened_store(name, storage, "storage") as store:
            statuses = Counter(r.status for r in store.records() if r.status is not None)
        tuned = outcome.tuned
        assert tuned is not None
        row.detail = "chosen: " + ", ".join(f"{k}={v}" for k, v in sorted(tuned.config.items()))
        row.figures = {
            "trials": dict(statuses),
            "p95 ms": round(float(tuned.metrics["latency_p95_ms"]), 4),
            "baseline p95 ms": round(float(tuned.baseline["latency_p95_ms"]), 4),
            "headline": tuned.headline.text if tuned.headline is not None else "",
        }


# 4. NVML energy against NVML power integrated --------------------------------------------


def energy(check: Check, workload: Any, windows: int = 3, seconds: float = 4.0) -> None:
    """The trials' meter (`NvmlEnergyMeter`) over a window of the encoder at bf16, batch 32,
    beside NVML's power draw sampled every 10 ms and integrated over the same window."""
    if check.dry_run:
        from workers.measuring.nvml import NvmlEnergyMeter  # noqa: F401  (imports; no device to read)

        check.add(Row("energy", "NVML counter vs integrated power", "not run", "no CUDA device"))
        return
    import pynvml
    import torch

    from workers.cache import WorkloadCache
    from workers.measuring.nvml import NvmlEnergyMeter, nvml_index_of_cuda_device

    with check.timed("energy", "load the encoder") as row:
        loaded = WorkloadCache().get(workload)  # its own: the module moves to the GPU in place
        module = loaded.model.module.to("cuda", torch.bfloat16).eval()
        batch = torch.as_tensor(loaded.data.inputs[:32]).to("cuda")
        row.detail = f"batch {tuple(batch.shape)}"
    if row.outcome != "ok":
        return
    index = nvml_index_of_cuda_device(0)
    meter = NvmlEnergyMeter(index, window_s=1.0)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    try:
        for window in range(windows):
            with check.timed("energy", f"window {window + 1} of {windows}") as row:
                row.figures = _energy_window(meter, handle, pynvml, module, batch, seconds)
    finally:
        meter.close()
        pynvml.nvmlShutdown()


def _energy_window(
    meter: Any, handle: Any, pynvml: Any, module: Callable[..., Any], batch: Any, seconds: float
) -> dict[str, Any]:
    import torch

    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.perf_counter(), pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    calls = 0
    with torch.inference_mode():
        meter.start()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            module(batch)
            calls += 1
        torch.cuda.synchronize()
        window_end = time.perf_counter()
        reading = meter.stop()
    stop.set()
    sampler.join()
    integrated = integrate(samples, window_end - reading.seconds, window_end)
    per_sample = batch.shape[0] * calls
    return {
        "seconds": round(reading.seconds, 3),
        "samples": per_sample,
        "counter J/sample": reading.joules / per_sample,
        "integrated J/sample": integrated / per_sample,
        "difference %": round(100 * (reading.joules - integrated) / integrated, 2),
        "idle W": round(reading.idle_power_w, 1),
    }


def integrate(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """Joules from (time, watts) samples over [start, end], trapezoids, each edge
    interpolated."""
    inside = [(t, w) for t, w in samples if start < t < end]
    edges = [(start, _power_at(samples, start)), *inside, (end, _power_at(samples, end))]
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in itertools.pairwise(edges))


def _power_at(samples: list[tuple[float, float]], at: float) -> float:
    before = [s for s in samples if s[0] <= at]
    after = [s for s in samples if s[0] >= at]
    if not before or not after:
        return (before or after)[-1 if before else 0][1]
    (t0, w0), (t1, w1) = before[-1], after[0]
    return w0 if t1 == t0 else w0 + (w1 - w0) * (at - t0) / (t1 - t0)


# 5. The p50 spread of one configuration ---------------------------------------------------


def spread(check: Check, repeats: int = 10) -> None:
    config = {**CUDA, "precision.mode": "fp16", "batch.size": 64}
    name = f"digits, torch_eager cuda fp16, batch 64, {repeats} repeats"
    if check.dry_run:
        check.add(Row("spread", name, "not run", "no CUDA device"))
        return
    with check.timed("spread", name) as row:
        results = measurement_spread.run({name: config}, repeats)[name]
        p50 = results.values("latency_p50_ms")
        _, deviation, cv = measurement_spread.spread(p50)
        row.outcome = "ok" if deviation <= SPREAD_TARGET else "above target"
        row.figures = {
            "p50 ms (median)": round(statistics.median(p50), 4),
            "max deviation from median %": round(100 * deviation, 2),
            "cv %": round(100 * cv, 2),
            "target %": 100 * SPREAD_TARGET,
        }


# The report ------------------------------------------------------------------------------


def report(check: Check) -> str:
    machine = check.machine
    title = "GPU check" if not check.dry_run else "GPU check: dry run (no CUDA device)"
    lines = [
        f"# {title}",
        "",
        f"Command: `make gpu-check` (`python experiments/gpu_check.py`), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{time.monotonic() - check.started:.0f} s in all.",
        "",
        "Machine:",
        f"- GPU: {', '.join(machine.get('gpus', [])) or 'none'}"
        + (
            f" (compute capability {machine['compute_capability']}, "
            f"{machine['gpu_memory_gib']} GiB, driver {machine['driver']})"
            if "gpus" in machine
            else ""
        ),
        f"- CUDA (torch): {machine.get('cuda')}; {machine['cpu_cores']} CPU cores; "
        f"Python {machine['python']}; {machine['platform']}",
        "- packages: " + ", ".join(f"{k} {v}" for k, v in machine["packages"].items()),
        "- ONNX Runtime providers: " + ", ".join(machine["onnxruntime_providers"]),
        "",
    ]
    sections: dict[str, list[Row]] = {}
    for row in check.rows:
        sections.setdefault(row.section, []).append(row)
    for section, rows in sections.items():
        lines += [
            f"## {section}",
            "",
            "| what | outcome | figures | detail | s |",
            "|---|---|---|---|---|",
        ]
        for row in rows:
            figures = "; ".join(f"{k} {_short(v)}" for k, v in row.figures.items())
            detail = row.detail.replace("|", "/").replace("\n", " ")
            lines.append(f"| {row.name} | {row.outcome} | {figures} | {detail} | {row.seconds} |")
        lines.append("")
    lines += ["## Not run on hardware", ""]
    lines += [f"- {name}: {why}" for name, why in not_run_on_hardware(machine)]
    return "\n".join(lines) + "\n"


def not_run_on_hardware(machine: dict[str, Any]) -> list[tuple[str, str]]:
    providers = machine.get("onnxruntime_providers", [])
    missing = list(NOT_ON_ONE_GPU) if len(machine.get("gpus", [])) < 2 else []
    if "CUDAExecutionProvider" not in providers:
        missing.append(("ONNX Runtime's CUDA provider", "onnxruntime-gpu is not installed"))
    if "TensorrtExecutionProvider" not in providers:
        missing.append(("ONNX Runtime's TensorRT provider", "TensorRT is not installed"))
    if "torchao" not in machine.get("packages", {}):
        missing.append(("fp8", "torchao is not installed"))
    return missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--dry-run", action="store_true", help="as without a CUDA device")
    parser.add_argument("--budget-s", type=float, default=450.0)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-work-"))
    dry_run = args.dry_run or not cuda_available()
    try:
        return run_checks(Check(out, work, dry_run, args.budget_s, machine=describe_machine()))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_checks(check: Check) -> int:
    out, work, dry_run = check.out, check.work, check.dry_run
    if dry_run:
        print("no CUDA device: dry run (imports, configurations, test collection, a CPU study)")
    # The short, fixed-cost checks first: the paths and studies stop at the time budget.
    gpu_tests(check)
    digits = measurement_spread.workload()
    encoder = encoder_workload(work)
    energy(check, encoder)
    spread(check)
    paths(check, "digits", digits, DIGITS_PATHS)
    paths(check, "encoder", encoder, ENCODER_PATHS)
    if dry_run:
        study(check, "digits", digits, "quick-cpu.yaml", trials=3)
    else:
        study(check, "digits", digits, "nvidia-gpu.yaml", trials=16, share=0.5)
        study(check, "encoder", encoder, "transformer.yaml", trials=10)
    text = report(check)
    (out / "gpu-check.md").write_text(text)
    rows = [asdict(r) for r in check.rows]
    (out / "gpu-check.json").write_text(
        json.dumps(
            {"machine": check.machine, "dry_run": dry_run, "rows": rows}, indent=1, default=str
        )
    )
    print(f"\nwritten: {out / 'gpu-check.md'}")
    failed = [r for r in check.rows if r.outcome == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
