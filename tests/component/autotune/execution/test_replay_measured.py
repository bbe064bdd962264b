"""A measured metric of the map through a whole replayed study: the table's column reaches
every trial and the head-to-head rounds, a request bounds it like any other metric, and MLflow
records it under its name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from autotune.core.measured.cpu_time import CPU_TIME_PER_SAMPLE
from autotune.execution.replay import ReplayExecutor
from autotune.execution.replay_table import ReplayTable
from autotune.tuning import TuneOptions, run_tune
from tests.conftest import stored_trials
from tests.replay_tables import (
    COLUMNS,
    CONSTRAINTS,
    config_of,
    recorded_rows,
    spec,
    write_request,
    write_table,
)

CPU = CPU_TIME_PER_SAMPLE.name
BOUND = 0.5
# The only rows that meet CONSTRAINTS: onnxruntime at batch 8, unpruned (the fastest) and at
# magnitude 0.3. The unpruned one costs the CPU more than the bound allows.
FAST_BUT_CPU_HUNGRY = {"runtime.engine": "onnxruntime", "batch.size": 8, "prune.method": "none"}
WITHIN_BOUND = {**FAST_BUT_CPU_HUNGRY, "prune.method": "magnitude", "prune.ratio": 0.3}


def rows_with_cpu_time() -> list[dict[str, Any]]:
    rows = []
    for row in recorded_rows():
        if row["status"] == "ok":
            cpu = row["latency_p95_ms"] / row["batch.size"]
            if config_of(row) == FAST_BUT_CPU_HUNGRY:
                cpu = 0.9
            elif config_of(row) == WITHIN_BOUND:
                cpu = 0.4
            row = {**row, CPU: cpu}
        rows.append(row)
    return rows


def test_a_table_s_measured_column_reaches_the_trial_and_the_rounds(tmp_path: Path) -> None:
    path = write_table(tmp_path / "t.csv", rows_with_cpu_time(), [*COLUMNS, CPU])
    table = ReplayTable.load(path)
    executor = ReplayExecutor(table, slots=1)
    executor.submit(spec(table, 0, FAST_BUT_CPU_HUNGRY))
    (result,) = executor.wait()
    assert result.metrics is not None and result.metrics.measured == {CPU: 0.9}


def test_a_replayed_study_bounds_and_records_a_measured_metric(tmp_path: Path) -> None:
    table = write_table(tmp_path / "t.csv", rows_with_cpu_time(), [*COLUMNS, CPU])
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    request = write_request(
        tmp_path,
        constraints={**CONSTRAINTS, "max_cpu_time_per_sample_ms": BOUND},
        budget={"trials": 16},
    )
    options = TuneOptions(
        replay=table, storage=storage, study="cpu", seed=0, out_dir=tmp_path / "out"
    )
    outcome, _ = run_tune(request, options)
    assert outcome.tuned is not None
    measured = [t for t in stored_trials(storage, "cpu") if t.has_metrics]
    assert measured and all(CPU in t.metrics for t in measured)
    hungry = [t for t in measured if t.config == FAST_BUT_CPU_HUNGRY]
    assert hungry and all(not t.feasible for t in hungry)
    assert hungry[0].violations["max_cpu_time_per_sample_ms"] > 0
    tuned = outcome.tuned
    assert tuned.config == WITHIN_BOUND
    assert tuned.metrics[CPU] <= BOUND
    client = MlflowClient(tuned.mlflow["tracking_uri"])
    parent = client.get_run(tuned.mlflow["run_id"])
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    logged = {run.data.metrics[CPU] for run in children if CPU in run.data.metrics}
    # A trial that repeats a configuration repeats its measurement: one run holds it.
    assert logged == {t.metrics[CPU] for t in measured}
