"""Executors run TrialSpecs somewhere and hand back TrialResults.

The coordinator only sees the `Executor` protocol: `InProcessExecutor`
(`autotune.execution.in_process`) runs trials in the calling process (tests, debugging);
`RayExecutor` (`autotune.execution.ray_executor`) runs them on Ray actors, one trial at a time
per actor, so each device slot measures alone; `ReplayExecutor` (`autotune.execution.replay`)
answers them from a recorded table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

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

if TYPE_CHECKING:
    pass


# The node id of trials run in the coordinator's own process.
LOCAL_NODE = "local"


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

    def close(self) -> None: ...


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
