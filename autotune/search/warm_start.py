"""Warm starts: what a previous study learned, carried into the study of a re-tune.

A re-tune (new weights, new hardware) starts from the previous study's Pareto front, and
measurements whose provenance still describes the current run are told again instead of
being measured again.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from autotune.core.contract import Provenance, TrialMetrics, TrialResult, TrialSpec
from autotune.core.knobs import variant_key
from autotune.results.optuna_store import opened_store
from autotune.results.records import Candidate, configuration_key
from autotune.search.front import front_of
from autotune.space.search_space import EffectiveSpace
from autotune.strategies import Answer


@dataclass(frozen=True)
class PreviousTrial:
    number: int
    config: dict[str, Any]
    # Without accuracy_drop: that depends on the baseline of the study it is told to.
    metrics: dict[str, Any]
    provenance: dict[str, Any]


@dataclass(frozen=True)
class WarmStart:
    source_study: str
    front: list[dict[str, Any]]  # configurations, in selection order
    trials: list[PreviousTrial]

    def configs_for(self, space: EffectiveSpace) -> list[dict[str, Any]]:
        """The front's configurations that `space` can produce, once each, without its
        baseline (which every study measures anyway)."""
        kept: list[dict[str, Any]] = []
        for config in self.front:
            if config != space.baseline() and config not in kept and space.produces(config):
                kept.append(config)
        return kept

    def measurement(self, config: dict[str, Any], expected: dict[str, Any]) -> PreviousTrial | None:
        """A previous measurement of exactly `config` whose provenance has `expected`, taken
        on a quiet machine (a contended one is measured again)."""
        matching = self._by_config.get(configuration_key(config), [])
        quiet = (t for t in matching if not (t.provenance.get("contention") or {}).get("contended"))
        return next((t for t in quiet if _agrees(t.provenance, expected)), None)

    def answer(self, spec: TrialSpec, expected: dict[str, Any]) -> Answer | None:
        """The result of this study's measurement of `spec`'s configuration, if there is one
        made as a measurement now would be (its provenance has `expected`)."""
        previous = self.measurement(spec.config, expected)
        if previous is None:
            return None
        result = TrialResult.for_spec(
            spec,
            "ok",
            metrics=TrialMetrics.model_validate(previous.metrics),
            provenance=Provenance.model_validate(previous.provenance),
        )
        return Answer(result, f"{self.source_study}#{previous.number}")

    def accuracy(self, variant: str, expected: dict[str, Any]) -> float | None:
        """The accuracy of a model variant, measured under a provenance that has `expected`."""
        matching = self._by_variant.get(variant, [])
        found = next((t for t in matching if _agrees(t.provenance, expected)), None)
        return None if found is None else float(found.metrics["accuracy"])

    @cached_property
    def _by_config(self) -> dict[str, list[PreviousTrial]]:
        index: dict[str, list[PreviousTrial]] = {}
        for trial in self.trials:
            index.setdefault(configuration_key(trial.config), []).append(trial)
        return index

    @cached_property
    def _by_variant(self) -> dict[str, list[PreviousTrial]]:
        index: dict[str, list[PreviousTrial]] = {}
        for trial in self.trials:
            index.setdefault(variant_key(trial.config), []).append(trial)
        return index


def load_warm_start(study_name: str, storage: str) -> WarmStart:
    """The previously chosen configuration, then the rest of the feasible front by trial
    number, and every measured trial of a stored study (each configuration once)."""
    with opened_store(study_name, storage, "warm_start") as store:
        report = store.revalidation_report() or {}
        measured = store.completed()
        front = front_of(store)
    chosen = report.get("chosen")
    chosen_config = next((dict(r.config) for r in measured if r.number == chosen), None)
    trials = [
        PreviousTrial(
            number=r.number,
            config=dict(r.config),
            metrics=r.measured_metrics().model_dump(),  # type: ignore[union-attr]
            provenance=r.provenance.model_dump(mode="json") if r.provenance else {},
        )
        for r in measured
    ]
    return WarmStart(study_name, selection_order(front, chosen, chosen_config), trials)


def selection_order(
    front: list[Candidate], chosen: int | None, chosen_config: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The previous choice (trial `chosen`, configuration `chosen_config`) first, then the
    front by trial number. The unmodified model is the choice where no finalist beat it, and
    it may be off the front."""
    ordered = sorted(front, key=lambda c: (c.trial_number != chosen, c.trial_number))
    configs = [c.config for c in ordered]
    if chosen_config is not None and chosen_config not in configs:
        configs.insert(0, chosen_config)
    return configs


def _agrees(provenance: dict[str, Any], expected: dict[str, Any]) -> bool:
    return all(provenance.get(key) == value for key, value in expected.items())
