"""Per-process cache of loaded workloads, so repeated trials do not reload or recompute."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from autotune.core.contract import ConfigValue, Workload
from autotune.core.contract.trials import NodeSensitivity, SensitivityKey, SensitivityTable
from autotune.core.errors import RequestError
from autotune.core.knobs.config import TrialConfig, parse_config
from workers.building.calibration import calibration_subset
from workers.building.ort_session import OnnxRuntimeSession
from workers.building.quantization import node_op_types
from workers.building.runtimes import Session, check_runtime, checked_session
from workers.building.sensitivity import SENSITIVITY_SAMPLES, Sensitivity, measure_sensitivity
from workers.building.sharding import ModelSource
from workers.building.torch_sensitivity import LINEAR_OP_TYPE, measure_module_sensitivity
from workers.building.transforms import build_variant, checked_variant
from workers.building.variants import BuildContext, OnnxVariant, TorchVariant, Variant
from workers.loading.fixed_batch import with_requested_batch
from workers.loading.workloads import (
    EvalData,
    LoadedModel,
    TorchModel,
    load_data,
    load_model,
    torch_sha256,
)
from workers.measuring.evaluate import (
    SUBSET_CONFIDENCE,
    QualityMetric,
    SubsetScore,
    VariantQuality,
    fidelity,
    hoeffding_slack,
    resolve_metric,
    run_all,
    subset_size,
)

if TYPE_CHECKING:
    import torch

Model = TypeVar("Model")
# How a variant is built from the original for a configuration (`build_variant`).
VariantBuilder = Callable[[Variant, TrialConfig, BuildContext], Variant]

# Samples handed to exporters for tracing; two so the batch axis is not mistaken for a constant.
TRACE_SAMPLES = 2


@dataclass
class LoadedWorkload:
    """A workload's model, data and metric, with what has been computed for it so far."""

    workload: Workload
    model: LoadedModel
    data: EvalData
    metric: QualityMetric
    quality_by_variant: dict[str, VariantQuality] = field(default_factory=dict)
    onnx_by_variant: dict[str, bytes] = field(default_factory=dict)
    # (sha256 of an fp32 ONNX model or torch module's weights, int8 mode) -> its nodes' (torch:
    # Linear modules') sensitivity on this data, ranked.
    sensitivity_tables: dict[SensitivityKey, SensitivityTable] = field(default_factory=dict)
    # The rankings each cached variant was built by, and those used since `take_sensitivity`
    # (True: measured meanwhile).
    ranked_by_variant: dict[str, tuple[SensitivityKey, ...]] = field(default_factory=dict)
    _sensitivity_used: dict[SensitivityKey, bool] = field(default_factory=dict)
    _rankings: list[SensitivityKey] = field(default_factory=list)  # asked during a build
    _reference_outputs: np.ndarray | None = None

    @property
    def model_field(self) -> str:
        if self.workload.model.hf is not None:
            return "model.hf"
        return "model.entry_point" if isinstance(self.model, TorchModel) else "model.onnx"

    def original_variant(self) -> Variant:
        if isinstance(self.model, TorchModel):
            return TorchVariant(self.model.module, fixed_batch=self.workload.model.fixed_batch)
        return OnnxVariant(self.model.model_bytes)

    def parse(self, config: dict[str, ConfigValue]) -> TrialConfig:
        return parse_config(config, self.model.kind)

    def variant_for(self, config: TrialConfig) -> Variant:
        """Builds the variant (`build_variant`: settings the runtime cannot apply are refused
        first); ONNX bytes are cached per variant (export and quantization are the slow part,
        and an exported artifact must be the very file that was measured)."""
        return self._variant(config, build_variant)

    def _variant(self, config: TrialConfig, build: VariantBuilder) -> Variant:
        """`variant_for`, built by `build` where no ONNX bytes are cached for it."""
        cached = self.onnx_by_variant.get(config.variant_id)
        if cached is not None:
            for key in self.ranked_by_variant.get(config.variant_id, ()):
                self._sensitivity_used.setdefault(key, False)
            return OnnxVariant(cached)
        start = len(self._rankings)
        try:
            variant = build(self.original_variant(), config, self.build_context())
        finally:
            ranked_by = tuple(dict.fromkeys(self._rankings[start:]))
            del self._rankings[start:]
        if isinstance(variant, OnnxVariant):
            self.onnx_by_variant[config.variant_id] = variant.model_bytes
            self.ranked_by_variant[config.variant_id] = ranked_by
        return variant

    def build_context(self) -> BuildContext:
        return BuildContext(
            sample_inputs=self.one_batch(),
            calibration_inputs=self.data.calibration_inputs,
            fixed_batch=self.workload.model.fixed_batch,
            ranked_nodes=self.ranked_nodes,
            ranked_modules=self.ranked_modules,
        )

    def ranked_nodes(self, model_bytes: bytes, mode: str) -> tuple[str, ...]:
        """The fp32 ONNX model's quantizable nodes, most sensitive to `mode` first: measured
        on this workload's data once per model content, mode and process."""

        def measure() -> tuple[Sensitivity, dict[str, str]]:
            judged = calibration_subset(self.data.inputs, SENSITIVITY_SAMPLES)
            calibrating = calibration_subset(self.data.calibration_inputs, SENSITIVITY_SAMPLES)
            sensitivity = measure_sensitivity(
                model_bytes, mode, calibrating, infidelity_to(model_bytes, judged)
            )
            return sensitivity, node_op_types(model_bytes)

        return self._ranking((hashlib.sha256(model_bytes).hexdigest(), mode, "onnx"), measure)

    def ranked_modules(self, module: torch.nn.Module, mode: str) -> tuple[str, ...]:
        """The fp32 torch module's Linear modules (qualified names), most sensitive to `mode`
        first: measured on this workload's data once per weights, mode and process. Keyed by
        the weights' sha256 (`torch_sha256`), which for the unpruned model is the one the
        trials' provenance reports, where the strategy looks the table up."""

        def measure() -> tuple[Sensitivity, dict[str, str]]:
            judged = calibration_subset(self.data.inputs, SENSITIVITY_SAMPLES)
            float_variant = TorchVariant(module, fixed_batch=self.workload.model.fixed_batch)
            infidelity = torch_infidelity_to(float_variant, judged)
            sensitivity = measure_module_sensitivity(module, infidelity)
            return sensitivity, dict.fromkeys(sensitivity.ranked, LINEAR_OP_TYPE)

        original = isinstance(self.model, TorchModel) and module is self.model.module
        sha256 = self.model.sha256 if original else torch_sha256(module)
        return self._ranking((sha256, mode, "torch"), measure)

    def _ranking(
        self, key: SensitivityKey, measure: Callable[[], tuple[Sensitivity, dict[str, str]]]
    ) -> tuple[str, ...]:
        """The ranking of the model and mode `key` names (`measure`: it and its nodes'
        operation types), measured and timed where this process has none yet; recorded as
        used by the build under way."""
        if key not in self.sensitivity_tables:
            started = time.perf_counter()
            sensitivity, op_types = measure()
            seconds = time.perf_counter() - started
            self.sensitivity_tables[key] = sensitivity_table(sensitivity, op_types, key, seconds)
            self._sensitivity_used[key] = True
        self._sensitivity_used.setdefault(key, False)
        self._rankings.append(key)
        return tuple(node.node for node in self.sensitivity_tables[key].nodes)

    def take_sensitivity(self) -> list[SensitivityTable]:
        """The rankings variants were built by since the last call (`computed` where one was
        measured meanwhile), and none until the next use."""
        used, self._sensitivity_used = self._sensitivity_used, {}
        return [
            self.sensitivity_tables[key].model_copy(update={"computed": computed})
            for key, computed in used.items()
            if key in self.sensitivity_tables
        ]

    def one_batch(self) -> np.ndarray:
        """The first inputs, as many as one call of the model takes where it fixes its batch
        (cycling through the data where it holds fewer), else TRACE_SAMPLES."""
        count = self.workload.model.fixed_batch or TRACE_SAMPLES
        return self.data.inputs[np.arange(count) % self.data.n_samples]

    def model_source(self) -> ModelSource | None:
        """How another process rebuilds this workload's torch variants (tensor parallelism)."""
        if not isinstance(self.model, TorchModel):
            return None
        return ModelSource(
            entry_point=self.model.entry_point,
            python_path=tuple(self.workload.python_path),
            sha256=self.model.sha256,
            # The rankings are methods of this cache, which do not travel to another process.
            context=dataclasses.replace(
                self.build_context(), ranked_nodes=None, ranked_modules=None
            ),
        )

    def session_for(self, config: TrialConfig) -> Session:
        """A session to close after use (`workers.building.runtimes.opened`): sharded ones hold
        processes. Settings the runtime cannot apply are refused before the variant is built,
        once: the variant and the session are built for the configuration so checked."""
        check_runtime(config, self.model.kind)
        variant = self._variant(config, checked_variant)
        return checked_session(variant, config, self.model_source())

    def reference_outputs(self) -> np.ndarray:
        """Outputs of the unmodified model (fp32, default runtime) on all evaluation inputs."""
        if self._reference_outputs is None:
            session = self.session_for(self.parse({}))
            self._reference_outputs = run_all(session, self.data.inputs)
        return self._reference_outputs

    def score(self, session: Session) -> float:
        """The workload's quality metric for the variant behind `session`."""
        return self.judge(session).accuracy

    def judge(self, session: Session) -> VariantQuality:
        """The workload's quality metric for the variant behind `session`, with how it was
        judged and, where the outputs look like class scores, the top-1 agreement beside it."""
        outputs = run_all(session, self.data.inputs)
        reference = self.reference_outputs() if self.metric.needs_reference else None
        score = self.metric.score(outputs, self.data.labels, reference)
        figures: dict[str, float | str] = {
            "accuracy_judged_by": self.metric.judged_by(
                outputs if reference is None else reference,
                getattr(session, "outputs_left_out", None),
            )
        }
        agreement = (
            None
            if reference is None
            else self.metric.agreement_beside(outputs, reference, self.is_classifier)
        )
        if agreement is not None:
            figures["top1_agreement"] = agreement
        return VariantQuality(score, figures)

    def subset_score(self, session: Session) -> SubsetScore | None:
        """The metric on the first evaluation samples, with its distribution-free upper bound
        on the figure over all of them; None for a metric that is not a mean of bounded
        per-sample scores, or data too small to judge a part of."""
        n = self.data.n_samples
        size = subset_size(n)
        if size is None or self.metric.sample_range is None:
            return None
        outputs = run_all(session, self.data.inputs[:size])
        reference = self.reference_outputs()[:size] if self.metric.needs_reference else None
        labels = None if self.data.labels is None else self.data.labels[:size]
        score = self.metric.score(outputs, labels, reference)
        slack = hoeffding_slack(self.metric.sample_range, size, SUBSET_CONFIDENCE)
        return SubsetScore(score, score + slack, size, n)

    @property
    def is_classifier(self) -> bool:
        """Whether the model is known to classify: its data has labels, or it is a Hugging
        Face classification model."""
        task = self.workload.model.task
        return self.data.labels is not None or (
            task is not None and task.endswith("classification")
        )

    def quality(self, config: TrialConfig, session: Session) -> VariantQuality:
        if config.variant_id not in self.quality_by_variant:
            self.quality_by_variant[config.variant_id] = self.judge(session)
        return self.quality_by_variant[config.variant_id]


