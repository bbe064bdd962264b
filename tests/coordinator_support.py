"""Fast parts for coordinator tests: an executor that answers from a script, a tracker that
remembers what it was told, and a coordinator on an in-memory study with a small space.

Nothing here loads a model, starts Ray or MLflow, or writes a file: a search of a few trials
takes milliseconds.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.core.contract import (
    ArtifactInfo,
    ConfigValue,
    Contention,
    DataRef,
    HardwareProfile,
    HeadToHeadResult,
    HeadToHeadSpec,
    Inspection,
    ModelInfo,
    ModelRef,
    NodeInfo,
    NodeKind,
    Provenance,
    TrialMetrics,
    TrialResult,
    TrialSpec,
    TrialStatus,
    TrialTimes,
    Workload,
)
from autotune.core.errors import AutotuneError
from autotune.core.metrics import OBJECTIVES
from autotune.execution.base import FixedSlots, require_idle_slot
from autotune.requests.request import TuningRequest, parse_request
from autotune.results import OptunaStore, StudyIdentity, TrialMarks, TrialRecord
from autotune.results.records import Candidate
from autotune.search.budget import SearchBudget
from autotune.search.coordinator import Coordinator, Tuning
from autotune.search.observers import Observer, TrialTold
from autotune.space.search_space import EffectiveDimension, EffectiveSpace
from autotune.strategies import Strategy, make_strategy
from autotune.tracking import NullTracker

INFO = ModelInfo(
    kind="torch",
    sha256="0" * 64,
    n_samples=1,
    input_shape=[1],
    has_labels=True,
    parameter_bytes=0,
)
PROFILE = HardwareProfile(
    hostname="scripted", cpu_model="scripted", cpu_cores=1, memory_mb=1, cpu_flags=[]
)
WORKLOAD = Workload(
    model=ModelRef(entry_point="scripted.model:build"),
    data=DataRef(entry_point="scripted.model:data"),
)
STUDY = "coordinator-test"
BATCH = "batch.size"
# Each search here takes milliseconds; one still running after this never ends.
SEARCH_DEADLINE_S = 5.0


def small_space() -> EffectiveSpace:
    """Two engines (one with an option of its own), three batch sizes, two precisions and
    optional pruning; every dimension's first value is the baseline's."""
    dims: list[Dimension] = [
        ("runtime.engine", ["torch_eager", "onnxruntime"], {}),
        ("runtime.graph_opt", ["all", "basic"], {"runtime.engine": ["onnxruntime"]}),
        ("batch.size", [1, 8, 64], {}),
        ("precision.mode", ["fp32", "int8_static"], {}),
        ("prune.method", ["none", "magnitude"], {}),
        ("prune.ratio", [0.3, 0.6], {"prune.method": ["magnitude"]}),
    ]
    return space_of("small", dims)


# A dimension of a test space: its name, its values (the first the baseline's) and `when`.
Dimension = tuple[str, list[ConfigValue], dict[str, list[ConfigValue]]]


def space_of(name: str, dims: list[Dimension]) -> EffectiveSpace:
    """A space of categorical dimensions on the test profile's hardware."""
    return EffectiveSpace(
        name=name,
        source="test",
        hardware_fingerprint=PROFILE.fingerprint,
        excluded=[],
        dimensions=[
            EffectiveDimension(name=n, values=v, range=None, baseline=v[0], when=w)
            for n, v, w in dims
        ],
    )


SPACE = small_space()
BASELINE: dict[str, ConfigValue] = SPACE.baseline()
BASELINE_ACCURACY = 0.95
# What int8 costs in accuracy: beyond a bound of 0.01.
INT8_ACCURACY_LOSS = 0.05


def config_with(**changes: ConfigValue) -> dict[str, ConfigValue]:
    """The baseline with `changes`, given with '__' for '.': `config_with(batch__size=8)`."""
    return {**BASELINE, **{k.replace("__", "."): v for k, v in changes.items()}}


def table_metrics(config: dict[str, ConfigValue]) -> TrialMetrics:
    """Figures that depend only on the configuration: larger batches are slower per call and
    cheaper per sample; int8 and pruning cost accuracy."""
    batch = int(config.get("batch.size", 1))
    latency = 0.05 * batch**0.8
    accuracy = BASELINE_ACCURACY - 0.01 * float(config.get("prune.ratio", 0.0))
    if config.get("precision.mode") == "int8_static":
        accuracy -= INT8_ACCURACY_LOSS
    return TrialMetrics(
        accuracy=accuracy,
        latency_p50_ms=latency,
        latency_p90_ms=latency,
        latency_p95_ms=latency,
        latency_p99_ms=latency,
        latency_mean_ms=latency,
        latency_cv=0.0,
        throughput_per_s=1000 * batch / latency,
        energy_per_sample_j=1e-4 / batch,
        energy_source="estimate",
        peak_memory_mb=100.0,
        iterations=1,
        measure_seconds=0.0,
    )


# What the executor answers to a spec: metrics (status 'ok') or a failure status.
Reply = Callable[[TrialSpec], TrialStatus | TrialMetrics]


