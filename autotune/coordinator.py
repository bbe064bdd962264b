"""The coordinator: an Optuna multi-objective study driven by ask/tell over an Executor.

Order of work (the workload was inspected before, so bad input never gets this far):
open or resume the study, measure the baseline (the unmodified model, always trial 0),
keep every executor slot busy until the budget is spent, then pick the tuned
configuration from the feasible Pareto front and export its optimized model.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.contract import (
    Contention,
    Entrant,
    EntrantOutcome,
    HeadToHeadResult,
    HeadToHeadSpec,
    ModelInfo,
    Provenance,
    TrialMetrics,
    TrialResult,
    TrialSpec,
    Workload,
    variant_key,
)
from autotune.errors import (
    AutotuneError,
    Interrupted,
    MeasurementContended,
    NoFeasibleConfiguration,
    RequestError,
)
from autotune.hardware import HardwareProfile
from autotune.leases import Heartbeat, Owner, claim, lost_trials, schema_lock, study_lock
from autotune.metrics import OBJECTIVES, Metric
from autotune.pareto import Candidate, by_contribution, pareto_front, select
from autotune.request import Constraints, Cost, TuningRequest
from autotune.space import EffectiveSpace
from autotune.stores import require_existing
from autotune.strategy import (
    ACCURACY_VIOLATION,
    UNSUPPORTED_LIKE,
    Ledger,
    config_key,
    designed_configs,
    make_strategy_sampler,
    violates_accuracy,
)
from autotune.strategy import NAME as STRATEGY
from autotune.tracking import (
    Tracker,
    contention_figures,
    contention_tags,
    headline_metrics,
    is_number,
)
from autotune.tuned import ConstraintOutcome, TunedConfig, reported
from autotune.validation import (
    Headline,
    changes_from,
    decide,
    headline,
    nearest_neighbours,
    ratios_to,
    with_metrics,
)

if TYPE_CHECKING:
    import optuna

    from autotune.executors import Executor
    from autotune.warm_start import PreviousTrial, WarmStart

# Constraint name -> (metric it bounds, True when the bound is an upper bound).
CONSTRAINT_METRICS: dict[str, tuple[str, bool]] = {
    "max_accuracy_drop": ("accuracy_drop", True),
    "max_latency_p95_ms": ("latency_p95_ms", True),
    "max_latency_per_sample_ms": ("latency_per_sample_ms", True),
    "max_energy_per_sample_j": ("energy_per_sample_j", True),
    "max_memory_mb": ("peak_memory_mb", True),
    "min_throughput_per_s": ("throughput_per_s", False),
}

ProgressCallback = Callable[[int, int | None, TrialResult], None]
# A line for the user (a resumed study), or the phase the study is in after its search.
NoteCallback = Callable[[str], None]


# A trial lost to a dead worker or coordinator runs at most this many times in all.
MAX_ATTEMPTS = 3
# How often the coordinator looks for trials of dead coordinators, and how long a
# coordinator's heartbeat may be silent before its trials count as lost.
REAP_EVERY_S = 10.0
STALE_AFTER_S = 60.0
# How long storage calls keep retrying while the database is unreachable.
DATABASE_PATIENCE_S = 120.0
# Study user attribute: what the stored head-to-head ("revalidation") was decided on and the
# figures it gave, so that a resume that measured nothing new can reuse it.
REVALIDATION_STATE = "revalidation_state"


@dataclass
class Revalidation:
    chosen: Candidate
    baseline: Candidate
    report: dict[str, Any]
    headline: Headline
    reused: bool = False  # the stored head-to-head of an earlier round, not measured now


@dataclass
class TuneSettings:
    study_name: str
    storage: str
    artifact_dir: Path
    n_trials: int | None
    timeout_s: float | None
    seed: int | None = None
    sampler: str = STRATEGY


def make_sampler(name: str, seed: int | None) -> Any:
    """autotune's strategy (`autotune.strategy`) or one of Optuna's samplers as they come;
    constraints reach each through set_constraint."""
    import optuna

    samplers: dict[str, Callable[[], Any]] = {
        STRATEGY: lambda: make_strategy_sampler(seed),
        "tpe": lambda: optuna.samplers.TPESampler(multivariate=True, seed=seed),
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
        "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed),
        "gp": lambda: optuna.samplers.GPSampler(seed=seed),
    }
    if name not in samplers:
        raise RequestError("sampler", f"must be one of {sorted(samplers)}", name)
    return samplers[name]()


@dataclass
class TuneOutcome:
    study_name: str
    baseline: Candidate
    candidates: list[Candidate]
    front: list[Candidate]
    tuned: TunedConfig | None
    n_trials: int
    notes: list[str] = field(default_factory=list)


def constraint_violations(constraints: Constraints, metrics: dict[str, Any]) -> dict[str, float]:
    """Each bound as Optuna wants it: a value <= 0 means the bound is met."""
    violations = {}
    for name, bound in constraints.model_dump(exclude_none=True).items():
        metric, upper = CONSTRAINT_METRICS[name]
        value = float(metrics[metric])
        violations[name] = value - bound if upper else bound - value
    return violations


@contextmanager
def _stop_on_sigint(coordinator: Coordinator) -> Iterator[None]:
    """The first Ctrl-C stops asking for trials and lets the running ones finish; a second
    one interrupts at once (the study stays resumable: lost trials are reaped)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        if coordinator.stopping:
            raise KeyboardInterrupt
        coordinator.stop.set()

    previous = signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class Coordinator:
    def __init__(
        self,
        request: TuningRequest,
        workload: Workload,
        model_info: ModelInfo,
        space: EffectiveSpace,
        profile: HardwareProfile,
        executor: Executor,
        settings: TuneSettings,
        tracking_uri: str,
        experiment: str,
        on_progress: ProgressCallback | None = None,
        stop: threading.Event | None = None,
        warm_start: WarmStart | None = None,
        previous_tuned: dict[str, Any] | None = None,
        on_note: NoteCallback | None = None,
        on_phase: NoteCallback | None = None,
    ) -> None:
        self.request = request
        self.workload = workload
        self.model_info = model_info
        self.space = space
        self.profile = profile
        self.executor = executor
        self.settings = settings
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.on_progress = on_progress or (lambda done, total, result: None)
        self.on_note = on_note or (lambda text: None)
        self.on_phase = on_phase or (lambda text: None)
        self.objectives: list[Metric] = [OBJECTIVES[o] for o in request.objectives]
        self.owner = Owner()
        self.stale_after_s = STALE_AFTER_S
        # Set from a signal handler or another thread: stop asking, let running trials end.
        self.stop = stop or threading.Event()
        self.warm_start = warm_start
        self.previous_tuned = previous_tuned
        # Trials told from a previous study's measurement: trial number -> "<study>#<trial>".
        self._reused_from: dict[int, str] = {}
        self._baseline_software: dict[str, str] | None = None
        self._ledger: Ledger | None = None

    @property
    def stopping(self) -> bool:
        return self.stop.is_set()

    def run(self) -> TuneOutcome:
        rdb = _storage(self.settings.storage)
        try:
            return self._run(rdb)
        finally:
            rdb.engine.dispose()  # a runner process runs many jobs; each closes its own

    def _run(self, rdb: Any) -> TuneOutcome:
        info = self.model_info
        with schema_lock(self.settings.storage):
            study = self._open_study(info, rdb)
            with study_lock(self.settings.storage, self.settings.study_name):
                tracker = Tracker(self.tracking_uri, self.experiment, self.settings.study_name)
        self._note_resume(study)
        tags = {"energy_source": "pending", "hardware_fingerprint": self.profile.fingerprint}
        if self.warm_start is not None:
            tags["autotune.warm_start"] = self.warm_start.source_study
        tracker.log_study_inputs(
            params=self._study_params(info),
            documents={
                "request.yaml": self.request.model_dump(mode="json"),
                "hardware.json": self.profile.model_dump(mode="json"),
                "space.json": self.space.model_dump(mode="json"),
            },
            tags=tags,
        )
        try:
            with Heartbeat(study, self.owner), _stop_on_sigint(self):
                baseline = self._search(study, tracker)
            if self.stopping:
                raise Interrupted(
                    f"stopped by the user; run the same command to resume {study.study_name!r}"
                )
            return self._finish(study, tracker, info, baseline)
        except Interrupted:
            tracker.finish("KILLED")
            raise
        except BaseException:
            tracker.finish("FAILED")
            raise

    # -- study -------------------------------------------------------------------------

    def _open_study(self, info: ModelInfo, rdb: Any) -> optuna.Study:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = make_sampler(self.settings.sampler, self.settings.seed)
        # Coordinators starting together on a new database must not race to create it.
        with study_lock(self.settings.storage, self.settings.study_name):
            study = optuna.create_study(
                study_name=self.settings.study_name,
                storage=rdb,
                directions=[m.direction.value for m in self.objectives],
                sampler=sampler,
                load_if_exists=True,
            )
        identity = {
            "model_sha256": info.sha256,
            "objectives": list(self.request.objectives),
            "space": self.space.name,
            "hardware_fingerprint": self.profile.fingerprint,
        }
        stored = {k: study.user_attrs.get(k) for k in identity}
        if all(v is None for v in stored.values()):
            for key, value in identity.items():
                study.set_user_attr(key, value)
        elif stored != identity:
            changed = sorted(k for k in identity if stored[k] != identity[k])
            raise RequestError(
                "study",
                f"exists with a different {', '.join(changed)}; resume only the same tuning "
                "or choose another study name",
                self.settings.study_name,
            )
        return study

    def _note_resume(self, study: optuna.Study) -> None:
        done = _retrying(_counted_trials, study)
        if done:
            budget = self.settings.n_trials
            of = "" if budget is None else f" of {budget}"
            self.on_note(f"study {study.study_name}: {done}{of} trials done, re-using them")

    def _study_params(self, info: ModelInfo) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model_kind": info.kind,
            "model_sha256": info.sha256,
            "n_eval_samples": info.n_samples,
            "objectives": ",".join(self.request.objectives),
            "search_space": self.space.name,
            "selection": self.request.selection.strategy,
            "storage": self.settings.storage,
        }
        for name, bound in self.request.constraints.model_dump(exclude_none=True).items():
            params[f"constraint.{name}"] = bound
        return params

    # -- trials ------------------------------------------------------------------------

    def _search(self, study: optuna.Study, tracker: Tracker) -> Candidate:
        """Keep every slot busy until the budget is spent; return the baseline.

        The baseline (trial 0 of a new study) runs first; results that arrive before its
        accuracy is known wait for it. Lost trials (worker died) are retried on another
        slot; trials of dead coordinators are reaped and enqueued again. A trial that a
        warm start's measurement can answer is not run: its result is told from that one.
        """
        baseline = _baseline_candidate(study)
        accuracy_cache = _accuracy_by_variant(study)
        ledger = self._ledger = self._make_ledger(study)
        oom_batch = _smallest_oom_batch(study)
        started = time.monotonic()
        running: dict[int, tuple[optuna.Trial, TrialSpec]] = {}
        held: list[tuple[optuna.Trial, TrialSpec, TrialResult]] = []
        reused: list[TrialResult] = []
        last_reap = -REAP_EVERY_S
        while True:
            if baseline is None:  # another coordinator may have measured it meanwhile
                baseline = _retrying(_baseline_candidate, study)
                if baseline is not None:
                    self._tell_held(study, held, baseline, tracker)
            if time.monotonic() - last_reap >= REAP_EVERY_S:
                _retrying(self._reap, study, tracker, set(running))
                last_reap = time.monotonic()
            while len(running) < self.executor.slots and not self.stopping:
                excluded = self._infeasible_variants(accuracy_cache, baseline)
                trial = _retrying(self._ask, study, started, baseline is None, excluded)
                if trial is None:
                    break
                config = _retrying(self.space.sample, trial)
                known = accuracy_cache.get(variant_key(config))
                spec = self._spec(trial, config, known_accuracy=known)
                too_big = _exceeds_oom_batch(config, oom_batch)
                if too_big is not None and baseline is not None:
                    skipped = TrialResult.for_spec(spec, "skipped", too_big)
                    self._tell(study, trial, spec, skipped, None, tracker)
                    continue
                if ledger is not None and self._answered(
                    study, trial, spec, excluded, running, reused, ledger, tracker
                ):
                    continue
                spec, result = _retrying(self._from_warm_start, study, trial, spec, baseline)
                running[trial.number] = (trial, spec)
                if result is None:
                    self.executor.submit(spec)
                else:
                    reused.append(result)
            if not running:
                if baseline is not None:
                    return baseline
                if self.stopping or not self._wait_for_others(study, tracker):
                    raise AutotuneError("the baseline (unmodified model) was never measured")
                continue
            finished = reused.copy() if reused else self.executor.wait()
            reused.clear()
            for result in finished:
                trial, spec = running.pop(result.trial_number)
                if result.status == "lost" and spec.attempt + 1 < MAX_ATTEMPTS:
                    retry = spec.model_copy(update={"attempt": spec.attempt + 1})
                    self.executor.submit(retry)
                    running[trial.number] = (trial, retry)
                    continue
                if result.status == "oom":
                    _record_oom(oom_batch, spec.config)
                if result.metrics is not None:
                    accuracy_cache.setdefault(result.variant_key, result.metrics.accuracy)
                if trial.user_attrs.get("baseline") and baseline is None:
                    baseline = self._tell_baseline(study, trial, spec, result, tracker)
                    self._tell_held(study, held, baseline, tracker)
                elif baseline is None:
                    held.append((trial, spec, result))
                else:
                    self._tell_measured(study, trial, spec, result, baseline, tracker)
                if ledger is not None:
                    self._answer_repeats(
                        study, trial, spec, result, ledger, running, reused, tracker
                    )

    def _make_ledger(self, study: optuna.Study) -> Ledger | None:
        if self.settings.sampler != STRATEGY:
            return None
        ledger = Ledger(self.space, designed_configs(self.space, self.request), self.request)
        ledger.load(study)
        return ledger

    def _answered(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        spec: TrialSpec,
        excluded: set[str],
        running: dict[int, tuple[optuna.Trial, TrialSpec]],
        reused: list[TrialResult],
        ledger: Ledger,
        tracker: Tracker,
    ) -> bool:
        """Whether the strategy answers this trial without measuring it: its variant is known
        to violate the accuracy bound (is in `excluded`), it could not be built at another
        batch size or thread count, or its configuration was (or is being) measured."""
        if variant_key(spec.config) in excluded:
            skipped = TrialResult.for_spec(spec, "skipped", ACCURACY_VIOLATION)
            self._tell(study, trial, spec, skipped, None, tracker)
            return True
        unbuildable = ledger.unsupported_like(spec.config)
        if unbuildable is not None:
            reason = f"{UNSUPPORTED_LIKE} #{unbuildable.trial_number}: {unbuildable.reason}"
            self._tell(
                study, trial, spec, TrialResult.for_spec(spec, "skipped", reason), None, tracker
            )
            return True
        key = config_key(spec.config)
        outcome = ledger.finished.get(key)
        if outcome is None and key not in ledger.in_flight:
            ledger.in_flight[key] = trial.number
            return False
        if outcome is not None:
            self._reused_from[trial.number] = f"{study.study_name}#{outcome.trial_number}"
            running[trial.number] = (trial, spec)
            reused.append(outcome.result_for(spec))
        else:
            ledger.waiting.setdefault(ledger.in_flight[key], []).append((trial, spec))
        return True

    def _infeasible_variants(
        self, accuracy: dict[str, float], baseline: Candidate | None
    ) -> set[str]:
        """The variants known to violate the accuracy bound."""
        bound = self.request.constraints.max_accuracy_drop
        if baseline is None:
            return set()
        reference = float(baseline.metrics["accuracy"])
        return {v for v in accuracy if violates_accuracy(v, accuracy, reference, bound)}

    def _answer_repeats(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        spec: TrialSpec,
        result: TrialResult,
        ledger: Ledger,
        running: dict[int, tuple[optuna.Trial, TrialSpec]],
        reused: list[TrialResult],
        tracker: Tracker,
    ) -> None:
        """The repeats that waited for this trial, answered from its result. A measurement
        lost for good loses its repeats too: they do not count toward the budget."""
        for repeat, repeat_spec in ledger.settle(trial.number, spec, result):
            if result.status == "lost":
                lost = TrialResult.for_spec(repeat_spec, "lost", result.reason)
                self._tell(study, repeat, repeat_spec, lost, None, tracker)
                continue
            self._reused_from[repeat.number] = f"{study.study_name}#{trial.number}"
            running[repeat.number] = (repeat, repeat_spec)
            reused.append(
                TrialResult.for_spec(
                    repeat_spec,
                    result.status,
                    result.reason,
                    0.0,
                    result.metrics,
                    result.provenance,
                )
            )

    def _from_warm_start(
        self, study: optuna.Study, trial: optuna.Trial, spec: TrialSpec, baseline: Candidate | None
    ) -> tuple[TrialSpec, TrialResult | None]:
        """The spec, and the result of the warm start's measurement of this very configuration
        if that was made like a measurement now would be. Failing that, the spec learns the
        accuracy of its model variant where the warm start measured it on the same model.
        The baseline is always measured: it is this study's reference."""
        if self.warm_start is None or trial.user_attrs.get("baseline"):
            return spec, None
        now = self._provenance_now(study, baseline)
        previous = self.warm_start.measurement(spec.config, now)
        if previous is not None:
            self._reused_from[trial.number] = f"{self.warm_start.source_study}#{previous.number}"
            return spec, _reused_result(spec, previous)
        if spec.known_accuracy is None:
            same_model = {k: v for k, v in now.items() if k in ("model_sha256", "software")}
            accuracy = self.warm_start.accuracy(variant_key(spec.config), same_model)
            spec = spec.model_copy(update={"known_accuracy": accuracy})
        return spec, None

    def _provenance_now(self, study: optuna.Study, baseline: Candidate | None) -> dict[str, Any]:
        """What the provenance of a measurement made now says. The workers' software versions
        are known from the baseline's result; a trial asked while the baseline still runs (on
        another slot) is matched on model, hardware and measurement settings alone."""
        now: dict[str, Any] = {
            "model_sha256": self.model_info.sha256,
            "hardware_fingerprint": self.profile.fingerprint,
            "measurement": self.request.measurement.model_dump(mode="json"),
        }
        if baseline is not None and self._baseline_software is None:
            trial = _baseline_trial(study)
            assert trial is not None
            self._baseline_software = trial.user_attrs["provenance"]["software"]
        if self._baseline_software is not None:
            now["software"] = self._baseline_software
        return now

    def _tell_held(
        self,
        study: optuna.Study,
        held: list[tuple[optuna.Trial, TrialSpec, TrialResult]],
        baseline: Candidate,
        tracker: Tracker,
    ) -> None:
        """Results that waited for the baseline's accuracy, told now that it is known."""
        for trial, spec, result in held:
            self._tell_measured(study, trial, spec, result, baseline, tracker)
        held.clear()

    def _ask(
        self,
        study: optuna.Study,
        started: float,
        need_baseline: bool,
        excluded: set[str],
    ) -> optuna.Trial | None:
        """Under the study lock: enqueue the baseline if nobody has, check the budget
        against every coordinator's trials, and claim a new trial."""
        from optuna.trial import TrialState

        with study_lock(self.settings.storage, self.settings.study_name):
            if need_baseline and not _baseline_in_flight(study):
                self._enqueue_baseline(study)
            states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
            used = study._storage.get_n_trials(study._study_id, states)
            # A waiting baseline is asked whatever the budget: every other result waits on it.
            waiting_baseline = need_baseline and _baseline_waiting(study)
            if not waiting_baseline and not self._budget_left(used, started):
                return None
            self._enqueue_proposal(study, excluded)
            trial = _retrying(study.ask)
            claim(study, trial, self.owner)
            return trial

    def _enqueue_baseline(self, study: optuna.Study) -> None:
        """The baseline, and in a new study a warm start's front right after it."""
        warm = self.warm_start
        new_study = not study.get_trials(deepcopy=False)
        study.enqueue_trial(self.space.baseline(), user_attrs={"baseline": True})
        if warm is not None and new_study:
            for config in warm.configs_for(self.space):
                study.enqueue_trial(config, user_attrs={"warm_start": warm.source_study})

    def _enqueue_proposal(self, study: optuna.Study, excluded: set[str]) -> None:
        """The strategy's next own proposal, none of whose variant is in `excluded`, enqueued
        only when nothing else waits, so that none is left waiting when the budget runs out."""
        from optuna.trial import TrialState

        if self._ledger is None or study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return
        front = [c.config for c in by_contribution(feasible_front(study), self.objectives)]
        proposal = self._ledger.next_proposal(front, excluded)
        if proposal is not None:
            config, why = proposal
            study.enqueue_trial(config, user_attrs={"proposed": why})

    def _wait_for_others(self, study: optuna.Study, tracker: Tracker) -> bool:
        """Nothing of ours is running but the baseline is not known: wait while another
        coordinator's trials run (reaping them if that coordinator died)."""
        from optuna.trial import TrialState

        while not self.stopping:
            if _baseline_candidate(study) is not None or _baseline_waiting(study):
                return True
            if not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                return False
            time.sleep(1.0)
            _retrying(self._reap, study, tracker, set())
        return False

    def _reap(self, study: optuna.Study, tracker: Tracker, mine: set[int]) -> None:
        """Fail the trials of dead coordinators and enqueue their configurations again."""
        with study_lock(self.settings.storage, self.settings.study_name):
            lost = [t for t in lost_trials(study, self.stale_after_s) if t.number not in mine]
            for frozen in lost:
                trial = optuna_trial(study, frozen._trial_id)
                attempt = int(frozen.user_attrs.get("attempt", 0))
                reason = "its coordinator stopped before the trial finished"
                config = dict(frozen.params)
                spec = self._spec(trial, config, known_accuracy=None)
                spec = spec.model_copy(update={"attempt": attempt})
                result = TrialResult.for_spec(spec, "lost", reason)
                self._tell(study, trial, spec, result, None, tracker)
                if attempt + 1 < MAX_ATTEMPTS:
                    user_attrs = {"attempt": attempt + 1, "retry_of": frozen.number}
                    if frozen.user_attrs.get("baseline"):
                        user_attrs["baseline"] = True
                    study.enqueue_trial(config, user_attrs=user_attrs)

    def _budget_left(self, used: int, started: float) -> bool:
        if self.settings.n_trials is not None and used >= self.settings.n_trials:
            return False
        timeout = self.settings.timeout_s
        return timeout is None or time.monotonic() - started < timeout

    def _tell_baseline(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        spec: TrialSpec,
        result: TrialResult,
        tracker: Tracker,
    ) -> Candidate:
        if result.metrics is None:
            self._tell(study, trial, spec, result, None, tracker)
            raise AutotuneError(f"the baseline (unmodified model) failed: {result.reason}")
        metrics = {**result.metrics.model_dump(), "accuracy_drop": 0.0}
        self._tell(study, trial, spec, result, metrics, tracker)
        baseline = _retrying(_baseline_candidate, study)
        assert baseline is not None
        return baseline

    def _tell_measured(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        spec: TrialSpec,
        result: TrialResult,
        baseline: Candidate,
        tracker: Tracker,
    ) -> None:
        metrics = None
        if result.metrics is not None:
            drop = baseline.metrics["accuracy"] - result.metrics.accuracy
            metrics = {**result.metrics.model_dump(), "accuracy_drop": drop}
        self._tell(study, trial, spec, result, metrics, tracker)

    def _spec(
        self, trial: optuna.Trial, config: dict[str, Any], known_accuracy: float | None
    ) -> TrialSpec:
        """The trial's spec; a reaped trial's retry (enqueued with its attempt number in
        its user attrs) keeps counting attempts from there."""
        return TrialSpec(
            study=self.settings.study_name,
            trial_number=trial.number,
            workload=self.workload,
            config=config,
            measurement=self.request.measurement,
            known_accuracy=known_accuracy,
            timeout_s=self.request.budget.trial_timeout_s,
            attempt=int(_retrying(lambda: trial.user_attrs).get("attempt", 0)),
        )

    def _tell(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        spec: TrialSpec,
        result: TrialResult,
        metrics: dict[str, Any] | None,
        tracker: Tracker,
    ) -> None:
        tags: dict[str, str] = {"status": result.status}
        if result.reason:
            tags["failure_reason"] = result.reason[:5000]
        reused_from = self._reused_from.pop(trial.number, None)
        if reused_from is not None:
            tags.update(reused="true", reused_from=reused_from)
        violations = None
        if metrics is not None:
            violations = constraint_violations(self.request.constraints, metrics)
            tags["feasible"] = str(all(v <= 0 for v in violations.values())).lower()
        contention = result.provenance.contention if result.provenance is not None else None
        logged = metrics
        if contention is not None:
            tags.update(contention_tags(contention))
        if contention is not None and metrics is not None:
            logged = {**metrics, **contention_figures(contention)}
        _retrying(self._record, study, trial, spec, result, metrics, violations, reused_from)
        tracker.log_trial(trial.number, spec.attempt, spec.config, logged, tags)
        self.on_progress(_retrying(_counted_trials, study), self.settings.n_trials, result)

    def _record(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        spec: TrialSpec,
        result: TrialResult,
        metrics: dict[str, Any] | None,
        violations: dict[str, float] | None,
        reused_from: str | None,
    ) -> None:
        """The outcome into the study; safe to repeat after a lost connection."""
        from optuna.trial import TrialState

        if study._storage.get_trial(trial._trial_id).state != TrialState.RUNNING:
            return  # told before the connection dropped
        trial.set_user_attr("config", spec.config)
        trial.set_user_attr("attempt", spec.attempt)
        trial.set_user_attr("status", result.status)
        trial.set_user_attr("variant_key", result.variant_key)
        if result.reason:
            trial.set_user_attr("reason", result.reason)
        if result.provenance is not None:
            trial.set_user_attr("provenance", result.provenance.model_dump(mode="json"))
        if reused_from is not None:
            trial.set_user_attr("reused_from", reused_from)
        # Only what an executor ran costs device time.
        trial.set_user_attr("measured", reused_from is None and result.status != "skipped")
        if metrics is None or violations is None:
            study.tell(trial, state=_failed_state(result))
            return
        system_attrs = study._storage.get_trial_system_attrs(trial._trial_id)
        for name, value in violations.items():
            if f"constraints:{name}" not in system_attrs:
                trial.set_constraint(name, value)
        trial.set_user_attr("metrics", metrics)
        study.tell(trial, [float(metrics[m.name]) for m in self.objectives])

    # -- result ------------------------------------------------------------------------

    def _finish(
        self, study: optuna.Study, tracker: Tracker, info: ModelInfo, baseline: Candidate
    ) -> TuneOutcome:
        candidates = [candidate_from_trial(t) for t in completed_trials(study)]
        feasible = [c for c in candidates if c.feasible]
        front = pareto_front(feasible, self.objectives)
        energy_sources = sorted({str(c.metrics["energy_source"]) for c in candidates})
        outcome = TuneOutcome(
            study_name=study.study_name,
            baseline=baseline,
            candidates=candidates,
            front=front,
            tuned=None,
            n_trials=_counted_trials(study),
        )
        tags = {"energy_source": ",".join(energy_sources), "n_feasible": str(len(feasible))}
        if "estimate" in energy_sources:
            outcome.notes.append(
                "energy figures are estimates from CPU time and a power model, not measurements"
            )
        summary = _prefixed("baseline", baseline.metrics)
        if not front:
            tracker.log_results(candidates, front, self.objectives, summary, {}, None, tags)
            tracker.finish("FINISHED")
            raise NoFeasibleConfiguration(
                f"none of {len(candidates)} measured configurations meets the constraints"
            )
        revalidation = self._revalidate(study, front, baseline)
        if revalidation.reused:
            outcome.notes.append(
                "nothing new was measured since the last head-to-head: its figures are reused "
                "(validation.remeasure_on_resume: true measures the finalists again)"
            )
        tracker.log_revalidation(revalidation.report)
        chosen = revalidation.chosen
        outcome.baseline = revalidation.baseline
        artifact = self._export(study, chosen)
        outcome.tuned = self._tuned_config(study, tracker, info, revalidation, artifact.path)
        tags.update(
            {
                "chosen_trial": str(chosen.trial_number),
                "artifact_sha256": artifact.sha256,
                "autotune.headline": revalidation.headline.text,
                "autotune.conditions": revalidation.headline.conditions,
            }
        )
        summary = _prefixed("baseline", revalidation.baseline.metrics)
        tracker.log_results(
            candidates,
            front,
            self.objectives,
            {
                **summary,
                **_prefixed("tuned", chosen.metrics),
                **headline_metrics(revalidation.headline),
            },
            {"tuned.yaml": outcome.tuned.model_dump(mode="json")},
            str(Path(artifact.path).parent),
            tags,
        )
        if self.previous_tuned is not None:
            tracker.log_comparison(self.previous_tuned, outcome.tuned.model_dump(mode="json"))
        tracker.finish("FINISHED")
        return outcome

    def _revalidate(
        self, study: optuna.Study, front: list[Candidate], baseline: Candidate
    ) -> Revalidation:
        """Measure the provisional choice, its nearest front neighbours and the baseline head
        to head (`autotune.validation`); choose on those figures. When none of the finalists
        is feasible on the re-measured figures, the next ones are tried. On a resume that
        measured nothing new the stored comparison is reused, unless the request asks for
        `validation.remeasure_on_resume`."""
        basis = self._revalidation_basis(study, front)
        stored = self._stored_revalidation(study, front, baseline, basis)
        if stored is not None:
            return stored
        remaining = list(front)
        comparisons: list[list[dict[str, Any]]] = []
        while remaining:
            provisional = select(remaining, self.request.selection)
            neighbours = nearest_neighbours(
                provisional, remaining, self.objectives, self.request.validation.neighbours
            )
            finalists = [provisional, *neighbours]
            compared = self._head_to_head(baseline, finalists)
            outcomes = {o.trial_number: o for o in compared.entrants}
            base_outcome = outcomes[baseline.trial_number]
            remeasured_baseline = self._remeasured(baseline, base_outcome, baseline)
            if remeasured_baseline is None:
                raise AutotuneError(f"re-measuring the baseline failed: {base_outcome.reason}")
            remeasured = [
                self._remeasured(c, outcomes[c.trial_number], remeasured_baseline)
                for c in finalists
            ]
            kept = [c for c in remeasured if c is not None and c.feasible]
            comparisons.append(
                self._comparison_report(finalists, remeasured, outcomes, base_outcome, baseline)
            )
            if kept:
                decision = decide(kept, outcomes, self.request.selection, baseline.config)
                chosen = decision.chosen
                energy_estimated = chosen.metrics["energy_source"] == "estimate"
                summary = headline(
                    outcomes[chosen.trial_number],
                    base_outcome,
                    compared.contention,
                    self.request.selection,
                    energy_estimated,
                )
                report = {
                    "rounds": self.request.validation.rounds,
                    "round_seconds": self.request.validation.round_seconds,
                    "comparisons": comparisons,
                    "contention": _contention_summary(compared.contention),
                    "leader": decision.leader.trial_number,
                    "chosen": chosen.trial_number,
                    "chosen_because": decision.because,
                    "tied_with": decision.tied_with,
                    "baseline": reported(remeasured_baseline.metrics, self.request.cost),
                }
                study.set_user_attr("revalidation", report)
                state = {
                    "basis": basis,
                    "chosen_metrics": chosen.metrics,
                    "baseline_metrics": remeasured_baseline.metrics,
                    "headline": summary.model_dump(mode="json"),
                }
                study.set_user_attr(REVALIDATION_STATE, state)
                return Revalidation(chosen, remeasured_baseline, report, summary)
            done = {c.trial_number for c in finalists}
            remaining = [c for c in remaining if c.trial_number not in done]
        raise NoFeasibleConfiguration("no finalist met the constraints when re-measured")

    def _revalidation_basis(self, study: optuna.Study, front: list[Candidate]) -> dict[str, Any]:
        """What a head-to-head's outcome depends on besides the machine: the trials measured,
        the front, and the request's settings that pick, compare and report the finalists."""
        request = self.request
        return {
            "n_trials": _retrying(_counted_trials, study),
            "front": sorted(c.trial_number for c in front),
            "selection": request.selection.model_dump(mode="json"),
            "validation": request.validation.model_dump(
                mode="json", exclude={"remeasure_on_resume"}
            ),
            "constraints": request.constraints.model_dump(mode="json"),
            "cost": request.cost.model_dump(mode="json"),
            "measurement": request.measurement.model_dump(mode="json"),
        }

    def _stored_revalidation(
        self,
        study: optuna.Study,
        front: list[Candidate],
        baseline: Candidate,
        basis: dict[str, Any],
    ) -> Revalidation | None:
        """The stored head-to-head, when it was decided on this very basis (nothing new was
        measured since) and the request does not ask to measure it again."""
        if self.request.validation.remeasure_on_resume:
            return None
        state = study.user_attrs.get(REVALIDATION_STATE)
        report = study.user_attrs.get("revalidation")
        if state is None or report is None or state["basis"] != basis:
            return None
        chosen = next((c for c in front if c.trial_number == report["chosen"]), None)
        if chosen is None:
            return None
        constraints = self.request.constraints
        chosen_metrics, baseline_metrics = state["chosen_metrics"], state["baseline_metrics"]
        return Revalidation(
            with_metrics(
                chosen, chosen_metrics, constraint_violations(constraints, chosen_metrics)
            ),
            with_metrics(
                baseline, baseline_metrics, constraint_violations(constraints, baseline_metrics)
            ),
            report,
            Headline.model_validate(state["headline"]),
            reused=True,
        )

    def _head_to_head(self, baseline: Candidate, finalists: list[Candidate]) -> HeadToHeadResult:
        """The baseline and the finalists in interleaved rounds on one slot."""
        entrants: list[Candidate] = [baseline]
        entrants += [c for c in finalists if c.trial_number != baseline.trial_number]
        validation = self.request.validation
        spec = HeadToHeadSpec(
            study=self.settings.study_name,
            workload=self.workload,
            entrants=[
                Entrant(
                    trial_number=c.trial_number,
                    config=c.config,
                    known_accuracy=float(c.metrics["accuracy"]),
                )
                for c in entrants
            ],
            rounds=validation.rounds,
            round_seconds=validation.round_seconds,
            measurement=self.request.measurement,
            timeout_s=self.request.budget.trial_timeout_s * len(entrants),
        )
        finalists_count = len(entrants) - 1
        self.on_phase(
            f"head to head: baseline and {finalists_count} finalists, {validation.rounds} rounds"
        )
        result = self.executor.compare(spec)
        contended = [c for c in result.contention if c.contended]
        if contended and self.request.measurement.contention == "fail":
            raise MeasurementContended(
                f"{len(contended)} of {len(result.contention)} head-to-head rounds saw other "
                f"load ({contended[0].reasons[0]}); measurement.contention is 'fail': re-run "
                "on an idle machine, or set it to 'warn' or 'wait'"
            )
        return result

    def _remeasured(
        self, candidate: Candidate, outcome: EntrantOutcome, baseline: Candidate
    ) -> Candidate | None:
        """The candidate with its head-to-head figures. The peak memory stays the search's:
        a head-to-head holds every finalist's session at once."""
        if outcome.metrics is None:
            return None
        metrics = {
            **outcome.metrics.model_dump(),
            "accuracy_drop": float(baseline.metrics["accuracy"]) - outcome.metrics.accuracy,
            "peak_memory_mb": candidate.metrics["peak_memory_mb"],
        }
        violations = constraint_violations(self.request.constraints, metrics)
        return with_metrics(candidate, metrics, violations)

    def _comparison_report(
        self,
        finalists: list[Candidate],
        remeasured: list[Candidate | None],
        outcomes: dict[int, EntrantOutcome],
        base_outcome: EntrantOutcome,
        baseline: Candidate,
    ) -> list[dict[str, Any]]:
        rows = []
        for before, after in zip(finalists, remeasured, strict=True):
            outcome = outcomes[before.trial_number]
            ratios = None
            if after is not None:
                ratios = {m: r.model_dump() for m, r in ratios_to(outcome, base_outcome).items()}
            rows.append(
                {
                    "trial": before.trial_number,
                    "changes_from_baseline": changes_from(before.config, baseline.config),
                    "status": outcome.status,
                    "reason": outcome.reason,
                    "search": reported(before.metrics, self.request.cost),
                    "revalidated": None
                    if after is None
                    else reported(after.metrics, self.request.cost),
                    "to_baseline": ratios,
                    "feasible": after is not None and after.feasible,
                }
            )
        return rows

    def _export(self, study: optuna.Study, chosen: Candidate) -> Any:
        trial = study.trials[chosen.trial_number]
        spec = TrialSpec(
            study=study.study_name,
            trial_number=trial.number,
            workload=self.workload,
            config=chosen.config,
            measurement=self.request.measurement,
        )
        self.settings.artifact_dir.mkdir(parents=True, exist_ok=True)
        self.on_phase("export: the optimized model")
        return self.executor.export(spec, str(self.settings.artifact_dir.resolve()))

    def _tuned_config(
        self,
        study: optuna.Study,
        tracker: Tracker,
        info: ModelInfo,
        revalidation: Revalidation,
        artifact_path: str,
    ) -> TunedConfig:
        chosen = revalidation.chosen
        bounds = self.request.constraints.model_dump(exclude_none=True)
        constraints = {
            name: ConstraintOutcome(
                bound=bound,
                value=float(chosen.metrics[CONSTRAINT_METRICS[name][0]]),
                met=chosen.violations[name] <= 0,
            )
            for name, bound in bounds.items()
        }
        provenance = study.trials[chosen.trial_number].user_attrs.get("provenance", {})
        model = self.request.model or self.workload.model  # a replay's request may have none
        model_source = model.onnx or model.entry_point or ""
        return TunedConfig(
            config=chosen.config,
            metrics=reported(chosen.metrics, self.request.cost),
            baseline=reported(revalidation.baseline.metrics, self.request.cost),
            constraints=constraints,
            model={"source": model_source, "sha256": info.sha256},
            hardware={"fingerprint": self.profile.fingerprint, **self.profile.model_dump()},
            software=provenance.get("software", {}),
            study={
                "name": study.study_name,
                "storage": self.settings.storage,
                "n_trials": _counted_trials(study),
                "trial_number": chosen.trial_number,
            },
            mlflow={
                "tracking_uri": self.tracking_uri,
                "experiment_id": tracker.experiment_id,
                "run_id": tracker.parent_run_id,
            },
            artifact=artifact_path,
            headline=revalidation.headline,
            revalidation=revalidation.report,
        )


