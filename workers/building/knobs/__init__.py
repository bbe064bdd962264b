"""The knobs' implementations (see `workers.building.knobs.base`): how each declared engine,
precision mode and pruning method builds and runs. A new knob is a declaration in
`autotune.core.knobs` and its implementation here, in a module named in pyproject.toml's
`autotune.engine_implementations` entry points; the group is loaded at the end of this module
(`autotune.core.plugins`): autotune's own entries, then installed plugins'."""

from autotune.core.plugins import ENGINE_IMPLEMENTATIONS_GROUP, load_plugins
from workers.building.knobs.base import (
    EngineImplementation,
    PrecisionImplementation,
    PruningImplementation,
    engine_of,
    implements,
    precision_of,
    pruning_of,
    unimplemented,
)

__all__ = [
    "EngineImplementation",
    "PrecisionImplementation",
    "PruningImplementation",
    "engine_of",
    "implements",
    "precision_of",
    "pruning_of",
    "unimplemented",
]

load_plugins(ENGINE_IMPLEMENTATIONS_GROUP)
