"""Parse a trial's configuration (`group.param` keys) into typed settings.

A missing key takes its default. Keys of groups this package does not know are ignored (later
features add groups); a known key with a bad value, or an unknown key inside a known group,
raises `Unsupported` naming it, so a trial never claims a setting it did not apply.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from autotune.core.errors import Unsupported
from autotune.core.knobs import (
    DEFAULTS,
    DEVICE_KEY,
    ENGINE_KEY,
    ENGINES,
    FALLBACK_KEY,
    PRECISION_KEY,
    PRECISIONS,
    PRUNE_KEY,
    PRUNINGS,
    ModelKind,
    engine_options,
    option_default,
    variant_key,
)
from autotune.core.knobs.base import ConfigValue, positive_integer

DEVICES = ("cpu", "cuda")
SDPA_BACKENDS = ("auto", "flash", "efficient", "math", "cudnn")
MAX_PRUNE_RATIO = 0.95

# The keys every engine reads; each engine's own keys come from its class (`Engine.options`).
SHARED_KEYS = frozenset(
    {
        "batch.size",
        "precision.mode",
        "precision.fallback",
        "prune.method",
        "prune.ratio",
        "runtime.engine",
        "runtime.threads",
        "runtime.device",
        "attention.sdpa_backend",
        "cuda.cudnn_benchmark",
        "cuda.graphs",
        "shard.tensor_parallel",
        "shard.data_parallel",
        "load.concurrency",
    }
)


def known_keys() -> frozenset[str]:
    return SHARED_KEYS | {option.key for option in engine_options()}


@dataclass(frozen=True)
class TrialConfig:
    """The settings of one trial, every default filled in; `options` holds the registered
    engines' own keys (`Engine.options`), each at its value or default."""

    batch_size: int
    precision: str
    prune_method: str
    prune_ratio: float
    engine: str
    threads: int
    device: str = "cpu"
    sdpa_backend: str = "auto"
    cudnn_benchmark: bool = False
    cuda_graphs: bool = False
    tensor_parallel: int = 1
    data_parallel: int = 1
    concurrency: int = 1  # threads calling the session at once while it is measured
    fallback: int = 0  # of an int8 model, how many of its most sensitive nodes stay in float
    options: dict[str, ConfigValue] = field(default_factory=dict, compare=False)

    def option(self, key: str) -> ConfigValue:
        """An engine option's value (its default where the configuration leaves it out)."""
        return self.options[key] if key in self.options else option_default(key)

    @property
    def prunes(self) -> bool:
        return PRUNINGS[self.prune_method].prunes(self)

    @property
    def variant_id(self) -> str:
        """Names the model variant: equal ids build identical variants, whatever the spelling
        of the configuration (a missing key and its default are the same)."""
        return variant_key(self.as_config())

    def as_config(self) -> dict[str, ConfigValue]:
        """The configuration's keys that choose the variant and its engine, defaults filled."""
        return {
            ENGINE_KEY: self.engine,
            DEVICE_KEY: self.device,
            PRECISION_KEY: self.precision,
            PRUNE_KEY: self.prune_method,
            "prune.ratio": self.prune_ratio,
            FALLBACK_KEY: self.fallback,
            **self.options,
        }


def default_threads() -> int:
    return len(os.sched_getaffinity(0))


def default_engine(kind: ModelKind) -> str:
    return next(e.name for e in ENGINES.values() if e.model_format == kind)


def parse_config(config: dict[str, ConfigValue], kind: ModelKind) -> TrialConfig:
    """Validate the keys this package owns; `prune.ratio` is ignored when `prune.method` is
    `none` (a search space may sample both independently)."""
    _reject_unknown_keys(config)
    engine = _choice(config, ENGINE_KEY, tuple(ENGINES), default_engine(kind))
    if ENGINES[engine].model_format == "torch" and kind == "onnx":
        raise Unsupported(f"runtime.engine={engine} runs torch models only; this model is ONNX")
    return TrialConfig(
        batch_size=_positive_int(config, "batch.size", 1),
        precision=_choice(config, PRECISION_KEY, tuple(PRECISIONS), DEFAULTS[PRECISION_KEY]),
        prune_method=_choice(config, PRUNE_KEY, tuple(PRUNINGS), DEFAULTS[PRUNE_KEY]),
        prune_ratio=_prune_ratio(config),
        engine=engine,
        threads=_positive_int(config, "runtime.threads", default_threads()),
        device=_choice(config, DEVICE_KEY, DEVICES, DEFAULTS[DEVICE_KEY]),
        sdpa_backend=_choice(config, "attention.sdpa_backend", SDPA_BACKENDS, "auto"),
        cudnn_benchmark=_flag(config, "cuda.cudnn_benchmark"),
        cuda_graphs=_flag(config, "cuda.graphs"),
        tensor_parallel=_positive_int(config, "shard.tensor_parallel", 1),
        data_parallel=_positive_int(config, "shard.data_parallel", 1),
        concurrency=_positive_int(config, "load.concurrency", 1),
        fallback=_fallback(config),
        options={option.key: option.parse(config) for option in engine_options()},
    )


def _reject_unknown_keys(config: dict[str, ConfigValue]) -> None:
    known = known_keys()
    groups = {key.split(".", 1)[0] for key in known}
    for key in config:
        if key.split(".", 1)[0] in groups and key not in known:
            raise Unsupported(f"unknown configuration key {key!r} (known: {sorted(known)})")


def _choice(
    config: dict[str, ConfigValue], key: str, allowed: tuple[str, ...], default: str
) -> str:
    value = config.get(key, default)
    if value not in allowed:
        raise Unsupported(f"{key}={value!r} is not one of {list(allowed)}")
    return str(value)


def _positive_int(config: dict[str, ConfigValue], key: str, default: int) -> int:
    value = config.get(key, default)
    reason = positive_integer(value)
    if reason is not None or not isinstance(value, int):
        raise Unsupported(f"{key}={value!r} {reason}")
    return value


def _flag(config: dict[str, ConfigValue], key: str) -> bool:
    value = config.get(key, False)
    if not isinstance(value, bool):
        raise Unsupported(f"{key}={value!r} must be true or false")
    return value


def _fallback(config: dict[str, ConfigValue]) -> int:
    value = config.get(FALLBACK_KEY, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Unsupported(f"{FALLBACK_KEY}={value!r} must be an integer >= 0")
    return value


def _prune_ratio(config: dict[str, ConfigValue]) -> float:
    value = config.get("prune.ratio", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unsupported(f"prune.ratio={value!r} must be a number")
    if not 0.0 <= value <= MAX_PRUNE_RATIO:
        raise Unsupported(f"prune.ratio={value!r} must be in [0, {MAX_PRUNE_RATIO}]")
    return float(value)
