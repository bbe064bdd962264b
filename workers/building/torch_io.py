"""Moving torch models, inputs and outputs between numpy arrays on the host and a device."""

from __future__ import annotations

import copy
import importlib.util
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.errors import Unsupported
from workers.building.observed_outputs import (
    WHOLE,
    Judged,
    UnjudgedOutputs,
    first_axis_not_the_batch,
)
from workers.loading.feeds import pack

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


def output_names(outputs: Any) -> list[str]:
    """The names of a module's output tensors, flattened as torch.export flattens them
    (tuples, lists and dicts, nested, in order): 'output' for the only one; of several, a
    dict's keys and `output_<i>` for a sequence's items, joined by '.' where nested
    (`output_0.1`, `boxes`, `heads.2`)."""
    return list(_named_tensors(outputs))


def output_structure(outputs: Any) -> Any:
    """How a module's output tensors nest (a pytree spec), to rebuild its outputs from the flat
    list (`rebuilt`)."""
    from torch.utils import _pytree

    return _pytree.tree_structure(outputs)


def nesting(outputs: Any) -> Any:
    """`output_structure` of outputs to be rebuilt, None for a lone tensor (the common case:
    nothing to rebuild, so no walk over the outputs on each call)."""
    import torch

    return None if isinstance(outputs, torch.Tensor) else output_structure(outputs)


# The key of an ONNX model's metadata that holds how the torch module it was exported from
# nested its outputs (`structure_text`), so a session of the ONNX model rebuilds them.
OUTPUT_STRUCTURE_KEY = "autotune.output_structure"
# The key that holds how the module had each output judged, in flattening order
# (`TorchOutputs.judging`, as JSON), so a session of the ONNX model judges them alike.
OUTPUT_JUDGING_KEY = "autotune.output_judging"


def structure_text(structure: Any) -> str:
    from torch.utils import _pytree

    return _pytree.treespec_dumps(structure)


def structure_of_text(text: str) -> Any:
    from torch.utils import _pytree

    return _pytree.treespec_loads(text)


def exported_output_structure(metadata: dict[str, str]) -> Any:
    """How the torch module an ONNX model was exported from nested its outputs, from the
    model's metadata; None for a model that was not exported by autotune."""
    text = metadata.get(OUTPUT_STRUCTURE_KEY)
    if text is None or importlib.util.find_spec("torch") is None:
        return None  # without torch, the outputs come back flat
    return structure_of_text(text)


def exported_output_judging(metadata: dict[str, str]) -> list[Judged] | None:
    """How the torch module an ONNX model was exported from had each output judged, in
    order, from the model's metadata; None for a model that was not exported by autotune."""
    text = metadata.get(OUTPUT_JUDGING_KEY)
    return None if text is None else list(json.loads(text))


def rebuilt(structure: Any, leaves: list[Any]) -> Any:
    """The module's outputs, nested as `structure` says, of `leaves` in flattening order."""
    from torch.utils import _pytree

    return _pytree.tree_unflatten(leaves, structure)


class ReadsTorchOutputs:
    """A session whose module's outputs a `TorchOutputs` reads (`_outputs`)."""

    _outputs: TorchOutputs

    @property
    def output_structure(self) -> Any:
        """How the last call's outputs nest (None: a lone tensor)."""
        return self._outputs.structure

    @property
    def outputs_left_out(self) -> dict[str, str]:
        return self._outputs.left_out


