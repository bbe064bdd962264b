"""MLflow tracking: one parent run per study, one nested child run per trial.

Child runs are keyed by (study, trial number): logging a trial that already has a run
does nothing, so a resumed study never logs the same trial twice.

A trial's child run is written by a writer process (autotune.tracking.writer), in the order
trials are logged, so that `log_trial` returns without waiting for the store and the store's
CPU cost runs beside the caller; every other call first waits until the queued runs are
written, and raises what a deferred write raised.

Each run of a study (the first tuning, then every resume) is one round, numbered in the
parent run's tag `autotune.round`. Every metric is logged at step = that round's number and
timestamp = when it was logged, so MLflow's latest value of a parent metric is the latest
round's (the tuned file's), and a metric history tells the rounds apart.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.contract.trials import SensitivityTable
from autotune.core.metrics import Metric, selection_objective
from autotune.results.records import Candidate
from autotune.tracking.base import TrackerClosed
from autotune.tracking.experiment_tags import EXPERIMENT_TAGS, set_experiment_tag
from autotune.tracking.note import experiment_note, review_note
from autotune.tracking.pareto_report import pareto_html, pareto_png
from autotune.tracking.report import (
    AGAINST_PREVIOUS,
    comparison_figures,
    is_number,
    pareto_csv,
)
from autotune.tracking.review import (
    KINDS,
    STUDY_COLOUR,
    Point,
    points,
    rounded_figures,
    shown_metrics,
)
from autotune.tracking.runs import (
    PARENT_TAG,
    REPEAT_TAG,
    ROLE_TAG,
    STUDY_TAG,
    TRIAL_TAG,
    StudyRuns,
    TrialRun,
)
from autotune.tracking.sensitivity import sensitivity_files, sensitivity_stem
from autotune.tracking.view import PRIMARY_METRIC_TAG, runs_view, study_links
from autotune.tracking.writer import ClientFactory, TrialWriter, start_writer

if TYPE_CHECKING:
    from mlflow.entities import Metric as MlflowMetric
    from mlflow.tracking import MlflowClient

__all__ = [
    "PARENT_TAG",
    "PREVIOUS_RUN_TAG",
    "ROLE_TAG",
    "ROUND_TAG",
    "STUDY_TAG",
    "TRIAL_TAG",
    "MlflowTracker",
    "artifact_location",
    "is_database_store",
]

PREVIOUS_RUN_TAG = "autotune.previous_run_id"
COMPARISON_TAG = "autotune.against_previous"
# What kind of experiment this is, for MLflow's UI: it spares the question "which kind?". The
# page MLflow 3.17 opens is not chosen by it (see autotune.tracking.view): the experiment's
# description (NOTE_TAG, shown above each of its pages) links to the runs.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
NOTE_TAG = "mlflow.note.content"
# A run's name and its colour in MLflow's table and charts (the UI's own tag for a colour).
RUN_NAME_TAG, RUN_COLOUR_TAG = "mlflow.runName", "mlflow.runColor"
ROUND_TAG = "autotune.round"
# The chosen trial's run: the nodes its int8 model keeps in float.
FLOAT_NODES_TAG = "float_nodes"
# A trial's run is FINISHED when it was measured, in full or in a short window; any other
# status's run is FAILED, though it may carry where its time went (time.*).
MEASURED = ("ok", "screened")
# Parent-run figures that describe one round's outcome: a key an earlier round logged and
# this one does not is logged as NaN, so that no figure outlives its round.
ROUND_FIGURES = ("baseline.", "tuned.", "headline.")


# The SQLAlchemy dialects MLflow keeps a tracking store in.
DATABASE_STORES = ("sqlite", "postgresql", "mysql", "mssql")


def is_database_store(tracking_uri: str) -> bool:
    """Whether the tracking URI is a database (`postgresql+psycopg://...`, `sqlite:///...`),
    not an MLflow server or a directory."""
    scheme, found, _ = tracking_uri.partition(":")
    return bool(found) and scheme.split("+", 1)[0].lower() in DATABASE_STORES


def artifact_location(tracking_uri: str, root: str | Path | None = None) -> str | None:
    """Where a new experiment on a database store keeps its artifacts (MLflow's own default
    there is ./mlruns of whatever directory the process runs in): `root` where given (a
    directory, or a URI such as s3://bucket/prefix), else `mlruns` beside a SQLite store's
    file. None, the store's own choice, for an MLflow server or a file store (they choose
    their own), and for a database other than a SQLite file without `root`."""
    if not is_database_store(tracking_uri):
        return None
    if root is not None:
        text = str(root)
        return text if "://" in text else Path(text).resolve().as_uri()
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix) or tracking_uri == prefix + ":memory:":
        return None
    database = Path(tracking_uri.removeprefix(prefix).split("?", 1)[0])
    return (database.resolve().parent / "mlruns").as_uri()


class MlflowTracker:
    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        study: str,
        writer_client: ClientFactory | None = None,
        artifact_root: str | Path | None = None,
    ) -> None:
        """`writer_client` makes the writer's client from the tracking URI (default:
        MlflowClient); it must pickle, as the writer process builds its own. A new
        experiment on a database store keeps its artifacts under `artifact_root` (see
        `artifact_location`); an existing one keeps the location it was created with."""
        from mlflow.tracking import MlflowClient

        # MLflow announces schema migrations of a new store at INFO; they are not news here.
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        self.tracking_uri = tracking_uri
        self.client: MlflowClient = MlflowClient(tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id: str = (
            found.experiment_id
            if found
            else self.client.create_experiment(
                experiment, artifact_location=artifact_location(tracking_uri, artifact_root)
            )
        )
        if found is None or EXPERIMENT_KIND_TAG not in found.tags:
            with EXPERIMENT_TAGS:
                kind = (EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
                set_experiment_tag(self.client, self.experiment_id, *kind)
        self._request: dict[str, Any] = {}  # the request document, for the description
        self.study = study
        self.parent_run_id: str = self._find_or_create_parent()
        self.round = self._next_round()
        # completed by each flush with what the writer wrote since
        self._trial_runs = self._existing_trial_runs()
        self._logged_trials = set(self._trial_runs)
        self._writer_client = writer_client
        self._writer: TrialWriter | None = None  # started by the first log_trial
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def writing(self) -> bool:
        """Whether the writer process is alive."""
        return self._writer is not None and self._writer.running

    def _find_or_create_parent(self) -> str:
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{STUDY_TAG}` = '{self.study}' and tags.`{ROLE_TAG}` = 'study'",
            max_results=1,
        )
        if runs:
            return str(runs[0].info.run_id)
        run = self.client.create_run(
            self.experiment_id, run_name=self.study, tags={STUDY_TAG: self.study, ROLE_TAG: "study"}
        )
        return str(run.info.run_id)

    def _next_round(self) -> int:
        """This round's number: one more than the parent run's last (coordinators sharing a
        study create their trackers under the study lock)."""
        tags = self.client.get_run(self.parent_run_id).data.tags
        number = int(tags.get(ROUND_TAG, "0")) + 1
        self.client.set_tag(self.parent_run_id, ROUND_TAG, str(number))
        return number

    def _metrics(
        self, values: dict[str, float], timestamp_ms: int | None = None
    ) -> list[MlflowMetric]:
        """MLflow metrics of this round: step = the round's number, timestamp = now unless
        given."""
        from mlflow.entities import Metric as MlflowMetric

        timestamp = _now_ms() if timestamp_ms is None else timestamp_ms
        return [MlflowMetric(k, float(v), timestamp, self.round) for k, v in values.items()]

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

        self._wait_for_trials()
        self._request = documents.get("request.yaml", self._request)
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
        duration_s: float = 0.0,
        texts: dict[str, str] | None = None,
    ) -> None:
        """Queue the trial's child run and return; the writer process writes it. The run
        spans the trial's own time (`duration_s` until now); a figure without a value is
        left out rather than written as 'None'."""
        self._check_open()
        if trial_number in self._logged_trials:
            return
        self._logged_trials.add(trial_number)
        figures = metrics or {}
        now = _now_ms()
        run = TrialRun(
            trial_number=trial_number,
            started_ms=now - round(duration_s * 1000),
            logged_ms=now,
            tags={"autotune.attempt": str(attempt), **tags},
            params={k: _param(v) for k, v in config.items()},
            metrics={
                **{k: float(v) for k, v in figures.items() if is_number(v)},
                **rounded_figures(figures),
            },
            metric_tags={
                k: str(v) for k, v in figures.items() if v is not None and not is_number(v)
            },
            status="FINISHED" if _finished(metrics, tags) else "FAILED",
            texts=dict(texts or {}),
        )
        if self._writer is None:
            self._writer = start_writer(
                self._study_runs(), self._trial_runs.__setitem__, self.client, self._writer_client
            )
        self._writer.submit(run)

    def _study_runs(self) -> StudyRuns:
        return StudyRuns(
            self.tracking_uri, self.experiment_id, self.parent_run_id, self.study, self.round
        )

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def _wait_for_trials(self) -> None:
        self._check_open()
        self.flush()

    def log_sensitivity(self, table: SensitivityTable) -> None:
        self._wait_for_trials()
        for name, text in sensitivity_files(table).items():
            self.client.log_text(self.parent_run_id, text, f"sensitivity/{name}")
        seconds = {f"{sensitivity_stem(table)}_s": table.seconds}
        self.client.log_batch(self.parent_run_id, metrics=self._metrics(seconds))

    def log_revalidation(self, report: dict[str, Any]) -> None:
        """Re-measured figures go next to the search figures on each finalist's run and on
        the baseline's (it was re-measured beside them, and may be the one chosen), with the
        paired rounds they come from (`revalidated.rounds`); the chosen one's are its
        confirming rounds' where it had them, as the tuned file's are. A trial's search
        figures stay: the re-measurement is told on the one run of its configuration."""
        self._wait_for_trials()
        entrants = [f for comparison in report["comparisons"] for f in comparison]
        if "baseline_trial" in report:  # reports stored before it was recorded lack it
            entrants.append({"trial": report["baseline_trial"], "revalidated": report["baseline"]})
        if report.get("confirmation") is not None:  # the chosen one's fresh rounds instead
            entrants = [e for e in entrants if e["trial"] != report["chosen"]]
            entrants.append({"trial": report["chosen"], "revalidated": report["confirmation"]})
        for entrant in entrants:
            run_id = self._trial_runs.get(entrant["trial"])
            if run_id is None or entrant["revalidated"] is None:
                continue
            values = {k: v for k, v in entrant["revalidated"].items() if is_number(v)}
            if "rounds" in report:
                values["rounds"] = report["rounds"]
            self.client.log_batch(
                run_id, metrics=self._metrics({f"revalidated.{k}": v for k, v in values.items()})
            )
            self.client.set_tag(run_id, "revalidated", "true")
        self.client.log_text(self.parent_run_id, _as_text("r.json", report), "revalidation.json")

    def mark_trials(self, cloud: Sequence[Point], renamed: Collection[int] = ()) -> None:
        """Tag each trial's run `pareto`, `chosen` and `baseline`, colour it by its kind (the
        chosen one red, the baseline black, one without figures grey), and say in their names
        which are the chosen one and the baseline (`_run_name`); `renamed` are trials that may
        carry such a name from an earlier round."""
        from mlflow.entities import RunTag

        self._wait_for_trials()
        by_number = {p.number: p for p in cloud}
        for number, run_id in self._trial_runs.items():
            point = by_number.get(number)
            roles = point.roles if point is not None else []
            marks = {
                "pareto": str(point is not None and point.kind == "front").lower(),
                "chosen": str("chosen" in roles).lower(),
                "baseline": str("baseline" in roles).lower(),
                RUN_COLOUR_TAG: point.colour if point is not None else KINDS["infeasible"][1],
            }
            if roles or number in renamed:
                marks[RUN_NAME_TAG] = _run_name(number, roles)
            self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in marks.items()])

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

        self._wait_for_trials()
        chosen, baseline = _trial_tag(tags, "chosen_trial"), _trial_tag(tags, "baseline_trial")
        cloud = points(candidates, front, baseline, chosen)
        tuned = documents.get("tuned.yaml")
        links = study_links(self.experiment_id, self.study, self.parent_run_id)
        self._log_experiment_review(objectives, links)
        note = review_note(self.study, tuned, cloud, objectives, self._request, links[:2])
        parent = self.client.get_run(self.parent_run_id).data
        earlier = {_trial_tag(parent.tags, k) for k in ("chosen_trial", "baseline_trial")}
        logged = parent.metrics
        stale = {k: math.nan for k in logged if k.startswith(ROUND_FIGURES) and k not in metrics}
        self.client.log_batch(
            self.parent_run_id,
            metrics=self._metrics({**stale, **metrics}),
            tags=[
                RunTag(k, v)
                for k, v in {**tags, NOTE_TAG: note, RUN_COLOUR_TAG: STUDY_COLOUR}.items()
            ],
        )
        self.client.log_text(self.parent_run_id, pareto_csv(front), "pareto/pareto_front.csv")
        self.client.log_text(self.parent_run_id, pareto_csv(candidates), "pareto/all_trials.csv")
        for name, document in documents.items():
            self.client.log_text(self.parent_run_id, _as_text(name, document), name)
        self._log_pareto_report(cloud, objectives)
        if artifact_dir is not None:
            self.client.log_artifacts(self.parent_run_id, artifact_dir, "optimized_model")
        self.mark_trials(cloud, {n for n in earlier if n is not None})
        self._log_precision(chosen, tuned)

    def _log_precision(self, chosen: int | None, tuned: dict[str, Any] | None) -> None:
        """The chosen trial's run names what an int8 choice keeps in float."""
        precision = (tuned or {}).get("precision")
        run_id = None if chosen is None else self._trial_runs.get(chosen)
        if precision is None or run_id is None:
            return
        nodes = precision["float_nodes"]
        shown = "unknown" if nodes is None else ", ".join(nodes) or "none"
        self.client.set_tag(run_id, FLOAT_NODES_TAG, shown[:5000])
        self.client.log_text(run_id, _as_text("precision.json", precision), "precision.json")

    def _log_experiment_review(
        self, objectives: Sequence[Metric], links: list[tuple[str, str]]
    ) -> None:
        """The experiment's tags for its review: the study's saved view of the runs table, the
        metric MLflow's charts start with, and the description that links to both."""
        selection = (self._request.get("selection") or {}).get("strategy", "")
        ranked_by = selection_objective(selection)
        view_key, view = runs_view(self.study, objectives, ranked_by, _now_ms())
        with EXPERIMENT_TAGS:
            current = self.client.get_experiment(self.experiment_id).tags.get(NOTE_TAG)
            for key, value in (
                (view_key, view),
                (PRIMARY_METRIC_TAG, ranked_by.name),
                (NOTE_TAG, experiment_note(current, self.study, links)),
            ):
                set_experiment_tag(self.client, self.experiment_id, key, value)

    def _log_pareto_report(self, cloud: list[Any], objectives: Sequence[Metric]) -> None:
        selection = (self._request.get("selection") or {}).get("strategy")
        shown = shown_metrics(objectives, selection)
        if len(shown) < 2 or not cloud:
            return
        title = f"{self.study}: {len(cloud)} measured configurations"
        lines = [f"objectives: {', '.join(m.name for m in objectives)}; selection: {selection}"]
        self.client.log_text(
            self.parent_run_id, pareto_html(cloud, shown, title, lines), "pareto/pareto_report.html"
        )
        with tempfile.TemporaryDirectory() as tmp:
            plot = Path(tmp) / "pareto_front.png"
            pareto_png(cloud, shown, title, plot)
            self.client.log_artifact(self.parent_run_id, str(plot), "pareto")

    def log_comparison(self, comparison: dict[str, Any]) -> None:
        """A re-tune's choice against the previous tuning's, measured in the same paired
        rounds (a `PreviousComparison` document): comparison.json, its paired ratios as
        against_previous.* metrics (none where the configuration did not change or the
        previous one was not measured: an earlier round's are then NaN), its sentence as a
        tag, and a tag naming the previous parent run."""
        self._wait_for_trials()
        figures = comparison_figures(comparison)
        logged = self.client.get_run(self.parent_run_id).data.metrics
        stale = {k: math.nan for k in logged if k.startswith(AGAINST_PREVIOUS)}
        self.client.log_batch(self.parent_run_id, metrics=self._metrics({**stale, **figures}))
        self.client.set_tag(self.parent_run_id, PREVIOUS_RUN_TAG, comparison["previous"]["run_id"])
        self.client.set_tag(self.parent_run_id, COMPARISON_TAG, comparison["text"][:5000])
        current = {"study": self.study, "run_id": self.parent_run_id}
        document = {"current": current, **comparison}
        self.client.log_text(self.parent_run_id, _as_text("c.json", document), "comparison.json")

    def finish(self, status: str) -> None:
        """Write the queued trials and stop the writer, then end the parent run, even when a
        deferred write failed or the writer hung (its error is raised after)."""
        self._closed = True
        writer, self._writer = self._writer, None
        try:
            if writer is not None:
                writer.close()
        finally:
            self.client.set_terminated(self.parent_run_id, status=status)

    def artifact_uri(self, path: str) -> str:
        return f"runs:/{self.parent_run_id}/{path}"

    def _check_open(self) -> None:
        if self._closed:
            raise TrackerClosed(f"the tracker of study {self.study!r} is finished")


def _run_name(number: int, roles: list[str]) -> str:
    """`trial-3`, `trial-3 (chosen)`, `trial-0 (baseline)` or `trial-0 (chosen, baseline)`:
    28 characters at most for trial numbers below 10,000, what the saved view's Run Name
    column shows uncut."""
    return f"trial-{number} ({', '.join(roles)})" if roles else f"trial-{number}"


def _finished(metrics: dict[str, Any] | None, tags: dict[str, str]) -> bool:
    """Whether a trial's run ended well: it measured, or repeats a trial that did (its
    figures are that trial's)."""
    return (bool(metrics) or REPEAT_TAG in tags) and tags.get("status", "ok") in MEASURED


def _trial_tag(tags: dict[str, str], name: str) -> int | None:
    value = tags.get(name)
    return int(value) if value is not None and value.isdigit() else None


def _now_ms() -> int:
    return int(time.time() * 1000)


def _param(value: Any) -> str:
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _as_text(name: str, document: Any) -> str:
    if isinstance(document, str):
        return document
    if name.endswith((".yaml", ".yml")):
        import yaml

        return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    return json.dumps(document, indent=2, default=str)
