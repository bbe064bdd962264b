"""Load a workload's model and data, resolving entry points and refusing unsafe input.

ONNX models are data, never code: they are read with `onnx`, their external-data paths must
stay inside the model file's directory, and nothing is unpickled (`np.load` runs with
`allow_pickle=False`; weights for an entry point's module are read with safetensors, never
`torch.load`). Python entry points are trusted local code.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from autotune.core.contract import DataRef, ModelRef
from autotune.core.errors import RequestError
from autotune.core.model_files import (
    external_data_files,
    onnx_sha256,
    resolve_entry_point,
)
from workers.loading.feeds import InputSpec, graph_ports, model_fixed_batch, pack, pack_inputs
from workers.loading.onnx_normalize import normalize_onnx

if TYPE_CHECKING:
    import onnx
    import torch


@dataclass(frozen=True)
class TorchModel:
    module: torch.nn.Module
    entry_point: str
    sha256: str
    kind: Literal["torch"] = "torch"


# An ONNX model's declared inputs and outputs, with their batch axes.
Ports = tuple[list[InputSpec], list[InputSpec]]


@dataclass(frozen=True)
class OnnxModel:
    model_bytes: bytes
    path: str
    sha256: str
    ports: Ports  # read when the model is, so its data is packed without parsing it again
    kind: Literal["onnx"] = "onnx"


LoadedModel = TorchModel | OnnxModel


# Of a workload's samples, one in CALIBRATION_SHARE is held out of the evaluation to calibrate
# static int8 quantization (at least one fixed batch, at most MAX_CALIBRATION_SAMPLES, never
# more than half of them): `split_calibration`. Data of fewer than MIN_SPLIT_SAMPLES is all
# evaluated and holds none (too few to calibrate on and still judge by).
CALIBRATION_SHARE = 8
MAX_CALIBRATION_SAMPLES = 256
MIN_SPLIT_SAMPLES = 64


@dataclass(frozen=True)
class EvalData:
    """Evaluation inputs (first axis = samples; for a model with several inputs a structured
    array with a field per input, `workers.loading.feeds`) and optional labels of the same
    length; `calibration_inputs`, the request's other samples, calibrate quantization and
    are never evaluated (`split_calibration`)."""

    inputs: np.ndarray
    labels: np.ndarray | None
    field: str
    calibration_inputs: np.ndarray

    @property
    def n_samples(self) -> int:
        return int(self.inputs.shape[0])


def call_entry_point(entry_point: str, python_path: list[str], field: str) -> Any:
    """Resolve a factory entry point and call it without arguments."""
    factory = resolve_entry_point(entry_point, python_path, field)
    if not callable(factory):
        raise RequestError(field, "must name a callable", entry_point)
    try:
        return factory()
    except Exception as error:
        raise RequestError(
            field, f"must run ({type(error).__name__}: {error})", entry_point
        ) from error


def load_model(ref: ModelRef, python_path: list[str]) -> LoadedModel:
    if ref.registered is not None:
        raise RequestError(
            "model.registered",
            "must be resolved to a local ONNX file before it reaches a worker",
            ref.registered,
        )
    if ref.onnx is not None:
        return load_onnx(ref.onnx, "model.onnx")
    if ref.hf is not None:
        assert ref.task is not None  # the contract requires it with 'hf'
        return load_torch(f"{HF_PREFIX}{ref.task}:{ref.hf}", python_path)
    assert ref.entry_point is not None  # the contract guarantees exactly one source
    return load_torch(ref.entry_point, python_path, ref.weights)


# How a Hugging Face model is named where an entry point would be ('hf:<task>:<directory>'),
# so that whatever rebuilds a torch model from its entry point (an artifact, a tensor-parallel
# rank) rebuilds it the same way.
HF_PREFIX = "hf:"


def load_torch(entry_point: str, python_path: list[str], weights: str | None = None) -> TorchModel:
    """The module the entry point returns (or the Hugging Face model it names), with `weights`
    (safetensors) loaded into it strictly; hashed after the weights are in, so other weights
    give another sha256."""
    import torch

    if entry_point.startswith(HF_PREFIX):
        from workers.loading.hf import load_hf_module

        task, directory = entry_point.removeprefix(HF_PREFIX).split(":", 1)
        module = load_hf_module(directory, task)  # type: ignore[arg-type]
    else:
        module = call_entry_point(entry_point, python_path, "model.entry_point")
    if not isinstance(module, torch.nn.Module):
        raise RequestError(
            "model.entry_point", "must return a torch.nn.Module", type(module).__name__
        )
    if weights is not None:
        load_weights(module, weights)
    return TorchModel(module=module.eval(), entry_point=entry_point, sha256=torch_sha256(module))


def load_weights(module: torch.nn.Module, path: str) -> None:
    """Load a safetensors file into `module`; every name and shape must match its state dict."""
    from safetensors.torch import load_file

    if not Path(path).is_file():
        raise RequestError("model.weights", "file must exist", path)
    try:
        state = load_file(path)
    except Exception as error:
        raise RequestError(
            "model.weights", f"must be a safetensors file ({error})", path
        ) from error
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as error:
        mismatch = " ".join(str(error).split())
        raise RequestError(
            "model.weights", f"tensor names and shapes must match the module's ({mismatch})", path
        ) from error


def torch_sha256(module: torch.nn.Module) -> str:
    """Hash of the state dict: each tensor's name, dtype, shape and bytes, in name order."""
    import torch

    digest = hashlib.sha256()
    state = module.state_dict()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def load_onnx(path: str, field: str) -> OnnxModel:
    """Read an ONNX file (and its confined external data) into one self-contained model, its
    constant weights as initializers (`workers.loading.onnx_normalize`); the hash is the file's."""
    import onnx

    file = Path(path)
    if not file.is_file():
        raise RequestError(field, "file must exist", path)
    try:
        model = onnx.load_model(str(file), load_external_data=False)
    except Exception as error:
        raise RequestError(field, f"must be an ONNX model ({error})", path) from error
    external = external_data_files(model, file, field)
    _load_external_data(model, file, field)
    try:
        onnx.checker.check_model(model)
    except Exception as error:
        raise RequestError(field, f"must be a valid ONNX model ({error})", path) from error
    model = normalize_onnx(model)
    return OnnxModel(
        model_bytes=model.SerializeToString(),
        path=str(file),
        sha256=onnx_sha256(file, external),
        ports=graph_ports(model),
    )


