"""How the OpenVINO engine (`autotune.core.knobs.openvino`) probes the machine, builds its int8
variant (NNCF, `workers.building.nncf_quantization`) and compiles its session on the CPU plugin.

The plugin adjusts what it cannot honour without saying so (on a CPU with bf16 kernels its
default precision is bf16, streams are capped by threads and threads by cores), so every
property is set explicitly, read back from the compiled model, and a difference is refused.
"""

from __future__ import annotations

import io
import logging
import re
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.errors import CannotConvert, Unsupported
from autotune.core.knobs.openvino import (
    OV_INT8,
    OV_PERFORMANCE_HINT,
    OV_PRECISIONS,
    OV_STREAMS,
    OpenVino,
)
from workers.building.failures import is_out_of_memory
from workers.building.knobs.base import implements
from workers.building.knobs.engines import OnnxEngineImplementation, onnx_bytes_of
from workers.building.observed_outputs import FirstCallOutputs, ReadsFirstCall
from workers.building.torch_io import exported_output_judging, exported_output_structure
from workers.loading.feeds import InputSpec, batch_axes, feed, graph_ports, model_fixed_batch

if TYPE_CHECKING:
    from autotune.core.knobs.config import TrialConfig
    from workers.building.runtimes import Session
    from workers.building.variants import BuildContext, Variant

logger = logging.getLogger(__name__)

# OpenVINO element type names and the numpy dtype fed to each (Type.bf16.to_dtype() answers
# float16, so the mapping is spelled out).
_OV_INPUT_TYPES = {
    "f32": np.float32,
    "f64": np.float64,
    "f16": np.float16,
    "i64": np.int64,
    "i32": np.int32,
    "u8": np.uint8,
    "i8": np.int8,
    "boolean": np.bool_,
}


@implements
class OpenVinoImplementation(OnnxEngineImplementation, OpenVino):
    def probe(self) -> set[str]:
        try:
            return {"openvino"} if _has_cpu_device() else set()
        except (ImportError, RuntimeError) as error:
            logger.info("openvino is not usable on this node: %s", error)
            return set()

    def check_machine(self, config: TrialConfig) -> None:
        try:
            has_cpu = _has_cpu_device()
        except (ImportError, RuntimeError) as error:
            raise Unsupported(
                f"{self.key}={self.name}: openvino is not usable ({error})"
            ) from error
        if not has_cpu:
            raise Unsupported(f"{self.key}={self.name}: OpenVINO reports no CPU device")
        if config.precision == OV_INT8:
            from workers.building.nncf_quantization import require_nncf

            require_nncf()

    def build_precision(
        self, variant: Variant, config: TrialConfig, context: BuildContext
    ) -> Variant:
        """int8_static quantized by NNCF as the static int8 settings say, its
        `precision.fallback` most sensitive nodes (the ranking ONNX Runtime's int8_static uses,
        of the op types the settings quantize) left in float; any other mode as the mode
        builds it."""
        if config.precision != OV_INT8:
            return super().build_precision(variant, config, context)
        from workers.building.knobs.precisions import (
            calibration_samples,
            most_sensitive,
            static_settings,
        )
        from workers.building.nncf_quantization import quantize_with_nncf
        from workers.building.variants import OnnxVariant

        model_bytes = onnx_bytes_of(variant, self.name)
        samples = calibration_samples(context)
        settings = static_settings(config)
        float_nodes: list[str] = []
        if config.fallback:
            float_nodes = most_sensitive(model_bytes, config, context, settings)
        return OnnxVariant(quantize_with_nncf(model_bytes, samples, float_nodes, settings))

    def conversion_problem(self, onnx_model: bytes) -> str | None:
        try:
            import openvino

            read_onnx(openvino.Core(), onnx_model)
        except ImportError:
            return None
        except CannotConvert as refusal:
            return str(refusal)
        return None

    def session(self, variant: Variant, config: TrialConfig) -> Session:
        return OpenVinoSession(
            onnx_bytes_of(variant, self.name),
            config.threads,
            config.precision,
            str(config.option(OV_PERFORMANCE_HINT.key)),
            int(config.option(OV_STREAMS.key)),
        )


def _has_cpu_device() -> bool:
    import openvino

    return "CPU" in openvino.Core().available_devices


