"""The coordinator: ask -> submit -> wait -> tell, over injected parts.

A `ResultStore` holds the study, a `Strategy` proposes and answers what needs no
measurement, an `Executor` measures, a `Tracker` shows it; `Budget` says when to stop.
The baseline (the unmodified model) runs first; results that arrive before its accuracy is
known wait for it. Trials lost to a dead worker are retried; trials of dead coordinators
are reaped and enqueued again. After the search, `autotune.outcome` concludes the study.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.budget import Budget
from autotune.contract import (
    ConfigValue,
    ModelInfo,
    TrialResult,
    TrialSpec,
    Workload,
    variant_key,
)
from autotune.errors import AutotuneError, Interrupted
from autotune.hardware import HardwareProfile
from autotune.interrupts import stop_on_sigint
from autotune.leases import Heartbeat, Owner
from autotune.metrics import OBJECTIVES, constraint_violations, with_accuracy_drop
from autotune.outcome import Conclusion, TuneOutcome
from autotune.pareto import by_contribution, pareto_front
from autotune.request import TuningRequest
from autotune.results.records import Outcome, TrialMarks, TrialRecord
from autotune.search_state import SearchState
from autotune.space import EffectiveSpace
from autotune.tracking import contention_figures, contention_tags

if TYPE_CHECKING:
    from autotune.executors import Executor
    from autotune.results.store import ResultStore
    from autotune.strategies import Answer, Strategy
    from autotune.tracking import Tracker
    from autotune.warm_start import WarmStart

# A trial lost to a dead worker or coordinator runs at most this many times in all.
MAX_ATTEMPTS = 3
# How often the coordinator looks for trials of dead coordinators, and how long a
# coordinator's heartbeat may be silent before its trials count as lost.
REAP_EVERY_S = 10.0
STALE_AFTER_S = 60.0

ProgressCallback = Callable[[int, int | None, TrialResult], None]
# A line for the user (a resumed study), or the phase the study is in after its search.
NoteCallback = Callable[[str], None]


def _ignore(*args: Any) -> None:
    pass


@dataclass(frozen=True)
class Tuning:
    """What is tuned, and where: the request and what was learnt before the search."""

    request: TuningRequest
    workload: Workload
    model_info: ModelInfo
    space: EffectiveSpace
    profile: HardwareProfile
    artifact_dir: Path


@dataclass
class Events:
    on_progress: ProgressCallback = _ignore
    on_note: NoteCallback = _ignore
    on_phase: NoteCallback = _ignore


@dataclass
class Coordinator:
    tuning: Tuning
    store: ResultStore
    strategy: Strategy
    executor: Executor
    tracker: Tracker
    budget: Budget
    warm_start: WarmStart | None = None
    previous_tuned: dict[str, Any] | None = None
    events: Events = field(default_factory=Events)
    # Set from a signal handler or another thread: stop asking, let running trials end.
    stop: threading.Event = field(default_factory=threading.Event)
    stale_after_s: float = STALE_AFTER_S
    owner: Owner = field(default_factory=Owner)
    state: SearchState = field(default_factory=SearchState)

    def run(self) -> TuneOutcome:
        request = self.tuning.request
        try:
            with Heartbeat(lambda: self.store.beat(self.owner)), stop_on_sigint(self.stop):
                baseline = self.search()
            if self.stop.is_set():
                raise Interrupted(
                    f"stopped by the user; run the same command to resume {self.store.name!r}"
                )
            conclusion = Conclusion(
                request,
                self.tuning.workload,
                self.tuning.model_info,
                self.tuning.profile,
                self.executor,
                self.store,
                self.tracker,
                self.tuning.artifact_dir,
                self.events.on_phase,
                self.previous_tuned,
            )
            return conclusion.conclude(baseline.candidate())
        except Interrupted:
            self.tracker.finish("KILLED")
            raise
        except BaseException:
            self.tracker.finish("FAILED")
            raise

    def search(self) -> TrialRecord:
        """Keep every slot busy until the budget is spent; return the baseline's record."""
        state = self.state
        records = self.store.records()
        state.load(records)
        self.strategy.start(records)
        if state.counted:
            of = "" if self.budget.trials is None else f" of {self.budget.trials}"
            self.events.on_note(
                f"study {self.store.name}: {state.counted}{of} trials done, re-using them"
            )
        last_reap = -REAP_EVERY_S
        while True:
            if time.monotonic() - last_reap >= REAP_EVERY_S:
                self._reap(set(state.running))
                last_reap = time.monotonic()
            while len(state.running) < self.executor.slots and not self.stop.is_set():
                record = self._ask()
                if record is None:
                    break
                self._start(record)
            if not state.running:
                if state.baseline is not None:
                    return state.baseline
                if self.stop.is_set() or not self._wait_for_others():
                    raise AutotuneError("the baseline (unmodified model) was never measured")
                continue
            finished, state.ready = state.ready or self.executor.wait(), []
            for result in finished:
                self._settle(result)

    # -- asking ----------------------------------------------------------------------------

    def _ask(self) -> TrialRecord | None:
        """Under the study lock: enqueue the baseline if nobody has, check the budget
        against every coordinator's trials, and start a trial: the strategy's proposal, else
        a waiting one or the sampler's."""
        store, space = self.store, self.tuning.space
        with store.locked():
            waiting = store.records(("waiting",))
            need_baseline = self.state.baseline is None
            if need_baseline and not self._baseline_in_flight(waiting):
                self._enqueue_baseline()
                waiting = store.records(("waiting",))
            waiting_baseline = any(r.marks.baseline for r in waiting)
            if not waiting_baseline and not self.budget.allows(store.used()):
                return None
            if not waiting and self.strategy.proposes:
                max_drop = self.tuning.request.constraints.max_accuracy_drop
                proposal = self.strategy.propose(self._front, self.state.excluded(max_drop))
                if proposal is not None:
                    marks = TrialMarks(proposed=proposal.why)
                    return store.create(space, proposal.config, marks, self.owner)
            return store.ask(space, self.owner)

    def _baseline_in_flight(self, waiting: list[TrialRecord]) -> bool:
        if any(r.marks.baseline for r in waiting):
            return True
        return any(r.marks.baseline for r in self.store.records(("running", "complete")))

    def _enqueue_baseline(self) -> None:
        """The baseline, and in a new study a warm start's front right after it."""
        new_study = not self.store.records()
        self.store.enqueue(self.tuning.space.baseline(), TrialMarks(baseline=True))
        if self.warm_start is not None and new_study:
            marks = TrialMarks(warm_start=self.warm_start.source_study)
            for config in self.warm_start.configs_for(self.tuning.space):
                self.store.enqueue(config, marks)

    def _front(self) -> list[dict[str, ConfigValue]]:
        objectives = [OBJECTIVES[o] for o in self.tuning.request.objectives]
        feasible = [c for c in self.state.completed.values() if c.feasible]
        return [c.config for c in by_contribution(pareto_front(feasible, objectives), objectives)]

    def _start(self, record: TrialRecord) -> None:
        """Answer the trial without measuring it where possible, else submit it."""
        state = self.state
        spec = self._spec(record)
        answer = self._answer(spec, record)
        if answer is not None and answer.wait_for is not None:
            state.waiting.setdefault(answer.wait_for, []).append((record, spec))
            return
        if answer is not None and answer.result is not None:
            state.running[record.number] = (record, spec)
            if answer.reused_from is not None:
                state.reused_from[record.number] = answer.reused_from
            state.ready.append(answer.result)
            return
        spec = spec.model_copy(update={"known_accuracy": self._known_accuracy(spec)})
        state.running[record.number] = (record, spec)
        self.executor.submit(spec)

    def _known_accuracy(self, spec: TrialSpec) -> float | None:
        """The accuracy of the spec's model variant, measured in this study, or by the warm
        start's on the same model and software."""
        variant = variant_key(spec.config)
        known = self.state.accuracy.get(variant)
        if known is not None or self.warm_start is None:
            return known
        now = self._provenance_now()
        same_model = {k: v for k, v in now.items() if k in ("model_sha256", "software")}
        return self.warm_start.accuracy(variant, same_model)

    def _answer(self, spec: TrialSpec, record: TrialRecord) -> Answer | None:
        """An answer without measuring: a batch too large for its variant's memory, the
        strategy's, or the warm start's measurement of the same configuration. The baseline
        is always measured: it is the study's reference."""
        state = self.state
        if state.baseline is not None:
            too_big = state.oom.answer(spec)
            if too_big is not None:
                return too_big
        max_drop = self.tuning.request.constraints.max_accuracy_drop
        answer = self.strategy.answer(self.store.name, spec, state.excluded(max_drop))
        if answer is not None or self.warm_start is None or record.marks.baseline:
            return answer
        return self.warm_start.answer(spec, self._provenance_now())

    def _provenance_now(self) -> dict[str, Any]:
        """What the provenance of a measurement made now says. The workers' software versions
        are known from the baseline's result; a trial asked while the baseline still runs (on
        another slot) is matched on model, hardware and measurement settings alone."""
        tuning = self.tuning
        now: dict[str, Any] = {
            "model_sha256": tuning.model_info.sha256,
            "hardware_fingerprint": tuning.profile.fingerprint,
            "measurement": tuning.request.measurement.model_dump(mode="json"),
        }
        baseline = self.state.baseline
        if baseline is not None and baseline.provenance is not None:
            now["software"] = baseline.provenance.software
        return now

    def _spec(self, record: TrialRecord) -> TrialSpec:
        request = self.tuning.request
        return TrialSpec(
            study=self.store.name,
            trial_number=record.number,
            workload=self.tuning.workload,
            config=record.config,
            measurement=request.measurement,
            timeout_s=request.budget.trial_timeout_s,
            attempt=record.attempt,
        )

    # -- telling ---------------------------------------------------------------------------

    def _settle(self, result: TrialResult) -> None:
        state = self.state
        record, spec = state.running.pop(result.trial_number)
        if result.status == "lost" and spec.attempt + 1 < MAX_ATTEMPTS:
            retry = spec.model_copy(update={"attempt": spec.attempt + 1})
            self.executor.submit(retry)
            state.running[record.number] = (record, retry)
            return
        if result.status == "oom":
            state.oom.record(spec.config)
        if result.metrics is not None:
            state.accuracy.setdefault(result.variant_key, result.metrics.accuracy)
        if record.marks.baseline and state.baseline is None:
            self._tell_baseline(record, spec, result)
        elif state.baseline is None and result.metrics is not None:
            state.held.append((record, spec, result))
        else:
            self._tell(record, spec, result)
        self.strategy.after_trial(spec, result)
        for repeat, repeat_spec in state.waiting.pop(record.number, []):
            if result.status == "lost":
                lost = TrialResult.for_spec(repeat_spec, "lost", result.reason)
                self._tell(repeat, repeat_spec, lost)
                continue
            state.reused_from[repeat.number] = f"{self.store.name}#{record.number}"
            state.running[repeat.number] = (repeat, repeat_spec)
            state.ready.append(
                result.model_copy(
                    update={
                        "trial_number": repeat.number,
                        "attempt": repeat_spec.attempt,
                        "duration_s": 0.0,
                    }
                )
            )

    def _tell_baseline(self, record: TrialRecord, spec: TrialSpec, result: TrialResult) -> None:
        if result.metrics is None:
            self._tell(record, spec, result)
            raise AutotuneError(f"the baseline (unmodified model) failed: {result.reason}")
        self.state.baseline = self._tell(record, spec, result, result.metrics.accuracy)
        for held in self.state.held:
            self._tell(*held)
        self.state.held.clear()

    def _tell(
        self,
        record: TrialRecord,
        spec: TrialSpec,
        result: TrialResult,
        baseline_accuracy: float | None = None,
    ) -> TrialRecord:
        """The result into the study and the tracker; returns the trial's record."""
        state = self.state
        request = self.tuning.request
        metrics = violations = values = None
        if result.metrics is not None:
            if baseline_accuracy is None:
                assert state.baseline is not None and state.baseline.metrics is not None
                baseline_accuracy = float(state.baseline.metrics["accuracy"])
            metrics = with_accuracy_drop(result.metrics.model_dump(), baseline_accuracy)
            violations = constraint_violations(
                request.constraints.model_dump(exclude_none=True), metrics
            )
            values = [float(metrics[OBJECTIVES[o].name]) for o in request.objectives]
        reused_from = state.reused_from.pop(record.number, None)
        outcome = Outcome(
            config=spec.config,
            attempt=spec.attempt,
            status=result.status,
            variant_key=result.variant_key,
            reason=result.reason,
            metrics=metrics,
            violations=violations,
            provenance=result.provenance,
            reused_from=reused_from,
            measured=reused_from is None and result.status != "skipped",
        )
        self.store.tell(record.number, outcome, values)
        told = record.told(outcome)
        state.counted += told.counted
        if told.has_metrics:
            state.completed[record.number] = told.candidate()
        self._track(told, spec, result)
        self.events.on_progress(state.counted, self.budget.trials, result)
        return told

    def _track(self, told: TrialRecord, spec: TrialSpec, result: TrialResult) -> None:
        tags: dict[str, str] = {"status": result.status}
        if result.reason:
            tags["failure_reason"] = result.reason[:5000]
        if told.reused_from is not None:
            tags.update(reused="true", reused_from=told.reused_from)
        logged = told.metrics
        if logged is not None:
            tags["feasible"] = str(told.feasible).lower()
        contention = result.provenance.contention if result.provenance is not None else None
        if contention is not None:
            tags.update(contention_tags(contention))
            if logged is not None:
                logged = {**logged, **contention_figures(contention)}
        self.tracker.log_trial(told.number, spec.attempt, spec.config, logged, tags)

    # -- other coordinators ----------------------------------------------------------------

    def _reap(self, mine: set[int]) -> None:
        """Fail the trials of dead coordinators, enqueue their configurations again, and
        catch up with what other coordinators told meanwhile."""
        store = self.store
        with store.locked():
            for record in store.lost(self.stale_after_s):
                if record.number in mine:
                    continue
                spec = self._spec(record)
                reason = "its coordinator stopped before the trial finished"
                self._tell(record, spec, TrialResult.for_spec(spec, "lost", reason))
                if record.attempt + 1 < MAX_ATTEMPTS:
                    marks = TrialMarks(
                        baseline=record.marks.baseline,
                        attempt=record.attempt + 1,
                        retry_of=record.number,
                    )
                    store.enqueue(record.config, marks)
        if store.counted() != self.state.counted:
            self.state.load(store.records())

    def _wait_for_others(self) -> bool:
        """Nothing of ours is running but the baseline is not known: wait while another
        coordinator's trials run (reaping them if that coordinator died)."""
        while not self.stop.is_set():
            self.state.load(self.store.records())
            if self.state.baseline is not None:
                return True
            if any(r.marks.baseline for r in self.store.records(("waiting",))):
                return True
            if not self.store.records(("running",)):
                return False
            time.sleep(1.0)
            self._reap(set())
        return False
