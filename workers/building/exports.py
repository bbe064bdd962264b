"""Writing an optimized model: the two formats the engines export (`EngineImplementation.export`).

An ONNX engine writes `model.onnx`, the exact ONNX model its trial ran, with an input example
(the first evaluation inputs, fed by input name) and the outputs ONNX Runtime gives for it. A
torch engine writes `model.safetensors` with the variant's pruned fp32 weights; loading
re-applies the precision deterministically. Beside either, `variant.json`: the configuration
(and for torch the model's entry point; for an int8 model that keeps nodes in float, their
names: ONNX nodes, or torch's Linear modules by qualified name), so the artifact runs as its
trial did.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.artifacts import (
    INPUT_EXAMPLE_FILE,
    INPUT_EXAMPLE_SAMPLES,
    ONNX_ARTIFACT,
    OUTPUT_EXAMPLE_FILE,
    VARIANT_FILE,
    WEIGHTS_ARTIFACT,
)
from autotune.core.contract import ArtifactInfo, TrialSpec
from autotune.core.contract.trials import FLOAT_NODES_FIELD
from autotune.core.knobs.config import TrialConfig
from autotune.core.model_files import file_sha256
from workers.building.quantization import float_nodes_of
from workers.building.variants import OnnxVariant, TorchVariant

if TYPE_CHECKING:
    from workers.cache import LoadedWorkload


def export_onnx(
    loaded: LoadedWorkload, spec: TrialSpec, config: TrialConfig, directory: Path
) -> ArtifactInfo:
    variant = loaded.variant_for(config)
    assert isinstance(variant, OnnxVariant)  # an ONNX engine's pipeline ends in ONNX
    path = directory / ONNX_ARTIFACT
    path.write_bytes(variant.model_bytes)
    write_examples(variant.model_bytes, loaded.data.inputs, directory)
    description: dict[str, Any] = {"config": spec.config, "model_sha256": loaded.model.sha256}
    if config.fallback:
        description[FLOAT_NODES_FIELD] = float_nodes_of(variant.model_bytes)
    describe(directory, description)
    return ArtifactInfo(path=str(path), format="onnx", sha256=file_sha256(path))


def write_examples(model_bytes: bytes, inputs: np.ndarray, directory: Path) -> None:
    """The first inputs as the model's feed (each input by name, in its type) and ONNX
    Runtime's outputs for them (each by name): what a registry needs for an input example and
    a signature, without running the model again. The example is up to
    INPUT_EXAMPLE_SAMPLES samples, or for a model whose inputs fix the batch size one batch of
    that size (cycling through `inputs` where they are fewer)."""
    from workers.building.ort_session import OnnxRuntimeSession
    from workers.loading.feeds import feed

    session = OnnxRuntimeSession(model_bytes, threads=1)
    count = session.fixed_batch or min(INPUT_EXAMPLE_SAMPLES, inputs.shape[0])
    example = inputs[np.arange(count) % inputs.shape[0]]
    fed = feed(np.ascontiguousarray(example), session.inputs)
    by_name = session.run_fed(fed)
    np.savez(directory / INPUT_EXAMPLE_FILE, **fed)  # type: ignore[arg-type]
    np.savez(directory / OUTPUT_EXAMPLE_FILE, **by_name)  # type: ignore[arg-type]


# The key of a torch artifact's description that holds the only batch size its module takes.
FIXED_BATCH_KEY = "model_fixed_batch"


def export_torch(
    pruned: TorchVariant, loaded: LoadedWorkload, spec: TrialSpec, directory: Path
) -> ArtifactInfo:
    """The pruned fp32 weights, with the model's entry point that rebuilds the module (and
    the only batch size it takes, where the request fixed one; and for a variant that keeps
    Linear modules in float, `precision.fallback`, their names: those the trial's variant
    kept, so that loading re-applies the precision to the very variant measured)."""
    from safetensors.torch import save_file

    from workers.loading.workloads import TorchModel

    weights = {name: t.detach().contiguous() for name, t in pruned.module.state_dict().items()}
    path = directory / WEIGHTS_ARTIFACT
    save_file(weights, str(path))
    assert isinstance(loaded.model, TorchModel)
    entry_point, model_sha256 = loaded.model.entry_point, loaded.model.sha256
    description: dict[str, Any] = {"config": spec.config, "model_entry_point": entry_point}
    if loaded.workload.model.fixed_batch is not None:
        description[FIXED_BATCH_KEY] = loaded.workload.model.fixed_batch
    config = loaded.parse(spec.config)
    if config.fallback:
        measured = loaded.variant_for(config)
        assert isinstance(measured, TorchVariant)  # a torch engine's pipeline keeps torch
        description[FLOAT_NODES_FIELD] = list(measured.float_modules)
    describe(directory, {**description, "model_sha256": model_sha256})
    return ArtifactInfo(path=str(path), format="safetensors", sha256=file_sha256(path))


def describe(directory: Path, description: dict[str, Any]) -> None:
    """The artifact's description, written last: an export that stopped half-way has none
    (a resume re-uses only a whole export, `autotune.core.artifacts.previous_export`)."""
    (directory / VARIANT_FILE).write_text(json.dumps(description, indent=2, sort_keys=True))
