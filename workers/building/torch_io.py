"""Moving torch models, inputs and outputs between numpy arrays on the host and a device."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.errors import Unsupported

if TYPE_CHECKING:
    import torch


def module_on(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """`module` if its parameters and buffers are all on `device`, else a copy moved there
    (never moves the caller's module: it may be the store's original)."""
    tensors = [*module.parameters(), *module.buffers()]
    if all(_same_device(t.device, device) for t in tensors):
        return module
    return copy.deepcopy(module).to(device)


def _same_device(actual: torch.device, wanted: torch.device) -> bool:
    if actual.type != wanted.type:
        return False
    if wanted.type != "cuda":
        return True
    import torch

    index = wanted.index if wanted.index is not None else torch.cuda.current_device()
    return actual.index == index


def torch_inputs(
    batch: np.ndarray, dtype: torch.dtype | None, device: torch.device
) -> torch.Tensor:
    import torch

    if batch.dtype.names is not None:
        names = ", ".join(batch.dtype.names)
        raise Unsupported(
            f"a torch model takes one input array ('inputs' in an .npz); the data holds named "
            f"arrays ({names}), which feed the inputs of an ONNX model by name"
        )
    inputs = torch.from_numpy(batch)
    if dtype is not None and inputs.is_floating_point():
        return inputs.to(device=device, dtype=dtype)
    return inputs.to(device)


def module_device(module: torch.nn.Module) -> torch.device:
    import torch

    for tensor in [*module.parameters(), *module.buffers()]:
        return tensor.device
    return torch.device("cpu")


def first_tensor(outputs: Any) -> torch.Tensor:
    """The model's output tensor; of a tuple or list of outputs, the first."""
    import torch

    while isinstance(outputs, tuple | list) and outputs:
        outputs = outputs[0]
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(f"the model must return a tensor, got {type(outputs).__name__}")
    return outputs


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    if tensor.is_floating_point():
        tensor = tensor.float()
    return tensor.detach().cpu().numpy()  # .cpu() waits for the device