def sensitivity_table(
    sensitivity: Sensitivity, op_types: dict[str, str], key: SensitivityKey, seconds: float
) -> SensitivityTable:
    """The ranking of the model and mode `key` names as the trial contract carries it, with
    each node's operation type."""
    nodes = [
        NodeSensitivity(
            node=name, rank=rank, op_type=op_types.get(name), drop=sensitivity.measured.get(name)
        )
        for rank, name in enumerate(sensitivity.ranked, start=1)
    ]
    model_sha256, mode, ranked = key
    return SensitivityTable(
        model_sha256=model_sha256, mode=mode, seconds=seconds, ranked=ranked, nodes=nodes
    )


def infidelity_to(model_bytes: bytes, samples: np.ndarray) -> Callable[[bytes], float]:
    """1 - `fidelity` of another ONNX model's outputs on `samples` to this model's."""

    def outputs(model: bytes) -> np.ndarray:
        return run_all(OnnxRuntimeSession(model, threads=len(os.sched_getaffinity(0))), samples)

    return _infidelity(outputs, model_bytes)


def torch_infidelity_to(
    variant: TorchVariant, samples: np.ndarray
) -> Callable[[torch.nn.Module], float]:
    """1 - `fidelity` of another module's outputs on `samples` (run on the CPU as the torch
    sessions run it, in place of the variant's module) to the variant's."""
    from workers.building.torch_sessions import TorchEagerSession

    def outputs(module: torch.nn.Module) -> np.ndarray:
        replaced = dataclasses.replace(variant, module=module)
        return run_all(TorchEagerSession(replaced, threads=len(os.sched_getaffinity(0))), samples)

    return _infidelity(outputs, variant.module)


