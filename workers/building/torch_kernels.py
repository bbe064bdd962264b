"""Kernel settings of torch sessions: threads, cuDNN autotuning and the SDPA backend, and the
checks that a forced SDPA backend changes something and can run the model's attention."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from autotune.core.errors import Unsupported
from autotune.core.knobs.config import TrialConfig

if TYPE_CHECKING:
    import torch


class TorchKernels:
    """Process-wide kernel settings a torch session re-asserts on every call (another session,
    e.g. the reference model's, may have changed them since), and the per-call SDPA backend."""

    def __init__(
        self, threads: int, sdpa_backend: str = "auto", cudnn_benchmark: bool | None = None
    ) -> None:
        import torch

        self._torch = torch
        self.threads = threads
        self.sdpa_backend = sdpa_backend
        self._cudnn_benchmark = cudnn_benchmark  # None: a CPU session leaves the flag alone
        self._backend = sdpa_backend_enum(sdpa_backend)

    def applied(self) -> contextlib.AbstractContextManager[Any]:
        """The settings applied now, and inference mode (with the SDPA backend) while in it;
        without an SDPA backend, torch's own context (no generator around it, per call)."""
        torch = self._torch
        # Checking costs well under a microsecond; setting only happens after a change.
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        if (
            self._cudnn_benchmark is not None
            and torch.backends.cudnn.benchmark != self._cudnn_benchmark
        ):
            torch.backends.cudnn.benchmark = self._cudnn_benchmark
        if self._backend is None:
            return torch.inference_mode()  # type: ignore[no-any-return]
        return self._with_backend()

    @contextlib.contextmanager
    def _with_backend(self) -> Iterator[None]:
        from torch.nn.attention import sdpa_kernel

        with self._torch.inference_mode(), sdpa_kernel(self._backend):
            yield


_SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
    "cudnn": "CUDNN_ATTENTION",
}
_NO_SDPA_KERNEL = "No viable backend for scaled_dot_product_attention"


def sdpa_backend_enum(name: str) -> Any:
    """torch's SDPBackend member for an `attention.sdpa_backend` value; None for auto."""
    if name == "auto":
        return None
    from torch.nn.attention import SDPBackend

    return getattr(SDPBackend, _SDPA_BACKENDS[name])


def kernels_for(config: TrialConfig, threads: int | None = None) -> TorchKernels:
    return TorchKernels(
        threads if threads is not None else config.threads,
        config.sdpa_backend,
        config.cudnn_benchmark if config.device == "cuda" else None,
    )


def check_attention_used(module: torch.nn.Module, inputs: torch.Tensor, backend: str) -> None:
    """Refuse an SDPA backend for a model that has no scaled-dot-product attention (the setting
    would change nothing). nn.MultiheadAttention counts; otherwise one forward runs with every
    SDPA backend disabled, which fails at the model's first scaled_dot_product_attention."""
    from torch import nn
    from torch.nn.attention import sdpa_kernel

    if any(isinstance(child, nn.MultiheadAttention) for child in module.modules()):
        return
    try:
        with sdpa_kernel([]):
            module(inputs)
    except RuntimeError as error:
        if _NO_SDPA_KERNEL in str(error):
            return
        raise
    raise Unsupported(
        f"attention.sdpa_backend={backend}: the model calls no scaled_dot_product_attention, "
        "so the setting would change nothing"
    )


def sdpa_unsupported(error: Exception, backend: str) -> Unsupported | None:
    """The `Unsupported` for a forward that the forced SDPA backend cannot run (its inputs'
    dtype, shape or mask are outside what that kernel takes), else None."""
    if backend == "auto" or _NO_SDPA_KERNEL not in str(error):
        return None
    return Unsupported(
        f"attention.sdpa_backend={backend} cannot run this model's attention: "
        + str(error).strip().splitlines()[0]
    )
