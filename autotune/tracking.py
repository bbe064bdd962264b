"""MLflow tracking: one parent run per study, one nested child run per trial.

Child runs are keyed by (study, trial number): logging a trial that already has a run
does nothing, so a resumed study never logs the same trial twice.

Each run of a study (the first tuning, then every resume) is one round, numbered in the
parent run's tag `autotune.round`. Every metric is logged at step = that round's number and
timestamp = now, so MLflow's latest value of a parent metric is the latest round's (the
tuned file's), and a metric history tells the rounds apart.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.contract import Contention
from autotune.metrics import OBJECTIVES, Metric
from autotune.pareto import Candidate
from autotune.validation import Headline

if TYPE_CHECKING:
    from mlflow.entities import Metric as MlflowMetric
    from mlflow.tracking import MlflowClient

STUDY_TAG = "autotune.study"
ROLE_TAG = "autotune.role"
TRIAL_TAG = "autotune.trial_number"
PARENT_TAG = "mlflow.parentRunId"
PREVIOUS_RUN_TAG = "autotune.previous_run_id"
ROUND_TAG = "autotune.round"
# Parent-run figures that describe one round's outcome: a key an earlier round logged and
# this one does not is logged as NaN, so that no figure outlives its round.
ROUND_FIGURES = ("baseline.", "tuned.", "headline.")


def artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: beside a SQLite store's file, in `mlruns`
    (MLflow's own default is ./mlruns of whatever directory the process runs in); None, the
    store's default, for any other store."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix) or tracking_uri == prefix + ":memory:":
        return None
    database = Path(tracking_uri.removeprefix(prefix).split("?", 1)[0])
    return (database.resolve().parent / "mlruns").as_uri()


class Tracker:
    def __init__(self, tracking_uri: str, experiment: str, study: str) -> None:
        from mlflow.tracking import MlflowClient

        # MLflow announces schema migrations of a new store at INFO; they are not news here.
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        self.tracking_uri = tracking_uri
        self.client: MlflowClient = MlflowClient(tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = (
            found.experiment_id
            if found
            else self.client.create_experiment(
                experiment, artifact_location=artifact_location(tracking_uri)
            )
        )
        self.study = study
        self.parent_run_id = self._find_or_create_parent()
        self.round = self._next_round()
        self._trial_runs = self._existing_trial_runs()

    def _find_or_create_parent(self) -> str:
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{STUDY_TAG}` = '{self.study}' and tags.`{ROLE_TAG}` = 'study'",
            max_results=1,
        )
        if runs:
            return runs[0].info.run_id
        run = self.client.create_run(
            self.experiment_id, run_name=self.study, tags={STUDY_TAG: self.study, ROLE_TAG: "study"}
        )
        return run.info.run_id

    def _next_round(self) -> int:
        """This round's number: one more than the parent run's last (coordinators sharing a
        study create their trackers under the study lock)."""
        tags = self.client.get_run(self.parent_run_id).data.tags
        number = int(tags.get(ROUND_TAG, "0")) + 1
        self.client.set_tag(self.parent_run_id, ROUND_TAG, str(number))
        return number

    def _metrics(self, values: dict[str, float]) -> list[MlflowMetric]:
        """MLflow metrics of this round: step = the round's number, timestamp = now."""
        from mlflow.entities import Metric as MlflowMetric

        now = int(time.time() * 1000)
        return [MlflowMetric(k, float(v), now, self.round) for k, v in values.items()]

    def _existing_trial_runs(self) -> dict[int, str]:
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{PARENT_TAG}` = '{self.parent_run_id}'",
            max_results=50000,
        )
        return {
            int(r.data.tags[TRIAL_TAG]): r.info.run_id for r in runs if TRIAL_TAG in r.data.tags
        }

    def log_study_inputs(
        self, params: dict[str, Any], documents: dict[str, Any], tags: dict[str, str]
    ) -> None:
        from mlflow.entities import Param, RunTag

        self.client.log_batch(
            self.parent_run_id,
            params=[Param(k, _param(v)) for k, v in params.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
        )
        for name, document in documents.items():
            self.client.log_text(self.parent_run_id, _as_text(name, document), name)

    def log_trial(
        self,
        trial_number: int,
        attempt: int,
        config: dict[str, Any],
        metrics: dict[str, Any] | None,
        tags: dict[str, str],
    ) -> None:
        from mlflow.entities import Param, RunTag

        if trial_number in self._trial_runs:
            return
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"trial-{trial_number}",
            tags={
                PARENT_TAG: self.parent_run_id,
                STUDY_TAG: self.study,
                ROLE_TAG: "trial",
                TRIAL_TAG: str(trial_number),
                "autotune.attempt": str(attempt),
                **tags,
            },
        )
        numeric = {k: float(v) for k, v in (metrics or {}).items() if is_number(v)}
        self.client.log_batch(
            run.info.run_id,
            metrics=self._metrics(numeric),
            params=[Param(k, _param(v)) for k, v in config.items()],
            tags=[RunTag(k, str(v)) for k, v in (metrics or {}).items() if not is_number(v)],
        )
        status = "FINISHED" if metrics is not None else "FAILED"
        self.client.set_terminated(run.info.run_id, status=status)
        self._trial_runs[trial_number] = run.info.run_id

    def log_revalidation(self, report: dict[str, Any]) -> None:
        """Re-measured figures go next to the search figures on each finalist's run."""
        for finalist in (f for comparison in report["comparisons"] for f in comparison):
            run_id = self._trial_runs.get(finalist["trial"])
            if run_id is None or finalist["revalidated"] is None:
                continue
            values = {k: v for k, v in finalist["revalidated"].items() if is_number(v)}
            self.client.log_batch(
                run_id, metrics=self._metrics({f"revalidated.{k}": v for k, v in values.items()})
            )
            self.client.set_tag(run_id, "revalidated", "true")
        self.client.log_text(self.parent_run_id, _as_text("r.json", report), "revalidation.json")

    def mark_pareto(self, trial_numbers: set[int]) -> None:
        for number, run_id in self._trial_runs.items():
            self.client.set_tag(run_id, "pareto", str(number in trial_numbers).lower())

    def log_results(
        self,
        candidates: Sequence[Candidate],
        front: Sequence[Candidate],
        objectives: Sequence[Metric],
        metrics: dict[str, float],
        documents: dict[str, Any],
        artifact_dir: str | None,
        tags: dict[str, str],
    ) -> None:
        from mlflow.entities import RunTag

        logged = self.client.get_run(self.parent_run_id).data.metrics
        stale = {k: math.nan for k in logged if k.startswith(ROUND_FIGURES) and k not in metrics}
        self.client.log_batch(
            self.parent_run_id,
            metrics=self._metrics({**stale, **metrics}),
            tags=[RunTag(k, v) for k, v in tags.items()],
        )
        self.client.log_text(self.parent_run_id, pareto_csv(front), "pareto/pareto_front.csv")
        self.client.log_text(self.parent_run_id, pareto_csv(candidates), "pareto/all_trials.csv")
        for name, document in documents.items():
            self.client.log_text(self.parent_run_id, _as_text(name, document), name)
        with tempfile.TemporaryDirectory() as tmp:
            plot = Path(tmp) / "pareto_front.png"
            plot_front(candidates, front, objectives, plot)
            self.client.log_artifact(self.parent_run_id, str(plot), "pareto")
        if artifact_dir is not None:
            self.client.log_artifacts(self.parent_run_id, artifact_dir, "optimized_model")
        self.mark_pareto({c.trial_number for c in front})

    def log_comparison(self, previous: dict[str, Any], current: dict[str, Any]) -> None:
        """How this study's tuned config differs from a previous one (both tuned-config
        documents): comparison.json, a `change.<metric>` relative change per numeric metric,
        and a tag naming the previous parent run."""
        comparison = compare_tuned(previous, current)
        changes = {
            f"change.{name}": change["relative_change"]
            for name, change in comparison["metric_changes"].items()
            if change["relative_change"] is not None
        }
        self.client.log_batch(self.parent_run_id, metrics=self._metrics(changes))
        self.client.set_tag(self.parent_run_id, PREVIOUS_RUN_TAG, comparison["previous"]["run_id"])
        self.client.log_text(self.parent_run_id, _as_text("c.json", comparison), "comparison.json")

    def finish(self, status: str) -> None:
        self.client.set_terminated(self.parent_run_id, status=status)

    def artifact_uri(self, path: str) -> str:
        return f"runs:/{self.parent_run_id}/{path}"


def compare_tuned(previous: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """What changed between two tuned-config documents: configuration values (None for a key
    on one side only) and the numeric metrics of both, with the change relative to the
    previous value (None where that was 0)."""
    before, after = previous["config"], current["config"]
    config_changes = {
        key: {"before": before.get(key), "after": after.get(key)}
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key)
    }
    metric_changes = {
        name: _change(value, current["metrics"][name])
        for name, value in previous["metrics"].items()
        if is_number(value) and is_number(current["metrics"].get(name))
    }
    return {
        "previous": {"study": previous["study"]["name"], "run_id": previous["mlflow"]["run_id"]},
        "current": {"study": current["study"]["name"], "run_id": current["mlflow"]["run_id"]},
        "config_changes": config_changes,
        "metric_changes": metric_changes,
    }


def _change(before: float, after: float) -> dict[str, float | None]:
    return {
        "before": before,
        "after": after,
        "change": after - before,
        "relative_change": (after - before) / before if before != 0 else None,
    }


def pareto_csv(candidates: Sequence[Candidate]) -> str:
    config_keys = sorted({k for c in candidates for k in c.config})
    metric_keys = sorted({k for c in candidates for k in c.metrics})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["trial", "feasible", *config_keys, *metric_keys])
    for c in candidates:
        writer.writerow(
            [
                c.trial_number,
                c.feasible,
                *(c.config.get(k, "") for k in config_keys),
                *(c.metrics.get(k, "") for k in metric_keys),
            ]
        )
    return out.getvalue()


def plot_front(
    candidates: Sequence[Candidate],
    front: Sequence[Candidate],
    objectives: Sequence[Metric],
    path: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_metric = OBJECTIVES["latency"]
    y_metric = OBJECTIVES["accuracy"]
    fig, ax = plt.subplots(figsize=(7, 5))
    for label, group, style in (
        ("infeasible", [c for c in candidates if not c.feasible], {"c": "#bbbbbb", "marker": "x"}),
        ("feasible", [c for c in candidates if c.feasible], {"c": "#4c72b0", "marker": "o"}),
        ("Pareto front", list(front), {"c": "#dd8452", "marker": "*", "s": 140}),
    ):
        if group:
            ax.scatter(
                [c.metrics[x_metric.name] for c in group],
                [c.metrics[y_metric.name] for c in group],
                label=label,
                **style,
            )
    ax.set_xscale("log")
    ax.set_xlabel(f"{x_metric.name} ({x_metric.unit})")
    ax.set_ylabel(f"{y_metric.name} ({y_metric.unit})")
    ax.set_title("objectives: " + ", ".join(m.name for m in objectives))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _param(value: Any) -> str:
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _as_text(name: str, document: Any) -> str:
    if isinstance(document, str):
        return document
    if name.endswith((".yaml", ".yml")):
        import yaml

        return yaml.safe_dump(document, sort_keys=False)
    return json.dumps(document, indent=2, default=str)


def headline_metrics(summary: Headline) -> dict[str, float]:
    """The headline's paired ratios as MLflow metrics: headline.<metric>.{ratio,ci_low,ci_high}."""
    figures = {"headline.rounds": float(summary.rounds)}
    figures["headline.contended_rounds"] = float(summary.contended_rounds)
    for metric, value in summary.ratios.items():
        for part, number in value.model_dump().items():
            figures[f"headline.{metric}.{part}"] = float(number)
    return figures


def contention_tags(contention: Contention) -> dict[str, str]:
    tags = {
        "contended": str(contention.contended).lower(),
        "oversubscribed": str(contention.oversubscribed).lower(),
    }
    if contention.reasons:
        tags["contention"] = "; ".join(contention.reasons)
    if contention.gpu_throttle_reasons:
        tags["gpu_throttle_reasons"] = ",".join(contention.gpu_throttle_reasons)
    return tags


def contention_figures(contention: Contention) -> dict[str, float]:
    """The other load a measurement saw, as MLflow metrics contention.*."""
    figures = {
        "contention.other_cpu_share": contention.other_cpu_share,
        "contention.machine_other_cpu_share": contention.machine_other_cpu_share,
        "contention.steal_share": contention.steal_share,
        "contention.cores_to_itself": contention.cores_to_itself,
        "contention.waited_s": contention.waited_s,
    }
    if contention.cpu_pressure is not None:
        figures["contention.cpu_pressure"] = contention.cpu_pressure
    return figures
