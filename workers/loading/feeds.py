"""Models with several inputs or outputs, fed and read as one array.

The evaluation data of a model with several inputs is one numpy structured array with a
field per input, named like it: one record a sample, so slicing, tiling and batching move
every input together. A runtime turns a batch into its feed (`feed`) and its outputs back
into one array (`packed_outputs`): the only output where there is one, else a structured
array with a field per output that has the batch's sample axis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autotune.core.errors import Unsupported


@dataclass(frozen=True)
class InputSpec:
    """One input as the model declares it: a dimension is a size, or None where dynamic."""

    name: str
    dtype: type[np.generic]
    shape: tuple[int | None, ...] | None  # None: the rank is unknown

    def describe(self) -> str:
        dims = (
            "?"
            if self.shape is None
            else ", ".join("?" if d is None else str(d) for d in self.shape)
        )
        return f"'{self.name}' ({np.dtype(self.dtype).name} [{dims}])"

    @property
    def fixed_batch(self) -> int | None:
        return self.shape[0] if self.shape else None


def pack(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """One structured array of named arrays that share their first (sample) axis."""
    counts = {name: array.shape[0] if array.ndim else None for name, array in arrays.items()}
    if len(set(counts.values())) != 1 or None in counts.values():
        shown = ", ".join(f"{name}: {count}" for name, count in counts.items())
        raise ValueError(f"every input array must have the same number of samples ({shown})")
    dtype = np.dtype([(name, array.dtype, array.shape[1:]) for name, array in arrays.items()])
    packed = np.empty(next(iter(counts.values())) or 0, dtype=dtype)
    for name, array in arrays.items():
        packed[name] = array
    return packed


def feed(batch: np.ndarray, inputs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    """The runtime's feed for `batch`: a plain array for a one-input model, else a field per
    input by name, each cast to its input's type. Raises `Unsupported` naming the input that
    is missing, left over or mis-shaped, with the shape and type the model expects."""
    names = batch.dtype.names
    if names is None:
        if len(inputs) != 1:
            raise Unsupported(
                f"the model takes {len(inputs)} inputs ({_listed(inputs)}); the data must hold "
                "one array per input, named like it"
            )
        return {inputs[0].name: _cast(batch, inputs[0])}
    wanted = {spec.name for spec in inputs}
    missing = [spec for spec in inputs if spec.name not in names]
    if missing:
        raise Unsupported(
            f"the model's input {missing[0].describe()} is missing from the data, which holds "
            f"{', '.join(names)}"
        )
    extra = [name for name in names if name not in wanted]
    if extra:
        raise Unsupported(
            f"the data's array '{extra[0]}' is not an input of the model (its inputs: "
            f"{_listed(inputs)})"
        )
    return {spec.name: _cast(np.ascontiguousarray(batch[spec.name]), spec) for spec in inputs}


def _cast(array: np.ndarray, spec: InputSpec) -> np.ndarray:
    if spec.shape is not None:
        per_sample = spec.shape[1:]
        given = array.shape[1:]
        fits = len(per_sample) == len(given) and all(
            d is None or d == g for d, g in zip(per_sample, given, strict=True)
        )
        if not fits:
            raise Unsupported(
                f"the model's input {spec.describe()} does not fit the data's "
                f"{array.dtype.name} {list(array.shape)}"
            )
    if array.dtype.kind != np.dtype(spec.dtype).kind and not np.can_cast(
        array.dtype, spec.dtype, casting="same_kind"
    ):
        raise Unsupported(
            f"the model's input {spec.describe()} cannot take the data's {array.dtype.name}"
        )
    return array.astype(spec.dtype, copy=False)


def _listed(inputs: Sequence[InputSpec]) -> str:
    return ", ".join(spec.describe() for spec in inputs)


def packed_outputs(names: Sequence[str], outputs: Sequence[np.ndarray]) -> np.ndarray:
    """The only output, or the outputs that have the sample axis of the first, as one
    structured array (a field per output, by name)."""
    arrays = [np.asarray(output) for output in outputs]
    if len(arrays) == 1:
        return arrays[0]
    samples = arrays[0].shape[0] if arrays[0].ndim else None
    kept = {
        name: array
        for name, array in zip(names, arrays, strict=True)
        if array.ndim and array.shape[0] == samples
    }
    return kept[names[0]] if len(kept) == 1 else pack(kept)
