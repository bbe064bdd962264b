"""A model's declared output shapes are a hint; the shapes it returns are the truth.

An exporter may leave an output's declared shape stale (declared `[1, seqlen]`, returned
`[T, 1, 8210]`). A session checks the shapes its first call returns (the inspection's probe of
a few samples is that first call for the unmodified model): where an output's returned shape
does not fit its declared one, the returned shape decides, said once in the log, naming the
output, its declared and its returned shape; its batch axis is then its first where that has
the batch's size, else it has none. Of a model whose batch is fixed at one, an output without
a batch axis belongs to that one sample and is judged whole (`sample_outputs` gives it a batch
axis of one in front). Of an ONNX model autotune exported from a torch module, how the torch
session judged each output (its batch axis, whole, or left out: `torch_io.TorchOutputs`) is
in the model's metadata and decides instead, so every engine judges the module's outputs
alike and gives them in the same shapes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from autotune.core.errors import Unsupported
from workers.loading.feeds import InputSpec, left_out, packed_outputs

logger = logging.getLogger(__name__)

_warned: set[tuple[str, str, tuple[int, ...]]] = set()


class UnjudgedOutputs(Unsupported):
    """The model's outputs cannot be judged as they are (the model's doing, not the data's)."""


# How a torch module's output was judged, as its ONNX export records it per output
# (`torch_io.OUTPUT_JUDGING_KEY`): its batch axis, WHOLE, or None where it is left out.
Judged = int | str | None
WHOLE = "whole"


@dataclass(frozen=True)
class ObservedOutputs:
    outputs: list[InputSpec]
    whole: frozenset[str]  # judged whole (see the module's rule)
    left_out: dict[str, str]  # output -> why it is not judged


def observed_outputs(
    declared: Sequence[InputSpec],
    arrays: Sequence[np.ndarray],
    rows: int,
    fixed_batch: int | None,
    in_file: Callable[[], Sequence[InputSpec]] | None = None,
    exported: Sequence[Judged] | None = None,
) -> ObservedOutputs:
    """The outputs as a call on a batch of `rows` returned them (see the module's rule).
    `declared` is what the runtime reports; `in_file`, where given, what the model file
    declares (a runtime may report an unknown shape as `[]`), read only where a returned shape
    disagrees and named in the warning. `exported`, where given (one per output), is how the
    torch module the model was exported from had each judged, which decides instead. Raises
    `UnjudgedOutputs` where no output is judged."""
    if exported is not None and len(exported) == len(declared):
        seen = [_as_exported(*each, rows) for each in zip(declared, arrays, exported, strict=True)]
    else:
        seen = [
            _as_returned(spec, array, rows, fixed_batch, in_file)
            for spec, array in zip(declared, arrays, strict=True)
        ]
    unjudged = {spec.name: reason for spec, _, reason in seen if reason is not None}
    if len(unjudged) == len(seen):
        told = "; ".join(f"'{name}' {reason}" for name, reason in unjudged.items())
        raise UnjudgedOutputs(f"no output of the model has a batch axis to judge ({told})")
    whole = frozenset(spec.name for spec, is_whole, _ in seen if is_whole)
    return ObservedOutputs([spec for spec, _, _ in seen], whole, unjudged)


_Seen = tuple[InputSpec, bool, str | None]  # the output, judged whole, why it is left out


def _as_returned(
    spec: InputSpec,
    array: np.ndarray,
    rows: int,
    fixed_batch: int | None,
    in_file: Callable[[], Sequence[InputSpec]] | None,
) -> _Seen:
    shape = tuple(np.shape(array))
    if not _fits(spec, shape, rows):
        _warn_once(_as_in_file(spec, in_file), shape)
        spec = replace(spec, shape=shape, batch_axis=0 if shape and shape[0] == rows else None)
    if spec.batch_axis is None and fixed_batch == 1:
        return replace(spec, shape=(1, *shape), batch_axis=0), True, None
    return spec, False, left_out(spec, shape, rows)


def _as_exported(spec: InputSpec, array: np.ndarray, judged: Judged, rows: int) -> _Seen:
    shape = tuple(np.shape(array))
    if judged == WHOLE:
        return replace(spec, shape=(1, *shape), batch_axis=0), True, None
    if judged is None:
        return replace(spec, batch_axis=None), False, first_axis_not_the_batch(array, rows)
    spec = replace(spec, batch_axis=int(judged))
    return spec, False, left_out(spec, shape, rows)


def first_axis_not_the_batch(array: np.ndarray, rows: int) -> str:
    """Why a torch module's output is left out of judging (its first axis is not the batch's:
    of a model whose batch is not fixed at one)."""
    return (
        f"is {array.dtype.name} {list(np.shape(array))} for a batch of {rows}: its first axis "
        "is not the batch's"
    )


def sample_outputs(
    outputs: Sequence[InputSpec], arrays: Sequence[np.ndarray], whole: frozenset[str]
) -> list[np.ndarray]:
    """The arrays a call returned, an output judged `whole` given a batch axis of one in
    front."""
    return [
        np.expand_dims(array, 0) if spec.name in whole else array
        for spec, array in zip(outputs, arrays, strict=True)
    ]


class ReadsFirstCall:
    """A session whose outputs a `FirstCallOutputs` reads (`_outputs`)."""

    _outputs: FirstCallOutputs

    @property
    def outputs(self) -> list[InputSpec]:
        return self._outputs.outputs

    @property
    def outputs_left_out(self) -> dict[str, str]:
        """Output -> why it is not judged (known once the first call is read)."""
        return self._outputs.left_out


class FirstCallOutputs:
    """A session's outputs as its first call returned them (`observed_outputs`), and each
    call's arrays read by them (`packed`; the first call is read once, of whichever thread
    calls first)."""

    def __init__(
        self,
        declared: Sequence[InputSpec],
        fixed_batch: int | None,
        in_file: Callable[[], Sequence[InputSpec]],
        exported: Sequence[Judged] | None,
    ) -> None:
        self.outputs = list(declared)  # as observed, once the first call is read
        self.left_out: dict[str, str] = {}  # output -> why it is not judged
        self._whole: frozenset[str] | None = None  # judged whole, once the first call is read
        self._fixed_batch = fixed_batch
        self._in_file = in_file
        self._exported = exported
        self._first_call = threading.Lock()

    def packed(self, arrays: Sequence[np.ndarray], rows: int) -> np.ndarray:
        """The arrays of a call on `rows` samples as `packed_outputs` gives them."""
        whole = self._whole
        if whole is None:
            whole = self._observed(arrays, rows)
        return packed_outputs(self.outputs, sample_outputs(self.outputs, arrays, whole), rows)

    def _observed(self, arrays: Sequence[np.ndarray], rows: int) -> frozenset[str]:
        with self._first_call:
            if self._whole is None:
                observed = observed_outputs(
                    self.outputs, arrays, rows, self._fixed_batch, self._in_file, self._exported
                )
                self.outputs, self.left_out = observed.outputs, observed.left_out
                self._whole = observed.whole
            return self._whole


def _as_in_file(spec: InputSpec, in_file: Callable[[], Sequence[InputSpec]] | None) -> InputSpec:
    if in_file is None:
        return spec
    return next((declared for declared in in_file() if declared.name == spec.name), spec)


def _fits(spec: InputSpec, shape: tuple[int, ...], rows: int) -> bool:
    """Whether `shape` fits the declared one, the batch's `rows` on its batch axis (a dynamic
    batch axis that returns another size is not the batch's: `[?, 1, C]` returning
    `[20, 1, C]` for one sample)."""
    if spec.shape is None:
        return True
    return len(shape) == len(spec.shape) and all(
        g == rows if axis == spec.batch_axis else d is None or d == g
        for axis, (d, g) in enumerate(zip(spec.shape, shape, strict=True))
    )


def _warn_once(spec: InputSpec, shape: tuple[int, ...]) -> None:
    key = (spec.name, spec.describe(), shape)
    if spec.shape is None or key in _warned:  # a shape never declared is not stale
        return
    _warned.add(key)
    logger.warning(
        "the model's output %s returns %s: its returned shape is used, not its declared one",
        spec.describe(),
        list(shape),
    )
