"""Search strategies, registered by name (see `autotune.strategies.base`): autotune's own and
installed plugins', all named in `autotune.strategies` entry points (`autotune.core.plugins`),
loaded at the end of this module, autotune's own first."""

from autotune.core.plugins import STRATEGIES_GROUP, load_plugins
from autotune.strategies.base import (
    STRATEGIES,
    Answer,
    Proposal,
    Strategy,
    make_strategy,
    register_strategy,
    strategy_names,
)

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
load_plugins(STRATEGIES_GROUP)

# Only the name: the module registered its strategy when its entry point was loaded above.
from autotune.strategies.autotune import NAME as DEFAULT_STRATEGY  # noqa: E402