class TorchOutputs:
    """A module's outputs for a batch of `rows` as numpy: the only one as an array; several as
    one structured array with a field per judged output (`output_names`), each with its batch
    axis first. An output whose first axis is not the batch's, as the first call returns it,
    belongs to the one sample of a model whose batch is fixed at one and is judged whole (a
    batch axis of one in front); of another model it is left out (`left_out` says why), and a
    model with no output left to judge raises `UnjudgedOutputs`."""

    def __init__(self, fixed_batch: int | None = None) -> None:
        self.fixed_batch = fixed_batch
        self.structure: Any = None  # how the outputs nest (None: a lone tensor)
        self.left_out: dict[str, str] = {}  # output -> why it is not judged
        self._whole: frozenset[str] | None = None  # judged whole, once the first call is read

    def numpy(self, outputs: Any, rows: int) -> np.ndarray:
        import torch

        # The common case, without flattening (per call).
        if isinstance(outputs, torch.Tensor) and outputs.ndim and outputs.shape[0] == rows:
            return to_numpy(outputs)
        self.structure = nesting(outputs)
        arrays = {name: to_numpy(tensor) for name, tensor in _named_tensors(outputs).items()}
        if self._whole is None:
            self._whole = self._judged_whole(arrays, rows)
        kept = {
            name: array[np.newaxis] if name in self._whole else array
            for name, array in arrays.items()
            if name not in self.left_out
        }
        return next(iter(kept.values())) if len(kept) == 1 else pack(kept)

    def _judged_whole(self, arrays: dict[str, np.ndarray], rows: int) -> frozenset[str]:
        """The outputs without the batch on their first axis judged whole; of a model whose
        batch is not fixed at one, those are left out instead (`left_out`)."""
        unbatched = {
            name: array
            for name, array in arrays.items()
            if array.ndim == 0 or array.shape[0] != rows
        }
        if self.fixed_batch == 1:
            return frozenset(unbatched)
        self.left_out = {
            name: first_axis_not_the_batch(array, rows) for name, array in unbatched.items()
        }
        if len(self.left_out) == len(arrays):
            told = "; ".join(f"'{name}' {reason}" for name, reason in self.left_out.items())
            raise UnjudgedOutputs(f"no output of the model has a batch axis to judge ({told})")
        return frozenset()

    def judging(self, names: list[str]) -> list[Judged]:
        """How the first call's outputs `names` (in flattening order) were judged: WHOLE, None
        where left out, else 0 (the batch on their first axis)."""
        whole = self._whole or frozenset()
        return [WHOLE if name in whole else None if name in self.left_out else 0 for name in names]


def flat_tensors(outputs: Any) -> list[torch.Tensor]:
    """A module's output tensors in flattening order (`output_names`' order)."""
    return list(_named_tensors(outputs).values())


def leaf_names(structure: Any) -> list[str]:
    """`output_names` of the outputs that nest as `structure` says."""
    from torch.utils import _pytree

    placed = _pytree.tree_unflatten(list(range(structure.num_leaves)), structure)
    leaves, _ = _pytree.tree_flatten_with_path(placed)
    if len(leaves) == 1 and not leaves[0][0]:
        return ["output"]
    return [_path_name(path) for path, _ in leaves]


def _named_tensors(outputs: Any) -> dict[str, torch.Tensor]:
    import torch
    from torch.utils import _pytree

    leaves, _ = _pytree.tree_flatten_with_path(outputs)
    for path, leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            where = f"'{_path_name(path)}' " if path else ""
            raise UnjudgedOutputs(
                f"the model's output {where}is a {type(leaf).__name__}: a model must return "
                "tensors (alone, or in tuples, lists and dicts of them)"
            )
    if not leaves:
        raise UnjudgedOutputs("the model returns no tensor")
    if len(leaves) == 1 and not leaves[0][0]:
        return {"output": leaves[0][1]}
    return {_path_name(path): leaf for path, leaf in leaves}


def _path_name(path: tuple[Any, ...]) -> str:
    parts = [str(_key_of(key)) for key in path]
    if hasattr(path[0], "idx"):
        parts[0] = f"output_{parts[0]}"
    return ".".join(parts)


def _key_of(key: Any) -> Any:
    """A dict's key, a sequence's index or an attribute's name, of one step of a pytree path."""
    for attribute in ("key", "idx", "name"):
        if hasattr(key, attribute):
            return getattr(key, attribute)
    return key


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    if tensor.is_floating_point():
        tensor = tensor.float()
    return tensor.detach().cpu().numpy()  # .cpu() waits for the device
