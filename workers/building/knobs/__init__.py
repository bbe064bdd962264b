"""The knobs' implementations (see `workers.building.knobs.base`): how each declared engine,
precision mode and pruning method builds and runs. A new knob is a declaration in
`autotune.core.knobs` and its implementation here, in a module imported below; installed
plugins add theirs (the `autotune.engine_implementations` entry points, `autotune.core.plugins`),
loaded at the end of this module."""

from autotune.core.plugins import ENGINE_IMPLEMENTATIONS_GROUP, load_plugins
from workers.building.knobs import engines, openvino, precisions, pruning  # noqa: F401  (registers them)
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
