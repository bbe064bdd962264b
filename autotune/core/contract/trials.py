"""One trial across the planes: `TrialSpec` goes to a worker, `TrialResult` comes back (its
status, metrics, contention, provenance and phase times); and what the data plane reports of
a workload (`Inspection`, `ModelInfo`) and of an exported artifact (`ArtifactInfo`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from autotune.core.contract.figures import CarriesMeasured
from autotune.core.contract.hardware import NodeKind
from autotune.core.contract.measurement import MeasurementSettings
from autotune.core.contract.refs import DataRef, MetricRef, ModelRef, Strict
from autotune.core.knobs import variant_key
from autotune.core.knobs.base import ConfigValue


class Workload(Strict):
    """What a worker needs to load the model and judge it."""

    model: ModelRef
    data: DataRef
    metric: MetricRef = MetricRef()
    python_path: list[str] = Field(
        default_factory=list, description="directories put on sys.path before entry points load"
    )


# What a spec is run for: a trial of the search (measured), or the export of the chosen
# configuration's optimized model (built and saved, not measured). Finalists are re-measured
# through a `HeadToHeadSpec`.
SpecPurpose = Literal["search", "export"]
# A variant's quality figures besides its accuracy, by metric name (top-1 agreement, how the
# accuracy was judged).
KnownQuality = dict[str, float | str]


class TrialSpec(Strict):
    study: str
    trial_number: int
    purpose: SpecPurpose = "search"
    attempt: int = 0
    workload: Workload
    config: dict[str, ConfigValue]
    measurement: MeasurementSettings = MeasurementSettings()
    known_accuracy: float | None = Field(
        default=None, description="accuracy already measured for this variant; skips evaluation"
    )
    known_quality: KnownQuality = Field(
        default_factory=dict,
        description="the variant's other quality figures, measured with its known_accuracy "
        "(autotune.core.metrics.variant_quality)",
    )
    timeout_s: float | None = Field(
        default=None, gt=0, description="wall time after which the executor stops the trial"
    )
    accuracy_floor: float | None = Field(
        default=None,
        description="the lowest accuracy the constraints allow (the baseline's less "
        "max_accuracy_drop): a variant whose first evaluation samples already put it below, "
        "beyond their uncertainty, ends 'infeasible' before the rest is evaluated or timed",
    )
    screen: Screen | None = Field(
        default=None, description="the feasible front a short window must be able to reach"
    )
    batch_scan: list[int] = Field(
        default_factory=list,
        description="batch sizes whose call time is read after the measurement, a few calls "
        "each, in order, until one passes measurement.max_call_ms (the baseline's: how call "
        "time grows with the batch)",
    )


class ScreenObjective(Strict):
    metric: str = Field(description="a TrialMetrics figure (a field or a measured one)")
    maximize: bool
    timed: bool = Field(description="a figure of the timing (not the accuracy evaluation)")


class Screen(Strict):
    """The request's objectives and the figures of the feasible front's points, in their
    order. A trial's short window is out of reach when a front point is at least as good in
    every objective as the trial's hopeful figures, and better in one: its timed figures
    improved by the margin plus the window's own relative interval; its accuracy as it is
    (evaluated in full)."""

    objectives: list[ScreenObjective] = Field(min_length=1)
    front: list[list[float]] = Field(min_length=1)
    margin: float = Field(ge=0.0)

    def dominating(self, metrics: TrialMetrics, spread: float) -> list[float] | None:
        """The first front point that dominates the hopeful figures, or None."""
        slack = 1.0 + self.margin + spread
        hopeful = []
        for objective in self.objectives:
            value = float(metrics.figure(objective.metric))
            if objective.timed:
                value = value * slack if objective.maximize else value / slack
            hopeful.append(value if objective.maximize else -value)
        for point in self.front:
            signed = [v if o.maximize else -v for o, v in zip(self.objectives, point, strict=True)]
            at_least = all(p >= h for p, h in zip(signed, hopeful, strict=True))
            if at_least and any(p > h for p, h in zip(signed, hopeful, strict=True)):
                return point
        return None


# "skipped": the coordinator did not run it (e.g. a larger batch of a variant that ran out
# of memory); "lost": its worker or coordinator died, so it says nothing of the candidate
# and is retried; "contended": other load made the measurement worthless and the request's
# `measurement.contention` is 'fail'; "too_slow": a call took SLOW_CALL_FACTOR times
# `measurement.max_call_ms` or longer, and timing stopped; "screened": its short window
# could not reach the feasible front (`Screen`), so it was not timed in full; "infeasible":
# its accuracy on a subset of the evaluation data was below `accuracy_floor` beyond the
# subset's uncertainty, so nothing more was evaluated or timed; every other status comes
# from a worker or the executor.
TrialStatus = Literal[
    "ok",
    "unsupported",
    "oom",
    "timeout",
    "error",
    "skipped",
    "lost",
    "contended",
    "too_slow",
    "screened",
    "infeasible",
]
# How many times `measurement.max_call_ms` one call may take before its trial stops.
SLOW_CALL_FACTOR = 4.0
EnergySource = Literal["nvml", "rapl", "estimate"]


class TrialMetrics(CarriesMeasured):
    """A trial's figures: the fixed fields, and every other measured metric in `measured`
    (`autotune.core.contract.figures`)."""

    accuracy: float
    accuracy_judged_by: str | None = Field(
        default=None,
        max_length=2000,
        description="how accuracy was judged: the metric and, for fidelity, its form per output",
    )
    top1_agreement: float | None = Field(
        default=None,
        description="the share of samples whose top-1 class is the unmodified model's, beside "
        "a metric that is not top-1 where the judged output looks like class scores",
    )
    latency_p50_ms: float
    latency_p90_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    latency_mean_ms: float
    latency_cv: float
    latency_p95_ci_low_ms: float | None = Field(
        default=None, description="95% confidence interval of the p95 (order statistics)"
    )
    latency_p95_ci_high_ms: float | None = None
    throughput_per_s: float
    latency_per_sample_ms: float = Field(
        default_factory=lambda data: (
            1000.0 / data["throughput_per_s"] if data.get("throughput_per_s") else float("inf")
        ),
        description="milliseconds per sample at the configuration's batch size: 1000 / "
        "throughput_per_s; derived from it when absent (records made before this field)",
    )
    energy_per_sample_j: float
    energy_source: EnergySource
    energy_model: str | None = Field(
        default=None,
        description="the power model of an estimate: 'tdp:codecarbon:<cpu>:<tdp> W/<cores> "
        "cores' (the CPU's TDP per physical core) or 'flat:<w> W/core' "
        "(cpu_watts_per_core); None for a measured source",
    )
    energy_above_idle_per_sample_j: float | None = Field(
        default=None, description="the part above the device's idle draw (measured meters only)"
    )
    idle_power_w: float | None = None
    peak_memory_mb: float
    peak_device_memory_mb: float | None = Field(
        default=None, description="CUDA memory reserved at the peak (torch on CUDA only)"
    )
    iterations: int
    measure_seconds: float
    stopped_by: Literal["settled", "minimums", "max_iters", "max_seconds"] | None = None


class Contention(Strict):
    """What the rest of the machine did while a measurement ran (from /proc/stat, pressure
    stall information and, on NVIDIA GPUs, NVML)."""

    seconds: float = Field(description="length of the observed window")
    cores: int = Field(description="cores the trial could run on")
    other_cpu_share: float = Field(
        description="CPU time of other processes on the trial's cores / (window x cores)"
    )
    machine_other_cpu_share: float = Field(description="the same over every core of the machine")
    steal_share: float = Field(description="share of the trial's cores' time the hypervisor stole")
    cpu_pressure: float | None = Field(
        default=None,
        description="share of the window in which some task waited for a CPU (/proc/pressure/cpu,"
        " our own threads included); None where the kernel has no PSI",
    )
    cores_to_itself: float = Field(description="cores less what other processes used of them")
    threads: int | None = Field(default=None, description="the thread count measured")
    oversubscribed: bool = Field(
        default=False, description="more threads than cores the trial had to itself"
    )
    gpu_other_processes: list[int] = Field(
        default_factory=list, description="other processes' pids on the trial's GPUs"
    )
    gpu_throttle_reasons: list[str] = Field(
        default_factory=list, description="clock throttle reasons NVML reported in the window"
    )
    waited_s: float = Field(default=0.0, description="time spent waiting for quiet first")
    contended: bool
    reasons: list[str] = Field(default_factory=list)


class Provenance(Strict):
    model_sha256: str
    host: str
    pid: int | None = Field(default=None, description="the worker process that measured")
    hardware_fingerprint: str | None = Field(
        default=None, description="HardwareProfile.fingerprint of the machine that measured"
    )
    node_id: str | None = Field(
        default=None, description="the executor's id of the node that measured (Ray's node id)"
    )
    software: dict[str, str]
    measurement: MeasurementSettings
    contention: Contention | None = Field(
        default=None, description="the machine's other load while the trial measured"
    )


class TrialTimes(Strict):
    """Seconds a trial spent on its worker in each phase, up to where it ended."""

    build_s: float = Field(
        default=0.0, description="loading the model, building the variant, opening its session"
    )
    accuracy_s: float = Field(default=0.0, description="evaluating the variant's accuracy")
    timing_s: float = Field(
        default=0.0,
        description="warm-up, the short window, the measurement and the baseline's batch scan",
    )


# The share of a model's int8 drop whose nodes a sensitivity table names as carrying it.
CARRIED_SHARE = 0.8


class NodeSensitivity(Strict):
    """One quantizable node of a sensitivity ranking."""

    node: str
    rank: int = Field(ge=1, description="1: the node most sensitive to the mode")
    op_type: str | None = None
    drop: float | None = Field(
        default=None,
        description="1 - fidelity of the model with this node alone in int8 (the sensitivity); "
        "None: not measured (beyond the largest nodes measured, or refused by the quantizer)",
    )


# What a sensitivity ranking ranked: an ONNX model's nodes or a torch module's Linear modules.
RankedFormat = Literal["onnx", "torch"]
# A sensitivity ranking's model sha256, int8 mode and what it ranked.
SensitivityKey = tuple[str, str, RankedFormat]


class SensitivityTable(Strict):
    """An fp32 model's quantizable nodes (an ONNX model's, or a torch module's nn.Linear
    modules by qualified name), most sensitive to an int8 mode first: the
    ranking `precision.fallback` keeps its first nodes in float by."""

    model_sha256: str = Field(
        description="of the fp32 ONNX model ranked, or of a torch module's weights (the "
        "model's own sha256 where unpruned)"
    )
    mode: str = Field(description="the int8 precision mode the nodes were quantized in")
    seconds: float = Field(ge=0, description="what measuring the ranking took its worker")
    computed: bool = Field(
        default=False,
        description="measured during the trial that carries it (else reused from its worker)",
    )
    ranked: RankedFormat = Field(
        default="onnx",
        description="what was ranked: an ONNX model's nodes, or a torch module's nn.Linear "
        "modules on torch's own int8 kernels",
    )
    nodes: list[NodeSensitivity]

    @property
    def key(self) -> SensitivityKey:
        return self.model_sha256, self.mode, self.ranked

    @property
    def label(self) -> str:
        """`int8_static`, or `int8_dynamic on torch` for a torch module's ranking."""
        return self.mode if self.ranked == "onnx" else f"{self.mode} on {self.ranked}"

    def carrying(self, share: float = CARRIED_SHARE) -> list[NodeSensitivity]:
        """The fewest most sensitive nodes whose drops add up to `share` of all the measured
        nodes' drops (none where no node dropped anything)."""
        measured = [n for n in self.nodes if n.drop is not None and n.drop > 0]
        total = sum(n.drop for n in measured if n.drop is not None)
        carried: list[NodeSensitivity] = []
        summed = 0.0
        for node in sorted(measured, key=lambda n: n.rank):
            if total <= 0 or summed >= share * total:
                break
            carried.append(node)
            summed += node.drop or 0.0
        return carried

    def summary(self) -> str:
        """`int8 sensitivity (int8_static): 3 of 47 operations carry 80% of the drop: a, b, c
        (the largest alone: 0.031)`: the drop is 1 - fidelity of one node alone in int8."""
        head = f"int8 sensitivity ({self.label})"
        carried = self.carrying()
        if not carried:
            return f"{head}: none of {len(self.nodes)} operations drops the accuracy when int8"
        names = ", ".join(n.node for n in carried)
        return (
            f"{head}: {len(carried)} of {len(self.nodes)} operations carry "
            f"{CARRIED_SHARE:.0%} of the drop: {names} (the largest alone: {carried[0].drop:.3g})"
        )


