"""The replay executor: a recorded table (`autotune.execution.replay_table`) answers the trials
instead of a device, on one simulated node with as many slots as asked for."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from autotune.core.contract import (
    ArtifactInfo,
    EntrantOutcome,
    HeadToHeadResult,
    HeadToHeadSpec,
    Inspection,
    ModelInfo,
    NodeKind,
    Provenance,
    RoundFigures,
    TrialMetrics,
    TrialResult,
    TrialSpec,
    Workload,
)
from autotune.core.errors import AutotuneError
from autotune.execution.base import FixedSlots, require_idle_slot, require_nothing_pending
from autotune.execution.replay_table import NOT_IN_TABLE, ReplayTable


@dataclass(order=True)
class _Running:
    finish: float
    order: int
    result: TrialResult = field(compare=False)


# The node id of every replayed slot: one simulated node.
REPLAY_NODE = "replay"


class ReplayExecutor(FixedSlots):
    """The Executor protocol answered from a ReplayTable on a simulated clock.

    A trial submitted at simulated time t finishes at t + its row's `measure_seconds` (a
    configuration not in the table at once); `wait` moves the clock to the earliest finish
    and returns the trials finishing then, so with several slots trials finish out of order
    as they do on real workers. A row that took longer than the spec's `timeout_s` is a
    `timeout` at that time, as a real executor would stop it. Accuracy always comes from the
    table, also for specs that carry a `known_accuracy`: the table is the truth.
    """

    runs_in_process = False
    trial_memory_mb: int | None = None

    def __init__(self, table: ReplayTable, slots: int = 1) -> None:
        if slots < 1:
            raise AutotuneError(f"slots must be >= 1, got {slots}")
        self.table = table
        self._slots = slots
        self._running: list[_Running] = []
        self._submitted = 0
        self.simulated_seconds = 0.0
        self.measurements = 0
        self.remeasurements = 0

    @property
    def slots(self) -> int:
        return self._slots

    def kinds(self) -> list[NodeKind]:
        """The table's stand-in machine, one node holding the simulated slots."""
        return [NodeKind.one_node(self.table.profile(), REPLAY_NODE, self._slots)]

    def inspect(self, workload: Workload) -> Inspection:
        """The table stands in for the model: a study's identity follows the table."""
        model = ModelInfo(
            kind="onnx",
            sha256=self.table.sha256,
            n_samples=len(self.table.rows),
            input_shape=[],
            has_labels=False,
            parameter_bytes=0,
        )
        return Inspection(model=model, kinds=self.kinds())

    def submit(self, spec: TrialSpec) -> None:
        require_idle_slot(self._slots - len(self._running))
        result = self._answer(spec)
        finish = self.simulated_seconds + result.duration_s
        self._running.append(_Running(finish, self._submitted, result))
        self._submitted += 1
        self.measurements += 1

    def pending(self) -> int:
        return len(self._running)

    def wait(self) -> list[TrialResult]:
        if not self._running:
            return []
        self.simulated_seconds = min(r.finish for r in self._running)
        done = sorted(r for r in self._running if r.finish <= self.simulated_seconds)
        self._running = [r for r in self._running if r.finish > self.simulated_seconds]
        return [r.result for r in done]

    def _answer(self, spec: TrialSpec) -> TrialResult:
        table = self.table
        provenance = Provenance(
            model_sha256=table.sha256,
            host="replay",
            hardware_fingerprint=table.fingerprint,
            node_id=REPLAY_NODE,
            software={"replay": str(table.path)},
            measurement=spec.measurement,
        )
        row = table.lookup(spec.config)
        if row is None:
            return TrialResult.for_spec(spec, "unsupported", NOT_IN_TABLE, provenance=provenance)
        if spec.timeout_s is not None and row.measure_seconds > spec.timeout_s:
            reason = (
                f"still running after {spec.timeout_s:g} s (recorded: {row.measure_seconds:g} s)"
            )
            return TrialResult.for_spec(spec, "timeout", reason, spec.timeout_s, None, provenance)
        return TrialResult.for_spec(
            spec, row.status, row.reason, row.measure_seconds, row.metrics, provenance
        )

    def compare(self, spec: HeadToHeadSpec) -> HeadToHeadResult:
        """Every round of every entrant reads its row's figures: a replay has no noise and
        no machine, so its paired ratios are exact and no round is contended."""
        require_nothing_pending(len(self._running))
        outcomes = []
        for entrant in spec.entrants:
            trial = TrialSpec(
                study=spec.study,
                trial_number=entrant.trial_number,
                workload=spec.workload,
                config=entrant.config,
                measurement=spec.measurement,
            )
            result = self._answer(trial)
            self.remeasurements += 1
            metrics = result.metrics
            figures = [] if metrics is None else [_round_figures(metrics)] * spec.rounds
            outcomes.append(
                EntrantOutcome(
                    trial_number=entrant.trial_number,
                    status=result.status,
                    reason=result.reason,
                    rounds=figures,
                    metrics=metrics,
                )
            )
        seconds = spec.rounds * spec.round_seconds * len(spec.entrants)
        self.simulated_seconds += seconds
        return HeadToHeadResult(entrants=outcomes, contention=[], duration_s=seconds)

    def export(self, spec: TrialSpec, out_dir: str) -> ArtifactInfo:
        """A replay has no model to export: config.json records the chosen configuration
        and the table row it was read from."""
        row = self.table.lookup(spec.config)
        record = {
            "config": spec.config,
            "table": str(self.table.path),
            "table_sha256": self.table.sha256,
            "line": None if row is None else row.line,
        }
        path = Path(out_dir) / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2) + "\n")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return ArtifactInfo(path=str(path), format="json", sha256=digest)

    def close(self) -> None:
        self._running.clear()


def _round_figures(metrics: TrialMetrics) -> RoundFigures:
    return RoundFigures(
        calls=metrics.iterations,
        latency_p50_ms=metrics.latency_p50_ms,
        latency_p95_ms=metrics.latency_p95_ms,
        throughput_per_s=metrics.throughput_per_s,
        energy_per_sample_j=metrics.energy_per_sample_j,
    )
