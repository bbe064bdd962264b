"""Search strategies, registered by name (see `autotune.strategies.base`); installed plugins
add theirs (the `autotune.strategies` entry points, `autotune.core.plugins`), loaded at the end
of this module."""

from autotune.core.plugins import STRATEGIES_GROUP, load_plugins
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
load_plugins(STRATEGIES_GROUP)
