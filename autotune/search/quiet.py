"""Waiting for a quiet machine. Under `measurement.contention: wait` each trial first waits
up to `contention_max_wait_s` for the machine's other load to pass. On a machine that stays
busy every trial would spend that wait for nothing (405 of a 621 s tuning, once): after
`GIVE_UP_AFTER` trials in a row that waited the whole time and still measured under load,
the study stops waiting, says so once, and its trials measure at once with the contended
mark ('warn'). `contention: fail` is the choice of a user who wants no such figures."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.core.contract import MeasurementSettings, TrialResult

GIVE_UP_AFTER = 3


@dataclass
class QuietWaits:
    settings: MeasurementSettings
    in_a_row: int = 0
    given_up: bool = False

    def measurement(self) -> MeasurementSettings:
        """The settings the next trial measures with."""
        if self.given_up:
            return self.settings.model_copy(update={"contention": "warn"})
        return self.settings

    def told(self, result: TrialResult) -> str | None:
        """Count the trial's wait; the note to tell, once, when the study stops waiting."""
        if self.given_up or self.settings.contention != "wait":
            return None
        provenance = result.provenance
        contention = provenance.contention if provenance is not None else None
        if contention is None:
            return None
        waited_in_vain = (
            contention.waited_s >= self.settings.contention_max_wait_s and contention.contended
        )
        self.in_a_row = self.in_a_row + 1 if waited_in_vain else 0
        if self.in_a_row < GIVE_UP_AFTER:
            return None
        self.given_up = True
        return (
            f"the machine stayed busy through {GIVE_UP_AFTER} waits for quiet in a row "
            f"({self.settings.contention_max_wait_s:g} s each): the next trials measure at once, "
            "marked contended (measurement.contention: fail ends them instead)"
        )
