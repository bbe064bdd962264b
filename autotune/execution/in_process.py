"""Trials run in the calling process, one at a time: tests, debugging, and the kinds of node
a machine without a Ray cluster is."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

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
from autotune.execution.base import (
    LOCAL_NODE,
    FixedSlots,
    require_idle_slot,
    require_nothing_pending,
    trial_memory_limit_mb,
)

if TYPE_CHECKING:
    from workers.actor import TrialWorker


class InProcessExecutor(FixedSlots):
    """Runs each trial synchronously in this process, on one slot, its memory growth capped
    (`memory_limit_mb`, by default `trial_memory_limit_mb`)."""

    runs_in_process = True

    def __init__(self, memory_limit_mb: int | None = None) -> None:
        from workers.actor import TrialWorker

        self.trial_memory_mb = memory_limit_mb or trial_memory_limit_mb(1)
        self._worker: TrialWorker = TrialWorker(self.trial_memory_mb, node_id=LOCAL_NODE)
        # The worker probed this machine once; its kind is made from that probe once too.
        self._kind = NodeKind.one_node(self._worker.profile(), LOCAL_NODE)
        self._done: deque[TrialResult] = deque()

    @property
    def slots(self) -> int:
        return 1

    def kinds(self) -> list[NodeKind]:
        return [self._kind]

    def inspect(self, workload: Workload) -> Inspection:
        return Inspection(model=self._worker.inspect(workload), kinds=self.kinds())

    def submit(self, spec: TrialSpec) -> None:
        require_idle_slot(self.slots - self.pending())
        self._done.append(self._worker.run(spec))

    def pending(self) -> int:
        return len(self._done)

    def wait(self) -> list[TrialResult]:
        done = list(self._done)
        self._done.clear()
        return done

    def compare(self, spec: HeadToHeadSpec) -> HeadToHeadResult:
        require_nothing_pending(self.pending())
        return self._worker.compare(spec)

    def export(self, spec: TrialSpec, out_dir: str) -> ArtifactInfo:
        return self._worker.export(spec, out_dir)

    def close(self) -> None:
        self._done.clear()
