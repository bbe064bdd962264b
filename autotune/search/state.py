"""What a coordinator knows while it searches: its running trials, results waiting for the
baseline, repeats waiting for a measurement, and what the study has taught it so far
(accuracy per model variant, the batch sizes that ran out of memory, the completed trials
for the front). Loaded from the store once, then kept up to date by the coordinator."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from autotune.core.contract import TrialMetrics, TrialResult, TrialSpec
from autotune.core.knobs import ENGINE_KEY, variant_key
from autotune.core.metrics import variant_quality
from autotune.results.records import Candidate, OncePerConfiguration, TrialRecord
from autotune.strategies import Answer

BATCH = "batch.size"


@dataclass
class OomLimit:
    """Per model variant, the smallest batch size that ran out of memory: a larger one of the
    same variant is not run. Where a trial's memory growth is capped (`budget_mb`), a batch
    whose samples alone would outgrow the cap, at the growth per sample measured between two
    smaller batches of the variant, is not run either."""

    smallest: dict[str, int] = field(default_factory=dict)
    budget_mb: float | None = None
    # variant -> batch size -> the largest peak resident memory measured for it (MB)
    peaks: dict[str, dict[int, float]] = field(default_factory=dict)

    def record(self, config: dict[str, Any]) -> None:
        key, batch = variant_key(config), _batch(config)
        self.smallest[key] = min(self.smallest.get(key, batch), batch)

    def measured(self, config: dict[str, Any], peak_mb: float) -> None:
        by_batch = self.peaks.setdefault(variant_key(config), {})
        batch = _batch(config)
        by_batch[batch] = max(by_batch.get(batch, 0.0), peak_mb)

    def blocks(self, config: dict[str, Any]) -> str | None:
        """Why `config` is not run, or None."""
        key, batch = variant_key(config), _batch(config)
        limit = self.smallest.get(key)
        if limit is not None and batch >= limit:
            return f"not run: batch.size {limit} already ran out of memory for this variant"
        growth = self.growth_per_sample_mb(key)
        if self.budget_mb is None or growth is None or growth * batch <= self.budget_mb:
            return None
        return (
            f"not run: batch.size {batch} would grow by at least {growth * batch:.0f} MB "
            f"({growth:.2f} MB a sample, measured between smaller batches of this variant), "
            f"past the {self.budget_mb:.0f} MB a trial may take"
        )

    def growth_per_sample_mb(self, variant: str) -> float | None:
        """Memory per sample between the two largest batch sizes measured (None before two)."""
        found = _growth_per_sample(self.peaks.get(variant, {}))
        return found[1] if found is not None and found[1] > 0 else None


@dataclass
class CallTimeLimit:
    """Per configuration but for its batch size, the call times measured at each batch size
    and the smallest batch whose calls were too slow (`too_slow`). A batch at or past a too
    slow one is not run, nor one whose call would pass `max_call_ms` by an estimate: past the
    two largest batches measured of the configuration, their time per sample added; else
    along the baseline's call times at each batch size (`scanned`), scaled by the
    configuration's nearest measured batch, or as they are when none is and the
    configuration runs the baseline's engine and model variant. A configuration of another
    engine or variant, measured at no batch, gets no estimate: another engine's figure says
    nothing of its speed."""

    max_call_ms: float | None = None
    smallest_too_slow: dict[str, int] = field(default_factory=dict)
    # configuration without its batch size -> batch size -> median call time (ms)
    calls: dict[str, dict[int, float]] = field(default_factory=dict)
    baseline_ms: dict[int, float] = field(default_factory=dict)
    baseline_runs: tuple[Any, str] | None = None  # the scan's engine and model variant

    def scanned(self, config: dict[str, Any], call_ms_by_batch: dict[int, float]) -> None:
        """The baseline's call times at each batch size of its scan."""
        self.baseline_ms = dict(call_ms_by_batch)
        self.baseline_runs = _runs(config)

    def too_slow(self, config: dict[str, Any], call_ms: float | None = None) -> None:
        """`config` was too slow at its batch size (`call_ms`: the call that stopped it)."""
        key, batch = _kernel_key(config), _batch(config)
        self.smallest_too_slow[key] = min(self.smallest_too_slow.get(key, batch), batch)
        if call_ms is not None:
            self.calls.setdefault(key, {})[batch] = call_ms

    def measured(self, config: dict[str, Any], call_ms: float) -> None:
        self.calls.setdefault(_kernel_key(config), {})[_batch(config)] = call_ms

    def blocks(self, config: dict[str, Any]) -> str | None:
        """Why `config` is not run, or None."""
        key, batch = _kernel_key(config), _batch(config)
        slow = self.smallest_too_slow.get(key)
        if slow is not None and batch >= slow:
            return f"not run: at batch.size {slow} a call of this configuration was too slow"
        found = self.estimate_ms(key, batch, _runs(config) == self.baseline_runs)
        if self.max_call_ms is None or found is None or found[0] <= self.max_call_ms:
            return None
        estimate, source = found
        return (
            f"not run: a call at batch.size {batch} would take about {estimate:.0f} ms "
            f"({source}), past measurement.max_call_ms = {self.max_call_ms:g} ms"
        )

    def estimate_ms(
        self, key: str, batch: int, runs_as_baseline: bool = True
    ) -> tuple[float, str] | None:
        """The call time at `batch` and where the estimate comes from (None: no estimate, or
        the batch was measured); the baseline's own figures only where the configuration
        `runs_as_baseline` (its engine and model variant)."""
        by_batch = self.calls.get(key, {})
        if batch in by_batch:
            return None
        found = _growth_per_sample(by_batch)
        if found is not None and batch > found[0]:
            large, per_sample = found
            own = by_batch[large] + max(0.0, per_sample) * (batch - large)
            return own, "extrapolated from smaller batches of this configuration"
        along = _along(self.baseline_ms, batch)
        if along is None:
            return None
        if not by_batch:
            if not runs_as_baseline:
                return None
            return along, "the baseline's call time at that batch size"
        nearest = min(by_batch, key=lambda b: abs(b - batch))
        at_nearest = _along(self.baseline_ms, nearest)
        if not at_nearest:
            return None
        scaled = by_batch[nearest] * along / at_nearest
        source = (
            f"this configuration's call at batch.size {nearest}, grown as the baseline's "
            "grows with the batch"
        )
        return scaled, source


