"""The declared knobs (see `autotune.core.knobs.base`): runtime engines, precision modes and
pruning methods, one class each. A new one is a class in a module of its own, registered with
`@register`, and named in pyproject.toml's `autotune.engines` entry points (engines, pruning
methods) or `autotune.precisions` (precision modes); its implementation is registered under the
same name in `workers.building.knobs`. Both groups are loaded at the end of this module
(`autotune.core.plugins`): autotune's own entries, then installed plugins'."""

from __future__ import annotations

from collections.abc import Mapping

from autotune.core.knobs.base import (
    DEFAULTS,
    DEVICE_KEY,
    ENGINE_KEY,
    ENGINES,
    FALLBACK_KEY,
    PRECISION_KEY,
    PRECISIONS,
    PRUNE_KEY,
    PRUNINGS,
    ConfigValue,
    Engine,
    Knob,
    ModelKind,
    Option,
    Package,
    Precision,
    Pruning,
    Target,
    all_knobs,
    declared_values,
    engine_options,
    knob,
    option_default,
    register,
    selecting_keys,
    supports,
)
from autotune.core.plugins import ENGINES_GROUP, PRECISIONS_GROUP, load_plugins

__all__ = [
    "DEFAULTS",
    "DEVICE_KEY",
    "ENGINES",
    "ENGINE_KEY",
    "FALLBACK_KEY",
    "PRECISIONS",
    "PRECISION_KEY",
    "PRUNE_KEY",
    "PRUNINGS",
    "Engine",
    "Knob",
    "ModelKind",
    "Option",
    "Package",
    "Precision",
    "Pruning",
    "Target",
    "all_knobs",
    "declared_values",
    "defines_variant",
    "engine_options",
    "knob",
    "option_default",
    "register",
    "selecting_keys",
    "supports",
    "variant_key",
]


def defines_variant(key: str) -> bool:
    """Whether a configuration key changes the model variant (see `variant_key`)."""
    if key in (ENGINE_KEY, *DEFAULTS, "prune.ratio", FALLBACK_KEY):
        return True
    return any(o.key == key and o.defines_variant for e in ENGINES.values() for o in e.options)


def variant_key(config: Mapping[str, ConfigValue]) -> str:
    """Names the model variant a configuration runs: its engine, device, precision (with the
    nodes an int8 model keeps in float, where it keeps any), pruning (with the ratio where the
    method takes one) and any engine option that changes numerics.
    Accuracy depends on these alone, never on batch size, threads or other kernel choices, so
    it is measured once per variant. A missing key and its default name the same variant."""
    parts: dict[str, ConfigValue] = {k: config.get(k, v) for k, v in DEFAULTS.items()}
    if ENGINE_KEY in config:
        parts[ENGINE_KEY] = config[ENGINE_KEY]
    method = PRUNINGS.get(str(parts[PRUNE_KEY]))
    ratio = config.get("prune.ratio", 0.0)
    if method is not None and method.takes_ratio:
        if ratio:
            parts["prune.ratio"] = ratio
        else:
            parts[PRUNE_KEY] = "none"
    if config.get(FALLBACK_KEY, 0):
        parts[FALLBACK_KEY] = config[FALLBACK_KEY]
    engine = ENGINES.get(str(config.get(ENGINE_KEY)))
    for option in engine.options if engine is not None else ():
        if option.defines_variant and config.get(option.key, option.default) != option.default:
            parts[option.key] = config[option.key]
    return ",".join(f"{k}={v}" for k, v in sorted(parts.items()))


load_plugins(ENGINES_GROUP)
load_plugins(PRECISIONS_GROUP)
