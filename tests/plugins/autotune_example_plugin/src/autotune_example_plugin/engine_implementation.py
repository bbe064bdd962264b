"""How `ort_tuned_session` runs (entry point group `autotune.engine_implementations`, loaded by
the data plane only): autotune's ONNX Runtime session (`workers.building.ort_session`) on the
CPU provider, with this engine's options set on its `SessionOptions`. Its variants are built
and exported as every ONNX engine's are. onnxruntime is imported when a session is built."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from autotune_example_plugin.engine import (
    EXECUTION_MODE,
    MEM_PATTERN,
    PARALLEL_INTER_OP_THREADS,
    OrtTunedSession,
)
from workers.building.knobs import implements
from workers.building.knobs.engines import OnnxEngineImplementation, onnx_bytes_of

if TYPE_CHECKING:
    from autotune.core.knobs.config import TrialConfig
    from workers.building.runtimes import Session
    from workers.building.variants import Variant


@implements
class OrtTunedSessionImplementation(OnnxEngineImplementation, OrtTunedSession):
    def session(self, variant: Variant, config: TrialConfig) -> Session:
        from workers.building.ort_session import OnnxRuntimeSession

        return OnnxRuntimeSession(
            onnx_bytes_of(variant, self.name),
            config.threads,
            provider="cpu",
            configure=partial(set_session_options, config),
        )


def set_session_options(config: TrialConfig, options: Any) -> None:
    """This engine's options on ONNX Runtime's `SessionOptions`."""
    import onnxruntime

    if config.option(EXECUTION_MODE.key) == "parallel":
        options.execution_mode = onnxruntime.ExecutionMode.ORT_PARALLEL
        options.inter_op_num_threads = PARALLEL_INTER_OP_THREADS
    else:
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.enable_mem_pattern = bool(config.option(MEM_PATTERN.key))
