"""What an exported artifact directory holds, by name, and the software that made it: read by
the data plane that writes and loads artifacts and by the control plane that registers them."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import platform
from pathlib import Path
from typing import Any

from autotune.core.contract import ArtifactInfo
from autotune.core.knobs import ENGINES
from autotune.core.model_files import file_sha256

ONNX_ARTIFACT = "model.onnx"
WEIGHTS_ARTIFACT = "model.safetensors"
VARIANT_FILE = "variant.json"
# A few evaluation inputs beside an ONNX artifact, fed by input name, and the outputs the
# measured session gave for them: the registered model's input example and signature. A
# model whose inputs fix the batch size gets one batch of that size instead.
INPUT_EXAMPLE_FILE = "input_example.npz"
OUTPUT_EXAMPLE_FILE = "output_example.npz"
INPUT_EXAMPLE_SAMPLES = 2


def software_versions() -> dict[str, str]:
    """The versions of Python, numpy and every registered engine's software that this process
    can import (a package installed but hidden, or failing to import, is not recorded: it
    cannot have made a result, and the versions are part of what a result is reused by)."""
    versions = {"python": platform.python_version()}
    names = ["numpy", *(name for engine in ENGINES.values() for name in engine.software)]
    for name in dict.fromkeys(names):
        installed = installed_distribution(name)
        if installed is not None and importable(name):
            versions[name] = installed[1]
    return versions


def importable(package: str) -> bool:
    """Whether `package` imports in this process."""
    try:
        importlib.import_module(package)
    except Exception:  # a broken install raises what its own code raises, not only ImportError
        return False
    return True


# Where a package is published under several names, the names to look for.
_DISTRIBUTIONS = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu")}


def installed_distribution(package: str) -> tuple[str, str] | None:
    """The installed distribution that provides `package` and its version (onnxruntime-gpu
    provides onnxruntime), or None."""
    for distribution in _DISTRIBUTIONS.get(package, (package,)):
        try:
            return distribution, importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def previous_export(
    directory: Path, config: dict[str, Any], model_sha256: str
) -> ArtifactInfo | None:
    """The artifact an earlier export of this configuration of this model left whole in
    `directory` (its description is written last), or None."""
    try:
        description = json.loads((directory / VARIANT_FILE).read_text())
    except (OSError, ValueError):
        return None
    if description.get("config") != config or description.get("model_sha256") != model_sha256:
        return None
    onnx, weights = directory / ONNX_ARTIFACT, directory / WEIGHTS_ARTIFACT
    if onnx.is_file():
        return ArtifactInfo(path=str(onnx), format="onnx", sha256=file_sha256(onnx))
    if weights.is_file():
        return ArtifactInfo(path=str(weights), format="safetensors", sha256=file_sha256(weights))
    return None
