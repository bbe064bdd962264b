"""The Ray cluster that runs the trials: which nodes hold trial slots, what each kind of node
has (probed on the node itself by the data plane, `workers.building.probe`), and how many slots each
node gets. Nodes with the same hardware fingerprint are one kind."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from autotune.core.contract import HardwareProfile, NodeInfo, NodeKind
from autotune.core.errors import AutotuneError, MissingDependency, RequestError
from autotune.execution.ray_reaper import Reaper, children

# How many trial slots: a number for each kind of node, or every slot the nodes hold.
Workers = int | Literal["auto"]
# A CPU node under `--workers auto` runs this many trials at a time: its cores, caches and
# memory bandwidth are one device, and two trials on it would disturb each other's timings.
CPU_NODE_SLOTS = 1


def parse_workers(value: str) -> Workers:
    """`--workers`: a positive number, or 'auto'."""
    if value == "auto":
        return "auto"
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise RequestError("workers", "must be a number >= 1 or 'auto'", value)


def node_capacity(node: NodeInfo, workers: Workers) -> int:
    """The most slots a node takes: one a GPU on a GPU node; on a CPU node one a CPU, or
    `CPU_NODE_SLOTS` under 'auto'."""
    if node.gpus:
        return min(node.gpus, node.cpus)
    return CPU_NODE_SLOTS if workers == "auto" else node.cpus


def plan_slots(nodes: list[NodeInfo], workers: Workers) -> list[NodeInfo]:
    """The nodes of one kind with their slots: `workers` slots dealt round-robin over them, no
    node past its capacity; under 'auto' every node full."""
    capacity = [node_capacity(node, workers) for node in nodes]
    wanted = sum(capacity) if workers == "auto" else workers
    if wanted < 1:
        raise RequestError("workers", "must be a number >= 1 or 'auto'", wanted)
    slots = [0] * len(nodes)
    while sum(slots) < wanted and any(s < c for s, c in zip(slots, capacity, strict=True)):
        for i in range(len(nodes)):
            if sum(slots) < wanted and slots[i] < capacity[i]:
                slots[i] += 1
    return [node.model_copy(update={"slots": n}) for node, n in zip(nodes, slots, strict=True)]


def group_kinds(
    nodes: list[NodeInfo], profiles: list[HardwareProfile], workers: Workers
) -> list[NodeKind]:
    """One kind per fingerprint, its nodes' slots planned; in the order nodes were listed."""
    grouped: dict[str, tuple[HardwareProfile, list[NodeInfo]]] = {}
    for node, profile in zip(nodes, profiles, strict=True):
        grouped.setdefault(profile.fingerprint, (profile, []))[1].append(node)
    kinds = [
        NodeKind(profile=profile, nodes=plan_slots(members, workers))
        for profile, members in grouped.values()
    ]
    return [kind.model_copy(update={"nodes": [n for n in kind.nodes if n.slots]}) for kind in kinds]


class RayCluster:
    """Ray joined (at `address`) or started here, and its trial nodes surveyed once: each
    alive node that offers CPUs is probed by a task placed on it. Each executor made on it
    `acquire`s it; the Ray started here stops when the last one `release`s it."""

    def __init__(
        self, address: str | None = None, workers: Workers = 1, num_gpus: int | None = None
    ) -> None:
        try:
            import ray
        except ImportError:
            raise MissingDependency("ray", "the Ray executor") from None
        self.ray = ray
        self.owns_ray = not ray.is_initialized()
        # Only a Ray started here for this process is one machine whose cores are ours to split.
        self.local = self.owns_ray and not address
        self._reaper: Reaper | None = None
        if self.owns_ray:
            before = children()
            with _signal_handlers_kept():
                ray.init(**_init_kwargs(address, workers, num_gpus))
            if self.local:  # its processes end with this one, even if this one is killed
                self._reaper = Reaper(children() - before)
        self._users = 0
        try:
            nodes = self._trial_nodes()
            self.kinds = group_kinds(nodes, self._probe(nodes), workers)
        except BaseException:
            self._shutdown()
            raise

    def _trial_nodes(self) -> list[NodeInfo]:
        nodes = []
        for node in self.ray.nodes():
            resources = node.get("Resources", {})
            if not node.get("Alive") or resources.get("CPU", 0) < 1:
                continue  # a head started with --num-cpus 0 runs no trials
            nodes.append(
                NodeInfo(
                    node_id=node["NodeID"],
                    hostname=node.get("NodeManagerHostname", ""),
                    labels=dict(node.get("Labels") or {}),
                    cpus=int(resources["CPU"]),
                    gpus=int(resources.get("GPU", 0)),
                    slots=0,
                )
            )
        if not nodes:
            raise AutotuneError("the Ray cluster has no alive node that offers CPUs to trials")
        return nodes

    def _probe(self, nodes: list[NodeInfo]) -> list[HardwareProfile]:
        """Each node's profile, probed in a worker process on that node."""
        from workers.building.probe import probe

        remote = self.ray.remote(num_cpus=0)(probe)
        refs = [remote.options(scheduling_strategy=on_node(n.node_id)).remote() for n in nodes]
        profiles: list[HardwareProfile] = self.ray.get(refs)
        return profiles

    def acquire(self) -> None:
        self._users += 1

    def release(self) -> None:
        self._users -= 1
        if self._users <= 0:
            self._shutdown()

    def _shutdown(self) -> None:
        if self.owns_ray and self.ray.is_initialized():
            self.ray.shutdown()
        if self._reaper is not None:
            self._reaper.close()
            self._reaper = None


@contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """`ray.init` installs its own SIGTERM handler (which kills this process's Ray and its
    running trials, and then aborts it): the process's own handlers of SIGTERM and SIGINT are
    put back, so that a stop signal ends a study as its owner set it to (the running trials
    finish first)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in kept.items():
            if handler is not None:  # None: set outside Python, nothing to put back
                signal.signal(signum, handler)


def on_node(node_id: str) -> Any:
    """Ray's scheduling strategy that runs a task or actor on that node and nowhere else."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def _init_kwargs(address: str | None, workers: Workers, num_gpus: int | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR"}
    if address:
        return {**kwargs, "address": address}
    # A local Ray's workers must import the same code as this process.
    python_path = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
    slots = workers if isinstance(workers, int) else 1
    return {
        **kwargs,
        "address": "local",  # our own instance, never another process's local Ray
        "include_dashboard": False,
        "num_cpus": max(slots, len(os.sched_getaffinity(0))),
        "num_gpus": num_gpus,
        "runtime_env": {"env_vars": {"PYTHONPATH": python_path}},
    }
