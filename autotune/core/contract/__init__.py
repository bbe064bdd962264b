"""The serializable contract between the control plane and the data plane.

`TrialSpec` goes to a worker, `TrialResult` comes back. Both are plain pydantic models that
round-trip through JSON, so they cross process and machine boundaries unchanged. Nothing here
imports torch, onnxruntime, MLflow or SQLAlchemy. The modules: `refs` (model, data, metric),
`measurement` (settings), `trials` (spec, result, inspection), `hardware` (profiles, node
kinds), `head_to_head` (finalists' rounds)."""

from autotune.core.contract.hardware import (
    CAPABILITIES,
    GpuInfo,
    HardwareProfile,
    NodeInfo,
    NodeKind,
)
from autotune.core.contract.head_to_head import (
    Entrant,
    EntrantOutcome,
    HeadToHeadResult,
    HeadToHeadSpec,
    RoundFigures,
)
from autotune.core.contract.measurement import (
    MAX_ITERATIONS,
    MAX_SECONDS,
    MAX_WATTS_PER_CORE,
    MeasurementSettings,
)
from autotune.core.contract.refs import (
    HF_TEXT_TASKS,
    REGISTERED_URI,
    REGISTERED_URI_RULE,
    ContentionPolicy,
    DataRef,
    EntryPoint,
    HfTask,
    MetricRef,
    ModelRef,
    RegisteredUri,
    Strict,
)
from autotune.core.contract.trials import (
    MAX_TRACEBACK_CHARS,
    SLOW_CALL_FACTOR,
    ArtifactInfo,
    Contention,
    EnergySource,
    Inspection,
    ModelInfo,
    Provenance,
    Screen,
    ScreenObjective,
    SpecPurpose,
    TrialMetrics,
    TrialResult,
    TrialSpec,
    TrialStatus,
    TrialTimes,
    Workload,
)
from autotune.core.knobs.base import ConfigValue

__all__ = [
    "MAX_TRACEBACK_CHARS",
    "ArtifactInfo",
    "CAPABILITIES",
    "ConfigValue",
    "Contention",
    "ContentionPolicy",
    "DataRef",
    "EnergySource",
    "Entrant",
    "EntrantOutcome",
    "EntryPoint",
    "GpuInfo",
    "HF_TEXT_TASKS",
    "HardwareProfile",
    "HeadToHeadResult",
    "HeadToHeadSpec",
    "HfTask",
    "Inspection",
    "MAX_ITERATIONS",
    "MAX_SECONDS",
    "MAX_WATTS_PER_CORE",
    "MeasurementSettings",
    "MetricRef",
    "ModelInfo",
    "ModelRef",
    "NodeInfo",
    "NodeKind",
    "Provenance",
    "REGISTERED_URI",
    "REGISTERED_URI_RULE",
    "RegisteredUri",
    "RoundFigures",
    "SLOW_CALL_FACTOR",
    "Screen",
    "ScreenObjective",
    "SpecPurpose",
    "Strict",
    "TrialMetrics",
    "TrialResult",
    "TrialSpec",
    "TrialStatus",
    "TrialTimes",
    "Workload",
]