# The tail of a traceback a result carries: its last frames, where the error was raised.
MAX_TRACEBACK_CHARS = 20_000


class TrialResult(Strict):
    study: str
    trial_number: int
    attempt: int
    status: TrialStatus
    reason: str | None = None
    variant_key: str
    metrics: TrialMetrics | None = None
    provenance: Provenance | None = None
    duration_s: float
    call_ms_by_batch: dict[int, float] = Field(
        default_factory=dict,
        description="the median call time (ms) at each batch size of the spec's batch_scan",
    )
    screening: TrialMetrics | None = Field(
        default=None, description="a screened trial's figures from its short window"
    )
    slow_call_ms: float | None = Field(
        default=None,
        ge=0,
        description="a too_slow trial's call that stopped it (ms), at the spec's batch size",
    )
    times: TrialTimes | None = Field(
        default=None, description="where the worker's time went (None: it did not run)"
    )
    traceback: str | None = Field(
        default=None,
        max_length=MAX_TRACEBACK_CHARS,
        description="where a failing trial raised (its last frames), for the trial's MLflow "
        "run and `autotune report --trial`; never shown through the service's API",
    )
    device_fault: bool = Field(
        default=False,
        description="the failure may have left the device unusable (a CUDA error): its worker "
        "is replaced before the next trial",
    )
    interrupted: str | None = Field(
        default=None,
        description="why an earlier run of this trial stopped before it ended (its node "
        "left); the trial was run again from the start, and this result is that run's",
    )
    rescanned: str | None = Field(
        default=None,
        description="why the coordinator read this result's batch scan again (it ran under "
        "load) and how its call times changed; call_ms_by_batch holds those kept",
    )
    sensitivity: list[SensitivityTable] = Field(
        default_factory=list,
        description="the int8 sensitivity rankings the trial's variant was built by "
        "(precision.fallback), computed for it or reused from its worker",
    )

    @classmethod
    def for_spec(
        cls,
        spec: TrialSpec,
        status: TrialStatus,
        reason: str | None = None,
        duration_s: float = 0.0,
        metrics: TrialMetrics | None = None,
        provenance: Provenance | None = None,
        screening: TrialMetrics | None = None,
    ) -> TrialResult:
        """The outcome of running `spec`."""
        return cls(
            screening=screening,
            study=spec.study,
            trial_number=spec.trial_number,
            attempt=spec.attempt,
            status=status,
            reason=reason,
            variant_key=variant_key(spec.config),
            metrics=metrics,
            provenance=provenance,
            duration_s=duration_s,
        )

    @model_validator(mode="after")
    def _metrics_iff_ok(self) -> TrialResult:
        if (self.status == "ok") != (self.metrics is not None):
            raise ValueError("metrics are present exactly when status is 'ok'")
        if (self.status == "screened") != (self.screening is not None):
            raise ValueError("screening figures are present exactly when status is 'screened'")
        return self


