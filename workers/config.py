"""Parse a trial's configuration (`group.param` keys) into typed settings.

A missing key takes its default. Keys of groups this package does not know are ignored (later
features add groups); a known key with a bad value, or an unknown key inside a known group,
raises `Unsupported` naming it, so a trial never claims a setting it did not apply.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from autotune.contract import ConfigValue
from autotune.errors import Unsupported

ModelKind = Literal["torch", "onnx"]

PRECISIONS = ("fp32", "bf16", "fp16", "int8_dynamic", "int8_static", "fp8")
PRUNE_METHODS = ("none", "magnitude", "structured", "semi_structured_2_4")
ENGINES = ("torch_eager", "torch_compile", "onnxruntime")
DEVICES = ("cpu", "cuda")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
ORT_PROVIDERS = ("cpu", "cuda", "tensorrt")
ORT_GRAPH_OPT = ("disable", "basic", "extended", "all")
SDPA_BACKENDS = ("auto", "flash", "efficient", "math", "cudnn")
MAX_PRUNE_RATIO = 0.95

KNOWN_KEYS = frozenset(
    {
        "batch.size",
        "precision.mode",
        "prune.method",
        "prune.ratio",
        "runtime.engine",
        "runtime.threads",
        "runtime.device",
        "runtime.compile_mode",
        "runtime.provider",
        "runtime.graph_opt",
        "attention.sdpa_backend",
        "cuda.cudnn_benchmark",
        "cuda.graphs",
        "shard.tensor_parallel",
        "shard.data_parallel",
        "load.concurrency",
    }
)
KNOWN_GROUPS = frozenset(key.split(".", 1)[0] for key in KNOWN_KEYS)


@dataclass(frozen=True)
class TrialConfig:
    """The settings of one trial, every default filled in."""

    batch_size: int
    precision: str
    prune_method: str
    prune_ratio: float
    engine: str
    threads: int
    device: str = "cpu"
    compile_mode: str = "default"
    ort_provider: str = "cpu"
    ort_graph_opt: str = "all"
    sdpa_backend: str = "auto"
    cudnn_benchmark: bool = False
    cuda_graphs: bool = False
    tensor_parallel: int = 1
    data_parallel: int = 1
    concurrency: int = 1  # threads calling the session at once while it is measured

    @property
    def prunes(self) -> bool:
        """2:4 sparsity has a fixed ratio of one half; the other methods need a ratio > 0."""
        if self.prune_method == "semi_structured_2_4":
            return True
        return self.prune_method != "none" and self.prune_ratio > 0.0

    @property
    def variant_id(self) -> str:
        """Names the model variant: equal ids build identical variants, whatever the spelling
        of the configuration (a missing key and its default are the same)."""
        pruning = f"{self.prune_method}:{self.prune_ratio!r}" if self.prunes else "none"
        return (
            f"engine={self.engine},device={self.device},precision={self.precision},prune={pruning}"
        )


def default_threads() -> int:
    return len(os.sched_getaffinity(0))


def default_engine(kind: ModelKind) -> str:
    return "torch_eager" if kind == "torch" else "onnxruntime"


def parse_config(config: dict[str, ConfigValue], kind: ModelKind) -> TrialConfig:
    """Validate the keys this package owns; `prune.ratio` is ignored when `prune.method` is
    `none` (a search space may sample both independently)."""
    _reject_unknown_keys(config)
    engine = _choice(config, "runtime.engine", ENGINES, default_engine(kind))
    if engine != "onnxruntime" and kind == "onnx":
        raise Unsupported(f"runtime.engine={engine} runs torch models only; this model is ONNX")
    return TrialConfig(
        batch_size=_positive_int(config, "batch.size", 1),
        precision=_choice(config, "precision.mode", PRECISIONS, "fp32"),
        prune_method=_choice(config, "prune.method", PRUNE_METHODS, "none"),
        prune_ratio=_prune_ratio(config),
        engine=engine,
        threads=_positive_int(config, "runtime.threads", default_threads()),
        device=_choice(config, "runtime.device", DEVICES, "cpu"),
        compile_mode=_choice(config, "runtime.compile_mode", COMPILE_MODES, "default"),
        ort_provider=_choice(config, "runtime.provider", ORT_PROVIDERS, "cpu"),
        ort_graph_opt=_choice(config, "runtime.graph_opt", ORT_GRAPH_OPT, "all"),
        sdpa_backend=_choice(config, "attention.sdpa_backend", SDPA_BACKENDS, "auto"),
        cudnn_benchmark=_flag(config, "cuda.cudnn_benchmark"),
        cuda_graphs=_flag(config, "cuda.graphs"),
        tensor_parallel=_positive_int(config, "shard.tensor_parallel", 1),
        data_parallel=_positive_int(config, "shard.data_parallel", 1),
        concurrency=_positive_int(config, "load.concurrency", 1),
    )


def _reject_unknown_keys(config: dict[str, ConfigValue]) -> None:
    for key in config:
        if key.split(".", 1)[0] in KNOWN_GROUPS and key not in KNOWN_KEYS:
            raise Unsupported(f"unknown configuration key {key!r} (known: {sorted(KNOWN_KEYS)})")


def _choice(
    config: dict[str, ConfigValue], key: str, allowed: tuple[str, ...], default: str
) -> str:
    value = config.get(key, default)
    if value not in allowed:
        raise Unsupported(f"{key}={value!r} is not one of {list(allowed)}")
    return str(value)


def _positive_int(config: dict[str, ConfigValue], key: str, default: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Unsupported(f"{key}={value!r} must be an integer >= 1")
    return value


def _flag(config: dict[str, ConfigValue], key: str) -> bool:
    value = config.get(key, False)
    if not isinstance(value, bool):
        raise Unsupported(f"{key}={value!r} must be true or false")
    return value


def _prune_ratio(config: dict[str, ConfigValue]) -> float:
    value = config.get("prune.ratio", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unsupported(f"prune.ratio={value!r} must be a number")
    if not 0.0 <= value <= MAX_PRUNE_RATIO:
        raise Unsupported(f"prune.ratio={value!r} must be in [0, {MAX_PRUNE_RATIO}]")
    return float(value)
