"""What the user reads of a search: a line for each told trial, with the reason of one that
did not end ok (or the trial it repeats), and a summary of the study's trials when the
search ends (each status counted, with its most common reason). A study where more than half
of the trials that ran failed (`FAILED_STATUSES`) ends in `MostTrialsFailed`.

Failed: `error`, `timeout`, `oom`, `unsupported` and `contended`, a trial that gave no
measurement for a reason of its own. Not failed: `ok`, and the measured verdicts
`infeasible`, `too_slow` and `screened`. Not counted either way: `skipped` (never run),
`lost` (its worker died; it is run again) and a trial answered from an earlier measurement
(a repeat, or a warm start's: it did not run)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from autotune.core.errors import MostTrialsFailed
from autotune.strategies.reasons import one_line

if TYPE_CHECKING:
    from autotune.core.contract import TrialResult
    from autotune.core.contract.trials import SensitivityTable
    from autotune.results.records import TrialRecord

FAILED_STATUSES = frozenset({"error", "timeout", "oom", "unsupported", "contended"})
NOT_RUN_STATUSES = frozenset({"skipped", "lost"})
# A summary's reasons are shorter than a trial line's: several share one line.
SUMMARY_REASON_CHARS = 80


def trial_text(result: TrialResult) -> str:
    """A told trial in one line: its number, its status and its reason where it has one (why
    it did not end ok, or the trial it repeats: `as_repeat`), its p95 and where its time
    went."""
    text = f"trial {result.trial_number}: {result.status}"
    if result.metrics is not None:
        text += f", p95 {result.metrics.latency_p95_ms:.3f} ms"
    if result.reason:
        times = _phase_times(result)
        return f"{text}: {one_line(result.reason)}" + (f";{times}" if times else "")
    return text + _phase_times(result) + _quiet_wait(result)


def as_repeat(result: TrialResult, original: int | None) -> TrialResult:
    """The result of a trial answered from trial `original`'s measurement as its line shows
    it: a repeat of that trial, not a measurement of its own (None: `result` as it is)."""
    if original is None:
        return result
    said = f"repeat of trial {original}, not measured again"
    reason = f"{said}: {result.reason}" if result.reason else said
    return result.model_copy(update={"reason": reason})


def _quiet_wait(result: TrialResult) -> str:
    """How long the trial waited for the machine to be quiet before measuring, if at all."""
    contention = result.provenance.contention if result.provenance is not None else None
    if contention is None or contention.waited_s < 0.5:
        return ""
    found = "; still busy, measured marked contended" if contention.contended else ""
    return f", waited {contention.waited_s:.0f} s for quiet{found}"


def _phase_times(result: TrialResult) -> str:
    """Where a trial's time went, for the progress line ('' for one answered unmeasured)."""
    times = result.times
    if times is None:
        return ""
    return (
        f" in {result.duration_s:.1f} s (build {times.build_s:.1f}, accuracy "
        f"{times.accuracy_s:.1f}, timing {times.timing_s:.1f})"
    )


def sensitivity_note(
    tables: Iterable[SensitivityTable], seconds_by_mode: dict[str, float], search_s: float
) -> str | None:
    """Where the search's int8 sensitivity time went (measured in its workers' builds,
    against the search's wall time), and each ranking the study keeps in a line; None where
    no trial was built by one."""
    lines = [table.summary() for table in tables]
    if not lines:
        return None
    spent = sum(seconds_by_mode.values())
    if spent:
        share = f", {spent / search_s:.0%} of the search's {search_s:.1f} s" if search_s else ""
        head = f"int8 sensitivity measured in {spent:.1f} s of the trials' build time{share}"
    else:
        head = "int8 sensitivity: no ranking measured in this run (the study kept them)"
    return "\n".join([head, *lines])


def study_summary(records: Iterable[TrialRecord]) -> str:
    """`16 trials: 10 ok, 4 unsupported (its most common reason), 2 error (...)`: the
    study's ended, counted trials by status, the most common first, and how many of them
    were answered from an earlier measurement (a repeat has its original's status)."""
    ended = [r for r in records if r.counted and r.status is not None]
    statuses = Counter(str(r.status) for r in ended)
    parts = []
    for status, count in statuses.most_common():
        reasons = Counter(r.reason for r in ended if r.status == status and r.reason)
        part = f"{count} {status}"
        if status != "ok" and reasons:
            part += f" ({one_line(reasons.most_common(1)[0][0], SUMMARY_REASON_CHARS)})"
        parts.append(part)
    if not parts:
        return "0 trials"
    answered = sum(r.reused_from is not None for r in ended)
    if answered:
        parts[-1] += f"; {answered} of them answered from an earlier measurement, not measured"
    return f"{len(ended)} trials: {', '.join(parts)}"


def check_failures(records: list[TrialRecord]) -> None:
    """Raise `MostTrialsFailed` where more than half of the study's trials that ran failed
    (each measurement once: a trial answered from an earlier one did not run)."""
    ran = [
        r
        for r in records
        if r.counted and r.status not in (None, *NOT_RUN_STATUSES) and r.reused_from is None
    ]
    failed = [r for r in ran if r.status in FAILED_STATUSES]
    if 2 * len(failed) > len(ran):
        raise MostTrialsFailed(
            f"{len(failed)} of the {len(ran)} trials that ran failed "
            f"({', '.join(sorted(FAILED_STATUSES))}); {study_summary(records)}"
        )
