"""int8 as a study searches it: the steps autotune's strategy took, and what the study said.

    .venv/bin/python experiments/int8_study.py [--models digits minilm ppocr-cls ...]
        [--trials 16] [--bound 0.01] [--out experiments/results/int8-study-cpu.md]

For each model, one real study (`run_tune`, in-process executor, seed 0) of `--trials`
trials over an int8 space: ONNX Runtime and OpenVINO (and torch eager for a torch model),
fp32, int8_dynamic and int8_static, `precision.fallback` 0-8, and static int8's calibration
(minmax, percentile, entropy) and op types (all, MatMul only), at one batch size and every
core, within an accuracy drop of `--bound`. The report gives, per model: each int8 trial in
order with why the strategy proposed it (designed set, "calibration", "op_types",
"fallback", neighbour, sampler), its accuracy drop and throughput against ONNX Runtime fp32
in the same study; the sensitivity ranking's share of the study's wall time; what the study
said of the int8 modes none of whose variants met the bound; and the configuration chosen.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.core.knobs.config import default_threads  # noqa: E402
from autotune.requests.request import load_request  # noqa: E402
from autotune.results.optuna_store import opened_store  # noqa: E402
from autotune.results.records import TrialRecord  # noqa: E402
from autotune.tuning import TuneOptions, run_tune  # noqa: E402
from experiments.engine_comparison import machine  # noqa: E402
from experiments.int8_fallback import EXAMPLES  # noqa: E402
from experiments.user_models import MEASUREMENT  # noqa: E402
from experiments.user_models import MODELS as USER_MODELS  # noqa: E402

DEFAULT_MODELS = ["digits", "minilm", "ppocr-cls", "speaker-lstm", "magika"]
BATCH = 16
STATIC = {"precision.mode": ["int8_static"], "runtime.engine": ["onnxruntime", "openvino"]}
INT8 = ["int8_dynamic", "int8_static"]
SENSITIVITY_NOTE = re.compile(r"int8 sensitivity measured in ([\d.]+) s")


def model_parts(name: str, work: Path) -> tuple[dict[str, Any], dict[str, Any], str, list[str]]:
    """The model, data and metric of a bundled example's request or a user model, and the
    directories its entry points are imported from."""
    if name in EXAMPLES:
        request = load_request(REPO / EXAMPLES[name])
        model = request.model.model_dump(exclude_none=True)
        data = request.data.model_dump(exclude_none=True)
        return model, data, request.metric.kind, [str(REPO)]
    user = next(m for m in USER_MODELS if m.name == name)
    model, data, metric = user.prepare(work)
    return model, data, metric, [str(work / name)]


def space(torch_model: bool, batch: int) -> dict[str, Any]:
    engines = ["onnxruntime", "openvino", *(["torch_eager"] if torch_model else [])]
    return {
        "name": "int8-study",
        "dimensions": [
            {"name": "runtime.engine", "values": engines, "baseline": "onnxruntime"},
            {"name": "runtime.threads", "values": [default_threads()]},
            {"name": "batch.size", "values": [batch], "baseline": batch},
            {"name": "precision.mode", "values": ["fp32", *INT8], "baseline": "fp32"},
            {
                "name": "precision.fallback",
                "values": [0, 1, 2, 4, 8],
                "baseline": 0,
                "when": {"precision.mode": INT8},
            },
            {
                "name": "precision.calibration",
                "values": ["minmax", "percentile", "entropy"],
                "baseline": "minmax",
                "when": STATIC,
            },
            {
                "name": "precision.op_types",
                "values": ["all", "matmul_only"],
                "baseline": "all",
                "when": STATIC,
            },
        ],
    }


def study(name: str, work: Path, args: Any) -> dict[str, Any]:
    folder = work / f"study-{name}"
    folder.mkdir(parents=True)
    model, data, metric, paths = model_parts(name, work)
    batch = int(model.get("fixed_batch") or BATCH)
    (folder / "space.yaml").write_text(yaml.safe_dump(space("entry_point" in model, batch)))
    request = {
        "name": name,
        "model": model,
        "data": data,
        "metric": {"kind": metric},
        "objectives": ["accuracy", "latency", "throughput"],
        "constraints": {"max_accuracy_drop": args.bound},
        "search_space": str(folder / "space.yaml"),
        "budget": {"trials": args.trials},
        "selection": {"strategy": "highest_throughput"},
        "measurement": MEASUREMENT,
        "tracking": {"uri": f"sqlite:///{folder / 'mlflow.db'}", "experiment": name},
        "storage": f"sqlite:///{folder / 'study.db'}",
    }
    (folder / "request.yaml").write_text(yaml.safe_dump(request, sort_keys=False))
    notes: list[str] = []
    sys.path[:0] = paths
    started = time.monotonic()
    try:
        _, tuned_path = run_tune(
            folder / "request.yaml",
            TuneOptions(executor="inprocess", seed=0, on_note=notes.append, out_dir=folder),
        )
        tuned = yaml.safe_load(tuned_path.read_text())
    except Exception as error:  # the study's own refusal, said in the report
        tuned = {"error": f"{type(error).__name__}: {error}"}
    wall = time.monotonic() - started
    with opened_store(name, request["storage"], "name") as store:
        records = store.records()
    return {"name": name, "wall": wall, "notes": notes, "records": records, "tuned": tuned}


def fp32_throughput(records: list[TrialRecord]) -> float | None:
    for record in records:
        config = record.config
        reference = config["runtime.engine"] == "onnxruntime" and config["precision.mode"] == "fp32"
        if reference and record.status == "ok" and record.metrics:
            return float(record.metrics["throughput_per_s"])
    return None


def setting(config: dict[str, Any]) -> str:
    parts = [str(config["runtime.engine"]), str(config["precision.mode"])]
    for key in ("precision.calibration", "precision.op_types"):
        if key in config:
            parts.append(str(config[key]))
    if config.get("precision.fallback"):
        parts.append(f"fallback {config['precision.fallback']}")
    return " ".join(parts)


def trial_row(record: TrialRecord, reference: float | None) -> str:
    metrics = record.metrics or {}
    drop = metrics.get("accuracy_drop")
    throughput = metrics.get("throughput_per_s") if record.status == "ok" else None
    ratio = "" if throughput is None or not reference else f"{throughput / reference:.2f}×"
    why = record.marks.proposed or ("baseline" if record.marks.baseline else "")
    shown_drop = "" if drop is None else f"{float(drop):+.4f}"
    reason = "" if record.status == "ok" else (record.reason or "")[:90].replace("|", "/")
    return (
        f"| {record.number} | {setting(record.config)} | {why} | {record.status} | "
        f"{shown_drop} | {ratio} | {reason} |"
    )


def describe(result: dict[str, Any], bound: float) -> list[str]:
    records: list[TrialRecord] = sorted(result["records"], key=lambda r: r.number)
    int8 = [r for r in records if r.config.get("precision.mode") in INT8]
    spent = next((m for n in result["notes"] if (m := SENSITIVITY_NOTE.search(n))), None)
    seconds = float(spent.group(1)) if spent else 0.0
    met = [r for r in int8 if r.metrics and r.metrics.get("accuracy_drop") is not None]
    met = [r for r in met if float(r.metrics["accuracy_drop"]) <= bound]
    tuned = result["tuned"]
    chosen = tuned.get("config") or tuned.get("error")
    lines = [
        f"\n## {result['name']}\n",
        f"Study wall time {result['wall']:.0f} s; the sensitivity rankings took {seconds:.1f} s "
        f"({seconds / result['wall']:.0%}). int8 trials: {len(int8)} of {len(records)}; within "
        f"the bound: {len(met)}. Chosen: `{chosen}`.\n",
        "| trial | int8 variant | proposed as | status | accuracy drop | ÷ ORT fp32 | reason |",
        "|---|---|---|---|---|---|---|",
    ]
    reference = fp32_throughput(records)
    lines += [trial_row(r, reference) for r in int8]
    said = [n for n in result["notes"] if ": no variant met max_accuracy_drop" in n]
    lines += ["", *(f"- The study said: {n}" for n in said)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--bound", type=float, default=0.01)
    parser.add_argument("--out", type=Path, default=REPO / "experiments/results/int8-study-cpu.md")
    args = parser.parse_args()
    command = "python experiments/int8_study.py " + " ".join(sys.argv[1:])
    lines = [
        "# int8 as a study searches it (CPU)\n",
        f"Command: `{command.strip()}`\n",
        f"Machine: {machine()}\n",
        __doc__.split("\n\n", 2)[2].strip().replace("\n", " "),
    ]
    with tempfile.TemporaryDirectory() as work:
        for name in args.models:
            lines += describe(study(name, Path(work), args), args.bound)
            args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
