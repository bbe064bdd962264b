"""The search's summary and its verdict on failures count each measurement once: a trial
answered from an earlier measurement (a repeat) did not run."""

from __future__ import annotations

from autotune.core.contract import TrialStatus
from autotune.results import TrialRecord
from autotune.search.report import check_failures, study_summary

REASON = "IndexError in build: list index out of range"


def trial(number: int, status: TrialStatus, repeats: int | None = None) -> TrialRecord:
    return TrialRecord(
        number=number,
        state="pruned",
        config={"batch.size": number},
        status=status,
        reason=REASON if status == "error" else None,
        reused_from=None if repeats is None else f"s#{repeats}",
        measured=repeats is None,
    )


# The baseline and one more measured fine; trial 2 failed, and was proposed twice more.
STUDY = [trial(0, "ok"), trial(1, "ok"), trial(2, "error"), trial(3, "error", 2)]
STUDY += [trial(4, "error", 2)]


def test_repeats_of_a_failed_trial_are_not_failures_of_their_own() -> None:
    check_failures(STUDY)  # 1 of the 3 trials that ran failed


def test_the_summary_says_how_many_trials_were_answered_from_earlier_ones() -> None:
    assert study_summary(STUDY) == (
        f"5 trials: 3 error ({REASON}), 2 ok; 2 of them answered from an earlier "
        "measurement, not measured"
    )
    assert study_summary(STUDY[:3]) == f"3 trials: 2 ok, 1 error ({REASON})"
