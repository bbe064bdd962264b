"""The per-device trial worker. The control plane wraps it with `ray.remote(...)`; it works
just as well called directly in-process."""

from __future__ import annotations

import os
import socket

from autotune.contract import ArtifactInfo, ModelInfo, TrialResult, TrialSpec, Workload
from workers.inspection import inspect_workload
from workers.runner import export_artifact, run_trial
from workers.store import WorkloadStore


class TrialWorker:
    """Runs one trial at a time and keeps, per process, each workload's loaded model and data,
    reference outputs, exported ONNX models and accuracy per variant."""

    def __init__(self) -> None:
        self.store = WorkloadStore()

    def inspect(self, workload: Workload) -> ModelInfo:
        return inspect_workload(workload, self.store)

    def run(self, spec: TrialSpec) -> TrialResult:
        return run_trial(spec, self.store)

    def export(self, spec: TrialSpec, out_dir: str) -> ArtifactInfo:
        return export_artifact(spec, out_dir, self.store)

    def ping(self) -> dict[str, int | str]:
        return {"pid": os.getpid(), "hostname": socket.gethostname()}
