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
    """

    module: torch.nn.Module
    input_dtype: torch.dtype | None = None
    fixed_batch: int | None = None


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
    keeps in float (None where no data is at hand)."""

    sample_inputs: np.ndarray
    calibration_inputs: np.ndarray | None = None
    fixed_batch: int | None = None
    ranked_nodes: Callable[[bytes, str], Sequence[str]] | None = None
