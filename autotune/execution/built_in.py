"""Autotune's own kinds of executor, registered in `autotune.execution.registry` as the
`autotune.executors` entry point of autotune's pyproject.toml: `ray` (the trial nodes of a Ray
cluster, one executor for each kind), `in_process` (this process) and `replay` (a recorded
table)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from autotune.core.contract import NodeKind
from autotune.execution import ray_executor
from autotune.execution.base import Executor, trial_memory_limit_mb
from autotune.execution.config import InProcessConfig, RayConfig, ReplayConfig
from autotune.execution.in_process import InProcessExecutor
from autotune.execution.ray_cluster import RayCluster
from autotune.execution.registry import OneExecutor, register_executor
from autotune.execution.replay import ReplayExecutor
from autotune.execution.replay_table import ReplayTable


@dataclass
class RayNodes:
    """A Ray cluster's trial nodes: one `RayExecutor` for each kind chosen. The builder's hold
    on the cluster keeps a Ray started here alive while the executors start."""

    cluster: RayCluster
    memory_limit_mb: int | None
    node_wait_s: float

    def kinds(self) -> list[NodeKind]:
        return self.cluster.kinds

    def await_kind(self, fingerprint: str, on_note: Callable[[str], None] | None) -> None:
        self.cluster.await_kind(fingerprint, self.node_wait_s, on_note)

    def executor(self, kind: NodeKind) -> Executor:
        return ray_executor.RayExecutor(
            memory_limit_mb=self.memory_limit_mb,
            target=kind.fingerprint,
            cluster=self.cluster,
            node_wait_s=self.node_wait_s,
        )

    def release(self) -> None:
        self.cluster.release()


def open_ray(config: RayConfig, node_wait_s: float) -> RayNodes:
    # On this machine each slot's actor gets its share of the memory available now; a
    # cluster's nodes are not this machine's to share out.
    slots = config.workers if isinstance(config.workers, int) else 1
    limit = None if config.address else trial_memory_limit_mb(slots)
    cluster = RayCluster(config.address, config.workers)
    cluster.acquire()
    return RayNodes(cluster, limit, node_wait_s)


def survey_ray(config: RayConfig) -> list[NodeKind]:
    """A Ray cluster's nodes, each probed on itself, or without an address this machine."""
    return ray_executor.survey_kinds(config.address, config.workers)


def open_in_process(config: InProcessConfig, node_wait_s: float) -> OneExecutor:
    return OneExecutor(InProcessExecutor())


def survey_in_process(config: InProcessConfig) -> list[NodeKind]:
    """This machine, where a local Ray would run the trials as well."""
    return ray_executor.survey_kinds(None)


def replay_executor(config: ReplayConfig) -> ReplayExecutor:
    return ReplayExecutor(ReplayTable.load(config.table), config.workers)


def open_replay(config: ReplayConfig, node_wait_s: float) -> OneExecutor:
    return OneExecutor(replay_executor(config))


register_executor(RayConfig, open_ray, survey_ray)
register_executor(InProcessConfig, open_in_process, survey_in_process)
register_executor(ReplayConfig, open_replay)
