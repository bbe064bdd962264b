"""Runtimes: each builds an inference session for a variant, exposing `run(batch) -> outputs`.

Sessions take and return numpy arrays on the host, so the time of moving data in and out of the
framework (and on CUDA to and from the device) is part of every measured call.

Which trial settings each registered runtime applies; any other setting must keep its default,
or the session is refused with `Unsupported` (a trial never claims a setting it did not apply),
and so is a setting this machine cannot honour:

- torch_eager: runtime.device (cpu, cuda), attention.sdpa_backend (CPU: auto, math, flash),
  cuda.cudnn_benchmark and cuda.graphs (CUDA only), shard.tensor_parallel (CPU over gloo, CUDA
  over NCCL), shard.data_parallel (CUDA only).
- torch_compile: runtime.device, runtime.compile_mode (CPU: default and
  max-autotune-no-cudagraphs; the CUDA-graph modes need CUDA), attention.sdpa_backend,
  cuda.cudnn_benchmark, shard.data_parallel. CUDA graphs come from mode reduce-overhead.
- onnxruntime: runtime.provider (cpu, cuda, tensorrt; must be available and really used),
  runtime.graph_opt. It runs where its provider does (runtime.device=cuda needs a GPU provider).

The sessions themselves are in `workers.torch_sessions`, `workers.ort_session` and
`workers.sharding`. Sharded sessions run in several processes or on several devices and must be
closed: use `opened(session)` or `close_session(session)`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np

from autotune.errors import Unsupported
from workers.config import TrialConfig
from workers.ort_session import ORT_PROVIDERS, OnnxRuntimeSession
from workers.sharding import DataParallelSession, ModelSource, tensor_parallel_session
from workers.torch_kernels import kernels_for
from workers.torch_sessions import TorchCompileSession, TorchEagerSession
from workers.variants import OnnxVariant, TorchVariant, Variant

# OnnxRuntimeSession and TorchEagerSession are re-exported: callers take them from here.
__all__ = [
    "RUNTIMES",
    "RUNTIME_OPTIONS",
    "OnnxRuntimeSession",
    "Runtime",
    "Session",
    "TorchEagerSession",
    "build_session",
    "check_runtime",
    "close_session",
    "helper_pids",
    "opened",
    "register_runtime",
    "require_cuda",
]


class Session(Protocol):
    @property
    def fixed_batch(self) -> int | None:
        """The only batch size the model accepts, or None when its batch axis is dynamic."""

    def run(self, batch: np.ndarray) -> np.ndarray: ...


Runtime = Callable[[Variant, TrialConfig], Session]

RUNTIMES: dict[str, Runtime] = {}
# Per runtime, the TrialConfig fields (besides batch size, precision, pruning, threads and
# device) that it applies; every other field of `_OPTION_KEYS` must keep its default.
RUNTIME_OPTIONS: dict[str, frozenset[str]] = {}

# TrialConfig field -> (configuration key, default value)
_OPTION_KEYS: dict[str, tuple[str, object]] = {
    "compile_mode": ("runtime.compile_mode", "default"),
    "ort_provider": ("runtime.provider", "cpu"),
    "ort_graph_opt": ("runtime.graph_opt", "all"),
    "sdpa_backend": ("attention.sdpa_backend", "auto"),
    "cudnn_benchmark": ("cuda.cudnn_benchmark", False),
    "cuda_graphs": ("cuda.graphs", False),
    "tensor_parallel": ("shard.tensor_parallel", 1),
    "data_parallel": ("shard.data_parallel", 1),
}
# Why a runtime does not take a setting, where something else does the job.
_HINTS = {
    ("torch_compile", "cuda_graphs"): "; runtime.compile_mode=reduce-overhead captures CUDA graphs",
    ("torch_compile", "tensor_parallel"): "; tensor parallelism runs with torch_eager",
}


def register_runtime(
    name: str, options: frozenset[str] = frozenset()
) -> Callable[[Runtime], Runtime]:
    """Register a runtime under `name`; `options` names the TrialConfig fields it applies."""
    unknown = options - _OPTION_KEYS.keys()
    if unknown:
        raise ValueError(f"unknown runtime options {sorted(unknown)}")

    def register(runtime: Runtime) -> Runtime:
        if name in RUNTIMES:
            raise ValueError(f"runtime {name!r} is already registered")
        RUNTIMES[name] = runtime
        RUNTIME_OPTIONS[name] = options
        return runtime

    return register


def build_session(
    variant: Variant, config: TrialConfig, source: ModelSource | None = None
) -> Session:
    """The session of `config.engine` for `variant`. Tensor-parallel sessions start worker
    processes that rebuild the variant themselves from `source`."""
    check_runtime(config)
    if config.tensor_parallel > 1:
        return tensor_parallel_session(variant, config, source)
    return RUNTIMES[config.engine](variant, config)


def close_session(session: Session) -> None:
    """Release what a session holds (worker processes, device memory); a no-op for most."""
    close = getattr(session, "close", None)
    if callable(close):
        close()


@contextlib.contextmanager
def opened(session: Session) -> Iterator[Session]:
    try:
        yield session
    finally:
        close_session(session)


def helper_pids(session: Session) -> tuple[int, ...]:
    """Processes besides this one that do the session's work (their CPU time and memory are
    the trial's too)."""
    return tuple(getattr(session, "helper_pids", ()))


# ---------------------------------------------------------------------------------------------
# Checks that need only the configuration (cheap: run before a variant is built)


