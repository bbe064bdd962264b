"""A study's budget: a number of trials (counted across every coordinator of the study) and
a wall-clock time from this coordinator's start, which covers what follows the search too:
no trial starts once what is left is what the conclusion is expected to take (`reserve_s`).

A trial that ends `skipped` was never run, so it does not count toward `trials`: a study of N
trials measures N. What bounds a sampler that keeps proposing configurations the study skips
is `max_skips_in_a_row`: that many skipped trials one after another end the search. Skipped
trials are counted from the study's records when a coordinator starts and as it tells them;
those another coordinator tells meanwhile still count here, so a shared study never runs past
its budget (at worst it stops a few measurements short)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from autotune.core.contract import TrialStatus

# Skipped trials in a row that end the search: far more than a sampler proposes by chance
# among configurations that do run, and cheap, as a skipped trial costs no measurement.
MAX_SKIPS_IN_A_ROW = 100


@dataclass
class SearchBudget:
    trials: int | None
    timeout_s: float | None
    started: float = field(default_factory=time.monotonic)
    reserve_s: float = 0.0
    max_skips_in_a_row: int = MAX_SKIPS_IN_A_ROW
    skipped: int = 0  # the study's skipped trials known here: used, but not counted
    skips_in_a_row: int = 0

    def allows(self, used: int) -> bool:
        """Whether another trial may start when `used` trials count or run (skipped ones
        among them, which `skipped` takes back out)."""
        if self.skipped_out:
            return False
        if self.trials is not None and used - self.skipped >= self.trials:
            return False
        if self.timeout_s is None:
            return True
        return time.monotonic() - self.started + self.reserve_s < self.timeout_s

    @property
    def skipped_out(self) -> bool:
        return self.skips_in_a_row >= self.max_skips_in_a_row

    def told(self, status: TrialStatus) -> str | None:
        """Count a told trial; returns why the search ends where this skip reaches the cap."""
        if status == "lost":  # says nothing of the candidate: neither a skip nor a run
            return None
        if status != "skipped":
            self.skips_in_a_row = 0
            return None
        self.skipped += 1
        self.skips_in_a_row += 1
        if self.skips_in_a_row != self.max_skips_in_a_row:
            return None
        return (
            f"the search ends: its last {self.max_skips_in_a_row} trials were all skipped "
            "(never measured), so the strategy proposes nothing left to run"
        )