def _infidelity(
    outputs: Callable[[Model], np.ndarray], reference_model: Model
) -> Callable[[Model], float]:
    """1 - `fidelity` of a candidate's `outputs` to the reference model's."""
    reference = outputs(reference_model)
    return lambda candidate: 1.0 - fidelity(outputs(candidate), reference)


def load_workload(workload: Workload) -> LoadedWorkload:
    """Load and cross-check model, data and metric; raises RequestError on bad input."""
    metric = resolve_metric(workload.metric, workload.python_path)
    model = with_requested_batch(workload.model, load_model(workload.model, workload.python_path))
    data = load_data(workload.data, workload.python_path, workload.model, model)
    _check_metric_fits_data(metric, data)
    return LoadedWorkload(workload=workload, model=model, data=data, metric=metric)


def _check_metric_fits_data(metric: QualityMetric, data: EvalData) -> None:
    if not metric.needs_labels:
        return
    if data.labels is None:
        raise RequestError("metric.kind", f"'{metric.kind}' needs labels in the data", metric.kind)
    if data.labels.dtype.kind not in "iu" or data.labels.ndim != 1:
        raise RequestError(
            data.field,
            f"labels must be a 1-D integer array for metric '{metric.kind}'",
            f"{data.labels.dtype}{list(data.labels.shape)}",
        )


