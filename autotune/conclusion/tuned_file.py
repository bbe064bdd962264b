"""The tuned-config file: what a user gets back from a study."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autotune.conclusion.decision import Headline
from autotune.conclusion.previous import PreviousComparison
from autotune.core.artifacts import VARIANT_FILE
from autotune.core.contract import ConfigValue, Strict
from autotune.core.contract.trials import FLOAT_NODES_FIELD
from autotune.core.errors import AutotuneError, Interrupted, NoFeasibleConfiguration, RequestError
from autotune.core.metrics import ENERGY, reported_metrics, with_derived
from autotune.requests.request import Cost


class ConstraintOutcome(Strict):
    bound: float
    value: float
    met: bool


class PrecisionChoice(Strict):
    """What an int8 choice keeps in float, and how it was quantized."""

    settings: dict[str, ConfigValue] = Field(
        description="the chosen configuration's precision.* settings (mode, fallback, ...)"
    )
    float_nodes: list[str] | None = Field(
        description="the nodes the exported model keeps in float (precision.fallback's most "
        "sensitive ones); empty: every quantizable node is int8; None: no exported model "
        "says (a replayed study's)",
    )


def precision_choice(config: dict[str, ConfigValue], artifact: Path) -> PrecisionChoice | None:
    """An int8 configuration's precision settings and the float nodes its exported model's
    description names (None for any other precision)."""
    if not str(config.get("precision.mode", "")).startswith("int8"):
        return None
    settings = {k: v for k, v in config.items() if k.startswith("precision.")}
    try:
        description = json.loads((artifact.parent / VARIANT_FILE).read_text())
    except (OSError, ValueError):
        description = {}
    unknown: list[str] | None = None if config.get("precision.fallback") else []
    return PrecisionChoice(
        settings=settings, float_nodes=description.get(FLOAT_NODES_FIELD, unknown)
    )


class TunedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: dict[str, ConfigValue]
    metrics: dict[str, Any]
    baseline: dict[str, Any]
    metrics_from: str | None = Field(
        default=None,
        exclude_if=lambda value: value is None,  # files written before it said nothing
        description="where `metrics` and `baseline` come from: the head-to-head's paired "
        "rounds, not the search's measurement of the trial",
    )
    constraints: dict[str, ConstraintOutcome]
    model: dict[str, str]
    hardware: dict[str, Any]
    software: dict[str, str]
    study: dict[str, Any]
    mlflow: dict[str, str]
    artifact: str
    precision: PrecisionChoice | None = Field(
        default=None,
        exclude_if=lambda value: value is None,  # only an int8 choice has one
        description="an int8 choice's precision settings and the nodes its model keeps in float",
    )
    headline: Headline
    revalidation: dict[str, Any]
    previous: PreviousComparison | None = Field(
        default=None,
        exclude_if=lambda value: value is None,  # a first tuning's file is as it always was
        description="a re-tune's choice against the previous tuning's, in the same rounds",
    )

    def to_yaml(self) -> str:
        return _as_yaml(self.model_dump(mode="json"))


# How a kind's study ended, in the list a tuning of several kinds writes.
KindOutcome = Literal["tuned", "infeasible", "failed", "interrupted"]


class TunedKind(Strict):
    """One kind of node in the list a tuning of several kinds writes: its tuned file, or why
    it has none."""

    fingerprint: str
    hardware: str = Field(description="the kind in a few words: cores, GPUs, hosts")
    study: str
    outcome: KindOutcome = Field(
        default="tuned",
        description="tuned; infeasible (no configuration met the constraints); failed; "
        "interrupted (stopped before it concluded: the same command resumes it)",
    )
    tuned: str | None = Field(
        default=None, description="a tuned kind's tuned file, relative to the list"
    )
    reason: str | None = Field(default=None, description="why a kind is not tuned")
    constraints: dict[str, ConstraintOutcome] | None = Field(
        default=None,
        description="an infeasible kind's: each bound, the measured value closest to it, and "
        "whether any configuration met it",
    )

    @model_validator(mode="after")
    def _tuned_or_why_not(self) -> TunedKind:
        if (self.outcome == "tuned") != (self.tuned is not None):
            raise ValueError(
                f"tuned: a tuned kind names its tuned file and no other kind does (outcome "
                f"{self.outcome!r}, tuned {self.tuned!r})"
            )
        if self.outcome != "tuned" and not self.reason:
            raise ValueError(f"reason: a kind that is {self.outcome} says why (got none)")
        return self


class TunedIndex(Strict):
    """What a tuning of several kinds of node writes in place of one tuned file: each kind
    and how its study ended."""

    kinds: list[TunedKind] = Field(min_length=2)

    def to_yaml(self) -> str:
        return _as_yaml(self.model_dump(mode="json", exclude_none=True))


def _as_yaml(document: dict[str, Any]) -> str:
    """YAML that shows every character as itself (the headline's ×, not \\xD7)."""
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def is_index(path: Path) -> bool:
    """Whether a tuned file is the list of several kinds' tuned files."""
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(loaded, dict) and set(loaded) == {"kinds"}


def tuned_for_kind(path: Path, fingerprint: str) -> Path:
    """In a list of several kinds' tuned files, the file of the kind `fingerprint` names; a
    kind the list lacks is a `RequestError` naming those it has; a kind whose study gave no
    tuned configuration says how it ended (`NoFeasibleConfiguration` where it was
    infeasible, `Interrupted` where it was stopped, else `AutotuneError`)."""
    try:
        index = TunedIndex.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except ValidationError as error:
        rule = "must be a tuned file written by autotune tune"
        raise RequestError("tuned file", f"{rule} ({type(error).__name__})", str(path)) from None
    for kind in index.kinds:
        if kind.fingerprint == fingerprint:
            return _tuned_path(path, kind)
    known = "; ".join(f"{k.fingerprint} ({k.hardware})" for k in index.kinds)
    rule = f"has no configuration tuned for this machine's kind; it lists {known}"
    raise RequestError("tuned file", rule, fingerprint)


def _tuned_path(path: Path, kind: TunedKind) -> Path:
    if kind.tuned is not None:
        return path.parent / kind.tuned
    machine = f"this machine's kind {kind.fingerprint} ({kind.hardware})"
    told = f"{path} has no tuned configuration for {machine}: its study {kind.study}"
    if kind.outcome == "infeasible":
        raise NoFeasibleConfiguration(f"{told} was infeasible: {kind.reason}")
    if kind.outcome == "interrupted":
        raise Interrupted(f"{told} was stopped before it concluded: {kind.reason}")
    raise AutotuneError(f"{told} failed: {kind.reason}")


def read_tuned(path: Path) -> TunedConfig:
    """A tuned file as `autotune tune` wrote it; anything else is a `RequestError`."""
    try:
        return TunedConfig.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError, ValidationError) as error:
        rule = "must be a tuned file written by autotune tune"
        raise RequestError("tuned file", f"{rule} ({type(error).__name__})", str(path)) from None


