"""Memory footprint of an unmodified model: the weights, and activations per sample."""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.loading.workloads import LoadedModel, TorchModel


def parameter_bytes(model: LoadedModel) -> int:
    if isinstance(model, TorchModel):
        tensors = [*model.module.parameters(), *model.module.buffers()]
        return int(sum(t.numel() * t.element_size() for t in tensors))
    import onnx

    proto = onnx.load_model_from_string(model.model_bytes)
    return int(sum(onnx.numpy_helper.to_array(t).nbytes for t in proto.graph.initializer))


def activation_bytes_per_sample(model: LoadedModel, one_sample: np.ndarray) -> int | None:
    """Sum of the outputs of every leaf module for one sample. Eager inference frees most
    of them as it goes, so this bounds from above what one sample keeps alive."""
    if not isinstance(model, TorchModel):
        return None
    import torch

    total = 0

    def count(_module: Any, _inputs: Any, output: Any) -> None:
        nonlocal total
        for tensor in _tensors(output):
            total += tensor.numel() * tensor.element_size()

    leaves = [m for m in model.module.modules() if not list(m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    try:
        with torch.inference_mode():
            model.module(torch.from_numpy(np.ascontiguousarray(one_sample)))
    finally:
        for handle in handles:
            handle.remove()
    return total


def _tensors(output: Any) -> list[Any]:
    import torch

    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, list | tuple):
        return [t for item in output for t in _tensors(item)]
    if isinstance(output, dict):
        return [t for item in output.values() for t in _tensors(item)]
    return []
