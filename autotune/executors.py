"""Executors run TrialSpecs somewhere and hand back TrialResults.

The coordinator only sees the `Executor` protocol: `InProcessExecutor` runs trials in the
calling process (tests, debugging); `RayExecutor` runs them on Ray actors, one trial at a
time per actor, so each device slot measures alone.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from autotune.contract import ArtifactInfo, ModelInfo, TrialResult, TrialSpec, Workload
from autotune.errors import AutotuneError, MissingDependency

if TYPE_CHECKING:
    from workers.actor import TrialWorker


class Executor(Protocol):
    @property
    def slots(self) -> int: ...

    def inspect(self, workload: Workload) -> ModelInfo: ...

    def submit(self, spec: TrialSpec) -> None: ...

    def pending(self) -> int: ...

    def wait(self) -> list[TrialResult]:
        """Block until at least one submitted trial finishes; return every finished one."""
        ...

    def export(self, spec: TrialSpec, out_dir: str) -> ArtifactInfo: ...

    def close(self) -> None: ...


class InProcessExecutor:
    """Runs each trial synchronously in this process, on one slot."""

    def __init__(self) -> None:
        from workers.actor import TrialWorker

        self._worker: TrialWorker = TrialWorker()
        self._done: deque[TrialResult] = deque()

    @property
    def slots(self) -> int:
        return 1

    def inspect(self, workload: Workload) -> ModelInfo:
        return self._worker.inspect(workload)

    def submit(self, spec: TrialSpec) -> None:
        self._done.append(self._worker.run(spec))

    def pending(self) -> int:
        return len(self._done)

    def wait(self) -> list[TrialResult]:
        done = list(self._done)
        self._done.clear()
        return done

    def export(self, spec: TrialSpec, out_dir: str) -> ArtifactInfo:
        return self._worker.export(spec, out_dir)

    def close(self) -> None:
        self._done.clear()


class RayExecutor:
    """One long-lived Ray actor per slot; each actor runs one trial at a time.

    Without an address, an in-process Ray is started on this machine and stopped on
    close; with one, the executor joins that cluster.
    """

    def __init__(self, workers: int, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise MissingDependency("ray", "the Ray executor") from None
        if workers < 1:
            raise AutotuneError(f"workers must be >= 1, got {workers}")
        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(**_init_kwargs(address, workers))
        cpus_per_slot = max(1, int(ray.available_resources().get("CPU", workers)) // workers)
        # A crashed actor process is restarted by Ray; its trial comes back as an error.
        actor_cls = ray.remote(num_cpus=cpus_per_slot, max_restarts=3)(_worker_class())
        self._actors: list[Any] = [actor_cls.remote() for _ in range(workers)]
        self._idle: list[Any] = list(self._actors)
        self._running: dict[Any, tuple[Any, TrialSpec]] = {}

    @property
    def slots(self) -> int:
        return len(self._actors)

    def inspect(self, workload: Workload) -> ModelInfo:
        info: ModelInfo = self._ray.get(self._actors[0].inspect.remote(workload))
        return info

    def submit(self, spec: TrialSpec) -> None:
        if not self._idle:
            raise AutotuneError("submit called with no idle slot")
        actor = self._idle.pop()
        self._running[actor.run.remote(spec)] = (actor, spec)

    def pending(self) -> int:
        return len(self._running)

    def wait(self) -> list[TrialResult]:
        if not self._running:
            return []
        ready, _ = self._ray.wait(list(self._running), num_returns=1)
        ready, _ = self._ray.wait(list(self._running), num_returns=len(self._running), timeout=0)
        results = []
        for ref in ready:
            actor, spec = self._running.pop(ref)
            self._idle.append(actor)
            results.append(self._collect(ref, spec))
        return results

    def _collect(self, ref: Any, spec: TrialSpec) -> TrialResult:
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayError as exc:
            return TrialResult(
                study=spec.study,
                trial_number=spec.trial_number,
                attempt=spec.attempt,
                status="error",
                reason=f"worker failed: {type(exc).__name__}: {str(exc).splitlines()[0]}",
                variant_key="",
                duration_s=0.0,
            )

    def export(self, spec: TrialSpec, out_dir: str) -> ArtifactInfo:
        artifact: ArtifactInfo = self._ray.get(self._actors[0].export.remote(spec, out_dir))
        return artifact

    def close(self) -> None:
        for actor in self._actors:
            self._ray.kill(actor)
        if self._owns_ray:
            self._ray.shutdown()


def _worker_class() -> type[TrialWorker]:
    from workers.actor import TrialWorker

    return TrialWorker


def _init_kwargs(address: str | None, workers: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR"}
    if address:
        return {**kwargs, "address": address}
    # A local Ray's workers must import the same code as this process.
    python_path = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
    return {
        **kwargs,
        "include_dashboard": False,
        "num_cpus": max(workers, len(os.sched_getaffinity(0))),
        "runtime_env": {"env_vars": {"PYTHONPATH": python_path}},
    }