def measured(spec: TrialSpec) -> TrialMetrics:
    return table_metrics(spec.config)


def failing(
    status: TrialStatus, when: Callable[[TrialSpec], bool], otherwise: Reply = measured
) -> Reply:
    """`status` for the specs `when` picks, `otherwise`'s answer for the rest."""

    def reply(spec: TrialSpec) -> TrialStatus | TrialMetrics:
        return status if when(spec) else otherwise(spec)

    return reply


def scripted_provenance(spec: TrialSpec, fingerprint: str = PROFILE.fingerprint) -> Provenance:
    return Provenance(
        model_sha256=INFO.sha256,
        host="scripted",
        hardware_fingerprint=fingerprint,
        node_id="scripted",
        software={"autotune": "test"},
        measurement=spec.measurement,
    )


class ScriptedExecutor(FixedSlots):
    """Answers each submitted spec from `reply` at once, and hands one result back per
    `wait`: the oldest submitted, or with `newest_first` the newest (results out of order
    across slots). `on_submit` sees each spec after it is submitted; `measured_on` names the
    hardware each spec's result says it was measured on (the study's kind by default); with
    `scans`, a spec's batch scan is answered with the call times `reply` gives; a spec's
    screen is judged on the figures `reply` gives, as they are; a measured result says its
    worker spent `times`, and the machine's other load `contention` gives (asked before
    `reply`)."""

    runs_in_process = False
    trial_memory_mb: int | None = None

    def __init__(
        self,
        reply: Reply = measured,
        slots: int = 1,
        newest_first: bool = False,
        on_submit: Callable[[TrialSpec], None] | None = None,
        measured_on: Callable[[TrialSpec], str] = lambda spec: PROFILE.fingerprint,
        scans: bool = False,
        times: TrialTimes | None = None,
        contention: Callable[[TrialSpec], Contention | None] = lambda spec: None,
    ) -> None:
        self.reply = reply
        self.contention = contention
        self.scans = scans
        self.times = times
        self.measured_on = measured_on
        self.slots = slots
        self.newest_first = newest_first
        self.on_submit = on_submit
        self.submitted: list[TrialSpec] = []
        self._done: list[TrialResult] = []

    def kinds(self) -> list[NodeKind]:
        node = NodeInfo(node_id="scripted", hostname="scripted", cpus=1, gpus=0, slots=self.slots)
        return [NodeKind(profile=PROFILE, nodes=[node])]

    def inspect(self, workload: Workload) -> Inspection:
        return Inspection(model=INFO, kinds=self.kinds())

    def submit(self, spec: TrialSpec) -> None:
        require_idle_slot(self.slots - len(self._done))
        self.submitted.append(spec)
        self._done.append(self._result(spec))
        if self.on_submit is not None:
            self.on_submit(spec)

    def _result(self, spec: TrialSpec) -> TrialResult:
        load = self.contention(spec)
        reply = self.reply(spec)
        if isinstance(reply, TrialMetrics):
            provenance = scripted_provenance(spec, self.measured_on(spec))
            provenance = provenance.model_copy(update={"contention": load})
            if spec.screen is not None and spec.screen.dominating(reply, 0.0) is not None:
                screened = "scripted: out of the front's reach"
                return TrialResult.for_spec(
                    spec, "screened", screened, 0.0, None, provenance, reply
                )
            result = TrialResult.for_spec(spec, "ok", None, 0.0, reply, provenance)
            update = {"call_ms_by_batch": self._scan(spec), "times": self.times}
            return result.model_copy(update=update)
        return TrialResult.for_spec(spec, reply, f"scripted {reply}")

    def _scan(self, spec: TrialSpec) -> dict[int, float]:
        """With `scans`, the spec's batch scan read from the table's call times."""
        call_ms: dict[int, float] = {}
        for batch in spec.batch_scan if self.scans else []:
            reply = self.reply(spec.model_copy(update={"config": {**spec.config, BATCH: batch}}))
            if isinstance(reply, TrialMetrics):
                call_ms[batch] = reply.latency_p50_ms
        return call_ms

    def pending(self) -> int:
        return len(self._done)

    def wait(self) -> list[TrialResult]:
        if not self._done:  # a real executor would block for ever
            raise AutotuneError("wait called with nothing submitted")
        return [self._done.pop(-1 if self.newest_first else 0)]

    def measured_configs(self) -> list[dict[str, ConfigValue]]:
        return [spec.config for spec in self.submitted]

    def attempts_of(self, trial_number: int) -> list[int]:
        return [spec.attempt for spec in self.submitted if spec.trial_number == trial_number]

    def compare(self, spec: HeadToHeadSpec) -> HeadToHeadResult:
        raise NotImplementedError("the search's tests stop before the head-to-head")

    def export(self, spec: TrialSpec, out_dir: str) -> ArtifactInfo:
        raise NotImplementedError("the search's tests stop before the export")

    def close(self) -> None:
        pass


