"""Telling a result: its metrics against the baseline's accuracy, the request's constraints
and objectives, one `TrialEnding` into the result store; the told record is returned to the
coordinator, which tells its observers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autotune.core.contract import TrialResult, TrialSpec
from autotune.core.contract.trials import SensitivityKey, SensitivityTable
from autotune.core.metrics import OBJECTIVES, constraint_violations, derived
from autotune.requests.request import TuningRequest
from autotune.results.records import TrialEnding, TrialRecord
from autotune.search.state import SearchState

if TYPE_CHECKING:
    from autotune.results.store import ResultStore


@dataclass
class Teller:
    request: TuningRequest
    store: ResultStore
    state: SearchState
    on_sensitivity: Callable[[SensitivityTable], None]  # a ranking the study kept
    # Seconds this run's trials spent measuring int8 sensitivity rankings, by mode.
    sensitivity_seconds: dict[str, float] = field(default_factory=dict)
    _kept_sensitivity: set[SensitivityKey] | None = None

    def tell(
        self,
        record: TrialRecord,
        spec: TrialSpec,
        result: TrialResult,
        baseline_accuracy: float | None = None,
    ) -> TrialRecord:
        """The result into the study; returns the trial's told record, which the coordinator
        tells its observers. Metrics are measured against `baseline_accuracy`, by default the
        study's baseline's."""
        state, request = self.state, self.request
        metrics = violations = values = None
        figures = result.metrics or result.screening
        if figures is not None:
            if baseline_accuracy is None:
                assert state.baseline is not None and state.baseline.metrics is not None
                baseline_accuracy = float(state.baseline.metrics["accuracy"])
            metrics = derived(figures.model_dump(), request.study(baseline_accuracy))
        if result.metrics is not None and metrics is not None:  # a screening is not judged
            bounds = request.constraints.model_dump(exclude_none=True)
            violations = constraint_violations(bounds, metrics)
            values = [float(metrics[OBJECTIVES[o].name]) for o in request.objectives]
        reused_from = state.reused_from.pop(record.number, None)
        ending = TrialEnding(
            config=spec.config,
            attempt=spec.attempt,
            status=result.status,
            variant_key=result.variant_key,
            reason=result.reason,
            metrics=metrics,
            violations=violations,
            provenance=result.provenance,
            reused_from=reused_from,
            measured=reused_from is None and result.status != "skipped",
            call_ms_by_batch=result.call_ms_by_batch,
            interrupted=result.interrupted,
            rescanned=result.rescanned,
            traceback=result.traceback,
        )
        self.store.tell(record.number, ending, values)
        self.keep_sensitivity(result, measured=reused_from is None)
        told = record.told(ending)
        state.counted += told.counted
        state.told(told)
        return told

    def keep_sensitivity(self, result: TrialResult, measured: bool) -> None:
        """The result's int8 sensitivity rankings into the study and `on_sensitivity`, once per
        ranked model and mode; the seconds of those its worker measured for it counted."""
        if self._kept_sensitivity is None:
            self._kept_sensitivity = {table.key for table in self.store.sensitivities()}
        for table in result.sensitivity:
            if table.computed and measured:
                seconds = self.sensitivity_seconds.get(table.mode, 0.0)
                self.sensitivity_seconds[table.mode] = seconds + table.seconds
            if table.key in self._kept_sensitivity:
                continue
            self._kept_sensitivity.add(table.key)
            self.store.save_sensitivity(table.model_copy(update={"computed": True}))
            self.on_sensitivity(table)
