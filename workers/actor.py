"""The per-device trial worker. The control plane wraps it with `ray.remote(...)`; it works
just as well called directly in-process."""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from autotune.core.contract import (
    ArtifactInfo,
    HardwareProfile,
    HeadToHeadResult,
    HeadToHeadSpec,
    ModelInfo,
    TrialResult,
    TrialSpec,
    Workload,
)
from autotune.core.errors import AutotuneError
from workers.artifacts import export_artifact
from workers.building.runtimes import machine_profile
from workers.cache import WorkloadCache
from workers.head_to_head import run_head_to_head
from workers.inspection import inspect_workload
from workers.loading.blobs import Blob, localize
from workers.runner import run_trial


class TrialWorker:
    """Runs one trial at a time and keeps, per process, each workload's loaded model and data,
    reference outputs, exported ONNX models and accuracy per variant."""

    def __init__(
        self,
        memory_limit_mb: int | None = None,
        cpus: list[int] | None = None,
        node_id: str | None = None,
    ) -> None:
        # The node's profile is probed before the slot is pinned to its cores: the profile is
        # the node's (its fingerprint is its kind's), the slot's share is the executor's.
        self._profile = machine_profile()
        if cpus:
            os.sched_setaffinity(0, cpus)  # disjoint from the other slots' cores
        self.memory_limit_mb = memory_limit_mb
        self.node_id = node_id
        self.store = WorkloadCache()

    def profile(self) -> HardwareProfile:
        """The hardware of the node this worker runs on (`workers.building.probe`)."""
        return self._profile

    def inspect(self, workload: Workload, blobs: dict[str, Blob] | None = None) -> ModelInfo:
        return inspect_workload(localize(workload, blobs), self.store)

    def run(self, spec: TrialSpec, blobs: dict[str, Blob] | None = None) -> TrialResult:
        spec = _localized(spec, blobs)
        if self.memory_limit_mb is None:
            return self._stamped(run_trial(spec, self.store))
        self._preload(spec)
        with growth_limit(self.memory_limit_mb):
            return self._stamped(run_trial(spec, self.store))

    def _stamped(self, result: TrialResult) -> TrialResult:
        """The result with the node that measured it in its provenance."""
        if result.provenance is None or self.node_id is None:
            return result
        provenance = result.provenance.model_copy(update={"node_id": self.node_id})
        return result.model_copy(update={"provenance": provenance})

    def _preload(self, spec: TrialSpec) -> None:
        """Load the workload outside the limit: the limit is on what a trial adds."""
        with suppress(AutotuneError):  # run_trial reports it as the trial's outcome
            self.store.get(spec.workload)

    def compare(
        self, spec: HeadToHeadSpec, blobs: dict[str, Blob] | None = None
    ) -> HeadToHeadResult:
        if blobs:
            spec = spec.model_copy(update={"workload": localize(spec.workload, blobs)})
        return run_head_to_head(spec, self.store)

    def export(
        self, spec: TrialSpec, out_dir: str, blobs: dict[str, Blob] | None = None
    ) -> ArtifactInfo:
        return export_artifact(_localized(spec, blobs), out_dir, self.store)

    def ping(self) -> dict[str, object]:
        return {
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "node_id": self.node_id,
            "cpus": sorted(os.sched_getaffinity(0)),
        }


def _localized(spec: TrialSpec, blobs: dict[str, Blob] | None) -> TrialSpec:
    if not blobs:
        return spec
    return spec.model_copy(update={"workload": localize(spec.workload, blobs)})


@contextmanager
def growth_limit(megabytes: int) -> Iterator[None]:
    """Let this process's data segment (RLIMIT_DATA: heap and private mappings) grow by at
    most `megabytes` inside the block, so an allocation past it fails here as out-of-memory
    instead of taking the machine down. Only the soft limit moves, so it can be lifted."""
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (_data_segment_bytes() + megabytes * 2**20, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))


def _data_segment_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise OSError("VmData is missing from /proc/self/status")
