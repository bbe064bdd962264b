"""Child runs written in one transaction per batch (`autotune.tracking.runs`) read back
through MLflow's client as the runs its own calls write, on SQLite and PostgreSQL; a batch
MLflow refuses falls back to writing run by run."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from autotune.tracking import MlflowTracker
from autotune.tracking.runs import BulkRuns, StudyRuns, TrialRun, sql_store, write_trial
from autotune.tracking.writer import BATCH_RUNS
from tests.conftest import postgres_databases
from tests.tracker_runs import CONFIG, METRICS, child_runs


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def store_uri(
    request: pytest.FixtureRequest, tmp_path: Path, new_mlflow_store: Callable[[Path], str]
) -> Iterator[str]:
    if request.param == "sqlite":
        yield new_mlflow_store(tmp_path / "mlflow.db")
    else:
        with postgres_databases(1, prefix="autotune_bulk") as [url]:
            yield url


def trial(number: int, status: str = "FINISHED", **metrics: float) -> TrialRun:
    now = int(time.time() * 1000)
    return TrialRun(
        trial_number=number,
        started_ms=now - 1500,
        logged_ms=now,
        tags={"autotune.attempt": "1", "contended": "false"},
        params={"batch.size": "8", "runtime.engine": "onnxruntime"},
        metrics={"latency_p95_ms": 3.5, "accuracy": 0.9, **metrics},
        metric_tags={"energy_source": "estimate"},
        status=status,
    )


def comparable(client: MlflowClient, run_id: str) -> dict[str, Any]:
    """What a person sees of a run, less what differs between any two runs (its id)."""
    run = client.get_run(run_id)
    info = run.info
    history = {
        key: [(repr(m.value), m.step, m.timestamp) for m in client.get_metric_history(run_id, key)]
        for key in run.data.metrics
    }
    return {
        "info": (info.run_name, info.status, info.start_time, info.end_time, info.user_id,
                 info.lifecycle_stage, info.experiment_id),
        "artifact_uri": info.artifact_uri.replace(run_id, "<id>"),
        "tags": run.data.tags,
        "params": run.data.params,
        "metrics": {k: repr(v) for k, v in run.data.metrics.items()},  # NaN reads as 'nan'
        "history": history,
    }  # fmt: skip


def test_runs_written_in_bulk_read_back_as_mlflows_own_calls_write_them(store_uri: str) -> None:
    client = MlflowClient(store_uri)
    experiment = client.create_experiment("bulk")
    parent = client.create_run(experiment).info.run_id
    runs = StudyRuns(store_uri, experiment, parent, "study", round=2)
    logged = [
        trial(0),
        trial(1, "FAILED"),
        trial(2, energy_per_sample_j=math.inf, throughput_per_s=math.nan),
    ]
    one_by_one = {t.trial_number: write_trial(client, runs, t) for t in logged}
    in_bulk = BulkRuns(sql_store(client), runs).write(logged)

    assert sorted(in_bulk) == [0, 1, 2]
    for number in in_bulk:
        assert comparable(client, in_bulk[number]) == comparable(client, one_by_one[number])
    found = client.search_runs([experiment], filter_string="tags.`autotune.trial_number` = '2'")
    assert {r.info.run_id for r in found} == {in_bulk[2], one_by_one[2]}


def test_a_study_of_more_runs_than_a_batch_is_written_whole(mlflow_uri: str) -> None:
    tracker = MlflowTracker(mlflow_uri, "tests", "study")
    for number in range(BATCH_RUNS + 20):
        tracker.log_trial(number, 0, CONFIG, METRICS, {})
    tracker.finish("FINISHED")
    assert sorted(child_runs(mlflow_uri, tracker)) == list(range(BATCH_RUNS + 20))


def test_a_batch_mlflow_refuses_is_written_run_by_run(mlflow_uri: str) -> None:
    tracker = MlflowTracker(mlflow_uri, "tests", "study")
    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    tracker.log_trial(1, 0, {"../x": 1}, METRICS, {})  # MLflow refuses such a param
    tracker.log_trial(2, 0, CONFIG, METRICS, {})
    with pytest.raises(MlflowException, match="Names may be treated as files"):
        tracker.flush()
    runs = child_runs(mlflow_uri, tracker)
    assert [runs[n].info.status for n in (0, 2)] == ["FINISHED", "FINISHED"]
    assert runs[2].data.metrics == {
        "latency_p95_ms": 3.5,
        "accuracy": 0.9,
        "rounded/latency_p95_ms": 3.5,
        "rounded/accuracy": 0.9,
    }
    tracker.finish("FINISHED")
