"""Transforms: each takes a variant and the trial's settings and returns a new variant, or
raises `Unsupported` when it cannot build that configuration (the trial is pruned, not failed).

`build_variant` checks the configuration against the knobs' rules on this machine
(`runtimes.check_runtime`), then applies the steps in `PIPELINE` order: the pruning method
works on fp32 weights in the model's own format, the ONNX export (for an engine that runs ONNX,
on a torch model) sees the pruned fp32 model, the precision mode comes next, in the variant's
own format, and moves torch weights to `config.device` (unless the engine applies the precision
itself at run time); the pruning method's last step (2:4 sparse compression) comes last because
its kernels need the final dtype and device.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.errors import Unsupported
from autotune.core.knobs import ENGINES, ModelKind
from autotune.core.knobs.config import TrialConfig
from workers.building.knobs import engine_of, pruning_of
from workers.building.runtimes import check_runtime
from workers.building.torch_io import (
    OUTPUT_JUDGING_KEY,
    OUTPUT_STRUCTURE_KEY,
    TorchOutputs,
    flat_tensors,
    output_names,
    output_structure,
    structure_text,
)
from workers.building.variants import BuildContext, OnnxVariant, TorchVariant, Variant

if TYPE_CHECKING:
    import torch

Transform = Callable[[Variant, TrialConfig, BuildContext], Variant]

TRANSFORMS: dict[str, Transform] = {}
PIPELINE = ("prune", "export_onnx", "precision", "sparsify")
ONNX_OPSET = 17


def register_transform(name: str) -> Callable[[Transform], Transform]:
    def register(transform: Transform) -> Transform:
        if name in TRANSFORMS:
            raise ValueError(f"transform {name!r} is already registered")
        TRANSFORMS[name] = transform
        return transform

    return register


def build_variant(original: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    kind: ModelKind = "torch" if isinstance(original, TorchVariant) else "onnx"
    check_runtime(config, kind)  # before pruning and exporting, which may take a while
    return checked_variant(original, config, context)


def checked_variant(original: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    """`build_variant` for a configuration `check_runtime` has already passed."""
    variant = original
    for name in PIPELINE:
        variant = TRANSFORMS[name](variant, config, context)
    if isinstance(variant, TorchVariant) and isinstance(original, TorchVariant):
        return dataclasses.replace(variant, fixed_batch=original.fixed_batch)
    return variant


@register_transform("prune")
def prune(variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    return pruning_of(config.prune_method).apply(variant, config, context)


@register_transform("export_onnx")
def export_onnx(variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    """For an engine that runs ONNX, export a (pruned, fp32) torch model to ONNX with a
    dynamic batch axis, or the context's fixed batch (a module that takes one batch size alone
    may not trace to a graph of any other)."""
    if ENGINES[config.engine].model_format != "onnx" or isinstance(variant, OnnxVariant):
        return variant
    fixed = context.fixed_batch is not None
    return OnnxVariant(
        torch_to_onnx(variant.module, context.sample_inputs, dynamic_batch=not fixed)
    )


def torch_to_onnx(
    module: torch.nn.Module, sample_inputs: np.ndarray, dynamic_batch: bool = True
) -> bytes:
    """TorchScript-based export first (fast, still shipped), the torch.export-based one if the
    former is gone or cannot trace the model. The outputs are named as the torch sessions name
    them (`torch_io.output_names`), so a variant's outputs match the unmodified model's, and
    the model's metadata says how the module nested them (`torch_io.OUTPUT_STRUCTURE_KEY`) and
    how a torch session judges each (`torch_io.OUTPUT_JUDGING_KEY`), so that the ONNX
    sessions judge them alike and `predict` gives the same shapes on every engine.
    With `dynamic_batch`, the input's first axis is dynamic, and so is each output's that has
    the example's batch on it; else the graph takes the example's batch size alone."""
    import torch

    example = (torch.from_numpy(np.ascontiguousarray(sample_inputs)),)
    with torch.inference_mode():
        outputs = module(*example)
    names = output_names(outputs)
    axes = _dynamic_batch(names, outputs, sample_inputs.shape[0]) if dynamic_batch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            exported = _export_torchscript(module, example, names, axes)
        except Exception as torchscript_error:
            try:
                exported = _export_dynamo(module, example, names, axes)
            except Exception as dynamo_error:
                raise Unsupported(
                    "the model does not export to ONNX "
                    f"(TorchScript exporter: {torchscript_error}; dynamo exporter: {dynamo_error})"
                ) from dynamo_error
    judged = TorchOutputs(None if dynamic_batch else sample_inputs.shape[0])
    judged.numpy(outputs, sample_inputs.shape[0])
    return _with_outputs_told(
        exported,
        names,
        {
            OUTPUT_STRUCTURE_KEY: structure_text(output_structure(outputs)),
            OUTPUT_JUDGING_KEY: json.dumps(judged.judging(names)),
        },
    )


def _with_outputs_told(model_bytes: bytes, names: list[str], metadata: dict[str, str]) -> bytes:
    """The exported model with `metadata`, its outputs named `names` (an exporter names an
    output that is a constant of the module as the constant: an Identity gives it its name)."""
    import onnx

    model = onnx.load_from_string(model_bytes)
    for output, name in zip(model.graph.output, names, strict=True):
        if output.name != name:
            model.graph.node.append(onnx.helper.make_node("Identity", [output.name], [name]))
            output.name = name
    onnx.helper.set_model_props(model, metadata)
    return model.SerializeToString()


DynamicAxes = dict[str, dict[int, str]]


def _dynamic_batch(names: list[str], outputs: object, rows: int) -> DynamicAxes:
    """The input's first axis, and each output's whose first axis has the example's `rows`."""
    batched = [
        name
        for name, tensor in zip(names, flat_tensors(outputs), strict=True)
        if tensor.ndim and tensor.shape[0] == rows
    ]
    return {name: {0: "batch"} for name in ["input", *batched]}


def _export_torchscript(
    module: torch.nn.Module,
    example: tuple[torch.Tensor],
    names: list[str],
    axes: DynamicAxes | None,
) -> bytes:
    import torch

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.onnx"
        torch.onnx.export(
            module, example, str(path), dynamo=False, opset_version=ONNX_OPSET,
            input_names=["input"], output_names=names, dynamic_axes=axes,
        )  # fmt: skip
        return path.read_bytes()


def _export_dynamo(
    module: torch.nn.Module,
    example: tuple[torch.Tensor],
    names: list[str],
    axes: DynamicAxes | None,
) -> bytes:
    import torch

    program = torch.onnx.export(
        module, example, dynamo=True, input_names=["input"], output_names=names,
        dynamic_axes=axes,
    )  # fmt: skip
    if program is None:
        raise RuntimeError("the exporter returned no program")
    return program.model_proto.SerializeToString()


@register_transform("precision")
def precision(variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    if config.precision in ENGINES[config.engine].applies_precisions:
        return variant
    return engine_of(config.engine).build_precision(variant, config, context)


@register_transform("sparsify")
def sparsify(variant: Variant, config: TrialConfig, context: BuildContext) -> Variant:
    return pruning_of(config.prune_method).finish(variant, config)
