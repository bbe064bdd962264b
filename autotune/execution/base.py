"""Executors run TrialSpecs somewhere and hand back TrialResults.

The coordinator only sees the `Executor` protocol: `InProcessExecutor`
(`autotune.execution.in_process`) runs trials in the calling process (tests, debugging);
`RayExecutor` (`autotune.execution.ray_executor`) runs them on Ray actors, one trial at a time
per actor, so each device slot measures alone; `ReplayExecutor` (`autotune.execution.replay`)
answers them from a recorded table.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from autotune.core.contract import (
    ArtifactInfo,
    HeadToHeadResult,
    HeadToHeadSpec,
    Inspection,
    NodeKind,
    TrialResult,
    TrialSpec,
    Workload,
)
from autotune.core.errors import AutotuneError

# The node id of trials run in the coordinator's own process.
LOCAL_NODE = "local"


@dataclass(frozen=True)
class NodeEvent:
    """A node of an executor's kind left the cluster or joined it: Ray's node table in
    autotune's words."""

    change: Literal["left", "joined"]
    node_id: str
    kind: str  # the kind's fingerprint
    cpus: int
    gpus: int
    nodes_alive: int  # nodes of the kind that hold slots after the change
    nodes_before: int  # ... and before it
    wait_s: float  # how long the executor waits for a node of the kind when none is left
    trial: int | None = None  # the trial that was running on a node that left

    def describe(self) -> str:
        cores = f"{self.cpus} core{'s' if self.cpus != 1 else ''}"
        gpus = f", {self.gpus} GPU{'s' if self.gpus != 1 else ''}" if self.gpus else ""
        node = f"node {short_id(self.node_id)} (kind {short_id(self.kind)}, {cores}{gpus})"
        if self.change == "joined":
            return f"{node} joined; {self.nodes_alive} node(s) of this kind now run trials"
        during = "" if self.trial is None else f" during trial {self.trial}"
        remain = f"{self.nodes_alive} of {self.nodes_before} nodes of this kind remain"
        if self.nodes_alive:
            again = f": re-running it elsewhere; {remain}" if self.trial is not None else ""
            return f"{node} left{during}{again or '; ' + remain}"
        wait = f"waiting up to {describe_wait(self.wait_s)} for one"
        again = "; its trial runs again there" if self.trial is not None else ""
        return f"{node} left{during}; {remain}; {wait}{again}"


def describe_wait(seconds: float) -> str:
    """A wait in the unit a person would say it in: '10 min', '45 s', '2 h'."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def short_id(identifier: str) -> str:
    """A node's or a kind's id as a person reads it: its first characters."""
    return identifier[:4] + "…" if len(identifier) > 6 else identifier


NodeListener = Callable[[NodeEvent], None]


class Executor(Protocol):
    # Whether trials run inside the coordinator's process, so that a trial which kills the
    # process (the kernel's out-of-memory killer, a crash in a runtime) kills the tuning too.
    runs_in_process: bool
    # How much memory each trial may grow its process by (None: not capped here).
    trial_memory_mb: int | None

    @property
    def slots(self) -> int: ...

    def kinds(self) -> list[NodeKind]:
        """The kinds of node the slots run on, as the data plane probed them there."""
        ...

    def inspect(self, workload: Workload) -> Inspection:
        """The model as a worker loads it, and the kinds of node the slots run on."""
        ...

    def submit(self, spec: TrialSpec) -> None: ...

    def pending(self) -> int: ...

    def wait(self) -> list[TrialResult]:
        """Block until at least one submitted trial finishes; return every finished one."""
        ...

    def compare(self, spec: HeadToHeadSpec) -> HeadToHeadResult:
        """Run a head-to-head comparison on one slot, with nothing else submitted."""
        ...

    def export(self, spec: TrialSpec, out_dir: str) -> ArtifactInfo: ...

    def on_node_event(self, listener: NodeListener) -> None:
        """Call `listener` with each node of the kind that leaves or joins."""
        ...

    def wait_for_slots(self, stop: threading.Event | None = None) -> None:
        """Return once a slot is alive (at once while one is); while none is, wait for a node
        of the kind to join, up to the executor's node wait, then raise `NodesGone`. A set
        `stop` ends the wait early (the caller sees no slot)."""
        ...

    def close(self) -> None: ...


class Nodes(Protocol):
    """The nodes an executor configuration reaches, before any trial runs on them: the kinds
    they are of, and an executor on the nodes of one kind. Choosing the kinds a tuning runs on
    (`autotune.execution.build.make_executors`) asks nothing more, whatever runs the trials."""

    def kinds(self) -> list[NodeKind]:
        """The kinds of node the slots would run on, as the data plane probed them there."""
        ...

    def await_kind(self, fingerprint: str, on_note: Callable[[str], None] | None) -> None:
        """Return once a node of the kind `fingerprint` names is there, waiting for one as
        long as these nodes' configuration says (`NodesGone` past it); where nodes never
        come or go, at once."""
        ...

    def executor(self, kind: NodeKind) -> Executor:
        """An executor whose slots are on the nodes of `kind`, one of `kinds`."""
        ...

    def release(self) -> None:
        """The nodes are no longer needed but by the executors made on them: whatever no
        executor holds stops."""
        ...


class FixedSlots:
    """For executors whose slots never come or go (this process, a recorded table): no node
    event ever happens, and a slot is always alive."""

    def on_node_event(self, listener: NodeListener) -> None:
        return None

    def wait_for_slots(self, stop: threading.Event | None = None) -> None:
        return None


def require_idle_slot(idle_slots: int) -> None:
    """What every executor answers to a `submit` that has no slot to run on."""
    if idle_slots < 1:
        raise AutotuneError("submit called with no idle slot")


def require_nothing_pending(pending: int) -> None:
    """What every executor answers to a `compare` while submitted trials are uncollected:
    the comparison needs a slot to itself."""
    if pending:
        raise AutotuneError("compare called while trials are running")


# Share of the memory available when the executor starts that trials may grow into; past it
# an allocation fails inside the trial, which ends as `oom`, instead of the kernel killing a
# process (in-process: the tuning itself).
TRIAL_MEMORY_SHARE = 0.8


def trial_memory_limit_mb(slots: int) -> int | None:
    """Each of `slots` trials' share of the memory available now (None where unknown)."""
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
    except OSError:
        return None
    if "MemAvailable" not in fields:
        return None
    available_mb = int(fields["MemAvailable"].split()[0]) // 1024
    return max(1, int(available_mb * TRIAL_MEMORY_SHARE) // slots)
