"""Warm starts: what a previous study learned, carried into the study of a re-tune.

A re-tune (new weights, new hardware) starts from the previous study's Pareto front, and
measurements whose provenance still describes the current run are told again instead of
being measured again.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from autotune.contract import variant_key
from autotune.coordinator import completed_trials, feasible_front, opened_study
from autotune.space import EffectiveSpace


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
            if config != space.baseline() and config not in kept and producible(space, config):
                kept.append(config)
        return kept

    def measurement(self, config: dict[str, Any], expected: dict[str, Any]) -> PreviousTrial | None:
        """A previous measurement of exactly `config` whose provenance has `expected`, taken
        on a quiet machine (a contended one is measured again)."""
        matching = self._by_config.get(_config_key(config), [])
        quiet = (t for t in matching if not (t.provenance.get("contention") or {}).get("contended"))
        return next((t for t in quiet if _agrees(t.provenance, expected)), None)

    def accuracy(self, variant: str, expected: dict[str, Any]) -> float | None:
        """The accuracy of a model variant, measured under a provenance that has `expected`."""
        matching = self._by_variant.get(variant, [])
        found = next((t for t in matching if _agrees(t.provenance, expected)), None)
        return None if found is None else float(found.metrics["accuracy"])

    @cached_property
    def _by_config(self) -> dict[tuple[tuple[str, Any], ...], list[PreviousTrial]]:
        index: dict[tuple[tuple[str, Any], ...], list[PreviousTrial]] = {}
        for trial in self.trials:
            index.setdefault(_config_key(trial.config), []).append(trial)
        return index

    @cached_property
    def _by_variant(self) -> dict[str, list[PreviousTrial]]:
        index: dict[str, list[PreviousTrial]] = {}
        for trial in self.trials:
            index.setdefault(variant_key(trial.config), []).append(trial)
        return index


def load_warm_start(study_name: str, storage: str) -> WarmStart:
    """The feasible front (its previously chosen configuration first, then by trial number)
    and every measured trial of a stored study."""
    with opened_study(study_name, storage, "warm_start") as study:
        chosen = study.user_attrs.get("revalidation", {}).get("chosen")
        front = feasible_front(study)
        measured = completed_trials(study)
    front.sort(key=lambda c: (c.trial_number != chosen, c.trial_number))
    trials = [
        PreviousTrial(
            number=t.number,
            config=dict(t.user_attrs["config"]),
            metrics={k: v for k, v in t.user_attrs["metrics"].items() if k != "accuracy_drop"},
            provenance=dict(t.user_attrs.get("provenance", {})),
        )
        for t in measured
    ]
    return WarmStart(study_name, [c.config for c in front], trials)


def producible(space: EffectiveSpace, config: dict[str, Any]) -> bool:
    """Whether sampling `space` can give exactly `config`: every active dimension has its
    key with a value inside its distribution, and there is no other key."""
    import optuna

    trial = optuna.trial.FixedTrial(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # out-of-range values are rejected below instead
        try:
            produced = space.sample(trial)  # type: ignore[arg-type]
        except ValueError:  # a key the space needs is missing, or a value is not a choice
            return False
    return produced == config and all(
        dist._contains(dist.to_internal_repr(config[name]))
        for name, dist in trial.distributions.items()
    )


def _config_key(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(config.items()))


def _agrees(provenance: dict[str, Any], expected: dict[str, Any]) -> bool:
    return all(provenance.get(key) == value for key, value in expected.items())
