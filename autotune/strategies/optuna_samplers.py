"""Optuna's samplers as they come: every proposal is the sampler's, every trial is measured.
Constraints reach each sampler through `Trial.set_constraint`."""

from __future__ import annotations

from typing import Any

from autotune.strategies.base import Strategy, register_strategy


def _optuna() -> Any:
    import optuna

    return optuna


@register_strategy
class TPE(Strategy):
    name = "tpe"

    def sampler(self) -> Any:
        return _optuna().samplers.TPESampler(multivariate=True, seed=self.seed)


@register_strategy
class Random(Strategy):
    name = "random"

    def sampler(self) -> Any:
        return _optuna().samplers.RandomSampler(seed=self.seed)


@register_strategy
class NSGA2(Strategy):
    name = "nsga2"

    def sampler(self) -> Any:
        return _optuna().samplers.NSGAIISampler(seed=self.seed)


@register_strategy
class GP(Strategy):
    name = "gp"

    def sampler(self) -> Any:
        return _optuna().samplers.GPSampler(seed=self.seed)
