"""The batch size a request fixes (`model.fixed_batch`), applied to the model as loaded.

A torch module declares no shapes, so the request's value is the only word on it (its
variants carry it, `TorchVariant.fixed_batch`). An ONNX model's inputs may declare their batch
dimension as a number: a request that names another is refused; one whose batch is dynamic is
fixed at the request's value, so every engine that reads the model (and the model an ONNX
engine exports) takes that size alone, as it would of a model that declared it.
"""

from __future__ import annotations

import dataclasses

from autotune.core.contract import ModelRef
from autotune.core.errors import RequestError
from workers.loading.feeds import graph_ports, model_fixed_batch
from workers.loading.workloads import LoadedModel, OnnxModel

FIELD = "model.fixed_batch"


def with_requested_batch(ref: ModelRef, model: LoadedModel) -> LoadedModel:
    """`model` with the batch size `ref.fixed_batch` fixes (see the module's rule); raises
    RequestError where an ONNX model's inputs declare another."""
    if ref.fixed_batch is None or not isinstance(model, OnnxModel):
        return model
    declared = model_fixed_batch(model.ports[0])
    if declared == ref.fixed_batch:
        return model
    if declared is not None:
        raise RequestError(
            FIELD,
            f"must be the batch size the ONNX model's inputs declare ({declared}) or be left "
            "out: the model takes no other",
            ref.fixed_batch,
        )
    return _onnx_fixed_at(model, ref.fixed_batch)


def _onnx_fixed_at(model: OnnxModel, batch: int) -> OnnxModel:
    import onnx

    proto = onnx.load_from_string(model.model_bytes)
    inputs = {spec.name: spec for spec in model.ports[0]}
    for value in proto.graph.input:
        spec = inputs.get(value.name)
        if spec is None or spec.batch_axis is None or spec.shape is None:
            continue  # an initializer, a constant, or an input of unknown rank
        value.type.tensor_type.shape.dim[spec.batch_axis].dim_value = batch
    return dataclasses.replace(
        model, model_bytes=proto.SerializeToString(), ports=graph_ports(proto)
    )
