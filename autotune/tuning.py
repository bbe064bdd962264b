"""The tune use case end to end: request file -> coordinator -> tuned-config file."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune.conclusion.conclude import Conclusion, TuneOutcome, closest_to_bounds
from autotune.conclusion.tuned_file import ConstraintOutcome
from autotune.core.contract import ModelInfo, NodeKind, Workload
from autotune.core.errors import Interrupted, RequestError
from autotune.core.metrics import OBJECTIVES
from autotune.execution.base import Executor
from autotune.execution.build import make_executors
from autotune.execution.config import BaseExecutorConfig, ReplayConfig
from autotune.execution.replay import ReplayExecutor
from autotune.kinds_at_once import (
    KindEnd,
    KindStudy,
    KindTuned,
    LabelledLines,
    ProgressFactory,
    kind_label,
    tune_at_once,
    write_index,
)
from autotune.requests.checks import check_workload
from autotune.requests.request import TuningRequest, load_request
from autotune.results import OptunaStore, StudyIdentity, opened_store
from autotune.results.leases import schema_lock
from autotune.results.records import Candidate
from autotune.search.budget import SearchBudget
from autotune.search.coordinator import STALE_AFTER_S, Coordinator, Tuning
from autotune.search.front import front_of
from autotune.search.observers import Display, Observer
from autotune.search.trackers import TrackerContext, make_trackers
from autotune.search.warm_start import WarmStart
from autotune.space.hardware import describe_kind
from autotune.space.search_space import (
    EffectiveSpace,
    effective_space,
    load_space,
    resolve_space_path,
)
from autotune.strategies import (
    DEFAULT_STRATEGY,
    STRATEGIES,
    Strategy,
    make_strategy,
    strategy_names,
)
from autotune.tracking import (
    MlflowTracker,
    NullTracker,
    Tracker,
    artifact_location,
    is_database_store,
)
from autotune.tune_options import TuneOptions


def run_tune(
    request_file: Path, options: TuneOptions, progress: ProgressFactory | None = None
) -> tuple[TuneOutcome, Path]:
    """Validate everything, tune one kind of node, write the tuned-config file; return it and
    its path. Slots on several kinds need a target (`run_tune_kinds` tunes each)."""
    (only,) = run_tune_kinds(request_file, options, progress, several=False).kinds
    return only.outcome, only.path


def run_tune_kinds(
    request_file: Path,
    options: TuneOptions,
    progress: ProgressFactory | None = None,
    several: bool = True,
    observers: Sequence[Observer] = (),
) -> Tuned:
    """Validate everything and tune each kind of node the trials run on, one study each."""
    request = load_request(request_file, options.overrides(), replay=options.replay is not None)
    if options.timeout_s is not None and options.trials is None:
        # A time budget alone on the command line replaces the request's trial count.
        budget = request.budget.model_copy(update={"trials": None})
        request = request.model_copy(update={"budget": budget})
    return tune_kinds(request, request_file.parent, options, progress, several, observers)


@dataclass
class TuneSettings:
    study_name: str
    storage: str
    artifact_dir: Path
    n_trials: int | None
    timeout_s: float | None
    seed: int | None = None
    sampler: str = DEFAULT_STRATEGY
    # A new MLflow experiment's artifact root (`autotune.tracking.artifact_location`).
    mlflow_artifacts: str | Path | None = None


@dataclass
class _Plan:
    """Where the trials run, and how the space is found once the model and the kind of node
    are known."""

    workload: Workload
    executor: Executor
    space: Callable[[ModelInfo, NodeKind], EffectiveSpace]


@dataclass
class Tuned:
    """What a tuning wrote: how each kind's study ended, and the tuned file (one kind's, or
    the list of several kinds' outcomes and files)."""

    ends: list[KindEnd]
    path: Path
    # What the studies are named after (`--study`, else the request's name), and so the
    # tuned model's registered name.
    name: str

    @property
    def kinds(self) -> list[KindTuned]:
        """The kinds whose study gave a tuned configuration."""
        return [end for end in self.ends if isinstance(end, KindTuned)]


