"""A trial's child run, and the two ways it is written into MLflow.

Run by run, `write_trial` uses MLflow's client: three calls, each a few transactions with
reads of the run and its latest metrics; a study of thousands of trials spends more time there
than in everything else. A run that is new has no history to merge, so `BulkRuns` writes a
batch of them in one transaction into an MLflow SQL store: the rows `create_run`, `log_batch`
and `set_terminated` would leave, checked (and long values truncated) by MLflow's own
validators. `BulkRuns` is the only user of MLflow's private store API (its SQL models and
session maker), pinned by
`tests/component/autotune/tracking/test_mlflow_private_schema.py`: an MLflow upgrade that
moves them fails there, naming what moved, and breaks nothing else. Stores that are not SQL
(a tracking server, a file store) are written run by run.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


STUDY_TAG = "autotune.study"
ROLE_TAG = "autotune.role"
TRIAL_TAG = "autotune.trial_number"
PARENT_TAG = "mlflow.parentRunId"
# On the run of a trial that repeats a configuration another trial of the study measured:
# that trial's number. Such a run carries no figures (they are the other trial's).
REPEAT_TAG = "autotune.repeat_of"


class TrialRun(NamedTuple):
    """A trial's child run as logged, before it is written: plain strings and floats, so
    that nothing the caller changes afterwards reaches the store."""

    trial_number: int
    started_ms: int  # when the trial began to run
    logged_ms: int  # when it was told: the run's end
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]
    metric_tags: dict[str, str]
    status: str
    texts: dict[str, str] = {}  # artifact file name -> text (a failure's traceback)


@dataclass(frozen=True)
class StudyRuns:
    """Where a study's child runs go."""

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    study: str
    round: int


def run_name(trial: TrialRun) -> str:
    """`trial-3`, or for a repeat of trial 2's configuration `trial-3 (repeat of #2)`."""
    repeat_of = trial.tags.get(REPEAT_TAG)
    name = f"trial-{trial.trial_number}"
    return name if repeat_of is None else f"{name} (repeat of #{repeat_of})"


def run_tags(runs: StudyRuns, trial: TrialRun) -> dict[str, str]:
    """Every tag of a trial's child run."""
    return {
        PARENT_TAG: runs.parent_run_id,
        STUDY_TAG: runs.study,
        ROLE_TAG: "trial",
        TRIAL_TAG: str(trial.trial_number),
        **trial.tags,
        **trial.metric_tags,
    }


def write_trial(client: MlflowClient, runs: StudyRuns, trial: TrialRun) -> str:
    """Write a child run in three calls to the store: create it with every tag (a tag in the
    batch would cost the store one more transaction), log metrics and params in one batch,
    and end it at the time it was logged. Returns its run id."""
    from mlflow.entities import Metric, Param

    run = client.create_run(
        runs.experiment_id,
        start_time=trial.started_ms,
        run_name=run_name(trial),
        tags=run_tags(runs, trial),
    )
    run_id = str(run.info.run_id)
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, trial.logged_ms, runs.round) for k, v in trial.metrics.items()],
        params=[Param(k, v) for k, v in trial.params.items()],
    )
    client.set_terminated(run_id, status=trial.status, end_time=trial.logged_ms)
    return run_id


def sql_store(client: MlflowClient) -> Any:
    """The client's store where it is MLflow's SQL store, else None."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = client._tracking_client.store
    return store if isinstance(store, SqlAlchemyStore) else None


class BulkRuns:
    """Writes batches of a study's child runs into `store` (an MLflow SQL store), each batch
    in one transaction."""

    def __init__(self, store: Any, runs: StudyRuns) -> None:
        self._store = store
        self._runs = runs
        self._artifact_root: str | None = None

    def write(self, trials: Sequence[TrialRun]) -> dict[int, str]:
        """Writes every run of `trials` or none of them; returns each trial's run id."""
        from mlflow.store.tracking.dbmodels.models import (
            SqlLatestMetric,
            SqlMetric,
            SqlParam,
            SqlRun,
            SqlTag,
        )

        root = self._artifacts()
        rows: dict[Any, list[dict[str, Any]]] = {
            SqlRun: [],
            SqlTag: [],
            SqlParam: [],
            SqlMetric: [],
            SqlLatestMetric: [],
        }
        written: dict[int, str] = {}
        for trial in trials:
            run_id = uuid.uuid4().hex
            written[trial.trial_number] = run_id
            for model, row in self._rows(trial, run_id, root):
                rows[model].append(row)
        with self._store.ManagedSessionMaker(read_only=False) as session:
            for model, model_rows in rows.items():
                if model_rows:
                    session.execute(model.__table__.insert(), model_rows)
        return written

    def _artifacts(self) -> str:
        """The experiment's artifact location, read once; the experiment must be active."""
        if self._artifact_root is None:
            experiment = self._store.get_experiment(self._runs.experiment_id)
            self._store._check_experiment_is_active(experiment)
            self._artifact_root = str(experiment.artifact_location)
        return self._artifact_root

    def _rows(self, trial: TrialRun, run_id: str, root: str) -> list[tuple[Any, dict[str, Any]]]:
        from mlflow.entities import LifecycleStage, Metric, Param, RunStatus, RunTag, SourceType
        from mlflow.store.tracking.dbmodels.models import (
            SqlLatestMetric,
            SqlMetric,
            SqlParam,
            SqlRun,
            SqlTag,
        )
        from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME, MLFLOW_USER
        from mlflow.utils.uri import append_to_uri_path
        from mlflow.utils.validation import _validate_batch_log_data

        runs, name = self._runs, run_name(trial)
        tags = {**run_tags(runs, trial), MLFLOW_RUN_NAME: name}
        metrics = [Metric(k, v, trial.logged_ms, runs.round) for k, v in trial.metrics.items()]
        params = [Param(k, v) for k, v in trial.params.items()]
        # MLflow's checks, and its truncation of values over its length limits
        metrics, params, checked_tags = _validate_batch_log_data(
            metrics, params, [RunTag(k, v) for k, v in tags.items()]
        )
        tags = {t.key: t.value for t in checked_tags}
        run = {
            "run_uuid": run_id,
            "name": name,
            "artifact_uri": append_to_uri_path(root, run_id, "artifacts"),
            "experiment_id": int(runs.experiment_id),
            "source_type": SourceType.to_string(SourceType.UNKNOWN),
            "source_name": "",
            "entry_point_name": "",
            "user_id": tags.get(MLFLOW_USER, "unknown"),
            "status": RunStatus.to_string(RunStatus.from_string(trial.status)),
            "start_time": trial.started_ms,
            "end_time": trial.logged_ms,
            "deleted_time": None,
            "source_version": "",
            "lifecycle_stage": LifecycleStage.ACTIVE,
        }
        rows: list[tuple[Any, dict[str, Any]]] = [(SqlRun, run)]
        rows += [(SqlTag, {"run_uuid": run_id, "key": k, "value": v}) for k, v in tags.items()]
        rows += [(SqlParam, {"run_uuid": run_id, "key": p.key, "value": p.value}) for p in params]
        for metric in metrics:
            is_nan, value = self._store.sanitize_metric_value(metric.value)
            row = {
                "run_uuid": run_id,
                "key": metric.key,
                "value": value,
                "timestamp": metric.timestamp,
                "step": metric.step,
                "is_nan": is_nan,
            }
            rows += [(SqlMetric, row), (SqlLatestMetric, dict(row))]
        return rows
