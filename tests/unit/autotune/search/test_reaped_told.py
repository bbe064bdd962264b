"""A trial reaped from a dead coordinator is told to the study and to the observers of the
coordinator that reaped it, as every told trial is."""

from __future__ import annotations

from autotune.results import TrialMarks
from autotune.results.leases import Owner
from autotune.search.reaping import KILLED_REASON
from tests.coordinator_support import config_with, dead_pid, make_rig


def test_a_reaped_trial_reaches_the_tracker_and_the_observers() -> None:
    first = make_rig(trials=2)
    first.search()
    killed = Owner(pid=dead_pid(), in_process=True)
    first.store.beat(killed)
    space = first.coordinator.tuning.space
    running = first.store.create(space, config_with(batch__size=8), TrialMarks(), killed)
    resumed = make_rig(store=first.store, trials=3)
    resumed.search()

    told = [t for t in resumed.observed.trials if t.record.number == running.number]
    assert [(t.result.status, t.result.reason) for t in told] == [("oom", KILLED_REASON)]
    assert resumed.tracker.numbers.count(running.number) == 1
