"""Runtimes: each builds an inference session for a variant, exposing `run(batch) -> outputs`.

Sessions take and return numpy arrays, so the time of moving data in and out of the framework
is part of every measured call. Both runtimes run on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from autotune.errors import Unsupported
from workers.config import TrialConfig
from workers.variants import OnnxVariant, TorchVariant, Variant

if TYPE_CHECKING:
    import torch


class Session(Protocol):
    @property
    def fixed_batch(self) -> int | None:
        """The only batch size the model accepts, or None when its batch axis is dynamic."""

    def run(self, batch: np.ndarray) -> np.ndarray: ...


Runtime = Callable[[Variant, TrialConfig], Session]

RUNTIMES: dict[str, Runtime] = {}


def register_runtime(name: str) -> Callable[[Runtime], Runtime]:
    def register(runtime: Runtime) -> Runtime:
        if name in RUNTIMES:
            raise ValueError(f"runtime {name!r} is already registered")
        RUNTIMES[name] = runtime
        return runtime

    return register


def build_session(variant: Variant, config: TrialConfig) -> Session:
    return RUNTIMES[config.engine](variant, config)


class TorchEagerSession:
    """Runs a torch module in inference mode; floating outputs come back as float32."""

    fixed_batch: int | None = None

    def __init__(self, variant: TorchVariant, threads: int) -> None:
        import torch

        self._torch = torch
        self._module = variant.module
        self._input_dtype = variant.input_dtype
        self._threads = threads

    def run(self, batch: np.ndarray) -> np.ndarray:
        # torch's thread count is process-wide and another session (the reference model's)
        # may have changed it since this one was built; checking costs well under a microsecond.
        if self._torch.get_num_threads() != self._threads:
            self._torch.set_num_threads(self._threads)
        with self._torch.inference_mode():
            inputs = self._torch.from_numpy(batch)
            if self._input_dtype is not None and inputs.is_floating_point():
                inputs = inputs.to(self._input_dtype)
            return _to_numpy(_first_tensor(self._module(inputs)))


def _first_tensor(outputs: Any) -> torch.Tensor:
    """The model's output tensor; of a tuple or list of outputs, the first."""
    import torch

    while isinstance(outputs, tuple | list) and outputs:
        outputs = outputs[0]
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(f"the model must return a tensor, got {type(outputs).__name__}")
    return outputs


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    if tensor.is_floating_point():
        tensor = tensor.float()
    return tensor.detach().cpu().numpy()


@register_runtime("torch_eager")
def torch_eager(variant: Variant, config: TrialConfig) -> Session:
    if not isinstance(variant, TorchVariant):
        raise Unsupported("runtime.engine=torch_eager runs torch models only")
    return TorchEagerSession(variant, config.threads)


# onnxruntime's input type names and the numpy dtype fed to each.
_ORT_INPUT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(bool)": np.bool_,
}


class OnnxRuntimeSession:
    """An onnxruntime session on the CPUExecutionProvider; returns the model's first output."""

    def __init__(self, model_bytes: bytes, threads: int) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            model_bytes, options, providers=["CPUExecutionProvider"]
        )
        inputs = self._session.get_inputs()
        if len(inputs) != 1:
            raise Unsupported(f"the model takes {len(inputs)} inputs; autotune feeds exactly one")
        self._input_name = inputs[0].name
        self._input_dtype = _ORT_INPUT_TYPES.get(inputs[0].type)
        if self._input_dtype is None:
            raise Unsupported(f"the model's input type {inputs[0].type} is not supported")
        leading = inputs[0].shape[0] if inputs[0].shape else None
        self.fixed_batch: int | None = leading if isinstance(leading, int) else None

    def run(self, batch: np.ndarray) -> np.ndarray:
        feed = {self._input_name: batch.astype(self._input_dtype, copy=False)}
        return np.asarray(self._session.run(None, feed)[0])


@register_runtime("onnxruntime")
def onnxruntime_cpu(variant: Variant, config: TrialConfig) -> Session:
    if not isinstance(variant, OnnxVariant):
        raise Unsupported("runtime.engine=onnxruntime needs an ONNX variant")
    return OnnxRuntimeSession(variant.model_bytes, config.threads)