def _along(call_ms: dict[int, float], batch: int) -> float | None:
    """The call time at `batch` on a curve of call times by batch size: linear between the
    two batches around it, past either end along its two outermost batches (never
    decreasing), in proportion to the batch with one point (None with none)."""
    if not call_ms:
        return None
    if batch in call_ms:
        return call_ms[batch]
    batches = sorted(call_ms)
    if len(batches) == 1:
        return call_ms[batches[0]] * batch / batches[0]
    above = next((b for b in batches if b > batch), None)
    if above is None:
        small, large = batches[-2:]
    elif above == batches[0]:
        small, large = batches[:2]
    else:
        small, large = batches[batches.index(above) - 1], above
    per_sample = max(0.0, (call_ms[large] - call_ms[small]) / (large - small))
    return max(0.0, call_ms[small] + per_sample * (batch - small))


def _growth_per_sample(by_batch: dict[int, float]) -> tuple[int, float] | None:
    """The largest batch size measured, and what a figure grew by per sample between the
    second largest and it (None before two)."""
    if len(by_batch) < 2:
        return None
    small, large = sorted(by_batch)[-2:]
    return large, (by_batch[large] - by_batch[small]) / (large - small)


def _batch(config: dict[str, Any]) -> int:
    return int(config.get(BATCH, 1))


def _runs(config: dict[str, Any]) -> tuple[Any, str]:
    """What decides a configuration's speed beyond its kernel options: its engine and its
    model variant."""
    return config.get(ENGINE_KEY), variant_key(config)


