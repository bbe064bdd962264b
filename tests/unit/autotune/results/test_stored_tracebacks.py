"""What a study keeps of a failed trial's traceback: an `error` trial's, its tail; none of a
trial that ended any other way (a lost worker's text says nothing of the candidate)."""

from __future__ import annotations

from autotune.core.contract import TrialStatus
from autotune.results.records import STORED_TRACEBACK_CHARS, TrialEnding, TrialRecord


def told(status: TrialStatus, traceback: str) -> TrialRecord:
    outcome = TrialEnding(
        config={"batch.size": 8},
        attempt=0,
        status=status,
        variant_key="v",
        reason="ValueError: boom",
        measured=True,
        traceback=traceback,
    )
    stored = TrialEnding.model_validate(outcome.model_dump(mode="json", exclude_defaults=True))
    return TrialRecord(number=3, state="running", config={}).told(stored)


def test_an_error_trial_keeps_the_tail_of_its_traceback() -> None:
    long = "Traceback (most recent call last):\n" + "x" * STORED_TRACEBACK_CHARS + "\nValueError"

    record = told("error", long)

    assert record.traceback is not None and len(record.traceback) == STORED_TRACEBACK_CHARS
    assert record.traceback.endswith("x\nValueError")


def test_a_trial_that_did_not_end_in_error_keeps_no_traceback() -> None:
    for status in ("lost", "oom", "timeout", "unsupported"):
        assert told(status, "Traceback ...\nRayActorError").traceback is None, status
