"""The serializable contract between the control plane and the data plane.

`TrialSpec` goes to a worker, `TrialResult` comes back. Both are plain pydantic models
that round-trip through JSON, so they cross process and machine boundaries unchanged.
Nothing here imports torch, onnxruntime, MLflow or SQLAlchemy.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

ConfigValue = str | int | float | bool

_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _check_entry_point(value: str) -> str:
    if not _ENTRY_POINT.match(value):
        raise ValueError("must look like 'package.module:function'")
    return value


EntryPoint = Annotated[str, AfterValidator(_check_entry_point)]

REGISTERED_URI = re.compile(
    r"^models:/(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)"
    r"(?:/(?P<version>[1-9][0-9]*)|@(?P<alias>[A-Za-z0-9_-]+))$"
)


REGISTERED_URI_RULE = (
    "must look like 'models:/NAME/VERSION' or 'models:/NAME@ALIAS' (NAME of letters, digits, "
    "'_', '.', '-'; VERSION a number; ALIAS of letters, digits, '_', '-')"
)


def _check_registered_uri(value: str) -> str:
    if not REGISTERED_URI.match(value):
        raise ValueError(REGISTERED_URI_RULE)
    return value


RegisteredUri = Annotated[str, AfterValidator(_check_registered_uri)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# What a Hugging Face model directory is used for, and so which head it is loaded with and
# what its outputs are: sentence embeddings (mean-pooled over the real tokens) or logits.
HfTask = Literal["feature-extraction", "text-classification", "image-classification"]
HF_TEXT_TASKS: tuple[HfTask, ...] = ("feature-extraction", "text-classification")


class ModelRef(Strict):
    """Where the model comes from: an ONNX file, trusted local Python code (optionally with
    safetensors weights loaded into the module it returns), a local Hugging Face model
    directory, or an MLflow registered model whose artifact holds an ONNX model."""

    onnx: str | None = None
    entry_point: EntryPoint | None = Field(
        default=None, description="'package.module:function' returning a torch.nn.Module"
    )
    weights: str | None = Field(
        default=None,
        description="a safetensors file loaded strictly into the module 'entry_point' returns",
    )
    hf: str | None = Field(
        default=None,
        description="a local Hugging Face model directory (config.json and weights), loaded "
        "with transformers from this directory only: nothing is downloaded, no remote code runs",
    )
    task: HfTask | None = Field(default=None, description="what the 'hf' model is used for")
    registered: RegisteredUri | None = Field(
        default=None, description="'models:/NAME/VERSION' or 'models:/NAME@ALIAS'"
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelRef:
        sources = (self.onnx, self.entry_point, self.hf, self.registered)
        if sum(s is not None for s in sources) != 1:
            raise ValueError("give exactly one of 'onnx', 'entry_point', 'hf' or 'registered'")
        if self.weights is not None and self.entry_point is None:
            raise ValueError("'weights' is allowed only together with 'entry_point'")
        if (self.hf is None) != (self.task is None):
            raise ValueError("'task' is required with 'hf' and allowed only with it")
        return self


class DataRef(Strict):
    """Evaluation data: an .npz with arrays 'inputs' (and 'labels'), an entry point returning
    (inputs, labels) as numpy arrays (labels may be None), or, for a Hugging Face model, text
    lines or a directory of images prepared by the model's own tokenizer or image processor,
    with labels (one integer a line) where there are any."""

    npz: str | None = None
    entry_point: EntryPoint | None = None
    text: str | None = Field(
        default=None, description="a UTF-8 text file, one sample a line (blank lines skipped)"
    )
    sequence_length: int | None = Field(
        default=None, ge=1, le=8192, description="tokens per 'text' sample; default 128"
    )
    images: str | None = Field(
        default=None, description="a directory of images (.png, .jpg, .jpeg, .bmp, .webp)"
    )
    labels: str | None = Field(
        default=None, description="for 'text' or 'images': one integer label a line, in order"
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> DataRef:
        sources = (self.npz, self.entry_point, self.text, self.images)
        if sum(s is not None for s in sources) != 1:
            raise ValueError("give exactly one of 'npz', 'entry_point', 'text' or 'images'")
        if self.sequence_length is not None and self.text is None:
            raise ValueError("'sequence_length' is allowed only together with 'text'")
        if self.labels is not None and self.text is None and self.images is None:
            raise ValueError("'labels' is allowed only together with 'text' or 'images'")
        return self


class MetricRef(Strict):
    """How accuracy is judged: top-1 accuracy against labels, fidelity (mean cosine
    similarity to the unmodified model's outputs), agreement (the share of samples whose
    top-1 class is the unmodified model's), or a user function
    `f(outputs, labels, reference_outputs) -> float` (higher is better)."""

    kind: Literal["accuracy", "fidelity", "agreement", "custom"] = "accuracy"
    entry_point: EntryPoint | None = None
    output: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="of a model with several outputs, the one judged (by default fidelity "
        "takes the mean over all of them; accuracy and agreement need one named)",
    )

    @model_validator(mode="after")
    def _entry_point_iff_custom(self) -> MetricRef:
        if (self.kind == "custom") != (self.entry_point is not None):
            raise ValueError("'entry_point' is required for kind 'custom' and only for it")
        return self


ContentionPolicy = Literal["wait", "warn", "fail"]

# Upper bounds of a request's numbers: generous, but finite, so that no number a user sends
# overflows a database column or keeps a worker busy for ever.
MAX_SECONDS = 7 * 24 * 3600  # a week
MAX_ITERATIONS = 10_000_000
MAX_WATTS_PER_CORE = 1000.0


class MeasurementSettings(Strict):
    """How latency is timed and energy estimated."""

    warmup_iters: int = Field(default=10, ge=0, le=MAX_ITERATIONS)
    min_iters: int = Field(default=50, ge=5, le=MAX_ITERATIONS)
    max_iters: int = Field(default=2000, ge=5, le=MAX_ITERATIONS)
    min_seconds: float = Field(default=0.5, ge=0.0, le=MAX_SECONDS)
    max_seconds: float = Field(default=5.0, gt=0.0, le=MAX_SECONDS)
    cpu_watts_per_core: float | None = Field(
        default=None,
        gt=0.0,
        le=MAX_WATTS_PER_CORE,
        description="flat power model of the energy estimate: watts drawn per fully busy "
        "core; set, it wins over the CPU's TDP per core; unset: the TDP per core where the "
        "CPU is known, else 10 W",
    )
    settle_tolerance: float | None = Field(
        default=0.02,
        gt=0.0,
        le=1.0,
        description="once the minimums are met, stop when the 95% confidence interval of the "
        "median latency is within this fraction of it; None: stop at the minimums",
    )
    max_call_ms: float | None = Field(
        default=500.0,
        gt=0.0,
        le=MAX_SECONDS * 1000,
        description="the longest one call (one batch) should take: a larger batch whose call "
        "time, extrapolated from smaller batches of the same configuration, passes it is not "
        "run (status 'skipped'), and a trial with a call SLOW_CALL_FACTOR times longer stops "
        "(status 'too_slow'); None: no bound",
    )
    screen_seconds: float | None = Field(
        default=0.3,
        gt=0.0,
        le=MAX_SECONDS,
        description="each trial is first timed this long (or min_seconds where shorter; 8 "
        "calls at least, a quarter of max_seconds at most); one whose figures "
        "could not reach the feasible front, even screen_margin better than its short interval "
        "says, stops there (status 'screened'); None: every trial is timed in full",
    )
    screen_margin: float = Field(
        default=0.2,
        ge=0.0,
        le=10.0,
        description="how much better than its short window a trial's timed figures are "
        "assumed to be, beyond the window's own interval, before it is screened out",
    )
    energy_window_s: float = Field(
        default=1.0,
        gt=0.0,
        le=MAX_SECONDS,
        description="an energy counter is read over a window of at least this long, the "
        "workload repeated inside it (NVML updates about every 100 ms)",
    )
    contention_window_s: float = Field(
        default=0.2,
        ge=0.0,
        le=MAX_SECONDS,
        description="the machine is watched for at least this long around each measurement, "
        "idle after a shorter one: /proc/stat counts in ticks of 10 ms, so a shorter window's "
        "shares of other load say little",
    )
    contention: ContentionPolicy = Field(
        default="wait",
        description="what to do when other processes load the trial's cores: 'wait' up to "
        "contention_max_wait_s for quiet, then measure and mark the result contended; 'warn' "
        "measure at once and mark it; 'fail' end the trial (status 'contended')",
    )
    contention_max_wait_s: float = Field(
        default=10.0,
        ge=0.0,
        le=MAX_SECONDS,
        description="the longest 'wait' waits for quiet before measuring",
    )
    contention_threshold: float = Field(
        default=0.1,
        gt=0.0,
        le=1.0,
        description="a measurement is contended when other processes used (or the hypervisor "
        "stole) more than this share of the trial's cores while it ran",
    )

    @model_validator(mode="after")
    def _ordered(self) -> MeasurementSettings:
        if self.max_iters < self.min_iters:
            raise ValueError("max_iters must be >= min_iters")
        if self.max_seconds < self.min_seconds:
            raise ValueError("max_seconds must be >= min_seconds")
        return self


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
    metric: str = Field(description="a TrialMetrics figure")
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
            value = float(getattr(metrics, objective.metric))
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


class TrialMetrics(Strict):
    accuracy: float
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
    times: TrialTimes | None = Field(
        default=None, description="where the worker's time went (None: it did not run)"
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


# The hardware: probed by the data plane on each node that runs trials (`workers.probe`),
# read by the control plane to gate a space and to keep timings of unlike nodes apart.


class GpuInfo(Strict):
    name: str
    compute_capability: tuple[int, int]
    memory_mb: int
    power_limit_w: float | None = None
    nvlink_peers: list[int] = Field(default=[], description="indices of GPUs linked by NVLink")


class HardwareProfile(Strict):
    hostname: str
    cpu_model: str
    cpu_cores: int = Field(ge=1)
    memory_mb: int = Field(ge=1)
    cpu_flags: list[str]
    gpus: list[GpuInfo] = []
    onnxruntime_providers: list[str] = []
    torch_version: str | None = None
    cuda_version: str | None = None
    cudnn_version: int | None = None
    torch_compile: bool = Field(
        default=False,
        description="torch.compile can build kernels here (inductor needs a C++ "
        "compiler on CPU, Triton on GPU)",
    )
    engines: list[str] = Field(
        default=[], description="capabilities the installed engines offer (their own probes)"
    )
    notes: list[str] = Field(default=[], description="what the probe could not see, and why")

    @property
    def fingerprint(self) -> str:
        """A stable hash of what affects performance or what can run (not the hostname or
        versions): nodes with the same fingerprint are one kind."""
        relevant = {
            "cpu_model": self.cpu_model,
            "cpu_cores": self.cpu_cores,
            "memory_gb": round(self.memory_mb / 1024),
            "cpu_flags": sorted(self.cpu_flags),
            "gpus": [g.model_dump() for g in self.gpus],
            "providers": sorted(self.onnxruntime_providers),
            # What the node can run gates its space as much as what it is made of.
            "engines": sorted(self.engines),
            "torch_compile": self.torch_compile,
        }
        blob = json.dumps(relevant, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def capabilities(self) -> set[str]:
        return {name for name, has in CAPABILITIES.items() if has(self)} | set(self.engines)


def _min_cc(major: int, minor: int) -> Callable[[HardwareProfile], bool]:
    return lambda p: bool(p.gpus) and all(g.compute_capability >= (major, minor) for g in p.gpus)


def _any_flag(*flags: str) -> Callable[[HardwareProfile], bool]:
    return lambda p: any(f in p.cpu_flags for f in flags)


def _provider(name: str) -> Callable[[HardwareProfile], bool]:
    return lambda p: name in p.onnxruntime_providers


# Every capability a search space may require, and how a profile shows it.
CAPABILITIES: dict[str, Callable[[HardwareProfile], bool]] = {
    "cpu": lambda p: True,
    "cpu.avx2": _any_flag("avx2"),
    "cpu.avx512": _any_flag("avx512f"),
    "cpu.vnni": _any_flag("avx512_vnni", "avx_vnni", "amx_int8"),
    "cpu.bf16": _any_flag("avx512_bf16", "amx_bf16"),
    "cpu.amx": _any_flag("amx_tile"),
    "cuda": lambda p: bool(p.gpus),
    "cuda.bf16": _min_cc(8, 0),
    "cuda.fp8": _min_cc(8, 9),
    "cuda.sparse24": _min_cc(8, 0),
    "multi_gpu": lambda p: len(p.gpus) >= 2,
    "torch.compile": lambda p: p.torch_compile,
    "sdpa.flash": _min_cc(8, 0),
    "sdpa.efficient": _min_cc(5, 0),
    "sdpa.cudnn": lambda p: _min_cc(8, 0)(p) and (p.cudnn_version or 0) >= 90000,
    "ort.cpu": _provider("CPUExecutionProvider"),
    "ort.cuda": _provider("CUDAExecutionProvider"),
    "ort.tensorrt": _provider("TensorrtExecutionProvider"),
}


class NodeInfo(Strict):
    """One node that holds trial slots, as the executor placed them."""

    node_id: str = Field(description="Ray's node id ('local' for this machine's process)")
    hostname: str
    labels: dict[str, str] = Field(default_factory=dict, description="the node's Ray labels")
    cpus: int = Field(ge=0, description="CPUs the node offers to trials")
    gpus: int = Field(ge=0, description="GPUs the node offers to trials")
    slots: int = Field(ge=0, description="trial slots placed on the node")


class NodeKind(Strict):
    """Nodes whose hardware is alike (one fingerprint): one space, one study, one tuned
    configuration. Timings of different kinds never meet."""

    profile: HardwareProfile
    nodes: list[NodeInfo] = Field(min_length=1)

    @classmethod
    def one_node(cls, profile: HardwareProfile, node_id: str, slots: int = 1) -> NodeKind:
        """A machine on its own: one node offering all its cores and GPUs to `slots` slots."""
        node = NodeInfo(
            node_id=node_id,
            hostname=profile.hostname,
            cpus=profile.cpu_cores,
            gpus=len(profile.gpus),
            slots=slots,
        )
        return cls(profile=profile, nodes=[node])

    @property
    def fingerprint(self) -> str:
        return self.profile.fingerprint

    @property
    def slots(self) -> int:
        return sum(node.slots for node in self.nodes)

    @property
    def cpus_per_slot(self) -> int:
        """The cores of the smallest slot of the kind (a node's CPUs as Ray offers them, at
        most the cores its processes may run on): a thread count above it would share."""
        cores = self.profile.cpu_cores
        shares = [min(node.cpus, cores) // node.slots for node in self.nodes if node.slots]
        return max(1, min(shares, default=cores))


class Inspection(Strict):
    """What an executor found before a study: the model as its workers load it, and the kinds
    of node its slots run on."""

    model: ModelInfo
    kinds: list[NodeKind] = Field(min_length=1)


class ArtifactInfo(Strict):
    path: str
    format: Literal["onnx", "safetensors", "json"] = Field(
        description="json: a replay's record of the chosen configuration (no model to export)"
    )
    sha256: str


def variant_key(config: dict[str, ConfigValue]) -> str:
    """The model variant a configuration runs, as the knobs define it
    (`workers.knobs.variant_key`): accuracy is measured once per variant."""
    from workers.knobs import variant_key as knobs_variant_key

    return knobs_variant_key(config)


class Entrant(Strict):
    """One configuration in a head-to-head comparison."""

    trial_number: int
    config: dict[str, ConfigValue]
    known_accuracy: float


class HeadToHeadSpec(Strict):
    """Measure several configurations of one workload in interleaved rounds on one device:
    every round times each entrant once (in an order that rotates from round to round), so a
    slow minute of the machine hits all of them alike."""

    study: str
    workload: Workload
    entrants: list[Entrant] = Field(min_length=1)
    rounds: int = Field(ge=1)
    round_seconds: float = Field(gt=0.0, description="each entrant's timed block in a round")
    measurement: MeasurementSettings = MeasurementSettings()
    timeout_s: float | None = Field(default=None, gt=0)


class RoundFigures(Strict):
    """One entrant's block in one round: per call and per sample."""

    calls: int
    latency_p50_ms: float
    latency_p95_ms: float
    throughput_per_s: float
    energy_per_sample_j: float


class EntrantOutcome(Strict):
    trial_number: int
    status: TrialStatus
    reason: str | None = None
    rounds: list[RoundFigures] = Field(
        default_factory=list, description="one per round, in round order"
    )
    metrics: TrialMetrics | None = Field(default=None, description="over every call of every round")


class HeadToHeadResult(Strict):
    entrants: list[EntrantOutcome]
    contention: list[Contention] = Field(description="per round: the machine's other load")
    provenance: Provenance | None = None
    duration_s: float
