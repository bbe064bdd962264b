"""Model variants: what transforms take and return, and what runtimes run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TorchVariant:
    """A torch module in eval mode; `input_dtype` is what floating inputs are cast to
    (None: float32 as loaded)."""

    module: torch.nn.Module
    input_dtype: torch.dtype | None = None


@dataclass(frozen=True)
class OnnxVariant:
    """A self-contained serialized ONNX model."""

    model_bytes: bytes


Variant = TorchVariant | OnnxVariant


@dataclass(frozen=True)
class BuildContext:
    """What transforms may need besides the model: a few real inputs to trace an export with."""

    sample_inputs: np.ndarray