def check_runtime(config: TrialConfig) -> None:
    """Raise `Unsupported` for a setting the runtime does not apply or this machine cannot
    honour."""
    if config.engine not in RUNTIMES:
        raise Unsupported(f"runtime.engine={config.engine} has no runtime here")
    applied = RUNTIME_OPTIONS[config.engine]
    for field, (key, default) in _OPTION_KEYS.items():
        value = getattr(config, field)
        if field not in applied and value != default:
            hint = _HINTS.get((config.engine, field), "")
            raise Unsupported(
                f"{key}={_show(value)}: runtime.engine={config.engine} does not apply it{hint}"
            )
    if config.engine == "onnxruntime":
        _check_onnxruntime(config)
    else:
        _check_torch(config)
    _check_sharding(config)


def _show(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# compile modes whose point is CUDA graphs; on the CPU inductor silently skips that part.
_CUDA_GRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")
# SDPA backends with no CPU kernel (torch has a CPU flash-attention kernel, and math runs anywhere).
_CUDA_ONLY_SDPA = ("efficient", "cudnn")


def _check_torch(config: TrialConfig) -> None:
    if config.device == "cuda":
        require_cuda("runtime.device=cuda")
        return
    if config.cudnn_benchmark:
        raise Unsupported("cuda.cudnn_benchmark=true needs runtime.device=cuda (no cuDNN on CPU)")
    if config.cuda_graphs:
        raise Unsupported("cuda.graphs=true needs runtime.device=cuda")
    if config.engine == "torch_compile" and config.compile_mode in _CUDA_GRAPH_COMPILE_MODES:
        raise Unsupported(
            f"runtime.compile_mode={config.compile_mode} captures CUDA graphs, which inductor "
            "skips on the CPU (it would run as mode default); it needs runtime.device=cuda"
        )
    if config.sdpa_backend in _CUDA_ONLY_SDPA:
        raise Unsupported(
            f"attention.sdpa_backend={config.sdpa_backend} has no CPU kernel; "
            "it needs runtime.device=cuda"
        )


def require_cuda(what: str, devices: int = 1) -> None:
    import torch

    if not torch.cuda.is_available():
        # the transforms' wording for the same check, whichever comes first
        raise Unsupported(f"{what} but no CUDA device is visible")
    if torch.cuda.device_count() < devices:
        raise Unsupported(
            f"{what} needs {devices} CUDA devices; {torch.cuda.device_count()} are visible"
        )


def _check_sharding(config: TrialConfig) -> None:
    tp, dp = config.tensor_parallel, config.data_parallel
    if tp > 1 and dp > 1:
        raise Unsupported(
            f"shard.tensor_parallel={tp} with shard.data_parallel={dp}: one or the other"
        )
    if (tp > 1 or dp > 1) and config.cuda_graphs:
        raise Unsupported("cuda.graphs=true is not captured across sharded replicas or ranks")
    if tp > 1 and config.device == "cuda":
        require_cuda(f"shard.tensor_parallel={tp}", devices=tp)
    if dp > 1:
        if config.device != "cuda":
            raise Unsupported(
                f"shard.data_parallel={dp} places one replica per CUDA device; "
                "it needs runtime.device=cuda"
            )
        require_cuda(f"shard.data_parallel={dp}", devices=dp)
        if config.batch_size < dp:
            raise Unsupported(
                f"shard.data_parallel={dp} with batch.size={config.batch_size} would leave "
                "replicas idle"
            )


def _check_onnxruntime(config: TrialConfig) -> None:
    import onnxruntime

    if config.device == "cuda" and config.ort_provider == "cpu":
        raise Unsupported(
            "runtime.device=cuda with runtime.provider=cpu: onnxruntime runs where its provider "
            "does; ask for runtime.provider=cuda or tensorrt"
        )
    wanted = ORT_PROVIDERS[config.ort_provider][0]
    available = onnxruntime.get_available_providers()
    if wanted not in available:
        raise Unsupported(
            f"runtime.provider={config.ort_provider}: {wanted} is not available in this "
            f"onnxruntime build (available: {', '.join(available)})"
        )


# ---------------------------------------------------------------------------------------------
# The registered runtimes


def _torch_variant(variant: Variant, engine: str) -> TorchVariant:
    if not isinstance(variant, TorchVariant):
        raise Unsupported(f"runtime.engine={engine} runs torch models only")
    return variant


_TORCH_EAGER_OPTIONS = frozenset(
    {"sdpa_backend", "cudnn_benchmark", "cuda_graphs", "tensor_parallel", "data_parallel"}
)


@register_runtime("torch_eager", _TORCH_EAGER_OPTIONS)
def torch_eager(variant: Variant, config: TrialConfig) -> Session:
    torch_variant = _torch_variant(variant, "torch_eager")
    if config.data_parallel > 1:
        return DataParallelSession(torch_variant, config)
    return TorchEagerSession(
        torch_variant,
        config.threads,
        device=config.device,
        kernels=kernels_for(config),
        cuda_graphs=config.cuda_graphs,
    )


@register_runtime(
    "torch_compile", frozenset({"compile_mode", "sdpa_backend", "cudnn_benchmark", "data_parallel"})
)
def torch_compile(variant: Variant, config: TrialConfig) -> Session:
    torch_variant = _torch_variant(variant, "torch_compile")
    if config.data_parallel > 1:
        return DataParallelSession(torch_variant, config)
    return TorchCompileSession(
        torch_variant,
        config.threads,
        device=config.device,
        mode=config.compile_mode,
        kernels=kernels_for(config),
    )


@register_runtime("onnxruntime", frozenset({"ort_provider", "ort_graph_opt"}))
def onnxruntime_session(variant: Variant, config: TrialConfig) -> Session:
    if not isinstance(variant, OnnxVariant):
        raise Unsupported("runtime.engine=onnxruntime needs an ONNX variant")
    return OnnxRuntimeSession(
        variant.model_bytes, config.threads, config.ort_provider, config.ort_graph_opt
    )
