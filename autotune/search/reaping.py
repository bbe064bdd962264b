"""Trials of dead coordinators: Optuna's heartbeat does not cover ask/tell, so a running
trial whose coordinator stopped beating (`autotune.results.leases`) is told as lost and its
configuration enqueued again, a bounded number of times; one that ran inside the dead
coordinator's process is told `oom` and not run again (it most likely killed it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.core.contract import TrialResult, TrialSpec
from autotune.results.records import TrialMarks, TrialRecord
from autotune.search.state import SearchState

if TYPE_CHECKING:
    from autotune.results.store import ResultStore
    from autotune.space.search_space import EffectiveSpace

# A trial lost to a dead worker or coordinator runs at most this many times in all.
MAX_ATTEMPTS = 3
LOST_REASON = "its coordinator stopped before the trial finished"
# A trial that ran inside its coordinator's process when that process died most likely
# killed it (the kernel's out-of-memory killer, or a crash in a runtime): it is not run again.
KILLED_REASON = (
    "the tuning process died while this trial ran inside it (most likely killed for its "
    "memory); not run again"
)


@dataclass
class StaleTrialReaper:
    store: ResultStore
    space: EffectiveSpace
    # Tells a trial's result to the study and its observers (the coordinator's).
    tell: Callable[[TrialRecord, TrialSpec, TrialResult], TrialRecord]
    state: SearchState
    spec_for: Callable[[TrialRecord], TrialSpec]
    stale_after_s: float
    stop: threading.Event

    def reap(self, mine: set[int]) -> None:
        """Fail the trials of dead coordinators (not those in `mine`), enqueue their
        configurations again, and catch up with what other coordinators told meanwhile."""
        store = self.store
        with store.locked():
            for record in store.lost(self.stale_after_s):
                if record.number in mine:
                    continue
                spec = self.spec_for(record)
                if record.died_in_process:
                    self.tell(record, spec, TrialResult.for_spec(spec, "oom", KILLED_REASON))
                    continue
                self.retry_later(record, spec, LOST_REASON)
        if store.counted() != self.state.counted:
            self.state.load(store.records())

    def retry_later(self, record: TrialRecord, spec: TrialSpec, reason: str) -> None:
        """Under the study lock: the trial told lost, and its configuration enqueued again
        while it has attempts left."""
        self.tell(record, spec, TrialResult.for_spec(spec, "lost", reason))
        if record.attempt + 1 < MAX_ATTEMPTS:
            marks = TrialMarks(
                baseline=record.marks.baseline,
                attempt=record.attempt + 1,
                retry_of=record.number,
            )
            self.store.enqueue(self.space, record.config, marks)

    def wait_for_others(self) -> bool:
        """Nothing of ours is running but the baseline is not known: wait while another
        coordinator's trials run (reaping them if that coordinator died). Whether the
        baseline is known or waiting now."""
        while not self.stop.is_set():
            self.state.load(self.store.records())
            if self.state.baseline is not None:
                return True
            if any(r.marks.baseline for r in self.store.waiting()):
                return True
            if not self.store.records(("running",)):
                return False
            time.sleep(1.0)
            self.reap(set())
        return False
