"""What a study records, typed: one `TrialRecord` per trial, the study's identity and its
stored head-to-head. These are the only shapes a `ResultStore` reads or writes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from autotune.core.contract import ConfigValue, Provenance, TrialMetrics, TrialStatus
from autotune.core.knobs import ENGINE_KEY, ENGINES, defines_variant, engine_options, variant_key
from autotune.core.metrics import mapped_metrics
from autotune.core.tracebacks import traceback_tail

# Where a trial stands in the study: waiting to be asked, being measured, ended.
TrialState = Literal["waiting", "running", "complete", "pruned", "failed"]
# The fields of a trial's record: one stored value, written when the trial ends.
RECORD_KEY = "record"
# How much of an `error` trial's traceback the study keeps (its last frames): enough to read
# where it raised; the trial's MLflow run keeps the longer tail the worker sent.
STORED_TRACEBACK_CHARS = 8_000


@dataclass(frozen=True)
class Candidate:
    trial_number: int
    config: dict[str, Any]
    metrics: dict[str, Any]
    feasible: bool
    violations: dict[str, float] = field(default_factory=dict)


class RecordModel(BaseModel):
    """A stored record's model: unknown fields refused; mutable, unlike the trial contract's
    frozen `Strict` models."""

    model_config = ConfigDict(extra="forbid")


class TrialMarks(RecordModel):
    """Why a trial was asked for: set when it is enqueued or created, before it runs."""

    baseline: bool = False
    attempt: int = Field(default=0, description="a reaped trial's retry counts from here")
    retry_of: int | None = None
    proposed: str | None = Field(default=None, description="the strategy's reason for it")
    warm_start: str | None = Field(default=None, description="the study it was carried from")


class TrialRecord(RecordModel):
    """A trial as the study holds it. The fields of its `TrialEnding` are None until it ends."""

    number: int
    state: TrialState
    config: dict[str, ConfigValue]
    marks: TrialMarks = TrialMarks()
    attempt: int = Field(default=0, description="the attempt that ended it, or runs it now")
    status: TrialStatus | None = None
    variant_key: str | None = None
    reason: str | None = None
    metrics: dict[str, Any] | None = Field(
        default=None,
        description="the measured metrics plus accuracy_drop from the baseline (a screened "
        "trial's: the figures of its short window)",
    )
    violations: dict[str, float] = Field(
        default_factory=dict, description="per constraint: <= 0 when the bound is met"
    )
    provenance: Provenance | None = None
    reused_from: str | None = Field(
        default=None, description="'<study>#<trial>' whose measurement answered this one"
    )
    measured: bool = Field(default=False, description="an executor ran it (costs device time)")
    values: list[float] | None = Field(default=None, description="its objectives' values")
    owner: str | None = Field(default=None, description="the coordinator that asked for it")
    died_in_process: bool = Field(
        default=False,
        description="lost with a dead coordinator that ran it inside its own process",
    )
    ended_at: datetime | None = None
    call_ms_by_batch: dict[int, float] = Field(
        default_factory=dict, description="call time (ms) by batch size, the baseline's scan"
    )
    interrupted: str | None = Field(
        default=None, description="why an earlier run of it stopped (its node left); run again"
    )
    rescanned: str | None = Field(
        default=None,
        description="why its batch scan was read again and how the call times changed",
    )
    traceback: str | None = Field(
        default=None, description="where an `error` trial raised: its traceback's tail"
    )

    @property
    def ended(self) -> bool:
        return self.state in ("complete", "pruned", "failed")

    @property
    def counted(self) -> bool:
        """Counts toward the budget: measured, or ended by its candidate."""
        return self.state in ("complete", "pruned")

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.violations.values())

    @property
    def has_metrics(self) -> bool:
        return self.state == "complete" and self.metrics is not None

    @property
    def screened(self) -> bool:
        """Ended by its short window: `metrics` holds that window's figures, never a front's."""
        return self.status == "screened" and self.metrics is not None

    def told(self, ending: TrialEnding) -> TrialRecord:
        """This trial's record once `ending` is told."""
        state: TrialState = "pruned"
        if ending.failed:
            state = "failed"
        elif ending.metrics is not None and ending.violations is not None:
            state = "complete"
        return self.with_ending(ending, state)

    def with_ending(self, ending: TrialEnding, state: TrialState | None = None) -> TrialRecord:
        return self.model_copy(
            update={
                "state": state or self.state,
                "config": ending.config,
                "attempt": ending.attempt,
                "status": ending.status,
                "variant_key": ending.variant_key,
                "reason": ending.reason,
                "metrics": ending.metrics,
                "violations": ending.violations or self.violations,
                "provenance": ending.provenance,
                "reused_from": ending.reused_from,
                "measured": ending.measured,
                "call_ms_by_batch": ending.call_ms_by_batch,
                "interrupted": ending.interrupted,
                "rescanned": ending.rescanned,
                "traceback": ending.traceback,
            }
        )

    def repeat_of(self, study: str) -> int | None:
        """The number of `study`'s trial whose measurement answered this one (it repeats that
        trial's configuration), or None."""
        source, _, number = (self.reused_from or "").rpartition("#")
        return int(number) if source == study and number.isdigit() else None

    def candidate(self) -> Candidate:
        assert self.metrics is not None, f"trial {self.number} has no metrics"
        return Candidate(
            trial_number=self.number,
            config=dict(self.config),
            metrics=dict(self.metrics),
            feasible=self.feasible,
            violations=dict(self.violations),
        )

    def measured_metrics(self) -> TrialMetrics | None:
        """The metrics as the executor measured them (without those derived here)."""
        if self.metrics is None:
            return None
        measured = {*TrialMetrics.model_fields, *mapped_metrics()}
        return TrialMetrics.model_validate({k: v for k, v in self.metrics.items() if k in measured})


