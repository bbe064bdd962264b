"""The declaration of `ort_tuned_session` (entry point group `autotune.engines`): ONNX Runtime
on its CPU provider with two session options autotune's own `onnxruntime` engine leaves at
ONNX Runtime's defaults, the execution mode and the memory pattern planner. Both planes import
this module; it imports no runtime. It runs fp32 alone (`Engine.precisions`), where
onnxruntime is installed (`Engine.package`: a node without it is told which extra of autotune
installs it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core.knobs import Engine, Option, Package, Target, register
from autotune.core.knobs.engines import foreign_setting

if TYPE_CHECKING:
    from autotune.core.knobs.config import TrialConfig

NAME = "ort_tuned_session"
# sequential runs one node at a time on runtime.threads intra-op threads; parallel also runs
# independent branches of the graph at once, on PARALLEL_INTER_OP_THREADS inter-op threads.
EXECUTION_MODE = Option("ort_tuned.execution_mode", ("sequential", "parallel"), "sequential")
# Whether ONNX Runtime plans the model's memory from the first run's allocations.
MEM_PATTERN = Option("ort_tuned.mem_pattern", (True, False), True)
PARALLEL_INTER_OP_THREADS = 2


@register
class OrtTunedSession(Engine):
    """ONNX Runtime's CPU provider with its own execution mode and memory pattern; no int8,
    no fallback, no CUDA."""

    name = NAME
    model_format = "onnx"
    precisions = frozenset({"fp32"})
    options = (EXECUTION_MODE, MEM_PATTERN)
    needs = ("ort.cpu",)
    package = Package("onnxruntime", ("cpu", "gpu"))
    software = ("onnxruntime", "onnx")
    concurrent_calls = True
    served_as = "files"

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        reason = foreign_setting(self, config, {}) or super().supports(config, target)
        if reason is None and config.device != "cpu":
            return f"runtime.device={config.device}: {self.key}={self.name} runs on the CPU only"
        return reason