def _measured_plans(
    request: TuningRequest,
    base_dir: Path,
    options: TuneOptions,
    config: BaseExecutorConfig,
    several: bool,
) -> list[_Plan]:
    space_path = resolve_space_path(options.space or request.search_space)
    space_file = load_space(space_path)
    workload = request.workload(base_dir)
    check_workload(workload)  # before an executor (a Ray cluster) starts

    def space(info: ModelInfo, kind: NodeKind) -> EffectiveSpace:
        return effective_space(
            space_file, kind.profile, str(space_path), info, cores_per_slot=kind.cpus_per_slot
        )

    if options.on_note is not None:
        options.on_note(config.start_note())
    executors = make_executors(
        config, request.target, several, request.cluster.node_wait_s, options.on_note
    )
    return [_Plan(workload, executor, space) for executor in executors]


def _replay_plan(config: ReplayConfig, options: TuneOptions) -> _Plan:
    """Trials answered from a recorded table on simulated slots: nothing is probed, loaded
    or measured, and the space is the table's unless a space file is given."""
    (executor,) = make_executors(config)
    table = executor.table
    if options.space is None:
        space = table.space(config.table.name)
    else:
        space_path = resolve_space_path(options.space)
        space = table.space_from(load_space(space_path), str(space_path))
    return _Plan(table.workload(), executor, lambda info, kind: space)


def tune_request(
    request: TuningRequest,
    base_dir: Path,
    options: TuneOptions,
    progress: ProgressFactory | None = None,
    observers: Sequence[Observer] = (),
) -> tuple[TuneOutcome, Path]:
    """Tune a validated request, whose relative paths are relative to `base_dir`, on one kind
    of node (where the slots span several, the request's or the options' target chooses);
    `observers` are told its trials, front and phases after its tracker."""
    (only,) = tune_kinds(
        request, base_dir, options, progress, several=False, observers=observers
    ).kinds
    return only.outcome, only.path


def tune_kinds(
    request: TuningRequest,
    base_dir: Path,
    options: TuneOptions,
    progress: ProgressFactory | None = None,
    several: bool = True,
    observers: Sequence[Observer] = (),
) -> Tuned:
    """Tune a validated request on each kind of node its executor's slots run on, one study
    and one tuned file per kind. One kind: its outcome, or the exception that ended its study.
    Several: the studies, named `NAME@FINGERPRINT`, run at once, each on its kind's nodes;
    the tuned file (`tuned.yaml`) lists how each ended, whatever that was. Every kind's study
    tells `observers`, from its own thread where there are several (`TrialTold.study` says
    which)."""
    if options.sampler not in STRATEGIES:
        raise RequestError("sampler", f"must be one of {strategy_names()}", options.sampler)
    config = options.executor_config()
    if isinstance(config, ReplayConfig):
        plans = [_replay_plan(config, options)]
    else:
        plans = _measured_plans(request, base_dir, options, config, several)
    study_name = options.study or request.name
    out_dir, kinds_dir = output_dirs(options, study_name)
    out_file = options.out or out_dir / "tuned.yaml"
    # One experiment for every kind: its artifact root is the tuning's, not a kind's.
    options = replace(options, mlflow_artifacts=mlflow_artifacts(request, options, out_dir))

    def close() -> None:
        for plan in plans:
            plan.executor.close()

    try:
        if len(plans) == 1:
            only = _tune_kind(
                plans[0], request, study_name, out_dir, out_file, options, progress, observers
            )
            return Tuned([only], out_file, study_name)
        stop = options.stop or threading.Event()
        options = replace(options, stop=stop)
        studies = [
            _kind_study(plan, request, study_name, kinds_dir, options, progress, observers)
            for plan in plans
        ]
        ends = tune_at_once(studies, stop, close)
    finally:
        close()
    write_index(out_file, ends)
    return Tuned(ends, out_file, study_name)


