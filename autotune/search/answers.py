"""Trials answered without measuring them, in one place: a batch size too large for its
variant's memory or for the time one call may take, the strategy's answers (repeats, known
violations), and a warm start's measurement of the same configuration made as a measurement
now would be."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.core.contract import TrialSpec
from autotune.core.knobs import variant_key
from autotune.requests.request import TuningRequest
from autotune.results.records import TrialRecord
from autotune.search.state import SearchState

if TYPE_CHECKING:
    from autotune.search.warm_start import WarmStart
    from autotune.strategies import Answer, Strategy


@dataclass
class Answers:
    request: TuningRequest
    study: str
    model_sha256: str
    hardware_fingerprint: str
    strategy: Strategy
    state: SearchState
    warm_start: WarmStart | None = None

    def answer(self, spec: TrialSpec, record: TrialRecord) -> Answer | None:
        """An answer for the trial, or None to measure it. The baseline is always measured:
        it is the study's reference."""
        if record.marks.baseline:
            return None
        state = self.state
        too_big = state.skipped(spec)
        if too_big is not None:
            return too_big
        max_drop = self.request.constraints.max_accuracy_drop
        answer = self.strategy.answer(self.study, spec, state.excluded(max_drop))
        if answer is not None or self.warm_start is None:
            return answer
        return self.warm_start.answer(spec, self._provenance_now())

    def known_accuracy(self, spec: TrialSpec, record: TrialRecord) -> float | None:
        """The accuracy of the spec's model variant, measured in this study, or (but for the
        baseline) by the warm start's on the same model and software."""
        variant = variant_key(spec.config)
        known = self.state.accuracy.get(variant)
        if known is not None or self.warm_start is None or record.marks.baseline:
            return known
        now = self._provenance_now()
        same_model = {k: v for k, v in now.items() if k in ("model_sha256", "software")}
        return self.warm_start.accuracy(variant, same_model)

    def _provenance_now(self) -> dict[str, Any]:
        """What the provenance of a measurement made now says. The workers' software versions
        are known from the baseline's result; a trial asked while the baseline still runs (on
        another slot) is matched on model, hardware and measurement settings alone."""
        now: dict[str, Any] = {
            "model_sha256": self.model_sha256,
            "hardware_fingerprint": self.hardware_fingerprint,
            "measurement": self.request.measurement.model_dump(mode="json"),
        }
        baseline = self.state.baseline
        if baseline is not None and baseline.provenance is not None:
            now["software"] = baseline.provenance.software
        return now