class ModelInfo(Strict):
    """What inspecting a workload found: proof that it loads, and its identity."""

    kind: Literal["torch", "onnx"]
    sha256: str
    n_samples: int
    input_shape: list[int]
    has_labels: bool
    parameter_bytes: int = Field(ge=0, description="weights and buffers of the unmodified model")
    activation_bytes_per_sample: int | None = Field(
        default=None,
        ge=0,
        description="sum of every module's output at batch 1: an upper bound on what eager "
        "inference keeps alive per sample (None where it cannot be observed)",
    )
    engine_refusals: dict[str, str] = Field(
        default_factory=dict,
        description="engine -> why it cannot convert this model, from a check the node ran "
        "while inspecting it (OpenVINO reads an ONNX model); the space leaves the engine out",
    )
    fixed_batch: int | None = Field(
        default=None,
        ge=1,
        description="the only batch size the model takes (the request's model.fixed_batch, "
        "or an ONNX input that declares its batch dimension as a number); None: any. The "
        "space's batch size holds it alone",
    )
    fixed_batch_by: Literal["request", "inputs"] | None = Field(
        default=None,
        description="what fixes the batch size: the request's model.fixed_batch, or the ONNX "
        "model's inputs",
    )


class Inspection(Strict):
    """What an executor found before a study: the model as its workers load it, and the kinds
    of node its slots run on."""

    model: ModelInfo
    kinds: list[NodeKind] = Field(min_length=1)


# The key of an int8 ONNX artifact's description (variant.json) that lists the nodes it keeps
# in float.
FLOAT_NODES_FIELD = "float_nodes"


class ArtifactInfo(Strict):
    path: str
    format: Literal["onnx", "safetensors", "json"] = Field(
        description="json: a replay's record of the chosen configuration (no model to export)"
    )
    sha256: str
