"""The tuned artifact as an MLflow model.

An ONNX artifact becomes MLflow's `onnx` flavour: `mlflow.pyfunc.load_model("models:/NAME@tuned")`
runs it with the measured threads, graph optimization level and provider, with an input
example and the signature MLflow infers from it; the measured configuration is in its
metadata and `variant.json` beside it; `model.onnx` is the measured file, byte for byte. A
torch artifact (pruned safetensors weights and the recipe that rebuilds the variant) stays as
its files: MLflow's pytorch flavour would pickle the module, and `autotune.load` rebuilds it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any


def model_directory(artifact_dir: Path, into: Path) -> Path:
    """The directory to log and register for `artifact_dir`: an MLflow onnx model written
    into `into`, or `artifact_dir` itself where the artifact is not ONNX."""
    import mlflow.onnx
    import onnx

    from workers.runner import ONNX_ARTIFACT, VARIANT_FILE

    onnx_file = artifact_dir / ONNX_ARTIFACT
    if not onnx_file.is_file():
        return artifact_dir

    config = _config(artifact_dir)
    example, signature = _example_and_signature(artifact_dir, onnx_file)
    mlflow.onnx.save_model(
        onnx.load_model(str(onnx_file)),
        str(into),
        input_example=example,
        signature=signature,
        onnx_execution_providers=_providers(config),
        onnx_session_options=_session_options(config),
        metadata={"autotune_config": config},
        save_as_external_data=False,
        pip_requirements=_pip_requirements(),
    )
    shutil.copyfile(onnx_file, into / ONNX_ARTIFACT)  # the file that was measured
    if (artifact_dir / VARIANT_FILE).is_file():
        shutil.copyfile(artifact_dir / VARIANT_FILE, into / VARIANT_FILE)
    return into


def _config(artifact_dir: Path) -> dict[str, Any]:
    from workers.runner import VARIANT_FILE

    variant = artifact_dir / VARIANT_FILE
    config: dict[str, Any] = json.loads(variant.read_text())["config"] if variant.is_file() else {}
    return config


def _pip_requirements() -> list[str]:
    """What the pyfunc needs, pinned to the versions installed here. Given, so that MLflow
    does not infer them by loading the model in a subprocess (seconds per registration)."""
    from workers.runner import installed_distribution

    found = (installed_distribution(name) for name in ("onnx", "onnxruntime", "numpy"))
    return [f"{distribution}=={version}" for distribution, version in filter(None, found)]


def _providers(config: dict[str, Any]) -> list[str]:
    from workers.ort_session import ORT_PROVIDERS

    return list(ORT_PROVIDERS[str(config.get("runtime.provider", "cpu"))])


def _session_options(config: dict[str, Any]) -> dict[str, Any]:
    """What the pyfunc sets on its onnxruntime session: the trial's threads and graph level
    (OpenVINO's trials are run by onnxruntime here, at the same thread count)."""
    import onnxruntime

    from workers.ort_session import ORT_GRAPH_LEVELS

    level = ORT_GRAPH_LEVELS[str(config.get("runtime.graph_opt", "all"))]
    options: dict[str, Any] = {
        "inter_op_num_threads": 1,
        "graph_optimization_level": int(getattr(onnxruntime.GraphOptimizationLevel, level)),
    }
    if "runtime.threads" in config:
        options["intra_op_num_threads"] = int(config["runtime.threads"])
    return options


def _example_and_signature(artifact_dir: Path, onnx_file: Path) -> tuple[Any, Any]:
    """The export's evaluation inputs as the model's feed (each input by name, in its type),
    and the signature MLflow infers from one run of the model on them; (None, None) where the
    export wrote no example."""
    import numpy as np
    from mlflow.models import infer_signature

    from workers.feeds import feed
    from workers.ort_session import OnnxRuntimeSession
    from workers.runner import INPUT_EXAMPLE_FILE

    path = artifact_dir / INPUT_EXAMPLE_FILE
    if not path.is_file():
        return None, None
    inputs = np.load(path, allow_pickle=False)
    session = OnnxRuntimeSession(onnx_file.read_bytes(), threads=1)
    fed = feed(inputs, session.inputs)
    outputs = session.run(inputs)
    names = outputs.dtype.names
    if names is None:
        return fed, infer_signature(fed, {session.output_names[0]: outputs})
    return fed, infer_signature(fed, {name: outputs[name] for name in names})
