"""The executors an `ExecutorConfig` names, made in one place: its nodes are opened
(`open_nodes`, one branch per kind of configuration), and the kinds of node a tuning runs on
are chosen among theirs the same way whatever runs the trials."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import overload

from autotune.core.contract import NodeKind
from autotune.core.contract.hardware import FINGERPRINT
from autotune.execution import ray_executor
from autotune.execution.base import Executor, Nodes, trial_memory_limit_mb
from autotune.execution.config import ExecutorConfig, InProcessConfig, ReplayConfig
from autotune.execution.in_process import InProcessExecutor
from autotune.execution.ray_cluster import RayCluster
from autotune.execution.replay import ReplayExecutor
from autotune.execution.replay_table import ReplayTable
from autotune.requests.request import DEFAULT_NODE_WAIT_S
from autotune.space.hardware import one_kind, select_kinds


@dataclass
class OneExecutor:
    """The nodes of an executor made whole (this process, a recorded table): one kind, whose
    nodes never come or go."""

    made: Executor
    handed_out: bool = field(default=False, init=False)

    def kinds(self) -> list[NodeKind]:
        return self.made.kinds()

    def await_kind(self, fingerprint: str, on_note: Callable[[str], None] | None) -> None:
        return None

    def executor(self, kind: NodeKind) -> Executor:
        self.handed_out = True
        return self.made

    def release(self) -> None:
        if not self.handed_out:
            self.made.close()


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


def open_nodes(config: ExecutorConfig, node_wait_s: float = DEFAULT_NODE_WAIT_S) -> Nodes:
    """The nodes `config` reaches, surveyed (a Ray cluster joined or started, this process's
    machine probed, a recorded table read)."""
    if isinstance(config, InProcessConfig):
        return OneExecutor(InProcessExecutor())
    if isinstance(config, ReplayConfig):
        return OneExecutor(replay_executor(config))
    # On this machine each slot's actor gets its share of the memory available now; a
    # cluster's nodes are not this machine's to share out.
    slots = config.workers if isinstance(config.workers, int) else 1
    limit = None if config.address else trial_memory_limit_mb(slots)
    cluster = RayCluster(config.address, config.workers)
    cluster.acquire()
    return RayNodes(cluster, limit, node_wait_s)


def replay_executor(config: ReplayConfig) -> ReplayExecutor:
    return ReplayExecutor(ReplayTable.load(config.table), config.workers)


@overload
def make_executors(
    config: ReplayConfig,
    target: str | None = None,
    several: bool = True,
    node_wait_s: float = DEFAULT_NODE_WAIT_S,
    on_note: Callable[[str], None] | None = None,
) -> list[ReplayExecutor]: ...


@overload
def make_executors(
    config: ExecutorConfig,
    target: str | None = None,
    several: bool = True,
    node_wait_s: float = DEFAULT_NODE_WAIT_S,
    on_note: Callable[[str], None] | None = None,
) -> Sequence[Executor]: ...


def make_executors(
    config: ExecutorConfig,
    target: str | None = None,
    several: bool = True,
    node_wait_s: float = DEFAULT_NODE_WAIT_S,
    on_note: Callable[[str], None] | None = None,
) -> Sequence[Executor]:
    """One executor for each kind of node the trials run on (`target` keeps one of them).
    Without `several`, nodes of several kinds and no target are bad input, refused before
    any trial slot starts. A target that is a kind's fingerprint (a job's kind, fixed when it
    was accepted) is waited for up to `node_wait_s` while no node of it is there (`on_note`
    is told so)."""
    nodes = open_nodes(config, node_wait_s)
    executors: list[Executor] = []
    try:
        if target is not None and FINGERPRINT.fullmatch(target):
            nodes.await_kind(target, on_note)
        for kind in choose_kinds(nodes.kinds(), target, several):
            executors.append(nodes.executor(kind))
    except BaseException:
        for executor in executors:
            executor.close()
        raise
    finally:
        nodes.release()  # a failed start stops a Ray started here
    return executors


def choose_kinds(kinds: list[NodeKind], target: str | None, several: bool) -> list[NodeKind]:
    """The kinds a tuning runs on (`select_kinds`); without `several`, the one kind
    (`one_kind`)."""
    return select_kinds(kinds, target) if several else [one_kind(kinds, target)]


def survey(config: ExecutorConfig) -> list[NodeKind]:
    """The kinds of node trials would run on, without starting any: a Ray cluster's nodes
    (each probed on itself), or without an address this machine (where a local Ray would run
    them as well), or a recorded table's stand-in machine."""
    if isinstance(config, ReplayConfig):
        return replay_executor(config).kinds()
    if isinstance(config, InProcessConfig):
        return ray_executor.survey_kinds(None)
    return ray_executor.survey_kinds(config.address, config.workers)
