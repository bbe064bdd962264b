"""The tuned-config file: what a user gets back from a study."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from autotune.contract import ConfigValue, Strict

REPORTED_METRICS = (
    "accuracy",
    "accuracy_drop",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "latency_cv",
    "throughput_per_s",
    "energy_per_sample_j",
    "energy_source",
    "peak_memory_mb",
)


class ConstraintOutcome(Strict):
    bound: float
    value: float
    met: bool


class TunedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: dict[str, ConfigValue]
    metrics: dict[str, Any]
    baseline: dict[str, Any]
    constraints: dict[str, ConstraintOutcome]
    model: dict[str, str]
    hardware: dict[str, Any]
    software: dict[str, str]
    study: dict[str, Any]
    mlflow: dict[str, str]
    artifact: str
    revalidation: dict[str, Any]

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def reported(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: metrics[k] for k in REPORTED_METRICS if k in metrics}
