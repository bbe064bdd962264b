"""A job's progress, told by its study as it runs (an observer of the coordinator): the
trials done and the best feasible configuration of the running front, by the request's
selection; each trial's line in the server's log."""

from __future__ import annotations

import logging
from typing import Any

from autotune.conclusion.front import select
from autotune.requests.request import Selection
from autotune.results.records import Candidate
from autotune.search.observers import Observer, TrialTold
from autotune.search.report import trial_text
from autotune.service.jobs import JobStore

log = logging.getLogger("autotune.runner")


class JobProgress(Observer):
    """Writes the job's `trials_done` and `best` as the study tells them, while `owner`
    holds its lease: nothing is read back from the study."""

    def __init__(self, store: JobStore, job_id: str, owner: str, selection: Selection) -> None:
        self.store = store
        self.job_id = job_id
        self.owner = owner
        self.selection = selection
        self.done = 0
        self.best: dict[str, Any] | None = None

    def on_start(self, done: int, total: int | None) -> None:
        self._record(done)

    def on_trial(self, trial: TrialTold) -> None:
        log.info("job %s: %s", self.job_id, trial_text(trial.shown))
        self._record(trial.done)

    def on_front(self, front: list[Candidate]) -> None:
        chosen = select(front, self.selection)
        self.best = {
            "trial": chosen.trial_number,
            "config": chosen.config,
            "metrics": chosen.metrics,
        }
        self._record(self.done)

    def _record(self, done: int) -> None:
        self.done = done
        self.store.progress(self.job_id, self.owner, done, self.best)