def _kind_study(
    plan: _Plan,
    request: TuningRequest,
    study_name: str,
    kinds_dir: Path,
    options: TuneOptions,
    progress: ProgressFactory | None,
    observers: Sequence[Observer],
) -> KindStudy:
    """One kind's study among several: its own directory and display."""
    (kind,) = plan.executor.kinds()
    name = f"{study_name}@{kind.fingerprint}"
    label = kind_label(kind)
    if options.kind_display is not None:
        display = options.kind_display(label)
    else:
        display = LabelledLines(label, options.on_note, options.on_phase, progress)
    display.note(f"{describe_kind(kind)}: study {name}")
    kind_dir = kinds_dir / name
    told = replace(options, on_note=display.note, on_phase=display.phase)

    def run() -> KindTuned:
        tuned_file = kind_dir / "tuned.yaml"
        return _tune_kind(
            plan, request, name, kind_dir, tuned_file, told, display.trials, observers
        )

    def closest() -> dict[str, ConstraintOutcome]:
        constraints = request.constraints.model_dump(exclude_none=True)
        with opened_store(name, request.storage, "study") as store:
            return closest_to_bounds([r.candidate() for r in store.completed()], constraints)

    return KindStudy(kind, name, run, closest)


DEFAULT_OUT = Path("autotune-out")


def output_dirs(options: TuneOptions, study_name: str) -> tuple[Path, Path]:
    """Where one kind's outputs go, and where each kind's directory (`NAME@FINGERPRINT`)
    goes when the tuning has several: the options' `out_dir`, else the directory of the
    tuned file `out`, for both; with neither, autotune-out/NAME and autotune-out."""
    chosen = options.out_dir or (options.out.parent if options.out is not None else None)
    if chosen is not None:
        return chosen, chosen
    return DEFAULT_OUT / study_name, DEFAULT_OUT


def mlflow_artifacts(
    request: TuningRequest, options: TuneOptions, out_dir: Path
) -> str | Path | None:
    """The artifact root a new MLflow experiment gets: the options' (the service's, under its
    data directory); else on a SQLite store beside its file; else, on another database, in
    `mlruns` beside the tuned output (MLflow's default would be ./mlruns of whatever
    directory the process runs in). An MLflow server chooses its own."""
    uri = request.tracking.uri
    if options.mlflow_artifacts is not None:
        return options.mlflow_artifacts
    if not is_database_store(uri) or artifact_location(uri) is not None:
        return None  # the server's choice, or beside the SQLite file
    return out_dir / "mlruns"


def _tune_kind(
    plan: _Plan,
    request: TuningRequest,
    study_name: str,
    out_dir: Path,
    out_file: Path,
    options: TuneOptions,
    progress: ProgressFactory | None,
    observers: Sequence[Observer],
) -> KindTuned:
    settings = TuneSettings(
        study_name=study_name,
        storage=request.storage,
        artifact_dir=out_dir / "model",
        n_trials=request.budget.trials,
        timeout_s=request.budget.timeout_s,
        seed=options.seed,
        sampler=options.sampler,
        mlflow_artifacts=options.mlflow_artifacts,
    )
    executor = plan.executor
    if options.on_note is not None and not isinstance(executor, ReplayExecutor):
        options.on_note("start: loading and inspecting the model on a trial worker")
    inspection = executor.inspect(plan.workload)
    (kind,) = inspection.kinds
    if options.stop is not None and options.stop.is_set():
        raise Interrupted(
            f"stopped before study {study_name} began; run the same command to start it"
        )
    model_info = inspection.model
    space = plan.space(model_info, kind)
    shown_trials = nullcontext(None) if progress is None else progress(settings.n_trials)
    with shown_trials as update:
        tuning = Tuning(
            request, plan.workload, model_info, space, kind.profile, settings.artifact_dir
        )
        shown = Display(update, options.on_note, options.on_phase)
        added = make_trackers(options.trackers, TrackerContext(study_name, out_file.parent))
        tracker = None if options.track else NullTracker(settings.study_name)
        told = [shown, *observers, *added]
        outcome = run_study(tuning, settings, executor, options, told, tracker)
    if isinstance(executor, ReplayExecutor):
        outcome.notes.append(_replay_note(executor))
    assert outcome.tuned is not None
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(outcome.tuned.to_yaml(), encoding="utf-8")
    return KindTuned(kind, outcome, out_file)