def _storage(url: str) -> Any:
    """Optuna's storage at `url`; the caller disposes of its engine. Creating it creates
    Optuna's tables in a new database, which coordinators starting together must not race."""
    import optuna

    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if not url.startswith("sqlite"):
        engine_kwargs.update(pool_size=5, max_overflow=5)
    with schema_lock(url):
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)


# What an Optuna storage holds, and without which reading it would write to it first.
_OPTUNA_TABLES = frozenset({"studies", "version_info", "alembic_version"})


def _existing_storage(url: str, field: str) -> Any:
    """Optuna's storage at `url`, to read: a database that does not exist (a missing SQLite
    file) or holds no Optuna storage is a bad `field`; nothing is created or migrated.
    The caller disposes of its engine."""
    import optuna

    require_existing(url, field, _OPTUNA_TABLES, "autotune's studies")
    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if not url.startswith("sqlite"):
        engine_kwargs.update(pool_size=5, max_overflow=5)
    return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, skip_table_creation=True)


def _failed_state(result: TrialResult) -> Any:
    """A candidate that could not be measured (unsupported, out of memory, timed out,
    broken) is an outcome of that candidate: PRUNED. FAIL is kept for trials lost to the
    infrastructure (a dead worker or coordinator); they do not count toward the budget."""
    from optuna.trial import TrialState

    return TrialState.FAIL if result.status == "lost" else TrialState.PRUNED


