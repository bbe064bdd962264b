"""The nodes of one Ray executor's kind as they come and go: which left, which joined, whether
a node whose worker died is still there, and who hears of each change (`NodeEvent`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Literal

from autotune.core.contract import NodeInfo, NodeKind
from autotune.core.errors import NodesGone
from autotune.execution.base import NodeEvent, NodeListener, describe_wait
from autotune.execution.ray_cluster import RayCluster

# A worker that died is followed by a fresh one on its node; Ray marks a node whose raylet
# died as dead only after its health checks fail (about 15 s), so the fresh worker's first
# answer, or the node table, decides within this long whether the node is still there.
NODE_VERDICT_S = 60.0


class Membership:
    def __init__(self, cluster: RayCluster, kind: NodeKind, node_wait_s: float) -> None:
        self.cluster = cluster
        self.kind = kind
        self.node_wait_s = node_wait_s
        self.gone: set[str] = set()  # nodes that left
        self.nodes = {node.node_id: node for node in kind.nodes}  # nodes that held slots
        self.listeners: list[NodeListener] = []

    def answers(self, node_id: str, ping: Any) -> bool:
        """Whether a fresh worker's `ping` on the node answers (the node is there), before
        Ray's node table says the node is dead or `NODE_VERDICT_S` passes."""
        ray = self.cluster.ray
        deadline = time.monotonic() + NODE_VERDICT_S
        while time.monotonic() < deadline:
            ready, _ = ray.wait([ping], timeout=1.0)
            if ready:
                try:
                    ray.get(ping)
                    return True
                except ray.exceptions.ActorUnschedulableError:
                    return False
                except ray.exceptions.RayError:
                    return self._alive(node_id)
            if not self._alive(node_id):
                return False
        return self._alive(node_id)

    def _alive(self, node_id: str) -> bool:
        return node_id in self.cluster.alive_node_ids()

    def newcomers(self, used: set[str]) -> Iterator[NodeInfo]:
        """Alive trial nodes of the kind that hold no slot of ours (joined, or unused) and
        never left."""
        for node in self.cluster.trial_nodes():
            if node.node_id in self.gone or node.node_id in used:
                continue
            if self.cluster.fingerprint_of(node) == self.kind.fingerprint:
                yield node

    def tell(
        self,
        change: Literal["left", "joined"],
        node_id: str,
        before: int,
        after: int,
        trial: int | None = None,
    ) -> None:
        """Every listener hears that the node left (during `trial`) or joined: `before` and
        `after` nodes of the kind held slots."""
        node = self.nodes[node_id]
        event = NodeEvent(
            change=change,
            node_id=node_id,
            kind=self.kind.fingerprint,
            cpus=node.cpus,
            gpus=node.gpus,
            nodes_alive=after,
            nodes_before=before,
            wait_s=self.node_wait_s,
            trial=trial,
        )
        for listener in self.listeners:
            listener(event)

    def none_came_back(self) -> NodesGone:
        return NodesGone(
            f"no node of kind {self.kind.fingerprint} came back within "
            f"{describe_wait(self.node_wait_s)} (cluster.node_wait_s)"
        )