class SearchDidNotEnd(Exception):
    """Not an `AutotuneError`: no test expects it."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raises `SearchDidNotEnd` in the main thread after `seconds`: a loop that never ends
    fails its test instead of hanging the run."""

    def expire(signum: int, frame: Any) -> None:
        raise SearchDidNotEnd(f"the search did not end within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class LoggedTrial:
    number: int
    attempt: int
    config: dict[str, Any]
    metrics: dict[str, Any] | None
    tags: dict[str, str]
    texts: dict[str, str] | None = None


class RecordingTracker(NullTracker):
    """Remembers every trial it is told, in order."""

    def __init__(self) -> None:
        super().__init__(STUDY)
        self.trials: list[LoggedTrial] = []

    def log_trial(
        self,
        trial_number: int,
        attempt: int,
        config: dict[str, Any],
        metrics: dict[str, Any] | None,
        tags: dict[str, str],
        duration_s: float = 0.0,
        texts: dict[str, str] | None = None,
    ) -> None:
        super().log_trial(trial_number, attempt, config, metrics, tags, duration_s, texts)
        self.trials.append(LoggedTrial(trial_number, attempt, config, metrics, tags, texts))

    @property
    def numbers(self) -> list[int]:
        return [t.number for t in self.trials]


@dataclass
class RecordingObserver(Observer):
    """What the coordinator told its observers, in order."""

    starts: list[tuple[int, int | None]] = field(default_factory=list)
    trials: list[TrialTold] = field(default_factory=list)
    fronts: list[list[int]] = field(default_factory=list)  # each front's trial numbers
    notes: list[str] = field(default_factory=list)

    def on_start(self, done: int, total: int | None) -> None:
        self.starts.append((done, total))

    def on_trial(self, trial: TrialTold) -> None:
        self.trials.append(trial)

    def on_front(self, front: list[Candidate]) -> None:
        self.fronts.append([c.trial_number for c in front])

    def on_note(self, note: str) -> None:
        self.notes.append(note)


@dataclass
class Rig:
    """A coordinator and the parts it was given, typed as they are for the test to inspect."""

    coordinator: Coordinator
    store: OptunaStore
    executor: ScriptedExecutor
    tracker: RecordingTracker
    observed: RecordingObserver

    @property
    def notes(self) -> list[str]:
        return self.observed.notes

    def search(self) -> TrialRecord:
        with deadline(SEARCH_DEADLINE_S):
            return self.coordinator.search()

    def records(self) -> list[TrialRecord]:
        return self.store.records()

    def queue(self, *configs: dict[str, ConfigValue]) -> None:
        """The baseline, then `configs`, waiting in the study: asked in this order before any
        proposal."""
        self.store.enqueue(SPACE, BASELINE, TrialMarks(baseline=True))
        for config in configs:
            self.store.enqueue(SPACE, config, TrialMarks())


def make_request(
    trials: int | None,
    timeout_s: float | None = None,
    objectives: list[str] | None = None,
    constraints: dict[str, float] | None = None,
) -> TuningRequest:
    raw: dict[str, Any] = {
        "name": STUDY,
        "budget": {"trials": trials, "timeout_s": timeout_s},
        "constraints": constraints or {},
    }
    if objectives is not None:
        raw["objectives"] = objectives
    return parse_request(raw, replay=True)


def open_store(
    request: TuningRequest, strategy: Strategy, space: EffectiveSpace, storage: str | None = None
) -> OptunaStore:
    """The study in memory, or in `storage` (a SQLAlchemy URL)."""
    identity = StudyIdentity(
        model_sha256=INFO.sha256,
        objectives=list(request.objectives),
        space=space.name,
        hardware_fingerprint=PROFILE.fingerprint,
    )
    directions = [OBJECTIVES[o].direction.value for o in request.objectives]
    return OptunaStore.open(STUDY, storage, directions, strategy.sampler(), identity)


def make_rig(
    strategy: str = "random",
    *,
    executor: ScriptedExecutor | None = None,
    trials: int | None = 5,
    timeout_s: float | None = None,
    objectives: list[str] | None = None,
    constraints: dict[str, float] | None = None,
    store: OptunaStore | None = None,
    seed: int = 0,
) -> Rig:
    """A coordinator of the registered `strategy` on the small space, its study in memory
    (`store`: resume that one), a `RecordingTracker` and a budget of `trials` / `timeout_s`."""
    space = small_space()
    request = make_request(trials, timeout_s, objectives, constraints)
    chosen = make_strategy(strategy, space, request, seed)
    store = store or open_store(request, chosen, space)
    executor = executor or ScriptedExecutor()
    tracker = RecordingTracker()
    observed = RecordingObserver()
    tuning = Tuning(request, WORKLOAD, INFO, space, PROFILE, Path("unused-artifacts"))
    coordinator = Coordinator(
        tuning,
        store,
        chosen,
        executor,
        tracker,
        SearchBudget(trials, timeout_s),
        observers=[observed],
    )
    return Rig(coordinator, store, executor, tracker, observed)


def dead_pid() -> int:
    """The pid of a process that has ended (reaped, so not even a zombie)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid
