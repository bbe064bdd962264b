"""What the tracker's tests log of a trial (its configuration and figures) and read back: the
child runs of a tracker's parent run in MLflow, by trial number."""

from __future__ import annotations

from typing import Any

from mlflow.tracking import MlflowClient

from autotune.tracking import PARENT_TAG, TRIAL_TAG, MlflowTracker

CONFIG = {"batch_size": 8, "shape": [1, 3]}
METRICS = {"latency_p95_ms": 3.5, "accuracy": 0.9, "energy_source": "estimate"}


def child_runs(uri: str, tracker: MlflowTracker) -> dict[int, Any]:
    runs = MlflowClient(uri).search_runs(
        [tracker.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{tracker.parent_run_id}'"
    )
    return {int(run.data.tags[TRIAL_TAG]): run for run in runs}
