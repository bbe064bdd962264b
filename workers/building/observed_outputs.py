"""A model's declared output shapes are a hint; the shapes it returns are the truth.

An exporter may leave an output's declared shape stale (declared `[1, seqlen]`, returned
`[T, 1, 8210]`). A session checks the shapes its first call returns (the inspection's probe of
a few samples is that first call for the unmodified model): where an output's returned shape
does not fit its declared one, the returned shape decides, said once in the log, naming the
output, its declared and its returned shape; its batch axis is then its first where that has
the batch's size, else it has none. Of a model whose batch is fixed at one, an output without
a batch axis belongs to that one sample and is judged whole (`sample_outputs` gives it a batch
axis of one in front).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from autotune.core.errors import Unsupported
from workers.loading.feeds import InputSpec, left_out

logger = logging.getLogger(__name__)

_warned: set[tuple[str, str, tuple[int, ...]]] = set()


class UnjudgedOutputs(Unsupported):
    """The model's outputs cannot be judged as they are (the model's doing, not the data's)."""


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
) -> ObservedOutputs:
    """The outputs as a call on a batch of `rows` returned them (see the module's rule).
    `declared` is what the runtime reports; `in_file`, where given, what the model file
    declares (a runtime may report an unknown shape as `[]`), read only where a returned shape
    disagrees and named in the warning. Raises `UnjudgedOutputs` where no output is judged."""
    observed, whole = [], set()
    for spec, array in zip(declared, arrays, strict=True):
        shape = tuple(np.shape(array))
        if not _fits(spec, shape, rows):
            _warn_once(_as_in_file(spec, in_file), shape)
            spec = replace(spec, shape=shape, batch_axis=0 if shape and shape[0] == rows else None)
        if spec.batch_axis is None and fixed_batch == 1:
            spec = replace(spec, shape=(1, *shape), batch_axis=0)
            whole.add(spec.name)
        observed.append(spec)
    reasons = {
        spec.name: left_out(
            spec, (1, *np.shape(array)) if spec.name in whole else np.shape(array), rows
        )
        for spec, array in zip(observed, arrays, strict=True)
    }
    unjudged = {name: reason for name, reason in reasons.items() if reason is not None}
    if len(unjudged) == len(observed):
        told = "; ".join(f"'{name}' {reason}" for name, reason in unjudged.items())
        raise UnjudgedOutputs(f"no output of the model has a batch axis to judge ({told})")
    return ObservedOutputs(observed, frozenset(whole), unjudged)


def sample_outputs(
    outputs: Sequence[InputSpec], arrays: Sequence[np.ndarray], whole: frozenset[str]
) -> list[np.ndarray]:
    """The arrays a call returned, an output judged `whole` given a batch axis of one in
    front."""
    return [
        np.expand_dims(array, 0) if spec.name in whole else array
        for spec, array in zip(outputs, arrays, strict=True)
    ]


def _as_in_file(spec: InputSpec, in_file: Callable[[], Sequence[InputSpec]] | None) -> InputSpec:
    if in_file is None:
        return spec
    return next((declared for declared in in_file() if declared.name == spec.name), spec)


def _fits(spec: InputSpec, shape: tuple[int, ...], rows: int) -> bool:
    if spec.shape is None:
        return True
    return len(shape) == len(spec.shape) and all(
        d is None or d == g or (axis == spec.batch_axis and g == rows)
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