class OpenVinoSession(ReadsFirstCall):
    """An ONNX model compiled by OpenVINO for the CPU with explicit threads, precision,
    performance hint and streams; returns the model's output (several as one structured
    array, `workers.loading.feeds`). `applied` holds the properties read back from the compiled
    model; any that differs from what was asked is refused (`Unsupported`)."""

    def __init__(
        self,
        model_bytes: bytes,
        threads: int,
        precision_hint: str,
        performance_hint: str,
        streams: int,
    ) -> None:
        import openvino
        import openvino.properties as props
        import openvino.properties.hint as hints

        if precision_hint not in OV_PRECISIONS:
            raise Unsupported(f"precision.mode={precision_hint} does not run on openvino")
        core = openvino.Core()
        model = read_onnx(core, model_bytes)
        asked = {
            "threads": str(threads),
            "precision": OV_PRECISIONS[precision_hint],
            "hint": performance_hint,
            "streams": str(streams),
        }
        self._compiled: Any = _compiled_on_cpu(
            core,
            model,
            {
                props.inference_num_threads: threads,
                hints.inference_precision: getattr(openvino.Type, asked["precision"]),
                hints.performance_mode: getattr(hints.PerformanceMode, performance_hint.upper()),
                props.num_streams: streams,
            },
        )
        self.applied: dict[str, str] = {
            "threads": str(self._compiled.get_property(props.inference_num_threads())),
            "precision": self._compiled.get_property(hints.inference_precision()).get_type_name(),
            "hint": str(self._compiled.get_property(hints.performance_mode())).lower(),
            "streams": str(self._compiled.get_property(props.num_streams())),
        }
        _refuse_unapplied(asked, self.applied)
        self._ports = list(self._compiled.outputs)
        metadata, in_file = _as_in_file(model_bytes)
        self.inputs, declared = batch_axes(
            [_input_spec(port) for port in self._compiled.inputs],
            [_port_spec(port, _output_name(port, in_file), np.float32) for port in self._ports],
        )
        self.fixed_batch: int | None = model_fixed_batch(self.inputs)
        self.output_structure = exported_output_structure(metadata)
        self._outputs = FirstCallOutputs(
            declared, self.fixed_batch, lambda: in_file, exported_output_judging(metadata)
        )
        self._per_thread = threading.local()

    def run(self, batch: np.ndarray) -> np.ndarray:
        request = getattr(self._per_thread, "request", None)
        if request is None:
            request = self._per_thread.request = self._compiled.create_infer_request()
        results = request.infer(feed(batch, self.inputs))
        return self._outputs.packed([results[port] for port in self._ports], batch.shape[0])


def _as_in_file(model_bytes: bytes) -> tuple[dict[str, str], list[InputSpec]]:
    """The ONNX model's metadata and declared outputs (OpenVINO keeps neither)."""
    import onnx

    model = onnx.load_from_string(model_bytes)
    metadata = {prop.key: prop.value for prop in model.metadata_props}
    return metadata, graph_ports(model)[1]


def _output_name(port: Any, in_file: list[InputSpec]) -> str:
    """The output's name in the ONNX model (OpenVINO gives a tensor every name it had, as
    an Identity's input and output: `get_any_name` may answer the other)."""
    names = port.get_names()
    return next((spec.name for spec in in_file if spec.name in names), port.get_any_name())


def read_onnx(core: Any, model_bytes: bytes) -> Any:
    """The ONNX model as OpenVINO's own; `CannotConvert` where its ONNX frontend refuses the
    model (an op it has no rule for)."""
    try:
        return core.read_model(io.BytesIO(model_bytes))
    except RuntimeError as error:
        if is_out_of_memory(error):
            raise
        raise CannotConvert(OpenVino.name, "OpenVINO", _one_line(error)) from error


def _compiled_on_cpu(core: Any, model: Any, properties: dict[Any, Any]) -> Any:
    try:
        return core.compile_model(model, "CPU", properties)
    except RuntimeError as error:
        if is_out_of_memory(error):
            raise
        raise Unsupported(
            f"runtime.engine={OpenVino.name}: OpenVINO's CPU plugin cannot compile this model "
            f"({_one_line(error)})"
        ) from error


# Lines of OpenVINO's messages that say where in its sources a check failed, not what failed.
_SOURCE_NOISE = re.compile(
    r"Exception from src/|Check '.*' failed at |FrontEnd API failed with |To facilitate |"
    r"Model wasn't fully converted"
)


def _one_line(error: BaseException) -> str:
    """OpenVINO's multi-line message as one line: the summary of the ops that failed to
    convert where it has one, else its first line that is not a source location."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    summary = lines[lines.index("Summary:") + 1 :] if "Summary:" in lines else []
    failed = [line.removeprefix("-- ") for line in summary if line.startswith("-- ")]
    if failed:
        return "; ".join(failed)
    meaningful = [line for line in lines if not _SOURCE_NOISE.match(line)]
    return (meaningful or lines or [type(error).__name__])[0]


# The applied property -> the setting it comes from, for refusals.
_SETTING_OF = {
    "threads": "runtime.threads",
    "precision": "precision.mode",
    "hint": OV_PERFORMANCE_HINT.key,
    "streams": OV_STREAMS.key,
}


def _refuse_unapplied(asked: dict[str, str], applied: dict[str, str]) -> None:
    for name, value in asked.items():
        if applied[name] != value:
            raise Unsupported(
                f"{_SETTING_OF[name]}: OpenVINO's CPU plugin was asked for {name} {value} "
                f"but compiled the model with {applied[name]}"
            )


def _input_spec(port: Any) -> InputSpec:
    name = port.get_any_name()
    type_name = port.get_element_type().get_type_name()
    dtype = _OV_INPUT_TYPES.get(type_name)
    if dtype is None:
        raise Unsupported(f"the model's input '{name}' has type {type_name}, not supported")
    return _port_spec(port, name, dtype)


def _port_spec(port: Any, name: str, dtype: type[np.generic]) -> InputSpec:
    shape = port.get_partial_shape()
    if shape.rank.is_dynamic:
        return InputSpec(name, dtype, None)
    dims = tuple(None if d.is_dynamic else int(d.get_length()) for d in shape)
    return InputSpec(name, dtype, dims)
