"""The search strategy `example_random` (entry point group `autotune.strategies`): Optuna's
random sampler, every trial measured, under a name of its own (`autotune tune --sampler
example_random`). A strategy of one's own subclasses `autotune.strategies.Strategy` (propose,
answer without measuring, learn after each trial) in the same way."""

from __future__ import annotations

from autotune.strategies import register_strategy
from autotune.strategies.optuna_samplers import Random


@register_strategy
class ExampleRandom(Random):
    name = "example_random"