def run_study(
    tuning: Tuning,
    settings: TuneSettings,
    executor: Executor,
    options: TuneOptions,
    observers: list[Observer],
    tracker: Tracker | None = None,
) -> TuneOutcome:
    """Open (or resume) the study and its tracking, run the coordinator on it, then conclude
    it (`search_then_conclude`); the tracker and then `observers` are told as it goes.
    Without a `tracker`, the study is tracked in the request's MLflow experiment."""
    request = tuning.request
    strategy = make_strategy(settings.sampler, tuning.space, request, settings.seed)
    store = open_study_store(tuning, settings, strategy)
    try:
        if tracker is None:
            with schema_lock(settings.storage), store.locked():
                tracker = MlflowTracker(
                    request.tracking.uri,
                    request.tracking.experiment,
                    settings.study_name,
                    artifact_root=settings.mlflow_artifacts,
                )
        log_study_inputs(tracker, tuning, settings, options.warm_start)
        coordinator = Coordinator(
            tuning,
            store,
            strategy,
            executor,
            tracker,
            SearchBudget(settings.n_trials, settings.timeout_s),
            warm_start=options.warm_start,
            observers=observers,
            stop=options.stop or threading.Event(),
            stale_after_s=options.stale_after_s or STALE_AFTER_S,
        )
        return search_then_conclude(coordinator, options.previous_tuned)
    finally:
        store.close()


def search_then_conclude(
    coordinator: Coordinator, previous_tuned: dict[str, Any] | None = None
) -> TuneOutcome:
    """The coordinator's search, then the study's conclusion (`Conclusion.conclude`: the
    finalists head to head, the export, the tuned file), measured against `previous_tuned`
    on a re-tune. A study that fails or is stopped, in either, finishes its tracker so."""
    tuning, tracker = coordinator.tuning, coordinator.tracker
    try:
        baseline = coordinator.run()
        conclusion = Conclusion(
            tuning.request,
            tuning.workload,
            tuning.model_info,
            tuning.profile,
            coordinator.executor,
            coordinator.store,
            tracker,
            tuning.artifact_dir,
            coordinator.told_to.on_phase,
            previous_tuned,
        )
        return conclusion.conclude(baseline.candidate())
    except Interrupted:
        tracker.finish("KILLED")
        raise
    except BaseException:
        tracker.finish("FAILED")
        raise


def open_study_store(tuning: Tuning, settings: TuneSettings, strategy: Strategy) -> OptunaStore:
    identity = StudyIdentity(
        model_sha256=tuning.model_info.sha256,
        objectives=list(tuning.request.objectives),
        space=tuning.space.name,
        hardware_fingerprint=tuning.profile.fingerprint,
    )
    directions = [OBJECTIVES[o].direction.value for o in tuning.request.objectives]
    return OptunaStore.open(
        settings.study_name, settings.storage, directions, strategy.sampler(), identity
    )


def log_study_inputs(
    tracker: Tracker, tuning: Tuning, settings: TuneSettings, warm_start: WarmStart | None
) -> None:
    request, info = tuning.request, tuning.model_info
    params: dict[str, Any] = {
        "model_kind": info.kind,
        "model_sha256": info.sha256,
        "n_eval_samples": info.n_samples,
        "objectives": ",".join(request.objectives),
        "search_space": tuning.space.name,
        "selection": request.selection.strategy,
        "storage": settings.storage,
    }
    for name, bound in request.constraints.model_dump(exclude_none=True).items():
        params[f"constraint.{name}"] = bound
    tags = {"energy_source": "pending", "hardware_fingerprint": tuning.profile.fingerprint}
    if warm_start is not None:
        tags["autotune.warm_start"] = warm_start.source_study
    tracker.log_study_inputs(
        params=params,
        documents={
            "request.yaml": request.model_dump(mode="json"),
            "hardware.json": tuning.profile.model_dump(mode="json"),
            "space.json": tuning.space.model_dump(mode="json"),
        },
        tags=tags,
    )


def _replay_note(executor: ReplayExecutor) -> str:
    return (
        f"replayed from {executor.table.path}: {executor.measurements} measurements and "
        f"{executor.remeasurements} re-measurements answered, "
        f"{executor.simulated_seconds:g} s of simulated device time"
    )


def study_front(study_name: str, storage: str, storage_field: str = "storage") -> list[Candidate]:
    """The feasible Pareto front of a stored study, over the objectives it was run with;
    a storage that does not exist is a bad `storage_field` (nothing is created)."""
    with opened_store(study_name, storage, "study", storage_field) as store:
        return front_of(store)
