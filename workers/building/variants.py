"""Model variants: what transforms take and return, and what runtimes run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TorchVariant:
    """A torch module in eval mode; `input_dtype` is what floating inputs are cast to
    (None: float32 as loaded).

    Device: a variant built for a configuration has its weights on that configuration's
    `TrialConfig.device` (the precision transform moves them; before it, weights are on the
    CPU). Runtimes read `config.device` to place the inputs, and return outputs on the CPU.
    `fixed_batch`: the only batch size the module takes, as the request says (None: any).
    `float_modules`: of a dynamic int8 variant, the qualified names of the Linear modules it
    keeps in float (`precision.fallback`), which its exported artifact names.
    """

    module: torch.nn.Module
    input_dtype: torch.dtype | None = None
    fixed_batch: int | None = None
    float_modules: tuple[str, ...] = ()


@dataclass(frozen=True)
class OnnxVariant:
    """A self-contained serialized ONNX model."""

    model_bytes: bytes


Variant = TorchVariant | OnnxVariant


@dataclass(frozen=True)
class BuildContext:
    """What transforms may need besides the model: a few real inputs to trace an export with
    (one batch of `fixed_batch` where the model takes no other size: the export then fixes its
    batch too), and the samples held out of the workload's evaluation for static quantization
    to calibrate on (it uses a bounded, deterministic subset; None where no data is at hand).
    `ranked_nodes(model_bytes, mode)`: that fp32 ONNX model's quantizable nodes, most sensitive
    to the int8 `mode` first (`workers.building.sensitivity`), which `precision.fallback`
    keeps in float (None where no data is at hand); `ranked_modules(module, mode)` the same
    of an fp32 torch module's Linear modules, by qualified name
    (`workers.building.torch_sensitivity`). `float_modules`: the Linear modules a torch
    fallback variant keeps in float where they are known already (an exported artifact names
    those its trial measured), used instead of a ranking."""

    sample_inputs: np.ndarray
    calibration_inputs: np.ndarray | None = None
    fixed_batch: int | None = None
    ranked_nodes: Callable[[bytes, str], Sequence[str]] | None = None
    ranked_modules: Callable[[torch.nn.Module, str], Sequence[str]] | None = None
    float_modules: Sequence[str] | None = None