def _load_external_data(model: onnx.ModelProto, file: Path, field: str) -> None:
    from onnx.external_data_helper import load_external_data_for_model

    try:
        load_external_data_for_model(model, str(file.parent))
    except Exception as error:
        raise RequestError(field, f"external data must load ({error})", str(file)) from error


def load_data(
    ref: DataRef, python_path: list[str], model: ModelRef, loaded: LoadedModel | None = None
) -> EvalData:
    """The evaluation data; text and images are prepared by `model`'s own tokenizer or image
    processor, so they need a Hugging Face model. Named arrays for an ONNX model (`loaded`)
    are read in its own layout: each input's batch axis where the model declares it, its
    constants (`ref.constants`, or zero-dimensional arrays) given once, and inputs it can be
    fed zeros for left out (`workers.loading.feeds.pack_inputs`)."""
    declared = declared_ports(loaded)
    if ref.npz is not None:
        inputs, labels = _read_npz(ref.npz, declared, ref.constants)
        field = "data.npz"
    elif ref.entry_point is not None:
        field = "data.entry_point"
        inputs, labels = _call_data_entry_point(ref.entry_point, python_path)
    else:
        field = "data.text" if ref.text is not None else "data.images"
        inputs, labels = _hf_data(ref, model, field)
    if ref.constants and declared is None:
        raise RequestError(
            "data.constants", "must name inputs of an ONNX model", sorted(ref.constants)
        )
    inputs, labels = _checked_data(inputs, labels, field, declared, ref.constants)
    fixed = model.fixed_batch or (model_fixed_batch(declared[0]) if declared else None)
    return split_calibration(inputs, labels, field, fixed)


def split_calibration(
    inputs: np.ndarray, labels: np.ndarray | None, field: str, fixed_batch: int | None = None
) -> EvalData:
    """The request's samples as evaluation data and calibration samples held out of it:
    `calibration_count` of them, each in the middle of its own equal stretch of the data (so
    data sorted by class calibrates on every class and still evaluates every class); always
    the same ones."""
    count = calibration_count(len(inputs), fixed_batch)
    held = (2 * np.arange(count) + 1) * len(inputs) // (2 * count) if count else np.arange(0)
    evaluated = np.ones(len(inputs), dtype=bool)
    evaluated[held] = False
    return EvalData(
        inputs=np.ascontiguousarray(inputs[evaluated]),
        labels=None if labels is None else labels[evaluated],
        field=field,
        calibration_inputs=np.ascontiguousarray(inputs[held]),
    )


