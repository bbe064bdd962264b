"""The tuned artifact as an MLflow model, served as its engine declares (`Engine.served_as`).

- "onnx" (ONNX Runtime): MLflow's `onnx` flavour, run with the measured threads, graph
  optimization level and provider.
- "autotune" (OpenVINO): a pyfunc whose loader (`workers.serving`) runs the artifact on the
  engine it was measured on, with the measured settings; autotune's own packages travel in
  the model's code.
- "files" (torch): the files as they are (pruned safetensors weights and the recipe that
  rebuilds the variant): MLflow's pytorch flavour would pickle the module, and
  `autotune.load` rebuilds it.

Either MLflow model carries the input example and the outputs the export wrote (its
signature), the measured configuration in its metadata and `variant.json` beside it, and
`model.onnx` is the measured file, byte for byte. Nothing here runs the model.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

from autotune.core.artifacts import (
    INPUT_EXAMPLE_FILE,
    ONNX_ARTIFACT,
    OUTPUT_EXAMPLE_FILE,
    VARIANT_FILE,
    installed_distribution,
)
from autotune.core.knobs import ENGINE_KEY, ENGINES
from autotune.core.knobs.config import default_engine
from autotune.core.knobs.engines import ORT_GRAPH_LEVELS
from autotune.core.knobs.providers import PROVIDERS

SERVING_LOADER = "workers.serving"


def model_directory(artifact_dir: Path, into: Path) -> Path:
    """The directory to log and register for `artifact_dir`: an MLflow model written into
    `into`, or `artifact_dir` itself where its engine serves the files as they are."""
    onnx_file = artifact_dir / ONNX_ARTIFACT
    config = _config(artifact_dir)
    engine = ENGINES.get(str(config.get(ENGINE_KEY, default_engine("onnx"))))
    if not onnx_file.is_file() or engine is None or engine.served_as == "files":
        return artifact_dir
    example, signature = _example_and_signature(artifact_dir)
    common: dict[str, Any] = {
        "input_example": example,
        "signature": signature,
        "metadata": {"autotune_config": config},
        "pip_requirements": _pip_requirements(("numpy", *engine.software)),
    }
    if engine.served_as == "onnx":
        _save_onnx(onnx_file, into, config, common)
    else:
        _save_served(artifact_dir, into, common)
    shutil.copyfile(onnx_file, into / ONNX_ARTIFACT)  # the file that was measured
    if (artifact_dir / VARIANT_FILE).is_file():
        shutil.copyfile(artifact_dir / VARIANT_FILE, into / VARIANT_FILE)
    return into


def _save_onnx(onnx_file: Path, into: Path, config: dict[str, Any], common: dict[str, Any]) -> None:
    import mlflow.onnx
    import onnx

    mlflow.onnx.save_model(
        onnx.load_model(str(onnx_file)),
        str(into),
        onnx_execution_providers=_provider_names(config),
        onnx_session_options=_session_options(config),
        save_as_external_data=False,
        **common,
    )


def _save_served(artifact_dir: Path, into: Path, common: dict[str, Any]) -> None:
    """A pyfunc model whose loader runs the artifact directory (its `data`) as measured."""
    import mlflow.pyfunc

    with_artifact = [artifact_dir / n for n in (ONNX_ARTIFACT, VARIANT_FILE, OUTPUT_EXAMPLE_FILE)]
    staged = into.parent / "served-artifact"
    staged.mkdir(parents=True, exist_ok=True)
    for file in with_artifact:
        if file.is_file():
            shutil.copyfile(file, staged / file.name)
    mlflow.pyfunc.save_model(
        str(into),
        loader_module=SERVING_LOADER,
        data_path=str(staged),
        code_paths=[_package_directory("autotune"), _package_directory("workers")],
        **common,
    )


def _package_directory(name: str) -> str:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations
    return str(next(iter(spec.submodule_search_locations)))


def _config(artifact_dir: Path) -> dict[str, Any]:
    variant = artifact_dir / VARIANT_FILE
    config: dict[str, Any] = json.loads(variant.read_text())["config"] if variant.is_file() else {}
    return config


def _pip_requirements(packages: tuple[str, ...]) -> list[str]:
    """What the model needs, pinned to the versions installed here. Given, so that MLflow
    does not infer them by loading the model in a subprocess (seconds per registration)."""
    found = (installed_distribution(name) for name in dict.fromkeys(packages))
    return [f"{distribution}=={version}" for distribution, version in filter(None, found)]


def _session_options(config: dict[str, Any]) -> dict[str, Any]:
    """What the onnx flavour sets on its onnxruntime session: the trial's threads and graph
    level."""
    import onnxruntime

    level = ORT_GRAPH_LEVELS[str(config.get("runtime.graph_opt", "all"))]
    options: dict[str, Any] = {
        "inter_op_num_threads": 1,
        "graph_optimization_level": int(getattr(onnxruntime.GraphOptimizationLevel, level)),
    }
    if "runtime.threads" in config:
        options["intra_op_num_threads"] = int(config["runtime.threads"])
    return options


def _example_and_signature(artifact_dir: Path) -> tuple[Any, Any]:
    """The export's input example (each input by name) and the signature MLflow infers from it
    and the outputs the export recorded; (None, None) where the export wrote no example."""
    import numpy as np
    from mlflow.models import infer_signature

    inputs, outputs = artifact_dir / INPUT_EXAMPLE_FILE, artifact_dir / OUTPUT_EXAMPLE_FILE
    if not (inputs.is_file() and outputs.is_file()):
        return None, None
    with np.load(inputs, allow_pickle=False) as fed, np.load(outputs, allow_pickle=False) as out:
        example = {name: fed[name] for name in fed.files}
        return example, infer_signature(example, {name: out[name] for name in out.files})


def _provider_names(config: dict[str, Any]) -> list[str]:
    """ONNX Runtime's names of the configuration's provider chain, most preferred first (the
    onnx flavour takes names only; a session of autotune's gets each provider's options)."""
    provider = PROVIDERS[str(config.get("runtime.provider", "cpu"))]
    return [name for name, _ in provider.chain()]
