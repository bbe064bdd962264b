"""The knobs' implementations (see `workers.building.knobs.base`): how each declared engine,
precision mode and pruning method builds and runs. A new knob is a declaration in
`autotune.core.knobs` and its implementation here, in a module imported below."""

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