class WorkloadCache:
    """The most recently used workloads of this process, keyed by their definition and the
    size and modification time of the files they name (a changed file is reloaded)."""

    def __init__(self, capacity: int = 2) -> None:
        self._capacity = capacity
        self._loaded: OrderedDict[str, LoadedWorkload] = OrderedDict()
        self.loads = 0

    def loaded(self, workload: Workload) -> LoadedWorkload | None:
        """The workload where this cache holds it, without loading it."""
        return self._loaded.get(_fingerprint(workload))

    def get(self, workload: Workload) -> LoadedWorkload:
        key = _fingerprint(workload)
        if key in self._loaded:
            self._loaded.move_to_end(key)
            return self._loaded[key]
        loaded = load_workload(workload)
        self.loads += 1
        self._loaded[key] = loaded
        while len(self._loaded) > self._capacity:
            self._loaded.popitem(last=False)
        return loaded


@cache
def default_cache() -> WorkloadCache:
    """The cache of the module-level functions (a TrialWorker holds its own)."""
    return WorkloadCache()


def _fingerprint(workload: Workload) -> str:
    stamps = [_file_stamp(path) for path in (workload.model.onnx, workload.data.npz) if path]
    return workload.model_dump_json() + repr(stamps)


def _file_stamp(path: str) -> tuple[str, int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return path, status.st_size, status.st_mtime_ns