def _kernel_key(config: dict[str, Any]) -> str:
    """A configuration without its batch size: what runs each call."""
    return json.dumps({k: v for k, v in config.items() if k != BATCH}, sort_keys=True)


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
    # What else was measured of each variant's quality, told with its accuracy.
    quality: dict[str, dict[str, float | str]] = field(default_factory=dict)
    # Variants a subset of the data showed below the accuracy the constraints allow.
    infeasible: set[str] = field(default_factory=set)
    oom: OomLimit = field(default_factory=OomLimit)
    calls: CallTimeLimit = field(default_factory=CallTimeLimit)
    # The measured trials, each configuration once, by number: what the running front is of.
    completed: dict[int, Candidate] = field(default_factory=dict)
    once: OncePerConfiguration = field(default_factory=OncePerConfiguration)
    # Seconds each trial measured by this coordinator took to build its session.
    build_seconds: list[float] = field(default_factory=list)
    counted: int = 0  # the study's counted trials when last loaded, plus ours told since

    def batch_limit(self, config: dict[str, Any]) -> str | None:
        """Why `config`'s batch size is not run (its memory or its call time), or None."""
        if self.baseline is None:
            return None
        return self.oom.blocks(config) or self.calls.blocks(config)

    def skipped(self, spec: TrialSpec) -> Answer | None:
        """The trial answered without running it where a batch limit blocks it."""
        reason = self.batch_limit(spec.config)
        return None if reason is None else Answer(TrialResult.for_spec(spec, "skipped", reason))

    def load(self, records: list[TrialRecord]) -> None:
        """What the study's trials say (on start, and when another coordinator told some)."""
        self.baseline = next((r for r in records if r.marks.baseline and r.has_metrics), None)
        self.once = OncePerConfiguration(records)
        self.completed = {r.number: r.candidate() for r in self.once.records()}
        self.counted = sum(r.counted for r in records)
        for record in records:
            if record.status == "oom":
                self.oom.record(record.config)
            if record.status == "too_slow":
                self.calls.too_slow(record.config)
            if record.status == "infeasible" and record.variant_key is not None:
                self.infeasible.add(record.variant_key)
            if record.call_ms_by_batch:
                self.calls.scanned(record.config, record.call_ms_by_batch)
            if record.has_metrics and record.measured and record.metrics is not None:
                self.oom.measured(record.config, float(record.metrics["peak_memory_mb"]))
            if (record.has_metrics or record.screened) and record.measured and record.metrics:
                self.calls.measured(record.config, float(record.metrics["latency_p50_ms"]))
        comparable = self._comparable(records)
        self.accuracy, self.quality = {}, {}
        for record in comparable:
            assert record.metrics is not None  # comparable records have metrics
            self.accuracy[str(record.variant_key)] = float(record.metrics["accuracy"])
            self.quality[str(record.variant_key)] = variant_quality(record.metrics)

    def told(self, record: TrialRecord) -> None:
        """A told trial among `completed` where it is its configuration's measurement (a
        repeat answered from a trial is not); a trial it replaces leaves."""
        if self.once.add(record):
            kept = {r.number for r in self.once.records()}
            self.completed = {n: c for n, c in self.completed.items() if n in kept}
            self.completed[record.number] = record.candidate()

    def learn_quality(self, variant: str, figures: TrialMetrics) -> None:
        """A variant's quality, as a trial measured it (the first figure stays)."""
        self.accuracy.setdefault(variant, figures.accuracy)
        self.quality.setdefault(variant, variant_quality(figures.model_dump()))

    def _comparable(self, records: list[TrialRecord]) -> list[TrialRecord]:
        """The trials whose accuracy is reused for their variant: measured like the baseline
        (same model, software and hardware); a figure from another setting is not reused."""
        if self.baseline is None:
            return []
        reference = _comparable(self.baseline)
        return [
            r
            for r in records
            if (r.has_metrics or r.screened) and r.metrics and _comparable(r) == reference
        ]

    def excluded(self, max_drop: float | None) -> set[str]:
        """The variants known to violate the accuracy bound: measured so, or shown so by a
        subset of the data."""
        if self.baseline is None or max_drop is None:
            return set()
        reference = float(self.baseline.metrics["accuracy"])  # type: ignore[index]
        measured = {v for v, a in self.accuracy.items() if reference - a > max_drop}
        return measured | self.infeasible


def _comparable(record: TrialRecord) -> tuple[Any, ...]:
    provenance = record.provenance
    if provenance is None:
        return (None, None, None)
    return (provenance.model_sha256, provenance.software, provenance.hardware_fingerprint)
