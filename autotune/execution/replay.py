"""The replay executor: a recorded table (`autotune.execution.replay_table`) answers the trials
instead of a device, on one simulated node with as many slots as asked for."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

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
from autotune.execution.replay_table import NOT_IN_TABLE, ReplayRow, ReplayTable
from autotune.execution.replay_window import (
    SCAN_CALLS,
    full_timing_seconds,
    scanned_call_ms,
    screened_seconds,
    screening_settings,
    short_window,
)
from autotune.space.search_space import BATCH_KEY


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
    as they do on real workers. A trial that would take longer than the spec's `timeout_s`
    is a `timeout` at that time, as a real executor would stop it. Accuracy always comes from
    the table, also for specs that carry a `known_accuracy`: the table is the truth.

    As a worker does, a spec with a `screen` is first timed in a short window, here drawn from
    its row's recorded spread (`autotune.execution.replay_window`), and ends `screened` with
    the window's figures where a front point dominates their hopeful reading; it then takes
    its row's time less the timing it skipped. A spec's `batch_scan` is answered from the
    rows of the same configuration at those batches (`call_ms_by_batch`), and the scan's
    calls add to its time. Draws are seeded by `seed` and the trial's study, number and
    attempt: a replay is repeatable, and trials differ as real windows would.
    """

    runs_in_process = False
    trial_memory_mb: int | None = None

    def __init__(self, table: ReplayTable, slots: int = 1, seed: int = 0) -> None:
        if slots < 1:
            raise AutotuneError(f"slots must be >= 1, got {slots}")
        self.table = table
        self.seed = seed
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
        result = self._screened(spec, row, provenance)
        if result is None:
            result = self._measured(spec, row, provenance)
        if spec.timeout_s is not None and result.duration_s > spec.timeout_s:
            took = result.duration_s
            reason = f"still running after {spec.timeout_s:g} s (would take {took:g} s)"
            return TrialResult.for_spec(spec, "timeout", reason, spec.timeout_s, None, provenance)
        return result

    def _measured(self, spec: TrialSpec, row: ReplayRow, provenance: Provenance) -> TrialResult:
        """The row as recorded, with the spec's batch scan read from the table."""
        result = TrialResult.for_spec(
            spec, row.status, row.reason, row.measure_seconds, row.metrics, provenance
        )
        if row.metrics is None or not spec.batch_scan:
            return result
        max_call_ms = spec.measurement.max_call_ms
        call_ms = scanned_call_ms(self.table, spec.config, spec.batch_scan, max_call_ms)
        scan_s = SCAN_CALLS * sum(call_ms.values()) / 1000.0
        update = {"call_ms_by_batch": call_ms, "duration_s": row.measure_seconds + scan_s}
        return result.model_copy(update=update)

    def _screened(
        self, spec: TrialSpec, row: ReplayRow, provenance: Provenance
    ) -> TrialResult | None:
        """The trial ended by its short window, or None where it is timed in full."""
        settings, screen = spec.measurement, spec.screen
        if screen is None or settings.screen_seconds is None or row.metrics is None:
            return None
        window_settings = screening_settings(settings, settings.screen_seconds)
        batch = int(spec.config.get(BATCH_KEY, 1))
        window = short_window(row.metrics, window_settings, batch, self._rng(spec))
        if not math.isfinite(window.spread):
            return None
        point = screen.dominating(window.figures, window.spread)
        if point is None:
            return None
        names = [objective.metric for objective in screen.objectives]
        shown = [float(getattr(window.figures, name)) for name in names]
        reason = (
            f"screened: {window.figures.iterations} calls in {window.seconds:.2f} s give "
            f"{_figures(names, shown)}; the front's {_figures(names, point)} is better even "
            f"with {screen.margin:.0%} and the window's interval ({window.spread:.0%}) in its "
            "favour"
        )
        full_s = full_timing_seconds(row.metrics, settings)
        seconds = screened_seconds(row.measure_seconds, full_s, window.seconds)
        return TrialResult.for_spec(
            spec, "screened", reason, seconds, provenance=provenance, screening=window.figures
        )

    def _rng(self, spec: TrialSpec) -> np.random.Generator:
        trial = f"{spec.study}#{spec.trial_number}#{spec.attempt}".encode()
        digest = int.from_bytes(hashlib.sha256(trial).digest()[:8], "big")
        return np.random.default_rng([self.seed, digest])

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


def _figures(names: list[str], values: list[float]) -> str:
    return ", ".join(f"{name} {value:.4g}" for name, value in zip(names, values, strict=True))


def _round_figures(metrics: TrialMetrics) -> RoundFigures:
    return RoundFigures(
        calls=metrics.iterations,
        latency_p50_ms=metrics.latency_p50_ms,
        latency_p95_ms=metrics.latency_p95_ms,
        throughput_per_s=metrics.throughput_per_s,
        energy_per_sample_j=metrics.energy_per_sample_j,
        measured=metrics.measured,
    )
