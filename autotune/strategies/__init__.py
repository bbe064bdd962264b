"""Search strategies, registered by name (see `autotune.strategies.base`)."""

from autotune.strategies import autotune as _autotune
from autotune.strategies import optuna_samplers as _optuna_samplers
from autotune.strategies.base import (
    STRATEGIES,
    Answer,
    Proposal,
    Strategy,
    make_strategy,
    register_strategy,
    strategy_names,
)

DEFAULT_STRATEGY = _autotune.NAME

__all__ = [
    "DEFAULT_STRATEGY",
    "STRATEGIES",
    "Answer",
    "Proposal",
    "Strategy",
    "make_strategy",
    "register_strategy",
    "strategy_names",
]
del _optuna_samplers
