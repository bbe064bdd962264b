"""What a study tells as it runs, and to whom: one list of observers (as Ray Tune's
`Callback`s), told each trial, each phase and the running front, in the order they were
given. The tracker is one of them (`TrackerObserver`), the command line's display and the
service's job progress are others; each hook does nothing unless an observer overrides it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.core.contract import TrialResult
from autotune.core.contract.trials import SensitivityTable
from autotune.results.records import Candidate, TrialRecord
from autotune.search.report import as_repeat
from autotune.tracking import trial_log

if TYPE_CHECKING:
    from autotune.tracking import Tracker

# The file of a failed trial's MLflow run that holds where it raised.
TRACEBACK_FILE = "traceback.txt"


@dataclass(frozen=True)
class TrialTold:
    """A trial told to the study `study`: its record as stored, the result it was told from,
    and the trials counted toward the budget of `total` (None: no trial budget), this one
    included."""

    study: str
    record: TrialRecord
    result: TrialResult
    done: int
    total: int | None

    @property
    def shown(self) -> TrialResult:
        """The result as its line shows it: a repeat says which trial answered it."""
        return as_repeat(self.result, self.record.repeat_of(self.study))


class Observer:
    """Override the hooks an observer needs; the others do nothing."""

    def on_start(self, done: int, total: int | None) -> None:
        """The search starts with `done` trials of the study counted toward the budget of
        `total` (more than 0: a resumed study)."""

    def on_trial(self, trial: TrialTold) -> None:
        """A trial was told to the study."""

    def on_front(self, front: list[Candidate]) -> None:
        """The feasible Pareto front of the trials told so far changed (first told as the
        search starts, where the study has one)."""

    def on_sensitivity(self, table: SensitivityTable) -> None:
        """An int8 sensitivity ranking the trials were built by, told once per model and
        mode."""

    def on_phase(self, phase: str) -> None:
        """The study is in the phase `phase` ("name: what it does") after its search."""

    def on_note(self, note: str) -> None:
        """A line for the user: a resumed study, a node that left, a bound no configuration
        meets so far, the search's summary."""


class Observers(Observer):
    """The list: each hook tells every observer, in order."""

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self.observers = list(observers)

    def on_start(self, done: int, total: int | None) -> None:
        for observer in self.observers:
            observer.on_start(done, total)

    def on_trial(self, trial: TrialTold) -> None:
        for observer in self.observers:
            observer.on_trial(trial)

    def on_front(self, front: list[Candidate]) -> None:
        for observer in self.observers:
            observer.on_front(front)

    def on_sensitivity(self, table: SensitivityTable) -> None:
        for observer in self.observers:
            observer.on_sensitivity(table)

    def on_phase(self, phase: str) -> None:
        for observer in self.observers:
            observer.on_phase(phase)

    def on_note(self, note: str) -> None:
        for observer in self.observers:
            observer.on_note(note)


class TrackerObserver(Observer):
    """The study's tracker as an observer: a record per told trial (a failure's traceback as
    `traceback.txt`) and the sensitivity rankings."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    def on_trial(self, trial: TrialTold) -> None:
        told, result = trial.record, trial.result
        logged, tags = trial_log(told, result, trial.study)
        texts = {TRACEBACK_FILE: result.traceback} if result.traceback else None
        self.tracker.log_trial(
            told.number, told.attempt, told.config, logged, tags, result.duration_s, texts
        )

    def on_sensitivity(self, table: SensitivityTable) -> None:
        self.tracker.log_sensitivity(table)


@dataclass
class Display(Observer):
    """A display given as callables (`TuneOptions`' notes and phases, a `ProgressFactory`'s
    trial updates) as an observer; what is None is not shown."""

    trials: Callable[[int, Any], None] | None
    note: Callable[[str], None] | None
    phase: Callable[[str], None] | None

    def on_start(self, done: int, total: int | None) -> None:
        if self.trials is not None:
            self.trials(done, None)

    def on_trial(self, trial: TrialTold) -> None:
        if self.trials is not None:
            self.trials(trial.done, trial.shown)

    def on_note(self, note: str) -> None:
        if self.note is not None:
            self.note(note)

    def on_phase(self, phase: str) -> None:
        if self.phase is not None:
            self.phase(phase)
