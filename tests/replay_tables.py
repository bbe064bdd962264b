"""A recorded table to replay and a request to tune it with: the rows (two engines, two batch
sizes, magnitude pruning), the CSV they are written to, and the request's constraints and
budget. Tests of the replay executor, the command line and the strategies tune against it."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path
from typing import Any

import yaml

from autotune.core.contract import TrialSpec
from autotune.execution.replay_table import ReplayTable

TRIALS = 40
COLUMNS = [
    "runtime.engine",
    "batch.size",
    "prune.method",
    "prune.ratio",
    "status",
    "reason",
    "accuracy",
    "latency_p95_ms",
    "energy_per_sample_j",
    "measure_seconds",
]
CONSTRAINTS = {"max_accuracy_drop": 0.02, "min_throughput_per_s": 1500.0}
BASELINE = {"runtime.engine": "torch_eager", "batch.size": 1, "prune.method": "none"}


def recorded_rows() -> list[dict[str, Any]]:
    """Two engines, two batch sizes, magnitude pruning at two ratios (`prune.ratio` is empty
    without pruning); onnxruntime at ratio 0.6 was never recorded, one row is unsupported.
    Pruning costs accuracy and gains no speed; measuring took 1 to 23 seconds a row."""
    rows = []
    pruning = [("none", None), ("magnitude", 0.3), ("magnitude", 0.6)]
    combos = itertools.product(["torch_eager", "onnxruntime"], [1, 8], pruning)
    for i, (engine, batch, (method, ratio)) in enumerate(combos):
        if engine == "onnxruntime" and ratio == 0.6:
            continue
        row = {"runtime.engine": engine, "batch.size": batch, "prune.method": method}
        row["prune.ratio"] = "" if ratio is None else ratio
        row["measure_seconds"] = 1 + (i * 7) % 23
        if engine == "torch_eager" and batch == 8 and ratio == 0.6:
            rows.append({**row, "status": "unsupported", "reason": "no kernel for it"})
            continue
        speed = {"torch_eager": 2.0, "onnxruntime": 1.3}[engine]
        p95 = round(speed * {1: 1.25, 8: 3.1}[batch] * (1 + (ratio or 0) / 20) + i * 1e-3, 4)
        accuracy = 0.95 - (ratio or 0) * 0.05
        energy = p95 * 0.02 / batch
        metrics = {"accuracy": accuracy, "latency_p95_ms": p95, "energy_per_sample_j": energy}
        rows.append({**row, "status": "ok", **metrics})
    return rows


def write_table(path: Path, rows: list[dict[str, Any]], columns: list[str] = COLUMNS) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    return path


def config_of(row: dict[str, Any]) -> dict[str, Any]:
    dims = ("runtime.engine", "batch.size", "prune.method", "prune.ratio")
    return {d: row[d] for d in dims if row.get(d, "") != ""}


def write_request(directory: Path, **overrides: Any) -> Path:
    request = {
        "name": "replayed",
        "constraints": CONSTRAINTS,
        "budget": {"trials": TRIALS},
        "tracking": {"uri": f"sqlite:///{directory / 'mlflow.db'}", "experiment": "tests"},
        **overrides,
    }
    path = directory / "request.yaml"
    path.write_text(yaml.safe_dump(request))
    return path


def spec(table: ReplayTable, number: int, config: dict[str, Any], **fields: Any) -> TrialSpec:
    return TrialSpec(
        study="s", trial_number=number, workload=table.workload(), config=config, **fields
    )
