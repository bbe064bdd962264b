"""A display given as callables, as an observer of a study: each part shows what it is given,
and a part left out shows nothing."""

from __future__ import annotations

from typing import Any

from autotune.search.observers import Display, Observers
from tests.coordinator_support import make_rig


def test_each_part_of_a_display_is_told_its_hooks() -> None:
    trials: list[tuple[int, Any]] = []
    notes: list[str] = []
    phases: list[str] = []
    rig = make_rig(trials=3)
    display = Display(lambda done, shown: trials.append((done, shown)), notes.append, phases.append)
    rig.coordinator.told_to.observers.append(display)
    rig.search()
    Observers([display]).on_phase("head-to-head")
    Observers([display]).on_note("resumed")

    assert [done for done, _ in trials] == [0, 1, 2, 3]
    assert trials[0][1] is None  # the start shows the trials done, no result
    assert [shown.trial_number for _, shown in trials[1:]] == [0, 1, 2]
    assert phases == ["head-to-head"]
    assert notes[-1:] == ["resumed"]


def test_a_display_without_trials_or_lines_shows_nothing_and_does_not_fail() -> None:
    rig = make_rig(trials=2)
    rig.coordinator.told_to.observers.append(Display(None, None, None))
    rig.search()
    assert [trial.done for trial in rig.observed.trials] == [1, 2]