def reported(metrics: dict[str, Any], cost: Cost | None = None) -> dict[str, Any]:
    """The user contract's metrics, plus the figures derived from them."""
    metrics = with_derived(metrics)
    shown = {k: metrics[k] for k in reported_metrics() if k in metrics}
    if "latency_p95_ci_low_ms" in metrics and metrics["latency_p95_ci_low_ms"] is not None:
        shown["latency_p95_ci_ms"] = [
            metrics["latency_p95_ci_low_ms"],
            metrics["latency_p95_ci_high_ms"],
        ]
    for key in ("iterations", "measure_seconds", "stopped_by", "peak_device_memory_mb"):
        if metrics.get(key) is not None:
            shown[key] = metrics[key]
    return {**shown, **derived_figures(metrics, cost or Cost())}


def derived_figures(metrics: dict[str, Any], cost: Cost) -> dict[str, float]:
    """Energy per 1,000 samples; with a grid intensity, CO2e per million samples. Derived from
    an estimated energy figure, the CO2e is an estimate too (energy_source says which). The
    cost per million samples is a metric (`autotune.core.metrics.COST`), derived when told."""
    joules = float(metrics[ENERGY.name])
    figures = {"energy_per_1000_samples_j": joules * 1000}
    if cost.grid_gco2_per_kwh is not None:
        kwh_per_million = joules * 1e6 / 3.6e6
        figures["co2e_g_per_million_samples"] = kwh_per_million * cost.grid_gco2_per_kwh
    return figures
