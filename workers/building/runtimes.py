"""Sessions: each engine (`autotune.core.knobs`) builds an inference session for a variant,
exposing `run(batch) -> outputs`.

Sessions take and return numpy arrays on the host, so the time of moving data in and out of the
framework (and on CUDA to and from the device) is part of every measured call. Which settings
each engine applies, and what it refuses, is its class's.

Sharded sessions run in several processes or on several devices and must be closed: use
`opened(session)` or `close_session(session)`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cache
from typing import Protocol

import numpy as np

from autotune.core.contract import HardwareProfile
from autotune.core.errors import Unsupported
from autotune.core.knobs import ModelKind, Target, supports
from autotune.core.knobs.config import TrialConfig
from workers.building.knobs import engine_of
from workers.building.knobs.engines import require_cuda
from workers.building.sharding import ModelSource, tensor_parallel_session
from workers.building.variants import Variant

__all__ = [
    "Session",
    "build_session",
    "checked_session",
    "check_runtime",
    "close_session",
    "helper_pids",
    "machine_profile",
    "machine_target",
    "opened",
]


class Session(Protocol):
    @property
    def fixed_batch(self) -> int | None:
        """The only batch size the model accepts, or None when its batch axis is dynamic."""

    def run(self, batch: np.ndarray) -> np.ndarray: ...


def build_session(
    variant: Variant, config: TrialConfig, source: ModelSource | None = None
) -> Session:
    """The session of `config.engine` for `variant`, once the runtime takes the configuration
    (`check_runtime`). Tensor-parallel sessions start worker processes that rebuild the
    variant themselves from `source`."""
    check_runtime(config)
    return checked_session(variant, config, source)


def checked_session(
    variant: Variant, config: TrialConfig, source: ModelSource | None = None
) -> Session:
    """`build_session` for a configuration `check_runtime` has already passed."""
    if config.tensor_parallel > 1:
        return tensor_parallel_session(variant, config, source)
    return engine_of(config.engine).session(variant, config)


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


def check_runtime(config: TrialConfig, model_kind: ModelKind | None = None) -> None:
    """Raise `Unsupported` for a setting the engine does not apply, a combination a knob
    rejects on this machine, or what only the machine can tell (a device, a provider)."""
    reason = supports(config, machine_target(model_kind))
    if reason is not None:
        raise Unsupported(reason)
    engine_of(config.engine).check_machine(config)
    _check_sharding(config)


@cache
def machine_profile() -> HardwareProfile:
    """This machine's hardware profile, probed once per process (`workers.building.probe`)."""
    from workers.building.probe import probe

    return probe()


def machine_target(model_kind: ModelKind | None = None) -> Target:
    return Target(frozenset(machine_profile().capabilities()), model_kind)


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