def optuna_trial(study: optuna.Study, trial_id: int) -> optuna.Trial:
    import optuna

    return optuna.trial.Trial(study, trial_id)


def _retrying(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Storage calls survive a database restart: retry connection errors with backoff."""
    import sqlalchemy.exc
    from optuna.exceptions import StorageInternalError

    delay = 0.5
    deadline = time.monotonic() + DATABASE_PATIENCE_S
    while True:
        try:
            return call(*args, **kwargs)
        except (
            sqlalchemy.exc.OperationalError,
            sqlalchemy.exc.InterfaceError,
            StorageInternalError,
        ):
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 8.0)


def _batch(config: dict[str, Any]) -> int:
    return int(config.get("batch.size", 1))


def _smallest_oom_batch(study: optuna.Study) -> dict[str, int]:
    """Per variant, the smallest batch size that ran out of memory so far."""
    smallest: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        if trial.user_attrs.get("status") == "oom":
            _record_oom(smallest, trial.user_attrs["config"])
    return smallest


def _record_oom(smallest: dict[str, int], config: dict[str, Any]) -> None:
    key = variant_key(config)
    smallest[key] = min(smallest.get(key, _batch(config)), _batch(config))


def _exceeds_oom_batch(config: dict[str, Any], smallest: dict[str, int]) -> str | None:
    limit = smallest.get(variant_key(config))
    if limit is None or _batch(config) < limit:
        return None
    return f"not run: batch.size {limit} already ran out of memory for this variant"


def completed_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    from optuna.trial import TrialState

    return [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if "metrics" in t.user_attrs
    ]


def feasible_front(study: optuna.Study) -> list[Candidate]:
    """The feasible Pareto front of a study, over the objectives it was run with."""
    objectives = [OBJECTIVES[o] for o in study.user_attrs.get("objectives", [])]
    candidates = [candidate_from_trial(t) for t in completed_trials(study)]
    return pareto_front([c for c in candidates if c.feasible], objectives)


@contextmanager
def opened_study(
    study_name: str, storage: str, field: str, storage_field: str = "storage"
) -> Iterator[optuna.Study]:
    """A stored study, its connections closed on exit (a long-lived service reads many
    studies; an engine left to the garbage collector holds its connections until then).
    A name the storage does not hold is a bad `field`; a storage that does not exist is a
    bad `storage_field`, and reading never creates or migrates one."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rdb = _existing_storage(storage, storage_field)
    try:
        try:
            study = optuna.load_study(study_name=study_name, storage=rdb)
        except KeyError:
            raise RequestError(
                field, "must name an existing study in the storage", study_name
            ) from None
        yield study
    finally:
        rdb.engine.dispose()


def _counted_trials(study: optuna.Study) -> int:
    """Trials that count toward the budget: measured, or ended by their candidate."""
    from optuna.trial import TrialState

    states = (TrialState.COMPLETE, TrialState.PRUNED)
    return int(study._storage.get_n_trials(study._study_id, states))


def _baseline_in_flight(study: optuna.Study) -> bool:
    from optuna.trial import TrialState

    states = (TrialState.RUNNING, TrialState.WAITING, TrialState.COMPLETE)
    return any(
        t.user_attrs.get("baseline") for t in study.get_trials(deepcopy=False, states=states)
    )


def _baseline_waiting(study: optuna.Study) -> bool:
    from optuna.trial import TrialState

    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    return any(t.user_attrs.get("baseline") for t in waiting)


def _baseline_candidate(study: optuna.Study) -> Candidate | None:
    trial = _baseline_trial(study)
    return None if trial is None else candidate_from_trial(trial)


def _baseline_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    return next((t for t in completed_trials(study) if t.user_attrs.get("baseline")), None)


def _accuracy_by_variant(study: optuna.Study) -> dict[str, float]:
    """Accuracy measured so far per variant, from trials measured like the baseline (same
    model, software and hardware): a figure from another setting is not reused."""
    baseline = _baseline_trial(study)
    if baseline is None:
        return {}
    reference = _comparable(baseline.user_attrs.get("provenance", {}))
    return {
        t.user_attrs["variant_key"]: float(t.user_attrs["metrics"]["accuracy"])
        for t in completed_trials(study)
        if _comparable(t.user_attrs.get("provenance", {})) == reference
    }


def _comparable(provenance: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(provenance.get(k) for k in ("model_sha256", "software", "hardware_fingerprint"))


def candidate_from_trial(trial: optuna.trial.FrozenTrial) -> Candidate:
    violations = dict(trial.constraints)
    return Candidate(
        trial_number=trial.number,
        config=dict(trial.user_attrs["config"]),
        metrics=dict(trial.user_attrs["metrics"]),
        feasible=all(v <= 0 for v in violations.values()),
        violations=violations,
    )


def _reused_result(spec: TrialSpec, previous: PreviousTrial) -> TrialResult:
    return TrialResult.for_spec(
        spec,
        "ok",
        metrics=TrialMetrics.model_validate(previous.metrics),
        provenance=Provenance.model_validate(previous.provenance),
    )


def _round_report(
    finalists: list[Candidate], remeasured: list[Candidate | None], cost: Cost
) -> list[dict[str, Any]]:
    return [
        {
            "trial": before.trial_number,
            "search": reported(before.metrics, cost),
            "revalidated": None if after is None else reported(after.metrics, cost),
            "feasible": after is not None and after.feasible,
        }
        for before, after in zip(finalists, remeasured, strict=True)
    ]


def _prefixed(prefix: str, metrics: dict[str, Any]) -> dict[str, float]:
    return {f"{prefix}.{k}": float(v) for k, v in metrics.items() if is_number(v)}


def _contention_summary(rounds: list[Contention]) -> dict[str, Any]:
    """How busy the machine was over a head-to-head's rounds."""
    if not rounds:
        return {"rounds": 0, "contended_rounds": 0}
    return {
        "rounds": len(rounds),
        "contended_rounds": sum(c.contended for c in rounds),
        "max_other_cpu_share": max(c.other_cpu_share for c in rounds),
        "max_steal_share": max(c.steal_share for c in rounds),
        "oversubscribed_rounds": sum(c.oversubscribed for c in rounds),
        "reasons": sorted({r for c in rounds for r in c.reasons}),
    }
