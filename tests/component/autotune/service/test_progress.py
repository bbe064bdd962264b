"""A job's progress is told by its study (`JobProgress`, an observer of the coordinator):
the trials done and the best feasible configuration of the running front, never read back
from the study."""

from __future__ import annotations

from pathlib import Path

from autotune.conclusion.front import select
from autotune.search.front import front_of
from autotune.service.db import Database
from autotune.service.jobs import JobStore
from autotune.service.progress import JobProgress
from autotune.service.submission import prepare_job
from tests.coordinator_support import make_rig
from tests.service_support import principal, service_request, sqlite_settings

OWNER = "runner-1"


def test_a_running_job_shows_the_trials_done_and_the_best_of_the_running_front(
    tmp_path: Path,
) -> None:
    settings = sqlite_settings(tmp_path)
    db = Database(settings.db)
    store, alice = JobStore(db), principal(db)
    job, _ = store.submit(prepare_job(service_request(trials=6), alice, settings))
    assert store.claim(OWNER, settings.lease_s) is not None
    rig = make_rig("autotune", trials=6)
    selection = rig.coordinator.tuning.request.selection
    rig.coordinator.told_to.observers.append(JobProgress(store, job.id, OWNER, selection))

    rig.search()

    running = store.get(alice, job.id)
    chosen = select(front_of(rig.store), selection)
    assert running.trials_done == 6
    assert running.best == {
        "trial": chosen.trial_number,
        "config": chosen.config,
        "metrics": chosen.metrics,
    }


def test_another_runner_s_job_is_not_written(tmp_path: Path) -> None:
    settings = sqlite_settings(tmp_path)
    db = Database(settings.db)
    store, alice = JobStore(db), principal(db)
    job, _ = store.submit(prepare_job(service_request(trials=3), alice, settings))
    assert store.claim(OWNER, settings.lease_s) is not None
    rig = make_rig(trials=3)
    selection = rig.coordinator.tuning.request.selection
    rig.coordinator.told_to.observers.append(
        JobProgress(store, job.id, "not-its-runner", selection)
    )

    rig.search()

    running = store.get(alice, job.id)
    assert (running.trials_done, running.best) == (0, None)
