"""Models with several inputs or outputs, fed and read as one array.

The evaluation data of a model with several inputs is one numpy structured array with a
field per input, named like it: one record a sample, so slicing, tiling and batching move
every input together. Each field holds its input's sample with the batch axis taken out,
wherever the model has it; an input without a batch axis (a scalar such as a sample rate, or
a tensor whose every dimension is fixed while the model's batch is dynamic) is a constant,
repeated in every record and fed once. A runtime turns a batch into its feed (`feed`) and
its outputs back into one array (`packed_outputs`): the only output where there is one, else
a structured array with a field per output that has a batch axis, the batch axis first.

Where the batch axis is (`batch_axes`) is read from the model's declared dimensions, never
from the size of an array: the model's batch is its first input's first dimension; another
input or output has it on its first dimension where that is dynamic or the batch's fixed
size, else on its only dimension that is (a recurrent state `[2, batch, 128]`); a scalar,
or a tensor of fixed dimensions in a model of dynamic batch, has none. An output whose
declared dimensions are all dynamic (as exporters often leave a recurrent state's) has the
batch axis of the one input of its rank, where there is one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.errors import Unsupported

if TYPE_CHECKING:
    import onnx

logger = logging.getLogger(__name__)

Shape = tuple[int | None, ...]


@dataclass(frozen=True)
class InputSpec:
    """One input (or output) as the model declares it: a dimension is a size, or None where
    dynamic; `batch_axis` where its samples lie (None: it has no batch axis)."""

    name: str
    dtype: type[np.generic]
    shape: Shape | None  # None: the rank is unknown
    batch_axis: int | None = 0

    def describe(self) -> str:
        dims = (
            "?"
            if self.shape is None
            else ", ".join("?" if d is None else str(d) for d in self.shape)
        )
        return f"'{self.name}' ({np.dtype(self.dtype).name} [{dims}])"

    @property
    def fixed_batch(self) -> int | None:
        if self.shape is None or self.batch_axis is None:
            return None
        return self.shape[self.batch_axis]

    @cached_property
    def static_sample(self) -> tuple[int, ...] | None:
        """The sizes of a sample's dimensions where the batch axis is the first and every
        other dimension is declared fixed (what a batch must have after its first axis);
        None otherwise."""
        if self.shape is None or self.batch_axis != 0 or None in self.shape[1:]:
            return None
        return tuple(d for d in self.shape[1:] if d is not None)

    @property
    def sample_shape(self) -> Shape | None:
        """The declared shape without the batch axis."""
        if self.shape is None or self.batch_axis is None:
            return self.shape
        return self.shape[: self.batch_axis] + self.shape[self.batch_axis + 1 :]


def batch_axes(
    inputs: Sequence[InputSpec], outputs: Sequence[InputSpec] = ()
) -> tuple[list[InputSpec], list[InputSpec]]:
    """The inputs and outputs with their batch axes read from their declared dimensions (see
    the module's rule)."""
    first = next((spec.shape for spec in inputs if spec.shape != ()), None)
    batch = first[0] if first else None
    placed = [replace(spec, batch_axis=_batch_axis(spec.shape, batch)) for spec in inputs]
    return placed, [_output_axis(spec, batch, placed) for spec in outputs]


def _output_axis(spec: InputSpec, batch: int | None, inputs: Sequence[InputSpec]) -> InputSpec:
    """An output's batch axis: from its declared dimensions, or, where they say nothing (every
    one dynamic, as exporters leave a recurrent state's), from the one input of its rank (the
    state it returns)."""
    shape = spec.shape
    if shape and all(d is None for d in shape):
        same_rank = [i for i in inputs if i.shape is not None and len(i.shape) == len(shape)]
        if len(same_rank) == 1:
            return replace(spec, batch_axis=same_rank[0].batch_axis)
    return replace(spec, batch_axis=_batch_axis(shape, batch))


def _batch_axis(shape: Shape | None, batch: int | None) -> int | None:
    if shape is None:
        return 0  # the rank is unknown: the first axis, as most models have it
    if not shape:
        return None
    if shape[0] is None or shape[0] == batch:
        return 0
    if batch is not None:
        return next((axis for axis, d in enumerate(shape) if d is None or d == batch), None)
    dynamic = [axis for axis, d in enumerate(shape) if d is None]
    return dynamic[0] if dynamic else None


def model_fixed_batch(inputs: Sequence[InputSpec]) -> int | None:
    """The only batch size the model accepts (its first batched input's fixed batch), or
    None where the batch is dynamic."""
    batched = [spec for spec in inputs if spec.batch_axis is not None]
    return batched[0].fixed_batch if batched else None


def graph_inputs(model: onnx.ModelProto) -> list[InputSpec]:
    """The inputs an ONNX graph declares (not its initializers, which older exporters list as
    inputs too), with their batch axes."""
    return graph_ports(model)[0]


def graph_ports(model: onnx.ModelProto) -> tuple[list[InputSpec], list[InputSpec]]:
    """The inputs and outputs an ONNX graph declares, with their batch axes."""
    initializers = {tensor.name for tensor in model.graph.initializer}
    declared = [_spec(value) for value in model.graph.input if value.name not in initializers]
    return batch_axes(declared, [_spec(value) for value in model.graph.output])


def _spec(value: onnx.ValueInfoProto) -> InputSpec:
    from onnx import helper

    tensor_type = value.type.tensor_type
    dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).type
    if not tensor_type.HasField("shape"):
        return InputSpec(value.name, dtype, None)
    # Some exporters (Paddle2ONNX) write a dynamic dimension as the value -1, not as a name.
    dims = tuple(
        d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
        for d in tensor_type.shape.dim
    )
    return InputSpec(value.name, dtype, dims)


