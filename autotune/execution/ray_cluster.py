"""The Ray cluster that runs the trials: which nodes hold trial slots, what each kind of node
has (probed on the node itself by the data plane, `workers.building.probe`), and how many slots each
node gets. Nodes with the same hardware fingerprint are one kind."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Literal

from autotune.core.contract import HardwareProfile, NodeInfo, NodeKind
from autotune.core.errors import (
    AutotuneError,
    MissingDependency,
    NodesGone,
    NoTrialNodes,
    RequestError,
)
from autotune.execution.base import describe_wait
from autotune.execution.ray_reaper import Reaper, children

# How many trial slots: a number for each kind of node, or every slot the nodes hold.
Workers = int | Literal["auto"]
# A CPU node under `--workers auto` runs this many trials at a time: its cores, caches and
# memory bandwidth are one device, and two trials on it would disturb each other's timings.
CPU_NODE_SLOTS = 1
# How long the probe of a node that joined may take before it is asked again later.
PROBE_TIMEOUT_S = 60.0
# How often the cluster is surveyed while a kind that was asked for has no node.
KIND_POLL_S = 2.0


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
            if self.local:  # its processes end with this one, even one killed inside ray.init
                self._reaper = Reaper()
            try:
                with _signal_handlers_kept():
                    ray.init(**_init_kwargs(address, workers, num_gpus))
            except BaseException:
                self._shutdown()
                raise
            if self._reaper is not None:
                self._reaper.follow(children() - before)
        self._users = 0
        self.workers = workers
        # Each trial node's profile, probed once on the node itself.
        self._profiles: dict[str, HardwareProfile] = {}
        try:
            self.kinds = self.survey()
        except BaseException:
            self._shutdown()
            raise

    def survey(self) -> list[NodeKind]:
        """The alive trial nodes now, grouped into kinds with their slots planned (a node
        seen before is not probed again)."""
        nodes = self.trial_nodes()
        if not nodes:
            raise NoTrialNodes("the Ray cluster has no alive node that offers CPUs to trials")
        new = [node for node in nodes if node.node_id not in self._profiles]
        if new:
            for node, profile in zip(new, self._probe(new), strict=True):
                self._profiles[node.node_id] = profile
        profiles = [self._profiles[node.node_id] for node in nodes]
        return group_kinds(nodes, profiles, self.workers)

    def fingerprint_of(self, node: NodeInfo) -> str | None:
        """The node's fingerprint, probed on it the first time it is asked for (None while
        the node cannot be probed: it is still starting, or already gone)."""
        if node.node_id not in self._profiles:
            try:
                (profile,) = self._probe([node], timeout_s=PROBE_TIMEOUT_S)
            except (self.ray.exceptions.RayError, TimeoutError):
                return None
            self._profiles[node.node_id] = profile
        return self._profiles[node.node_id].fingerprint

    def await_kind(
        self, fingerprint: str, wait_s: float, on_note: Callable[[str], None] | None = None
    ) -> None:
        """While no alive node is of the kind `fingerprint` names (a kind fixed before, whose
        nodes are away), survey the cluster again every few seconds, up to `wait_s`; past it
        raise `NodesGone`. Returns at once where the kind is there."""
        if any(kind.fingerprint == fingerprint for kind in self.kinds):
            return
        if on_note is not None:
            on_note(
                f"no node of kind {fingerprint} is in the cluster now; waiting up to "
                f"{describe_wait(wait_s)} for one (cluster.node_wait_s)"
            )
        deadline = time.monotonic() + wait_s
        while not any(kind.fingerprint == fingerprint for kind in self.kinds):
            if time.monotonic() >= deadline:
                raise NodesGone(
                    f"no node of kind {fingerprint} joined within {describe_wait(wait_s)} "
                    "(cluster.node_wait_s)"
                )
            time.sleep(KIND_POLL_S)
            with suppress(AutotuneError):  # no trial node at all yet
                self.kinds = self.survey()

    def alive_node_ids(self) -> set[str]:
        """Ray's node table: the nodes it holds alive now."""
        return {node["NodeID"] for node in self.ray.nodes() if node.get("Alive")}

    def trial_nodes(self) -> list[NodeInfo]:
        """The alive nodes that offer CPUs to trials, as Ray's node table lists them now."""
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
        return nodes

    def _probe(
        self, nodes: list[NodeInfo], timeout_s: float | None = None
    ) -> list[HardwareProfile]:
        """Each node's profile, probed in a worker process on that node."""
        from workers.building.probe import probe

        remote = self.ray.remote(num_cpus=0)(probe)
        refs = [remote.options(scheduling_strategy=on_node(n.node_id)).remote() for n in nodes]
        try:
            profiles: list[HardwareProfile] = self.ray.get(refs, timeout=timeout_s)
        except self.ray.exceptions.GetTimeoutError:
            for ref in refs:
                self.ray.cancel(ref, force=True)
            raise TimeoutError(f"no probe answered within {timeout_s:g} s") from None
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
    """`ray.init` takes SIGTERM from the process twice over, and the process's own handlers of
    SIGTERM and SIGINT are kept through it, so that a stop signal ends a study (or a service)
    as its owner set it to (the running trials finish first):

    - in the main thread it installs a Python handler that exits at once; it is not
      installed while `ray.init` runs, and the process's handlers are put back after;
    - in any thread Ray's core worker installs its C++ crash handler on SIGTERM with
      sigaction, which `signal.getsignal` does not see: it aborts the process at the next
      SIGTERM, and `ray.shutdown` leaves SIGTERM at its default (the process dies of it).
      That handler is switched off (Ray's RAY_DISABLE_FAILURE_SIGNAL_HANDLER) in this
      process; Python's faulthandler still reports a crash."""
    from ray._private import ray_constants, utils

    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    if threading.current_thread() is not threading.main_thread():
        yield  # Ray installs no Python handler there, nor can anyone
        return
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    install = utils.set_sigterm_handler
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = install
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
