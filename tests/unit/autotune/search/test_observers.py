"""The coordinator's one list of observers: the tracker first, then the ones it is given,
each told the start, every told trial, the running front where it changed and the notes."""

from __future__ import annotations

from autotune.results.records import Candidate
from autotune.search.front import front_of
from autotune.search.observers import Observer, Observers, TrialTold
from tests.coordinator_support import RecordingTracker, make_rig


def test_each_told_trial_reaches_the_tracker_then_the_observers() -> None:
    rig = make_rig(trials=4)
    logged_before: list[list[int]] = []

    class AfterTheTracker(Observer):
        def __init__(self, tracker: RecordingTracker) -> None:
            self.tracker = tracker

        def on_trial(self, trial: TrialTold) -> None:
            logged_before.append(list(self.tracker.numbers))

    rig.coordinator.told_to.observers.append(AfterTheTracker(rig.tracker))
    rig.search()

    told = [trial.record.number for trial in rig.observed.trials]
    assert told == rig.tracker.numbers == [0, 1, 2, 3]
    assert logged_before == [told[: i + 1] for i in range(len(told))]
    assert [trial.done for trial in rig.observed.trials] == [1, 2, 3, 4]
    assert {(trial.study, trial.total) for trial in rig.observed.trials} == {(rig.store.name, 4)}
    assert rig.observed.starts == [(0, 4)]


def test_the_running_front_is_told_where_it_changed_and_ends_as_the_study_s() -> None:
    rig = make_rig("autotune", trials=6)
    rig.search()

    fronts = rig.observed.fronts
    assert fronts, "a study with a feasible trial has a front"
    assert all(a != b for a, b in zip(fronts, fronts[1:], strict=False)), "told only on change"
    assert sorted(fronts[-1]) == sorted(c.trial_number for c in front_of(rig.store))


def test_a_resumed_study_starts_with_its_count_and_its_front() -> None:
    first = make_rig(trials=3)
    first.search()

    resumed = make_rig(store=first.store, trials=5)
    resumed.search()

    assert resumed.observed.starts == [(3, 5)]
    assert resumed.observed.fronts[0] == first.observed.fronts[-1]
    assert [trial.done for trial in resumed.observed.trials] == [4, 5]


def test_the_list_tells_every_observer_in_order() -> None:
    heard: list[str] = []

    class Named(Observer):
        def __init__(self, name: str) -> None:
            self.name = name

        def on_phase(self, phase: str) -> None:
            heard.append(f"{self.name} {phase}")

        def on_front(self, front: list[Candidate]) -> None:
            heard.append(f"{self.name} front of {len(front)}")

    observers = Observers([Named("a"), Observer(), Named("b")])
    observers.on_phase("export: the optimized model")
    observers.on_front([])
    observers.on_note("nobody listens")

    assert heard == [
        "a export: the optimized model",
        "b export: the optimized model",
        "a front of 0",
        "b front of 0",
    ]
