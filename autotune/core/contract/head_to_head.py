"""The head-to-head contract: entrants re-measured in interleaved rounds, and what each round
and each entrant measured."""

from __future__ import annotations

from pydantic import Field

from autotune.core.contract.figures import CarriesMeasured
from autotune.core.contract.measurement import MeasurementSettings
from autotune.core.contract.refs import Strict
from autotune.core.contract.trials import (
    Contention,
    KnownQuality,
    Provenance,
    TrialMetrics,
    TrialStatus,
    Workload,
)
from autotune.core.knobs.base import ConfigValue


class Entrant(Strict):
    """One configuration in a head-to-head comparison."""

    trial_number: int
    config: dict[str, ConfigValue]
    known_accuracy: float
    known_quality: KnownQuality = Field(
        default_factory=dict,
        description="the variant's other quality figures, measured with its known_accuracy",
    )
    loaded_artifact: bool = Field(
        default=False,
        description="run as `autotune.load` runs a tuned model: exported, loaded from its "
        "artifact and called through `Predictor.predict` (beside the same configuration as "
        "it is built for trials)",
    )


class HeadToHeadSpec(Strict):
    """Measure several configurations of one workload in interleaved rounds on one device:
    every round times each entrant once (in an order that rotates from round to round), so a
    slow minute of the machine hits all of them alike."""

    study: str
    workload: Workload
    entrants: list[Entrant] = Field(min_length=1)
    rounds: int = Field(ge=1)
    round_seconds: float = Field(gt=0.0, description="each entrant's timed block in a round")
    measurement: MeasurementSettings = MeasurementSettings()
    timeout_s: float | None = Field(default=None, gt=0)


class RoundFigures(CarriesMeasured):
    """One entrant's block in one round: per call and per sample, and every other measured
    metric in `measured` (`autotune.core.contract.figures`)."""

    calls: int
    latency_p50_ms: float
    latency_p95_ms: float
    throughput_per_s: float
    energy_per_sample_j: float


class EntrantOutcome(Strict):
    trial_number: int
    loaded_artifact: bool = Field(default=False, description="the entrant's: run as loaded")
    status: TrialStatus
    reason: str | None = None
    rounds: list[RoundFigures] = Field(
        default_factory=list, description="one per round, in round order"
    )
    metrics: TrialMetrics | None = Field(default=None, description="over every call of every round")


class HeadToHeadResult(Strict):
    entrants: list[EntrantOutcome]
    contention: list[Contention] = Field(description="per round: the machine's other load")
    provenance: Provenance | None = None
    duration_s: float