class TrialEnding(RecordModel):
    """What ending a trial writes: everything of its record that is known only then."""

    config: dict[str, ConfigValue]
    attempt: int
    status: TrialStatus
    variant_key: str
    reason: str | None = None
    metrics: dict[str, Any] | None = None
    violations: dict[str, float] | None = None
    provenance: Provenance | None = None
    reused_from: str | None = None
    measured: bool
    call_ms_by_batch: dict[int, float] = Field(default_factory=dict)
    interrupted: str | None = None
    rescanned: str | None = None
    traceback: str | None = Field(
        default=None,
        description="an `error` trial's traceback, its last STORED_TRACEBACK_CHARS characters; "
        "dropped for any other status",
    )

    @field_validator("traceback")
    @classmethod
    def _kept_for_errors(cls, text: str | None, info: ValidationInfo) -> str | None:
        """Only an error's traceback says something of the candidate worth keeping."""
        if text is None or info.data.get("status") != "error":
            return None
        return traceback_tail(text, STORED_TRACEBACK_CHARS)

    @property
    def failed(self) -> bool:
        """Lost to the infrastructure (a dead worker or coordinator), not to its candidate."""
        return self.status == "lost"


class Census(RecordModel):
    """A study's trials as a coordinator needs them before it asks for one."""

    waiting: list[TrialRecord]
    used: int = Field(description="trials counted toward the budget or running now")


class StudyIdentity(RecordModel):
    """What a study tunes: a resume must match it exactly."""

    model_sha256: str
    objectives: list[str]
    space: str
    hardware_fingerprint: str


class StoredRevalidation(RecordModel):
    """A head-to-head's report, and what it was decided on, for a resume to reuse."""

    report: dict[str, Any]
    basis: dict[str, Any]
    chosen_metrics: dict[str, Any]
    baseline_metrics: dict[str, Any]
    headline: dict[str, Any]
    previous: dict[str, Any] | None = None  # a re-tune's comparison with the previous choice


# What decides when a trial measures (whether it waits for quiet, and what counts as load),
# never how: two measurements that differ only here measured the same thing.
WHEN_TO_MEASURE = frozenset({"contention", "contention_max_wait_s", "contention_threshold"})
MeasurementKey = tuple[str, str]


def configuration_key(config: Mapping[str, ConfigValue]) -> str:
    """Names what a configuration runs, whatever its spelling: its model variant
    (`variant_key`: defaults filled, a pruning ratio without a method dropped) and its kernel
    choices, its engine's own options at their defaults where left out and other engines'
    options (inactive) dropped."""
    engine = ENGINES.get(str(config.get(ENGINE_KEY)))
    own = {o.key: o.default for o in engine.options} if engine is not None else {}
    inactive = {o.key for o in engine_options()} - set(own)
    kernel = {**own, **{k: v for k, v in config.items() if k not in inactive}}
    choices = ",".join(f"{k}={v}" for k, v in sorted(kernel.items()) if not defines_variant(k))
    return f"{variant_key(config)};{choices}"


def measurement_key(record: TrialRecord) -> MeasurementKey:
    """One measurement's identity: its configuration (`configuration_key`) and the settings it
    was measured with, but for those that decide only when it measures (`WHEN_TO_MEASURE`).
    A repeat answered from a trial carries that trial's provenance, so it has its key."""
    provenance = record.provenance
    settings = {} if provenance is None else provenance.measurement.model_dump(mode="json")
    how = {k: v for k, v in settings.items() if k not in WHEN_TO_MEASURE}
    return configuration_key(record.config), json.dumps(how, sort_keys=True)


class OncePerConfiguration:
    """The trials with metrics, each measurement (`measurement_key`) once: of the trials of one
    configuration measured with the same settings, the trial that measured it is kept, never
    a repeat answered from it; the baseline's before any other, then the earliest. The one
    definition of the trials a front, its finalists and every table of them are made of."""

    def __init__(self, records: Iterable[TrialRecord] = ()) -> None:
        self._kept: dict[MeasurementKey, TrialRecord] = {}
        for record in records:
            self.add(record)

    def add(self, record: TrialRecord) -> bool:
        """Whether `record` is now its configuration's trial (it replaces a repeat, or a later
        trial, kept before it)."""
        if not record.has_metrics:
            return False
        key = measurement_key(record)
        kept = self._kept.get(key)
        if kept is not None and _preference(kept) <= _preference(record):
            return False
        self._kept[key] = record
        return True

    def records(self) -> list[TrialRecord]:
        return sorted(self._kept.values(), key=lambda r: r.number)


def each_configuration_once(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """The measured trials, each configuration once, by number (`OncePerConfiguration`)."""
    return OncePerConfiguration(records).records()


def _preference(record: TrialRecord) -> tuple[bool, bool, int]:
    return not record.marks.baseline, not record.measured, record.number
