"""The onnxruntime session: an execution provider's chain with its options
(`autotune.core.knobs.providers`), a graph optimization level, the model's inputs fed by name
(`workers.loading.feeds`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from autotune.core.errors import Unsupported
from autotune.core.knobs.base import ConfigValue
from autotune.core.knobs.engines import ORT_GRAPH_LEVELS
from autotune.core.knobs.providers import PROVIDER_KEY, PROVIDERS
from workers.building.observed_outputs import FirstCallOutputs, ReadsFirstCall
from workers.building.torch_io import exported_output_judging, exported_output_structure
from workers.loading.feeds import InputSpec, batch_axes, feed, graph_ports, model_fixed_batch

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


class OnnxRuntimeSession(ReadsFirstCall):
    """An onnxruntime session on a registered execution provider (its chain, each with the
    options `provider_settings`, a configuration's engine options, give it) at a graph
    optimization level; returns the model's output (several as one
    structured array, `workers.loading.feeds`). Refuses (`Unsupported`) a provider that is not
    available or that the session silently replaced by a fallback. `configure`, where given,
    sets more of onnxruntime's `SessionOptions` before the session is built (an engine with
    session options of its own, such as a plugin's)."""

    def __init__(
        self,
        model_bytes: bytes,
        threads: int,
        provider: str = "cpu",
        graph_opt: str = "all",
        configure: Callable[[Any], None] | None = None,
        provider_settings: Mapping[str, ConfigValue] | None = None,
    ) -> None:
        import onnxruntime

        wanted = require_provider(provider)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.graph_optimization_level = getattr(
            onnxruntime.GraphOptimizationLevel, ORT_GRAPH_LEVELS[graph_opt]
        )
        if configure is not None:
            configure(options)
        self._session = _loaded(model_bytes, options, PROVIDERS[provider].chain(provider_settings))
        self.providers: list[str] = list(self._session.get_providers())
        if wanted not in self.providers:
            raise Unsupported(
                f"{PROVIDER_KEY}={provider}: onnxruntime could not start {wanted} and "
                f"fell back to {', '.join(self.providers)}"
            )
        self.inputs, declared = batch_axes(
            [_input_spec(port) for port in self._session.get_inputs()],
            [_port_spec(port, np.float32) for port in self._session.get_outputs()],
        )
        self.fixed_batch: int | None = model_fixed_batch(self.inputs)
        self._model_bytes = model_bytes
        metadata = self._session.get_modelmeta().custom_metadata_map
        self.output_structure = exported_output_structure(metadata)
        self._outputs = FirstCallOutputs(
            declared, self.fixed_batch, self._declared_in_file, exported_output_judging(metadata)
        )

    @property
    def output_names(self) -> list[str]:
        return [spec.name for spec in self.outputs]

    def run(self, batch: np.ndarray) -> np.ndarray:
        arrays = self._session.run(None, feed(batch, self.inputs))
        return self._outputs.packed(arrays, batch.shape[0])

    def _declared_in_file(self) -> list[InputSpec]:
        import onnx

        return graph_ports(onnx.load_from_string(self._model_bytes))[1]

    def run_fed(self, fed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every output by name, as the model gives it, for a feed of its inputs."""
        return dict(zip(self.output_names, self._session.run(None, fed), strict=True))


def require_provider(provider: str) -> str:
    """ONNX Runtime's name of a registered `runtime.provider`; `Unsupported` where this
    onnxruntime build does not have it."""
    import onnxruntime

    if provider not in PROVIDERS:
        raise Unsupported(f"{PROVIDER_KEY}={provider!r} is not one of {list(PROVIDERS)}")
    wanted = PROVIDERS[provider].ort_name
    available = onnxruntime.get_available_providers()
    if wanted not in available:
        raise Unsupported(
            f"{PROVIDER_KEY}={provider}: {wanted} is not available in this "
            f"onnxruntime build (available: {', '.join(available)})"
        )
    return wanted


def _loaded(model_bytes: bytes, options: Any, providers: list[tuple[str, dict[str, str]]]) -> Any:
    """The inference session; `Unsupported` where no kernel of the providers runs one of the
    model's nodes (an op, or an op at a type, that onnxruntime does not implement there)."""
    import onnxruntime
    from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as NoKernel

    try:
        return onnxruntime.InferenceSession(model_bytes, options, providers=providers)
    except NoKernel as error:
        detail = str(error).partition("NOT_IMPLEMENTED : ")[2] or str(error)
        names = ", ".join(name for name, _ in providers)
        raise Unsupported(
            f"runtime.engine=onnxruntime: no kernel of {names} runs a node of this model ({detail})"
        ) from error


def _input_spec(port: Any) -> InputSpec:
    dtype = _ORT_INPUT_TYPES.get(port.type)
    if dtype is None:
        raise Unsupported(f"the model's input '{port.name}' has type {port.type}, not supported")
    return _port_spec(port, dtype)


def _port_spec(port: Any, dtype: type[np.generic]) -> InputSpec:
    shape = (
        None if port.shape is None else tuple(d if isinstance(d, int) else None for d in port.shape)
    )
    return InputSpec(port.name, dtype, shape)