def calibration_count(n_samples: int, fixed_batch: int | None = None) -> int:
    """How many of `n_samples` are held out to calibrate on (see CALIBRATION_SHARE)."""
    if n_samples < MIN_SPLIT_SAMPLES:
        return 0
    wanted = max(n_samples // CALIBRATION_SHARE, fixed_batch or 1)
    return min(wanted, MAX_CALIBRATION_SAMPLES, n_samples // 2)


def declared_ports(model: LoadedModel | None) -> Ports | None:
    """The inputs and outputs an ONNX model declares (None for a torch model: it takes one
    array)."""
    return model.ports if isinstance(model, OnnxModel) else None


def _hf_data(ref: DataRef, model: ModelRef, field: str) -> tuple[np.ndarray, np.ndarray | None]:
    from workers.loading.hf import image_inputs, read_labels, text_inputs

    if model.hf is None:
        raise RequestError(
            field, "needs a Hugging Face model ('model.hf'), whose preprocessing it uses", field
        )
    if ref.text is not None:
        inputs = text_inputs(model.hf, ref.text, ref.sequence_length)
    else:
        assert ref.images is not None  # the contract guarantees exactly one source
        inputs = image_inputs(model.hf, ref.images)
    labels = None if ref.labels is None else read_labels(ref.labels, inputs.shape[0])
    return inputs, labels


def _read_npz(path: str, declared: Ports | None, constants: dict[str, Any]) -> tuple[Any, Any]:
    if not Path(path).is_file():
        raise RequestError("data.npz", "file must exist", path)
    one_array = declared is None or (len(declared[0]) == 1 and not constants)
    try:
        with np.load(path, allow_pickle=False) as archive:
            labels = archive["labels"] if "labels" in archive.files else None
            if "inputs" in archive.files and one_array:
                return archive["inputs"], labels
            named = {name: archive[name] for name in archive.files if name != "labels"}
    except Exception as error:
        raise RequestError(
            "data.npz", f"must be a readable .npz without pickled objects ({error})", path
        ) from error
    first = declared[0][0].name if declared and declared[0] else None
    if "inputs" in named and first is not None and first not in named:
        named[first] = named.pop("inputs")  # the first input's, the others given
    if not named and not constants:
        raise RequestError(
            "data.npz",
            "must hold an array named 'inputs', or one array per model input named like it",
            path,
        )
    return named, labels


def _call_data_entry_point(entry_point: str, python_path: list[str]) -> tuple[Any, Any]:
    result = call_entry_point(entry_point, python_path, "data.entry_point")
    if not isinstance(result, tuple) or len(result) != 2:
        raise RequestError(
            "data.entry_point", "must return a tuple (inputs, labels)", type(result).__name__
        )
    return result


def _checked_data(
    inputs: Any,
    labels: Any,
    field: str,
    declared: Ports | None = None,
    constants: dict[str, Any] | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    if isinstance(inputs, dict) and all(isinstance(a, np.ndarray) for a in inputs.values()):
        inputs = _records(inputs, field, declared, constants or {})
    if not isinstance(inputs, np.ndarray) or inputs.ndim < 1:
        raise RequestError(
            field,
            "inputs must be a numpy array with a sample axis, or a dict of them by input name",
            type(inputs).__name__,
        )
    if labels is not None and (not isinstance(labels, np.ndarray) or labels.ndim < 1):
        raise RequestError(field, "labels must be a numpy array or None", type(labels).__name__)
    if inputs.shape[0] == 0:
        raise RequestError(field, "must hold at least one sample", list(inputs.shape))
    if labels is not None and labels.shape[0] != inputs.shape[0]:
        raise RequestError(
            field, "inputs and labels must have the same length", (inputs.shape[0], labels.shape[0])
        )
    if inputs.dtype.kind == "f":
        # Models take float32; float64 is merely numpy's default.
        inputs = inputs.astype(np.float32, copy=False)
    return np.ascontiguousarray(inputs), labels


def _records(
    arrays: dict[str, np.ndarray],
    field: str,
    declared: Ports | None,
    constants: dict[str, Any],
) -> np.ndarray:
    """One array per model input by name, as records (`workers.loading.feeds`)."""
    try:
        if declared is None:
            return pack(arrays)
        given = {name: np.asarray(value) for name, value in constants.items()}
        return pack_inputs(arrays, declared[0], given, declared[1])
    except ValueError as error:
        raise RequestError(field, str(error), sorted({*arrays, *constants})) from error
