"""What a coordinator knows while it searches: its running trials, results waiting for the
baseline, repeats waiting for a measurement, and what the study has taught it so far
(accuracy per model variant, the batch sizes that ran out of memory, the completed trials
for the front). Loaded from the store once, then kept up to date by the coordinator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.contract import TrialResult, TrialSpec, variant_key
from autotune.pareto import Candidate
from autotune.results.records import TrialRecord
from autotune.strategies import Answer

BATCH = "batch.size"


@dataclass
class OomLimit:
    """Per model variant, the smallest batch size that ran out of memory: a larger one of the
    same variant is not run."""

    smallest: dict[str, int] = field(default_factory=dict)

    def record(self, config: dict[str, Any]) -> None:
        key, batch = variant_key(config), _batch(config)
        self.smallest[key] = min(self.smallest.get(key, batch), batch)

    def answer(self, spec: TrialSpec) -> Answer | None:
        limit = self.smallest.get(variant_key(spec.config))
        if limit is None or _batch(spec.config) < limit:
            return None
        reason = f"not run: batch.size {limit} already ran out of memory for this variant"
        return Answer(TrialResult.for_spec(spec, "skipped", reason))


def _batch(config: dict[str, Any]) -> int:
    return int(config.get(BATCH, 1))


@dataclass
class SearchState:
    baseline: TrialRecord | None = None
    # Trials of ours that run now (or were answered and wait to be told), by number.
    running: dict[int, tuple[TrialRecord, TrialSpec]] = field(default_factory=dict)
    # Answers to tell next, before waiting on the executor.
    ready: list[TrialResult] = field(default_factory=list)
    # Measured before the baseline's accuracy was known: told once it is.
    held: list[tuple[TrialRecord, TrialSpec, TrialResult]] = field(default_factory=list)
    # Repeats of a configuration being measured, by the number of the trial measuring it.
    waiting: dict[int, list[tuple[TrialRecord, TrialSpec]]] = field(default_factory=dict)
    # Trials answered from another trial's measurement: number -> "<study>#<trial>".
    reused_from: dict[int, str] = field(default_factory=dict)
    accuracy: dict[str, float] = field(default_factory=dict)
    oom: OomLimit = field(default_factory=OomLimit)
    completed: dict[int, Candidate] = field(default_factory=dict)
    counted: int = 0  # the study's counted trials when last loaded, plus ours told since

    def load(self, records: list[TrialRecord]) -> None:
        """What the study's trials say (on start, and when another coordinator told some)."""
        self.baseline = next((r for r in records if r.marks.baseline and r.has_metrics), None)
        self.completed = {r.number: r.candidate() for r in records if r.has_metrics}
        self.counted = sum(r.counted for r in records)
        for record in records:
            if record.status == "oom":
                self.oom.record(record.config)
        self.accuracy = self._comparable_accuracy(records)

    def _comparable_accuracy(self, records: list[TrialRecord]) -> dict[str, float]:
        """Accuracy measured so far per variant, from trials measured like the baseline (same
        model, software and hardware): a figure from another setting is not reused."""
        if self.baseline is None:
            return {}
        reference = _comparable(self.baseline)
        return {
            str(r.variant_key): float(r.metrics["accuracy"])
            for r in records
            if r.has_metrics and r.metrics is not None and _comparable(r) == reference
        }

    def excluded(self, max_drop: float | None) -> set[str]:
        """The variants known to violate the accuracy bound."""
        if self.baseline is None or max_drop is None:
            return set()
        reference = float(self.baseline.metrics["accuracy"])  # type: ignore[index]
        return {v for v, a in self.accuracy.items() if reference - a > max_drop}


def _comparable(record: TrialRecord) -> tuple[Any, ...]:
    provenance = record.provenance
    if provenance is None:
        return (None, None, None)
    return (provenance.model_sha256, provenance.software, provenance.hardware_fingerprint)
