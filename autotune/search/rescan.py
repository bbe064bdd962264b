"""A contended baseline's batch scan, read again once the machine is quiet.

The baseline's call times at each batch size (its batch scan) place the designed set's batch
and bound the batches the search runs; read under other processes' load they steer the whole
study. So a baseline measured under load is not told yet: its configuration runs again with
the same scan, under `measurement.contention: wait` (the worker first waits for quiet) and
with its accuracy known (nothing is evaluated again). The second scan's call times replace
the first's; where it ran under load too, each batch keeps the lower of its two readings.
Either way the baseline is told once, with the figures kept and a note of what happened
(`TrialResult.rescanned`), and no trial of the budget is spent. It is scanned again once at
most."""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.core.contract import Contention, TrialResult, TrialSpec
from autotune.core.metrics import variant_quality


@dataclass
class Rescans:
    # The baseline's spec and its contended result, by trial number, while its scan runs again.
    first: dict[int, tuple[TrialSpec, TrialResult]] = field(default_factory=dict)

    def wanted(self, spec: TrialSpec, result: TrialResult) -> bool:
        """Whether `result`, the baseline's, read its batch scan under load."""
        return bool(spec.batch_scan and result.call_ms_by_batch) and _load(result) is not None

    def spec(self, spec: TrialSpec, result: TrialResult) -> TrialSpec:
        """The scan again: the baseline's spec, waiting for quiet, its accuracy known."""
        assert result.metrics is not None  # a result with a batch scan has metrics
        self.first[spec.trial_number] = (spec, result)
        return spec.model_copy(
            update={
                "measurement": spec.measurement.model_copy(update={"contention": "wait"}),
                "known_accuracy": result.metrics.accuracy,
                "known_quality": variant_quality(result.metrics.model_dump()),
            }
        )

    def scanning(self, trial_number: int) -> bool:
        return trial_number in self.first

    def merged(self, again: TrialResult) -> tuple[TrialSpec, TrialResult]:
        """The baseline's spec and its result with the call times kept of the two scans."""
        spec, first = self.first.pop(again.trial_number)
        load = _load(first)
        assert load is not None  # only a contended scan is read again
        said = f"the baseline's batch scan ran under load ({_share(load)}): scanned again"
        if not again.call_ms_by_batch:
            why = again.reason or again.status
            note = f"{said}, which read no call times ({why}): the first scan's figures stand"
            return spec, first.model_copy(update={"rescanned": note})
        still = _load(again)
        kept = dict(again.call_ms_by_batch)
        if still is None:
            said += " once quiet"
        else:
            for batch, call_ms in first.call_ms_by_batch.items():
                kept[batch] = min(call_ms, kept.get(batch, call_ms))
            said += f", under load again ({_share(still)}): the lower reading of each batch kept"
        note = f"{said}: {_changes(first.call_ms_by_batch, kept)}"
        return spec, first.model_copy(update={"call_ms_by_batch": kept, "rescanned": note})


def _load(result: TrialResult) -> Contention | None:
    """The machine's other load while `result` measured, where it made it contended."""
    provenance = result.provenance
    contention = None if provenance is None else provenance.contention
    return contention if contention is not None and contention.contended else None


def _share(load: Contention) -> str:
    return f"other processes {load.other_cpu_share:.0%} of the cores"


def _changes(before: dict[int, float], after: dict[int, float]) -> str:
    """Each batch's call time as it was read first and as it is kept."""
    changes = []
    for batch in sorted(before.keys() | after.keys()):
        was = "-" if batch not in before else f"{_ms(before[batch])} ms"
        now = "-" if batch not in after else f"{_ms(after[batch])} ms"
        changes.append(f"batch {batch} {was} → {now}")
    return ", ".join(changes)


def _ms(call_ms: float) -> str:
    return f"{call_ms:.0f}" if call_ms >= 100 else f"{call_ms:.3g}"
