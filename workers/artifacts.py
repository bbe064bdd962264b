"""Exported artifacts: a configuration's optimized model written by its engine
(`EngineImplementation.export`), loaded again as its trial ran it, and re-evaluated."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from autotune.core.artifacts import ONNX_ARTIFACT, VARIANT_FILE, WEIGHTS_ARTIFACT
from autotune.core.contract import ArtifactInfo, TrialSpec, Workload
from autotune.core.contract.trials import FLOAT_NODES_FIELD
from autotune.core.errors import RequestError
from autotune.core.knobs.config import TrialConfig
from workers.building.exports import FIXED_BATCH_KEY
from workers.building.knobs import engine_of
from workers.building.pruning import pruned_skeleton
from workers.building.runtimes import Session, build_session, opened
from workers.building.transforms import TRANSFORMS
from workers.building.variants import BuildContext, OnnxVariant, TorchVariant, Variant
from workers.cache import WorkloadCache, default_cache
from workers.loading.workloads import load_onnx, load_torch


def export_artifact(
    spec: TrialSpec, out_dir: str, store: WorkloadCache | None = None
) -> ArtifactInfo:
    """Write the configuration's optimized model into `out_dir`, as its engine exports it
    (`workers.building.exports`)."""
    loaded = (store or default_cache()).get(spec.workload)
    config = loaded.parse(spec.config)
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    return engine_of(config.engine).export(loaded, spec, config, directory)


def evaluate_artifact(path: str, workload: Workload, store: WorkloadCache | None = None) -> float:
    """Reload an exported artifact (its file or its directory) and return its quality on the
    workload's data with the workload's metric, batched as trials are."""
    loaded = (store or default_cache()).get(workload)
    session, _ = load_artifact(path, workload.python_path)
    with opened(session):
        return loaded.score(session)


def load_artifact(path: str, python_path: list[str]) -> tuple[Session, TrialConfig]:
    """A session for an artifact written by `export_artifact`, run as its trial ran it: the
    engine, precision, threads and engine options of the configuration beside it
    (`variant.json`; an ONNX file without one runs on ONNX Runtime's defaults), and that
    configuration. Close the session after use (`workers.building.runtimes.opened`)."""
    from autotune.core.knobs.config import parse_config

    file = _artifact_file(Path(path))
    description = _description(file)
    if file.suffix == ".onnx":
        config = parse_config(description.get("config", {}), "onnx")
        variant: Variant = OnnxVariant(load_onnx(str(file), "artifact").model_bytes)
    else:
        config = parse_config(description["config"], "torch")
        entry_point = description["model_entry_point"]
        float_modules = description.get(FLOAT_NODES_FIELD)
        variant = _rebuild_torch_variant(file, entry_point, config, python_path, float_modules)
        variant = dataclasses.replace(variant, fixed_batch=description.get(FIXED_BATCH_KEY))
    return build_session(variant, config), config


def _description(file: Path) -> dict[str, Any]:
    description_file = file.parent / VARIANT_FILE
    if description_file.is_file():
        description: dict[str, Any] = json.loads(description_file.read_text())
        return description
    if file.suffix == ".onnx":
        return {}
    raise RequestError("artifact", f"must have {VARIANT_FILE} beside it", str(file))


def _artifact_file(path: Path) -> Path:
    candidates = [path] if path.is_file() else [path / ONNX_ARTIFACT, path / WEIGHTS_ARTIFACT]
    for candidate in candidates:
        if candidate.is_file() and candidate.suffix in (".onnx", ".safetensors"):
            return candidate
    raise RequestError("artifact", f"must be a {ONNX_ARTIFACT} or {WEIGHTS_ARTIFACT}", str(path))


def _rebuild_torch_variant(
    weights_file: Path,
    entry_point: str,
    config: TrialConfig,
    python_path: list[str],
    float_modules: list[str] | None,
) -> TorchVariant:
    from safetensors.torch import load_file

    module = load_torch(entry_point, python_path).module
    module = pruned_skeleton(module, config)
    module.load_state_dict(load_file(str(weights_file)), strict=True)
    context = BuildContext(np.empty(0), float_modules=float_modules)
    variant = TRANSFORMS["precision"](TorchVariant(module), config, context)
    assert isinstance(variant, TorchVariant)
    return variant
