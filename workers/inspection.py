"""Inspect a workload: prove that its model loads and runs on its data, before any tuning."""

from __future__ import annotations

from typing import Literal

import numpy as np

from autotune.core.contract import ModelInfo, Workload
from autotune.core.errors import RequestError
from workers.building.knobs.base import ENGINE_IMPLEMENTATIONS
from workers.building.observed_outputs import UnjudgedOutputs
from workers.building.runtimes import Session
from workers.cache import LoadedWorkload, WorkloadCache, default_cache
from workers.loading.workloads import OnnxModel
from workers.measuring.evaluate import run_all
from workers.measuring.footprint import activation_bytes_per_sample, parameter_bytes

# Samples the unmodified model is run on to prove it fits the data.
PROBE_SAMPLES = 4


def inspect_workload(workload: Workload, store: WorkloadCache | None = None) -> ModelInfo:
    """Load the model and data, run the unmodified model on a few samples and describe them
    (with the batch size the request or the model's inputs fix, where one is fixed).

    Raises RequestError (field, rule, value) for a missing or corrupt file, an entry point that
    does not resolve or returns the wrong thing, empty or mismatched data, a metric the data
    cannot support, a model that does not run on the data, or a `model.fixed_batch` other
    than the batch size an ONNX model's inputs declare.
    """
    loaded = (store or default_cache()).get(workload)
    session = _reference_session(loaded)
    _probe(loaded, session)
    return ModelInfo(
        kind=loaded.model.kind,
        sha256=loaded.model.sha256,
        n_samples=loaded.data.n_samples,
        input_shape=list(loaded.data.inputs.shape[1:]),
        has_labels=loaded.data.labels is not None,
        parameter_bytes=parameter_bytes(loaded.model),
        activation_bytes_per_sample=_activation_bytes_per_sample(loaded),
        engine_refusals=engine_refusals(loaded),
        fixed_batch=session.fixed_batch,
        fixed_batch_by=_fixed_batch_by(workload, session),
    )


def _activation_bytes_per_sample(loaded: LoadedWorkload) -> int | None:
    """Of one sample, or of one batch shared by its samples where the request fixes the
    batch (a module that takes no other size is not run on one sample)."""
    fixed = loaded.workload.model.fixed_batch or 1
    total = activation_bytes_per_sample(loaded.model, loaded.one_batch()[:fixed])
    return None if total is None else -(-total // fixed)


def _fixed_batch_by(workload: Workload, session: Session) -> Literal["request", "inputs"] | None:
    if workload.model.fixed_batch is not None:
        return "request"
    return None if session.fixed_batch is None else "inputs"


def engine_refusals(loaded: LoadedWorkload) -> dict[str, str]:
    """Engine -> why it cannot convert the model, where the engine has a cheap check for it
    (`EngineImplementation.conversion_problem`). A torch model is exported to ONNX for each
    variant, which is not cheap, so it is not checked here: its trials find out."""
    if not isinstance(loaded.model, OnnxModel):
        return {}
    problems = {
        name: engine.conversion_problem(loaded.model.model_bytes)
        for name, engine in ENGINE_IMPLEMENTATIONS.items()
    }
    return {name: problem for name, problem in problems.items() if problem is not None}


def _reference_session(loaded: LoadedWorkload) -> Session:
    try:
        return loaded.session_for(loaded.parse({}))
    except Exception as error:
        rule = f"must load in its runtime ({type(error).__name__}: {error})"
        raise _model_refused(loaded, rule) from error


def _model_refused(loaded: LoadedWorkload, rule: str) -> RequestError:
    """The model, as the request names it, breaks `rule`."""
    model = loaded.workload.model
    return RequestError(loaded.model_field, rule, model.onnx or model.entry_point or model.hf)


def described(inputs: np.ndarray) -> str:
    """A sample of the data in words: its type and shape, each input's of several."""
    fields = inputs.dtype.fields
    if fields is None:
        return _typed(inputs.dtype, inputs.shape[1:])
    return ", ".join(
        f"{name}: {_typed(fields[name][0].base, fields[name][0].shape)}" for name in fields
    )


def _typed(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    return f"{dtype.name} {list(shape)}" if shape else f"{dtype.name} scalar"


def _probe(loaded: LoadedWorkload, session: Session) -> None:
    count = min(PROBE_SAMPLES, loaded.data.n_samples)
    inputs = loaded.data.inputs[:count]
    try:
        outputs = run_all(session, inputs)
    except UnjudgedOutputs as error:
        rule = f"must return outputs that can be judged ({error})"
        raise _model_refused(loaded, rule) from error
    except Exception as error:
        raise RequestError(
            loaded.data.field,
            f"inputs must fit the model ({type(error).__name__}: {error})",
            f"{described(inputs)} per sample",
        ) from error
    if loaded.metric.kind == "custom":
        return  # a user's metric may need the whole data set; it is checked on the first trial
    labels = None if loaded.data.labels is None else loaded.data.labels[:count]
    try:
        loaded.metric.score(outputs, labels, outputs)
    except Exception as error:
        raise RequestError(
            "metric.kind", f"must apply to the model's outputs ({error})", loaded.metric.kind
        ) from error