def pack(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """One structured array of named arrays that share their first (sample) axis."""
    counts = {name: array.shape[0] if array.ndim else None for name, array in arrays.items()}
    if len(set(counts.values())) != 1 or None in counts.values():
        shown = ", ".join(f"{name}: {count}" for name, count in counts.items())
        raise ValueError(f"every input array must have the same number of samples ({shown})")
    return _records(arrays, next(iter(counts.values())) or 0)


def _records(per_sample: Mapping[str, np.ndarray], count: int) -> np.ndarray:
    dtype = np.dtype([(name, array.dtype, array.shape[1:]) for name, array in per_sample.items()])
    packed = np.empty(count, dtype=dtype)
    for name, array in per_sample.items():
        packed[name] = array
    return packed


def feed(batch: np.ndarray, inputs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    """The runtime's feed for `batch`: a plain array for a one-input model, else a field per
    input by name, its batch axis where the model has it (a constant fed once), each cast to
    its input's type. Raises `Unsupported` naming the input that is missing, left over or
    mis-shaped, with the shape and type the model expects."""
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
    return {spec.name: _cast(_model_layout(batch[spec.name], spec), spec) for spec in inputs}


def _model_layout(samples: np.ndarray, spec: InputSpec) -> np.ndarray:
    """A field's samples as the model takes them: a constant (a record holds the whole value:
    the input's declared rank) once, a batched input with its batch axis back in place."""
    constant = spec.shape is not None and samples.ndim - 1 == len(spec.shape)
    if constant or spec.batch_axis is None:
        return np.array(samples[0])  # ascontiguousarray would make a scalar one-dimensional
    return np.ascontiguousarray(np.moveaxis(samples, 0, spec.batch_axis))


def _cast(array: np.ndarray, spec: InputSpec) -> np.ndarray:
    """The array as the input takes it: itself where it already has the input's type and a
    batch of its declared sample shape (no copy, no further checks), else cast or refused."""
    if array.dtype.type is spec.dtype and array.shape[1:] == spec.static_sample:
        return array
    if spec.shape is not None and not _fits(array.shape, spec.shape, spec.batch_axis):
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


def _fits(given: tuple[int, ...], declared: Shape, batch_axis: int | None) -> bool:
    """Whether an array fits a declared shape; the batch axis's size is the batch's own."""
    return len(given) == len(declared) and all(
        d is None or d == g or axis == batch_axis
        for axis, (d, g) in enumerate(zip(declared, given, strict=True))
    )


def _listed(inputs: Sequence[InputSpec]) -> str:
    return ", ".join(spec.describe() for spec in inputs)


def packed_outputs(
    outputs: Sequence[InputSpec], arrays: Sequence[np.ndarray], rows: int
) -> np.ndarray:
    """The outputs that have the batch's `rows` on their batch axis, that axis first: the only
    one as it is, several as one structured array (a field per output, by name). An output
    without a batch axis is left out (`left_out` says why); a model with none is `Unsupported`."""
    if len(outputs) == 1 and outputs[0].batch_axis == 0:
        only = arrays[0]
        if isinstance(only, np.ndarray) and only.ndim and only.shape[0] == rows:
            return only
    kept = {
        spec.name: np.moveaxis(np.asarray(array), spec.batch_axis or 0, 0)
        for spec, array in zip(outputs, arrays, strict=True)
        if left_out(spec, np.shape(array), rows) is None
    }
    if not kept:
        reasons = "; ".join(
            f"'{spec.name}' {left_out(spec, np.shape(array), rows)}"
            for spec, array in zip(outputs, arrays, strict=True)
        )
        raise Unsupported(f"no output of the model has a batch axis to judge ({reasons})")
    return next(iter(kept.values())) if len(kept) == 1 else pack(kept)


def left_out(spec: InputSpec, shape: tuple[int, ...], rows: int) -> str | None:
    """Why an output of `shape` for a batch of `rows` is not judged, or None where it is."""
    if spec.batch_axis is None:
        return f"has no batch axis (declared {spec.describe()})"
    if len(shape) <= spec.batch_axis or shape[spec.batch_axis] != rows:
        return (
            f"is {list(shape)} for a batch of {rows}: not {rows} on its batch axis "
            f"{spec.batch_axis} (declared {spec.describe()})"
        )
    return None


def pack_inputs(
    arrays: Mapping[str, np.ndarray],
    inputs: Sequence[InputSpec],
    constants: Mapping[str, np.ndarray] | None = None,
    outputs: Sequence[InputSpec] = (),
) -> np.ndarray:
    """The records of named arrays given in the model's own layout (each input's batch axis
    where the model has it): each batched input with its batch axis first; a constant (an
    input without a batch axis, a zero-dimensional array, or one of `constants`) repeated in
    every record; and a recurrent state the data does not give (a floating input of fixed
    shape but for its batch axis that one of the model's `outputs` may return) zeros, said
    in the log. Raises ValueError naming the input, its declared shape and the array that
    does not fit."""
    given = {**arrays, **(constants or {})}
    extra = [name for name in given if name not in {spec.name for spec in inputs}]
    if extra:
        raise ValueError(f"'{extra[0]}' is not an input of the model ({_listed(inputs)})")
    batched: dict[str, np.ndarray] = {}
    fixed: dict[str, np.ndarray] = {}
    for spec in inputs:
        value = given.get(spec.name)
        if value is None:
            fixed[spec.name] = _initial_state(spec, outputs)
        elif spec.batch_axis is None or value.ndim == 0 or spec.name in (constants or {}):
            fixed[spec.name] = _constant(value, spec)
        else:
            batched[spec.name] = _samples_first(value, spec)
    count = _sample_count(batched)
    per_sample = {
        spec.name: (
            batched[spec.name]
            if spec.name in batched
            else np.broadcast_to(fixed[spec.name], (count, *fixed[spec.name].shape))
        )
        for spec in inputs
    }
    return _records(per_sample, count)


def _initial_state(spec: InputSpec, outputs: Sequence[InputSpec]) -> np.ndarray:
    """Zeros for a recurrent state the data does not give: of its declared shape where it has
    no batch axis, else of one sample's (repeated for every sample, so fed as a batch)."""
    sample = spec.sample_shape
    returned = next((out for out in outputs if _could_be(out.shape, spec.shape)), None)
    floating = np.dtype(spec.dtype).kind == "f"
    if sample is None or None in sample or returned is None or not floating:
        raise ValueError(f"the model's input {spec.describe()} is missing from the data")
    logger.warning(
        "the data gives no input %s: fed zeros, as the initial state of the model's output '%s'",
        spec.describe(),
        returned.name,
    )
    return np.zeros(tuple(d for d in sample if d is not None), dtype=spec.dtype)


def _could_be(output: Shape | None, state: Shape | None) -> bool:
    """Whether an output's declared shape may be the state's (a dimension it leaves dynamic
    may be any)."""
    if output is None or state is None or len(output) != len(state):
        return False
    return all(o is None or o == d for o, d in zip(output, state, strict=True))


def _constant(value: np.ndarray, spec: InputSpec) -> np.ndarray:
    if (
        spec.batch_axis is None
        and spec.shape is not None
        and not _fits(value.shape, spec.shape, None)
    ):
        raise ValueError(
            f"the model's input {spec.describe()} has no batch axis and takes one value of "
            f"its declared shape, not {value.dtype.name} {list(value.shape)}"
        )
    return value


def _samples_first(value: np.ndarray, spec: InputSpec) -> np.ndarray:
    axis = spec.batch_axis
    assert axis is not None
    if spec.shape is not None and len(spec.shape) != value.ndim:
        raise ValueError(
            f"the model's input {spec.describe()} has its batch on axis {axis}; the data's "
            f"{value.dtype.name} {list(value.shape)} does not have its rank"
        )
    return np.moveaxis(value, axis, 0)


def _sample_count(batched: Mapping[str, np.ndarray]) -> int:
    counts = {name: array.shape[0] for name, array in batched.items()}
    if len(set(counts.values())) != 1:
        shown = ", ".join(f"{name}: {count}" for name, count in counts.items()) or "none given"
        raise ValueError(
            f"every batched input must have the same number of samples on its batch axis ({shown})"
        )
    return next(iter(counts.values()))
