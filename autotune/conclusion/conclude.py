"""After the search: the feasible Pareto front, the finalists head to head, the export of
the chosen configuration's optimized model, the tuned file, and all of it in the tracker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.conclusion.decision import headline_metrics
from autotune.conclusion.head_to_head import Revalidation, Revalidator
from autotune.conclusion.previous import PreviousChoice, previous_choice
from autotune.conclusion.tuned_file import (
    ConstraintOutcome,
    TunedConfig,
    precision_choice,
    reported,
)
from autotune.conclusion.unmet import infeasible_message
from autotune.core.artifacts import previous_export
from autotune.core.contract import ArtifactInfo, HardwareProfile, ModelInfo, TrialSpec, Workload
from autotune.core.errors import NoFeasibleConfiguration
from autotune.core.metrics import BOUNDS, OBJECTIVES, TOP1_AGREEMENT
from autotune.requests.request import TuningRequest
from autotune.results.records import Candidate
from autotune.search.front import pareto_front
from autotune.tracking import is_number

if TYPE_CHECKING:
    from autotune.execution.base import Executor
    from autotune.results.store import ResultStore
    from autotune.tracking import Tracker


@dataclass
class TuneOutcome:
    study_name: str
    baseline: Candidate
    candidates: list[Candidate]
    front: list[Candidate]
    tuned: TunedConfig | None
    n_trials: int
    notes: list[str] = field(default_factory=list)


@dataclass
class Conclusion:
    """Turns a searched study into its outcome."""

    request: TuningRequest
    workload: Workload
    model_info: ModelInfo
    profile: HardwareProfile
    executor: Executor
    store: ResultStore
    tracker: Tracker
    artifact_dir: Path
    on_phase: Callable[[str], None]
    # A re-tune's previous tuned document: its choice is measured head to head with this one.
    previous_tuned: dict[str, Any] | None = None

    def conclude(self, baseline: Candidate) -> TuneOutcome:
        objectives = [OBJECTIVES[o] for o in self.request.objectives]
        candidates = [r.candidate() for r in self.store.completed()]
        feasible = [c for c in candidates if c.feasible]
        front = pareto_front(feasible, objectives)
        energy_sources = sorted({str(c.metrics["energy_source"]) for c in candidates})
        outcome = TuneOutcome(
            self.store.name, baseline, candidates, front, None, self.store.counted()
        )
        tags = {
            "energy_source": ",".join(energy_sources),
            "n_feasible": str(len(feasible)),
            "baseline_trial": str(baseline.trial_number),
        }
        if "estimate" in energy_sources:
            outcome.notes.append(
                "energy figures are estimates from CPU time and a power model, not measurements"
            )
        if not front:
            summary = prefixed("baseline", baseline.metrics)
            self.tracker.log_results(candidates, front, objectives, summary, {}, None, tags)
            self.tracker.finish("FINISHED")
            raise NoFeasibleConfiguration(
                infeasible_message(
                    candidates, self.request.constraints.model_dump(exclude_none=True)
                )
            )
        self._finalists_head_to_head(front, baseline, outcome, tags)
        self.tracker.finish("FINISHED")
        return outcome

    def _finalists_head_to_head(
        self,
        front: list[Candidate],
        baseline: Candidate,
        outcome: TuneOutcome,
        tags: dict[str, str],
    ) -> None:
        """The front's finalists head to head, the chosen one exported, and what was decided
        logged and put into `outcome`."""
        revalidation = Revalidator(
            self.request,
            self.workload,
            self.store.name,
            self.executor,
            self.store,
            self.on_phase,
            self._previous_choice(outcome.candidates, baseline),
        ).revalidate(front, baseline)
        if revalidation.reused:
            outcome.notes.append(
                "nothing new was measured since the last head-to-head: its figures are reused "
                "(validation.remeasure_on_resume: true measures the finalists again)"
            )
        self.tracker.log_revalidation(revalidation.report)
        chosen = revalidation.chosen
        outcome.baseline = revalidation.baseline
        artifact = self._export(chosen, reuse=revalidation.reused, notes=outcome.notes)
        outcome.tuned = self._tuned_config(revalidation, artifact.path)
        agreement = agreement_note(self.request.metric.kind, chosen.metrics)
        if agreement is not None:
            outcome.notes.append(agreement)
        tags.update(
            {
                "chosen_trial": str(chosen.trial_number),
                "artifact_sha256": artifact.sha256,
                "autotune.headline": revalidation.headline.text,
                "autotune.conditions": revalidation.headline.conditions,
            }
        )
        figures = {
            **prefixed("baseline", revalidation.baseline.metrics),
            **prefixed("tuned", chosen.metrics),
            **headline_metrics(revalidation.headline),
        }
        tuned = outcome.tuned.model_dump(mode="json")
        objectives = [OBJECTIVES[o] for o in self.request.objectives]
        artifact_dir = str(Path(artifact.path).parent)
        self.tracker.log_results(
            outcome.candidates, outcome.front, objectives, figures, {"tuned.yaml": tuned},
            artifact_dir, tags,
        )  # fmt: skip
        if outcome.tuned.previous is not None:
            self.tracker.log_comparison(outcome.tuned.previous.model_dump(mode="json"))

    def _previous_choice(
        self, candidates: list[Candidate], baseline: Candidate
    ) -> PreviousChoice | None:
        """A re-tune's previous choice, measured by this study's trial of its configuration
        (the baseline's where it is the unmodified model)."""
        if self.previous_tuned is None:
            return None
        return previous_choice(self.previous_tuned, [baseline, *candidates])

    def _export(self, chosen: Candidate, reuse: bool, notes: list[str]) -> ArtifactInfo:
        """The chosen configuration's optimized model; where the head-to-head was reused
        (nothing new measured), the one the last run exported, if it is still whole there."""
        if reuse:
            directory = self.artifact_dir.resolve()
            previous = previous_export(directory, chosen.config, self.model_info.sha256)
            if previous is not None:
                notes.append(f"the optimized model exported last time is reused ({previous.path})")
                return previous
        spec = TrialSpec(
            study=self.store.name,
            trial_number=chosen.trial_number,
            purpose="export",
            workload=self.workload,
            config=chosen.config,
            measurement=self.request.measurement,
        )
        self.artifact_dir.mkdir(parents=True, exist_ok=True)
        self.on_phase("export: the optimized model")
        return self.executor.export(spec, str(self.artifact_dir.resolve()))

    def _tuned_config(self, revalidation: Revalidation, artifact_path: str) -> TunedConfig:
        request = self.request
        chosen = revalidation.chosen
        constraints = {
            name: ConstraintOutcome(
                bound=bound,
                value=float(chosen.metrics[BOUNDS[name].metric.name]),
                met=chosen.violations[name] <= 0,
            )
            for name, bound in request.constraints.model_dump(exclude_none=True).items()
        }
        record = next(r for r in self.store.completed() if r.number == chosen.trial_number)
        software = record.provenance.software if record.provenance is not None else {}
        model = request.model or self.workload.model  # a replay's request may have none
        info = self.model_info
        return TunedConfig(
            config=chosen.config,
            metrics=reported(chosen.metrics, request.cost),
            baseline=reported(revalidation.baseline.metrics, request.cost),
            metrics_from=metrics_source(revalidation),
            constraints=constraints,
            model={"source": model.onnx or model.entry_point or "", "sha256": info.sha256},
            hardware={"fingerprint": self.profile.fingerprint, **self.profile.model_dump()},
            software=software,
            study={
                "name": self.store.name,
                "storage": self.store.location,
                "n_trials": self.store.counted(),
                "trial_number": chosen.trial_number,
            },
            mlflow={
                "tracking_uri": request.tracking.uri,
                "experiment_id": self.tracker.experiment_id,
                "run_id": self.tracker.parent_run_id,
            },
            artifact=artifact_path,
            precision=precision_choice(chosen.config, Path(artifact_path)),
            headline=revalidation.headline,
            revalidation=revalidation.report,
            previous=revalidation.previous,
        )


def metrics_source(revalidation: Revalidation) -> str:
    """Where a tuned file's figures come from, in words."""
    rounds = revalidation.report.get("rounds", 0)
    chosen = revalidation.chosen.trial_number
    if not rounds:
        return f"the search's measurement of trial {chosen} (no head-to-head rounds)"
    stored = " (stored by an earlier run of the study)" if revalidation.reused else ""
    return (
        f"the head-to-head{stored}: the chosen configuration (trial {chosen}) and the unmodified "
        f"model timed in {rounds} paired rounds, each figure the median of its rounds; accuracy "
        "as the search judged it. The search's own figures are the trial's in the study"
    )


def closest_to_bounds(
    candidates: list[Candidate], constraints: dict[str, float]
) -> dict[str, ConstraintOutcome]:
    """Where a study found nothing feasible: for each bound, the measured value closest to it
    over every configuration, and whether any configuration met it (each bound may be met by
    some configuration and yet none meets them all)."""
    closest = {}
    for name, bound in constraints.items():
        metric = BOUNDS[name].metric.name
        scored = [c for c in candidates if name in c.violations and metric in c.metrics]
        if scored:
            best = min(scored, key=lambda c: c.violations[name])
            value = float(best.metrics[metric])
            closest[name] = ConstraintOutcome(
                bound=bound, value=value, met=best.violations[name] <= 0
            )
    return closest


def prefixed(prefix: str, metrics: dict[str, Any]) -> dict[str, float]:
    return {f"{prefix}.{k}": float(v) for k, v in metrics.items() if is_number(v)}


def agreement_note(kind: str, metrics: dict[str, Any]) -> str | None:
    """Where the model's outputs look like class scores and the request judged it otherwise
    than by top-1, what the chosen configuration's top-1 agreement is, and how to judge by it."""
    agreement = metrics.get(TOP1_AGREEMENT.name)
    if agreement is None:
        return None
    return (
        f"the outputs look like class scores: the chosen configuration's top-1 class is the "
        f"unmodified model's on {agreement:.1%} of the samples ({kind} {metrics['accuracy']:.4f});"
        " where the top-1 class is what counts, judge by it: metric: {kind: agreement}"
    )
