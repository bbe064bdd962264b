"""The coordinator: ask -> submit -> wait -> tell, over injected parts.

A `ResultStore` holds the study, a `Strategy` proposes and answers what needs no
measurement, an `Executor` measures; its observers (`autotune.search.observers`: the
`Tracker` first, then the ones it is given) are told each trial, the running front and the
notes; `SearchBudget` says when to stop.
The baseline (the unmodified model) runs first; results that arrive before its accuracy is
known wait for it; a baseline whose batch scan ran under load scans again once the machine is
quiet (`autotune.search.rescan`). Trials lost to a dead worker are retried; trials of dead
coordinators are reaped and enqueued again. The search ends with the baseline's record;
`autotune.tuning.run_study` then concludes the study (`autotune.conclusion`).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from autotune.core.contract import ConfigValue, Screen, ScreenObjective, TrialResult, TrialSpec
from autotune.core.errors import AutotuneError, Interrupted, NodesGone
from autotune.core.knobs import variant_key
from autotune.core.metrics import ACCURACY, OBJECTIVES, Direction
from autotune.results.leases import Heartbeat, Owner
from autotune.results.records import Candidate, TrialMarks, TrialRecord
from autotune.search.answers import Answers
from autotune.search.budget import SearchBudget
from autotune.search.front import RunningFront, by_contribution, value_of
from autotune.search.inputs import Tuning
from autotune.search.int8_outlook import int8_outlook_notes
from autotune.search.interrupts import stop_on_signals
from autotune.search.observers import Observer, Observers, TrackerObserver, TrialTold
from autotune.search.quiet import QuietWaits
from autotune.search.reaping import MAX_ATTEMPTS, StaleTrialReaper
from autotune.search.report import check_failures, sensitivity_note, study_summary
from autotune.search.rescan import Rescans
from autotune.search.state import BATCH, SearchState
from autotune.search.telling import Teller
from autotune.search.unmet import unmet_note
from autotune.strategies.reasons import staged

if TYPE_CHECKING:
    from autotune.execution.base import Executor
    from autotune.results.store import ResultStore
    from autotune.search.warm_start import WarmStart
    from autotune.strategies import Strategy
    from autotune.tracking import Tracker

# How often the coordinator looks for trials of dead coordinators, and how long a
# coordinator's heartbeat may be silent before its trials count as lost.
REAP_EVERY_S = 10.0
STALE_AFTER_S = 60.0


@dataclass
class Coordinator:
    tuning: Tuning
    store: ResultStore
    strategy: Strategy
    executor: Executor
    tracker: Tracker
    budget: SearchBudget
    warm_start: WarmStart | None = None
    # Told after the tracker, in this order.
    observers: list[Observer] = field(default_factory=list)
    # Set from a signal handler or another thread: stop asking, let running trials end.
    stop: threading.Event = field(default_factory=threading.Event)
    stale_after_s: float = STALE_AFTER_S
    owner: Owner = field(default_factory=Owner)
    state: SearchState = field(default_factory=SearchState)

    def __post_init__(self) -> None:
        if self.executor.runs_in_process:
            self.owner = replace(self.owner, in_process=True)
        if not self.tuning.profile.gpus:  # on a GPU, a batch's memory is the device's
            self.state.oom.budget_mb = self.executor.trial_memory_mb
        self.state.calls.max_call_ms = self.tuning.request.measurement.max_call_ms
        self.quiet = QuietWaits(self.tuning.request.measurement)
        self.rescans = Rescans()
        self._running_front = RunningFront([OBJECTIVES[o] for o in self.tuning.request.objectives])
        self._told_front: list[Candidate] = []
        self.told_to = Observers([TrackerObserver(self.tracker), *self.observers])
        self.teller = Teller(
            self.tuning.request, self.store, self.state, self.told_to.on_sensitivity
        )
        self.answers = Answers(
            self.tuning.request,
            self.store.name,
            self.tuning.model_info.sha256,
            self.tuning.profile.fingerprint,
            self.strategy,
            self.state,
            self.warm_start,
        )
        self.reaper = StaleTrialReaper(
            self.store,
            self.tuning.space,
            self._tell,
            self.state,
            self._spec,
            self.stale_after_s,
            self.stop,
        )
        self.executor.on_node_event(lambda event: self.told_to.on_note(event.describe()))

    def _tell(
        self,
        record: TrialRecord,
        spec: TrialSpec,
        result: TrialResult,
        baseline_accuracy: float | None = None,
    ) -> TrialRecord:
        """The result told to the study (`Teller.tell`), then its told record to the
        observers (`_told`)."""
        told = self.teller.tell(record, spec, result, baseline_accuracy)
        self._told(told, result)
        return told

    def _told(self, told: TrialRecord, result: TrialResult) -> None:
        """A trial told: to the observers with the progress (skipped trials aside: they do
        not count toward the budget), then the front where it changed, why the search ends
        where skips did, and each bound no configuration meets so far."""
        ended_by_skips = self.budget.told(result.status)
        done = self.state.counted - self.budget.skipped
        self.told_to.on_trial(TrialTold(self.store.name, told, result, done, self.budget.trials))
        self._tell_front()
        if ended_by_skips is not None:
            self.told_to.on_note(ended_by_skips)
        constraints = self.tuning.request.constraints.model_dump(exclude_none=True)
        note = unmet_note(self.state.completed.values(), constraints)
        if note is not None:
            self.told_to.on_note(note)

    def _tell_front(self) -> None:
        """The feasible front to the observers, where it is not the one they were told."""
        front = self._running_front.update(self.state.completed)
        if front != self._told_front:  # its trials, or a trial's figures
            self._told_front = front
            self.told_to.on_front(front)

    def run(self) -> TrialRecord:
        """Search until the budget is spent or the study is stopped, then tell what it found;
        the baseline's record. A stopped study raises `Interrupted`, one where most trials
        failed `MostTrialsFailed`."""
        started = time.monotonic()
        with (
            Heartbeat(lambda: self.store.beat(self.owner)),
            stop_on_signals(self.stop) as received,
        ):
            baseline = self.search()
        records = self.store.records()
        self.told_to.on_note(f"study {self.store.name}: {study_summary(records)}")
        self._note_sensitivity(records, time.monotonic() - started)
        if self.stop.is_set():
            by = received[0] if received else "the user"
            raise Interrupted(
                f"stopped by {by} after the running trials; run the same command to "
                f"resume {self.store.name!r}"
            )
        check_failures(records)
        return baseline

    def _note_sensitivity(self, records: list[TrialRecord], search_s: float) -> None:
        """Where the int8 sensitivity time went, and what the rankings say of each int8 mode
        that no variant kept within the accuracy bound."""
        tables = self.store.sensitivities()
        note = sensitivity_note(tables, self.teller.sensitivity_seconds, search_s)
        max_drop = self.tuning.request.constraints.max_accuracy_drop
        for line in ([] if note is None else [note]) + int8_outlook_notes(
            records, tables, max_drop
        ):
            self.told_to.on_note(line)

    def search(self) -> TrialRecord:
        """Keep every slot busy until the budget is spent; return the baseline's record."""
        state = self.state
        records = self.store.records()
        state.load(records)
        self.strategy.start(records)
        self.strategy.learn_sensitivity(self.store.sensitivities())
        self.budget.skipped = sum(r.counted and r.status == "skipped" for r in records)
        done = state.counted - self.budget.skipped
        if done:
            of = "" if self.budget.trials is None else f" of {self.budget.trials}"
            self.told_to.on_note(f"study {self.store.name}: {done}{of} trials done, re-using them")
        self.told_to.on_start(done, self.budget.trials)
        self._tell_front()
        last_reap = -REAP_EVERY_S
        while True:
            if time.monotonic() - last_reap >= REAP_EVERY_S:
                self.reaper.reap(set(state.running))
                last_reap = time.monotonic()
            self._follow_the_baseline()
            if not self.executor.slots:
                self._wait_for_a_node()
            while len(state.running) < self.executor.slots and not self.stop.is_set():
                record = self._ask()
                if record is None:
                    break
                self._start(record)
            if not state.running:
                if state.baseline is not None:
                    return state.baseline
                if self.stop.is_set() or not self.reaper.wait_for_others():
                    raise AutotuneError("the baseline (unmodified model) was never measured")
                continue
            finished, state.ready = state.ready or self.executor.wait(), []
            for result in finished:
                self._settle(result)

    def _wait_for_a_node(self) -> None:
        """No node of the kind is left: wait for one (the executor's bounded wait). Stopped
        meanwhile, or past the wait, the trials it held are given back to the study (run
        again on resume), and past the wait the study ends."""
        try:
            self.executor.wait_for_slots(self.stop)
        except NodesGone as gone:
            self._give_back("no node of the study's kind was left to run it")
            state = self.state
            of = "" if self.budget.trials is None else f" of {self.budget.trials}"
            raise NodesGone(
                f"{gone}: the study {self.store.name!r} stops with {state.counted}{of} trials "
                "done; run the same command to resume once a node of the kind is back"
            ) from None
        if not self.executor.slots:
            self._give_back("the study stopped while no node of its kind was left")

    def _give_back(self, reason: str) -> None:
        state = self.state
        with self.store.locked():
            for record, spec in state.running.values():
                self.reaper.retry_later(record, spec, reason)
        state.running.clear()
        state.ready.clear()

    # -- asking ----------------------------------------------------------------------------

    def _ask(self) -> TrialRecord | None:
        """Under the study lock: enqueue the baseline if nobody has, check the budget
        against every coordinator's trials, and start a trial: the strategy's proposal, else
        a waiting one or the sampler's."""
        store, space = self.store, self.tuning.space
        with store.locked():
            census = store.census()
            if self.state.baseline is None and not self._baseline_in_flight(census.waiting):
                self._enqueue_baseline()
                census = store.census()
            waiting = census.waiting
            waiting_baseline = any(r.marks.baseline for r in waiting)
            if not waiting_baseline and not self.budget.allows(census.used):
                return None
            if not waiting and self.strategy.proposes:
                if self._own_baseline_running():  # the strategy learns from its figures first
                    return None
                max_drop = self.tuning.request.constraints.max_accuracy_drop
                proposal = self.strategy.propose(
                    self._front,
                    self.state.excluded(max_drop),
                    lambda config: self.state.batch_limit(config) is not None,
                )
                if proposal is not None:
                    marks = TrialMarks(proposed=proposal.why)
                    return store.create(space, proposal.config, marks, self.owner)
            return store.ask(space, self.owner, waiting=bool(waiting))

    def _own_baseline_running(self) -> bool:
        return self.state.baseline is None and any(
            record.marks.baseline for record, _ in self.state.running.values()
        )

    def _baseline_in_flight(self, waiting: list[TrialRecord]) -> bool:
        if any(r.marks.baseline for r in waiting):
            return True
        return any(r.marks.baseline for r in self.store.records(("running", "complete")))

    def _enqueue_baseline(self) -> None:
        """The baseline, and in a new study a warm start's front right after it."""
        new_study = not self.store.records()
        space = self.tuning.space
        self.store.enqueue(space, space.baseline(), TrialMarks(baseline=True))
        if self.warm_start is not None and new_study:
            marks = TrialMarks(warm_start=self.warm_start.source_study)
            for config in self.warm_start.configs_for(space):
                self.store.enqueue(space, config, marks)

    def _front(self) -> list[dict[str, ConfigValue]]:
        objectives = [OBJECTIVES[o] for o in self.tuning.request.objectives]
        front = self._running_front.update(self.state.completed)
        return [c.config for c in by_contribution(front, objectives)]

    def _start(self, record: TrialRecord) -> None:
        """Answer the trial without measuring it where possible, else submit it."""
        state = self.state
        spec = self._spec(record)
        answer = self.answers.answer(spec, record)
        if answer is not None and answer.wait_for is not None:
            state.waiting.setdefault(answer.wait_for, []).append((record, spec))
            return
        if answer is not None and answer.result is not None:
            state.running[record.number] = (record, spec)
            if answer.reused_from is not None:
                state.reused_from[record.number] = answer.reused_from
            state.ready.append(answer.result)
            return
        known = self.answers.known_accuracy(spec, record)
        quality = self.state.quality.get(variant_key(spec.config), {}) if known is not None else {}
        spec = spec.model_copy(update={"known_accuracy": known, "known_quality": quality})
        state.running[record.number] = (record, spec)
        self.executor.submit(spec)

    def _spec(self, record: TrialRecord) -> TrialSpec:
        request = self.tuning.request
        return TrialSpec(
            study=self.store.name,
            trial_number=record.number,
            workload=self.tuning.workload,
            config=record.config,
            measurement=self.quiet.measurement(),
            timeout_s=request.budget.trial_timeout_s,
            attempt=record.attempt,
            batch_scan=self._batch_scan(record),
            screen=None if record.marks.baseline else self._screen(),
            accuracy_floor=None if record.marks.baseline else self._accuracy_floor(),
        )

    def _accuracy_floor(self) -> float | None:
        max_drop = self.tuning.request.constraints.max_accuracy_drop
        baseline = self.state.baseline
        if max_drop is None or baseline is None or baseline.metrics is None:
            return None
        return float(baseline.metrics["accuracy"]) - max_drop

    def _screen(self) -> Screen | None:
        """The feasible front so far, for a trial's short window to be judged against."""
        request = self.tuning.request
        if request.measurement.screen_seconds is None:
            return None
        objectives = [OBJECTIVES[o] for o in request.objectives]
        front = self._running_front.update(self.state.completed)
        if not front:
            return None
        return Screen(
            objectives=[
                ScreenObjective(
                    metric=m.name,
                    maximize=m.direction is Direction.MAXIMIZE,
                    timed=m is not ACCURACY,
                )
                for m in objectives
            ],
            front=[[float(value_of(c, m)) for m in objectives] for c in front],
            margin=request.measurement.screen_margin,
        )

    def _batch_scan(self, record: TrialRecord) -> list[int]:
        """The baseline reads its call time at each of the space's batch sizes from its own
        up: what the batch-size time limit and the strategy estimate from."""
        batches = self.tuning.space.choices().get(BATCH, [])
        if not record.marks.baseline or len(batches) < 2:
            return []
        own = int(record.config.get(BATCH, 1))
        return sorted(int(b) for b in batches if isinstance(b, int) and b >= own)

    # -- telling ---------------------------------------------------------------------------

    def _settle(self, result: TrialResult) -> None:
        state = self.state
        record, spec = state.running.pop(result.trial_number)
        result = _with_stage(self._of_this_kind(spec, result))
        gave_up_waiting = self.quiet.told(result)
        if gave_up_waiting is not None:
            self.told_to.on_note(gave_up_waiting)
        if self.rescans.scanning(record.number):
            spec, result = self.rescans.merged(result)
            self.told_to.on_note(str(result.rescanned))
        elif record.marks.baseline and self.rescans.wanted(spec, result):
            again = self.rescans.spec(spec, result)  # before anything else is proposed
            state.running[record.number] = (record, again)
            self.executor.submit(again)
            return
        left_twice = result.interrupted is not None  # its node left twice: not run a third time
        if result.status == "lost" and not left_twice and spec.attempt + 1 < MAX_ATTEMPTS:
            retry = spec.model_copy(update={"attempt": spec.attempt + 1})
            self.executor.submit(retry)
            state.running[record.number] = (record, retry)
            return
        if result.status == "oom":
            state.oom.record(spec.config)
        if result.status == "too_slow":
            state.calls.too_slow(spec.config, result.slow_call_ms)
        if result.status == "infeasible":
            state.infeasible.add(result.variant_key)
        if result.metrics is not None:
            state.oom.measured(spec.config, result.metrics.peak_memory_mb)
        if result.times is not None:
            state.build_seconds.append(result.times.build_s)
            self.budget.reserve_s = self._conclusion_estimate_s()
        figures = result.metrics or result.screening
        if figures is not None:
            state.calls.measured(spec.config, figures.latency_p50_ms)
            state.learn_quality(result.variant_key, figures)
        if result.call_ms_by_batch:
            state.calls.scanned(spec.config, result.call_ms_by_batch)
        if record.marks.baseline and state.baseline is None:
            self._tell_baseline(record, spec, result)
        elif state.baseline is None and result.metrics is not None:
            state.held.append((record, spec, result))
        else:
            self._tell(record, spec, result)
        self.strategy.after_trial(spec, result)
        self._answer_repeats(record, result)

    def _answer_repeats(self, record: TrialRecord, result: TrialResult) -> None:
        """The repeats that waited for this trial's measurement are answered from it (or lost
        with it)."""
        state = self.state
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

    def _conclusion_estimate_s(self) -> float:
        """What the head-to-head and the export are expected to take: each entrant (the
        choice, its neighbours, the baseline) built and timed in every round, and the choice
        built once more for the export; a build as long as the trials' median."""
        validation = self.tuning.request.validation
        entrants = validation.neighbours + 2
        build_s = statistics.median(self.state.build_seconds)
        timed_s = validation.rounds * validation.round_seconds
        return (entrants + 1) * build_s + entrants * timed_s

    def _of_this_kind(self, spec: TrialSpec, result: TrialResult) -> TrialResult:
        """A result measured on another kind of node than the study's is refused as an error:
        its timings belong to another study."""
        provenance, expected = result.provenance, self.tuning.profile.fingerprint
        if provenance is None or provenance.hardware_fingerprint in (None, expected):
            return result
        reason = (
            f"measured on hardware {provenance.hardware_fingerprint} (node "
            f"{provenance.node_id}), not on this study's kind {expected}"
        )
        return TrialResult.for_spec(spec, "error", reason, result.duration_s)

    def _tell_baseline(self, record: TrialRecord, spec: TrialSpec, result: TrialResult) -> None:
        if result.metrics is None:
            self._tell(record, spec, result)
            raise AutotuneError(f"the baseline (unmodified model) failed: {result.reason}")
        self.state.baseline = self._tell(record, spec, result, result.metrics.accuracy)
        self._follow_the_baseline()

    def _follow_the_baseline(self) -> None:
        """Results held for the baseline's accuracy are told once it is known, whichever
        coordinator measured it."""
        state = self.state
        found = state.held and any(r.marks.baseline for r in self.store.completed())
        if state.baseline is None and found:
            state.load(self.store.records())
        if state.baseline is None:
            return
        held, state.held = state.held, []
        for record, spec, result in held:
            if result.metrics is not None:
                state.learn_quality(result.variant_key, result.metrics)
            self._tell(record, spec, result)


def _with_stage(result: TrialResult) -> TrialResult:
    """An error's reason with the stage it was raised in, read from its traceback
    (`autotune.strategies.reasons.staged`)."""
    if result.status != "error":
        return result
    return result.model_copy(update={"reason": staged(result.reason, result.traceback)})
